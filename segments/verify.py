"""Checking a world's segments end to end, reporting each bad record: what fsck and
``aosp segments verify`` run. Reads only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from persistence.errors import Corruption, SegmentIndexCorruption
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId
from persistence.plane import Plane
from persistence.protocols.segment_index import audit
from persistence.segment_records import SegmentIndexRecord
from persistence.sizes import check_int
from segments.cold import ObjectStoreSegments
from segments.inputs import require, require_ids


@dataclass(frozen=True, slots=True)
class SegmentCheck:
    """One index record of a world, checked: the end height its key names, the record
    (``None`` if it does not decode), the first thing wrong with it (``None``: the record
    and its object agree in every field) and how many object bytes were read."""

    key_end: int
    record: SegmentIndexRecord | None
    error: Corruption | None
    bytes_read: int = 0

    @property
    def subject(self) -> str:
        """What a report names: the object key, or the index key when there is no record."""
        if self.record is None:
            return f"segment index record at end {self.key_end}"
        return self.record.object_key


def check_segments(
    plane: Plane, universe: UniverseId, world: WorldId, head: int
) -> Iterator[SegmentCheck]:
    """Every index record of ``world``: it decodes, its key is its end, it names the
    canonical object of its range with the one checksum algorithm, it continues the index
    without gap or overlap, it ends at or below ``head``, and its object exists and agrees
    with it in header, checksum and byte size. One check per record, bad or good; an index
    problem is reported without following the record to an object."""
    require(plane, Plane, "plane")
    require_ids(universe, world)
    check_int(head, "head", 0, MAX_HEIGHT)
    source = ObjectStoreSegments(plane.objects)
    for entry in audit(plane.engine, universe, world):
        record, error = entry.record, entry.error
        if record is None or error is not None:
            yield SegmentCheck(entry.key_end, record, error)
            continue
        if record.end > head:
            problem = f"segment {record.start}-{record.end} ends above the head {head}"
            yield SegmentCheck(
                entry.key_end, record, SegmentIndexCorruption(str(world), record.end, problem)
            )
            continue
        try:
            source.read(universe, world, record, 1, 0)  # reads and verifies the whole object
        except Corruption as exc:
            yield SegmentCheck(entry.key_end, record, exc)
        else:
            yield SegmentCheck(entry.key_end, record, None, record.byte_size)
