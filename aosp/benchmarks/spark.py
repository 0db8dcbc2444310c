"""Scanning cold segments through the ``aos_segments`` Spark source, against Spark's native
Parquet reader over the same entries.

The data: ``ENTRIES`` (1,048,576 by default) journal entries of 1 KiB (1,024 bytes, opaque:
``0xff`` then random bytes, so the kind test is the cheap one) in ``WORLDS`` worlds, written
with :class:`~segments.format.SegmentWriter` as segments of ``SEGMENT_ENTRIES`` entries
(about 10 MiB each) into a local object directory -- and the same rows (universe, world,
segment bounds, height, kind, entry, entry_size) written with ``pyarrow.parquet`` into one
Parquet file per segment (uncompressed: the entries are random, so compression buys
nothing; row groups of 64 Mi). Both are scanned by one local SparkSession (``local[*]``) with
the same query, which must read every entry's bytes::

    SELECT count(*), sum(entry_size), sum(length(entry)) FROM ...

Rows/s is entries divided by the wall time of the query; the figure is the median of
``ROUNDS`` alternating runs after one warm-up of each. Target ratio: 0.5. The source does
more work per row than Parquet by design: it verifies each segment's blake3 checksum (and
the index checksum when listing from the index) before producing any of its rows.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from aosp.benchmarks import Figure
from persistence.ids import UniverseId, WorldId

ENTRIES: Final = 1_048_576
WORLDS: Final = 8
SEGMENT_ENTRIES: Final = 10_000
ENTRY_BYTES: Final = 1_024
ROUNDS: Final = 5
QUERY: Final = "SELECT count(*) AS n, sum(entry_size) AS s, sum(length(entry)) AS l FROM t"


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


def _timed(spark: Any, frame: Any, expected: int) -> float:
    frame.createOrReplaceTempView("t")
    start = time.perf_counter()
    row = spark.sql(QUERY).collect()[0]
    elapsed = time.perf_counter() - start
    if row.n != expected or row.l != expected * ENTRY_BYTES or row.s != row.l:
        raise AssertionError(f"scan returned {row}, expected {expected} entries")
    return elapsed


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    *,
    entries: int = ENTRIES,
) -> list[Figure]:
    """Measure the scan figure (``seconds`` is unused: each round scans all entries)."""
    del seconds
    from spark_connectors.session import spark_session

    with tempfile.TemporaryDirectory(prefix="aosp-spark-bench-") as tmp:
        root = Path(tmp)
        _write_data(root, entries, progress)
        total = entries // WORLDS * WORLDS
        spark = spark_session(None, "aosp-bench", **{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        try:
            objects = f"file://{root / 'objects'}"

            def ours() -> Any:
                return spark.read.format("aos_segments").option("objects", objects).load()

            def theirs() -> Any:
                return spark.read.parquet(str(root / "parquet"))

            _timed(spark, ours(), total)
            _timed(spark, theirs(), total)
            ours_s, theirs_s = [], []
            for n in range(ROUNDS):
                ours_s.append(_timed(spark, ours(), total))
                theirs_s.append(_timed(spark, theirs(), total))
                progress(
                    f"spark bench round {n + 1}/{ROUNDS}: source {ours_s[-1]:.2f}s, "
                    f"parquet {theirs_s[-1]:.2f}s"
                )
        finally:
            spark.stop()
    return [
        Figure(
            name=f"spark: scan {total:,} entries of 1 KiB through aos_segments",
            value=total / statistics.median(ours_s),
            unit="rows/s",
            baseline="Spark's native Parquet reader, same rows and query, same session",
            baseline_value=total / statistics.median(theirs_s),
            target=0.5,
            better="higher",
        )
    ]
