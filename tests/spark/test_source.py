"""The ``aos_segments`` Data Source on a real local SparkSession."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from persistence.errors import SegmentCorruption, Validation
from persistence.kernel import entry_kind
from spark_connectors.listing import SegmentListingError, Selection, from_objects
from spark_connectors.source import ScanOptions, SegmentDataSource, SegmentScan
from tests.spark.conftest import SegmentStore, build_store


def rows_of(df: Any) -> set[tuple[str, int, bytes]]:
    return {
        (r.world, r.height, bytes(r.entry)) for r in df.select("world", "height", "entry").collect()
    }


@pytest.mark.parametrize("listing", ["index", "objects"])
def test_rows_equal_a_direct_decode(spark: Any, store: SegmentStore, listing: str) -> None:
    df = store.read(spark, listing=listing)
    rows = df.collect()
    assert {(r.world, r.height, bytes(r.entry)) for r in rows} == store.expected_rows()
    assert len(rows) == len(store.expected_rows())
    for r in rows[:300]:
        assert r.universe == str(store.universe) and r.segment_start <= r.height <= r.segment_end
        assert r.entry_size == len(r.entry) and r.error is None
        assert r.kind == (
            entry_kind(bytes(r.entry)) if r.entry[:1] and 0xA0 <= r.entry[0] <= 0xBF else "opaque"
        )
    assert {r.kind for r in rows} == {"opaque", "ingress:domain_event", "ingress:timer_fired"}


def test_small_segments_are_grouped_and_large_ones_split(spark: Any, store: SegmentStore) -> None:
    segments = sum(len(store.plane.list_segments(store.universe, w)) for w in store.worlds)
    assert store.read(spark).rdd.getNumPartitions() == 1  # all fit the default 128 MiB
    one_each = store.read(spark, partition_bytes="1").rdd.getNumPartitions()
    assert one_each == segments


def test_options_prune_partitions_and_stay_correct(spark: Any, store: SegmentStore) -> None:
    world = str(store.worlds[1])
    everything = store.read(spark, partition_bytes="1")
    assert everything.rdd.getNumPartitions() > len(
        store.plane.list_segments(store.universe, store.worlds[1])
    )
    selected = store.read(spark, partition_bytes="1", world=world, min_height="40", max_height="89")
    expected = {row for row in store.expected_rows() if row[0] == world and 40 <= row[1] < 90}
    assert rows_of(selected) == expected
    covering = [
        s
        for s in store.plane.list_segments(store.universe, store.worlds[1])
        if s.end >= 40 and s.start < 90
    ]
    assert selected.rdd.getNumPartitions() == len(covering)
    filtered = store.read(spark).where(f"world = '{world}' AND height >= 40 AND height < 90")
    assert rows_of(filtered) == expected  # the same rows, filtered by Spark


@pytest.mark.parametrize("listing", ["index", "objects"])
def test_a_window_above_every_segment_gives_no_rows(
    spark: Any, store: SegmentStore, listing: str
) -> None:
    """No partition is left to read: Spark would substitute one the reader does not know."""
    df = store.read(spark, listing=listing, min_height="1000000000")
    assert df.count() == 0 and df.rdd.getNumPartitions() == 1
    for where in ("height < 0", "height > 1000000000"):
        assert store.read(spark, listing=listing).where(where).count() == 0


def test_filters_are_correct_whatever_the_push_down_setting(
    spark: Any, store: SegmentStore
) -> None:
    """The source implements no push-down, so Spark's setting neither refuses it nor
    changes its rows."""
    world = str(store.worlds[2])
    expected = {row for row in store.expected_rows() if row[0] == world and row[1] > 10}
    for setting in ("false", "true"):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", setting)
        try:
            filtered = store.read(spark).where(f"world = '{world}' AND height > 10")
            assert rows_of(filtered) == expected, setting
        finally:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_a_reused_dataframe_answers_each_query_for_itself(spark: Any, store: SegmentStore) -> None:
    """Spark 4.3 keeps a read planned under pushed filters on the DataFrame's relation and
    reuses it for a later query that pushes none: that query must still see every row."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = store.read(spark)
        total = len(store.expected_rows())
        low = len([row for row in store.expected_rows() if row[1] <= 2])
        assert df.where("height <= 2").count() == low
        assert df.count() == total
        assert df.select("height").count() == total
        first, second = str(store.worlds[0]), str(store.worlds[1])
        assert {r.world for r in df.where(f"world = '{first}'").collect()} == {first}
        assert {r.world for r in df.where(f"world = '{second}'").collect()} == {second}
        assert df.count() == total
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_a_filter_value_that_is_not_an_id_matches_nothing(spark: Any, store: SegmentStore) -> None:
    world = str(store.worlds[0])
    assert store.read(spark).where("world = 'typo'").count() == 0
    both = store.read(spark).where(f"world IN ('{world}', 'typo')")
    assert rows_of(both) == {row for row in store.expected_rows() if row[0] == world}


def test_the_kind_option_produces_only_those_kinds(spark: Any, store: SegmentStore) -> None:
    df = store.read(spark, kind="ingress:timer_fired,opaque")
    rows = df.select("world", "height", "entry", "kind").collect()
    assert {r.kind for r in rows} == {"ingress:timer_fired", "opaque"}
    everything = store.read(spark).where("kind IN ('ingress:timer_fired', 'opaque')")
    assert rows_of(df) == rows_of(everything) and len(rows) == everything.count()


def test_world_option_selects_like_a_filter(spark: Any, store: SegmentStore) -> None:
    world = str(store.worlds[0])
    df = store.read(spark, world=world)
    assert rows_of(df) == {row for row in store.expected_rows() if row[0] == world}


def test_the_source_pickles_small(store: SegmentStore) -> None:
    source = SegmentDataSource({"objects": store.objects, "kv": store.kv})
    reader = source.reader(None)  # type: ignore[arg-type]
    partitions = reader.partitions()
    assert len(pickle.dumps(source)) < 1_000
    assert len(pickle.dumps(reader)) < 1_500
    assert all(len(pickle.dumps(p)) < 400 * len(p.segments) for p in partitions)


def test_bad_options_are_named() -> None:
    with pytest.raises(Exception, match="objects"):
        ScanOptions.parse({})
    with pytest.raises(Exception, match="on_corrupt"):
        ScanOptions.parse({"objects": "file:///x", "on_corrupt": "ignore"})
    with pytest.raises(Exception, match="unknown option"):
        ScanOptions.parse({"objects": "file:///x", "colour": "red"})
    with pytest.raises(Exception, match="world"):
        ScanOptions.parse({"objects": "file:///x", "world": "not-a-uuid"})
    for bad in ("-1", "x", str(2**64)):
        with pytest.raises(Validation, match=r"aos_segments\.min_height"):
            ScanOptions.parse({"objects": "file:///x", "min_height": bad})
    with pytest.raises(Validation, match=r"aos_segments\.kind"):
        ScanOptions.parse({"objects": "file:///x", "kind": "opaque,,snapshot"})
    with pytest.raises(Validation, match="unknown option"):
        ScanOptions.parse({"objects": "file:///x", "pushdown": "false"})


# --------------------------------------------------------------------------- damage


@pytest.fixture
def damaged(tmp_path: Path) -> SegmentStore:
    store = build_store(tmp_path / "store", seed=11, worlds=2)
    return store


def flip(store: SegmentStore, key: str) -> None:
    path = store.root / "objects" / key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def first_key(store: SegmentStore) -> str:
    return store.plane.list_segments(store.universe, store.worlds[0])[0].object_key


def test_a_corrupt_segment_fails_the_job_naming_it(spark: Any, damaged: SegmentStore) -> None:
    key = first_key(damaged)
    flip(damaged, key)
    with pytest.raises(Exception, match=key.split("/")[-1]) as failure:
        damaged.read(spark).count()
    assert "SegmentChecksumMismatch" in str(failure.value) or "checksum" in str(failure.value)


def test_a_missing_segment_fails_the_job_naming_it(spark: Any, damaged: SegmentStore) -> None:
    key = first_key(damaged)
    (damaged.root / "objects" / key).unlink()
    with pytest.raises(Exception, match=key.split("/")[-1]):
        damaged.read(spark).count()


def test_skip_mode_reports_the_skipped_segment(spark: Any, damaged: SegmentStore) -> None:
    key = first_key(damaged)
    record = damaged.plane.list_segments(damaged.universe, damaged.worlds[0])[0]
    everything = {(w, h) for w, h, _ in damaged.expected_rows()}
    flip(damaged, key)
    df = damaged.read(spark, on_corrupt="skip")
    errors = df.where("error IS NOT NULL").collect()
    assert [(r.segment_start, r.segment_end) for r in errors] == [(record.start, record.end)]
    assert key in errors[0].error and errors[0].entry is None
    good = {(r.world, r.height) for r in df.where("error IS NULL").collect()}
    expected = everything - {
        (str(damaged.worlds[0]), h) for h in range(record.start, record.end + 1)
    }
    assert good == expected


def test_object_listing_checks_tiling(damaged: SegmentStore, tmp_path: Path) -> None:
    objects = damaged.plane.objects
    records = damaged.plane.list_segments(damaged.universe, damaged.worlds[0])
    assert len(from_objects(objects, Selection())) == sum(
        len(damaged.plane.list_segments(damaged.universe, w)) for w in damaged.worlds
    )
    root = damaged.root / "objects"
    gap = root / records[1].object_key
    moved = tmp_path / "moved-aside"
    shutil.move(gap, moved)  # a hole: heights of the second segment
    with pytest.raises(SegmentListingError, match=f"{records[1].start}-{records[1].end}"):
        from_objects(objects, Selection())
    shutil.move(moved, gap)
    a, b = records[0], records[1]
    overlap = (
        root / f"segments/{damaged.universe}/{damaged.worlds[0]}/{a.start:020d}-{b.start:020d}.log"
    )
    overlap.write_bytes(b"")
    with pytest.raises(SegmentListingError, match="overlaps"):
        from_objects(objects, Selection())
    overlap.unlink()
    (root / "segments" / "stray.txt").write_bytes(b"")
    with pytest.raises(SegmentListingError, match=r"stray\.txt"):
        from_objects(objects, Selection())


def test_read_verifies_against_the_index_checksum(damaged: SegmentStore) -> None:
    """An object replaced by another valid segment of the same range is caught by the
    index's checksum (index listing), not only by the object's own trailer."""
    from segments.format import SegmentHeader, SegmentWriter

    record = damaged.plane.list_segments(damaged.universe, damaged.worlds[0])[0]
    path = damaged.root / "objects" / record.object_key
    header = SegmentHeader(damaged.universe, damaged.worlds[0], record.start, record.end)
    with path.open("wb") as out:
        writer = SegmentWriter(out, header)
        for h in range(record.start, record.end + 1):
            writer.add(h, b"forged")
        writer.finish()
    scan = SegmentScan(ScanOptions.parse({"objects": damaged.objects, "kv": damaged.kv}))
    partition = scan.partitions()[0]
    with pytest.raises(SegmentCorruption, match="segment index"):
        list(scan.read(partition))
