"""The plane's segment-index operations: indexing an uploaded segment (checked as export
guarantees it), the cold horizon a world's owner sets, and the index's listing."""

from __future__ import annotations

from persistence import kv
from persistence.errors import MissingDependency, Validation
from persistence.ids import UniverseId, WorldId, check_height
from persistence.keyspace import UniverseKeys
from persistence.plane.core import operation, world_keys
from persistence.plane.journal import JournalOperations
from persistence.protocols import export, journal, segment_index
from persistence.segment_records import ColdHorizon, SegmentIndexRecord


class SegmentOperations(JournalOperations):
    """The segment index: indexing, the cold horizon, listing."""

    @operation("segments.put")
    async def put_segment(
        self, universe: UniverseId, world: WorldId, record: SegmentIndexRecord
    ) -> None:
        """Index an uploaded segment, checked as export guarantees it: the world exists
        (``WorldNotFound``); the record names the canonical object of its range, ends at or
        below the head and below the active baseline (or at or below the cold horizon), and
        continues the index without gap or overlap (``Validation`` naming the field,
        ``SegmentOverlap``); the object exists (``SegmentMissing``) and its header,
        checksum and size are the record's."""
        world_keys(universe, world)  # ``Validation`` naming a malformed id
        if not isinstance(record, SegmentIndexRecord):
            raise Validation("record", f"a SegmentIndexRecord, not {type(record).__name__}")
        problem = segment_index.record_problem(universe, world, record)
        if problem is not None:
            raise Validation(f"record.{problem[0]}", problem[1])
        head = await self.head(universe, world)  # WorldNotFound before any object is read
        if record.end > head:
            raise Validation("record.end", f"{record.end} is above the journal head {head}")
        source = self.segments
        if source is None:
            raise MissingDependency(
                "put_segment verifies the segment object: open the plane with segments.open_plane"
            )
        try:  # reads and checks the object whole
            await self.blocking(lambda: source.read(universe, world, record, 1, 0))
        except (
            segment_index.SegmentRecordMismatch,
            segment_index.SegmentRecordChecksumMismatch,
        ) as exc:
            raise Validation(f"record.{exc.field}", str(exc)) from None
        await export.put_segment(self.engine, UniverseKeys(universe), world, record)

    @operation("segments.cold_horizon")
    async def set_cold_horizon(self, universe: UniverseId, world: WorldId, height: int) -> int:
        """Let export move heights ``1..height`` of ``world`` to cold segments whatever its
        active baseline: for worlds whose readers replay entries through :meth:`read_range`
        (which reads cold segments) rather than restoring from a baseline. The horizon only
        rises (a lower ``height`` leaves it); it cannot pass the head (``Validation``).
        Returns the horizon."""
        keys = world_keys(universe, world)
        check_height(height, "height")

        async def raise_horizon(tr: kv.Transaction) -> int:
            head = (await journal.read_head(tr, keys, snapshot=True)).height
            if height > head:
                raise Validation("height", f"{height} is above the journal head {head}")
            current = await segment_index.read_cold_horizon(tr, keys, snapshot=False)
            if height <= current:
                return current
            tr.set(keys.cold_horizon(), ColdHorizon(height).to_cbor())
            return height

        return await self.transact(raise_horizon)

    @operation("segments.list")
    async def list_segments(
        self, universe: UniverseId, world: WorldId, from_height: int = 1
    ) -> list[SegmentIndexRecord]:
        """Segments of ``world`` ending at or after ``from_height``, in height order
        (``WorldNotFound`` if the world does not exist)."""
        keys = world_keys(universe, world)
        check_height(from_height, "from_height")
        return await segment_index.list_segments(self.engine, keys, from_height)
