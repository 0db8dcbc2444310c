"""Column pruning in the ``aos_segments`` source: a scan builds only the columns of its schema
(a user-given one or the ``columns`` option's) and still verifies every segment it reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from persistence.errors import Validation
from spark_connectors import source
from spark_connectors.source import SCHEMA, ScanOptions, SegmentColumns, SegmentDataSource
from tests.spark.conftest import SegmentStore, build_store
from tests.spark.test_source import first_key, flip


def columns(*names: str) -> StructType:
    """A schema naming ``names`` of the source's columns, in that order."""
    return StructType([SCHEMA[name] for name in names])


def read_in_process(
    store: SegmentStore, schema: StructType | None, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[pa.RecordBatch], Counter[str]]:
    """Every batch of a scan run in this process, and how often each column was built (a
    counting wrapper around every builder)."""
    built: Counter[str] = Counter()

    def counting(
        name: str, build: Callable[[SegmentColumns], pa.Array]
    ) -> Callable[[SegmentColumns], pa.Array]:
        def wrapper(segment: SegmentColumns) -> pa.Array:
            built[name] += 1
            return build(segment)

        return wrapper

    for name, build in list(source.COLUMN_BUILDERS.items()):
        monkeypatch.setitem(source.COLUMN_BUILDERS, name, counting(name, build))
    reader = SegmentDataSource({"objects": store.objects, "kv": store.kv}).reader(
        schema  # type: ignore[arg-type]
    )
    batches = [batch for p in reader.partitions() for batch in reader.read(p)]
    return batches, built


def test_a_height_entry_scan_builds_only_those_columns(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = sum(len(store.plane.list_segments(store.universe, w)) for w in store.worlds)
    batches, built = read_in_process(store, columns("height", "entry"), monkeypatch)
    assert built == {"height": segments, "entry": segments}
    assert {tuple(b.schema.names) for b in batches} == {("height", "entry")}
    rows = Counter((h, e) for b in batches for h, e in zip(*b.to_pydict().values(), strict=True))
    assert rows == Counter((h, e) for _, h, e in store.expected_rows())


def test_a_scan_without_a_schema_builds_every_column(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counterpart of the test above: the counting hook sees every builder run."""
    segments = sum(len(store.plane.list_segments(store.universe, w)) for w in store.worlds)
    batches, built = read_in_process(store, None, monkeypatch)
    assert built == dict.fromkeys(SCHEMA.names, segments)
    assert {tuple(b.schema.names) for b in batches} == {tuple(SCHEMA.names)}


def test_entry_sizes_without_the_entries(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches, built = read_in_process(store, columns("entry_size", "height"), monkeypatch)
    assert "entry" not in built
    sizes = Counter((h, s) for b in batches for s, h in zip(*b.to_pydict().values(), strict=True))
    assert sizes == Counter((h, len(e)) for _, h, e in store.expected_rows())


@pytest.mark.parametrize("form", ["schema", "option"])
def test_pruned_scans_through_spark_return_the_same_rows(
    spark: Any, store: SegmentStore, form: str
) -> None:
    reader = spark.read.format("aos_segments").options(objects=store.objects, kv=store.kv)
    if form == "schema":
        df = reader.schema("entry binary, world string, height long").load()
    else:
        df = reader.option("columns", "entry,world,height").load()
    assert df.columns == ["entry", "world", "height"]
    rows = df.where("height BETWEEN 10 AND 50").collect()
    expected = {row for row in store.expected_rows() if 10 <= row[1] <= 50}
    assert {(r.world, r.height, bytes(r.entry)) for r in rows} == expected
    assert len(rows) == len(expected)


@pytest.fixture
def damaged(tmp_path: Path) -> SegmentStore:
    return build_store(tmp_path / "store", seed=23, worlds=2)


@pytest.mark.parametrize("wanted", ["segment_start", "height", "world,entry_size"])
def test_a_pruned_scan_still_verifies_every_segment(
    spark: Any, damaged: SegmentStore, wanted: str
) -> None:
    """A flipped bit in an entry fails the job even when no column derived from the entries
    is produced: the segment is verified whole before any of its rows."""
    key = first_key(damaged)
    flip(damaged, key)
    with pytest.raises(Exception, match=key.split("/")[-1]) as failure:
        damaged.read(spark, columns=wanted).count()
    assert "checksum" in str(failure.value)


def test_skip_mode_reports_with_the_error_column(spark: Any, damaged: SegmentStore) -> None:
    key = first_key(damaged)
    record = damaged.plane.list_segments(damaged.universe, damaged.worlds[0])[0]
    everything = len(damaged.expected_rows())
    flip(damaged, key)
    rows = damaged.read(spark, on_corrupt="skip", columns="height,error").collect()
    errors = [r for r in rows if r.error is not None]
    assert len(errors) == 1 and key in errors[0].error and errors[0].height is None
    assert len(rows) - 1 == everything - record.entry_count


def test_skip_mode_needs_the_error_column() -> None:
    with pytest.raises(Validation, match="error column"):
        ScanOptions.parse({"objects": "file:///x", "on_corrupt": "skip", "columns": "height"})
    with pytest.raises(Validation, match="error column"):
        ScanOptions.parse({"objects": "file:///x", "on_corrupt": "skip"}, columns("height"))


def test_the_columns_option_gives_the_schema() -> None:
    source_ = SegmentDataSource({"objects": "file:///x", "columns": "entry, height"})
    assert source_.schema() == columns("entry", "height")
    assert SegmentDataSource({"objects": "file:///x"}).schema() == SCHEMA


@pytest.mark.parametrize(
    ("options", "schema", "problem"),
    [
        ({"columns": "height,colour"}, None, "columns"),
        ({"columns": "height,height"}, None, "columns"),
        ({"columns": ""}, None, "columns"),
        ({}, StructType([StructField("height", LongType(), nullable=False)]), "height"),
        ({}, StructType([StructField("entry", LongType())]), "entry"),
        ({}, StructType([StructField("Height", LongType())]), "Height"),
        ({}, StructType([]), "schema"),
        ({}, columns("height", "height"), "schema"),
        ({"columns": "height"}, columns("entry"), "the schema names"),
    ],
)
def test_bad_columns_are_named(
    options: dict[str, str], schema: StructType | None, problem: str
) -> None:
    with pytest.raises(Validation, match=problem):
        ScanOptions.parse({"objects": "file:///x", **options}, schema)
