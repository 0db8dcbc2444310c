"""What an operator watches, read without a write or a conflict: each world's inbox backlog
and how far its drain lags, the hot journal above its last segment, its export marker and
compaction marks; per universe, the worlds with pending work and the CAS bodies awaiting
deletion.

Every read is a snapshot read in a read-only transaction, so a status read never aborts a
writer and never writes. One world's figures are one consistent snapshot, read in two
waves (everything at once, then the pending items after the cursor just read); counts stop
at the caller's cap and say so. Pending items are counted by reading them (values too: the
KV interface has no key-only or counting read), so the cap bounds what a reading costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from persistence import kv
from persistence.errors import WorldNotFound
from persistence.ids import InboxSeq, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.protocols.compaction import decode_marks
from persistence.protocols.export import decode_marker
from persistence.protocols.inbox import read_cursor_record, read_ready, seq_of
from persistence.protocols.journal import decode_head
from persistence.protocols.log import log_position
from persistence.protocols.segment_index import decode
from persistence.records import SnapshotRecord, WorldMeta, decode_record
from persistence.segment_records import ExportMarker


@dataclass(frozen=True, slots=True)
class Count:
    """A count that stopped at a cap: ``value`` items, and whether there are more."""

    value: int
    capped: bool

    @classmethod
    def of(cls, rows: int, cap: int) -> Count:
        """``rows`` read with limit ``cap + 1``: at most ``cap`` counted, more said so."""
        return cls(min(rows, cap), rows > cap)

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


@dataclass(frozen=True, slots=True)
class WorldStatus:
    """One world's operational figures, from one snapshot."""

    handle: str | None
    head: int
    cursor: InboxSeq | None
    pending: Count
    """Inbox items after the cursor (the drain's backlog)."""
    oldest_pending: InboxSeq | None
    ready: bool
    """Whether the world's ready mark is set (a drain worker will find it)."""
    baseline: int
    cold_through: int
    """The last segment's end height (0: nothing exported)."""
    export: ExportMarker | None
    """The export in flight, if any."""
    consumed_marks: Count
    """Compaction marks written and not yet acted on."""
    oldest_mark_ns: int | None
    """When the oldest compaction mark was written (the compactor's clock)."""
    read_version: int
    """The snapshot's version (FoundationDB: about a million per second)."""

    @property
    def hot_entries(self) -> int:
        """Journal entries above the last segment, kept in the KV store."""
        return self.head - self.cold_through

    def pending_age_versions(self) -> int | None:
        """Versions between the oldest pending item's commit and this snapshot."""
        if self.oldest_pending is None:
            return None
        return max(0, self.read_version - int.from_bytes(self.oldest_pending.raw[:8], "big"))


@kv.transactional
async def world_status(tr: kv.Transaction, keys: WorldKeys, cap: int) -> WorldStatus:
    """The figures of the world of ``keys``, counts up to ``cap`` (``WorldNotFound`` if the
    world does not exist)."""
    universe = UniverseKeys(keys.universe)
    read_version = tr.get_read_version()
    values = tr.get_many(
        [
            keys.head(),
            keys.inbox_cursor(),
            universe.ready(keys.world),
            keys.baseline(),
            keys.export_marker(),
            keys.meta(),
        ],
        snapshot=True,
    )
    last_segment = tr.get_range(
        *universe.segment_range(keys.world), limit=1, reverse=True, snapshot=True
    )
    marks = tr.get_range(*keys.inbox_consumed_marks(), limit=cap + 1, snapshot=True)
    head_raw, cursor_raw, ready_raw, baseline_raw, marker_raw, meta_raw = await values
    head_record = decode_head(keys, head_raw)
    if meta_raw is None:
        raise WorldNotFound(keys.universe, keys.world)
    meta = decode_record(WorldMeta, meta_raw, f"meta of world {keys.world}")
    cursor = read_cursor_record(cursor_raw)
    after = None if cursor is None else cursor.seq
    pending = await tr.get_range(*keys.inbox_after(after), limit=cap + 1, snapshot=True)
    segment = await last_segment
    mark_rows = await marks
    baseline = (
        0
        if baseline_raw is None
        else decode_record(SnapshotRecord, baseline_raw, f"baseline of world {keys.world}").height
    )
    oldest_mark = decode_marks(keys, mark_rows[:1])
    return WorldStatus(
        handle=meta.handle,
        head=head_record.height,
        cursor=after,
        pending=Count.of(len(pending), cap),
        oldest_pending=seq_of(pending[0][0], keys) if pending else None,
        ready=ready_raw is not None,
        baseline=baseline,
        cold_through=decode(universe, keys.world, *segment[0]).end if segment else 0,
        export=decode_marker(marker_raw),
        consumed_marks=Count.of(len(mark_rows), cap),
        oldest_mark_ns=oldest_mark[0][0] if oldest_mark else None,
        read_version=await read_version,
    )


@dataclass(frozen=True, slots=True)
class UniverseStatus:
    """A universe's figures: worlds with pending work, CAS bodies awaiting deletion, the
    universe log's head and the records queued for a position."""

    ready_worlds: Count
    dooms: Count
    """CAS bodies a collector decided to delete and has not finished deleting."""
    pins: Count
    """Puts in flight (or abandoned, until their grace passes) pinning a body."""
    log_head: int
    """The universe log's last position."""
    log_queued: Count
    """Records of committed sequenced appends waiting for a log position (settles move
    them; some that stay name a writer that stopped between its append and its settle:
    ``Plane.settle_log``)."""


@kv.transactional
async def universe_status(tr: kv.Transaction, keys: UniverseKeys, cap: int) -> UniverseStatus:
    """The figures of the universe of ``keys``, counts up to ``cap``."""
    ready = tr.get_range(*keys.ready_range(), limit=cap + 1, snapshot=True)
    dooms = tr.get_range(*keys.cas_dooms(), limit=cap + 1, snapshot=True)
    pins = tr.get_range(*keys.cas_pins(), limit=cap + 1, snapshot=True)
    head = tr.get(keys.log_head(), snapshot=True)
    queued = tr.get_range(*keys.log_queue(), limit=cap + 1, snapshot=True)
    return UniverseStatus(
        ready_worlds=Count.of(len(await ready), cap),
        dooms=Count.of(len(await dooms), cap),
        pins=Count.of(len(await pins), cap),
        log_head=log_position(await head),
        log_queued=Count.of(len(await queued), cap),
    )


@kv.transactional
async def ready_worlds(tr: kv.Transaction, keys: UniverseKeys, limit: int) -> list[WorldId]:
    """Up to ``limit`` worlds of the universe with a ready mark (pending work: the busiest
    candidates), in mark order (snapshot reads, one page of the index)."""
    worlds, _ = await read_ready(tr, keys, *keys.ready_range())
    return worlds[:limit]
