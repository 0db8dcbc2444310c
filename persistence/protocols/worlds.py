"""World creation and the store's layout version."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Final, Literal

from persistence import kv
from persistence.errors import (
    CorruptRecord,
    HandleTaken,
    StoreFormatError,
    WorldExists,
    WorldNotFound,
)
from persistence.fdbtuple import unpack
from persistence.ids import UniverseId, WorldId
from persistence.journal_records import JOURNAL_HEAD
from persistence.keyspace import (
    LAYOUT_KEY,
    LAYOUT_VERSION,
    READABLE_LAYOUTS,
    UniverseKeys,
    WorldKeys,
    universes_range,
)
from persistence.records import LayoutRecord, SnapshotRecord, UniverseInfo, WorldMeta, decode_record


@kv.transactional
async def ensure_layout(tr: kv.Transaction, create: bool = True) -> int | None:
    """The store's layout version, recorded in a new store (:data:`LAYOUT_VERSION`); a
    store of a layout this software does not read is ``StoreFormatError``. A store without
    the record must be empty, else it is damaged (``StoreFormatError``: its data's form is
    unknown, and writing the record would hide that). Without ``create`` (reading tools)
    nothing is written: an empty store's layout is ``None``, not known yet."""
    raw = await tr.get(LAYOUT_KEY)
    if raw is None:
        if await tr.get_range(b"", b"\xff", limit=1, snapshot=True):
            raise StoreFormatError(
                "the store holds data but no layout record: damaged (its layout row was "
                "deleted, or another program wrote it); left untouched"
            )
        if not create:
            return None
        tr.set(LAYOUT_KEY, LayoutRecord(LAYOUT_VERSION).to_cbor())
        return LAYOUT_VERSION
    return _readable(raw)


@kv.transactional
async def read_layout(tr: kv.Transaction) -> int | None:
    """The store's layout version; ``None`` if it has no layout record (yet)."""
    raw = await tr.get(LAYOUT_KEY, snapshot=True)
    return None if raw is None else _readable(raw)


def _readable(raw: bytes) -> int:
    """The layout version recorded as ``raw``; ``StoreFormatError`` unless this software
    reads that layout."""
    version = decode_record(LayoutRecord, raw, "layout record").version
    if version > LAYOUT_VERSION:
        raise StoreFormatError(
            f"store keyspace layout {version} is newer than this software supports "
            f"({LAYOUT_VERSION}); upgrade aos-persistence"
        )
    if version not in READABLE_LAYOUTS:
        raise StoreFormatError(
            f"store keyspace layout {version} was written by a development version of "
            f"aos-persistence; this one reads layouts "
            f"{', '.join(map(str, READABLE_LAYOUTS[:-1]))} and {READABLE_LAYOUTS[-1]} only "
            f"(no migration)"
        )
    return version


@kv.transactional
async def read_meta(tr: kv.Transaction, keys: WorldKeys) -> WorldMeta:
    """The world's metadata; ``NotFound`` if the world does not exist."""
    raw = await tr.get(keys.meta(), snapshot=True)
    if raw is None:
        raise WorldNotFound(keys.universe, keys.world)
    return decode_record(WorldMeta, raw, "world meta")


@kv.transactional
async def world_exists(tr: kv.Transaction, keys: WorldKeys) -> bool:
    """Whether the world has been created (its meta never changes once written)."""
    return await tr.get(keys.meta(), snapshot=True) is not None


@kv.transactional
async def create_world(
    tr: kv.Transaction, keys: WorldKeys, meta: WorldMeta, genesis: SnapshotRecord
) -> bool:
    """Write meta, an empty journal head, the genesis snapshot and the active baseline
    atomically, and the world's handle in the universe's index of handles. ``False`` if
    this exact world already exists (a retried creation); ``HandleTaken`` if another world
    of the universe has the handle. Meta and handle are read in one wave."""
    universe = UniverseKeys(keys.universe)
    wanted = [keys.meta()] if meta.handle is None else [keys.meta(), universe.handle(meta.handle)]
    existing, *named = await tr.get_many(wanted)
    if existing is not None:
        if decode_record(WorldMeta, existing, "world meta") == meta:
            return False
        raise WorldExists(f"world {keys.world} already exists in universe {keys.universe}")
    if named and named[0] is not None and meta.handle is not None:
        raise HandleTaken(meta.handle, str(handle_world(named[0])), str(keys.universe))
    await write_world(tr, keys, meta, genesis)
    return True


def handle_world(raw: bytes) -> WorldId:
    """The world a handle's index entry names (its 16-byte id)."""
    if len(raw) != 16:
        raise CorruptRecord("handle index entry", f"{len(raw)} bytes, not a 16-byte world id")
    return WorldId(uuid.UUID(bytes=raw))


@kv.transactional
async def handles_from(
    tr: kv.Transaction, universe: UniverseId, prefix: str, after: str | None, limit: int
) -> list[tuple[str, WorldId]]:
    """Up to ``limit`` handles of the universe's index that start with ``prefix`` (after
    ``after``), with their worlds, in handle order (one snapshot range read)."""
    keys = UniverseKeys(universe)
    begin, end = keys.handles(prefix)
    if after is not None:
        begin = max(begin, keys.handle(after) + b"\x00")
    rows = await tr.get_range(begin, end, limit=limit, snapshot=True)
    start = len(keys.handles()[0]) - 1
    out = []
    for key, raw in rows:
        handle = unpack(key, start)[0]
        if not isinstance(handle, str):
            raise CorruptRecord("handle index entry", f"key {key.hex()} does not end with text")
        out.append((handle, handle_world(raw)))
    return out


@kv.transactional
async def world_of_handle(tr: kv.Transaction, universe: UniverseId, handle: str) -> WorldId | None:
    """The world of ``universe`` whose handle is ``handle``; ``None`` if none has it (or its
    world was created before handles were indexed)."""
    raw = await tr.get(UniverseKeys(universe).handle(handle), snapshot=True)
    return None if raw is None else handle_world(raw)


async def write_world(
    tr: kv.Transaction,
    keys: WorldKeys,
    meta: WorldMeta,
    genesis: SnapshotRecord,
    *,
    universe_info: bytes | Literal["unread"] | None = "unread",
) -> None:
    """Write a new world (its meta read absent in ``tr``): meta, an empty journal head, the
    genesis snapshot and the active baseline, and the universe's info if it is new (read
    here unless the caller read it as ``universe_info``)."""
    universe = UniverseKeys(keys.universe)
    if universe_info == "unread":
        universe_info = await tr.get(universe.info())
    if universe_info is None:
        tr.set(universe.info(), UniverseInfo(meta.created_ns).to_cbor())
    tr.set(keys.meta(), meta.to_cbor())
    if meta.handle is not None:
        tr.set(universe.handle(meta.handle), keys.world.uuid.bytes)
    tr.set(keys.head(), JOURNAL_HEAD.encode(0))
    encoded = genesis.to_cbor()
    tr.set(keys.snapshot(genesis.height), encoded)
    tr.set(keys.baseline(), encoded)


SCAN_SECONDS: Final = 1.0
"""How long one transaction of a skip scan reads."""


def _id_at(key: bytes, position: int) -> uuid.UUID:
    elements = unpack(key, count=position + 1)
    element = elements[position] if len(elements) > position else None
    if not isinstance(element, uuid.UUID):
        raise StoreFormatError(f"key {key!r} has no id at tuple position {position}")
    return element


async def _skip_scan(
    tr: kv.Transaction,
    begin: bytes,
    end: bytes,
    position: int,
    past: Callable[[uuid.UUID], bytes],
    limit: int,
) -> list[uuid.UUID]:
    """Up to ``limit`` distinct ids at tuple ``position`` of the keys in ``begin..end``: one
    single-key snapshot read per id, then a jump to ``past(id)``, the end of its range. The
    scan also stops after :data:`SCAN_SECONDS` (with at least one id), far inside
    FoundationDB's five seconds; the caller goes on from the last id in a new transaction."""
    found: list[uuid.UUID] = []
    deadline = time.monotonic() + SCAN_SECONDS
    while len(found) < limit and not (found and time.monotonic() > deadline):
        rows = await tr.get_range(begin, end, limit=1, snapshot=True)
        if not rows:
            break
        found.append(_id_at(rows[0][0], position))
        begin = past(found[-1])
    return found


@kv.transactional
async def list_universes(
    tr: kv.Transaction, after: UniverseId | None, limit: int
) -> list[UniverseId]:
    """Up to ``limit`` universes after ``after``, in key order (a skip scan)."""
    begin, end = universes_range()
    if after is not None:
        begin = UniverseKeys(after).all()[1]

    def past(id: uuid.UUID) -> bytes:
        return UniverseKeys(UniverseId(id)).all()[1]

    return [UniverseId(u) for u in await _skip_scan(tr, begin, end, 1, past, limit)]


@kv.transactional
async def list_worlds(
    tr: kv.Transaction, universe: UniverseKeys, after: WorldId | None, limit: int
) -> list[WorldId]:
    """Up to ``limit`` worlds of ``universe`` after ``after``, in key order (a skip scan)."""
    begin, end = universe.worlds_range()
    if after is not None:
        begin = universe.world(after).all()[1]

    def past(id: uuid.UUID) -> bytes:
        return universe.world(WorldId(id)).all()[1]

    return [WorldId(w) for w in await _skip_scan(tr, begin, end, 3, past, limit)]
