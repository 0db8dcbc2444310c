"""The ``aos_journal`` Data Source: every world's journal, cold segments and hot tail, on a
real local SparkSession, over SQLite and a real FoundationDB cluster; exact while export
moves heights from hot to cold between planning and reading."""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from persistence import cbor, kv
from persistence.errors import DamagedJournalEntry, MissingJournalEntry, Validation
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from segments.export import ExportConfig, Exporter
from spark_connectors.journal import (
    ColdRange,
    HotRange,
    JournalScan,
    parse,
    partitions_of,
    plan_journal,
)
from spark_connectors.listing import Selection
from tests.fdb_cluster import FdbCluster, clear_keyspace
from tests.spark.conftest import SegmentStore, build_store


def journal_rows(store: SegmentStore) -> list[tuple[str, int, bytes]]:
    """``(world, height, entry)`` of every height of every world, by ``Plane.read_range``."""
    out: list[tuple[str, int, bytes]] = []
    for w in store.worlds:
        head = store.plane.head(store.universe, w)
        out.extend((str(w), h, e) for h, e in store.plane.read_range(store.universe, w, 1, head))
    return out


def read(spark: Any, store: SegmentStore, **options: str) -> Any:
    return (
        spark.read.format("aos_journal")
        .options(objects=store.objects, kv=store.kv, **options)
        .load()
    )


def scanned(df: Any) -> list[tuple[str, int, bytes]]:
    return sorted(
        (r.world, r.height, bytes(r.entry)) for r in df.select("world", "height", "entry").collect()
    )


def test_the_table_is_every_height_of_every_world(spark: Any, store: SegmentStore) -> None:
    expected = journal_rows(store)
    hot = [r for r in expected if r[2] == b"hot tail"]
    assert hot and len(hot) < len(expected)  # the store has both parts
    rows = read(spark, store, hot_entries="2").collect()
    assert sorted((r.world, r.height, bytes(r.entry)) for r in rows) == sorted(expected)
    for r in rows:
        assert r.universe == str(store.universe) and r.error is None
        assert r.entry_size == len(r.entry)
        if r.segment_start is not None:
            assert r.segment_start <= r.height <= r.segment_end and r.segment_bytes > 0
    for w in map(str, store.worlds):  # cold rows below hot ones, both present
        cold = [r.height for r in rows if r.world == w and r.segment_start is not None]
        hot = [r.height for r in rows if r.world == w and r.segment_start is None]
        assert cold and hot and max(cold) < min(hot)


def test_options_select_worlds_heights_and_kinds(spark: Any, store: SegmentStore) -> None:
    world = store.worlds[1]
    head = store.plane.head(store.universe, world)
    df = read(spark, store, world=str(world), min_height="30", max_height=str(head - 2))
    expected = [r for r in journal_rows(store) if r[0] == str(world) and 30 <= r[1] <= head - 2]
    assert scanned(df) == sorted(expected)
    kinds = read(spark, store, kind="opaque")
    assert {r.kind for r in kinds.select("kind").collect()} == {"opaque"}
    assert kinds.count() == read(spark, store).where("kind = 'opaque'").count()


def test_a_reused_dataframe_answers_each_query_for_itself(spark: Any, store: SegmentStore) -> None:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = read(spark, store)
        total = len(journal_rows(store))
        assert df.where("height <= 2").count() == 2 * len(store.worlds)
        assert df.count() == total and df.select("height").count() == total
        assert df.where("world = 'typo'").count() == 0
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


@pytest.mark.parametrize("engine", ["sqlite", "fdb"])
def test_export_between_planning_and_reading_loses_and_repeats_nothing(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """The plan names hot ranges; before any task reads them, more is appended and every
    world is exported through its head (hot keys deleted): the tasks read those heights
    from the new segments, each planned height once, and nothing above the plan's heads."""
    kv = None
    if engine == "fdb":
        cluster: FdbCluster = request.getfixturevalue("fdb_cluster")
        cleared = cluster.engine()
        clear_keyspace(cleared)
        cleared.close()
        kv = cluster.url
    seed = random.randrange(2**32)
    store = build_store(tmp_path / "store", seed=seed, worlds=3, kv=kv)
    expected = journal_rows(store)
    scan = JournalScan(parse({"objects": store.objects, "kv": store.kv, "hot_entries": "3"}))
    partitions = scan.partitions()
    planned_hot = [ref for p in partitions for ref in p.refs if isinstance(ref, HotRange)]
    assert planned_hot
    for w in store.worlds:
        head = store.plane.head(store.universe, w)
        store.plane.append_batch(store.universe, w, head, [b"after the plan"] * 4)
        store.plane.set_cold_horizon(store.universe, w, head + 4)
        Exporter(store.plane, ExportConfig(enabled=True, target_entries=7)).export_all(
            store.universe, w
        )
    for ref in planned_hot:  # the hot keys the plan named are gone
        rows = store.plane.read_hot(store.universe, WorldId.parse(ref.world), ref.start, 1)
        assert rows == []
    got = [
        (row["world"], row["height"], row["entry"])
        for p in partitions
        for batch in scan.read(p)
        for row in batch.to_pylist()
    ]
    assert sorted(got) == sorted(expected)
    assert len(got) == len(set((w, h) for w, h, _ in got))
    store.plane.engine.close()


def test_a_hole_in_the_hot_tail_fails_or_is_one_error_row(tmp_path: Path) -> None:
    store = build_store(tmp_path / "store", seed=5, worlds=1)
    u, w = store.universe, store.worlds[0]
    head = store.plane.head(u, w)
    store.plane.append_batch(u, w, head, [b"x%d" % i for i in range(10)])
    keys, h3, h6 = WorldKeys(u, w), head + 3, head + 6
    # heights head+3 .. head+6 lost
    kv.run_sync(store.plane.engine, lambda tr: tr.clear_range(*keys.entries_between(h3, h6)))
    options = {"objects": store.objects, "kv": store.kv, "batch_rows": "4"}
    scan = JournalScan(parse(options))
    with pytest.raises(MissingJournalEntry):
        [b for p in scan.partitions() for b in scan.read(p)]
    skip = JournalScan(parse({**options, "on_corrupt": "skip"}))
    rows = [r for p in skip.partitions() for b in skip.read(p) for r in b.to_pylist()]
    errors = [r for r in rows if r["error"] is not None]
    assert [(r["segment_start"], r["segment_end"]) for r in errors] == [(head + 3, head + 6)]
    heights = sorted(r["height"] for r in rows if r["error"] is None)
    assert heights == [h for h in range(1, head + 11) if not head + 3 <= h <= head + 6]


def test_a_damaged_hot_entry_fails_or_is_one_error_row(tmp_path: Path) -> None:
    """An entry that fails its checksum: the query fails, or (skip) one error row names that
    height alone and every other height of its batch is read."""
    store = build_store(tmp_path / "store", seed=6, worlds=1)
    u, w = store.universe, store.worlds[0]
    head = store.plane.head(u, w)
    store.plane.append_batch(u, w, head, [b"x%d" % i for i in range(10)])
    key = WorldKeys(u, w).entry_chunk(head + 5, 0, 1)
    stored = kv.run(store.plane.engine, lambda tr: tr.get(key))
    assert stored is not None
    kv.run_sync(store.plane.engine, lambda tr: tr.set(key, stored[:-1] + bytes([stored[-1] ^ 1])))
    options = {"objects": store.objects, "kv": store.kv, "batch_rows": "4"}
    scan = JournalScan(parse(options))
    with pytest.raises(DamagedJournalEntry):
        [b for p in scan.partitions() for b in scan.read(p)]
    skip = JournalScan(parse({**options, "on_corrupt": "skip"}))
    rows = [r for p in skip.partitions() for b in skip.read(p) for r in b.to_pylist()]
    errors = [r for r in rows if r["error"] is not None]
    assert [(r["segment_start"], r["segment_end"]) for r in errors] == [(head + 5, head + 5)]
    assert "checksum" in errors[0]["error"]
    heights = sorted(r["height"] for r in rows if r["error"] is None)
    assert heights == [h for h in range(1, head + 11) if h != head + 5]


def test_an_ingress_record_without_an_item_is_of_kind_corrupt_record(tmp_path: Path) -> None:
    """An entry shaped as the plane's ingress record whose item is not an item map (a
    host's append can write one): the ``kind`` column says ``corrupt record`` and the
    scan goes on (it failed with ``TypeError``, skip mode or not)."""
    store = build_store(tmp_path / "store", seed=7, worlds=1)
    u, w = store.universe, store.worlds[0]
    head = store.plane.head(u, w)
    odd = cbor.encode({"item": cbor.encode(5), "kind": "ingress", "seq": bytes(12)})
    store.plane.append_batch(u, w, head, [b"before", odd, b"after"])
    scan = JournalScan(parse({"objects": store.objects, "kv": store.kv}))
    rows = [r for p in scan.partitions() for b in scan.read(p) for r in b.to_pylist()]
    kinds = {r["height"]: r["kind"] for r in rows if r["height"] > head}
    assert kinds == {head + 1: "opaque", head + 2: "corrupt record", head + 3: "opaque"}
    picked = JournalScan(
        parse({"objects": store.objects, "kv": store.kv, "kind": "corrupt record"})
    )
    assert [
        r["height"] for p in picked.partitions() for b in picked.read(p) for r in b.to_pylist()
    ] == [head + 2]


def test_plans_pickle_small_and_name_every_height(store: SegmentStore) -> None:
    refs = plan_journal(store.plane, Selection(), hot_entries=2)
    for w in store.worlds:
        mine = [r for r in refs if r.world == str(w)]
        heights = [h for r in mine for h in range(r.start, r.end + 1)]
        assert heights == list(range(1, store.plane.head(store.universe, w) + 1))
        assert any(isinstance(r, ColdRange) for r in mine)
        assert any(isinstance(r, HotRange) for r in mine)
    assert all(len(pickle.dumps(r)) < 400 for r in refs)


def test_a_scan_of_several_ranges_has_at_least_min_partitions(store: SegmentStore) -> None:
    options = {"objects": store.objects, "kv": store.kv, "hot_entries": "1"}
    for wanted in (2, 3, 5):
        scan = JournalScan(parse({**options, "min_partitions": str(wanted)}))
        assert len(scan.partitions()) >= wanted


def test_refs_of_uneven_sizes_still_make_min_partitions() -> None:
    """A large range alone and small ones packed together made fewer partitions than
    ``min_partitions`` asks for; the order of the refs is kept."""
    u, w = str(UniverseId.new()), str(WorldId.new())
    refs = [HotRange(u, w, 1, 100), HotRange(u, w, 101, 101), HotRange(u, w, 102, 102)]
    options = {"objects": "file:///unused", "kv": "sqlite:///unused"}
    for wanted, count in ((2, 2), (3, 3), (5, 3)):
        parts = partitions_of(refs, parse({**options, "min_partitions": str(wanted)}))
        assert len(parts) == count
        assert [ref for part in parts for ref in part.refs] == refs
    many = [HotRange(u, w, 1, 1000)] + [HotRange(u, w, h, h) for h in range(1001, 1011)]
    parts = partitions_of(many, parse({**options, "min_partitions": "6"}))
    assert len(parts) == 6 and [ref for part in parts for ref in part.refs] == many


def test_bad_options_are_named(store: SegmentStore) -> None:
    base = {"objects": store.objects, "kv": store.kv}
    numeric = ("min_height", "max_height", "hot_entries", "min_partitions", "batch_rows",
               "partition_bytes")  # fmt: skip
    for name in numeric:
        for bad in ("\u00b2", "\u0661\u0662", "-1", "1.5", str(2**64)):
            with pytest.raises(Validation, match=rf"aos_journal\.{name}"):
                parse({**base, name: bad})
    with pytest.raises(Validation, match=r"aos_journal\.min_height.*at most max_height"):
        parse({**base, "min_height": "9", "max_height": "8"})
    for name in ("universe", "world"):
        for empty in ("", ",", " , "):
            with pytest.raises(Validation, match=rf"aos_journal\.{name}"):
                parse({**base, name: empty})

    with pytest.raises(Validation, match=r"aos_journal\.kv"):
        parse({"objects": store.objects})
    with pytest.raises(Validation, match=r"aos_journal\.listing"):
        parse({"objects": store.objects, "kv": store.kv, "listing": "objects"})
    with pytest.raises(Validation, match=r"aos_journal\.hot_entries"):
        parse({"objects": store.objects, "kv": store.kv, "hot_entries": "0"})
    with pytest.raises(Validation, match="unknown option"):
        parse({"objects": store.objects, "kv": store.kv, "pushdown": "true"})


def test_on_foundationdb(spark: Any, fdb_cluster: FdbCluster, tmp_path: Path) -> None:
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    engine.close()
    store = build_store(
        tmp_path / "fdb", seed=random.randrange(2**32), worlds=3, kv=fdb_cluster.url
    )
    try:
        expected = journal_rows(store)
        assert scanned(read(spark, store, hot_entries="3")) == sorted(expected)
    finally:
        store.plane.engine.close()
