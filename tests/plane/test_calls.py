"""Per-call records and idempotency entries, kept only where a commit may end unknown: a
retry finds its own, and a scope keeps only the records of its window."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, kv
from persistence.errors import HeadAdvanced, PersistError
from persistence.fdb_errors import COMMIT_UNKNOWN_RESULT, NOT_COMMITTED, TRANSACTION_TIMED_OUT
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, InboxEnvelope
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane
from persistence.protocols import journal
from persistence.protocols.calls import SWEPT_SCOPES, Call, Sweeps
from persistence.records import CallRecord, decode_record
from segments import open_plane

SECOND = 1_000_000_000


def _records(engine: kv.Engine, keys: WorldKeys) -> list[bytes]:
    return [k for k, _ in kv.run(engine, lambda tr: tr.get_range(*keys.calls()))]


def _one_world() -> tuple[MemoryEngine, Plane, UniverseId, WorldId, WorldKeys]:
    """A memory store holding one world: its engine, plane, ids and keys."""
    engine = MemoryEngine()
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    return engine, plane, u, w, WorldKeys(u, w)


def _old_call(age_seconds: float, window_seconds: float) -> Call:
    """A call started ``age_seconds`` ago."""
    call = Call.new(window_seconds)
    started = call.started_ns - int(age_seconds * SECOND)
    return Call(started.to_bytes(8, "big") + os.urandom(8), call.window_ns)


def test_a_retried_call_returns_its_record_and_writes_nothing() -> None:
    engine, plane, u, w, keys = _one_world()
    call = Call.new()
    assert drive(journal.append_batch(engine, keys, 0, [b"a"], call, plane.sealing)) == 1
    plane.append_batch(u, w, 1, [b"b"])  # another caller moves the head
    assert (
        drive(journal.append_batch(engine, keys, 0, [b"a"], call, plane.sealing)) == 1
    )  # the retry: its own
    assert [e for _, e in plane.read_range(u, w, 1, 5)] == [b"a", b"b"]
    assert len(_records(engine, keys)) == 2


def test_an_append_records_its_op_alone_and_a_retry_reads_older_records_the_same_way() -> None:
    """An append's record holds only ``op``: the attempt that committed wrote from
    ``expected_head + 1``. A retry that finds a record in the form written before (with
    a first height and count) returns ``expected_head + 1`` too, and writes nothing."""
    engine, plane, u, w, keys = _one_world()
    call = Call.new()
    assert drive(journal.append_batch(engine, keys, 0, [b"a"], call, plane.sealing)) == 1
    stored = kv.run(engine, lambda tr: tr.get(keys.call(call.id)))
    assert stored is not None
    assert decode_record(CallRecord, stored, "record") == CallRecord("append")

    older = Call.new()
    older.attempts = 1  # its first attempt committed; the next is a retry
    plane.append_batch(u, w, 1, [b"b", b"c"])  # what that attempt wrote, at head 1

    def recorded(tr: kv.Transaction) -> None:  # the fields are not read: any value
        tr.set(keys.call(older.id), CallRecord("append", first_height=99, count=7).to_cbor())

    kv.run_sync(engine, recorded)
    plane.append_batch(u, w, 3, [b"d"])  # another caller moves the head on
    retried = journal.append_batch(engine, keys, 1, [b"x", b"y"], older, plane.sealing)
    assert drive(retried) == 2
    assert [e for _, e in plane.read_range(u, w, 1, 10)] == [b"a", b"b", b"c", b"d"]


def test_a_write_clears_the_expired_records_and_keeps_recent_ones() -> None:
    engine, plane, _, _, keys = _one_world()
    head = 0
    for age in (700, 690, 680, 670, 660):  # each older than the window of the next ones
        head = drive(
            journal.append_batch(engine, keys, head, [b"x"], _old_call(age, 600), plane.sealing)
        )
    assert len(_records(engine, keys)) == 5  # none older than its writer's window
    head = drive(
        journal.append_batch(engine, keys, head, [b"x"], _old_call(65, 600), plane.sealing)
    )
    assert len(_records(engine, keys)) == 2  # the four older than 665 s went
    head = drive(
        journal.append_batch(engine, keys, head, [b"x"], _old_call(10, 600), plane.sealing)
    )
    assert len(_records(engine, keys)) == 2  # the 660 s old one went, the 65 s old stayss
    for _ in range(3):
        head = drive(
            journal.append_batch(engine, keys, head, [b"x"], _old_call(0, 600), plane.sealing)
        )
    assert len(_records(engine, keys)) == 5  # the two recent ones and the three new


def test_a_world_keeps_its_write_rate_times_the_window() -> None:
    """With every record expired at once, a world holds only the record just written."""
    engine, plane, _, _, keys = _one_world()
    counts = []
    for head in range(20):
        drive(journal.append_batch(engine, keys, head, [b"x"], _old_call(1, 1e-9), plane.sealing))
        counts.append(len(_records(engine, keys)))
    assert counts == [1] * 20


def _clocked(engine: kv.Engine, now: list[int]) -> Plane:
    """A plane on ``engine`` whose clock reads ``now[0]``."""
    return open_plane(engine, MemoryObjectStore(), clock=lambda: now[0])


def _append_at(plane: Plane, now: list[int], seconds: int, u: UniverseId, w: WorldId) -> None:
    """Append one entry at the head, ``seconds`` after the tests' epoch (1,000 s)."""
    now[0] = (1_000 + seconds) * SECOND
    plane.append_batch(u, w, plane.head(u, w), [b"x"])


def test_a_plane_clears_a_scopes_expired_records_at_most_once_per_eighth_of_the_window() -> None:
    """A plane's calls clear the expired records of a scope only if none of its calls that
    started in the last 75 s (of a 600 s window) committed a clear of that scope; another
    plane, and another scope, keep their own."""
    engine, now = MemoryEngine(), [0]
    plane = _clocked(engine, now)
    u, w, other_world = UniverseId.new(), WorldId.new(), WorldId.new()
    keys = WorldKeys(u, w)
    plane.create_world(u, w)
    plane.create_world(u, other_world)

    def append_at(seconds: int, on: Plane = plane, world: WorldId = w) -> int:
        _append_at(on, now, seconds, u, world)
        return len(_records(engine, keys))

    assert append_at(0) == 1
    append_at(0, world=other_world)
    assert append_at(80) == 2  # 80 s since the last clear: clears, nothing expired
    assert append_at(590) == 3
    append_at(610, world=other_world)  # another scope, its last clear 610 s ago
    assert len(_records(engine, WorldKeys(u, other_world))) == 1  # its 0 s one went
    assert append_at(620) == 4  # the 0 s one expired, but the last clear was 30 s ago
    assert append_at(664) == 5  # 74 s
    assert append_at(665) == 5  # 75 s: the 0 s one went
    other = _clocked(engine, now)
    assert append_at(700, other) == 5  # 35 s later, its first call: the 80 s one went
    assert append_at(730) == 6  # the first plane's last clear was 65 s ago


@pytest.mark.parametrize(
    ("failure", "kept"),
    [
        ("refused", 1),  # a stale expected head: HeadAdvanced after it issued its clear
        ("1020", 2),  # the retry clears again, and commits
        ("1021", 2),  # not applied: the retry finds no record, clears, commits
        ("1021 applied", 2),  # the attempt that committed is not the one the loop saw
        ("1031", 1),  # not retried: the call fails, nothing committed
    ],
)
def test_a_clear_counts_only_once_committed(failure: str, kept: int) -> None:
    """A call whose attempt issued the clear but failed -- refused, retried, or given up --
    leaves the scope due unless a clear of it committed: 10 s later the next call of the
    same plane finds no expired record left (``kept``: the records then, of those two
    calls)."""
    engine, now = MemoryEngine(), [0]
    plane = _clocked(engine, now)
    u, w = UniverseId.new(), WorldId.new()
    keys = WorldKeys(u, w)
    plane.create_world(u, w)
    _append_at(plane, now, 0, u, w)
    _append_at(plane, now, 100, u, w)
    injector = FaultInjector(seed=1)
    faulty = Plane(FaultyEngine(engine, injector), plane.objects, clock=lambda: now[0])
    _append_at(faulty, now, 110, u, w)  # its first call on the scope: clears, marks
    now[0] = 1_800 * SECOND  # the three expired; 690 s since the faulty plane's clear
    head = faulty.head(u, w)
    kv.RETRY_STATS.clear()
    if failure == "refused":
        with pytest.raises(HeadAdvanced):
            faulty.append_batch(u, w, head - 1, [b"stale"])
    elif failure == "1031":
        injector.fail_commit(1, TRANSACTION_TIMED_OUT)
        with pytest.raises(PersistError):
            faulty.append_batch(u, w, head, [b"x"])
    else:
        code = NOT_COMMITTED if failure == "1020" else COMMIT_UNKNOWN_RESULT
        injector.fail_commit(1, code, applied=failure == "1021 applied")
        faulty.append_batch(u, w, head, [b"x"])
        assert kv.RETRY_STATS.snapshot()["retried"] == {code: 1}
    _append_at(faulty, now, 810, u, w)  # within 75 s of the failed call
    assert len(_records(engine, keys)) == kept


def test_group_calls_clear_their_universes_records() -> None:
    """The records of a universe's scope (group appends, group drains) are cleared too."""
    engine, now = MemoryEngine(), [0]
    plane = _clocked(engine, now)
    u, worlds = UniverseId.new(), [WorldId.new(), WorldId.new()]
    for world in worlds:
        plane.create_world(u, world)
    scope = UniverseKeys(u)

    def group_at(seconds: int) -> int:
        now[0] = (1_000 + seconds) * SECOND
        plane.append_batches(u, [(w, plane.head(u, w), [b"x"]) for w in worlds])
        return len([k for k, _ in kv.run(engine, lambda tr: tr.get_range(*scope.calls()))])

    assert group_at(0) == 1
    assert group_at(10) == 2
    assert group_at(700) == 1  # both expired, 700 s since the last clear


def test_sweeps_keep_two_generations_and_clear_when_the_clock_goes_back() -> None:
    sweeps = Sweeps()
    window = 600 * SECOND
    assert sweeps.due(b"a", 1_000 * SECOND, window)  # never cleared
    sweeps.mark(b"a", 1_000 * SECOND)
    assert not sweeps.due(b"a", 1_074 * SECOND, window)
    assert sweeps.due(b"a", 1_075 * SECOND, window)
    assert not sweeps.due(b"a", 999 * SECOND, window)  # in flight with the one marked
    assert sweeps.due(b"a", 925 * SECOND, window)  # a clock gone back 75 s: clear again
    sweeps.mark(b"a", 999 * SECOND)  # a call that started earlier committed later
    assert sweeps.due(b"a", 1_075 * SECOND, window)  # the latest start stays the mark
    for index in range(SWEPT_SCOPES - 1):  # the bound, with b"a"
        sweeps.mark(index.to_bytes(4, "big"), 1_000 * SECOND)
    assert not sweeps.due(b"a", 1_001 * SECOND, window)
    sweeps.mark(b"new", 1_001 * SECOND)  # past the bound: a new generation
    assert not sweeps.due(b"a", 1_001 * SECOND, window)  # the one before is still known
    assert not sweeps.due(b"new", 1_002 * SECOND, window)
    for index in range(SWEPT_SCOPES):  # fills the new generation: the first is forgotten
        sweeps.mark(b"n" + index.to_bytes(4, "big"), 1_000 * SECOND)
    assert sweeps.due(b"a", 1_002 * SECOND, window)


def test_records_are_kept_only_where_a_commit_may_end_unknown(tmp_path: Path) -> None:
    """SQLite never retries a commit that may have applied: its calls keep no record. The
    fault injector's 1021 does, so the same store behind it keeps them, and a retry after an
    applied 1021 with another append in between still reports its own height."""
    plain = open_plane(f"sqlite://{tmp_path}/aos.db", f"file://{tmp_path}/objects")
    assert plain.engine.commit_may_be_unknown is False
    u, w = UniverseId.new(), WorldId.new()
    plain.create_world(u, w)
    assert plain.append_batch(u, w, 0, [b"a"]) == 1
    assert _records(plain.engine, WorldKeys(u, w)) == []

    injector = FaultInjector(seed=1)
    faulty = Plane(FaultyEngine(plain.engine, injector), plain.objects, segments=plain.segments)
    other = WorldId.new()
    faulty.create_world(u, other)

    def interleaved() -> None:
        plain.append_batch(u, other, 1, [b"theirs"])

    injector.fail_commit(1, COMMIT_UNKNOWN_RESULT, applied=True, interleave=interleaved)
    assert faulty.append_batch(u, other, 0, [b"mine"]) == 1
    assert [e for _, e in plain.read_range(u, other, 1, 5)] == [b"mine", b"theirs"]
    assert len(_records(plain.engine, WorldKeys(u, other))) == 1


def _idempotency_entries(engine: kv.Engine, keys: WorldKeys) -> list[bytes]:
    rows = kv.run(engine, lambda tr: tr.get_range(*keys.inbox_idempotency_entries()))
    return [k for k, _ in rows]


def test_keyless_items_get_an_idempotency_entry_only_where_a_commit_may_end_unknown(
    tmp_path: Path,
) -> None:
    """On SQLite an item enqueued without a key stores no key and no idempotency entry (a
    failed commit stored nothing, so no retry can duplicate it); a caller's key still gets
    its entry. Behind the fault injector the same store draws a random key per item, and a
    retry after an applied 1021, with another enqueue in between, stores the item once."""
    plain = open_plane(f"sqlite://{tmp_path}/aos.db", f"file://{tmp_path}/objects")
    u, w = UniverseId.new(), WorldId.new()
    keys = WorldKeys(u, w)
    plain.create_world(u, w)
    item = DomainEventIngress("test/Event@1", cbor.encode(1))
    plain.enqueue(u, w, item)
    plain.enqueue_batch(u, w, [item, item])
    assert _idempotency_entries(plain.engine, keys) == []
    assert [e.idempotency_key for e in _envelopes(plain.engine, keys)] == [None] * 3
    plain.enqueue(u, w, item, idempotency_key=b"mine")
    assert len(_idempotency_entries(plain.engine, keys)) == 1

    injector = FaultInjector(seed=1)
    faulty = Plane(FaultyEngine(plain.engine, injector), plain.objects, segments=plain.segments)

    def interleaved() -> None:
        plain.enqueue(u, w, item)

    injector.fail_commit(1, COMMIT_UNKNOWN_RESULT, applied=True, interleave=interleaved)
    seq = faulty.enqueue(u, w, item)
    envelopes = _envelopes(plain.engine, keys)
    assert len(envelopes) == 6  # 4 before, the interleaved one, ours once
    assert len(_idempotency_entries(plain.engine, keys)) == 2
    ours = [s for s, _ in plain.read_after(u, w, None, 10)].index(seq)
    assert envelopes[ours].idempotency_key is not None
    assert len(envelopes[ours].idempotency_key or b"") == 16


def _envelopes(engine: kv.Engine, keys: WorldKeys) -> list[InboxEnvelope]:
    rows = kv.run(engine, lambda tr: tr.get_range(*keys.inbox_after(None)))
    return [decode_record(InboxEnvelope, value, "inbox entry") for _, value in rows]


def test_a_forked_child_draws_other_call_ids_than_its_parent() -> None:
    """Call ids' random half comes from a per-process generator: a child made by ``fork``
    is reseeded, so it does not repeat the ids its parent draws next."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next draws, to the parent; it never returns to pytest
        try:
            os.write(write, b"".join(Call.new().id[8:] for _ in range(4)))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64)
    parent = b"".join(Call.new().id[8:] for _ in range(4))
    os.close(read)
    os.close(write)
    assert len(child) == 32 and child != parent
