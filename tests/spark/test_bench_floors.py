"""The stand-in sources of ``aosp bench spark-journal``'s floors (``aos_bench.spark_floor``)
read what ``aos_journal`` reads, on a real local SparkSession: the ``sqlite3`` floor the same
rows, the prebuilt source the same heights, once each, as a batch and as a stream."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import SegmentStore

pytest.importorskip("aos_bench.spark_floor", reason="the benchmarks package is not installed")


@pytest.fixture(scope="module", autouse=True)
def floors(spark: Any) -> None:
    from aos_bench.spark_floor import Prebuilt, SqliteFloor

    spark.dataSource.register(SqliteFloor)
    spark.dataSource.register(Prebuilt)


def _load(spark: Any, store: SegmentStore, source: str, **options: str) -> Any:
    return (
        spark.read.format(source)
        .schema("height long, entry binary")
        .options(kv=store.kv, objects=store.objects, **options)
        .load()
    )


def _rows(frame: Any) -> Counter[tuple[int, bytes]]:
    return Counter((r.height, bytes(r.entry)) for r in frame.collect())


def test_the_sqlite_floor_reads_the_journal_rows(spark: Any, store: SegmentStore) -> None:
    options = {"hot_entries": "2", "batch_rows": "3"}
    journal = _rows(_load(spark, store, "aos_journal", **options))
    hot = sum(n for (_, entry), n in journal.items() if entry == b"hot tail")
    assert hot == 5 * len(store.worlds) < sum(journal.values())  # hot and cold both read
    assert _rows(_load(spark, store, "aos_bench_sqlite", **options)) == journal


def test_the_prebuilt_rows_have_the_journal_heights(spark: Any, store: SegmentStore) -> None:
    journal = _rows(_load(spark, store, "aos_journal"))
    prebuilt = _rows(_load(spark, store, "aos_bench_prebuilt", batch_rows="7"))
    assert Counter(h for h, _ in prebuilt.elements()) == Counter(h for h, _ in journal.elements())
    assert {len(entry) for _, entry in prebuilt} == {1024}


def test_the_prebuilt_stream_gives_every_row_once(
    spark: Any, store: SegmentStore, tmp_path: Path
) -> None:
    heights = Counter(h for h, _ in _rows(_load(spark, store, "aos_journal")).elements())
    limit = max(1, sum(heights.values()) // 5)
    query = (
        spark.readStream.format("aos_bench_prebuilt")
        .schema("height long, entry binary")
        .options(kv=store.kv, objects=store.objects, max_entries_per_batch=str(limit))
        .load()
        .writeStream.format("memory")
        .queryName("prebuilt_floor")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 5 and max(batches) <= limit
    got = Counter(r.height for r in spark.sql("SELECT height FROM prebuilt_floor").collect())
    assert got == heights
