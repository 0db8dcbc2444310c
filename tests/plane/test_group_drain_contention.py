"""A group drain is not stalled by one busy world: the world whose head moves under it is
left out of the retries, the others commit, and the busy one is drained alone; every item
lands in its journal once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine, MemoryTransaction
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors, kv
from persistence.errors import Contended, HeadAdvanced, Validation, WorldNotFound
from persistence.futures import Failed, Future, Ready, drive
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, InboxItem
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.keyspace import WorldKeys
from persistence.kv import Engine
from persistence.plane import AsyncPlane, Plane, default_normalizer
from persistence.plane.inbox import BUSY_ATTEMPTS
from persistence.protocols.drain import CALM_DRAINS, DrainResult
from persistence.workers.drain_worker import DrainWorker

T = TypeVar("T")
ITEM = DomainEventIngress("test/Event@1", b"\xa0")
REFUSED = DomainEventIngress("test/Refused@1", b"\xa0")


def refusing(seq: InboxSeq, item: InboxItem) -> bytes:
    """The default normalizer, refusing :data:`REFUSED` items (``Validation``)."""
    if isinstance(item, DomainEventIngress) and item.schema == "test/Refused@1":
        raise Validation("item", "refused by the test's normalizer")
    return default_normalizer(seq, item)


class ContendedEngine(MemoryEngine):
    """Before a transaction that moves ``watched`` (a cursor) commits, another writer runs
    ``competitor`` (an append to another world), ``hits_left`` times."""

    def __init__(self, watched: bytes, competitor: Callable[[], object], hits: int) -> None:
        super().__init__()
        self.watched, self.competitor, self.hits_left = watched, competitor, hits

    def create_transaction(self) -> MemoryTransaction:
        return _Contended(self)


class _Contended(MemoryTransaction):
    def _fresh(self) -> MemoryTransaction:
        return _Contended(self._engine)

    def commit(self) -> Future[None]:
        engine = self._engine
        assert isinstance(engine, ContendedEngine)
        writes = self.buffer.final_writes(lambda _: None, bytes(10))
        if engine.hits_left and any(key == engine.watched for key, _ in writes):
            engine.hits_left -= 1
            engine.competitor()
        return super().commit()


def ingress(plane: Plane, universe: UniverseId, world: WorldId) -> int:
    """Drained items in the world's whole journal, read in pages: an appender can put tens
    of thousands of entries before, between and after them."""
    count, height, head = 0, 1, plane.head(universe, world)
    while height <= head:
        rows = plane.read_range(universe, world, height, 10_000)
        count += sum(isinstance(decode_journal_record(e), IngressJournalRecord) for _, e in rows)
        height = rows[-1][0] + 1
    return count


def test_a_world_whose_head_moves_under_the_group_is_drained_alone() -> None:
    """Every attempt of a group drain that moves ``calm``'s cursor meets an append to
    ``busy`` before it commits: the first fails (its read of busy's head conflicts), the
    retry leaves busy out and commits; busy is then drained alone."""
    u = UniverseId.new()
    calm, busy, other = WorldId.new(), WorldId.new(), WorldId.new()
    appended: list[int] = []
    holder: list[Plane] = []

    def append_to_busy() -> None:
        plane = holder[0]
        appended.append(plane.append_batch(u, busy, plane.head(u, busy), [b"other writer"]))

    engine = ContendedEngine(WorldKeys(u, calm).inbox_cursor(), append_to_busy, hits=50)
    plane = Plane(engine, MemoryObjectStore())
    holder.append(plane)
    for world in (calm, busy, other):
        plane.create_world(u, world)
        plane.enqueue_batch(u, world, [ITEM] * 3)
    results = plane.drain_worlds(u, [calm, busy, other], max_items=10)
    assert [results[w].count for w in (calm, busy, other)] == [3, 3, 3]
    assert [results[w].contended for w in (calm, busy, other)] == [False, True, False]
    assert [results[w].more for w in (calm, busy, other)] == [False, False, False]
    assert [ingress(plane, u, w) for w in (calm, busy, other)] == [3, 3, 3]
    assert len(appended) == 2  # before the failed attempt, and before the one without busy
    assert plane.head(u, busy) == 3 + len(appended)


def test_group_drains_keep_moving_under_a_continuous_appender(engine: Engine) -> None:
    """A thread appends to one world of the group without pause while group drains of six
    worlds take everything enqueued: no drain fails (no timeout, no retry limit), and each
    item is journaled once -- on every engine, a real FoundationDB cluster included."""
    plane = Plane(engine, MemoryObjectStore())
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(6)]
    for world in worlds:
        plane.create_world(u, world)
    busy = worlds[2]
    stop, running = threading.Event(), threading.Event()
    appended = [0]
    failed: list[BaseException] = []

    def appender() -> None:
        try:
            while not stop.is_set():
                try:
                    plane.append_batch(u, busy, plane.head(u, busy), [b"appended"])
                except HeadAdvanced:  # a drain appended to it meanwhile
                    continue
                appended[0] += 1
                running.set()
        except BaseException as exc:  # reported by the test
            failed.append(exc)
        finally:
            running.set()

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        assert running.wait(60), "the appender did not append within 60 s"
        for round_ in range(8):
            for world in worlds:
                plane.enqueue_batch(u, world, [ITEM] * 5)
            deadline = time.monotonic() + 60
            while True:
                results = plane.drain_worlds(u, worlds, max_items=20)
                if not any(r.more for r in results.values()):
                    break
                assert time.monotonic() < deadline, f"round {round_}: {results}"
    finally:
        stop.set()
        thread.join()
    assert not failed, failed
    assert [ingress(plane, u, w) for w in worlds] == [40] * 6
    assert appended[0] > 0


def test_a_busy_world_that_keeps_conflicting_is_left_for_a_later_drain() -> None:
    """Every commit that moves ``busy``'s cursor meets an append to it first: the group
    leaves busy out, and its drain alone gives up after ``BUSY_ATTEMPTS`` attempts that
    conflicted -- busy's result is the group's (nothing drained, ``more``), the call does
    not wait on it. The plane remembers busy: the next group leaves it out from its first
    attempt. Once the appends stop, busy's drains alone commit, and busy is forgotten after
    ``CALM_DRAINS`` of them in a row."""
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    holder: list[Plane] = []

    def append_to_busy() -> None:
        plane = holder[0]
        plane.append_batch(u, busy, plane.head(u, busy), [b"other writer"])

    engine = ContendedEngine(WorldKeys(u, busy).inbox_cursor(), append_to_busy, hits=1_000)
    plane = Plane(engine, MemoryObjectStore())
    holder.append(plane)
    for world in (calm, busy):
        plane.create_world(u, world)
        plane.enqueue_batch(u, world, [ITEM] * 3)
    hits = engine.hits_left
    results = plane.drain_worlds(u, [calm, busy], max_items=10)
    assert (results[calm].count, results[calm].contended) == (3, False)
    assert (results[busy].count, results[busy].contended, results[busy].more) == (0, True, True)
    # the group's first attempt (its retry left busy out), then the drain alone's attempts
    assert hits - engine.hits_left == 1 + BUSY_ATTEMPTS
    assert ingress(plane, u, busy) == 0
    assert plane.busy_worlds.among([WorldKeys(u, busy), WorldKeys(u, calm)]) == {busy}

    plane.enqueue_batch(u, calm, [ITEM] * 2)
    hits = engine.hits_left
    results = plane.drain_worlds(u, [calm, busy], max_items=10)
    assert (results[calm].count, results[busy].count) == (2, 0)
    assert hits - engine.hits_left == BUSY_ATTEMPTS  # the group did not meet busy at all

    engine.hits_left = 0  # the appends stop
    results = plane.drain_worlds(u, [calm, busy], max_items=10)
    assert (results[busy].count, results[busy].contended, results[busy].more) == (3, True, False)
    assert ingress(plane, u, busy) == 3
    for _ in range(CALM_DRAINS - 1):  # drained alone, calm, until it is forgotten
        assert plane.busy_worlds.among([WorldKeys(u, busy)]) == {busy}
        plane.enqueue_batch(u, busy, [ITEM])
        assert plane.drain_worlds(u, [calm, busy], max_items=10)[busy].contended
    assert plane.busy_worlds.among([WorldKeys(u, busy)]) == set()
    plane.enqueue_batch(u, busy, [ITEM])
    results = plane.drain_worlds(u, [calm, busy], max_items=10)
    assert (results[busy].count, results[busy].contended) == (1, False)  # in the group again
    assert ingress(plane, u, busy) == 3 + CALM_DRAINS


class ScriptedEngine(MemoryEngine):
    """Commits fail with the codes of ``script``, in turn, before committing (or not)."""

    def __init__(self, script: list[int]) -> None:
        super().__init__()
        self.script = script

    def create_transaction(self) -> MemoryTransaction:
        return _Scripted(self)


class _Scripted(MemoryTransaction):
    def _fresh(self) -> MemoryTransaction:
        return _Scripted(self._engine)

    def commit(self) -> Future[None]:
        engine = self._engine
        assert isinstance(engine, ScriptedEngine)
        if engine.script:
            code = engine.script.pop(0)
            if code == fdb_errors.COMMIT_UNKNOWN_RESULT:  # committed, and not told so
                super().commit().wait()
            return Failed(fdb_errors.engine_error(code, "scripted"))
        return super().commit()


def _write(tr: kv.Transaction) -> Future[None]:
    tr.set(b"k", b"v")
    return Ready(None)


def test_transact_gives_up_only_after_conflicts_that_left_nothing_committed() -> None:
    """``conflicts=2``: two conflicts in a row are ``Contended`` (neither attempt committed);
    a maybe-committed error before them turns the limit off, for the retry loop (and the
    call record) to settle what happened."""
    engine = ScriptedEngine([fdb_errors.NOT_COMMITTED] * 2)
    with pytest.raises(Contended) as raised:
        drive(kv.transact(engine, _write, conflicts=2))
    assert raised.value.attempts == 2
    assert kv.run(engine, lambda tr: tr.get(b"k")) is None

    engine.script = [fdb_errors.NOT_COMMITTED, fdb_errors.NOT_COMMITTED]
    engine.script.insert(1, fdb_errors.COMMIT_UNKNOWN_RESULT)
    drive(kv.transact(engine, _write, conflicts=2))  # retried to the end
    assert engine.script == []
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"v"

    engine.script = [fdb_errors.NOT_COMMITTED]
    drive(kv.transact(engine, _write, conflicts=2))  # one conflict, then the commit
    assert engine.script == []


class InFlightEngine(MemoryEngine):
    """From :meth:`expect`, a commit's outcome is known only once ``together`` commits have
    been issued, each applied then: commits issued one after another wait for the next one
    that never comes (and fail after 10 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.together = 0
        self.issued = 0
        self.opened = threading.Event()

    def expect(self, together: int) -> None:
        self.together, self.issued = together, 0
        self.opened.clear()

    def create_transaction(self) -> MemoryTransaction:
        return _InFlight(self)


class _InFlight(MemoryTransaction):
    def _fresh(self) -> MemoryTransaction:
        return _InFlight(self._engine)

    def commit(self) -> Future[None]:
        engine = self._engine
        assert isinstance(engine, InFlightEngine)
        if not engine.together:
            return super().commit()
        engine.issued += 1
        if engine.issued == engine.together:
            engine.opened.set()
        return _Gated(engine, super().commit)


class _Gated(Future[None]):
    """A commit applied once the engine's gate opens; failed if it stays shut for 10 s."""

    def __init__(self, engine: InFlightEngine, commit: Callable[[], Future[None]]) -> None:
        self._engine, self._commit = engine, commit
        self._outcome: Future[None] | None = None
        self._deadline = time.monotonic() + 10

    def poll(self) -> bool:
        if self._outcome is None:
            if self._engine.opened.is_set():
                self._outcome = self._commit()
            elif time.monotonic() >= self._deadline:
                shut = AssertionError("a commit waited 10 s: commits not in flight together")
                self._outcome = Failed(shut)
        return self._outcome is not None

    def result(self) -> None:
        assert self._outcome is not None
        return self._outcome.result()

    def block(self) -> None:
        self._engine.opened.wait(max(0.0, self._deadline - time.monotonic()))

    def notify(self, callback: Callable[[], object]) -> None:
        def wake() -> None:
            self.block()
            callback()

        threading.Thread(target=wake).start()


@pytest.mark.parametrize("door", ["sync", "asyncio"])
def test_a_world_known_busy_is_drained_beside_the_group(door: str) -> None:
    """A world an earlier drain found busy is left out of the group from its first attempt
    and drained alone with its transaction in flight beside the group's: each commit's
    outcome is known only once both are issued, so a drain alone that waited for the group
    would never commit. Both doors run the same protocol code."""
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    engine = InFlightEngine()
    plane = Plane(engine, MemoryObjectStore())
    for world in (calm, busy):
        plane.create_world(u, world)
        plane.enqueue_batch(u, world, [ITEM] * 3)
    async_plane = AsyncPlane(engine, MemoryObjectStore())
    (plane if door == "sync" else async_plane).busy_worlds.note(WorldKeys(u, busy), True)
    engine.expect(together=2)
    if door == "sync":
        results = plane.drain_worlds(u, [calm, busy], max_items=10)
    else:
        results = asyncio.run(async_plane.drain_worlds(u, [calm, busy], max_items=10))
    assert engine.issued == 2  # the group's commit and the drain alone's
    assert [(results[w].count, results[w].contended) for w in (calm, busy)] == [
        (3, False),
        (3, True),
    ]
    engine.expect(together=0)
    assert [ingress(plane, u, w) for w in (calm, busy)] == [3, 3]


class CommitOrderEngine(MemoryEngine):
    """Records, for each commit, the worlds whose inbox cursor it moves (``cursors``)."""

    def __init__(self, cursors: dict[bytes, WorldId]) -> None:
        super().__init__()
        self.cursors = cursors
        self.commits: list[set[WorldId]] = []

    def create_transaction(self) -> MemoryTransaction:
        return _CommitOrder(self)


class _CommitOrder(MemoryTransaction):
    def _fresh(self) -> MemoryTransaction:
        return _CommitOrder(self._engine)

    def commit(self) -> Future[None]:
        engine = self._engine
        assert isinstance(engine, CommitOrderEngine)
        writes = self.buffer.final_writes(lambda _: None, bytes(10))
        moved = {engine.cursors[key] for key, _ in writes if key in engine.cursors}
        if moved:
            engine.commits.append(moved)
        return super().commit()


@pytest.mark.parametrize("door", ["sync", "asyncio"])
def test_the_drain_beside_issues_its_commit_before_the_group(door: str) -> None:
    """The group waits, once built, until each drain beside has issued its commit: issued
    after the group's larger one, the drain beside's landed in the cluster's next commit
    batch, and the call waited for it (~7 ms of a 75 ms call on a real cluster)."""
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    engine = CommitOrderEngine({WorldKeys(u, w).inbox_cursor(): w for w in (calm, busy)})
    plane = Plane(engine, MemoryObjectStore())
    for world in (calm, busy):
        plane.create_world(u, world)
        plane.enqueue_batch(u, world, [ITEM] * 3)
    async_plane = AsyncPlane(engine, MemoryObjectStore())
    (plane if door == "sync" else async_plane).busy_worlds.note(WorldKeys(u, busy), True)
    if door == "sync":
        results = plane.drain_worlds(u, [calm, busy], max_items=10)
    else:
        results = asyncio.run(async_plane.drain_worlds(u, [calm, busy], max_items=10))
    assert [(results[w].count, results[w].contended) for w in (calm, busy)] == [
        (3, False),
        (3, True),
    ]
    assert engine.commits == [{busy}, {calm}]


@pytest.mark.parametrize("failure", ["missing world", "refused item"])
def test_a_drain_beside_a_group_that_fails_commits_nothing(failure: str) -> None:
    """A group drain that fails while a known-busy world is drained beside it (a world of
    the group is missing, or its item is one the normalizer refuses): the call raises the
    group's error, and the drain beside, which commits only once the group has built its
    transaction, commits nothing -- the call writes nothing, as drain_worlds says."""
    u = UniverseId.new()
    busy, other = WorldId.new(), WorldId.new()
    plane = Plane(MemoryEngine(), MemoryObjectStore())
    plane.create_world(u, busy)
    plane.enqueue_batch(u, busy, [ITEM] * 3)
    if failure == "refused item":
        plane.create_world(u, other)
        plane.enqueue_batch(u, other, [DomainEventIngress("test/Refused@1", b"\xa0")])
    plane.busy_worlds.note(WorldKeys(u, busy), True)

    def normalize(seq: InboxSeq, item: InboxItem) -> bytes:
        if isinstance(item, DomainEventIngress) and item.schema == "test/Refused@1":
            raise Validation("item", "refused by the test's normalizer")
        return default_normalizer(seq, item)

    expected = WorldNotFound if failure == "missing world" else Validation
    with pytest.raises(expected):
        plane.drain_worlds(u, [busy, other], max_items=10, normalize=normalize)
    assert ingress(plane, u, busy) == 0
    assert plane.drain_worlds(u, [busy], max_items=10)[busy].count == 3


def _busy_beside(plane: Plane, u: UniverseId, busy: WorldId) -> None:
    plane.create_world(u, busy)
    plane.enqueue_batch(u, busy, [ITEM] * 3)
    plane.busy_worlds.note(WorldKeys(u, busy), True)


def test_an_interrupt_in_the_group_does_not_start_the_drain_beside() -> None:
    """A Ctrl-C while the group runs (in its normalizer, on the memory engine where the
    group runs through in one step) ends the call: the known-busy world's drain beside it
    never commits."""
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    plane = Plane(MemoryEngine(), MemoryObjectStore())
    plane.create_world(u, calm)
    plane.enqueue_batch(u, calm, [ITEM] * 3)
    _busy_beside(plane, u, busy)
    calls: list[InboxSeq] = []

    def normalize(seq: InboxSeq, item: InboxItem) -> bytes:
        calls.append(seq)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return default_normalizer(seq, item)

    with pytest.raises(KeyboardInterrupt):
        plane.drain_worlds(u, [calm, busy], max_items=10, normalize=normalize)
    assert [ingress(plane, u, w) for w in (calm, busy)] == [0, 0]


def test_an_interrupt_in_the_drain_beside_is_not_hidden_by_the_groups_error() -> None:
    """The drain beside is interrupted while the group fails on a missing world: the call
    raises the interrupt."""
    u = UniverseId.new()
    busy, missing = WorldId.new(), WorldId.new()
    plane = Plane(MemoryEngine(), MemoryObjectStore())
    _busy_beside(plane, u, busy)

    def normalize(seq: InboxSeq, item: InboxItem) -> bytes:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plane.drain_worlds(u, [busy, missing], max_items=10, normalize=normalize)
    assert ingress(plane, u, busy) == 0


def test_a_refused_item_in_the_drain_beside_withdraws_the_group() -> None:
    """The normalizer refuses the known-busy world's item, drained beside the group: the
    group, which commits only once the drain beside has built its transaction, commits
    nothing either -- the call writes nothing, as drain_worlds says."""
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    plane = Plane(MemoryEngine(), MemoryObjectStore())
    plane.create_world(u, calm)
    plane.enqueue_batch(u, calm, [ITEM] * 3)
    plane.create_world(u, busy)
    plane.enqueue_batch(u, busy, [DomainEventIngress("test/Refused@1", b"\xa0")])
    plane.busy_worlds.note(WorldKeys(u, busy), True)

    def normalize(seq: InboxSeq, item: InboxItem) -> bytes:
        if isinstance(item, DomainEventIngress) and item.schema == "test/Refused@1":
            raise Validation("item", "refused by the test's normalizer")
        return default_normalizer(seq, item)

    with pytest.raises(Validation):
        plane.drain_worlds(u, [calm, busy], max_items=10, normalize=normalize)
    assert [ingress(plane, u, w) for w in (calm, busy)] == [0, 0]


def _appended_before_calms_commits(
    hits: int,
) -> tuple[Plane, ContendedEngine, UniverseId, WorldId, WorldId]:
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    holder: list[Plane] = []

    def append_to_busy() -> None:  # busy's appender, before every commit moving calm's cursor
        plane = holder[0]
        plane.append_batch(u, busy, plane.head(u, busy), [b"other writer"])

    engine = ContendedEngine(WorldKeys(u, calm).inbox_cursor(), append_to_busy, hits=hits)
    plane = Plane(engine, MemoryObjectStore())
    holder.append(plane)
    for world in (calm, busy):
        plane.create_world(u, world)
    return plane, engine, u, calm, busy


def test_a_world_the_groups_retries_found_busy_is_remembered() -> None:
    """A world the group's own retries found busy is remembered even when its drain alone
    then commits at once (it is short): later groups leave it out from their first attempt
    instead of conflicting and running twice, call after call."""
    plane, engine, u, calm, busy = _appended_before_calms_commits(1_000)
    group_attempts, reported = [], 0
    for _ in range(3):
        for world in (calm, busy):
            plane.enqueue_batch(u, world, [ITEM] * 3)
        hits = engine.hits_left
        results = plane.drain_worlds(u, [calm, busy], max_items=10)
        assert results[busy].contended
        reported += results[busy].count
        group_attempts.append(hits - engine.hits_left)
    assert group_attempts == [2, 1, 1]  # the first group met the conflict; then busy was known
    assert plane.busy_worlds.among([WorldKeys(u, busy)]) == {busy}
    assert ingress(plane, u, busy) == reported  # the drains beside that committed, once each


def test_drains_alone_that_take_nothing_do_not_prove_a_world_calm() -> None:
    """A drain that takes nothing reads nothing with a conflict, so it commits at once
    whatever the world's appender does: such drains do not count toward forgetting it."""
    plane, engine, u, calm, busy = _appended_before_calms_commits(1_000)
    plane.busy_worlds.note(WorldKeys(u, busy), True)
    for _ in range(CALM_DRAINS):  # busy's appender keeps going; its inbox stays empty
        plane.enqueue_batch(u, calm, [ITEM])
        plane.drain_worlds(u, [calm, busy], max_items=10)
    assert plane.busy_worlds.among([WorldKeys(u, busy)]) == {busy}
    plane.enqueue_batch(u, calm, [ITEM])
    plane.enqueue_batch(u, busy, [ITEM])
    hits = engine.hits_left
    plane.drain_worlds(u, [calm, busy], max_items=10)
    assert hits - engine.hits_left == 1  # the group left busy out: it did not run twice


def test_a_refused_item_in_one_drain_beside_leaves_the_others_uncommitted() -> None:
    """Two known-busy worlds drained beside the group; the normalizer refuses the first
    one's item: neither the group nor the other drain beside commits (the group opens its
    latch only once every drain beside has built its transaction)."""
    u = UniverseId.new()
    calm, bad, good = WorldId.new(), WorldId.new(), WorldId.new()
    plane = Plane(MemoryEngine(), MemoryObjectStore())
    for world in (calm, bad, good):
        plane.create_world(u, world)
    plane.enqueue_batch(u, calm, [ITEM] * 3)
    plane.enqueue_batch(u, bad, [REFUSED])
    plane.enqueue_batch(u, good, [ITEM] * 3)
    plane.busy_worlds.note(WorldKeys(u, bad), True)
    plane.busy_worlds.note(WorldKeys(u, good), True)
    with pytest.raises(Validation):
        plane.drain_worlds(u, [calm, bad, good], max_items=10, normalize=refusing)
    assert [ingress(plane, u, w) for w in (calm, bad, good)] == [0, 0, 0]


def test_a_group_retry_that_fails_leaves_the_drain_beside_committed() -> None:
    """What the docs admit: the group's first attempt is built (the drain beside commits)
    and meets a conflict; between the attempts an item the normalizer refuses reaches one
    of its worlds, so the retry fails with Validation. The drain beside stays committed --
    its items journaled once, and the next drain goes on after them."""
    u = UniverseId.new()
    calm1, calm2, busy = WorldId.new(), WorldId.new(), WorldId.new()
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    plane = Plane(engine, MemoryObjectStore())
    other = Plane(engine.inner, MemoryObjectStore())  # another client of the same store
    for world in (calm1, calm2, busy):
        plane.create_world(u, world)
        plane.enqueue_batch(u, world, [ITEM] * 3)
    plane.busy_worlds.note(WorldKeys(u, busy), True)

    def competitor() -> None:
        other.append_batch(u, calm1, other.head(u, calm1), [b"appended"])
        other.enqueue_batch(u, calm2, [REFUSED])

    # the group's: the drain beside issues its commit first
    injector.fail_commit(2, fdb_errors.NOT_COMMITTED, interleave=competitor)
    told: list[dict[WorldId, DrainResult]] = []
    with pytest.raises(Validation):
        plane.drain_worlds(
            u, [calm1, calm2, busy], max_items=10, normalize=refusing, drained=told.append
        )
    assert [ingress(plane, u, w) for w in (calm1, calm2, busy)] == [0, 0, 3]
    # the call raised, yet it told of the drain beside that committed
    assert [{w: (r.count, r.contended) for w, r in t.items()} for t in told] == [{busy: (3, True)}]
    plane.enqueue_batch(u, busy, [ITEM])
    assert plane.drain_worlds(u, [busy], max_items=10)[busy].count == 1
    assert ingress(plane, u, busy) == 4


def _bounded(call: Callable[[], T], timeout: float = 60.0) -> T:
    """``call()`` on a thread of its own: a hang fails the test instead of hanging it."""
    out: list[T] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # re-raised below, on the test's thread
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the call hung for {timeout} s"
    if raised:
        raise raised[0]
    return out[0]


@pytest.mark.parametrize("door", ["sync", "asyncio"])
@pytest.mark.parametrize("seed", range(3))
def test_drains_beside_under_random_faults_journal_each_item_once(seed: int, door: str) -> None:
    """Random commit faults (1020, 1021 applied or not, 1007) and read faults while two
    known-busy worlds of four are drained beside the group, through either door: no hang,
    every item journaled once, and the counts reported equal the items journaled."""
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(4)]
    injector = FaultInjector(seed=seed)
    plane = Plane(FaultyEngine(MemoryEngine(), injector), MemoryObjectStore())
    door_plane = plane.asyncio()
    for world in worlds:
        plane.create_world(u, world)
    reported = dict.fromkeys(worlds, 0)

    def call() -> dict[WorldId, DrainResult]:
        if door == "sync":
            return plane.drain_worlds(u, worlds, max_items=3)
        return asyncio.run(door_plane.drain_worlds(u, worlds, max_items=3))

    injector.commit_fault_rate, injector.read_fault_rate = 0.3, 0.05
    for _ in range(15):
        for world in worlds:
            plane.enqueue_batch(u, world, [ITEM] * 2)
        for world in worlds[2:]:
            plane.busy_worlds.note(WorldKeys(u, world), True)
        for world, result in _bounded(call).items():
            reported[world] += result.count
    injector.commit_fault_rate = injector.read_fault_rate = 0.0
    for _ in range(50):
        results = _bounded(call)
        for world, result in results.items():
            reported[world] += result.count
        if not any(r.more for r in results.values()):
            break
    assert {w: ingress(plane, u, w) for w in worlds} == dict.fromkeys(worlds, 30)
    assert reported == dict.fromkeys(worlds, 30)


def _refused_after_the_group_commits() -> tuple[
    Plane, ContendedEngine, UniverseId, WorldId, WorldId
]:
    """calm and busy, three items each; the first commit that moves calm's cursor meets an
    append to busy and an item the normalizer refuses (``refusing``) enqueued into it:
    the group's retry leaves busy out and commits calm, busy's drain alone then fails."""
    u = UniverseId.new()
    calm, busy = WorldId.new(), WorldId.new()
    holder: list[Plane] = []

    def competitor() -> None:
        plane = holder[0]
        plane.append_batch(u, busy, plane.head(u, busy), [b"other writer"])
        plane.enqueue_batch(u, busy, [REFUSED])

    engine = ContendedEngine(WorldKeys(u, calm).inbox_cursor(), competitor, hits=1)
    plane = Plane(engine, MemoryObjectStore())
    holder.append(plane)
    for world in (calm, busy):
        plane.create_world(u, world)
        plane.enqueue_batch(u, world, [ITEM] * 3)
    return plane, engine, u, calm, busy


@pytest.mark.parametrize("door", ["sync", "asyncio"])
def test_a_call_that_raises_after_its_group_committed_tells_what_committed(door: str) -> None:
    """The group's first attempt meets an append to busy and an item the normalizer refuses
    enqueued into it; the retry leaves busy out and commits calm's items; busy's drain
    alone after it then fails with Validation. The call raises, and ``drained`` was told
    of the group's transaction (calm's three items), each world once -- on both doors."""
    plane, engine, u, calm, busy = _refused_after_the_group_commits()
    told: list[dict[WorldId, DrainResult]] = []
    with pytest.raises(Validation):
        if door == "sync":
            plane.drain_worlds(u, [calm, busy], 10, normalize=refusing, drained=told.append)
        else:
            async_plane = AsyncPlane(engine, MemoryObjectStore())
            asyncio.run(
                async_plane.drain_worlds(
                    u, [calm, busy], 10, normalize=refusing, drained=told.append
                )
            )
    assert [{w: r.count for w, r in t.items()} for t in told] == [{calm: 3}]
    assert [ingress(plane, u, w) for w in (calm, busy)] == [3, 0]
    assert engine.hits_left == 0


def test_a_drain_worker_is_told_of_every_item_its_calls_journaled() -> None:
    """The case above under a ``DrainWorker``: its group's call raises after the group
    committed calm's items, and the worker drains each world alone to find the one that
    fails (busy, isolated after its three good items). Its ``drained`` callback is told
    of every item journaled, once: calm's from the group that committed in the call that
    raised, busy's from the drains alone; the pass and the lag count them all."""
    plane, engine, u, calm, busy = _refused_after_the_group_commits()
    told = {calm: 0, busy: 0}

    def drained(universe: UniverseId, results: dict[WorldId, DrainResult]) -> None:
        for world, result in results.items():
            told[world] += result.count

    worker = DrainWorker(plane, universes=[u], quantum=10, normalize=refusing, drained=drained)
    report = worker.run_pass()
    assert engine.hits_left == 0
    # and counted: calm's items committed in the call that raised are the pass's too
    assert report.items == worker.lag().items == sum(told.values()) == 6
    assert set(dict(worker.failures)) == {(u, busy)}
    assert (
        told
        == {calm: ingress(plane, u, calm), busy: ingress(plane, u, busy)}
        == {
            calm: 3,
            busy: 3,
        }
    )
