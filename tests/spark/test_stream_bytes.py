"""``max_bytes_per_batch``: a micro-batch of ``aos_journal``'s stream admits at most that
many entry bytes, shared fairly between worlds, hot entries sized by what the engine holds
and heights in segments by an even share of their object (a real local SparkSession for
the stream itself)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from persistence import kv
from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from segments import open_plane
from segments.export import ExportConfig, Exporter
from spark_connectors.journal import HOT_ENTRY_ESTIMATE
from spark_connectors.log import LogStream
from spark_connectors.stream import JournalStream, WorldSizes, admit_bytes, heights_of
from tests.segments.workload import snapshot_now


class ListSizes:
    """:class:`EntrySizes` over a list: the test's side of the admission's contract."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def fit(self, taken: int, room: int, most: int) -> tuple[int, int]:
        count = used = 0
        for size in self.sizes[taken : taken + most]:
            if used + size > room:
                break
            count, used = count + 1, used + size
        return count, used


def admitted(sizes: dict[str, list[int]], budget: int, turn: int = 0) -> dict[str, int]:
    waiting = {key: len(values) for key, values in sizes.items()}
    lists = {key: ListSizes(values) for key, values in sizes.items()}
    return admit_bytes(waiting, lists, budget, turn)


def test_bytes_are_shared_fairly_and_never_exceeded() -> None:
    assert admitted({"a": [10] * 1000, "b": [10] * 3, "c": [10] * 1000}, 1000) == {
        "a": 49,
        "b": 3,
        "c": 48,
    }
    assert admitted({"a": [5] * 5, "b": [5] * 5}, 1000) == {"a": 5, "b": 5}
    rng = random.Random(7)
    for _ in range(200):
        sizes = {str(k): [rng.randint(0, 300) for _ in range(rng.randint(0, 40))] for k in "abcd"}
        budget = rng.randint(1, 3000)
        granted = admitted(sizes, budget, turn=rng.randint(0, 9))
        used = sum(sum(sizes[k][:n]) for k, n in granted.items())
        if sum(granted.values()) > 1:
            assert used <= budget
        # nothing that would still fit is left out
        assert all(n == len(sizes[k]) or used + sizes[k][n] > budget for k, n in granted.items())


def test_an_entry_larger_than_its_share_is_not_starved_by_a_backlog() -> None:
    assert admitted({"a": [60], "b": [10] * 100}, 100) == {"a": 1, "b": 4}
    # larger than the whole budget: alone, the keys served in turn
    assert admitted({"a": [5000], "b": [6000]}, 100) == {"a": 1, "b": 0}
    assert admitted({"a": [5000], "b": [6000]}, 100, turn=1) == {"a": 0, "b": 1}
    assert admitted({"a": [5000], "b": [60]}, 100) == {"a": 0, "b": 1}
    assert admitted({"a": [0, 0, 0], "b": []}, 1) == {"a": 3, "b": 0}


def _world(plane: Plane, universe: UniverseId, cold: int, hot: list[bytes]) -> WorldId:
    """A world with ``cold`` entries of 500 bytes exported to segments, then ``hot``."""
    world = WorldId.new()
    plane.create_world(universe, world)
    if cold:
        plane.append_batch(universe, world, 0, [b"c" * 500] * cold)
        snapshot_now(plane, universe, world, promote=True)
        Exporter(plane, ExportConfig(enabled=True, target_entries=40)).export_all(universe, world)
    plane.append_batch(universe, world, plane.head(universe, world), hot)
    return world


def _expected_sizes(plane: Plane, universe: UniverseId, world: WorldId) -> list[int]:
    """Each height's size as admission counts it, built from the index and the entries."""
    out: list[int] = []
    for record in plane.list_segments(universe, world):
        out.extend([-(-record.byte_size // record.entry_count)] * record.entry_count)
    seal = 4 if plane.checksummed else 0
    rows = plane.read_range(universe, world, len(out) + 1, 10**6)
    return out + [len(entry) + seal for _, entry in rows]


def test_world_sizes_count_segments_by_share_and_hot_entries_as_stored(tmp_path: Path) -> None:
    plane = open_plane(f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}")
    universe, rng = UniverseId.new(), random.Random(3)
    world = _world(plane, universe, 120, [rng.randbytes(rng.randint(0, 3000)) for _ in range(90)])
    expected = _expected_sizes(plane, universe, world)
    head = plane.head(universe, world)
    assert len(expected) == head and plane.list_segments(universe, world)
    sizes = WorldSizes(plane, universe, world, 0)
    assert sizes.fit(0, 10**12, head) == (head, sum(expected))
    for taken, room in [(0, 0), (0, 1_000), (100, 5_000), (119, 7_000), (150, 2_999)]:
        count = 0
        while taken + count < head and sum(expected[taken : taken + count + 1]) <= room:
            count += 1
        assert sizes.fit(taken, room, head - taken) == (count, sum(expected[taken : taken + count]))
    above = WorldSizes(plane, universe, world, 150)
    assert above.fit(0, 10**12, head - 150) == (head - 150, sum(expected[150:]))


def test_world_sizes_follow_an_export_and_size_a_hole(tmp_path: Path) -> None:
    plane = open_plane(f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}")
    universe = UniverseId.new()
    world = _world(plane, universe, 0, [b"h" * 700] * 200)
    sizes = WorldSizes(plane, universe, world, 0)  # the index read: nothing exported yet
    snapshot_now(plane, universe, world, promote=True)
    Exporter(plane, ExportConfig(enabled=True, target_entries=40)).export_all(universe, world)
    assert plane.list_segments(universe, world)  # the hot keys are gone
    expected = _expected_sizes(plane, universe, world)  # the snapshot's records included
    assert sizes.fit(0, 10**12, len(expected)) == (len(expected), sum(expected))
    hole = _world(plane, universe, 0, [b"h" * 700] * 10)
    keys = WorldKeys(universe, hole)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.whole_entry_key()(4)))
    seal = 4 if plane.checksummed else 0
    assert WorldSizes(plane, universe, hole, 0).fit(0, 10**12, 10) == (
        10,
        9 * (700 + seal) + HOT_ENTRY_ESTIMATE,
    )


def test_the_byte_option_is_checked_and_both_caps_hold(tmp_path: Path) -> None:
    kv_url, objects = f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}"
    plane = open_plane(kv_url, objects)
    universe = UniverseId.new()
    worlds = [_world(plane, universe, 0, [b"e" * 96] * 50) for _ in range(2)]
    store = {"kv": kv_url, "objects": objects}
    for bad in ("0", "-1", "1e3", "\u00b2", str(2**63)):
        with pytest.raises(Validation, match=r"aos_journal\.max_bytes_per_batch"):
            JournalStream({**store, "max_bytes_per_batch": bad})
    with pytest.raises(Validation, match=r"aos_log\.max_bytes_per_batch"):
        LogStream({**store, "max_bytes_per_batch": "1000"})
    per_entry = 96 + (4 if plane.checksummed else 0)
    by_bytes = JournalStream({**store, "max_bytes_per_batch": str(10 * per_entry)})
    assert by_bytes.getDefaultReadLimit() == ReadMaxBytes(10 * per_entry)
    start = by_bytes.initialOffset()
    end = heights_of(by_bytes.latestOffset(start, by_bytes.getDefaultReadLimit()))
    assert sorted(end.values()) == [5, 5]
    everything = heights_of(by_bytes.latestOffset(start, ReadAllAvailable()))
    assert sorted(everything.values()) == [50, 50]
    both = JournalStream(
        {**store, "max_bytes_per_batch": str(10 * per_entry), "max_entries_per_batch": "4"}
    )
    assert both.getDefaultReadLimit() == ReadMaxRows(4)
    assert sum(heights_of(both.latestOffset(start, ReadMaxRows(4))).values()) == 4
    assert sum(heights_of(both.latestOffset(start, ReadMaxRows(40))).values()) == 10
    assert sum(heights_of(both.latestOffset(start, ReadMaxBytes(3 * per_entry))).values()) == 3
    assert {key.partition("/")[2] for key in end} == {str(w) for w in worlds}


def test_micro_batches_stay_within_the_byte_cap(spark: Any, tmp_path: Path) -> None:
    """Worlds with history in segments, hot entries of random sizes and one entry larger
    than the cap: every micro-batch holds at most the cap's entry bytes (or one entry),
    every height arrives once."""
    from pyspark.sql import functions as F

    kv_url, objects = f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}"
    plane = open_plane(kv_url, objects)
    universe, rng = UniverseId.new(), random.Random(11)

    def hot(n: int) -> list[bytes]:
        return [rng.randbytes(rng.randint(0, 2_500)) for _ in range(n)]

    worlds = [
        _world(plane, universe, 160, hot(60)),
        _world(plane, universe, 0, hot(150)),
        _world(plane, universe, 0, [*hot(5), b"L" * 50_000, *hot(5)]),
    ]
    expected = sorted(
        (str(w), h, entry) for w in worlds for h, entry in plane.read_range(universe, w, 1, 10**6)
    )
    cap = 20_000
    batches: list[tuple[int, int, int]] = []
    rows: list[tuple[str, int, bytes]] = []

    def record(batch: Any, batch_id: int) -> None:
        got = batch.collect()
        rows.extend((r.world, r.height, bytes(r.entry)) for r in got)
        total = batch.agg(F.sum(F.length("entry")).alias("b")).collect()[0].b or 0
        batches.append((batch_id, len(got), total))

    query = (
        spark.readStream.format("aos_journal")
        .options(kv=kv_url, objects=objects, max_bytes_per_batch=str(cap))
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(rows) == expected  # every height once
    assert all(size <= cap or count == 1 for _, count, size in batches), batches
    assert any(count == 1 and size == 50_000 for _, count, size in batches)
    assert len(batches) >= sum(len(entry) for *_, entry in expected) // cap
