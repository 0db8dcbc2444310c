"""``Plane.read_last``: the head and a world's newest entries in one wave when they are hot
and whole, else through a stitched read -- always what ``read_range`` reads of the same
heights, on every engine, with chunked and cold tails and damaged entries."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from persistence import kv
from persistence.errors import DamagedJournalEntry, Validation, WorldNotFound
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import CHUNK_SIZE, WorldKeys
from persistence.kv import Engine
from persistence.plane import Plane
from persistence.protocols.journal import ROWS_PER_READ
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.segments.workload import snapshot_now


def last_by_range(plane: Plane, u: UniverseId, w: WorldId, limit: int) -> list[tuple[int, bytes]]:
    head = plane.head(u, w)
    first = max(1, head - limit + 1)
    return plane.read_range(u, w, first, head - first + 1) if head >= first else []


def flip_entry(plane: Plane, u: UniverseId, w: WorldId, height: int) -> None:
    """Flip a bit of the stored value of entry ``height`` (stored whole)."""
    key = WorldKeys(u, w).entry_chunk(height, 0, 1)

    async def flip(tr: kv.Transaction) -> None:
        value = await tr.get(key)
        assert value is not None
        tr.set(key, bytes([value[0] ^ 1]) + value[1:])

    kv.run(plane.engine, flip)


def test_the_last_entries_are_what_read_range_reads(plane: Plane, universe: UniverseId) -> None:
    rng = random.Random(5)
    for length in (0, 1, 2, 5, 255, 256, 257, 300):
        world = WorldId.new()
        plane.create_world(universe, world)
        entries = [rng.randbytes(rng.randrange(0, 64)) for _ in range(length)]
        for start in range(0, length, 100):
            plane.append_batch(universe, world, start, entries[start : start + 100])
        for limit in (0, 1, 2, 5, ROWS_PER_READ, ROWS_PER_READ + 1, 256, 400):
            head, rows = plane.read_last(universe, world, limit)
            assert head == length
            assert rows == last_by_range(plane, universe, world, limit), (length, limit)
            assert len(rows) == min(limit, length)


def test_a_chunked_entry_in_the_tail_is_read_whole(plane: Plane, universe: UniverseId) -> None:
    world = WorldId.new()
    plane.create_world(universe, world)
    big = random.Random(3).randbytes(2 * CHUNK_SIZE + 7)
    plane.append_batch(universe, world, 0, [b"a", big, b"c"])
    assert plane.read_last(universe, world, 3) == (3, [(1, b"a"), (2, big), (3, b"c")])
    assert plane.read_last(universe, world, 2) == (3, [(2, big), (3, b"c")])
    assert plane.read_last(universe, world, 1) == (3, [(3, b"c")])


def test_a_tail_gone_cold_is_read_from_its_segments(engine: Engine, tmp_path: Path) -> None:
    plane = open_plane(engine, LocalObjectStore(tmp_path))
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"e%d" % n for n in range(1, 41)])
    snapshot_now(plane, u, w, promote=True)  # a baseline at 41: below it may go cold
    Exporter(plane, ExportConfig(enabled=True, target_entries=10)).export_all(u, w)
    end = plane.list_segments(u, w)[-1].end
    head = plane.head(u, w)
    assert 30 <= end < head
    for limit in (1, head - end, head - end + 1, 30, head, 100):  # hot, and cold below
        assert plane.read_last(u, w, limit) == (head, last_by_range(plane, u, w, limit))


def test_a_damaged_hot_key_left_in_a_segment_is_read_from_the_segment(
    engine: Engine, tmp_path: Path
) -> None:
    """An export that indexed a segment of the whole journal (a cold horizon at the head) and
    crashed before deleting its hot keys: a damaged one of them is read from the segment,
    as read_range reads it."""
    injector = FaultInjector()
    plane = open_plane(FaultyEngine(engine, injector), LocalObjectStore(tmp_path), hooks=injector)
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"e%d" % n for n in range(1, 21)])
    plane.set_cold_horizon(u, w, 20)
    injector.crash_at("export.after_index", 1)
    with pytest.raises(SimulatedCrash):
        Exporter(plane, ExportConfig(enabled=True, target_entries=100)).export_all(u, w)
    assert [(s.start, s.end) for s in plane.list_segments(u, w)] == [(1, 20)]
    flip_entry(plane, u, w, 20)
    assert plane.read_range(u, w, 20, 1) == [(20, b"e20")]
    assert plane.read_last(u, w, 1) == (20, [(20, b"e20")])
    assert plane.read_last(u, w, 3) == (20, [(18, b"e18"), (19, b"e19"), (20, b"e20")])


def test_a_damaged_entry_in_the_tail_is_damage(plane: Plane, universe: UniverseId) -> None:
    world = WorldId.new()
    plane.create_world(universe, world)
    plane.append_batch(universe, world, 0, [b"one", b"two", b"three"])
    flip_entry(plane, universe, world, 2)
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_last(universe, world, 2)
    assert (err.value.world, err.value.height) == (str(world), 2)
    assert plane.read_last(universe, world, 1) == (3, [(3, b"three")])


def test_bad_calls_name_the_field(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    with pytest.raises(WorldNotFound):
        plane.read_last(universe, WorldId.new(), 1)
    with pytest.raises(WorldNotFound):
        plane.read_last(universe, WorldId.new(), 0)
    for limit in (-1, 2**31, "1", True, 1.0, None):
        with pytest.raises(Validation) as err:
            plane.read_last(universe, world, limit)  # type: ignore[arg-type]
        assert err.value.field == "limit"
    with pytest.raises(Validation) as err:
        plane.read_last("not an id", world, 1)  # type: ignore[arg-type]
    assert err.value.field == "universe"


def test_the_async_door_reads_the_same(universe: UniverseId) -> None:
    import asyncio

    from backends.kv.memory import MemoryEngine
    from persistence.plane import AsyncPlane

    engine = MemoryEngine()
    plane = Plane(engine, MemoryObjectStore())
    world = WorldId.new()
    plane.create_world(universe, world)
    plane.append_batch(universe, world, 0, [b"x", b"y"])

    async def main() -> tuple[int, list[tuple[int, bytes]]]:
        door = AsyncPlane(engine, MemoryObjectStore())
        return await door.read_last(universe, world, 5)

    assert asyncio.run(main()) == (2, [(1, b"x"), (2, b"y")])
