"""The snapshot reads of :mod:`aosp.fsck` (pages of keys, a world's records, the first key
of a range: each one snapshot read, so fsck never writes and never conflicts), and whether
a universe exists."""

from __future__ import annotations

from persistence import kv
from persistence.futures import drive
from persistence.ids import UniverseId
from persistence.inbox_records import InboxCursor
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane
from persistence.records import decode_record


@kv.transactional
async def range_page(
    tr: kv.Transaction, begin: bytes, end: bytes, limit: int
) -> list[tuple[bytes, bytes]]:
    return await tr.get_range(begin, end, limit=limit, snapshot=True)


@kv.transactional
async def cas_page(
    tr: kv.Transaction, keys: UniverseKeys, begin: bytes, limit: int
) -> list[tuple[bytes, bytes]]:
    _, end = keys.cas_meta_range()
    return await tr.get_range(begin, end, limit=limit, snapshot=True)


@kv.transactional
async def world_records(
    tr: kv.Transaction, keys: WorldKeys
) -> tuple[list[tuple[bytes, bytes]], bytes | None, bytes | None]:
    """The snapshot index, export marker and inbox cursor of a world (one snapshot read)."""
    return (
        await tr.get_range(*keys.snapshots(), snapshot=True),
        await tr.get(keys.export_marker(), snapshot=True),
        await tr.get(keys.inbox_cursor(), snapshot=True),
    )


@kv.transactional
async def first_key(tr: kv.Transaction, begin: bytes, end: bytes) -> bytes | None:
    rows = await tr.get_range(begin, end, limit=1, snapshot=True)
    return rows[0][0] if rows else None


def universe_exists(plane: Plane, universe: UniverseId) -> bool:
    """Whether the store holds anything of ``universe`` (a world, a CAS body, a pin): what
    ``Plane.universes`` lists."""
    return drive(first_key(plane.engine, *UniverseKeys(universe).all())) is not None


@kv.transactional
async def pending_unmarked(tr: kv.Transaction, keys: WorldKeys) -> bool:
    """Whether the world has an item after its cursor but no ready mark, read in one
    snapshot: an enqueue writes its item and the mark together, and a drain clears the mark
    only when no item follows its new cursor, so the two always agree in one snapshot."""
    raw = await tr.get(keys.inbox_cursor(), snapshot=True)
    cursor = None if raw is None else decode_record(InboxCursor, raw, "inbox cursor").seq
    pending = await tr.get_range(*keys.inbox_after(cursor), limit=1, snapshot=True)
    return bool(pending) and await tr.get(keys.ready(), snapshot=True) is None


@kv.transactional
async def inbox_page(
    tr: kv.Transaction, keys: WorldKeys, begin: bytes, limit: int
) -> list[tuple[bytes, bytes]]:
    _, end = keys.inbox_after(None)
    return await tr.get_range(begin, end, limit=limit, snapshot=True)


@kv.transactional
async def log_queue(
    tr: kv.Transaction, keys: UniverseKeys, limit: int
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """Up to ``limit`` records queued for a universe log position and the queue's counter,
    in one snapshot: every transaction that changes the one changes the other."""
    rows = tr.get_range(*keys.log_queue(), limit=limit, snapshot=True)
    counter = tr.get(keys.log_queued(), snapshot=True)
    return await rows, await counter
