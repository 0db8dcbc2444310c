"""SQLite group commit: attempts that run alone (``kv.run(..., alone=True)``) on several
threads are committed together, one durable commit per group, each with its own outcome.

Grouping is made deterministic: the first attempt's body blocks (its thread leads a group
of one) until the others are waiting, so they form the next group in arrival order."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aos_bench.eventsourcing import wal_count
from backends.kv.sqlite import SqliteEngine
from backends.kv.sqlite_writers import WriterQueue
from persistence import fdb_errors, fdbtuple, kv
from persistence import futures as futures_module
from persistence.errors import EngineError, RetryLimitReached

Body = Callable[[kv.Transaction], Any]


class _Attempts:
    """Threads running ``kv.run(engine, body, alone=True)``, each started once the ones
    before it wait in the group commit (so that arrival order is start order)."""

    def __init__(self, engine: SqliteEngine) -> None:
        self.engine = engine
        self.threads: list[threading.Thread] = []
        self.outcomes: dict[str, object] = {}

    def start(self, name: str, body: Body, *, waiting: int | None) -> threading.Thread:
        def run() -> None:
            try:
                self.outcomes[name] = kv.run_sync(self.engine, body, alone=True)
            except BaseException as exc:  # the outcome under test, KeyboardInterrupt included
                self.outcomes[name] = exc

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()
        if waiting is not None:
            _wait_for(lambda: self.engine._group.waiting() == waiting)
        return thread

    def join(self) -> dict[str, object]:
        for thread in self.threads:
            thread.join(timeout=60)
            assert not thread.is_alive()
        return self.outcomes


def _in_worker(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread other than the main one (whose attempts do not group), its
    result or its error here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller
            outcome.append((False, exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _wait_for(condition: Callable[[], bool]) -> None:
    """Wait until ``condition`` holds (it is about threads blocked on a lock: no work
    races it), failing after 30 s."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in 30 s"
        time.sleep(0.001)


def _blocking_leader(attempts: _Attempts, key: bytes | None) -> threading.Event:
    """Start an attempt that writes ``key`` (if any) and blocks in its body, leading a group
    of one, until the returned event is set."""
    release, entered = threading.Event(), threading.Event()

    def body(tr: kv.Transaction) -> str:
        if key is not None:
            tr.set(key, b"1")
        entered.set()
        assert release.wait(timeout=60)
        return "leader"

    attempts.start("leader", body, waiting=None)
    assert entered.wait(timeout=30)
    return release


def _setter(key: bytes, result: str) -> Body:
    def body(tr: kv.Transaction) -> str:
        tr.set(key, b"1")
        return result

    return body


def test_attempts_waiting_together_are_one_durable_commit(tmp_path: Path) -> None:
    engine = SqliteEngine(tmp_path / "kv.db")
    kv.run_sync(engine, lambda tr: tr.set(b"start", b""))
    before = wal_count(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"a")
    for waiting, name in enumerate("bcd", start=1):
        attempts.start(name, _setter(name.encode(), name), waiting=waiting)
    release.set()
    assert attempts.join() == {"leader": "leader", "b": "b", "c": "c", "d": "d"}
    after = wal_count(tmp_path / "kv.db")
    assert after.salt == before.salt
    assert after.commits - before.commits == 2  # the leader's group of one, then b, c, d
    assert kv.run(engine, lambda tr: tr.get_range(b"a", b"e")) == [
        (key, b"1") for key in (b"a", b"b", b"c", b"d")
    ]
    engine.close()


def test_each_attempt_of_a_group_has_its_own_outcome(tmp_path: Path) -> None:
    """A body that raises has its writes undone and gets its error; a later body sees the
    writes of the earlier ones in the group; the others commit."""
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"a")

    def failing(tr: kv.Transaction) -> None:
        tr.set(b"c", b"1")
        raise ValueError("c refuses")

    def reader(tr: kv.Transaction) -> object:
        seen = (tr.get(b"b").wait(), tr.get(b"c").wait())
        tr.set(b"d", b"1")
        return seen

    attempts.start("b", _setter(b"b", "b"), waiting=1)
    attempts.start("c", failing, waiting=2)
    attempts.start("d", reader, waiting=3)
    release.set()
    outcomes = attempts.join()
    assert isinstance(outcomes["c"], ValueError) and str(outcomes["c"]) == "c refuses"
    assert outcomes["b"] == "b" and outcomes["d"] == (b"1", None)
    assert kv.run(engine, lambda tr: tr.get_range(b"a", b"e")) == [
        (b"a", b"1"),
        (b"b", b"1"),
        (b"d", b"1"),
    ]
    engine.close()


def test_versionstamps_of_a_group_increase_in_its_order(tmp_path: Path) -> None:
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"a")
    futures: dict[str, kv.VersionstampFuture] = {}

    def stamped(name: str) -> Body:
        def body(tr: kv.Transaction) -> None:
            key = fdbtuple.pack_with_versionstamp(("log", fdbtuple.Versionstamp()))
            tr.set_versionstamped_key(key, name.encode())
            futures[name] = tr.get_versionstamp()

        return body

    for waiting, name in enumerate("bcd", start=1):
        attempts.start(name, stamped(name), waiting=waiting)
    release.set()
    assert attempts.join() == {"leader": "leader", "b": None, "c": None, "d": None}
    stamps = [futures[name].wait() for name in "bcd"]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    begin, end = fdbtuple.range_of(fdbtuple.pack(("log",)))
    rows = kv.run(engine, lambda tr: tr.get_range(begin, end))
    assert [value for _, value in rows] == [b"b", b"c", b"d"]
    engine.close()


def test_an_error_the_engine_retries_is_retried_by_its_own_attempt(tmp_path: Path) -> None:
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"a")
    tries = 0

    def flaky(tr: kv.Transaction) -> str:
        nonlocal tries
        tries += 1
        tr.set(b"c", b"%d" % tries)
        if tries == 1:
            raise fdb_errors.engine_error(fdb_errors.NOT_COMMITTED, "injected")
        return "c"

    attempts.start("b", _setter(b"b", "b"), waiting=1)
    attempts.start("c", flaky, waiting=2)
    release.set()
    assert attempts.join() == {"leader": "leader", "b": "b", "c": "c"}
    assert tries == 2
    assert kv.run(engine, lambda tr: tr.get(b"c")) == b"2"
    engine.close()


def test_a_group_refused_the_queue_applies_nothing_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer holds the store's writer queue past busy_timeout: the group is not
    committed and its attempt gets 1020, then retries after a backoff (in which the other
    writer lets go) and commits once."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path, busy_timeout=0.05)
    kv.run_sync(engine, lambda tr: tr.set(b"start", b""))  # the queue file exists
    holder = os.open(f"{path}-writer", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the backoff: the other writer lets go
        slept.append(seconds)
        os.close(holder)

    monkeypatch.setattr(futures_module, "time", SimpleNamespace(sleep=sleep))
    tries = 0

    def body(tr: kv.Transaction) -> None:
        nonlocal tries
        tries += 1
        tr.set(b"k", b"%d" % tries)

    _in_worker(lambda: kv.run_sync(engine, body, alone=True))
    assert len(slept) == 1 and tries == 1  # refused before its body ran, then once
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"1"
    engine.close()


def test_a_group_whose_writes_are_refused_applies_none_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that does not queue (another program) holds SQLite's write lock past
    busy_timeout: every attempt of the group gets 1020 for its writes, nothing of the group
    is applied, and each retries after its backoff (in which that writer commits)."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path, busy_timeout=0.05)
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, None)  # writes nothing: its group is not refused
    foreign = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    foreign.execute("BEGIN IMMEDIATE")
    foreign.execute("INSERT INTO kv VALUES (x'66', x'31')")  # key b"f"
    lock = threading.Lock()

    def sleep(seconds: float) -> None:  # a backoff: the other program commits
        with lock:
            if foreign.in_transaction:
                foreign.execute("COMMIT")

    monkeypatch.setattr(futures_module, "time", SimpleNamespace(sleep=sleep))
    runs: list[str] = []

    def counted(key: bytes) -> Body:
        def body(tr: kv.Transaction) -> str:
            runs.append(key.decode())
            tr.set(key, b"1")
            return key.decode()

        return body

    attempts.start("b", counted(b"b"), waiting=1)
    attempts.start("c", counted(b"c"), waiting=2)
    release.set()
    assert attempts.join() == {"leader": "leader", "b": "b", "c": "c"}
    assert sorted(runs) == ["b", "b", "c", "c"]  # refused once each, then committed
    rows = kv.run(engine, lambda tr: tr.get_range(b"a", b"g"))
    assert rows == [(key, b"1") for key in (b"b", b"c", b"f")]
    foreign.close()
    engine.close()


def test_an_interrupt_raised_by_a_body_is_its_own_attempts(tmp_path: Path) -> None:
    """A ``BaseException`` (here ``KeyboardInterrupt``) raised by a body that another
    thread runs for the group is that attempt's outcome, raised in its own thread, its
    writes undone; the leading thread and the rest of the group commit."""
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"a")
    ran_in: list[str] = []

    def interrupting(tr: kv.Transaction) -> str:
        ran_in.append(threading.current_thread().name)
        tr.set(b"c", b"1")
        raise KeyboardInterrupt

    attempts.start("b", _setter(b"b", "b"), waiting=1)
    attempts.start("c", interrupting, waiting=2)
    attempts.start("d", _setter(b"d", "d"), waiting=3)
    release.set()
    outcomes = attempts.join()
    assert ran_in == ["b"]  # b's thread led the group of b, c, d
    assert isinstance(outcomes.pop("c"), KeyboardInterrupt)
    assert outcomes == {"leader": "leader", "b": "b", "d": "d"}
    rows = kv.run(engine, lambda tr: tr.get_range(b"a", b"e"))
    assert rows == [(b"a", b"1"), (b"b", b"1"), (b"d", b"1")]
    engine.close()


def test_a_body_relaxing_durability_in_a_group_commits_durably(tmp_path: Path) -> None:
    """``relax_durability`` after a read refuses outside a group; in one it is ignored (the
    group commits with the engine's durability)."""
    engine = SqliteEngine(tmp_path / "kv.db")

    def body(tr: kv.Transaction) -> None:
        tr.get(b"k").wait()
        tr.relax_durability()
        tr.set(b"k", b"v")

    _in_worker(lambda: kv.run_sync(engine, body, alone=True))
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"v"
    with pytest.raises(ValueError, match="before the transaction's first read"):
        kv.run_sync(engine, body)
    engine.close()


def test_a_thread_holding_the_queue_runs_alone_outside_the_group(tmp_path: Path) -> None:
    """Inside an ``alone`` block the thread already holds the queue: its attempts do not
    wait for a group (whose leader would wait for that queue)."""
    engine = SqliteEngine(tmp_path / "kv.db", busy_timeout=0.05)

    def nested() -> None:
        with engine.alone():
            kv.run_sync(engine, lambda tr: tr.set(b"k", b"v"), alone=True, retry_limit=0)

    _in_worker(nested)
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"v"
    engine.close()


def test_an_engine_error_reaches_the_caller_as_before(tmp_path: Path) -> None:
    engine = SqliteEngine(tmp_path / "kv.db")

    def body(tr: kv.Transaction) -> None:
        tr.set(b"k", b"x" * 100)
        raise fdb_errors.engine_error(fdb_errors.IO_ERROR, "injected")

    with pytest.raises(EngineError) as raised:
        _in_worker(lambda: kv.run_sync(engine, body, alone=True))
    assert raised.value.code == fdb_errors.IO_ERROR
    assert kv.run(engine, lambda tr: tr.get(b"k")) is None
    engine.close()


def _blocked_on_the_queue(thread_id: int) -> bool:
    """Whether the thread ``thread_id`` waits for a store's writer queue."""
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code is WriterQueue._acquire.__code__:
            return True
        frame = frame.f_back
    return False


class _Interrupted(BaseException):
    """What the test's signal handler raises (as SIGINT's raises ``KeyboardInterrupt``)."""


@pytest.mark.parametrize("interrupted", [False, True], ids=["waits", "interrupted"])
def test_the_main_thread_runs_alone_outside_the_groups(tmp_path: Path, interrupted: bool) -> None:
    """Python runs signal handlers in the main thread, between any two steps: its attempts
    never join a group (whose bookkeeping an interrupt would cut short) and wait for the
    writer queue as before. Interrupted there, nothing of the attempt is applied and the
    groups go on; else it commits after them."""
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"a")
    attempts.start("b", _setter(b"b", "b"), waiting=1)
    main = threading.get_ident()
    seen: list[int] = []

    def when_main_waits() -> None:
        _wait_for(lambda: _blocked_on_the_queue(main))
        seen.append(engine._group.waiting())  # the main thread is not among them
        if interrupted:
            signal.pthread_kill(main, signal.SIGUSR1)
        else:
            release.set()

    def handler(signum: int, frame: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    helper = threading.Thread(target=when_main_waits)
    helper.start()
    try:
        if interrupted:
            with pytest.raises(_Interrupted):
                kv.run_sync(engine, lambda tr: tr.set(b"m", b"1"), alone=True)
            release.set()
        else:
            kv.run_sync(engine, lambda tr: tr.set(b"m", b"1"), alone=True)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        helper.join(timeout=30)
    assert seen == [1]
    assert attempts.join() == {"leader": "leader", "b": "b"}
    rows = kv.run(engine, lambda tr: tr.get_range(b"a", b"z"))
    assert rows == [(b"a", b"1"), (b"b", b"1")] + ([] if interrupted else [(b"m", b"1")])
    engine.close()


def test_an_attempt_not_taken_by_a_group_in_busy_timeout_gets_1020(tmp_path: Path) -> None:
    """Waiting for a group ends at busy_timeout, as waiting for the writer queue does: a
    body that waits for another thread's attempt run alone on the store makes that attempt
    fail (retried, then ``RetryLimitReached``) instead of waiting for ever."""
    engine = SqliteEngine(tmp_path / "kv.db", busy_timeout=0.1)
    inner: list[object] = []

    def run_inner() -> None:
        try:
            kv.run_sync(engine, lambda tr: tr.set(b"i", b"1"), alone=True, retry_limit=1)
        except RetryLimitReached as exc:
            inner.append(exc.last.description)

    def body(tr: kv.Transaction) -> None:
        thread = threading.Thread(target=run_inner)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()
        tr.set(b"o", b"1")

    _in_worker(lambda: kv.run_sync(engine, body, alone=True))
    assert inner == [
        "not_committed: group commit: not taken by a group within busy_timeout (0.1 s)"
    ]
    assert kv.run_sync(engine, lambda tr: (tr.get(b"o").wait(), tr.get(b"i").wait())) == (
        b"1",
        None,
    )
    engine.close()


def test_a_commit_inside_a_grouped_body_is_refused_at_once(tmp_path: Path) -> None:
    """Two misuses of a body run alone, refused without harm to the group: committing its
    own transaction (2017), and committing another transaction of the store after another
    attempt of the group wrote (2000: it would wait for the group's write lock)."""
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, None)

    def commits_itself(tr: kv.Transaction) -> None:
        tr.set(b"c", b"1")
        tr.commit().wait()

    def nests(tr: kv.Transaction) -> None:
        tr.set(b"d", b"1")
        kv.run_sync(engine, lambda inner: inner.set(b"n", b"1"))

    attempts.start("b", _setter(b"b", "b"), waiting=1)
    attempts.start("c", commits_itself, waiting=2)
    attempts.start("d", nests, waiting=3)
    attempts.start("e", _setter(b"e", "e"), waiting=4)
    release.set()
    outcomes = attempts.join()
    codes = {name: getattr(outcomes.pop(name), "code", None) for name in ("c", "d")}
    assert codes == {"c": fdb_errors.USED_DURING_COMMIT, "d": fdb_errors.CLIENT_INVALID_OPERATION}
    assert outcomes == {"leader": "leader", "b": "b", "e": "e"}
    rows = kv.run(engine, lambda tr: tr.get_range(b"a", b"z"))
    assert rows == [(b"b", b"1"), (b"e", b"1")]
    assert len({id(conn) for conn in engine._idle}) == len(engine._idle)  # no connection twice
    engine.close()


def test_a_child_forked_while_a_group_is_led_starts_with_none(tmp_path: Path) -> None:
    """A fork's child does not inherit its parent's group commit (its leader is the
    parent's thread): once the parent's group is committed, the child's attempts run alone
    and commit."""
    engine = SqliteEngine(tmp_path / "kv.db")
    attempts = _Attempts(engine)
    release = _blocking_leader(attempts, b"parent")
    ready, done = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait for the parent's group, then commit alone, bounded
        code = 1
        try:
            os.read(ready, 1)
            outcome: list[object] = []
            worker = threading.Thread(
                target=lambda: outcome.append(
                    kv.run_sync(engine, lambda tr: tr.set(b"child", b"1"), alone=True)
                ),
                daemon=True,
            )
            worker.start()
            worker.join(timeout=30)
            code = 0 if outcome == [None] else 2
        finally:
            os._exit(code)
    release.set()
    assert attempts.join() == {"leader": "leader"}
    os.write(done, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert kv.run_sync(engine, lambda tr: (tr.get(b"parent").wait(), tr.get(b"child").wait())) == (
        b"1",
        b"1",
    )
    engine.close()
