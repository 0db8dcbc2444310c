"""The segment index: the authoritative list of a world's cold segments (keyed by end height).

The index of a world tiles heights ``1..cold_through``: each record starts where the one
before it ended, its key names its own end height, and it names the canonical object of its
range. Every read of the index checks that much of what it returns (a record that breaks it
is :class:`~persistence.errors.SegmentIndexCorruption` naming the key), so a stitched read
can never be pointed at heights a record does not hold; :func:`audit` reports each bad
record of a world instead of stopping at the first, for fsck and ``segments verify``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from persistence import fdbtuple, kv
from persistence.errors import (
    Conflict,
    CorruptRecord,
    NotFound,
    SegmentChecksumMismatch,
    SegmentIndexCorruption,
    WorldNotFound,
)
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.records import SnapshotRecord, decode_record
from persistence.segment_records import ColdHorizon, SegmentIndexRecord

CHECKSUM_ALGORITHM: Final = "blake3"
"""The one checksum algorithm segments are written with (named in every index record)."""
DIGEST_SIZE: Final = 32
"""Bytes of a :data:`CHECKSUM_ALGORITHM` digest."""
AUDIT_PAGE: Final = 1_000
"""Index records :func:`audit` reads per transaction."""


class SegmentOverlap(Conflict):
    """A segment record overlaps, or differs from, one already indexed."""


class SegmentRecordMismatch(SegmentIndexCorruption):
    """An index record's ``field`` is wrong: not what export writes for its range (the
    object key, the checksum algorithm), or not what the segment object it names holds
    (its byte size) although that object verified against its own header and trailer."""

    def __init__(self, world: str, key_end: int, field: str, problem: str) -> None:
        super().__init__(world, key_end, f"{field}: {problem}")
        self.field = field


class SegmentRecordChecksumMismatch(SegmentChecksumMismatch):
    """The object verified against its own trailer, but the index record names another
    checksum."""

    field: Final = "checksum"


def object_key(universe: UniverseId, world: WorldId, start: int, end: int) -> str:
    """The canonical object key of a segment:
    ``segments/<universe>/<world>/<start>-<end>.log`` with 20-digit zero-padded heights,
    so listing order is height order."""
    return f"segments/{universe}/{world}/{start:020d}-{end:020d}.log"


def record_problem(
    universe: UniverseId, world: WorldId, record: SegmentIndexRecord
) -> tuple[str, str] | None:
    """``(field, problem)`` if ``record`` is not one export could have written for
    ``world`` of ``universe`` (its object key is not the canonical key of its range, or
    its checksum is not a :data:`CHECKSUM_ALGORITHM` digest); ``None`` if it is."""
    canonical = object_key(universe, world, record.start, record.end)
    if record.object_key != canonical:
        return "object_key", f"{record.object_key[:200]!r} is not the segment's key {canonical!r}"
    if record.checksum_algorithm != CHECKSUM_ALGORITHM:
        return (
            "checksum_algorithm",
            f"{record.checksum_algorithm[:64]!r}, segments are checksummed with "
            f"{CHECKSUM_ALGORITHM}",
        )
    if len(record.checksum) != DIGEST_SIZE:
        return "checksum", f"{len(record.checksum)} bytes, a {CHECKSUM_ALGORITHM} digest is 32"
    return None


def check_record(universe: UniverseId, world: WorldId, record: SegmentIndexRecord) -> None:
    """Raise ``SegmentIndexCorruption`` (naming the field) if :func:`record_problem`
    finds one: a stored record that fails it must not be followed to an object."""
    problem = record_problem(universe, world, record)
    if problem is not None:
        field, what = problem
        raise SegmentRecordMismatch(str(world), record.end, field, what)


def _key_end(key: bytes) -> int:
    """The end height an index key names (-1 if it names none)."""
    try:
        end = fdbtuple.unpack(key)[-1]
    except (ValueError, IndexError):
        return -1
    return end if isinstance(end, int) else -1


def decode(keys: UniverseKeys, world: WorldId, key: bytes, value: bytes) -> SegmentIndexRecord:
    """The record stored under ``key``: it decodes, names its own end height in its key and
    passes :func:`check_record`; else ``SegmentIndexCorruption`` naming the key."""
    try:
        record = decode_record(SegmentIndexRecord, value, "segment index record")
    except CorruptRecord as exc:
        raise SegmentIndexCorruption(str(world), _key_end(key), exc.problem) from None
    if key != keys.segment(world, record.end):
        raise SegmentIndexCorruption(
            str(world),
            _key_end(key),
            f"holds the record of segment {record.start}-{record.end}",
        )
    check_record(keys.universe, world, record)
    return record


def _tiling_problem(covered: int, record: SegmentIndexRecord) -> str | None:
    """Why ``record`` does not continue an index that covers ``1..covered``, if it does not."""
    if record.start > covered + 1:
        return (
            f"gap: heights {covered + 1}-{record.start - 1} are in no segment "
            f"(segment {record.start}-{record.end} follows coverage to {covered})"
        )
    if record.start <= covered:
        return (
            f"overlap: segment {record.start}-{record.end} starts inside coverage to "
            f"{covered} (heights {record.start}-{min(covered, record.end)} twice)"
        )
    return None


def _check_tiling(world: WorldId, covered: int, record: SegmentIndexRecord) -> None:
    problem = _tiling_problem(covered, record)
    if problem is not None:
        raise SegmentIndexCorruption(str(world), record.end, problem)


async def read_segments(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, from_height: int = 1, limit: int = 0
) -> list[SegmentIndexRecord]:
    """Segments of ``world`` ending at or after ``from_height``, in height order (at most
    ``limit``; 0: all). Each is checked alone and to continue the one before it (the
    record just below ``from_height`` is read for the first, in the same wave), so the
    result tiles."""
    begin, end = keys.segment_range(world)
    start = keys.segment(world, from_height) if from_height > 1 else begin
    rows_read = tr.get_range(start, end, limit=limit)
    # the first record must continue the one below it
    below_read = tr.get_range(begin, start, limit=1, reverse=True) if from_height > 1 else None
    rows = await rows_read
    below = [] if below_read is None else await below_read
    covered = decode(keys, world, *below[0]).end if rows and below else 0
    out = []
    for key, value in rows:
        record = decode(keys, world, key, value)
        _check_tiling(world, covered, record)
        out.append(record)
        covered = record.end
    return out


async def last_segment(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, *, snapshot: bool = False
) -> SegmentIndexRecord | None:
    """The highest segment of ``world``, if any."""
    rows = await tr.get_range(*keys.segment_range(world), limit=1, reverse=True, snapshot=snapshot)
    return decode(keys, world, *rows[0]) if rows else None


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One index record as :func:`audit` found it: the end height its key names, the record
    (``None`` if it does not decode) and what is wrong with it (``None``: nothing)."""

    key_end: int
    record: SegmentIndexRecord | None
    error: SegmentIndexCorruption | None


@kv.transactional
async def _index_page(
    tr: kv.Transaction, keys: UniverseKeys, world: WorldId, after: bytes | None, limit: int
) -> list[tuple[bytes, bytes]]:
    begin, end = keys.segment_range(world)
    return await tr.get_range(
        begin if after is None else after + b"\x00", end, limit=limit, snapshot=True
    )


def audit(
    engine: kv.Engine, universe: UniverseId, world: WorldId, page: int = AUDIT_PAGE
) -> Iterator[IndexEntry]:
    """Every index record of ``world`` in key order, each checked alone and to continue
    the records before it; a bad record is an entry with ``error`` set, never an exception,
    so a caller can report each one. A record after a gap carries the gap; coverage
    continues from every record that decodes (a bad one does not make its successors bad)."""
    keys = UniverseKeys(universe)
    covered, after = 0, None
    while rows := drive(_index_page(engine, keys, world, after, page)):
        for key, value in rows:
            key_end = _key_end(key)
            try:
                record = decode_record(SegmentIndexRecord, value, "segment index record")
            except CorruptRecord as exc:
                error = SegmentIndexCorruption(str(world), key_end, exc.problem)
                yield IndexEntry(key_end, None, error)
                covered = max(covered, key_end)
                continue
            try:
                decode(keys, world, key, value)
                _check_tiling(world, covered, record)
            except SegmentIndexCorruption as exc:
                yield IndexEntry(key_end, record, exc)
            else:
                yield IndexEntry(key_end, record, None)
            covered = max(covered, record.end)
        if len(rows) < page:
            break
        after = rows[-1][0]


async def read_baseline_height(tr: kv.Transaction, keys: WorldKeys) -> int:
    """The active baseline's height, read without a conflict: it never regresses, so a
    check against an older value is only stricter."""
    raw = await tr.get(keys.baseline(), snapshot=True)
    if raw is None:
        raise NotFound(f"world {keys.world} has no active baseline")
    return decode_record(SnapshotRecord, raw, f"baseline of world {keys.world}").height


async def read_cold_horizon(tr: kv.Transaction, keys: WorldKeys, *, snapshot: bool = True) -> int:
    """The height through which the world's owner lets export go without a baseline (0 if
    never set); by default read without a conflict: it only rises."""
    raw = await tr.get(keys.cold_horizon(), snapshot=snapshot)
    return 0 if raw is None else decode_record(ColdHorizon, raw, "cold horizon").height


async def exportable_through(tr: kv.Transaction, keys: WorldKeys, margin: int = 0) -> int:
    """The highest height a segment may end at (before the head's bound): below the active
    baseline by more than ``margin``, or at or below the cold horizon."""
    baseline = await read_baseline_height(tr, keys)
    return max(baseline - margin - 1, await read_cold_horizon(tr, keys))


@kv.transactional
async def list_segments(
    tr: kv.Transaction, keys: WorldKeys, from_height: int = 1
) -> list[SegmentIndexRecord]:
    """Segments of the world of ``keys`` ending at or after ``from_height``, in height order
    (checked as :func:`read_segments` checks them); ``WorldNotFound`` if the world does not
    exist (its meta is read in the same wave as the segments)."""
    meta = tr.get(keys.meta(), snapshot=True)
    records = await read_segments(tr, UniverseKeys(keys.universe), keys.world, from_height)
    if await meta is None:
        raise WorldNotFound(keys.universe, keys.world)
    return records
