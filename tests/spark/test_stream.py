"""``spark.readStream.format("aos_journal")`` on a real local SparkSession: every height of
every world exactly once while writers append, drain and export, new worlds picked up,
micro-batches within the admission limit, offsets deterministic and checked."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from persistence import cbor
from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from segments.export import ExportConfig, Exporter
from spark_connectors.journal import HotRange, JournalPartition
from spark_connectors.stream import JournalStream, admit, heights_of, offset
from tests.spark.conftest import SegmentStore, build_store
from tests.spark.test_journal import journal_rows

ROOT = Path(__file__).resolve().parents[2]


def stream(spark: Any, store: SegmentStore, **options: str) -> Any:
    return (
        spark.readStream.format("aos_journal")
        .options(objects=store.objects, kv=store.kv, **options)
        .load()
    )


def sink_rows(spark: Any, name: str) -> list[tuple[str, int, bytes]]:
    rows = spark.sql(f"SELECT world, height, entry FROM {name}").collect()
    return [(r.world, r.height, bytes(r.entry)) for r in rows]


def write_while_streaming(
    store: SegmentStore, rounds: int, seed: int, caught_up: Any
) -> list[WorldId]:
    """Appends to every world (and drains an enqueued item every third round), a new world
    every few rounds, exports now and then; every
    fifth round waits for ``caught_up()`` (the query has read what is there), so writes
    and micro-batches interleave whatever the machine's speed."""
    rng = random.Random(seed)
    plane, u = store.plane, store.universe
    created = []
    for n in range(rounds):
        if n % 5 == 2:
            w = WorldId.new()
            plane.create_world(u, w)
            created.append(w)
        for w in [*store.worlds, *created]:
            head = plane.head(u, w)
            plane.append_batch(
                u, w, head, [b"live %d" % (head + i) for i in range(rng.randint(1, 9))]
            )
            if n % 3 == 0:  # an item through the inbox, drained into the journal
                plane.enqueue(u, w, DomainEventIngress("t/E@1", cbor.encode(n)))
                plane.drain_inbox_to_journal(u, w)
        if n % 4 == 3:
            w = rng.choice(store.worlds)
            plane.set_cold_horizon(u, w, plane.head(u, w) - 2)
            Exporter(plane, ExportConfig(enabled=True, target_entries=15)).export_all(u, w)
        if n % 5 == 4:
            caught_up()
    return created


def test_every_height_exactly_once_while_writers_work(spark: Any, tmp_path: Path) -> None:
    store = build_store(tmp_path / "store", seed=random.randrange(2**32), worlds=3)
    query = (
        stream(spark, store, hot_entries="16")
        .writeStream.format("memory")
        .queryName("journal_live")
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        created: list[WorldId] = []
        query.processAllAvailable()  # the first micro-batch, before any live write
        writer = threading.Thread(
            target=lambda: created.extend(
                write_while_streaming(store, 25, 7, query.processAllAvailable)
            )
        )
        writer.start()
        writer.join()
        query.processAllAvailable()
        got = sink_rows(spark, "journal_live")
    finally:
        query.stop()
    store.worlds.extend(created)
    expected = journal_rows(store)
    assert created and len(got) == len(set((w, h) for w, h, _ in got))  # nothing twice
    assert sorted(got) == sorted(expected)  # nothing lost, new worlds included
    assert len([p for p in query.recentProgress if p["numInputRows"]]) > 5


def test_micro_batches_stay_within_the_admission_limit(spark: Any, store: SegmentStore) -> None:
    query = (
        stream(spark, store, max_entries_per_batch="97")
        .writeStream.format("memory")
        .queryName("journal_admitted")
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        query.processAllAvailable()
        got = sink_rows(spark, "journal_admitted")
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    total = len(journal_rows(store))
    assert sorted(got) == sorted(journal_rows(store))
    assert sum(sizes) == total and max(sizes) <= 97 and len(sizes) >= total // 97


def test_available_now_reads_to_the_heads_of_its_start(spark: Any, store: SegmentStore) -> None:
    query = (
        stream(spark, store, max_entries_per_batch="500")
        .writeStream.format("memory")
        .queryName("journal_now")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(sink_rows(spark, "journal_now")) == sorted(journal_rows(store))


def test_admission_shares_the_limit_fairly() -> None:
    assert admit({"a": 1000, "b": 3, "c": 1000}, 100) == {"a": 49, "b": 3, "c": 48}
    assert admit({"a": 5, "b": 5}, 100) == {"a": 5, "b": 5}
    assert admit({"a": 5, "b": 0}, 3) == {"a": 3, "b": 0}
    granted = admit({str(i): 7 for i in range(50)}, 10)
    assert sum(granted.values()) == 10 and max(granted.values()) == 1


def test_offsets_are_checked_and_ranges_deterministic(store: SegmentStore) -> None:
    reader = JournalStream({"objects": store.objects, "kv": store.kv, "hot_entries": "5"})
    start = reader.initialOffset()
    assert start == offset({}, initial=True)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert heights_of(end) == {
        f"{store.universe}/{w}": store.plane.head(store.universe, w) for w in store.worlds
    }
    first = [p.refs for p in reader.partitions(start, end) if isinstance(p, JournalPartition)]
    assert len(first) == len(reader.partitions(start, end))
    assert first == [
        p.refs for p in reader.partitions(start, end) if isinstance(p, JournalPartition)
    ]
    assert any(isinstance(r, HotRange) for refs in first for r in refs)
    assert reader.partitions(end, end) == []
    assert reader.latestOffset(start, ReadAllAvailable()) == end
    limited = heights_of(reader.latestOffset(start, ReadMaxRows(10)))
    assert sum(limited.values()) == 10 and set(limited) <= set(heights_of(end))
    for bad in ({"version": 2, "worlds": {}}, {"version": 1}, "not json"):
        with pytest.raises(Validation, match=r"aos_journal\.offset"):
            heights_of(bad)
    with pytest.raises(Validation, match=r"aos_journal\.offset\.worlds.*'nope/x'"):
        heights_of({"version": 1, "worlds": {"nope/x": 3}})
    for bad in ("0", "\u00b2", "\u0661\u0662", str(2**63)):
        with pytest.raises(Validation, match="max_entries_per_batch"):
            JournalStream({"objects": store.objects, "kv": store.kv, "max_entries_per_batch": bad})
    latest = JournalStream({"objects": store.objects, "kv": store.kv, "starting": "latest"})
    assert heights_of(latest.initialOffset()) == heights_of(end)


def test_a_driver_killed_mid_stream_resumes_exactly_once(tmp_path: Path) -> None:
    """SIGKILL the driver's process group (Python and JVM) once two micro-batches are
    written, restart it from the checkpoint: the sink ends with every height once."""
    store = build_store(tmp_path / "store", seed=random.randrange(2**32), worlds=3)
    out, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    args = [
        sys.executable, "-m", "tests.spark.stream_driver",
        store.kv, store.objects, str(checkpoint), str(out), "120",
    ]  # fmt: skip
    first = subprocess.Popen(
        args, stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True
    )
    try:
        assert first.stdout is not None
        written = []
        for line in first.stdout:
            written.append(line.strip())
            if len(written) == 2:
                break
        assert written == ["batch 0", "batch 1"]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    second = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.splitlines()[-1] == "done"
    rows = []
    for batch in sorted(out.iterdir()):
        assert (batch / "_SUCCESS").exists(), batch
        rows.extend(pq.read_table(batch).to_pylist())
    got = [(r["world"], r["height"], r["entry"]) for r in rows]
    assert len(got) == len({(w, h) for w, h, _ in got})
    assert sorted(got) == sorted(journal_rows(store))
    assert len(list(out.iterdir())) >= len(got) // 120


def test_a_backlog_of_a_million_entries_is_admitted_in_bounded_batches(
    spark: Any, tmp_path: Path
) -> None:
    """1,048,576 entries in four worlds, read with ``max_entries_per_batch`` 131,072: every
    micro-batch within the limit, every world's heights tiled once across the batches, and
    each batch shared between the worlds still waiting."""
    from segments import open_plane

    kv, objects = f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}"
    plane = open_plane(kv, objects)
    universe, per_world = UniverseId.new(), 262_144
    worlds = [WorldId.new() for _ in range(4)]
    for w in worlds:
        plane.create_world(universe, w)
        for start in range(0, per_world, 8_192):
            plane.append_batch(
                universe, w, start, [b"%08d" % h for h in range(start, start + 8_192)]
            )
    plane.engine.close()
    ranges: list[tuple[int, str, int, int, int]] = []

    def record(batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        for r in (
            batch.groupBy("world")
            .agg(F.min("height").alias("lo"), F.max("height").alias("hi"), F.count("*").alias("n"))
            .collect()
        ):
            ranges.append((batch_id, r.world, r.lo, r.hi, r.n))

    query = (
        spark.readStream.format("aos_journal")
        .schema("world string, height long")
        .options(kv=kv, objects=objects, max_entries_per_batch="131072")
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    per_batch: dict[int, int] = {}
    for batch_id, _, lo, hi, n in ranges:
        assert n == hi - lo + 1  # each world's part of a batch is a run of heights
        per_batch[batch_id] = per_batch.get(batch_id, 0) + n
    assert max(per_batch.values()) <= 131_072 and sum(per_batch.values()) == 4 * per_world
    assert len(per_batch) == 4 * per_world // 131_072
    for name in map(str, worlds):
        runs = sorted((lo, hi) for _, world, lo, hi, _ in ranges if world == name)
        assert runs[0][0] == 1 and runs[-1][1] == per_world
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(runs))
    first = [world for batch_id, world, *_ in ranges if batch_id == min(per_batch)]
    assert len(first) == 4  # the first batch already reads every world, a quarter each


def store_reader(store: SegmentStore, **options: str) -> JournalStream:
    return JournalStream({"objects": store.objects, "kv": store.kv, **options})


def planned_rows(reader: JournalStream, start: Any, end: Any) -> list[tuple[str, int]]:
    return [
        (row["world"], row["height"])
        for p in reader.partitions(start, end)
        for batch in reader.read(p)
        for row in batch.to_pylist()
    ]


def test_min_height_holds_for_every_world_and_the_limit_with_it(tmp_path: Path) -> None:
    store = build_store(tmp_path / "store", seed=4, worlds=3)
    reader = store_reader(store, min_height="15", max_entries_per_batch="6")
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    rows = planned_rows(reader, start, end)
    assert rows and len(rows) <= 6 and min(h for _, h in rows) == 15
    u, w = store.universe, WorldId.new()  # a world created later starts at min_height too
    store.plane.create_world(u, w)
    store.plane.append_batch(u, w, 0, [b"x"] * 20)
    everything = store_reader(store, min_height="15")
    later = everything.latestOffset(end, everything.getDefaultReadLimit())
    new = [h for world, h in planned_rows(everything, end, later) if world == str(w)]
    assert new == list(range(15, 21))


def test_a_latest_start_survives_a_restart_before_the_first_batch_commits(
    tmp_path: Path,
) -> None:
    """Spark logs the first batch's end, then (after a restart) asks the source for the
    first start again: the batch must still hold the heights after the original heads."""
    store = build_store(tmp_path / "store", seed=2, worlds=2)
    u = store.universe
    first = store_reader(store, starting="latest")
    start = first.initialOffset()
    assert first.initialOffset() == start  # asked twice in one run: one answer
    for w in store.worlds:
        store.plane.append_batch(u, w, store.plane.head(u, w), [b"after start"] * 3)
    end = first.latestOffset(start, first.getDefaultReadLimit())
    for w in store.worlds:  # more appends, then the driver restarts
        store.plane.append_batch(u, w, store.plane.head(u, w), [b"after end"] * 2)
    restarted = store_reader(store, starting="latest")
    rows = planned_rows(restarted, restarted.initialOffset(), end)
    expected = {
        (str(w), h) for w in store.worlds for h in range(heights_of(start)[f"{u}/{w}"] + 1,
                                                          heights_of(end)[f"{u}/{w}"] + 1)
    }  # fmt: skip
    assert len(expected) == 6 and sorted(rows) == sorted(expected)


def test_a_limit_below_the_worlds_waiting_serves_them_in_turn(store: SegmentStore) -> None:
    assert admit({"a": 100, "b": 100, "c": 100}, 2) == {"a": 1, "b": 1, "c": 0}
    assert admit({"a": 100, "b": 100, "c": 100}, 2, turn=2) == {"a": 1, "b": 0, "c": 1}
    reader = store_reader(store, max_entries_per_batch="1")
    offsets = [reader.initialOffset()]
    for _ in range(2 * len(store.worlds)):
        offsets.append(reader.latestOffset(offsets[-1], reader.getDefaultReadLimit()))
    served = [
        next(k for k, h in heights_of(b).items() if h != heights_of(a).get(k, 0))
        for a, b in itertools.pairwise(offsets)
    ]
    assert set(served) == {f"{store.universe}/{w}" for w in store.worlds}


def test_offsets_are_read_in_canonical_form(store: SegmentStore) -> None:
    key = f"{store.universe}/{store.worlds[0]}"
    assert heights_of({"version": 1, "worlds": {key.upper(): 3}}) == {key: 3}
    for bad in (
        {"version": True, "worlds": {}},
        {"version": 1, "worlds": {key: 3, key.upper(): 4}},
        {"version": 1, "worlds": {}, "initial": "yes"},
        {"version": 1, "worlds": {}, "extra": 1},
    ):
        with pytest.raises(Validation, match=r"aos_journal\.offset"):
            heights_of(bad)
