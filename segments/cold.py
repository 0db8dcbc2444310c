"""Reading cold segments for stitched journal reads."""

from __future__ import annotations

from persistence.errors import NotFound, SegmentChecksumMismatch, SegmentMissing
from persistence.ids import UniverseId, WorldId
from persistence.objects import ObjectStore
from persistence.records import SegmentIndexRecord
from segments.format import SegmentHeader, SegmentReader


class ObjectStoreSegments:
    """Reads segment objects named by the index, verifying each completely.

    A segment is read to its end on every access, so its checksum is checked (against the
    object's trailer and the index record) before any entry of it is returned; memory stays
    bounded by the entries requested."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    def read(
        self,
        universe: UniverseId,
        world: WorldId,
        record: SegmentIndexRecord,
        first: int,
        last: int,
    ) -> list[tuple[int, bytes]]:
        """Entries ``first..last`` of ``record``'s segment."""
        key = record.object_key
        try:
            stream = self.objects.open(key)
        except NotFound:
            raise SegmentMissing(key) from None
        expect = SegmentHeader(universe, world, record.start, record.end)
        with stream:
            reader = SegmentReader(stream, key, expect=expect)
            out = [(h, e) for h, e in reader if first <= h <= last]
        if reader.checksum != record.checksum:
            raise SegmentChecksumMismatch(
                key, record.byte_size, record.checksum.hex(), (reader.checksum or b"").hex()
            )
        return out
