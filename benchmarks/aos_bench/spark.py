"""Scanning cold segments through the ``aos_segments`` Spark source, against Spark's native
Parquet reader over the same entries.

The data: ``ENTRIES`` (1,048,576 by default) journal entries of 1 KiB (1,024 bytes, opaque:
``0xff`` then random bytes) in ``WORLDS`` worlds, written with
:class:`~segments.format.SegmentWriter` as segments of ``SEGMENT_ENTRIES`` entries (about
10 MiB each) into a local object directory -- and the same rows (universe, world, segment
bounds, height, kind, entry, entry_size) written with ``pyarrow.parquet`` into one Parquet
file per segment (uncompressed: the entries are random, so compression buys nothing). Each
scan runs the same query, which reads every entry's bytes::

    SELECT count(*), sum(height), sum(length(entry)) FROM ...

Parquet reads only those two columns. Spark 4.3 does not tell a Python source which columns
a query uses, so the source is read with the user-given schema ``height long, entry binary``
(it then builds only those two columns); the same scan with every column built is measured
too, to show what that pruning buys. Either way the source verifies each segment's blake3
checksum before producing any of its rows.

Method: one SparkSession at ``local[2]``; one warm-up of each scan, then ``ROUNDS`` rounds,
each running the scans one after the other (Parquet, source with two columns, source with
every column). A scan's time runs from ``spark.read...load()`` to the collected result, so
each reader's listing and planning count. A round's ratio is Parquet's time over the
source's (the source's rows/s over Parquet's); a figure is the median per-round ratio, with
the lowest and highest. Then the same at ``local[1]`` in a second session
(``LOCAL_1_ROUNDS`` rounds of Parquet and the two-column source), and each scan's scaling
from one core to two (median rows/s at ``local[2]`` over ``local[1]``: sessions one after
the other, so not alternated). Each result is checked (row count, height sum, byte sum).
Target: the two-column scan at 0.8x of Parquet's rows/s.
"""

from __future__ import annotations

import os
import statistics
import tempfile
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
ROUNDS: Final = 7
LOCAL_1_ROUNDS: Final = 3
TARGET: Final = 0.8
QUERY: Final = "SELECT count(*) AS n, sum(height) AS h, sum(length(entry)) AS l FROM t"
COLUMNS: Final = "height long, entry binary"
"""The user-given schema of the pruned scan: the columns the query reads."""
PARQUET: Final = "parquet"
PRUNED: Final = "aos_segments (height, entry)"
FULL: Final = "aos_segments (every column)"


def _write_data(root: Path, entries: int, progress: Callable[[str], None]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from segments.format import SegmentHeader, SegmentWriter, segment_key

    universe = UniverseId.new()
    per_world = entries // WORLDS
    parquet = root / "parquet"
    parquet.mkdir()
    written = 0
    for _ in range(WORLDS):
        world = WorldId.new()
        for start in range(1, per_world + 1, SEGMENT_ENTRIES):
            end = min(per_world, start + SEGMENT_ENTRIES - 1)
            count = end - start + 1
            body = [b"\xff" + os.urandom(ENTRY_BYTES - 1) for _ in range(count)]
            path = root / "objects" / segment_key(universe, world, start, end)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                writer = SegmentWriter(out, SegmentHeader(universe, world, start, end))
                for height, entry in enumerate(body, start):
                    writer.add(height, entry)
                writer.finish()
            table = pa.table(
                {
                    "universe": [str(universe)] * count,
                    "world": [str(world)] * count,
                    "segment_start": pa.array([start] * count, pa.int64()),
                    "segment_end": pa.array([end] * count, pa.int64()),
                    "height": pa.array(range(start, end + 1), pa.int64()),
                    "kind": ["opaque"] * count,
                    "entry": pa.array(body, pa.binary()),
                    "entry_size": pa.array([ENTRY_BYTES] * count, pa.int32()),
                }
            )
            pq.write_table(table, parquet / f"{world}-{start:020d}.parquet", compression="none")
            written += count
        progress(f"spark bench: wrote {written:,}/{per_world * WORLDS:,} entries")


def _timed(spark: Any, frame: Callable[[], Any], per_world: int) -> float:
    """Seconds to load a DataFrame with ``frame`` and run :data:`QUERY` over it (listing
    and planning included, for both readers); the result is checked."""
    start = time.perf_counter()
    frame().createOrReplaceTempView("t")
    row = spark.sql(QUERY).collect()[0]
    elapsed = time.perf_counter() - start
    rows = WORLDS * per_world
    expected = (rows, WORLDS * per_world * (per_world + 1) // 2, rows * ENTRY_BYTES)
    if (row.n, row.h, row.l) != expected:
        raise AssertionError(f"scan returned {row}, expected (n, h, l) = {expected}")
    return elapsed


def _rounds(
    root: Path,
    master: str,
    scans: tuple[str, ...],
    rounds: int,
    per_world: int,
    progress: Callable[[str], None],
) -> dict[str, list[float]]:
    """Per scan, its time in each round (after one warm-up of each) in a new session."""
    from spark_connectors.session import spark_session

    spark = spark_session(master, "aosp-bench", **{"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if spark.sparkContext.master != master:  # getOrCreate found a running session
            raise RuntimeError(f"wanted a {master} session, got {spark.sparkContext.master}")
        objects = f"file://{root / 'objects'}"
        frames: dict[str, Callable[[], Any]] = {
            PARQUET: lambda: spark.read.parquet(str(root / "parquet")),
            PRUNED: lambda: (
                spark.read.format("aos_segments").schema(COLUMNS).option("objects", objects).load()
            ),
            FULL: lambda: spark.read.format("aos_segments").option("objects", objects).load(),
        }
        for scan in scans:  # warm-up: JVM code paths, Python workers, the page cache
            _timed(spark, frames[scan], per_world)
        times: dict[str, list[float]] = {scan: [] for scan in scans}
        for n in range(rounds):
            for scan in scans:
                times[scan].append(_timed(spark, frames[scan], per_world))
            laps = ", ".join(f"{scan} {times[scan][-1]:.2f}s" for scan in scans)
            progress(f"spark bench {master} round {n + 1}/{rounds}: {laps}")
        return times
    finally:
        spark.stop()


def _versus_parquet(
    scan: str, master: str, times: dict[str, list[float]], total: int, target: float | None
) -> Figure:
    """``scan``'s rows/s against Parquet's, by per-round ratio."""
    ratios = [p / s for p, s in zip(times[PARQUET], times[scan], strict=True)]
    return Figure(
        name=f"spark {master}: scan {total:,} entries of 1 KiB through {scan}",
        value=total / statistics.median(times[scan]),
        unit="rows/s",
        baseline=f"Spark's native Parquet reader (height, entry), same rows and query, {master}",
        baseline_value=total / statistics.median(times[PARQUET]),
        target=target,
        better="higher",
        round_ratios=tuple(ratios),
    )


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    *,
    entries: int = ENTRIES,
) -> list[Figure]:
    """Measure the scan figures (``seconds`` is unused: each round scans all entries)."""
    del seconds
    require("the spark suite", "spark", "pyarrow", "pyspark")
    with tempfile.TemporaryDirectory(prefix="aosp-spark-bench-") as tmp:
        root = Path(tmp)
        _write_data(root, entries, progress)
        per_world = entries // WORLDS
        total = per_world * WORLDS
        two = _rounds(root, "local[2]", (PARQUET, PRUNED, FULL), ROUNDS, per_world, progress)
        one = _rounds(root, "local[1]", (PARQUET, PRUNED), LOCAL_1_ROUNDS, per_world, progress)
    figures = [
        _versus_parquet(PRUNED, "local[2]", two, total, TARGET),
        _versus_parquet(FULL, "local[2]", two, total, None),
        _versus_parquet(PRUNED, "local[1]", one, total, None),
    ]
    for scan in (PRUNED, PARQUET):
        figures.append(
            Figure(
                name=f"spark: {scan} scan at local[2] against local[1]",
                value=total / statistics.median(two[scan]),
                unit="rows/s",
                baseline="the same scan at local[1] (sessions one after the other)",
                baseline_value=total / statistics.median(one[scan]),
                target=None,
                better="higher",
            )
        )
    return figures
