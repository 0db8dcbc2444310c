"""The segment index: the authoritative list of a world's cold segments (keyed by end height)."""

from __future__ import annotations

from persistence import fdbtuple, kv
from persistence.errors import Conflict, SegmentIndexCorruption
from persistence.ids import WorldId
from persistence.keyspace import UniverseKeys
from persistence.records import SegmentIndexRecord, decode_record


class SegmentOverlap(Conflict):
    """A segment record overlaps, or differs from, one already indexed."""


def _decode(keys: UniverseKeys, world: WorldId, key: bytes, value: bytes) -> SegmentIndexRecord:
    """The record stored under ``key``, which must be the key of its own end height."""
    record = decode_record(SegmentIndexRecord, value, "segment index record")
    if key != keys.segment(world, record.end):
        end = fdbtuple.unpack(key)[-1]
        raise SegmentIndexCorruption(
            str(world),
            end if isinstance(end, int) else -1,
            f"holds the record of segment {record.start}-{record.end}",
        )
    return record


def read_segments(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, from_height: int = 1, limit: int = 0
) -> list[SegmentIndexRecord]:
    """Segments of ``world`` ending at or after ``from_height``, in height order."""
    rows = tr.get_range(*keys.segment_range(world, from_height), limit=limit)
    return [_decode(keys, world, key, value) for key, value in rows]


def last_segment(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId
) -> SegmentIndexRecord | None:
    """The highest segment of ``world``, if any."""
    rows = tr.get_range(*keys.segment_range(world), limit=1, reverse=True)
    return _decode(keys, world, *rows[0]) if rows else None


@kv.transactional
def put_segment(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, record: SegmentIndexRecord
) -> bool:
    """Index ``record``; ``False`` if exactly this record is already indexed. A record that
    overlaps an indexed segment, or leaves a gap after the last one, is ``SegmentOverlap``."""
    key = keys.segment(world, record.end)
    existing = tr.get(key)
    if existing is not None:
        if _decode(keys, world, key, existing) == record:
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
