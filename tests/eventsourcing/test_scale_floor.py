"""The floor of ``aosp bench eventsourcing-scale`` does a save's least work, on the module's
keys: a save made with the ``fdb`` bindings alone is the module's entry at a gapless log
position, read back through the plane on a real cluster, and the floor's writer processes
leave a log with every position in place."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

import pytest

from aos_bench import eventsourcing_scale as scale
from aos_bench.fdb_raw import Raw
from aos_eventsourcing import codec
from backends.objects.memory import MemoryObjectStore
from persistence.ids import WorldId
from persistence.keyspace import UniverseKeys
from persistence.plane import Plane
from tests.fdb_cluster import FdbCluster, clear_keyspace


class _RunTwice(Raw):
    """Runs each transaction's body again after it committed, in a new transaction: what
    ``on_error`` does after a commit whose outcome was unknown (1021) but that landed."""

    def _run(self, body: Callable[[Any], None]) -> None:
        super()._run(body)
        super()._run(body)


def test_a_raw_save_is_the_modules_entry_at_the_next_log_position(
    fdb_cluster: FdbCluster,
) -> None:
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    plane = Plane(engine, MemoryObjectStore())  # a store of the current layout
    raw = Raw(engine)
    universe = UniverseKeys(scale.FLOOR_UNIVERSE)
    worlds = [WorldId.new() for _ in range(3)]
    entries = [codec.encode(version, "Topic", b"state", None) for version in (1, 2)]
    firsts = [raw.append_new(universe, universe.world(w), entries, ["Topic"] * 2) for w in worlds]
    assert firsts == [1, 3, 5]
    unlogged = WorldId.new()
    assert raw.append_new(universe, universe.world(unlogged), entries[:1], None) == 0
    try:
        assert plane.log_head(scale.FLOOR_UNIVERSE) == 6
        log = plane.read_log(scale.FLOOR_UNIVERSE, 1, 10)
        assert [(e.position, e.world, e.height, e.tag) for e in log] == [
            (2 * index + height, world, height, "Topic")
            for index, world in enumerate(worlds)
            for height in (1, 2)
        ]
        assert [e.entry for e in log] == entries * 3
        assert [codec.decode(e.entry).version for e in log] == [1, 2] * 3
        # the unlogged world's entry is stored, and has no position
        assert unlogged not in {e.world for e in log}
        assert plane.head(scale.FLOOR_UNIVERSE, unlogged) == 1
        # an attempt run again after its commit (as after an unknown commit result)
        # finds its entries in place: it writes nothing and the call gives the position
        # the committed attempt took
        again = _RunTwice(engine)
        retried = WorldId.new()
        assert again.append_new(universe, universe.world(retried), entries, ["Topic"] * 2) == 7
        assert plane.log_head(scale.FLOOR_UNIVERSE) == 8
        assert [e.world for e in plane.read_log(scale.FLOOR_UNIVERSE, 7, 10)] == [retried] * 2
        # a world whose head is elsewhere is not a new one
        with pytest.raises(RuntimeError, match="head 2, expected a new world"):
            raw.append_new(universe, universe.world(worlds[1]), entries[:1], ["Topic"])
        assert plane.log_head(scale.FLOOR_UNIVERSE) == 8
    finally:
        engine.close()


def test_the_floors_writer_processes_leave_every_log_position_in_place(
    fdb_cluster: FdbCluster,
) -> None:
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    plane = Plane(engine, MemoryObjectStore())
    env = {"AOSP_KV_URL": fdb_cluster.url, scale.FLOOR: "logged"}
    rate, _ = scale._round(scale._floor_saves, env, 2, 0.3)
    try:
        head = plane.log_head(scale.FLOOR_UNIVERSE)
        # each process's 10 warm-up saves and its timed ones, each with one position
        assert head == 20 + round(rate * 0.3)
        log = plane.read_log(scale.FLOOR_UNIVERSE, 1, head)
        assert [e.position for e in log] == list(range(1, head + 1))
        assert {e.height for e in log} == {1} and len({e.world for e in log}) == head
        assert {codec.decode(e.entry).version for e in log} == {1}
    finally:
        engine.close()
    assert not multiprocessing.active_children()
