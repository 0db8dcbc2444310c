"""Inbox compaction and idempotency retention (``persistence/protocols/compaction.py``), on every
engine: what is removed and when (by the consumed marks, never the clock alone), what a
retry inside and after the window gets, the races with enqueues and other compactions,
chunking, bounded marks, exactly-once reports after an applied 1021, and fsck afterwards.

Time is a :class:`Clock` the tests move: nothing sleeps.
"""

from __future__ import annotations

import math
import time

import pytest

from aosp.fsck import Fsck
from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, fdb_errors, kv
from persistence.errors import EngineError, Validation, WorldNotFound
from persistence.futures import drive
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.inbox_records import (
    DomainEventIngress,
    InboxCompactionRecord,
    InboxConsumedMark,
    InboxEnvelope,
    encode_inbox_item,
)
from persistence.keyspace import WorldKeys
from persistence.kv import Engine
from persistence.plane import Plane, PlaneConfig
from persistence.protocols import budget, compaction, inbox
from persistence.protocols.calls import Call
from persistence.protocols.compaction import MAX_MARKS, CompactionLimits, InboxCompaction
from persistence.records import CallRecord
from persistence.workers.compactor import Compactor
from segments import open_plane

T0 = 1_700_000_000 * 1_000_000_000
"""The tests' wall-clock start, in nanoseconds."""


class Clock:
    """A clock the test moves."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", cbor.encode({"n": n}))


def key(n: int) -> bytes:
    return b"key-%d" % n


def retention(plane: Plane) -> int:
    return plane.config.inbox_retention_ns


def enqueue(plane: Plane, u: UniverseId, w: WorldId, n: int) -> InboxSeq:
    return plane.enqueue(u, w, event(n), idempotency_key=key(n))


def drain(plane: Plane, u: UniverseId, w: WorldId, max_items: int = 1_000) -> int:
    return plane.drain_inbox_to_journal(u, w, max_items=max_items).count


def compact(plane: Plane, u: UniverseId, w: WorldId, clock: Clock) -> InboxCompaction:
    """One whole pass (every chunk) at the clock's time."""
    return Compactor(plane, now_ns=clock).compact_world(u, w)[0]


def rows(engine: Engine, span: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return kv.run(engine, lambda tr: tr.get_range(*span))


def inbox_seqs(plane: Plane, u: UniverseId, w: WorldId) -> list[InboxSeq]:
    return [seq for seq, _ in plane.read_after(u, w, None, 10_000)]


def idempotency_keys(plane: Plane, u: UniverseId, w: WorldId) -> list[bytes]:
    keys = WorldKeys(u, w)
    prefix = len(keys.inbox_idempotency(b""))
    return [k[prefix - 1 : -1] for k, _ in rows(plane.engine, keys.inbox_idempotency_entries())]


def marks(plane: Plane, u: UniverseId, w: WorldId) -> list[tuple[int, InboxSeq]]:
    return kv.run(plane.engine, lambda tr: compaction.read_marks(tr, WorldKeys(u, w)))


def test_nothing_above_the_cursor_is_removed(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    seqs = [enqueue(plane, u, w, n) for n in range(5)]
    assert drain(plane, u, w, max_items=3) == 3
    assert compact(plane, u, w, clock) == InboxCompaction(marks_written=1)
    later = [enqueue(plane, u, w, n) for n in range(5, 7)]
    clock.now += 100 * retention(plane)
    done = compact(plane, u, w, clock)
    assert (done.items, done.idempotency_entries) == (3, 3)
    assert inbox_seqs(plane, u, w) == seqs[3:] + later
    assert idempotency_keys(plane, u, w) == [key(n) for n in range(3, 7)]
    assert plane.inbox_cursor(u, w) == seqs[2]  # the cursor stays; its item is gone
    assert enqueue(plane, u, w, 4) == seqs[4]  # undrained: deduplicated however old
    assert drain(plane, u, w) == 4
    assert plane.inbox_cursor(u, w) == later[-1]


def test_the_window_edge_one_nanosecond_either_side(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    seqs = [enqueue(plane, u, w, n) for n in range(3)]
    drain(plane, u, w)
    assert compact(plane, u, w, clock).marks_written == 1  # consumed by T0
    clock.now = T0 + retention(plane) - 1
    assert compact(plane, u, w, clock) == InboxCompaction()
    assert inbox_seqs(plane, u, w) == seqs
    assert enqueue(plane, u, w, 0) == seqs[0]
    clock.now = T0 + retention(plane) + 1
    assert compact(plane, u, w, clock) == InboxCompaction(3, 3)
    assert inbox_seqs(plane, u, w) == []


@pytest.mark.parametrize(("offset", "removed"), [(-1, 0), (0, 2), (1, 2)])
def test_a_mark_exactly_the_window_old_covers_its_items(offset: int, removed: int) -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w, clock = UniverseId.new(), WorldId.new(), Clock()
    plane.create_world(u, w)
    enqueue(plane, u, w, 1), enqueue(plane, u, w, 2)
    drain(plane, u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane) + offset
    assert compact(plane, u, w, clock).items == removed


def test_nothing_consumed_less_than_the_window_ago_is_removed(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Items drained after the last mark wait for a mark of their own to age: the clock
    alone never removes them, however late it is."""
    u, w, clock = universe, world, Clock()
    early = [enqueue(plane, u, w, n) for n in range(2)]
    drain(plane, u, w)
    compact(plane, u, w, clock)  # marks the cursor at T0
    late = [enqueue(plane, u, w, n) for n in range(2, 4)]
    clock.now += 1
    drain(plane, u, w)  # consumed after T0, before any mark of it
    clock.now = T0 + 5 * retention(plane)
    done = compact(plane, u, w, clock)
    assert (done.items, done.marks_written) == (2, 1)  # the late ones are marked now
    assert inbox_seqs(plane, u, w) == late
    assert [enqueue(plane, u, w, n) for n in range(2, 4)] == late
    clock.now += retention(plane) - 1
    assert compact(plane, u, w, clock).items == 0
    clock.now += 1
    assert compact(plane, u, w, clock).items == 2
    assert inbox_seqs(plane, u, w) == [] and early[1] < late[0]


def test_a_retry_inside_the_window_returns_the_first_sequence_across_compaction(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    first = enqueue(plane, u, w, 1)
    drain(plane, u, w)
    assert compact(plane, u, w, clock).marks_written == 1
    for step in (1, retention(plane) // 2, retention(plane) // 2 - 2):
        clock.now += step
        assert compact(plane, u, w, clock) == InboxCompaction()  # the cursor has not moved
        assert enqueue(plane, u, w, 1) == first
    assert clock.now == T0 + retention(plane) - 1
    assert inbox_seqs(plane, u, w) == [first] and drain(plane, u, w) == 0


def test_after_the_window_a_retry_makes_a_new_item(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    first = enqueue(plane, u, w, 1)
    drain(plane, u, w)
    head = plane.head(u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    assert compact(plane, u, w, clock) == InboxCompaction(1, 1)
    again = enqueue(plane, u, w, 1)
    assert again > first and inbox_seqs(plane, u, w) == [again]
    assert enqueue(plane, u, w, 1) == again  # and the new item deduplicates in turn
    assert drain(plane, u, w) == 1 and plane.head(u, w) == head + 1


def test_an_enqueue_that_read_the_entry_conflicts_with_the_compaction_that_clears_it(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Enqueue first, compaction commits in between: the enqueue of a batch that writes
    aborts with 1020 (it read the entry), and its retry makes a new item; an enqueue that
    only found its entry writes nothing and serializes before the compaction."""
    u, w, clock = universe, world, Clock()
    keys = WorldKeys(u, w)
    first = enqueue(plane, u, w, 1)
    drain(plane, u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    envelopes = [InboxEnvelope(encode_inbox_item(event(n)), key(n)) for n in (1, 2)]
    writer = plane.engine.create_transaction()
    stored = [(e.idempotency_key, e.to_cbor()) for e in envelopes]
    pending = drive(inbox.enqueue(writer, keys, stored))
    reader = plane.engine.create_transaction()
    found = drive(inbox.enqueue(reader, keys, stored[:1]))
    assert pending.known == {0: first} and found.known == {0: first}
    assert compact(plane, u, w, clock) == InboxCompaction(1, 1)
    with pytest.raises(EngineError) as aborted:
        writer.commit().wait()
    assert aborted.value.code == fdb_errors.NOT_COMMITTED
    reader.commit().wait()  # read-only: it returned the first sequence, before the compaction
    seqs = plane.enqueue_batch(u, w, [event(1), event(2)], idempotency_keys=[key(1), key(2)])
    assert first < seqs[0] < seqs[1] and inbox_seqs(plane, u, w) == seqs


def test_a_compaction_that_read_the_entry_conflicts_with_an_enqueue_that_rewrote_it(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Compaction first, then another compaction and an enqueue of the same key commit in
    between: the first compaction aborts with 1020 instead of clearing the new item's entry
    (which would let a retry of that enqueue duplicate it)."""
    u, w, clock = universe, world, Clock()
    keys = WorldKeys(u, w)
    enqueue(plane, u, w, 1)
    drain(plane, u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    limits = CompactionLimits(retention(plane), 10, plane.config.read_page_bytes, plane.budget)
    slow = plane.engine.create_transaction()
    assert drive(compaction.compact(slow, keys, limits, clock, Call.new())) == InboxCompaction(1, 1)
    assert compact(plane, u, w, clock) == InboxCompaction(1, 1)  # another compactor
    again = enqueue(plane, u, w, 1)  # after the window: a new item and entry
    with pytest.raises(EngineError) as aborted:
        slow.commit().wait()
    assert aborted.value.code == fdb_errors.NOT_COMMITTED
    assert compact(plane, u, w, clock) == InboxCompaction()  # the retry finds nothing to do
    assert idempotency_keys(plane, u, w) == [key(1)]
    assert enqueue(plane, u, w, 1) == again and inbox_seqs(plane, u, w) == [again]


def test_an_enqueue_inside_the_window_does_not_disturb_a_compaction(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Compaction first, an enqueue of the same key in between: the enqueue finds the entry
    and writes nothing, so the compaction commits; the enqueue was inside the window."""
    u, w, clock = universe, world, Clock()
    keys = WorldKeys(u, w)
    first = enqueue(plane, u, w, 1)
    drain(plane, u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    limits = CompactionLimits(retention(plane), 10, plane.config.read_page_bytes, plane.budget)
    tr = plane.engine.create_transaction()
    assert drive(compaction.compact(tr, keys, limits, clock, Call.new())) == InboxCompaction(1, 1)
    assert enqueue(plane, u, w, 1) == first
    tr.commit().wait()
    assert inbox_seqs(plane, u, w) == [] and idempotency_keys(plane, u, w) == []


def test_chunked_passes_resume(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    u, w, clock = universe, world, Clock()
    plane.enqueue_batch(
        u, w, [event(n) for n in range(10)], idempotency_keys=[*map(key, range(10))]
    )
    drain(plane, u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    chunks = []
    for _ in range(3):  # a pass stopped after three chunks, resumed by another compactor
        chunks.append(plane.compact_inbox(u, w, max_items=3, now_ns=clock))
    assert chunks == [InboxCompaction(3, 3, more=True)] * 3
    assert len(inbox_seqs(plane, u, w)) == 1
    totals = Compactor(plane, max_items=3, now_ns=clock).run([u])
    assert (totals.worlds, totals.transactions) == (1, 1)
    assert totals.compaction == InboxCompaction(1, 1)
    assert inbox_seqs(plane, u, w) == [] and idempotency_keys(plane, u, w) == []
    assert plane.compact_inbox(u, w, max_items=3, now_ns=clock) == InboxCompaction()


def test_marks_stay_bounded(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    """A pass every 32nd of the window while items keep coming: every other pass marks the
    cursor (marks are a 16th of the window apart), and the 17th mark back expires and takes
    the older ones with it."""
    u, w, clock = universe, world, Clock()
    step = math.ceil(retention(plane) / 32)
    counts = []
    for n in range(80):
        enqueue(plane, u, w, n)
        drain(plane, u, w)
        assert compact(plane, u, w, clock).marks_written == (n % 2 == 0)
        counts.append(len(marks(plane, u, w)))
        clock.now += step
    assert max(counts) == counts[-1] == MAX_MARKS == 17
    # the last pass (79) removed through the boundary: the newest mark 32 steps old (46)
    assert len(inbox_seqs(plane, u, w)) == 79 - 46


def test_a_world_never_drained_gets_no_mark_and_loses_nothing(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    seqs = [enqueue(plane, u, w, n) for n in range(3)]
    for _ in range(3):
        assert compact(plane, u, w, clock) == InboxCompaction()
        clock.now += 10 * retention(plane)
    assert inbox_seqs(plane, u, w) == seqs and marks(plane, u, w) == []


def test_an_item_skipped_with_commit_cursor_is_consumed(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    seqs = [enqueue(plane, u, w, n) for n in range(2)]
    plane.commit_cursor(u, w, None, seqs[0])
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    assert compact(plane, u, w, clock) == InboxCompaction(1, 1)
    assert inbox_seqs(plane, u, w) == seqs[1:]


def test_fsck_is_clean_after_compaction(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    u, w, clock = universe, world, Clock()
    for n in range(6):
        enqueue(plane, u, w, n)
    drain(plane, u, w, max_items=4)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    assert compact(plane, u, w, clock).items == 4
    report = Fsck(plane).run([u])
    assert report.errors == [], report.errors


def test_fsck_reports_a_consumed_mark_above_the_cursor(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w, clock = universe, world, Clock()
    for n in range(3):
        enqueue(plane, u, w, n)
    drain(plane, u, w, max_items=1)
    compact(plane, u, w, clock)
    assert Fsck(plane).run([u]).errors == []
    # A damaged mark naming the last, undrained item: compaction would remove it.
    undrained = inbox_seqs(plane, u, w)[-1]
    keys = WorldKeys(u, w)
    kv.run_sync(
        plane.engine,
        lambda tr: tr.set(
            keys.inbox_consumed_mark(clock.now + 1), InboxConsumedMark(undrained).to_cbor()
        ),
    )
    (finding,) = Fsck(plane).run([u]).errors
    assert finding.area == "inbox" and "above the cursor" in finding.message


def test_fsck_reports_an_item_whose_idempotency_entry_is_gone(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w = universe, world
    for n in range(3):
        enqueue(plane, u, w, n)
    drain(plane, u, w, max_items=1)
    assert Fsck(plane).run([u]).errors == []
    entry = WorldKeys(u, w).inbox_idempotency(key(2))
    kv.run_sync(plane.engine, lambda tr: tr.clear(entry))
    (finding,) = Fsck(plane).run([u]).errors
    assert finding.subject == f"item {inbox_seqs(plane, u, w)[-1]}"
    assert "is missing" in finding.message and "duplicate" in finding.message


def test_fsck_warns_of_a_mark_dated_in_the_future(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    u, w = universe, world
    enqueue(plane, u, w, 0)
    drain(plane, u, w)
    ahead = Clock(time.time_ns() + 3_600 * 10**9)  # a compactor whose clock is an hour fast
    compact(plane, u, w, ahead)
    report = Fsck(plane).run([u])
    assert report.errors == []
    (warning,) = report.warnings
    assert warning.area == "inbox" and "runs ahead" in warning.message


def four_consumed_and_marked() -> tuple[FaultInjector, Plane, UniverseId, WorldId, Clock]:
    """A world on a fault-injected memory engine with 4 items drained and marked consumed
    at the clock's time (so they are removable one window later)."""
    injector = FaultInjector()
    plane = open_plane(FaultyEngine(MemoryEngine(), injector), MemoryObjectStore())
    u, w, clock = UniverseId.new(), WorldId.new(), Clock()
    plane.create_world(u, w)
    for n in range(4):
        enqueue(plane, u, w, n)
    drain(plane, u, w)
    compact(plane, u, w, clock)
    return injector, plane, u, w, clock


def test_a_retry_after_an_applied_unknown_result_reports_what_it_removed() -> None:
    injector, plane, u, w, clock = four_consumed_and_marked()
    clock.now += retention(plane)
    injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    assert plane.compact_inbox(u, w, max_items=3, now_ns=clock) == InboxCompaction(3, 3, more=True)
    assert ("commit", (injector.commits, fdb_errors.COMMIT_UNKNOWN_RESULT, True)) in injector.log
    assert plane.compact_inbox(u, w, max_items=3, now_ns=clock) == InboxCompaction(1, 1)


def test_a_late_attempt_is_reported_when_the_clock_steps_back_before_the_retry() -> None:
    """The first attempt removes 4 items and is held (a late 1021); the clock then steps back
    1 ns (an NTP step). The retry must still see that work, write, and so report it."""
    injector, plane, u, w, _ = four_consumed_and_marked()
    readings = iter([T0 + retention(plane), T0 + retention(plane) - 1])
    injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, late=True)
    assert plane.compact_inbox(u, w, now_ns=lambda: next(readings)) == InboxCompaction(4, 4)
    assert ("late", "landed") in injector.log
    assert inbox_seqs(plane, u, w) == []


def test_a_pass_is_bounded_by_the_transaction_budget() -> None:
    """Long idempotency keys cost a read and a clear each: a small size limit takes fewer
    items per transaction, never a transaction over the budget."""
    engine = MemoryEngine()
    engine.size_limit = 20_000
    plane = open_plane(engine, MemoryObjectStore())
    u, w, clock = UniverseId.new(), WorldId.new(), Clock()
    plane.create_world(u, w)
    for n in range(30):
        plane.enqueue(u, w, event(n), idempotency_key=bytes([n]) * 256)
    drain(plane, u, w)
    compact(plane, u, w, clock)
    clock.now += retention(plane)
    first = plane.compact_inbox(u, w, max_items=1_000, now_ns=clock)
    assert first.more and 1 <= first.items < 30
    assert compact(plane, u, w, clock).items == 30 - first.items


def test_compaction_refuses_bad_input() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    for bad in (0, -1.0, math.nan, math.inf, True, "1", 1e-10, 11 * 365 * 86_400.0):
        with pytest.raises(Validation) as refused:
            PlaneConfig(inbox_retention_seconds=bad)  # type: ignore[arg-type]
        assert refused.value.field == "PlaneConfig.inbox_retention_seconds"
    for max_items in (0, True, 10_001):
        with pytest.raises(Validation, match="max_items"):
            plane.compact_inbox(u, w, max_items=max_items)
    with pytest.raises(Validation, match="now_ns"):
        plane.compact_inbox(u, w, now_ns=17)  # type: ignore[arg-type]
    enqueue(plane, u, w, 1)
    drain(plane, u, w)
    for clock in (lambda: -1, lambda: 1.5, lambda: 2**64):
        with pytest.raises(Validation, match="now_ns"):
            plane.compact_inbox(u, w, now_ns=clock)  # type: ignore[arg-type]
    assert marks(plane, u, w) == []
    with pytest.raises(WorldNotFound):
        plane.compact_inbox(u, WorldId.new())


def test_the_budget_bounds_what_compaction_writes() -> None:
    most = 2**64 - 1
    outcome = InboxCompactionRecord(most, most, most, most, True).to_cbor()
    call_record = CallRecord(compaction.OP, value=outcome).to_cbor()
    assert len(call_record) <= budget.COMPACTION_RECORD_BYTES
    assert len(InboxConsumedMark(InboxSeq(b"\xfe" * 12)).to_cbor()) <= budget.MARK_BYTES


def test_one_compaction_with_a_clock_far_ahead_does_not_stop_compaction_for_good(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """A pass whose clock read the far future left a mark no correct clock would judge old
    (issue #35: later passes removed nothing, for good). A pass with a correct clock drops
    marks dated beyond its time plus the window, so compaction resumes: items consumed
    before and after the bad pass are removed once a correct mark is the window old."""
    u, w = universe, world
    for n in range(3):
        enqueue(plane, u, w, n)
    drain(plane, u, w)
    compact(plane, u, w, Clock(budget.LATEST_NS))  # one bad clock
    assert [at for at, _ in marks(plane, u, w)] == [budget.LATEST_NS]
    clock = Clock()
    first = compact(plane, u, w, clock)
    assert first.marks_removed == 1 and first.marks_written == 1 and first.items == 0
    assert [at for at, _ in marks(plane, u, w)] == [clock.now]
    enqueue(plane, u, w, 3)
    drain(plane, u, w)
    clock.now += retention(plane) // 8
    compact(plane, u, w, clock)  # marks the item drained after the bad pass
    clock.now += retention(plane)
    compact(plane, u, w, clock)
    assert inbox_seqs(plane, u, w) == [] and idempotency_keys(plane, u, w) == []
