"""Protocol F's transactions: the export marker a world's exporter moves through its states,
the plan of the next cold range, and the indexing of an uploaded segment (the worker that
uploads and deletes: ``segments/export.py``, whose docstring states the protocol)."""

from __future__ import annotations

from dataclasses import dataclass

from persistence import kv
from persistence.errors import Conflict, Validation
from persistence.ids import WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.protocols import calls, journal, segment_index
from persistence.protocols.calls import Call
from persistence.protocols.segment_index import SegmentOverlap
from persistence.records import decode_record
from persistence.segment_records import ExportMarker, SegmentIndexRecord


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """The next range that may be exported (``end`` is an upper bound: the byte target
    may end the segment earlier)."""

    start: int
    end: int


async def _marker(tr: kv.Transaction, keys: WorldKeys) -> ExportMarker | None:
    return decode_marker(await tr.get(keys.export_marker()))


def decode_marker(raw: bytes | None) -> ExportMarker | None:
    """The export marker stored as ``raw`` (``None``: no export in flight)."""
    return None if raw is None else decode_record(ExportMarker, raw, "export marker")


@kv.transactional
async def read_marker(tr: kv.Transaction, keys: WorldKeys) -> ExportMarker | None:
    """The world's export marker, if an export is in flight."""
    return await _marker(tr, keys)


@kv.transactional
async def plan(
    tr: kv.Transaction, keys: WorldKeys, margin: int, min_entries: int, target_entries: int
) -> ExportPlan | None:
    """The next range of ``keys``' journal that may go cold: it starts after the last
    indexed segment and ends below the active baseline by more than ``margin`` (or at the
    cold horizon), at most ``target_entries`` long; ``None`` below ``min_entries``."""
    head = (await journal.read_head(tr, keys)).height
    last = await segment_index.last_segment(tr, UniverseKeys(keys.universe), keys.world)
    start = 1 if last is None else last.end + 1
    limit = min(head, await segment_index.exportable_through(tr, keys, margin))
    if limit - start + 1 < min_entries:
        return None
    return ExportPlan(start, min(limit, start + target_entries - 1))


@kv.transactional
async def last_segment(tr: kv.Transaction, keys: WorldKeys) -> SegmentIndexRecord | None:
    """The last indexed segment of ``keys``' world (a snapshot read)."""
    return await segment_index.last_segment(
        tr, UniverseKeys(keys.universe), keys.world, snapshot=True
    )


class ExportRaced(Conflict):
    """Another exporter moved the world's export marker first."""


@kv.transactional
async def transition(
    tr: kv.Transaction,
    keys: WorldKeys,
    call: Call,
    expected: ExportMarker | None,
    new: ExportMarker | None,
    index: SegmentIndexRecord | None = None,
    clear: tuple[int, int] | None = None,
) -> None:
    """Move the marker from ``expected`` to ``new`` (``None``: absent), optionally indexing
    a segment or clearing hot heights in the same transaction. A retry whose earlier
    attempt committed returns (its call record); a marker moved by another exporter is
    ``ExportRaced``, and so is a new ``copy_started`` marker whose range does not begin
    right after the last indexed segment (another exporter indexed it since the plan).
    A clear of hot heights commits without its own sync: lost in a machine crash, it is
    done again from the older marker."""
    if clear is not None:
        tr.relax_durability()
    opening = calls.begin(tr, keys, call)
    marker = tr.get(keys.export_marker())
    if await calls.replayed(opening) is not None:
        return
    current = decode_marker(await marker)
    if current == new:
        return
    if current != expected:
        raise ExportRaced(f"world {keys.world}: export marker {current}, expected {expected}")
    if expected is None and new is not None:
        last = await segment_index.last_segment(tr, UniverseKeys(keys.universe), keys.world)
        if new.start != (1 if last is None else last.end + 1):
            raise ExportRaced(
                f"world {keys.world}: planned from {new.start}, but segments end at "
                f"{0 if last is None else last.end}"
            )
    if index is not None:
        await put_segment(tr, UniverseKeys(keys.universe), keys.world, index)
    if clear is not None:
        tr.clear_range(*keys.entries_between(*clear))
    if new is None:
        tr.clear(keys.export_marker())
    else:
        tr.set(keys.export_marker(), new.to_cbor())
    calls.record(opening, "export")


@kv.transactional
async def put_segment(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, record: SegmentIndexRecord
) -> bool:
    """Index ``record``; ``False`` if exactly this record is already indexed.

    What export guarantees is checked here, in the indexing transaction: the world exists
    (``WorldNotFound``), the record names the canonical object of its range with a
    :data:`CHECKSUM_ALGORITHM` digest, ends at or below the head and below the active
    baseline or at or below the cold horizon (``Validation`` naming the field), and
    continues the index without gap or overlap (``SegmentOverlap``). The head, baseline and
    horizon are read without conflicts (all only move up, so an older value is only
    stricter): export's transitions stay out of
    the way of foreground appends. The object itself is checked by ``Plane.put_segment``
    before it calls this (export has just written and verified it)."""
    world_keys = WorldKeys(keys.universe, world)
    head = (await journal.read_head(tr, world_keys, snapshot=True)).height
    problem = segment_index.record_problem(keys.universe, world, record)
    if problem is not None:
        field, what = problem
        raise Validation(f"record.{field}", what)
    if record.end > head:
        raise Validation("record.end", f"{record.end} is above the journal head {head}")
    baseline = await segment_index.read_baseline_height(tr, world_keys)
    horizon = await segment_index.read_cold_horizon(tr, world_keys)
    if record.end >= baseline and record.end > horizon:
        raise Validation(
            "record.end",
            f"{record.end} is not below the active baseline {baseline} nor at or below the "
            f"cold horizon {horizon}: only history older than the baseline, or that the "
            "world's owner let go, may be cold",
        )
    key = keys.segment(world, record.end)
    existing = await tr.get(key)
    if existing is not None:
        if segment_index.decode(keys, world, key, existing) == record:
            return False
        raise SegmentOverlap(f"world {world}: a different segment ends at {record.end}")
    last = await segment_index.last_segment(tr, keys, world)
    expected_start = 1 if last is None else last.end + 1
    if record.start != expected_start:
        raise SegmentOverlap(
            f"world {world}: record.start: segment {record.start}-{record.end} does not "
            f"continue the index (next start is {expected_start})"
        )
    tr.set(key, record.to_cbor())
    return True
