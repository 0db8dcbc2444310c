"""The segment index: the authoritative list of a world's cold segments (keyed by end height)."""

from __future__ import annotations

from persistence import kv
from persistence.errors import Conflict
from persistence.ids import WorldId
from persistence.keyspace import UniverseKeys
from persistence.records import SegmentIndexRecord, decode_record


class SegmentOverlap(Conflict):
    """A segment record overlaps, or differs from, one already indexed."""


def _decode(value: bytes) -> SegmentIndexRecord:
    return decode_record(SegmentIndexRecord, value, "segment index record")


def read_segments(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, from_height: int = 1, limit: int = 0
) -> list[SegmentIndexRecord]:
    """Segments of ``world`` ending at or after ``from_height``, in height order."""
    rows = tr.get_range(*keys.segment_range(world, from_height), limit=limit)
    return [_decode(value) for _, value in rows]


def last_segment(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId
) -> SegmentIndexRecord | None:
    """The highest segment of ``world``, if any."""
    rows = tr.get_range(*keys.segment_range(world), limit=1, reverse=True)
    return _decode(rows[0][1]) if rows else None


@kv.transactional
def put_segment(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, record: SegmentIndexRecord
) -> bool:
    """Index ``record``; ``False`` if exactly this record is already indexed. A record that
    overlaps an indexed segment, or leaves a gap after the last one, is ``SegmentOverlap``."""
    existing = tr.get(keys.segment(world, record.end))
    if existing is not None:
        if _decode(existing) == record:
            return False
        raise SegmentOverlap(f"world {world}: a different segment ends at {record.end}")
    last = last_segment(tr, keys, world)
    expected_start = 1 if last is None else last.end + 1
    if record.start != expected_start:
        raise SegmentOverlap(
            f"world {world}: segment {record.start}-{record.end} does not continue the index "
            f"(next start is {expected_start})"
        )
    tr.set(keys.segment(world, record.end), record.to_cbor())
    return True


@kv.transactional
def list_segments(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, from_height: int = 1
) -> list[SegmentIndexRecord]:
    """Segments of ``world`` ending at or after ``from_height``, in height order."""
    return read_segments(tr, keys, world, from_height)
