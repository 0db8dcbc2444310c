"""Reading cold segments for stitched journal reads."""

from __future__ import annotations

from persistence.errors import NotFound, SegmentMissing
from persistence.ids import UniverseId, WorldId
from persistence.objects import ObjectStore
from persistence.protocols.segment_index import (
    SegmentRecordChecksumMismatch,
    SegmentRecordMismatch,
    check_record,
)
from persistence.segment_records import SegmentIndexRecord
from segments.format import SegmentHeader, SegmentReader


class ObjectStoreSegments:
    """Reads segment objects named by the index, verifying each completely.

    A segment is read to its end on every access, so its checksum is checked (against the
    object's trailer and the index record) before any entry of it is returned; memory stays
    bounded by the entries requested. A record that does not name its range's canonical
    object is refused before any object is opened: a damaged index never sends a read to
    another world's segment or outside the store."""

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
        """Entries ``first..last`` of ``record``'s segment (none when ``last < first``:
        the whole object is verified all the same)."""
        check_record(universe, world, record)
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
            raise SegmentRecordChecksumMismatch(
                key, record.byte_size, record.checksum.hex(), (reader.checksum or b"").hex()
            )
        if reader.size != record.byte_size:
            raise SegmentRecordMismatch(
                str(world),
                record.end,
                "byte_size",
                f"{record.byte_size}, the object {key} is {reader.size} bytes",
            )
        return out
