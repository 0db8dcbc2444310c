"""Queued sequencing of the universe log (``protocols/log.py``): an append queues its records
under its commit's versionstamp and a settle moves the queue to the next positions. The log
keeps its promise -- positions 1, 2, ... in commit order, no gaps, each entry once -- with
appends queued, inline and adaptive mixed, under concurrent writers, after unknown commit
results with other clients committing before the retry, and after a writer stopped between
its append and its settle."""

from __future__ import annotations

import threading

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors, kv
from persistence.errors import CorruptRecord, RetryLimitReached, SequencingIncomplete
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys
from persistence.kv import Engine
from persistence.log_records import LOG_HEAD, log_records
from persistence.plane import Plane, PlaneConfig
from persistence.plane.config import LogSequencing
from persistence.protocols import log
from segments import open_plane

MODES: tuple[LogSequencing, ...] = ("queued", "adaptive", "inline")


def planed(engine: Engine, mode: LogSequencing, **kwargs: object) -> Plane:
    return open_plane(engine, MemoryObjectStore(), PlaneConfig(log_sequencing=mode), **kwargs)  # type: ignore[arg-type]


def queue_state(engine: Engine, u: UniverseId) -> tuple[int, int]:
    """(records in the queue, the queue's counter)."""
    keys = UniverseKeys(u)

    async def read(tr: kv.Transaction) -> tuple[int, int]:
        rows = await tr.get_range(*keys.log_queue(), snapshot=True)
        return len(rows), log.queued_count(await tr.get(keys.log_queued(), snapshot=True))

    return kv.run(engine, read)


@pytest.mark.parametrize("mode", MODES)
def test_positions_follow_batch_order_in_every_mode(engine: Engine, mode: LogSequencing) -> None:
    plane = planed(engine, mode)
    u, a, b = UniverseId.new(), WorldId.new(), WorldId.new()
    first = plane.append_sequenced(
        u, [(a, 0, [b"a1", b"a2"]), (b, 0, [b"b1"])], [["t1", "t2"], ["t1"]], create_missing=True
    )
    assert (first.first_heights, first.first_position) == ([1, 1], 1)
    second = plane.append_sequenced(u, [(b, 1, [b"b2"])], [["t3"]], tracking=("up", 7))
    assert (second.first_heights, second.first_position) == ([2], 4)
    assert plane.log_head(u) == 4
    assert [(e.position, e.world, e.height, e.tag, e.entry) for e in plane.read_log(u, 1, 10)] == [
        (1, a, 1, "t1", b"a1"),
        (2, a, 2, "t2", b"a2"),
        (3, b, 1, "t1", b"b1"),
        (4, b, 2, "t3", b"b2"),
    ]
    assert plane.tracking_position(u, "up") == 7
    assert queue_state(engine, u) == (0, 0)  # a settled queue is empty, its counter 0


@pytest.mark.parametrize("mode", ["queued", "adaptive"])
def test_concurrent_appenders_get_positions_in_commit_order(
    engine: Engine, mode: LogSequencing
) -> None:
    """Writers in threads, each on its own world, plus a chain of appends made one after the
    other across two threads: an append that began after another returned has a higher
    position (commit order), every entry is logged once, each world's in height order."""
    plane = planed(engine, mode)
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(4)]
    chain_a, chain_b = WorldId.new(), WorldId.new()
    chain: list[int] = []
    turns = [threading.Event() for _ in range(21)]
    turns[0].set()
    errors: list[BaseException] = []

    def writer(world: WorldId) -> None:
        try:
            for height in range(10):
                plane.append_sequenced(
                    u, [(world, height, [b"%d" % height])], [["t"]], create_missing=True
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    def chained(world: WorldId, parity: int) -> None:
        try:
            for turn in range(parity, 20, 2):
                assert turns[turn].wait(30)
                done = plane.append_sequenced(
                    u, [(world, turn // 2, [b"c%d" % turn])], [["c"]], create_missing=True
                )
                assert done.first_position is not None
                chain.append(done.first_position)
                turns[turn + 1].set()
        except BaseException as exc:  # reported below
            errors.append(exc)
            for event in turns:
                event.set()

    threads = [threading.Thread(target=writer, args=(w,)) for w in worlds]
    threads += [threading.Thread(target=chained, args=(chain_a, 0))]
    threads += [threading.Thread(target=chained, args=(chain_b, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert chain == sorted(chain) and len(set(chain)) == 20
    entries = plane.read_log(u, 1, 1_000)
    assert [e.position for e in entries] == list(range(1, 61))
    for w in [*worlds, chain_a, chain_b]:
        assert [e.height for e in entries if e.world == w] == list(range(1, 11))
    for e in entries:
        if e.world == chain_a or e.world == chain_b:
            assert e.position in chain
    assert queue_state(engine, u) == (0, 0)


def test_an_inline_append_queues_behind_records_already_queued() -> None:
    """A queued append that stopped before settling (a crash after its commit) leaves its
    records queued; an inline append of another client then queues behind them and settles
    both, in commit order; the counter ends at 0."""
    injector = FaultInjector()
    engine = MemoryEngine()
    crashing = planed(FaultyEngine(engine, injector), "queued", hooks=injector)
    inline = planed(engine, "inline")
    u, a, b = UniverseId.new(), WorldId.new(), WorldId.new()
    injector.crash_at("journal.after_append")
    with pytest.raises(SimulatedCrash):
        crashing.append_sequenced(u, [(a, 0, [b"a1", b"a2"])], [["t", "t"]], create_missing=True)
    assert queue_state(engine, u) == (2, 2)
    assert inline.log_head(u) == 0  # queued, not yet logged
    done = inline.append_sequenced(u, [(b, 0, [b"b1"])], [["t"]], create_missing=True)
    assert done.first_position == 3
    assert [e.entry for e in inline.read_log(u, 1, 10)] == [b"a1", b"a2", b"b1"]
    assert queue_state(engine, u) == (0, 0)


def test_settle_log_gives_positions_to_a_stopped_writers_records(engine: Engine) -> None:
    injector = FaultInjector()
    crashing = planed(FaultyEngine(engine, injector), "queued", hooks=injector)
    plane = planed(engine, "inline")
    u, a = UniverseId.new(), WorldId.new()
    assert plane.settle_log(u) == 0  # nothing queued: nothing to do
    injector.crash_at("journal.after_append")
    with pytest.raises(SimulatedCrash):
        crashing.append_sequenced(u, [(a, 0, [b"a1", b"a2"])], [["t", "t"]], create_missing=True)
    assert plane.log_head(u) == 0
    assert plane.settle_log(u) == 2
    assert [(e.position, e.entry) for e in plane.read_log(u, 1, 10)] == [(1, b"a1"), (2, b"a2")]
    assert queue_state(engine, u) == (0, 0)
    assert plane.settle_log(u) == 2


def test_a_long_queue_settles_in_pages(engine: Engine) -> None:
    """More records than one settle moves (``SETTLE_RECORDS``): the append settles page after
    page until its last record has a position."""
    plane = planed(engine, "queued")
    u, a = UniverseId.new(), WorldId.new()
    count = 2 * log.SETTLE_RECORDS + 3
    entries = [b"%d" % i for i in range(count)]
    done = plane.append_sequenced(u, [(a, 0, entries)], [["t"] * count], create_missing=True)
    assert done.first_position == 1
    assert plane.log_head(u) == count
    logged = plane.read_log(u, 1, count)
    assert [e.entry for e in logged] == entries
    assert [e.height for e in logged] == list(range(1, count + 1))


# ------------------------------------------------------------ exactly once under faults


def fail_with_another_client_between(
    commit: int, applied: bool
) -> tuple[Plane, Plane, Engine, UniverseId, WorldId]:
    """Two queued planes on one engine; the ``commit``-th writing commit of the first fails
    with ``commit_unknown_result`` (``applied`` or not) after the second appended an entry
    of its own (and settled it): the first plane, the other, the engine, the universe and
    the first plane's world."""
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    objects = MemoryObjectStore()
    config = PlaneConfig(log_sequencing="queued")
    plane = open_plane(engine, objects, config, hooks=injector)
    other = open_plane(engine.inner, objects, config)
    u, mine, theirs = UniverseId.new(), WorldId.new(), WorldId.new()

    def interleave() -> None:
        other.append_sequenced(u, [(theirs, 0, [b"theirs"])], [["t"]], create_missing=True)

    injector.fail_commit(
        commit, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=applied, interleave=interleave
    )
    return plane, other, engine.inner, u, mine


@pytest.mark.parametrize("applied", [True, False])
def test_an_unknown_result_of_the_queuing_commit_is_settled_once(applied: bool) -> None:
    plane, other, inner, u, mine = fail_with_another_client_between(1, applied)
    done = plane.append_sequenced(
        u, [(mine, 0, [b"m1", b"m2"])], [["t", "t"]], create_missing=True, tracking=("up", 2)
    )
    # applied: the interleaved append settled the queue, mine first (it committed first)
    order = [b"m1", b"m2", b"theirs"] if applied else [b"theirs", b"m1", b"m2"]
    assert (done.first_heights, done.first_position) == ([1], 1 if applied else 2)
    assert [e.entry for e in other.read_log(u, 1, 10)] == order
    assert other.tracking_position(u, "up") == 2
    assert queue_state(inner, u) == (0, 0)


@pytest.mark.parametrize("applied", [True, False])
def test_an_unknown_result_of_the_settle_is_resolved_from_the_log(applied: bool) -> None:
    """The settle's commit fails with ``commit_unknown_result`` (applied or not), another
    client appends and settles before the retry: the retry finds the positions its own
    records got, wherever they are, and nothing is logged twice."""
    # the first writing commit queues, the second settles
    plane, other, inner, u, mine = fail_with_another_client_between(2, applied)
    done = plane.append_sequenced(u, [(mine, 0, [b"m1", b"m2"])], [["t", "t"]], create_missing=True)
    # not applied: the interleaved append's settle moved mine (queued first) and its own
    assert done.first_position == 1
    assert [e.entry for e in other.read_log(u, 1, 10)] == [b"m1", b"m2", b"theirs"]
    assert queue_state(inner, u) == (0, 0)


def test_a_late_landing_queue_commit_is_found() -> None:
    """The queuing commit reports ``commit_unknown_result`` and lands only before the next
    writing commit (the retry's): the retry sees its call record and settles what landed."""
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    plane = open_plane(
        engine, MemoryObjectStore(), PlaneConfig(log_sequencing="queued"), hooks=injector
    )
    u, mine = UniverseId.new(), WorldId.new()
    injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, late=True)
    done = plane.append_sequenced(u, [(mine, 0, [b"m1"])], [["t"]], create_missing=True)
    assert (done.first_heights, done.first_position) == ([1], 1)
    assert [e.entry for e in plane.read_log(u, 1, 10)] == [b"m1"]
    assert queue_state(engine.inner, u) == (0, 0)


def test_a_damaged_queued_record_is_refused_before_anything_moves() -> None:
    engine = MemoryEngine()
    injector = FaultInjector()
    crashing = planed(FaultyEngine(engine, injector), "queued", hooks=injector)
    plane = planed(engine, "queued")
    u, a = UniverseId.new(), WorldId.new()
    injector.crash_at("journal.after_append")
    with pytest.raises(SimulatedCrash):
        crashing.append_sequenced(u, [(a, 0, [b"a1"])], [["t"]], create_missing=True)
    keys = UniverseKeys(u)

    async def damage(tr: kv.Transaction) -> None:
        ((key, _),) = await tr.get_range(*keys.log_queue())
        tr.set(key, b"not a log record")

    kv.run(engine, damage)
    with pytest.raises(CorruptRecord):
        plane.settle_log(u)
    assert plane.log_head(u) == 0
    assert queue_state(engine, u) == (1, 1)


def test_adaptive_planes_queue_only_while_appends_overlap() -> None:
    """An adaptive plane appends inline until one of its sequenced appends conflicts; then
    it queues, and once its settles meet no other appends for ``LOG_BUSY_SECONDS``, it is
    back to inline."""
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    plane = open_plane(engine, MemoryObjectStore(), hooks=injector)
    u, a = UniverseId.new(), WorldId.new()
    plane.append_sequenced(u, [(a, 0, [b"1"])], [["t"]], create_missing=True)
    assert injector.points["log.after_settle"] == 0  # inline
    injector.fail_commit(1, fdb_errors.NOT_COMMITTED)
    plane.append_sequenced(u, [(a, 1, [b"2"])], [["t"]])
    assert injector.points["log.after_settle"] == 1  # the retry queued
    plane.append_sequenced(u, [(a, 2, [b"3"])], [["t"]])
    assert injector.points["log.after_settle"] == 2  # still busy: queued
    plane.log_busy_until[u] = 0.0  # as if LOG_BUSY_SECONDS passed without overlap
    plane.append_sequenced(u, [(a, 3, [b"4"])], [["t"]])
    assert injector.points["log.after_settle"] == 2  # inline again
    assert [e.entry for e in plane.read_log(u, 1, 10)] == [b"1", b"2", b"3", b"4"]


def crash_after_queuing(engine: Engine, u: UniverseId, world: WorldId, height: int) -> None:
    """A writer that queued ``world``'s entry at ``height + 1`` and was killed before it
    settled."""
    injector = FaultInjector()
    crashing = planed(FaultyEngine(engine, injector), "queued", hooks=injector)
    injector.crash_at("journal.after_append")
    with pytest.raises(SimulatedCrash):
        crashing.append_sequenced(u, [(world, height, [b"x"])], [["t"]], create_missing=True)


def test_a_failed_settle_says_the_entries_were_appended() -> None:
    """The settle runs after the append committed: its failure -- here another writer's
    damaged queue record -- is ``SequencingIncomplete`` with the heights appended (not an
    error a caller would answer by appending again), and ``settle_log`` names the damage."""
    engine = MemoryEngine()
    u, a, b = UniverseId.new(), WorldId.new(), WorldId.new()
    crash_after_queuing(engine, u, a, 0)
    keys = UniverseKeys(u)

    async def damage(tr: kv.Transaction) -> None:
        ((key, _),) = await tr.get_range(*keys.log_queue())
        tr.set(key, b"not a log record")

    kv.run(engine, damage)
    for mode in MODES:  # an inline append queues behind the damaged record too
        plane = planed(engine, mode)
        head = plane.head(u, b) if mode != "queued" else 0
        with pytest.raises(SequencingIncomplete) as failed:
            plane.append_sequenced(u, [(b, head, [b"b"])], [["t"]], create_missing=True)
        assert failed.value.first_heights == [head + 1]
        assert isinstance(failed.value.cause, CorruptRecord)
        assert plane.head(u, b) == head + 1
    with pytest.raises(CorruptRecord):
        plane.settle_log(u)
    assert plane.log_head(u) == 0


def test_a_settle_out_of_retries_is_sequencing_incomplete_and_settles_later() -> None:
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    plane = planed(engine, "queued", hooks=injector)
    u, a = UniverseId.new(), WorldId.new()
    for index in range(2, engine.retry_limit + 3):  # the first commit queues
        injector.fail_commit(index, fdb_errors.NOT_COMMITTED)
    with pytest.raises(SequencingIncomplete) as failed:
        plane.append_sequenced(u, [(a, 0, [b"a"])], [["t"]], create_missing=True)
    assert failed.value.first_heights == [1]
    assert isinstance(failed.value.cause, RetryLimitReached)
    assert plane.log_head(u) == 0
    assert plane.settle_log(u) == 1
    assert [(e.position, e.entry) for e in plane.read_log(u, 1, 10)] == [(1, b"a")]


@pytest.mark.parametrize("mode", ["adaptive", "queued"])
def test_a_writer_among_queuing_writers_is_not_starved(mode: LogSequencing) -> None:
    """Another writer queues just before each of this plane's writing commits: an inline
    attempt, whose reads of the head and the queue's counter conflict with every queuing
    commit, fails each time; an adaptive plane's retry queues, so it gets through (retried
    inline, it had retried until it timed out: what an ``inline`` plane still does beside
    planes that queue, docs/protocols.md)."""
    injector = FaultInjector()
    inner = MemoryEngine()
    me = planed(FaultyEngine(inner, injector), mode)
    u, mine = UniverseId.new(), WorldId.new()
    injector.before_every_commit = lambda: crash_after_queuing(inner, u, WorldId.new(), 0)
    for height in range(3):
        me.append_sequenced(u, [(mine, height, [b"m"])], [["t"]], create_missing=True)
    injector.before_every_commit = None
    assert injector.commits <= 3 * 4  # each: an attempt, a queued retry, a settle or two
    entries = me.read_log(u, 1, 1_000)
    assert [e.position for e in entries] == list(range(1, len(entries) + 1))
    assert [e.height for e in entries if e.world == mine] == [1, 2, 3]


def test_settle_log_ends_while_others_keep_queuing() -> None:
    """It moves what was queued when it began (and what was queued before that), not what
    keeps arriving: another writer queuing after each of its settles does not keep it
    going."""
    injector = FaultInjector()
    inner = MemoryEngine()
    plane = planed(FaultyEngine(inner, injector), "queued", hooks=injector)
    u = UniverseId.new()
    crash_after_queuing(inner, u, WorldId.new(), 0)
    arrivals = 0

    def another_queues() -> None:
        nonlocal arrivals
        arrivals += 1
        crash_after_queuing(inner, u, WorldId.new(), 0)

    for index in range(1, 50):
        injector.after_commit(index, another_queues)
    assert plane.settle_log(u) == 1
    assert arrivals == 1  # one settle, then it stopped
    assert queue_state(inner, u) == (1, 1)


# ------------------------------------------------------------ fsck sees the log


def test_fsck_checks_the_log_its_queue_and_the_tracking_records(engine: Engine) -> None:
    from aosp.fsck import Fsck

    plane = planed(engine, "adaptive")
    u, a, b = UniverseId.new(), WorldId.new(), WorldId.new()
    plane.append_sequenced(u, [(a, 0, [b"a1", b"a2"])], [["t", "t"]], create_missing=True)
    plane.append_sequenced(u, [(b, 0, [b"b1"])], [["t"]], create_missing=True, tracking=("up", 3))
    report = Fsck(plane).run([u])
    assert report.errors == [] and report.warnings == []
    assert (report.checked["log records"], report.checked["tracking records"]) == (3, 1)
    crash_after_queuing(engine, u, b, 1)  # a stopped writer: its record stays queued
    report = Fsck(plane).run([u])
    assert report.errors == []
    (warning,) = report.warnings
    assert warning.area == "log" and "1 records wait for a position" in warning.message
    keys = UniverseKeys(u)

    def damage(tr: kv.Transaction) -> None:
        tr.set(keys.log_entry(2), b"not a log record")
        tr.clear(keys.log_entry(1))
        tr.set(keys.log_entry(9), log_records(a, 1, ["t"])[0])  # above the head
        tr.set(keys.log_queued(), (5).to_bytes(8, "little"))  # the queue holds 1
        tr.set(keys.tracking("down"), b"\x00")

    kv.run_sync(engine, damage)
    found = {(f.subject, f.message.split(":")[0]) for f in Fsck(plane).run([u]).errors}
    assert ("positions 1-1", "missing below the head 3") in found
    assert any(subject == "position 2" for subject, _ in found)
    assert ("position 9", "a record above the head 3") in found
    assert any(subject == "queue counter" for subject, _ in found)
    assert any(subject == keys.tracking("down").hex() for subject, _ in found)


def test_fsck_reports_a_log_record_naming_a_height_its_world_lacks() -> None:
    from aosp.fsck import Fsck

    engine = MemoryEngine()
    plane = planed(engine, "inline")
    u, a, ghost = UniverseId.new(), WorldId.new(), WorldId.new()
    plane.append_sequenced(u, [(a, 0, [b"a1"])], [["t"]], create_missing=True)
    keys = UniverseKeys(u)

    def damage(tr: kv.Transaction) -> None:
        tr.set(keys.log_entry(2), log_records(a, 5, ["t"])[0])
        tr.set(keys.log_entry(3), log_records(ghost, 1, ["t"])[0])
        tr.set(keys.log_head(), LOG_HEAD.encode(3))

    kv.run_sync(engine, damage)
    found = {(f.world, f.subject) for f in Fsck(plane).run([u]).errors}
    assert found == {(str(a), "height 5"), (str(ghost), "height 1")}


def test_threads_noting_busy_universes_never_trip_over_each_other() -> None:
    """Past ``BUSY_UNIVERSES`` entries a note prunes the quiet ones; notes from many threads
    at once (after their commits: an error there would hide that the append committed) must
    not fail. Unlocked, the prune's scan met another thread's insert within a second."""
    import sys

    from persistence.plane.journal import BUSY_UNIVERSES

    plane = planed(MemoryEngine(), "adaptive")
    ops = plane._operations
    for _ in range(BUSY_UNIVERSES + 10):
        plane.log_busy_until[UniverseId.new()] = 0.0  # quiet: pruned by the next note
    errors: list[BaseException] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def noter() -> None:
        try:
            for _ in range(3_000):
                ops.note_busy(UniverseId.new())
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=noter) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors
