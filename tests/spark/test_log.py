"""``aos_log``: every universe's log as a table and as an exactly-once stream, checked row
for row against ``Plane.read_log`` on a SQLite store whose older entries are in segments."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from segments import open_plane
from segments.export import ExportConfig, Exporter
from spark_connectors.log import LogOptions, LogPartition, LogStream
from spark_connectors.stream import UNIVERSES, heights_of, offset
from tests.segments.workload import snapshot_now

TAGS = ("t/Created", "t/Moved", "t/Closed")
Row = tuple[str, int, str, int, str, bytes]
"""``(universe, position, world, height, tag, entry)``."""


@dataclass
class LogStore:
    """A SQLite store with sequenced appends in several universes, partly exported."""

    plane: Plane
    kv: str
    objects: str
    universes: list[UniverseId]
    worlds: dict[UniverseId, list[WorldId]]
    rng: random.Random

    def options(self, **more: str) -> dict[str, str]:
        return {"kv": self.kv, "objects": self.objects, **more}

    def append(self, universe: UniverseId) -> None:
        """One sequenced group append: a few entries into a few of the universe's worlds."""
        chosen = self.rng.sample(self.worlds[universe], k=min(2, len(self.worlds[universe])))
        batches, tags = [], []
        for w in chosen:
            count = self.rng.randint(1, 6)
            head = self.plane.head(universe, w)
            batches.append((w, head, [self.rng.randbytes(self.rng.randint(0, 300))] * count))
            tags.append([self.rng.choice(TAGS) for _ in range(count)])
        self.plane.append_sequenced(universe, batches, tags)

    def export(self, universe: UniverseId) -> None:
        """Move one world's journal, up to a new baseline, into segments."""
        w = self.rng.choice(self.worlds[universe])
        if self.plane.head(universe, w) > 2:
            snapshot_now(self.plane, universe, w, promote=True)
            Exporter(self.plane, ExportConfig(enabled=True, target_entries=7)).export_all(
                universe, w
            )

    def new_universe(self) -> UniverseId:
        u = UniverseId.new()
        self.universes.append(u)
        self.worlds[u] = [WorldId.new() for _ in range(3)]
        for w in self.worlds[u]:
            self.plane.create_world(u, w)
        return u

    def rows(self) -> list[Row]:
        """Every universe's whole log, read through the plane."""
        out: list[Row] = []
        for u in self.universes:
            head = self.plane.log_head(u)
            if head:
                out.extend(
                    (str(u), e.position, str(e.world), e.height, e.tag, e.entry)
                    for e in self.plane.read_log(u, 1, head)
                )
        return out


def build_log_store(root: Path, seed: int, universes: int = 2, appends: int = 40) -> LogStore:
    root.mkdir(parents=True, exist_ok=True)
    kv, objects = f"sqlite://{root / 'aos.db'}", f"file://{root / 'objects'}"
    store = LogStore(open_plane(kv, objects), kv, objects, [], {}, random.Random(seed))
    for _ in range(universes):
        store.new_universe()
    for n in range(appends):
        for u in store.universes:
            store.append(u)
            if n % 10 == 9:
                store.export(u)
    return store


def read_rows(spark: Any, **options: str) -> list[Row]:
    df = spark.read.format("aos_log").options(**options).load()
    return [
        (r.universe, r.position, r.world, r.height, r.tag, bytes(r.entry)) for r in df.collect()
    ]


@pytest.fixture(scope="module")
def log_store(tmp_path_factory: pytest.TempPathFactory) -> LogStore:
    """A store shared by the tests that do not change it."""
    return build_log_store(tmp_path_factory.mktemp("log"), seed=random.randrange(2**32))


def test_the_log_table_is_every_universes_log_row_for_row(spark: Any, log_store: LogStore) -> None:
    expected = log_store.rows()
    assert any(log_store.plane.list_segments(u, w) for u in log_store.universes for w in
               log_store.worlds[u])  # fmt: skip
    got = read_rows(spark, **log_store.options(log_entries="50", batch_rows="17"))
    assert sorted(got) == sorted(expected) and len(got) == len(expected)
    for u in log_store.universes:
        positions = sorted(p for universe, p, *_ in got if universe == str(u))
        assert positions == list(range(1, log_store.plane.log_head(u) + 1))


def test_the_log_table_selects_universes_tags_and_positions(
    spark: Any, log_store: LogStore
) -> None:
    u = log_store.universes[0]
    got = read_rows(
        spark,
        **log_store.options(universe=str(u), tag="t/Moved,t/Closed", min_position="5",
                            max_position="60"),
    )  # fmt: skip
    expected = [
        row
        for row in log_store.rows()
        if row[0] == str(u) and row[4] in ("t/Moved", "t/Closed") and 5 <= row[1] <= 60
    ]
    assert expected and sorted(got) == sorted(expected)


def test_the_log_options_are_checked(log_store: LogStore) -> None:
    for bad, field in (
        ({"objects": log_store.objects}, r"aos_log\.kv"),
        (log_store.options(tag="a,,b"), r"aos_log\.tag"),
        (log_store.options(min_position="9", max_position="3"), r"aos_log\.min_position"),
        (log_store.options(universe="not-an-id"), r"aos_log\.universe"),
        (log_store.options(world="x"), r"aos_log: unknown option"),
        (log_store.options(log_entries="0"), r"aos_log\.log_entries"),
    ):
        with pytest.raises(Validation, match=field):
            LogOptions.parse(bad)


def test_log_offsets_are_positions_and_ranges_deterministic(log_store: LogStore) -> None:
    reader = LogStream(log_store.options(log_entries="20"))
    start = reader.initialOffset()
    assert start == offset({}, initial=True, cursor=UNIVERSES)
    end = reader.latestOffset(start, ReadAllAvailable())
    heads = {str(u): log_store.plane.log_head(u) for u in log_store.universes}
    assert heights_of(end, cursor=UNIVERSES) == heads

    def planned() -> list[tuple[str, int, int]]:
        parts = reader.partitions(start, end)
        assert all(isinstance(p, LogPartition) for p in parts)
        return [(p.ref.universe, p.ref.first, p.ref.last) for p in parts
                if isinstance(p, LogPartition)]  # fmt: skip

    ranges = planned()
    assert ranges == planned() and max(last - first + 1 for _, first, last in ranges) <= 20
    covered = sorted((u, p) for u, first, last in ranges for p in range(first, last + 1))
    assert covered == sorted((u, p) for u, head in heads.items() for p in range(1, head + 1))
    assert reader.partitions(end, end) == []
    limited = heights_of(reader.latestOffset(start, ReadMaxRows(10)), cursor=UNIVERSES)
    assert sum(limited.values()) == 10 and set(limited) <= set(heads)
    with pytest.raises(Validation, match=r"aos_log\.offset: unknown field"):
        reader.latestOffset({"version": 1, "worlds": {}}, ReadAllAvailable())
    latest = LogStream(log_store.options(starting="latest"))
    assert heights_of(latest.initialOffset(), cursor=UNIVERSES) == heads


def test_the_log_stream_gives_every_position_once_while_writers_work(
    spark: Any, tmp_path: Path
) -> None:
    store = build_log_store(tmp_path / "store", seed=random.randrange(2**32), appends=10)
    query = (
        spark.readStream.format("aos_log")
        .options(**store.options(max_entries_per_batch="40", log_entries="16"))
        .load()
        .writeStream.format("memory")
        .queryName("log_live")
        .trigger(processingTime="100 milliseconds")
        .start()
    )

    def write() -> None:
        for n in range(30):
            if n == 12:
                store.new_universe()  # joins a later micro-batch, from position 1
            for u in store.universes:
                store.append(u)
            if n % 7 == 6:
                store.export(store.rng.choice(store.universes))
            if n % 5 == 4:
                query.processAllAvailable()  # writes and micro-batches interleave

    try:
        query.processAllAvailable()
        writer = threading.Thread(target=write)
        writer.start()
        writer.join()
        query.processAllAvailable()
        rows = spark.sql("SELECT universe, position, world, height, tag, entry FROM log_live")
        got = [(r[0], r[1], r[2], r[3], r[4], bytes(r[5])) for r in rows.collect()]
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    expected = store.rows()
    assert len(store.universes) == 3
    assert len(got) == len({(u, p) for u, p, *_ in got})  # nothing twice
    assert sorted(got) == sorted(expected)  # nothing lost, the new universe included
    assert max(sizes) <= 40 and len(sizes) > 5
