"""The ``aos_journal`` Spark source, batch and stream, against Parquet and itself.

The data: ``ENTRIES`` (1,048,576 by default) journal entries of 1 KiB (``0xff`` then random
bytes) in ``WORLDS`` worlds, appended through a plane on SQLite with a local object
directory; then each world's lower half is exported as segments of ``SEGMENT_ENTRIES``
entries, so a scan reads half from segment objects and half (the hot tail) from the SQLite
engine. The same rows (world, height, entry), read back with ``Plane.read_range``, are
written to uncompressed Parquet.

Figures, one SparkSession at ``local[2]``, a warm-up of each side, then ``ROUNDS`` rounds
alternating the sides; a figure is the median per-round ratio with the lowest and highest:

* batch: ``aos_journal`` read with the schema ``height long, entry binary`` against Spark's
  Parquet reader, the query ``SELECT count(*), sum(height), sum(length(entry))`` over both
  (target 0.8x Parquet's rows/s);
* stream: the same rows consumed by a streaming query (``Trigger.AvailableNow``,
  ``max_entries_per_batch`` of ``STREAM_BATCH``, the ``noop`` sink, a new checkpoint each
  round), from ``start()`` to its end, against the batch scan of the same rows (target 0.7x);
* floors (:mod:`aos_bench.spark_floor`), in the same rounds: the same scan with the hot tail
  read by ``sqlite3`` alone (``aos_bench_sqlite``), and with prebuilt rows and no store
  (``aos_bench_prebuilt``), against Parquet; the prebuilt rows as a stream like the one
  above, against their batch scan; and the journal source against the ``sqlite3`` floor;
* latency: a writer appends ``RATE`` entries a second (in eight worlds, every 50 ms), each
  carrying its append time; a streaming query with a 1 s trigger collects each micro-batch
  on the driver; a row's latency is the time from just before its append call to its batch
  being in the driver. The p99 over ``LATENCY_SECONDS`` (after ``WARMUP_SECONDS``) against
  the 3 s limit (target: at most 1.0 of it).

Every scan's result is checked (row count, height sum, byte sum).
"""

from __future__ import annotations

import os
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from aos_bench import Figure, require
from persistence.ids import UniverseId, WorldId

ENTRIES: Final = 1_048_576
WORLDS: Final = 8
SEGMENT_ENTRIES: Final = 10_000
ENTRY_BYTES: Final = 1_024
APPEND_BATCH: Final = 1_000
ROUNDS: Final = 5
STREAM_BATCH: Final = 131_072
RATE: Final = 1_000
LATENCY_SECONDS: Final = 30.0
WARMUP_SECONDS: Final = 5.0
LATENCY_LIMIT: Final = 3.0
BATCH_TARGET: Final = 0.8
STREAM_TARGET: Final = 0.7
QUERY: Final = "SELECT count(*) AS n, sum(height) AS h, sum(length(entry)) AS l FROM t"
COLUMNS: Final = "height long, entry binary"


def _write_store(root: Path, entries: int, progress: Callable[[str], None]) -> tuple[str, str]:
    """The plane's store (half of each world exported) and the same rows as Parquet;
    returns the engine and object-store URLs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from segments import open_plane
    from segments.export import ExportConfig, Exporter

    kv, objects = f"sqlite://{root / 'aos.db'}", f"file://{root / 'objects'}"
    plane = open_plane(kv, objects)
    universe = UniverseId.new()
    per_world = entries // WORLDS
    (root / "parquet").mkdir()
    try:
        for n in range(WORLDS):
            world = WorldId.new()
            plane.create_world(universe, world)
            for start in range(0, per_world, APPEND_BATCH):
                count = min(APPEND_BATCH, per_world - start)
                body = [b"\xff" + os.urandom(ENTRY_BYTES - 1) for _ in range(count)]
                plane.append_batch(universe, world, start, body)
            plane.set_cold_horizon(universe, world, per_world // 2)
            config = ExportConfig(enabled=True, target_entries=SEGMENT_ENTRIES)
            Exporter(plane, config).export_all(universe, world)
            rows = plane.read_range(universe, world, 1, per_world)
            table = pa.table(
                {
                    "world": [str(world)] * len(rows),
                    "height": pa.array([h for h, _ in rows], pa.int64()),
                    "entry": pa.array([e for _, e in rows], pa.binary()),
                }
            )
            pq.write_table(table, root / "parquet" / f"{world}.parquet", compression="none")
            progress(f"spark-journal bench: wrote {(n + 1) * per_world:,}/{entries:,} entries")
    finally:
        plane.engine.close()
    return kv, objects


def _check(row: Any, per_world: int) -> None:
    rows = WORLDS * per_world
    expected = (rows, WORLDS * per_world * (per_world + 1) // 2, rows * ENTRY_BYTES)
    if (row.n, row.h, row.l) != expected:
        raise AssertionError(f"scan returned {row}, expected (n, h, l) = {expected}")


def _batch(spark: Any, frame: Callable[[], Any], per_world: int) -> float:
    """Seconds to load a DataFrame and run :data:`QUERY` over it (checked)."""
    start = time.perf_counter()
    frame().createOrReplaceTempView("t")
    row = spark.sql(QUERY).collect()[0]
    elapsed = time.perf_counter() - start
    _check(row, per_world)
    return elapsed


def _stream(
    spark: Any,
    options: dict[str, str],
    checkpoint: Path,
    per_world: int,
    source: str = "aos_journal",
) -> float:
    """Seconds for a streaming query to consume every row (checked by its progress)."""
    start = time.perf_counter()
    query = (
        spark.readStream.format(source)
        .schema(COLUMNS)
        .options(**options, max_entries_per_batch=str(STREAM_BATCH))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    seen = sum(p["numInputRows"] for p in query.recentProgress)
    if seen != WORLDS * per_world:
        raise AssertionError(f"the stream read {seen} rows, expected {WORLDS * per_world}")
    return elapsed


def _throughput(
    spark: Any, root: Path, kv: str, objects: str, per_world: int, progress: Callable[[str], None]
) -> dict[str, list[float]]:
    options = {"kv": kv, "objects": objects}

    def scan(source: str) -> Callable[[int], float]:
        return lambda _: _batch(
            spark,
            lambda: spark.read.format(source).schema(COLUMNS).options(**options).load(),
            per_world,
        )

    sides: dict[str, Callable[[int], float]] = {
        "parquet": lambda _: _batch(
            spark, lambda: spark.read.parquet(str(root / "parquet")), per_world
        ),
        "journal": scan("aos_journal"),
        "stream": lambda n: _stream(spark, options, root / f"checkpoint-{n}", per_world),
        "sqlite floor": scan("aos_bench_sqlite"),
        "prebuilt": scan("aos_bench_prebuilt"),
        "prebuilt stream": lambda n: _stream(
            spark, options, root / f"prebuilt-{n}", per_world, "aos_bench_prebuilt"
        ),
    }
    for side in sides.values():  # warm-up
        side(-1)
    times: dict[str, list[float]] = {side: [] for side in sides}
    for n in range(ROUNDS):
        for name, side in sides.items():
            times[name].append(side(n))
        laps = ", ".join(f"{name} {times[name][-1]:.2f}s" for name in sides)
        progress(f"spark-journal bench round {n + 1}/{ROUNDS}: {laps}")
    return times


def _latency(
    spark: Any, root: Path, seconds: float, progress: Callable[[str], None]
) -> list[float]:
    """Seconds from append to driver, per row appended after the warm-up."""
    from segments import open_plane

    kv, objects = f"sqlite://{root / 'live.db'}", f"file://{root / 'live-objects'}"
    plane = open_plane(kv, objects)
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(WORLDS)]
    for world in worlds:
        plane.create_world(universe, world)
    latencies: list[float] = []
    began = time.time_ns()

    def collect(batch: Any, batch_id: int) -> None:
        entries = [bytes(r.entry) for r in batch.select("entry").collect()]
        now = time.time_ns()
        for entry in entries:
            (appended,) = struct.unpack_from(">q", entry)
            if appended - began >= WARMUP_SECONDS * 1e9:
                latencies.append((now - appended) / 1e9)

    query = (
        spark.readStream.format("aos_journal")
        .schema("height long, entry binary")
        .options(kv=kv, objects=objects)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(root / "live-checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    stop = threading.Event()

    def write() -> None:
        tick, per_tick = 0.05, RATE // 20
        heads = dict.fromkeys(worlds, 0)
        deadline = time.monotonic() + WARMUP_SECONDS + seconds
        next_tick = time.monotonic()
        n = 0
        while time.monotonic() < deadline and not stop.is_set():
            world = worlds[n % WORLDS]
            stamp = struct.pack(">q", time.time_ns())
            entries = [stamp + bytes(ENTRY_BYTES - 8)] * per_tick
            plane.append_batch(universe, world, heads[world], entries)
            heads[world] += per_tick
            n += 1
            next_tick += tick
            stop.wait(max(0.0, next_tick - time.monotonic()))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        writer.join()
        query.processAllAvailable()
    finally:
        stop.set()
        query.stop()
        plane.engine.close()
    progress(f"spark-journal bench: {len(latencies):,} rows timed")
    return latencies


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    *,
    entries: int = ENTRIES,
    latency_seconds: float = LATENCY_SECONDS,
) -> list[Figure]:
    """Measure the journal source's figures (``seconds`` is unused: rounds scan all rows)."""
    del seconds
    require("the spark-journal suite", "spark", "pyarrow", "pyspark")
    from aos_bench.spark_floor import Prebuilt, SqliteFloor
    from spark_connectors.session import spark_session

    with tempfile.TemporaryDirectory(prefix="aosp-spark-journal-bench-") as tmp:
        root = Path(tmp)
        kv, objects = _write_store(root, entries, progress)
        per_world = entries // WORLDS
        spark = spark_session("local[2]", "aosp-bench", **{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(SqliteFloor)
        spark.dataSource.register(Prebuilt)
        try:
            times = _throughput(spark, root, kv, objects, per_world, progress)
            latencies = _latency(spark, root, latency_seconds, progress)
        finally:
            spark.stop()
    total = per_world * WORLDS
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) >= 100 else max(latencies)
    return [
        Figure(
            name=f"spark local[2]: batch scan of {total:,} journal entries of 1 KiB (half "
            "cold, half hot) through aos_journal (height, entry)",
            value=total / statistics.median(times["journal"]),
            unit="rows/s",
            baseline="Spark's native Parquet reader, same rows and query",
            baseline_value=total / statistics.median(times["parquet"]),
            target=BATCH_TARGET,
            better="higher",
            round_ratios=tuple(
                p / j for p, j in zip(times["parquet"], times["journal"], strict=True)
            ),
        ),
        Figure(
            name=f"spark local[2]: stream of a {total:,}-entry backlog through aos_journal "
            f"(AvailableNow, {STREAM_BATCH:,} entries a micro-batch, noop sink)",
            value=total / statistics.median(times["stream"]),
            unit="rows/s",
            baseline="the batch scan of the same rows through aos_journal",
            baseline_value=total / statistics.median(times["journal"]),
            target=STREAM_TARGET,
            better="higher",
            round_ratios=tuple(
                j / s for j, s in zip(times["journal"], times["stream"], strict=True)
            ),
        ),
        _against(
            times,
            total,
            "sqlite floor",
            "parquet",
            f"spark local[2]: floor: the same scan, the hot tail read by sqlite3 alone "
            f"(aos_bench_sqlite: no checksum, no check of the heights), {total:,} rows",
            "Spark's native Parquet reader, same rows and query",
        ),
        _against(
            times,
            total,
            "journal",
            "sqlite floor",
            "spark local[2]: the batch scan through aos_journal",
            "the sqlite3 floor, same rows and query",
        ),
        _against(
            times,
            total,
            "prebuilt",
            "parquet",
            f"spark local[2]: floor: {total:,} prebuilt rows, no store (aos_bench_prebuilt)",
            "Spark's native Parquet reader, same rows and query",
        ),
        _against(
            times,
            total,
            "prebuilt stream",
            "prebuilt",
            f"spark local[2]: floor: the prebuilt rows as a stream (AvailableNow, "
            f"{STREAM_BATCH:,} rows a micro-batch, noop sink)",
            "the batch scan of the prebuilt rows",
        ),
        Figure(
            name=f"spark local[2]: p99 latency, append to row in the driver, {RATE:,} "
            "entries/s, trigger 1 s",
            value=p99,
            unit="s",
            baseline=f"the {LATENCY_LIMIT:.0f} s limit",
            baseline_value=LATENCY_LIMIT,
            target=1.0,
            better="lower",
        ),
    ]


def _against(
    times: dict[str, list[float]], total: int, side: str, peer: str, name: str, baseline: str
) -> Figure:
    """``side``'s rows/s against ``peer``'s, the ratio per round (a floor: no target)."""
    return Figure(
        name=name,
        value=total / statistics.median(times[side]),
        unit="rows/s",
        baseline=baseline,
        baseline_value=total / statistics.median(times[peer]),
        target=None,
        better="higher",
        round_ratios=tuple(p / s for p, s in zip(times[peer], times[side], strict=True)),
    )
