"""Exactly-once under FoundationDB's commit_unknown_result: a retry of a commit that did
apply is recognised by every write protocol (memory engine with scripted faults)."""

from __future__ import annotations

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from persistence import cbor, fdb_errors, kv
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols.snapshots import SnapshotOutcome
from segments import open_plane


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", cbor.encode({"n": n}))


def fired(faulty: FaultyEngine) -> bool:
    """Whether the scripted 1021 (applied) was injected."""
    return [(kind, info[1:]) for kind, info in faulty.injector.log] == [  # type: ignore[index]
        ("commit", (fdb_errors.COMMIT_UNKNOWN_RESULT, True))
    ]


@pytest.fixture
def faulty() -> FaultyEngine:
    return FaultyEngine(MemoryEngine(), FaultInjector(seed=11))


@pytest.fixture
def plane(faulty: FaultyEngine) -> Plane:  # overrides conftest: faults only here
    from backends.objects.memory import MemoryObjectStore

    return open_plane(faulty, MemoryObjectStore(), hooks=faulty.injector)


def test_append_retried_after_applied_unknown_result_is_not_doubled(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    assert plane.append_batch(universe, world, 0, [b"a", b"b"]) == 1
    assert fired(faulty)
    assert plane.read_range(universe, world, 1, 10) == [(1, b"a"), (2, b"b")]


def test_enqueue_retried_after_applied_unknown_result_is_not_duplicated(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    seq = plane.enqueue(universe, world, event(1))
    assert fired(faulty)
    assert [s for s, _ in plane.read_after(universe, world, None, 10)] == [seq]


def test_enqueue_outcomes_say_which_items_the_key_already_held(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """A key that held the item when the call first looked is a repeat (nothing stored);
    one stored by the call's own applied attempt, found by its retry, is not."""
    first = plane.enqueue_outcomes(universe, world, [event(1)], idempotency_keys=[b"a"])
    assert [o.repeat for o in first] == [False]
    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    again = plane.enqueue_outcomes(
        universe, world, [event(1), event(2)], idempotency_keys=[b"a", b"b"]
    )
    assert fired(faulty)  # the retry found both keys held: "a" before the call, "b" by it
    assert [o.repeat for o in again] == [True, False]
    assert again[0].seq == first[0].seq
    stored = [s for s, _ in plane.read_after(universe, world, None, 10)]
    assert stored == [first[0].seq, again[1].seq]
    assert plane.enqueue_batch(universe, world, [event(2)], idempotency_keys=[b"b"]) == [
        again[1].seq
    ]


def test_a_key_found_only_before_a_failed_attempt_is_not_a_repeat(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """The first attempt finds key "a" held; its commit fails (not applied) while the item
    and its entry are removed (as compaction does); the retry stores "a" anew: stored by
    this call, so not a repeat."""
    (held,) = plane.enqueue_batch(universe, world, [event(1)], idempotency_keys=[b"a"])
    keys = WorldKeys(universe, world)

    def compacted() -> None:
        def clear(tr: kv.Transaction) -> None:
            tr.clear(keys.inbox_item(held))
            tr.clear(keys.inbox_idempotency(b"a"))

        kv.run_sync(faulty.inner, clear)

    faulty.injector.fail_commit(1, fdb_errors.NOT_COMMITTED, interleave=compacted)
    out = plane.enqueue_outcomes(
        universe, world, [event(1), event(2)], idempotency_keys=[b"a", b"b"]
    )
    assert [o.repeat for o in out] == [False, False] and out[0].seq != held
    assert [s for s, _ in plane.read_after(universe, world, None, 10)] == [o.seq for o in out]


def test_a_repeat_whose_first_read_failed_is_still_a_repeat(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """The first attempt fails at its read (1037), before it sees anything; the retry finds
    the key held: no attempt wrote the item, so it is a repeat."""
    (held,) = plane.enqueue_batch(universe, world, [event(1)], idempotency_keys=[b"a"])
    faulty.injector.fail_read(1, fdb_errors.PROCESS_BEHIND)
    (out,) = plane.enqueue_outcomes(universe, world, [event(1)], idempotency_keys=[b"a"])
    failed = [info for kind, info in faulty.injector.log if kind == "read"]
    assert [info[1] for info in failed] == [fdb_errors.PROCESS_BEHIND]  # type: ignore[index]
    assert out.repeat and out.seq == held


def test_drain_retried_after_applied_unknown_result_returns_first_result(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    seqs = plane.enqueue_batch(universe, world, [event(i) for i in range(4)])
    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    result = plane.drain_inbox_to_journal(universe, world, max_items=2)
    assert fired(faulty)
    assert (result.first_height, result.count, result.cursor) == (1, 2, seqs[1])
    assert plane.head(universe, world) == 2


def test_snapshot_retried_after_applied_unknown_result_journals_once(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"a"])
    plane.put_verified(universe, b"s1")  # bodies already in CAS: the lookups only read
    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    _, outcome = plane.snapshot_commit(
        universe,
        world,
        b"s1",
        height=1,
        logical_time_ns=1,
        receipt_horizon_height=1,
        promote_baseline=True,
    )
    assert fired(faulty)
    assert plane.head(universe, world) == 3  # entry, snapshot, baseline_snapshot: once each
    assert plane.active_baseline(universe, world).height == 1
    # The retry found the first attempt's commit id with the index entry: it reports what
    # that attempt did, not "nothing changed".
    assert outcome == SnapshotOutcome(indexed=True, promoted=True)
    _, again = plane.snapshot_commit(
        universe,
        world,
        b"s1",
        height=1,
        logical_time_ns=1,
        receipt_horizon_height=1,
        promote_baseline=True,
    )
    assert again == SnapshotOutcome(indexed=False, promoted=False)  # another call: a no-op


def test_promotion_retried_after_applied_unknown_result_reports_promoted(
    faulty: FaultyEngine, plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"a"])
    record, first = plane.snapshot_commit(
        universe, world, b"s1", height=1, logical_time_ns=1, receipt_horizon_height=1
    )
    assert first == SnapshotOutcome(indexed=True, promoted=False)
    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    _, outcome = plane.snapshot_commit(
        universe,
        world,
        b"s1",
        height=1,
        logical_time_ns=1,
        receipt_horizon_height=1,
        promote_baseline=True,
    )
    assert fired(faulty)
    assert outcome == SnapshotOutcome(indexed=False, promoted=True)
    assert plane.active_baseline(universe, world) == record
    assert plane.head(universe, world) == 3  # entry, snapshot, baseline_snapshot: once each
