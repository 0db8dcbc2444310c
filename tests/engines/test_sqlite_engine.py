"""SQLite engine: several OS processes on one file, SIGKILL mid-transaction, file checks."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from backends.kv import open_engine
from backends.kv import sqlite_transaction as transaction_module
from backends.kv import sqlite_writers as writers_module
from backends.kv.sqlite import FORMAT_VERSION, PAGE_SIZE, SqliteEngine
from backends.kv.sqlite_transaction import SqliteTransaction
from backends.kv.sqlite_writers import WRITE_POLL
from persistence import fdbtuple, kv
from persistence import futures as futures_module
from persistence.errors import (
    Backend,
    CorruptRecord,
    EngineError,
    RetryLimitReached,
    StoreFormatError,
    Validation,
)

WORKER = Path(__file__).with_name("sqlite_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def spawn(path: Path, mode: str, worker: int, count: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(path), mode, str(worker), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_concurrent_processes_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    SqliteEngine(path).close()
    workers, count = 4, 150
    procs = [spawn(path, "commit", w, count) for w in range(workers)]
    stamps: list[list[str]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        stamps.append(json.loads(out))
    # each process saw strictly increasing versionstamps; all of them are distinct
    for seen in stamps:
        assert seen == sorted(seen) and len(set(seen)) == count
    everything = [s for seen in stamps for s in seen]
    assert len(set(everything)) == workers * count

    engine = SqliteEngine(path)
    rows = kv.run(engine, lambda tr: tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("vs",)))))
    assert len(rows) == workers * count
    # keys in versionstamp order are each worker's transactions in its own order
    per_worker: dict[int, list[int]] = {}
    for key, value in rows:
        w, i = fdbtuple.unpack(value)
        per_worker.setdefault(w, []).append(i)  # type: ignore[arg-type]
        stamp = fdbtuple.unpack(key)[1]
        assert stamp.tr_version.hex() == stamps[w][i]  # type: ignore[union-attr,index]
    assert all(order == list(range(count)) for order in per_worker.values())
    counter = kv.run(engine, lambda tr: tr.get(fdbtuple.pack(("counter",))))
    assert counter == (workers * count).to_bytes(8, "little")
    own = kv.run(engine, lambda tr: tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("w",)))))
    assert len(own) == workers * count
    assert engine.integrity_check() == []


def test_concurrent_writers_let_the_wal_restart(tmp_path: Path) -> None:
    """Writers that read before they write, in four processes: a checkpoint must be able to
    restart the WAL. While writers waited with their read snapshots open, or polled
    SQLite's lock (each try takes a read mark), the WAL grew with every commit and every
    commit ran a checkpoint that could not finish; they queue outside SQLite now."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path)  # open throughout: the last close would delete the WAL
    kv.run_sync(engine, lambda tr: tr.set(b"open", b""))
    workers, count = 4, 1500
    procs = [spawn(path, "read-write", w, count) for w in range(workers)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    frames = Path(f"{path}-wal").stat().st_size // (24 + PAGE_SIZE)  # the most it ever held
    # 6,000 commits of ~2 frames each; SQLite checkpoints every 1,000 frames
    assert frames < 3_000
    rows = kv.run(engine, lambda tr: tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("rw",)))))
    assert len(rows) == workers * count
    engine.close()


def _txid(key: bytes) -> int:
    txid = fdbtuple.unpack(key)[1]
    assert isinstance(txid, int)
    return txid


def _batches(engine: SqliteEngine) -> tuple[set[int], dict[int, int]]:
    """The transactions whose marker committed, and how many keys each batch has."""

    def tx_markers(tr: kv.Transaction) -> list[tuple[bytes, bytes]]:
        return tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("tx",)))).wait()

    done = {_txid(k) for k, _ in kv.run_sync(engine, tx_markers)}
    counts: dict[int, int] = {}
    begin, end = fdbtuple.range_of(fdbtuple.pack(("batch",)))
    while True:

        def page(tr: kv.Transaction, b: bytes = begin) -> list[tuple[bytes, bytes]]:
            return tr.get_range(b, end, limit=2000).wait()

        rows = kv.run_sync(engine, page)
        for key, _ in rows:
            counts[_txid(key)] = counts.get(_txid(key), 0) + 1
        if len(rows) < 2000:
            break
        begin = rows[-1][0] + b"\x00"
    return done, counts


@pytest.mark.parametrize("commits", [1, 5, 20])
def test_sigkill_mid_transaction_leaves_a_consistent_file(tmp_path: Path, commits: int) -> None:
    path = tmp_path / "kv.db"
    SqliteEngine(path).close()
    procs = [spawn(path, "torture", w, commits) for w in (1, 2)]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    # Each worker has committed ``commits`` transactions and is inside its next ones: the
    # kill lands mid-transaction (or between two), never before anything committed.
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "committed"
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
    for proc in procs:
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

    engine = SqliteEngine(path)  # opens: WAL recovery discards the torn transaction
    assert engine.integrity_check() == []
    done, counts = _batches(engine)
    assert done, "the workers committed nothing before being killed"
    # atomicity: every committed transaction is whole, no partial one is visible
    assert set(counts) == done
    assert all(n == 50 for n in counts.values())
    # and the store keeps working
    kv.run_sync(engine, lambda tr: tr.set(b"after", b"kill"))
    assert kv.run(engine, lambda tr: tr.get(b"after")) == b"kill"


def test_opening_a_second_engine_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """Opening an engine must not open and close the database file itself: POSIX locks
    belong to the process, so that close dropped the locks of the engine already open here,
    and another process closing its last connection then took itself for the only user:
    it reset the WAL and deleted the shared-memory index under the open engine (a later
    open failed with "database disk image is malformed")."""
    path = tmp_path / "kv.db"
    first = SqliteEngine(path)
    kv.run_sync(first, lambda tr: tr.set(b"first", b"1"))  # its connection stays open, idle
    second = SqliteEngine(path)  # the open that must not drop the first one's locks
    other = subprocess.run(
        [sys.executable, "-c", CLOSE_ONE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert other.returncode == 0, other.stderr
    # The other process's close saw this one's connections: it left the WAL's index alone.
    assert Path(f"{path}-shm").exists()
    assert kv.run(first, lambda tr: tr.get(b"other")) == b"2"
    kv.run_sync(second, lambda tr: tr.set(b"second", b"3"))
    assert kv.run(first, lambda tr: tr.get(b"second")) == b"3"
    first.close()
    second.close()
    assert SqliteEngine(path, create=False).integrity_check() == []


CLOSE_ONE = """
import sys
from backends.kv.sqlite import SqliteEngine
from persistence import kv
engine = SqliteEngine(sys.argv[1], create=False)
kv.run_sync(engine, lambda tr: tr.set(b"other", b"2"))
engine.close()
"""


def test_refuses_a_file_that_is_not_sqlite_and_leaves_it_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"my precious notes\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreFormatError) as err:
        SqliteEngine(path)
    assert str(path) in str(err.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize("size", [1, 2, 99, 511, 512, 9000])
@pytest.mark.parametrize("create", [True, False])
def test_refuses_a_short_or_foreign_file_of_any_size_untouched(
    tmp_path: Path, size: int, create: bool
) -> None:
    """Opening reads nothing itself (it only stats the file): a file shorter than an SQLite
    page is refused by its size (SQLite takes a 1-byte file for an empty database and would
    make it a store), a longer one by SQLite's first read; none is changed or joined by
    SQLite's side files."""
    path = tmp_path / "notes.txt"
    path.write_bytes(bytes(range(256)) * (size // 256) + b"n" * (size % 256))
    before = path.read_bytes()
    with pytest.raises(StoreFormatError, match="not an SQLite database"):
        SqliteEngine(path, create=create)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_refuses_a_foreign_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreFormatError, match="not a store of ours"):
        SqliteEngine(path)
    assert path.read_bytes() == before


def test_refuses_a_newer_format(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    SqliteEngine(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreFormatError, match="newer"):
        SqliteEngine(path)


def test_refuses_a_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path)
    kv.run_sync(engine, lambda tr: [tr.set(i.to_bytes(4, "big"), b"x" * 500) for i in range(200)])
    engine.close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # scribble over the schema page
    path.write_bytes(bytes(data))
    with pytest.raises(StoreFormatError) as err:
        SqliteEngine(path)
    assert str(path) in str(err.value)


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreFormatError, match="does not exist"):
        SqliteEngine(tmp_path / "nope" / "kv.db")


def test_reopen_keeps_data_and_versionstamps_keep_increasing(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"

    def stamp(engine: SqliteEngine) -> bytes:
        def body(tr: kv.Transaction) -> kv.VersionstampFuture:
            tr.set(b"k", b"v")
            return tr.get_versionstamp()

        return kv.run_sync(engine, body).wait()

    first = SqliteEngine(path)
    a = stamp(first)
    first.close()
    second = SqliteEngine(path)
    b = stamp(second)
    assert b > a
    assert kv.run(second, lambda tr: tr.get(b"k")) == b"v"


def test_url_options(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite://{tmp_path}/kv.db?synchronous=normal&busy_timeout=5")
    assert isinstance(engine, SqliteEngine)
    assert engine.synchronous == "NORMAL" and engine.busy_timeout == 5.0
    with pytest.raises(Validation):
        open_engine(f"sqlite://{tmp_path}/kv.db?synchronous=sometimes")
    with pytest.raises(Validation):
        open_engine(f"sqlite://{tmp_path}/kv.db?bogus=1")
    with pytest.raises(Validation):
        open_engine("postgres://x")


def test_faults_prefix_wraps_the_engine_without_injecting(tmp_path: Path) -> None:
    from backends.kv.faults import FaultyEngine

    engine = open_engine(f"faults+sqlite://{tmp_path}/kv.db")
    assert isinstance(engine, FaultyEngine) and isinstance(engine.inner, SqliteEngine)
    tr = engine.create_transaction()
    tr.set(b"k", b"v")
    tr.commit().wait()  # no fault injected unless asked
    assert engine.create_transaction().get(b"k").wait() == b"v"
    assert engine.injector.log == []
    engine.close()


def test_a_relaxed_commit_skips_only_its_own_sync(tmp_path: Path) -> None:
    """``relax_durability``: that transaction commits with ``synchronous=NORMAL`` (WAL: not
    synced; the next FULL commit's sync covers it) and its connection goes back to the pool
    at FULL; it must come before the transaction's first read."""
    engine = SqliteEngine(tmp_path / "kv.db")
    levels: list[int] = []

    def relaxed(tr: kv.Transaction) -> None:
        tr.relax_durability()
        assert isinstance(tr, SqliteTransaction)
        levels.append(tr._connection().execute("PRAGMA synchronous").fetchone()[0])
        tr.set(b"pin", b"1")

    def durable(tr: kv.Transaction) -> None:
        assert isinstance(tr, SqliteTransaction)
        levels.append(tr._connection().execute("PRAGMA synchronous").fetchone()[0])
        tr.set(b"meta", b"2")

    kv.run_sync(engine, relaxed)
    kv.run_sync(engine, durable)  # the same pooled connection
    assert levels == [1, 2]  # NORMAL, then FULL again
    assert kv.run_sync(engine, lambda tr: (tr.get(b"pin").wait(), tr.get(b"meta").wait())) == (
        b"1",
        b"2",
    )

    def late(tr: kv.Transaction) -> None:
        tr.get(b"pin").wait()
        tr.relax_durability()

    with pytest.raises(ValueError, match="before the transaction's first read"):
        kv.run_sync(engine, late)
    engine.close()


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT OR REPLACE INTO kv VALUES (x'01', x'01')")
    return holder


def test_a_writer_waits_for_the_lock_until_busy_timeout(tmp_path: Path) -> None:
    """``BEGIN IMMEDIATE`` behind another process's write lock polls until ``busy_timeout``,
    then fails with 1020 (nothing applied); the connection keeps its busy_timeout."""
    engine = SqliteEngine(tmp_path / "kv.db", busy_timeout=0.2)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    holder = _hold_write_lock(tmp_path / "kv.db")
    tr = engine.create_transaction()
    tr.set(b"b", b"2")
    with pytest.raises(EngineError) as raised:
        tr.commit().wait()
    assert raised.value.code == 1020
    holder.execute("ROLLBACK")
    conn = engine._acquire()
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 200
    engine._release(conn)
    assert kv.run(engine, lambda tr: tr.get(b"b")) is None
    engine.close()


def test_a_writer_polls_the_lock_in_short_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pause is ``WRITE_POLL`` (SQLite's own handler would sleep 1 ms), doubling;
    the writer commits as soon as the lock is free."""
    engine = SqliteEngine(tmp_path / "kv.db")
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    holder = _hold_write_lock(tmp_path / "kv.db")
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 3:
            holder.execute("COMMIT")  # the lock is free from the fourth try on

    monkeypatch.setattr(
        transaction_module, "time", SimpleNamespace(sleep=sleep, monotonic=time.monotonic)
    )
    kv.run_sync(engine, lambda tr: tr.set(b"b", b"2"))
    assert pauses == [WRITE_POLL, 2 * WRITE_POLL, 4 * WRITE_POLL]
    assert kv.run_sync(engine, lambda tr: (tr.get(b"a").wait(), tr.get(b"b").wait())) == (
        b"1",
        b"2",
    )
    engine.close()


# --------------------------------------------------------------------------- the writer queue


def _hold_queue(path: Path) -> int:
    """Take the store's writer queue as another writer would (its own open file)."""
    fd = os.open(f"{path}-writer", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_writer_waits_in_the_queue_until_busy_timeout(tmp_path: Path) -> None:
    engine = SqliteEngine(tmp_path / "kv.db", busy_timeout=0.2)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    fd = _hold_queue(tmp_path / "kv.db")
    tr = engine.create_transaction()
    tr.set(b"b", b"2")
    with pytest.raises(EngineError, match=r"begin write: the writer queue .*\(0\.2 s\)") as raised:
        tr.commit().wait()
    assert raised.value.code == 1020  # not granted: nothing applied, retryable
    alone = engine.alone()
    with pytest.raises(EngineError, match=r"alone: the writer queue .*\(0\.2 s\)") as raised:
        alone.__enter__()
    assert raised.value.code == 1020
    os.close(fd)  # the other writer is done
    assert kv.run(engine, lambda tr: tr.get(b"b")) is None
    kv.run_sync(engine, lambda tr: tr.set(b"b", b"2"))
    assert kv.run(engine, lambda tr: tr.get(b"b")) == b"2"
    engine.close()


@pytest.mark.parametrize("changed", [False, True])
def test_a_queued_writer_waits_without_its_snapshot_and_validates_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: bool
) -> None:
    """A commit that finds the queue taken ends its read transaction before it waits (an
    open snapshot keeps the WAL from restarting), then checks its reads under the lock: a
    change made meanwhile by the writer ahead fails it with 1020, nothing applied."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    tr = engine.create_transaction()
    assert tr.get(b"a").wait() == b"1"  # a read: the transaction holds a snapshot
    tr.set(b"mine", b"x")
    conn = tr._conn
    assert conn is not None and conn.in_transaction
    fd = _hold_queue(path)
    while_waiting: list[bool] = []

    def sleep(seconds: float) -> None:
        while_waiting.append(conn.in_transaction)
        if changed:  # the writer ahead changes what we read (writing as another program)
            with contextlib.closing(sqlite3.connect(path)) as raw:
                raw.execute("UPDATE kv SET value = ? WHERE key = ?", (b"2", b"a"))
                raw.commit()
        os.close(fd)  # and finishes

    monkeypatch.setattr(
        writers_module, "time", SimpleNamespace(sleep=sleep, monotonic=time.monotonic)
    )
    if changed:
        with pytest.raises(EngineError) as raised:
            tr.commit().wait()
        assert raised.value.code == 1020
    else:
        tr.commit().wait()
    monkeypatch.undo()
    assert while_waiting == [False]  # no snapshot held while queued
    assert kv.run(engine, lambda t: t.get(b"mine")) == (None if changed else b"x")
    engine.close()


def test_a_forked_child_queues_apart_from_its_parent(tmp_path: Path) -> None:
    """A child forked while the parent holds the queue must wait for it (the parent's open
    file carries the parent's lock), must not keep the parent's descriptor (were the parent
    to die holding the queue, the lock would live on in the child), and leaves the
    inherited block giving nothing back, without error."""
    engine = SqliteEngine(tmp_path / "kv.db", busy_timeout=0.2)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    in_child, code = False, 0
    try:
        with engine._writers.turn(time.monotonic() + 1, refused="test") as granted:  # the parent's
            assert granted
            pid = os.fork()
            if pid == 0:  # the child: its commit must not get in
                in_child = True
                writer = str(tmp_path / "kv.db-writer")
                inherited = [fd for fd in os.listdir("/proc/self/fd") if _fd_target(fd) == writer]
                code = 4 if inherited else 0
                try:
                    kv.run_sync(engine, lambda tr: tr.set(b"child", b"1"), retry_limit=0)
                    code = 1
                except RetryLimitReached as exc:
                    code = code or (0 if exc.last.code == 1020 else 2)
                raise _LeaveBlock
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
    except _LeaveBlock:
        pass
    except BaseException:
        if not in_child:
            raise
        code = code or 3
    finally:
        if in_child:
            os._exit(code)
    assert kv.run(engine, lambda tr: tr.get(b"child")) is None
    engine.close()


class _LeaveBlock(Exception):
    """Leaves a ``with`` block in a forked child."""


def _fd_target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_an_interrupted_wait_gives_the_queue_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``KeyboardInterrupt`` while a commit waits in the queue leaves the queue usable."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    fd = _hold_queue(path)

    def sleep(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(
        writers_module, "time", SimpleNamespace(sleep=sleep, monotonic=time.monotonic)
    )
    tr = engine.create_transaction()
    tr.set(b"b", b"2")
    with pytest.raises(KeyboardInterrupt):
        tr.commit().wait()
    monkeypatch.undo()
    os.close(fd)
    kv.run_sync(engine, lambda tr: tr.set(b"b", b"2"))  # neither lock was kept
    assert kv.run(engine, lambda tr: tr.get(b"b")) == b"2"
    engine.close()


def test_the_writer_queue_is_taken_again_only_by_its_holder(tmp_path: Path) -> None:
    """The thread holding the queue may take it again (a commit inside ``alone``); no other
    thread can until every turn of the holder is given back."""
    engine = SqliteEngine(tmp_path / "kv.db")
    queue = engine._writers
    tries: list[bool] = []

    def another_thread_tries() -> None:
        def attempt() -> None:
            with queue.turn(time.monotonic()) as granted:
                tries.append(granted)

        thread = threading.Thread(target=attempt)
        thread.start()
        thread.join()

    with queue.turn(time.monotonic() + 1, refused="the test") as outer:
        with queue.turn(time.monotonic()) as inner:
            assert outer and inner
            another_thread_tries()
        another_thread_tries()  # the holder's first turn is still held
    another_thread_tries()
    assert tries == [False, False, True]
    turn = queue.turn(time.monotonic())
    with turn, pytest.raises(RuntimeError, match="entered once"):  # a turn is one block
        turn.__enter__()
    another_thread_tries()  # and the queue was given back
    assert tries == [False, False, True, True]
    engine.close()


def test_a_transaction_conflicted_twice_is_retried_alone_without_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a read conflict the retry backs off (as FoundationDB's client does); after a
    second one in a row, ``kv.run`` runs the next attempt alone, without a backoff: no
    writer that queues (here another thread, through another engine on the file) commits
    until it has, so it cannot conflict again."""
    path = tmp_path / "kv.db"
    engine, other = SqliteEngine(path), SqliteEngine(path, busy_timeout=0.05)
    kv.run_sync(engine, lambda tr: tr.set(b"n", b"0"))
    slept: list[float] = []
    monkeypatch.setattr(futures_module, "time", SimpleNamespace(sleep=slept.append))
    others: list[str] = []

    def another_writer() -> None:  # in another thread, as another writer would be
        def write() -> None:
            try:
                kv.run_sync(
                    other,
                    lambda t: t.set(b"n", b"%d" % (int(t.get(b"n").wait() or 0) + 1)),
                    retry_limit=0,
                )
                others.append("committed")
            except RetryLimitReached as exc:
                others.append(f"refused {exc.last.code}")

        thread = threading.Thread(target=write)
        thread.start()
        thread.join()

    attempts = 0

    def body(tr: kv.Transaction) -> None:
        nonlocal attempts
        attempts += 1
        n = int(tr.get(b"n").wait() or 0)
        another_writer()  # between our read and our commit
        tr.set(b"n", b"%d" % (n + 1))

    kv.run_sync(engine, body)
    assert attempts == 3 and len(slept) == 1  # one backoff, after the first conflict
    # the rivals of the first two attempts committed; the third's could not get in
    assert others == ["committed", "committed", "refused 1020"]
    assert kv.run(engine, lambda tr: tr.get(b"n")) == b"3"
    engine.close()
    other.close()


def test_a_commit_nested_in_an_alone_attempt_does_not_wait_for_itself(tmp_path: Path) -> None:
    """A transaction committed by the same thread inside an attempt that runs alone takes
    the queue again instead of waiting for itself; what it changed under the outer
    transaction's reads still fails the outer commit (1020), and the next attempt wins."""
    engine = SqliteEngine(tmp_path / "kv.db", busy_timeout=0.05)
    kv.run_sync(engine, lambda tr: tr.set(b"n", b"0"))
    attempts = 0

    def body(tr: kv.Transaction) -> None:
        nonlocal attempts
        attempts += 1
        n = int(tr.get(b"n").wait() or 0)
        if attempts <= 2:  # inside an alone attempt: no wait, or this would be 1020
            kv.run_sync(
                engine,
                lambda t: t.set(b"n", b"%d" % (int(t.get(b"n").wait() or 0) + 10)),
                retry_limit=0,
            )
        tr.set(b"n", b"%d" % (n + 1))

    kv.run_sync(engine, body, alone=True)
    assert attempts == 3
    assert kv.run(engine, lambda tr: tr.get(b"n")) == b"21"
    engine.close()


def test_engines_on_one_store_share_its_writer_queue(tmp_path: Path) -> None:
    """Engines open on one store in a process queue as one: a commit through another engine
    inside an ``alone`` block of the same thread takes the queue again (as an interleaved
    client of the fault matrix does), instead of waiting for itself until busy_timeout."""
    path = tmp_path / "kv.db"
    engine, other = SqliteEngine(path, busy_timeout=0.05), SqliteEngine(path, busy_timeout=0.05)
    assert engine._writers is other._writers
    with engine.alone():
        kv.run_sync(other, lambda t: t.set(b"k", b"v"), retry_limit=0)
    assert kv.run(engine, lambda t: t.get(b"k")) == b"v"
    other.close()  # the queue stays usable by the engine still open
    kv.run_sync(engine, lambda t: t.set(b"k", b"w"), retry_limit=0)
    engine.close()


def test_a_lock_not_granted_in_time_is_retried_after_a_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a read conflict is retried at once (alone): a queue not granted within
    busy_timeout -- here 0 -- backs off first, so the retries are not spent at once."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path, busy_timeout=0)
    fd = _hold_queue(path)  # another writer, for the length of one backoff
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        os.close(fd)

    monkeypatch.setattr(futures_module, "time", SimpleNamespace(sleep=sleep))
    kv.run_sync(engine, lambda tr: tr.set(b"k", b"v"), retry_limit=1)
    assert len(slept) == 1 and slept[0] > 0
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"v"
    engine.close()


def test_the_queue_is_the_stores_by_any_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path, a symlink to the store: one queue, on the file beside the store's
    real path, wherever the process moves to after opening."""
    (tmp_path / "real").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "real")
    engine = SqliteEngine("kv.db")
    os.symlink(tmp_path / "real" / "kv.db", tmp_path / "alias.db")
    alias = SqliteEngine(tmp_path / "alias.db")
    assert engine._writers is alias._writers
    assert engine._writers.path == (tmp_path / "real" / "kv.db-writer").resolve()
    monkeypatch.chdir(tmp_path / "elsewhere")
    alias.close()
    kv.run_sync(engine, lambda tr: tr.set(b"k", b"v"))
    assert os.listdir(tmp_path / "elsewhere") == []
    engine.close()


def test_closing_an_engine_never_waits_for_the_queue(tmp_path: Path) -> None:
    """Closing one engine while another thread holds the store's queue returns at once;
    the last engine's close leaves the queue file to the holder's release."""
    path = tmp_path / "kv.db"
    engine, other = SqliteEngine(path), SqliteEngine(path)
    kv.run_sync(engine, lambda tr: tr.set(b"k", b"v"))  # the queue file is open
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.alone():
            holding.set()
            done.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(timeout=30)

    def close_both() -> None:
        other.close()
        engine.close()

    closer = threading.Thread(target=close_both)
    closer.start()
    closer.join(timeout=10)
    closed_while_held = not closer.is_alive()
    done.set()
    holder.join()
    assert closed_while_held
    writer = str(tmp_path / "kv.db-writer")
    assert [fd for fd in os.listdir("/proc/self/fd") if _fd_target(fd) == writer] == []


@pytest.mark.parametrize(
    ("stored", "kind"),
    [("'hello'", "TEXT"), ("5", "INTEGER"), ("4611686018427387904", "INTEGER"), ("1.5", "REAL")],
)
def test_a_value_altered_to_another_sqlite_type_is_a_corrupt_record(
    tmp_path: Path, stored: str, kind: str
) -> None:
    """The engine writes only BLOBs; a row altered outside it (``UPDATE kv SET value =
    'hello'``) is ``CorruptRecord`` naming its key on every read path -- once a TypeError
    (TEXT), a MemoryError (a huge INTEGER) or that many zero bytes (a small one)."""
    engine = SqliteEngine(tmp_path / "aos.db")
    keys = [b"a", b"b", b"c"]
    kv.run_sync(engine, lambda tr: [tr.set(k, b"\x01" * 8) for k in keys])
    raw = sqlite3.connect(tmp_path / "aos.db")
    raw.execute(f"UPDATE kv SET value = {stored} WHERE key = x'62'")
    raw.commit()
    raw.close()
    reads = {
        "get": lambda tr: tr.get(b"b"),
        "get_many": lambda tr: tr.get_many(keys),
        "get_range": lambda tr: tr.get_range(b"a", b"d"),
        "add": lambda tr: tr.add(b"b", (1).to_bytes(8, "little")),  # read when committing
    }
    for name, read in reads.items():
        with pytest.raises(CorruptRecord, match=f"corrupt row 62: its value is an SQLite {kind}"):
            kv.run_sync(engine, read)
            pytest.fail(f"{name} read the altered row")
    assert kv.run(engine, lambda tr: tr.get(b"a")) == b"\x01" * 8
    engine.close()


def test_a_closed_engine_opens_no_new_connection(tmp_path: Path) -> None:
    """``Engine.close``: the engine is unusable afterwards -- it once opened new connections
    for every transaction after it (and kept them). One in use when it closed is closed when
    its transaction ends."""
    engine = SqliteEngine(tmp_path / "aos.db")
    kv.run_sync(engine, lambda tr: tr.set(b"k", b"v"))
    tr = engine.create_transaction()
    assert tr.get(b"k").wait() == b"v"  # holds a connection across the close
    engine.close()
    tr.commit().wait()  # read-only: ends the transaction, its connection closed, not pooled
    assert engine._idle == []
    with pytest.raises(Backend, match="the engine is closed"):
        kv.run(engine, lambda tr: tr.get(b"k"))


@pytest.mark.parametrize("change", ["replaced", "removed"])
def test_a_commit_into_a_file_no_longer_at_the_path_is_refused(tmp_path: Path, change: str) -> None:
    """The store file replaced by an older copy, or removed with its WAL, under an open
    engine: the next commit was acknowledged into the open file, with nothing at the path
    holding it (issue #35). It is ``Backend`` now, and nothing is committed."""
    path = tmp_path / "kv.db"
    engine = SqliteEngine(path)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))
    if change == "replaced":
        copy = tmp_path / "copy.db"
        SqliteEngine(copy).close()
        os.replace(copy, path)
    else:
        for name in ("kv.db", "kv.db-wal", "kv.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
    with pytest.raises(Backend, match="nothing was committed"):
        kv.run_sync(engine, lambda tr: tr.set(b"b", b"2"))
    engine.close()
    if change == "replaced":
        assert kv.run(SqliteEngine(path), lambda tr: tr.get(b"b")) is None
