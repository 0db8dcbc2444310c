"""The inbox and its drain with real OS processes on one store (an SQLite file, a real
FoundationDB cluster): concurrent writers, competing drainers and a drainer SIGKILLed
mid-run, checked for exactly-once, contiguous journals in inbox order. On FoundationDB the
conflicts (1020) and versionstamps are the cluster's own."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from backends.kv import open_engine
from backends.kv.sqlite import SqliteEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, decode_inbox_item
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.plane import Plane
from segments import open_plane
from tests.fdb_cluster import FdbCluster, clear_keyspace
from tests.plane.plane_worker import SCHEMA

WORKER = Path(__file__).with_name("plane_worker.py")
ROOT = Path(__file__).resolve().parents[2]
WRITERS = 4
ITEMS = 150
TIMEOUT = 120.0


@dataclass
class Store:
    url: str
    stop: Path
    plane: Plane
    universe: UniverseId
    world: WorldId
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def spawn(
        self, mode: str, worker: int, count: int = 0, pause: float = 0.0, gate: int | None = None
    ) -> subprocess.Popen[str]:
        """A worker process, once it has opened the store and said ``ready``."""
        proc = subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                self.url,
                str(self.stop),
                str(self.universe),
                str(self.world),
                mode,
                str(worker),
                str(count),
                str(pause),
                *([] if gate is None else [str(gate)]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            proc.kill()
            _, err = proc.communicate(timeout=TIMEOUT)
            pytest.fail(f"{mode} worker {worker} did not start: {line!r}\n{err}")
        return proc

    def stop_drainers(self) -> None:
        """Drainers in ``drain`` mode finish once this file exists and the inbox is empty."""
        self.stop.touch()


@pytest.fixture(params=["sqlite", "fdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "fdb":
        cluster: FdbCluster = request.getfixturevalue("fdb_cluster")
        url = cluster.url
    else:
        url = f"sqlite://{tmp_path / 'kv.db'}"
    engine = open_engine(url)
    if request.param == "fdb":
        clear_keyspace(engine)
    plane = open_plane(engine, MemoryObjectStore())
    universe, world = UniverseId.new(), WorldId.new()
    plane.create_world(universe, world)  # before any worker starts
    store = Store(url, tmp_path / "stop", plane, universe, world)
    yield store
    for proc in store.procs:  # a failed test must not leave workers behind
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    engine.close()


def go(procs: list[subprocess.Popen[str]]) -> None:
    """Release workers waiting on their start signal, all at once."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def result(proc: subprocess.Popen[str]) -> Any:
    """The JSON a worker printed last (it must have exited cleanly)."""
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def writer_seqs(writers: list[subprocess.Popen[str]]) -> dict[int, list[InboxSeq]]:
    """What each writer's enqueue calls returned, in its own order."""
    out = {}
    for w, proc in enumerate(writers):
        seqs = [InboxSeq.parse(s) for s in result(proc)["seqs"]]
        assert len(seqs) == ITEMS
        out[w] = seqs
    return out


@dataclass(frozen=True)
class Drained:
    height: int
    seq: InboxSeq
    writer: int
    index: int


def check_exactly_once(store: Store, enqueued: dict[int, list[InboxSeq]]) -> list[Drained]:
    """Assert the journal is every enqueued item exactly once, contiguous, in inbox order."""
    plane, universe, world = store.plane, store.universe, store.world
    total = sum(len(seqs) for seqs in enqueued.values())
    head = plane.head(universe, world)
    rows = plane.read_range(universe, world, 1, head + 10)
    # contiguous heights 1..N, nothing past the head, and N is the number enqueued
    assert [h for h, _ in rows] == list(range(1, head + 1))
    assert head == total, f"journal holds {head} entries for {total} enqueued items"

    journal: list[Drained] = []
    for height, entry in rows:
        record = decode_journal_record(entry)
        assert isinstance(record, IngressJournalRecord), f"height {height}: {record!r}"
        event = decode_inbox_item(record.item)
        assert isinstance(event, DomainEventIngress) and event.schema == SCHEMA
        payload = cbor.decode(event.value_cbor)
        journal.append(Drained(height, record.seq, payload["w"], payload["i"]))

    # exactly once: every (writer, index) and every sequence appears once
    ids = [(d.writer, d.index) for d in journal]
    expected = {(w, i) for w, seqs in enqueued.items() for i in range(len(seqs))}
    assert len(set(ids)) == len(ids), "an item was drained twice"
    assert set(ids) == expected, "an item was lost"
    assert len({d.seq for d in journal}) == len(journal)
    # the journal is in inbox order: sequences strictly increase along heights
    seqs = [d.seq.raw for d in journal]
    assert all(a < b for a, b in itertools.pairwise(seqs))
    # each item carries the sequence its enqueue returned; each writer's order is kept
    for d in journal:
        assert d.seq == enqueued[d.writer][d.index]
    for w in enqueued:
        assert [d.index for d in journal if d.writer == w] == list(range(len(enqueued[w])))
    # the inbox holds exactly these items in this order, and the cursor is at the last one
    inbox = plane.read_after(universe, world, None, total + 10)
    assert [s for s, _ in inbox] == [d.seq for d in journal]
    assert plane.inbox_cursor(universe, world) == journal[-1].seq
    assert plane.read_after(universe, world, journal[-1].seq, 10) == []
    engine = plane.engine
    if isinstance(engine, SqliteEngine):
        assert engine.integrity_check() == []
    return journal


def check_drain_results(drains: list[list[Any]], journal: list[Drained]) -> None:
    """The drains reported by drainer processes partition 1..N, each telling the truth."""
    ranges = sorted((first, count, cursor) for first, count, cursor in drains)
    height = 1
    for first, count, cursor in ranges:
        assert first == height, f"drain results overlap or leave a gap at height {height}"
        height += count
        assert journal[height - 2].seq == InboxSeq.parse(cursor)
    assert height == len(journal) + 1


def test_concurrent_writers_and_one_drainer(store: Store) -> None:
    writers = [store.spawn("write", w, ITEMS) for w in range(WRITERS)]
    drainer = store.spawn("drain", 100)
    go([drainer, *writers])
    enqueued = writer_seqs(writers)
    store.stop_drainers()
    report = result(drainer)

    journal = check_exactly_once(store, enqueued)
    check_drain_results(report["drains"], journal)


@pytest.mark.parametrize("round", range(3))
def test_concurrent_writers_and_competing_drainers(store: Store, round: int) -> None:
    writers = [store.spawn("write", w, ITEMS) for w in range(WRITERS)]
    drainers = [store.spawn("drain", 100 * round + d) for d in range(2)]
    go([*drainers, *writers])
    enqueued = writer_seqs(writers)
    store.stop_drainers()
    reports = [result(proc) for proc in drainers]

    journal = check_exactly_once(store, enqueued)
    # the drainers really competed: both moved items, or one had a drain aborted by a
    # conflict (only another drain writes what a drain validates: the cursor and the head)
    competed = all(r["drains"] for r in reports) or any(r["retries"] for r in reports)
    assert competed, reports
    # and what each drain reported partitions the journal
    check_drain_results([d for report in reports for d in report["drains"]], journal)


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` and reap it."""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("round", range(2))
def test_drainer_sigkilled_at_random_moments(store: Store, round: int) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    drainer = store.spawn("churn", 1000 * round)
    # Writers park halfway (the gate) so that the first kill provably lands while they are
    # writing and after the drainer reported a drain; later kills come at random moments.
    writers = [store.spawn("write", w, ITEMS, pause=0.05, gate=ITEMS // 2) for w in range(WRITERS)]
    go(writers)
    for proc in writers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "gate"
    assert drainer.stdout is not None and drainer.stdout.readline().strip(), f"seed {seed}"
    kill(drainer)
    kills = 1
    drainer = store.spawn("churn", 1000 * round + kills)
    go(writers)  # through the gate
    while kills < 3 or any(proc.poll() is None for proc in writers):
        # The moment does not matter to any assertion below: a kill anywhere must be safe.
        time.sleep(rng.uniform(0.05, 0.5))
        kill(drainer)
        kills += 1
        drainer = store.spawn("churn", 1000 * round + kills)
    kill(drainer)
    enqueued = writer_seqs(writers)

    # the store opens cleanly after the kills and the killed drainers left whole drains
    assert store.plane.head(store.universe, store.world) > 0, f"seed {seed}"
    while store.plane.drain_inbox_to_journal(store.universe, store.world, max_items=50).count:
        pass
    check_exactly_once(store, enqueued)
