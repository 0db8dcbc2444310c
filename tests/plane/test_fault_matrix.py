"""Fault injection on every protocol: each commit failed with 1020, 1021 (applied or not)
and 1007 in turn, and a crash at every declared step, must converge to exactly the state of
a fault-free run (exactly-once).

The workload is a world host's life in small: create a world, store blobs, append, enqueue
(single and batch), drain, snapshot with promotion, dispatch and claim an effect, schedule a
timer. Each step is what a restarted host would redo: after a crash it re-runs the step it
was in, which must therefore be safe to repeat.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, fdb_errors, kv
from persistence.errors import WorldExists
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.records import EffectDispatchItem, TimerDueItem
from segments import open_plane

U = UniverseId(uuid.UUID(int=1))
W = WorldId(uuid.UUID(int=2))
SMALL = b"small blob"
LARGE = b"L" * 40_000
INTENT = Hash.of(b"intent-1")
SNAPSHOT_HEIGHT = 7  # 3 appended entries + 4 drained items


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", cbor.encode({"n": n}))


def _create(plane: Plane) -> None:
    with contextlib.suppress(WorldExists):  # the crashed attempt had committed it
        plane.create_world(U, W)


def _append(plane: Plane) -> None:
    if plane.head(U, W) < 3:
        plane.append_batch(U, W, 0, [b"a", b"b", b"c"])


def _drain(plane: Plane) -> None:
    while plane.drain_inbox_to_journal(U, W, max_items=2).count:
        pass


def _effects(plane: Plane) -> None:
    seq = plane.dispatch_effect(U, EffectDispatchItem(W, INTENT, "http.request", cbor.encode(1)))
    plane.claim_effect(U, seq, "worker-1")


STEPS: list[Callable[[Plane], Any]] = [
    _create,
    lambda p: p.put_verified(U, SMALL),
    lambda p: p.put_verified(U, LARGE),
    _append,
    lambda p: p.enqueue(U, W, event(1), idempotency_key=b"k1"),
    lambda p: p.enqueue_batch(U, W, [event(2), event(3)], idempotency_keys=[b"k2", b"k3"]),
    lambda p: p.enqueue(U, W, event(4), idempotency_key=b"k4"),
    _drain,
    lambda p: p.snapshot_commit(
        U,
        W,
        b"kernel state at 7",
        height=SNAPSHOT_HEIGHT,
        logical_time_ns=70,
        manifest=[Hash.of(SMALL)],
        receipt_horizon_height=SNAPSHOT_HEIGHT,
        promote_baseline=True,
    ),
    _effects,
    lambda p: p.schedule_timer(U, TimerDueItem(W, INTENT, 1_000, cbor.encode("tick"))),
]


def run_workload(plane: Plane) -> None:
    for step in STEPS:
        for _ in range(20):
            try:
                step(plane)
                break
            except SimulatedCrash:
                continue  # the host restarts and redoes the step
        else:
            raise AssertionError("step kept crashing")


def logical_state(plane: Plane) -> dict[str, object]:
    """Everything a caller can observe, minus wall-clock times and random batch ids, with
    inbox sequences by rank: a recovery may commit more often than a clean run (a crashed
    CAS put pins its hash again), which moves later versionstamps but not their order."""
    head = plane.head(U, W)
    objects = plane.objects
    assert isinstance(objects, MemoryObjectStore)
    return _by_rank(
        {
            "journal": plane.read_range(U, W, 1, head + 1),
            "inbox": plane.read_after(U, W, None, 100),
            "cursor": plane.inbox_cursor(U, W),
            "snapshots": plane.list_snapshots(U, W),
            "baseline": plane.active_baseline(U, W),
            "cas": [plane.get(U, Hash.of(b)) for b in (SMALL, LARGE)],
            "objects": list(objects.list()),
            "pending": plane.pending_effects(U),
            "inflight": [(s, (i.intent_hash, i.claimed_by)) for s, i in plane.inflight_effects(U)],
            "timers": plane.due_timers(U, 10**18),
            "notify": kv.run(plane.engine, lambda tr: tr.get(WorldKeys(U, W).notify_counter())),
        }
    )


def _by_rank(state: dict[str, object]) -> dict[str, object]:
    """``state`` with every inbox sequence, also inside journal entries' bytes, replaced by
    its rank among the sequences ``state`` holds."""
    seqs: set[bytes] = set()

    def collect(value: object) -> None:
        if isinstance(value, InboxSeq):
            seqs.add(value.raw)
        elif isinstance(value, (list, tuple)):
            for item in value:
                collect(item)

    collect(list(state.values()))
    rank = {raw: f"seq{i:09d}".encode() for i, raw in enumerate(sorted(seqs))}

    def replace(value: object) -> object:
        if isinstance(value, InboxSeq):
            return rank[value.raw].decode()
        if isinstance(value, bytes):
            for raw, name in rank.items():
                value = value.replace(raw, name)
            return value
        if isinstance(value, (list, tuple)):
            return [replace(item) for item in value]
        return value

    return {name: replace(value) for name, value in state.items()}


def fresh(injector: FaultInjector) -> Plane:
    return open_plane(FaultyEngine(MemoryEngine(), injector), MemoryObjectStore(), hooks=injector)


@pytest.fixture(scope="module")
def baseline() -> tuple[dict[str, object], int, dict[str, int]]:
    injector = FaultInjector()
    plane = fresh(injector)
    run_workload(plane)
    commits, points = injector.commits, dict(injector.points)
    return logical_state(plane), commits, points


def test_fault_free_run_is_deterministic(
    baseline: tuple[dict[str, object], int, dict[str, int]],
) -> None:
    state, commits, points = baseline
    again = fresh(FaultInjector())
    run_workload(again)
    assert logical_state(again) == state
    assert commits > 15  # writing commits (read-only ones are never faulted)
    assert set(points) >= {
        "world.after_create",
        "cas.after_body",
        "cas.after_meta",
        "journal.after_append",
        "inbox.after_enqueue",
        "inbox.after_drain",
        "snapshot.after_cas",
        "snapshot.after_commit",
        "effects.after_dispatch",
    }
    journal = state["journal"]
    assert isinstance(journal, list) and len(journal) == SNAPSHOT_HEIGHT + 2


FAULTS = [
    (fdb_errors.NOT_COMMITTED, False),
    (fdb_errors.COMMIT_UNKNOWN_RESULT, True),
    (fdb_errors.COMMIT_UNKNOWN_RESULT, False),
    (fdb_errors.TRANSACTION_TOO_OLD, False),
]


@pytest.mark.parametrize(
    ("code", "applied"), FAULTS, ids=["1020", "1021-applied", "1021-lost", "1007"]
)
def test_every_commit_failed_once_converges(
    baseline: tuple[dict[str, object], int, dict[str, int]], code: int, applied: bool
) -> None:
    state, commits, _ = baseline
    for index in range(1, commits + 1):
        injector = FaultInjector()
        injector.fail_commit(index, code, applied=applied)
        plane = fresh(injector)
        run_workload(plane)
        assert injector.log and injector.log[0][1][:2] == (index, code), f"commit {index}"  # type: ignore[index]
        assert logical_state(plane) == state, f"commit {index} failed with {code}"


def test_a_crash_at_every_step_converges(
    baseline: tuple[dict[str, object], int, dict[str, int]],
) -> None:
    state, _, points = baseline
    for point, occurrences in sorted(points.items()):
        for occurrence in range(1, occurrences + 1):
            injector = FaultInjector()
            injector.crash_at(point, occurrence)
            plane = fresh(injector)
            run_workload(plane)
            assert ("crash", (point, occurrence)) in injector.log
            assert logical_state(plane) == state, f"crash at {point} #{occurrence}"


@pytest.mark.parametrize("seed", range(12))
def test_random_faults_and_crashes_converge(
    baseline: tuple[dict[str, object], int, dict[str, int]], seed: int
) -> None:
    state, _, _ = baseline
    injector = FaultInjector(seed=seed, commit_fault_rate=0.25, crash_rate=0.1)
    plane = fresh(injector)
    run_workload(plane)
    assert injector.log, "the seed injected nothing"
    assert logical_state(plane) == state
