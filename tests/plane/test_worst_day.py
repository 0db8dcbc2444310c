"""FoundationDB's worst day: every write call reports its own outcome, whatever other clients
commit between an applied ``commit_unknown_result`` and its retry, and the protocols abort
only on conflicts they need.

Each scenario runs on the memory engine inside a :class:`FaultyEngine` whose injector fails
the call's commit with 1021 *after applying it* and lets another client (a plane on the
inner engine, without faults) commit before the retry -- or, for the conflict scenarios,
interleaves explicit transactions step by step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, fdb_errors
from persistence.errors import EngineError, HeadAdvanced
from persistence.futures import drive
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, InboxEnvelope, encode_inbox_item
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane, default_normalizer
from persistence.protocols import drain, effects, inbox
from persistence.protocols.calls import Call
from persistence.protocols.export import read_marker
from persistence.protocols.snapshots import SnapshotOutcome
from persistence.records import EffectDispatchItem
from segments import open_plane
from segments.export import ExportConfig, Exporter

APPLIED_UNKNOWN = fdb_errors.COMMIT_UNKNOWN_RESULT


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", cbor.encode({"n": n}))


@dataclass
class Clients:
    """``plane`` (the caller under test, faults injected) and ``other`` (another client)."""

    injector: FaultInjector
    plane: Plane
    other: Plane
    universe: UniverseId
    world: WorldId

    def journal(self) -> list[bytes]:
        u, w = self.universe, self.world
        return [e for _, e in self.other.read_range(u, w, 1, self.other.head(u, w))]


@pytest.fixture
def clients() -> Clients:
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    objects = MemoryObjectStore()
    plane = open_plane(engine, objects, hooks=injector)
    other = open_plane(engine.inner, objects)
    u, w = UniverseId.new(), WorldId.new()
    other.create_world(u, w)
    return Clients(injector, plane, other, u, w)


def test_append_after_an_applied_1021_and_an_interleaved_drain(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.other.enqueue_batch(u, w, [event(1), event(2)])
    c.injector.fail_commit(
        1,
        APPLIED_UNKNOWN,
        applied=True,
        interleave=lambda: c.other.drain_inbox_to_journal(u, w),
    )
    assert c.plane.append_batch(u, w, 0, [b"mine"]) == 1  # its own first height
    journal_entries = c.journal()
    assert journal_entries[0] == b"mine" and journal_entries.count(b"mine") == 1
    assert len(journal_entries) == 3  # and the other client's drain after it


def test_drain_reports_its_own_result_after_an_interleaved_drain(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    seqs = c.other.enqueue_batch(u, w, [event(1), event(2), event(3)])

    def another_drain() -> None:
        c.other.enqueue(u, w, event(4))
        c.other.drain_inbox_to_journal(u, w)

    c.injector.fail_commit(1, APPLIED_UNKNOWN, applied=True, interleave=another_drain)
    result = c.plane.drain_inbox_to_journal(u, w, max_items=3)
    assert (result.first_height, result.count, result.cursor) == (1, 3, seqs[2])
    assert c.other.head(u, w) == 4


def test_cursor_commit_after_an_interleaved_drain(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    seqs = c.other.enqueue_batch(u, w, [event(1), event(2)])
    c.injector.fail_commit(
        1, APPLIED_UNKNOWN, applied=True, interleave=lambda: c.other.drain_inbox_to_journal(u, w)
    )
    c.plane.commit_cursor(u, w, None, seqs[0])  # its own swap applied: no CursorAdvanced
    assert c.other.inbox_cursor(u, w) == seqs[1]
    assert c.other.head(u, w) == 1  # the other drain took only the second item


def _snapshot(plane: Plane, u: UniverseId, w: WorldId, height: int, promote: bool) -> object:
    return plane.snapshot_commit(
        u,
        w,
        f"state at {height}".encode(),
        height=height,
        logical_time_ns=height,
        receipt_horizon_height=height,
        promote_baseline=promote,
    )[1]


class ArmAt:
    """Step hooks that arm a commit fault when the protocol reaches ``step``."""

    def __init__(self, injector: FaultInjector, step: str, arm: Callable[[], None]) -> None:
        self.injector, self.step, self.arm = injector, step, arm

    def reached(self, step: str) -> None:
        self.injector.reached(step)
        if step == self.step:
            self.arm()


def test_snapshot_commit_after_an_interleaved_newer_promotion(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.other.append_batch(u, w, 0, [b"a", b"b"])

    def newer_promotion() -> None:
        _snapshot(c.other, u, w, c.other.head(u, w), promote=True)

    # the commit after the CAS puts indexes and promotes; it applies, then the newer
    # promotion commits, then the retry
    arm = ArmAt(
        c.injector,
        "snapshot.after_cas",
        lambda: c.injector.fail_commit(
            1, APPLIED_UNKNOWN, applied=True, interleave=newer_promotion
        ),
    )
    plane = open_plane(c.plane.engine, c.plane.objects, hooks=arm)
    outcome = _snapshot(plane, u, w, 2, promote=True)
    assert outcome == SnapshotOutcome(indexed=True, promoted=True)
    assert c.other.active_baseline(u, w).height == 4  # the newer one stays active


def test_promotion_after_an_interleaved_newer_promotion(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.other.append_batch(u, w, 0, [b"a", b"b"])
    _snapshot(c.other, u, w, 2, promote=False)
    (indexed,) = [s for s in c.other.list_snapshots(u, w) if s.height == 2]

    def newer_promotion() -> None:
        _snapshot(c.other, u, w, c.other.head(u, w), promote=True)

    c.injector.fail_commit(1, APPLIED_UNKNOWN, applied=True, interleave=newer_promotion)
    c.plane.promote_baseline(u, w, indexed)  # its own promotion applied: no regression error
    assert c.other.active_baseline(u, w).height == 4


def test_effect_claim_after_an_interleaved_completion(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    intent = Hash.of(b"intent")
    seq = c.other.dispatch_effect(u, EffectDispatchItem(w, intent, "http", cbor.encode(1)))
    c.injector.fail_commit(
        1,
        APPLIED_UNKNOWN,
        applied=True,
        interleave=lambda: c.other.complete_effect(u, seq, intent),
    )
    claimed = c.plane.claim_effect(u, seq, "worker-1")  # it did claim it
    assert claimed.claimed_by == "worker-1" and claimed.intent_hash == intent


def test_export_step_after_another_exporter_moved_on(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.other.append_batch(u, w, 0, [bytes([i]) for i in range(12)])
    _snapshot(c.other, u, w, 12, promote=True)
    config = ExportConfig(enabled=True, target_entries=4, delete_chunk_entries=2)

    def other_exporter() -> None:
        Exporter(c.other, config).export_once(u, w)

    # the marker's copy_started transition applies, then the other exporter finishes that
    # segment before this exporter learns its transition committed
    c.injector.fail_commit(1, APPLIED_UNKNOWN, applied=True, interleave=other_exporter)
    Exporter(c.plane, config).export_all(u, w)
    assert [(s.start, s.end) for s in c.other.list_segments(u, w)] == [(1, 4), (5, 8), (9, 11)]
    assert drive(read_marker(c.other.engine, WorldKeys(u, w))) is None
    assert c.journal() == [bytes([i]) for i in range(12)] + c.journal()[12:]


# ----------------------------------------------------------------------- a commit that lands late

TIMED_OUT = fdb_errors.TRANSACTION_TIMED_OUT


def test_a_timed_out_append_lands_after_the_callers_reads(clients: Clients) -> None:
    """The simulator's late 1031: invisible to the reads the caller makes to find out, then
    landed before the next writing commit -- so a host that re-appends at the head it reads
    writes its entry twice."""
    c, u, w = clients, clients.universe, clients.world
    c.injector.fail_commit(1, TIMED_OUT, late=True)
    with pytest.raises(EngineError, match="1031"):
        c.plane.append_batch(u, w, 0, [b"mine"])
    assert c.plane.head(u, w) == 0 and c.journal() == []  # not there when the caller looks
    with pytest.raises(HeadAdvanced):  # the late commit lands first
        c.plane.append_batch(u, w, 0, [b"mine"])
    c.plane.append_batch(u, w, c.plane.head(u, w), [b"mine"])  # the careless redo
    assert c.journal() == [b"mine", b"mine"]
    assert ("late", "landed") in c.injector.log


def test_retry_append_batch_finds_a_late_landed_attempt(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.injector.fail_commit(1, TIMED_OUT, late=True)
    with pytest.raises(EngineError, match="1031"):
        c.plane.append_batch(u, w, 0, [b"mine", b"too"])
    assert c.plane.retry_append_batch(u, w, 0, [b"mine", b"too"]) == 1
    assert c.journal() == [b"mine", b"too"]


def test_retry_append_batch_appends_when_the_attempt_did_not_land(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.injector.fail_commit(1, TIMED_OUT)  # not applied, and never will be
    with pytest.raises(EngineError, match="1031"):
        c.plane.append_batch(u, w, 0, [b"mine"])
    assert c.plane.retry_append_batch(u, w, 0, [b"mine"]) == 1
    assert c.journal() == [b"mine"]


def test_retry_append_batch_reports_an_attempt_that_never_landed(clients: Clients) -> None:
    c, u, w = clients, clients.universe, clients.world
    c.injector.fail_commit(1, TIMED_OUT, late=True)
    with pytest.raises(EngineError, match="1031"):
        c.plane.append_batch(u, w, 0, [b"mine"])
    c.other.append_batch(u, w, 0, [b"theirs"])  # the other client commits first
    c.plane.enqueue(u, w, event(1))  # any writing commit: the held one tries to land
    assert ("late", "aborted 1020") in c.injector.log
    with pytest.raises(HeadAdvanced):
        c.plane.retry_append_batch(u, w, 0, [b"mine"])
    assert c.plane.retry_append_batch(u, w, 1, [b"mine"]) == 2
    assert c.journal() == [b"theirs", b"mine"]


# ----------------------------------------------------------------------- needless conflicts


def test_a_drain_commits_while_older_enqueues_are_in_flight() -> None:
    engine = MemoryEngine()
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    keys = WorldKeys(u, w)
    enqueuing = engine.create_transaction()
    envelope = InboxEnvelope(encode_inbox_item(event(0)), b"in-flight")
    drive(inbox.enqueue(enqueuing, keys, [(b"in-flight", envelope.to_cbor())]))  # read version R
    plane.enqueue_batch(u, w, [event(1), event(2)])  # committed after R
    draining = engine.create_transaction()
    # one item of two, so the drain reads no ready mark (one that empties the inbox clears
    # it with compare_and_clear, which conflicts with nothing: tests/plane/test_drain_worker.py)
    limits = drain.DrainLimits(1, 1 << 20, plane.config.max_entry_bytes, plane.budget)
    result = drive(
        drain.drain(draining, keys, limits, default_normalizer, Call.new(), plane.sealing)
    )
    assert result.count == 1
    enqueuing.commit().wait()  # its versionstamped key may land anywhere after R
    draining.commit().wait()  # no conflict: the drained items are immutable and sort before it
    assert plane.head(u, w) == 1
    assert len(plane.read_after(u, w, None, 10)) == 3


def test_a_cursor_commit_commits_while_an_append_lands() -> None:
    engine = MemoryEngine()
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    (seq,) = plane.enqueue_batch(u, w, [event(1)])
    keys = WorldKeys(u, w)
    committing = engine.create_transaction()
    drive(inbox.commit_cursor(committing, keys, None, seq, Call.new()))
    plane.append_batch(u, w, 0, [b"landed"])
    committing.commit().wait()
    assert plane.inbox_cursor(u, w) == seq


def test_an_effect_claim_commits_while_an_older_dispatch_lands() -> None:
    engine = MemoryEngine()
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    keys = UniverseKeys(u)
    dispatching = engine.create_transaction()
    drive(effects.dispatch(dispatching, keys, EffectDispatchItem(w, Hash.of(b"old"), "h", b"\xa0")))
    seq = plane.dispatch_effect(u, EffectDispatchItem(w, Hash.of(b"new"), "h", b"\xa0"))
    claiming = engine.create_transaction()
    drive(effects.claim(claiming, keys, seq, "worker", 1, Call.new()))
    dispatching.commit().wait()  # its versionstamped key may land anywhere after its read version
    claiming.commit().wait()
    assert [i.claimed_by for _, i in plane.inflight_effects(u)] == ["worker"]


def test_two_claims_of_one_effect_conflict() -> None:
    engine = MemoryEngine()
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    keys = UniverseKeys(u)
    seq = plane.dispatch_effect(u, EffectDispatchItem(w, Hash.of(b"x"), "h", b"\xa0"))
    first, second = engine.create_transaction(), engine.create_transaction()
    drive(effects.claim(first, keys, seq, "a", 1, Call.new()))
    drive(effects.claim(second, keys, seq, "b", 1, Call.new()))
    first.commit().wait()
    with pytest.raises(Exception) as error:
        second.commit().wait()
    assert getattr(error.value, "code", None) == fdb_errors.NOT_COMMITTED
