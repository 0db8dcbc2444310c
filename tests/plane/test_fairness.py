"""Drain fairness at small scale: 200 worlds, skewed ingress (10 worlds get half of the
items), a ``DrainWorker`` pass after each round of ingress, with a quantum below what a hot
world receives per round, so that hot worlds build a backlog while cold ones do not.

The bound proved in ``persistence/workers/drain_worker.py``, checked item by item: every world
with items at a pass's scan gets a turn of ``min(quantum, backlog)`` items in that pass (no
world waits past the pass after its items arrive), so an item with ``k`` older items pending
in its world at the scan of pass ``p`` is journaled in pass ``p + floor(k / quantum)`` at the
latest -- a cold world's item in the very next pass, whatever the hot backlog. Once ingress
stops, every backlog drains within ``ceil(largest backlog / quantum)`` passes.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from pathlib import Path

import pytest

from aos_bench import fairness
from aos_bench.fairness import FairnessConfig
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor
from persistence.errors import Validation
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, decode_inbox_item
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.keyspace import UniverseKeys
from persistence.kv import Engine
from persistence.protocols import inbox
from persistence.protocols.drain import DrainResult
from persistence.workers.drain_worker import DrainWorker
from segments import open_plane

WORLDS = 200
HOT = 10
ROUNDS = 12
ITEMS_PER_ROUND = 200
"""Half to the hot worlds (10 each per round), half spread over the 190 cold ones."""
QUANTUM = 6
"""Below a hot world's 10 items per round: its backlog grows by 4 a round."""


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_skewed_ingress_drains_fairly_within_the_bound(kind: str, tmp_path: Path) -> None:
    engine: Engine = (
        MemoryEngine() if kind == "memory" else SqliteEngine(tmp_path / "kv.db", synchronous="OFF")
    )
    plane = open_plane(engine, MemoryObjectStore())
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(WORLDS)]
    for group in range(0, WORLDS, 100):
        plane.append_batches(
            u, [(w, 0, [b"created"]) for w in worlds[group : group + 100]], create_missing=True
        )
    rng = random.Random(7)
    sent: dict[WorldId, list[int]] = defaultdict(list)
    """Each world's items, in enqueue order (item ids)."""
    enqueued_before: dict[int, int] = {}
    """Each item: the pass whose scan first saw it."""
    ahead: dict[int, int] = {}
    """Each item: the older items pending in its world at that scan."""
    drained_in: dict[int, int] = {}
    turns: dict[int, dict[WorldId, int]] = defaultdict(dict)
    passes = 0

    def drained(universe: UniverseId, results: dict[WorldId, DrainResult]) -> None:
        for world, result in results.items():
            turns[passes][world] = result.count
            done = sum(turn.get(world, 0) for turn in turns.values()) - result.count
            for item in sent[world][done : done + result.count]:
                drained_in[item] = passes

    worker = DrainWorker(
        plane, universes=[u], quantum=QUANTUM, worlds_per_transaction=16, drained=drained
    )

    def backlog(world: WorldId) -> int:
        return len(sent[world]) - sum(turn.get(world, 0) for turn in turns.values())

    def one_pass() -> int:
        nonlocal passes
        before = {w: backlog(w) for w in worlds}
        for w in worlds:
            queue = sent[w][len(sent[w]) - before[w] :]
            for position, item in enumerate(queue):
                if item not in enqueued_before:
                    enqueued_before[item] = passes
                    ahead[item] = position
        report = worker.run_pass()
        # No world is skipped: each with a backlog at the scan got min(quantum, backlog).
        for w in worlds:
            if before[w]:
                assert turns[passes].get(w, 0) == min(QUANTUM, before[w]), (passes, w)
        assert report.ready == sum(1 for w in worlds if before[w])
        passes += 1
        return report.ready

    item = 0
    for _ in range(ROUNDS):
        batch: dict[WorldId, int] = defaultdict(int)
        for n in range(ITEMS_PER_ROUND):
            world = worlds[n % HOT] if n < ITEMS_PER_ROUND // 2 else rng.choice(worlds[HOT:])
            batch[world] += 1
        for world, count in batch.items():
            ids = list(range(item, item + count))
            item += count
            plane.enqueue_batch(
                u, world, [DomainEventIngress("test/Fair@1", cbor.encode(i)) for i in ids]
            )
            sent[world].extend(ids)
        one_pass()
    largest = max(backlog(w) for w in worlds)
    assert largest == ROUNDS * (ITEMS_PER_ROUND // 2 // HOT - QUANTUM)  # the hot worlds' 48
    stopped_at = passes
    while one_pass():
        pass
    assert passes - 1 - stopped_at <= math.ceil(largest / QUANTUM)  # the last pass found none

    # Every item journaled once, in its world's order, within the bound.
    assert sorted(drained_in) == list(range(item))
    for n, drained_pass in drained_in.items():
        assert drained_pass <= enqueued_before[n] + ahead[n] // QUANTUM, n
    cold = [n for w in worlds[HOT:] for n in sent[w]]
    assert all(drained_in[n] == enqueued_before[n] for n in cold)  # the very next pass
    hot_waits = [drained_in[n] - enqueued_before[n] for w in worlds[:HOT] for n in sent[w]]
    assert max(hot_waits) == largest // QUANTUM  # the hot worlds did build a backlog
    for w in worlds:
        rows = plane.read_range(u, w, 2, plane.head(u, w))
        ids = []
        for _, entry in rows:
            record = decode_journal_record(entry)
            assert isinstance(record, IngressJournalRecord)
            event = decode_inbox_item(record.item)
            assert isinstance(event, DomainEventIngress)
            ids.append(cbor.decode(event.value_cbor))
        assert ids == sent[w]
    keys = UniverseKeys(u)
    assert drive(inbox.read_ready(plane.engine, keys, *keys.ready_range())) == ([], None)
    lag = worker.lag()
    assert (lag.ready_worlds, lag.items, lag.oldest_wait_at_most) == (0, item, 0.0)
    engine.close()


@pytest.mark.slow
def test_the_benchmark_measures_checks_and_plots_a_small_run(tmp_path: Path) -> None:
    """``aosp bench fairness`` at a tiny size: an ingress process and the worker, every item
    checked, the figures with their targets, the plot."""
    config = FairnessConfig(
        worlds=20, seconds=1.0, rate=40.0, hot_worlds=2, group_worlds=4, group_sets=2, rounds=2
    )
    plot = tmp_path / "fairness.png"
    figures = fairness.run(config=config, plot_path=plot)
    assert plot.stat().st_size > 10_000
    assert len(figures) == 12
    targets = [(f.name, f.target) for f in figures if f.target is not None]
    assert len(targets) == 5  # backlog and p99 of both runs, hot vs cold of the skewed one
    pending = [f for f in figures if "still pending" in f.name]
    assert all(f.baseline_value == 40 for f in pending)  # every item sent was checked
    group = figures[-1]
    assert group.unit == "items/s" and len(group.round_ratios) == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [("worlds", 0), ("hot_worlds", 20), ("rate", 0.0), ("hot_share", 1.5), ("rounds", True)],
)
def test_bad_benchmark_settings_name_the_field(field: str, value: object) -> None:
    with pytest.raises(Validation) as refused:
        FairnessConfig(**{"worlds": 20, field: value})  # type: ignore[arg-type]
    assert refused.value.field == f"FairnessConfig.{field}"
