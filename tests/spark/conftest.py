"""One local SparkSession per test run, and randomized stores with exported segments."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from persistence import cbor
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, TimerFiredIngress, encode_inbox_item
from persistence.journal_records import IngressJournalRecord
from persistence.plane import Plane
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.segments.workload import snapshot_now


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The run's SparkSession (2 local cores, Python filter push-down on)."""
    from spark_connectors.session import spark_session

    session = spark_session("local[2]", "aosp-tests", **{"spark.ui.showConsoleProgress": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class SegmentStore:
    """A store whose worlds have history in segments and a hot tail."""

    root: Path
    plane: Plane
    universe: UniverseId
    worlds: list[WorldId]
    kv: str
    objects: str

    def read(self, spark: Any, **options: str) -> Any:
        """A fresh DataFrame over this store's segments."""
        return (
            spark.read.format("aos_segments")
            .options(objects=self.objects, kv=self.kv, **options)
            .load()
        )

    def expected_rows(self) -> set[tuple[str, int, bytes]]:
        """``(world, height, entry)`` of every exported height, decoded directly."""
        out = set()
        for w in self.worlds:
            for record in self.plane.list_segments(self.universe, w):
                for height, entry in self.plane.read_range(
                    self.universe, w, record.start, record.entry_count
                ):
                    out.add((str(w), height, entry))
        return out


def _entry(rng: random.Random, n: int) -> bytes:
    """Drained-item records (as the plane journals them) mixed with opaque bytes."""
    seq = InboxSeq(n.to_bytes(12, "big"))
    if n % 3 == 0:
        item = DomainEventIngress("t/E@1", cbor.encode(n))
        return IngressJournalRecord(seq, encode_inbox_item(item)).to_cbor()
    if n % 7 == 0:
        item2 = TimerFiredIngress("t", cbor.encode(n))
        return IngressJournalRecord(seq, encode_inbox_item(item2)).to_cbor()
    return os.urandom(rng.randint(0, 1500))


def build_store(
    root: Path,
    seed: int,
    worlds: int = 4,
    *,
    kv: str | None = None,
    objects: str | None = None,
) -> SegmentStore:
    """Worlds of random sizes, exported in random segment sizes, with a hot tail; on SQLite
    and a directory under ``root`` unless ``kv``/``objects`` name other stores."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    kv = kv or f"sqlite://{root / 'aos.db'}"
    objects = objects or f"file://{root / 'objects'}"
    plane = open_plane(kv, objects)
    universe = UniverseId.new()
    ids = []
    for _ in range(worlds):
        w = WorldId.new()
        plane.create_world(universe, w)
        total = rng.randint(150, 600)
        entries = [_entry(rng, n) for n in range(total)]
        for start in range(0, total, 200):
            plane.append_batch(universe, w, start, entries[start : start + 200])
        snapshot_now(plane, universe, w, promote=True)
        plane.append_batch(universe, w, plane.head(universe, w), [b"hot tail"] * 5)
        config = ExportConfig(enabled=True, target_entries=rng.randint(20, 120))
        Exporter(plane, config).export_all(universe, w)
        ids.append(w)
    return SegmentStore(root, plane, universe, ids, kv, objects)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SegmentStore:
    """A randomized store shared by a test module (tests do not change it)."""
    return build_store(tmp_path_factory.mktemp("segments"), seed=random.randrange(2**32))
