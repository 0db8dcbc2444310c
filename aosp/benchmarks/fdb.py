"""The plane on FoundationDB beside the plane on SQLite, in the same run.

Four operations, each measured in alternating rounds (SQLite, then FoundationDB, ``ROUNDS``
times after a warm-up round), each round on fresh worlds of the same two stores:

1. single-entry ``append_batch`` (1,000-byte entries): appends/s;
2. 100-entry ``append_batch``: entries/s;
3. ``read_range`` of 20,000 entries: entries/s;
4. enqueue -> drain in one process (200 single-item enqueues, then drains of up to 100):
   items/s end to end;
5. segment export of 20,000 entries behind a promoted baseline (local-directory objects):
   entries/s.

The figure is the median of the per-round ratios FoundationDB / SQLite, with their minimum
and maximum. There is no target: the cluster is a single ``fdbserver`` process on loopback
with the memory storage engine (``../shared/fdb/fdb-local``), so the figures show what the
protocols cost on FoundationDB's client and commit path, not what a production cluster
(network round trips, log replication, SSD storage servers) would do. SQLite runs with
``synchronous=FULL`` (an fsync per commit), FoundationDB's memory engine with its own
durability (a log fsync per commit batch).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aosp.benchmarks import Figure
from persistence import cbor
from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from persistence.records import DomainEventIngress
from segments import open_plane

ROUNDS: Final = 5
ENTRY: Final = b"x" * 1000
SINGLE_APPENDS: Final = 200
BATCHES: Final = 20
READ_ENTRIES: Final = 20_000
ITEMS: Final = 200
EXPORT_ENTRIES: Final = 20_000


def _world(plane: Plane) -> tuple[UniverseId, WorldId]:
    universe, world = UniverseId.new(), WorldId.new()
    plane.create_world(universe, world)
    return universe, world


def _fill(plane: Plane, universe: UniverseId, world: WorldId, count: int) -> None:
    for start in range(0, count, 1_000):
        plane.append_batch(universe, world, start, [ENTRY] * min(1_000, count - start))


def _single_appends(plane: Plane) -> float:
    universe, world = _world(plane)
    started = time.perf_counter()
    for head in range(SINGLE_APPENDS):
        plane.append_batch(universe, world, head, [ENTRY])
    return SINGLE_APPENDS / (time.perf_counter() - started)


def _batch_appends(plane: Plane) -> float:
    universe, world = _world(plane)
    started = time.perf_counter()
    for batch in range(BATCHES):
        plane.append_batch(universe, world, batch * 100, [ENTRY] * 100)
    return BATCHES * 100 / (time.perf_counter() - started)


def _reads(plane: Plane) -> float:
    universe, world = _world(plane)
    _fill(plane, universe, world, READ_ENTRIES)
    started = time.perf_counter()
    rows = plane.read_range(universe, world, 1, READ_ENTRIES)
    elapsed = time.perf_counter() - started
    if len(rows) != READ_ENTRIES:
        raise RuntimeError(f"read {len(rows)} of {READ_ENTRIES} entries")
    return READ_ENTRIES / elapsed


def _enqueue_drain(plane: Plane) -> float:
    universe, world = _world(plane)
    item = DomainEventIngress("bench.item", cbor.encode(b"x" * 900))
    started = time.perf_counter()
    for _ in range(ITEMS):
        plane.enqueue(universe, world, item)
    drained = 0
    while drained < ITEMS:
        drained += plane.drain_inbox_to_journal(universe, world, max_items=100).count
    return ITEMS / (time.perf_counter() - started)


def _export(plane: Plane) -> float:
    from segments.export import ExportConfig, Exporter

    universe, world = _world(plane)
    _fill(plane, universe, world, EXPORT_ENTRIES)
    plane.snapshot_commit(
        universe,
        world,
        b"bench-state",
        height=EXPORT_ENTRIES,
        logical_time_ns=0,
        receipt_horizon_height=EXPORT_ENTRIES,
        promote_baseline=True,
    )
    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=5_000))
    started = time.perf_counter()
    segments = exporter.export_all(universe, world)
    elapsed = time.perf_counter() - started
    if sum(s.entry_count for s in segments) != EXPORT_ENTRIES - 1:
        raise RuntimeError("export did not cover every entry below the baseline")
    return (EXPORT_ENTRIES - 1) / elapsed


OPERATIONS: Final[list[tuple[str, str, Callable[[Plane], float]]]] = [
    ("single-entry append", "appends/s", _single_appends),
    ("100-entry append", "entries/s", _batch_appends),
    ("read_range 20k", "entries/s", _reads),
    ("enqueue -> drain", "items/s", _enqueue_drain),
    ("segment export 20k", "entries/s", _export),
]


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    fdb_url: str | None = None,
) -> list[Figure]:
    """Measure every operation on SQLite and on the cluster of ``fdb_url``."""
    del seconds  # fixed work per round: the same calls on both sides
    if not fdb_url:
        raise Validation("--fdb", "the fdb suite needs a cluster: --fdb fdb:///path/fdb.cluster")
    from backends.kv import open_engine
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.local import LocalObjectStore

    figures = []
    with tempfile.TemporaryDirectory(prefix="aosp-bench-fdb-") as tmp:
        sqlite = open_plane(
            SqliteEngine(Path(tmp) / "aos.db", synchronous="FULL"),
            LocalObjectStore(Path(tmp) / "objects-sqlite"),
        )
        fdb = open_plane(open_engine(fdb_url), LocalObjectStore(Path(tmp) / "objects-fdb"))
        for name, unit, operation in OPERATIONS:
            progress(f"fdb: {name}")
            operation(sqlite), operation(fdb)  # warm-up round
            sqlite_rates, fdb_rates = [], []
            for _ in range(ROUNDS):
                sqlite_rates.append(operation(sqlite))
                fdb_rates.append(operation(fdb))
            ratios = [f / s for f, s in zip(fdb_rates, sqlite_rates, strict=True)]
            figures.append(
                Figure(
                    f"fdb: {name}",
                    statistics.median(fdb_rates),
                    unit,
                    "sqlite (synchronous=FULL), same run",
                    statistics.median(sqlite_rates),
                    None,
                    "higher",
                    round_ratios=tuple(ratios),
                )
            )
        sqlite.engine.close()
    return figures
