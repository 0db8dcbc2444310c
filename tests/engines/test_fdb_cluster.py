"""The FoundationDB engine against a real cluster: FoundationDB 7.3.79 started by the test
session (:mod:`tests.fdb_cluster`). Every test works under its own random key prefix and
clears it afterwards; the last tests check what only a real client library can tell: the
retry table against ``fdb_error_predicate``, an unreachable cluster, the API version bounds.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.kv import fdb_wake
from backends.kv.fdb import FdbEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from conformance.torture.servers import running
from persistence import fdb_errors, kv, txsize
from persistence.errors import EngineError
from persistence.futures import drive
from tests import fdb_cluster as fdb_cluster_module
from tests.fdb_cluster import ROOT, FdbCluster


def _end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (no trailing 0xff here)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


@pytest.fixture(scope="module")
def cluster(fdb_cluster: FdbCluster) -> FdbEngine:
    """An engine on the session's cluster."""
    return fdb_cluster.engine()


@pytest.fixture
def prefix(cluster: FdbEngine) -> Iterator[bytes]:
    """A fresh key prefix, cleared after the test."""
    key_prefix = b"aosp-test/" + uuid.uuid4().hex.encode() + b"/"
    yield key_prefix
    end = _end(key_prefix)
    kv.run_sync(cluster, lambda tr: tr.clear_range(key_prefix, end))
    assert kv.run(cluster, lambda tr: tr.get_range(key_prefix, end)) == []


def test_set_and_get(cluster: FdbEngine, prefix: bytes) -> None:
    kv.run_sync(cluster, lambda tr: tr.set(prefix + b"k", b"value"))
    kv.run_sync(cluster, lambda tr: tr.set(prefix + b"empty", b""))
    tr = cluster.create_transaction()
    assert tr.get(prefix + b"k").wait() == b"value"
    assert tr.get(prefix + b"k", snapshot=True).wait() == b"value"
    assert tr.get(prefix + b"empty").wait() == b""
    assert tr.get(prefix + b"missing").wait() is None
    kv.run_sync(cluster, lambda tr: tr.clear(prefix + b"k"))
    assert cluster.create_transaction().get(prefix + b"k").wait() is None


def test_range_forward_reverse_and_limits(cluster: FdbEngine, prefix: bytes) -> None:
    rows = [(prefix + b"r/%d" % i, b"v%d" % i) for i in range(5)]

    def write(tr: kv.Transaction) -> None:
        tr.set(prefix + b"q", b"outside")
        for key, value in rows:
            tr.set(key, value)

    kv.run_sync(cluster, write)
    begin, end = prefix + b"r/", prefix + b"r0"
    tr = cluster.create_transaction()
    assert tr.get_range(begin, end).wait() == rows
    assert tr.get_range(begin, end, limit=2).wait() == rows[:2]
    assert tr.get_range(begin, end, reverse=True).wait() == rows[::-1]
    assert tr.get_range(begin, end, limit=3, reverse=True).wait() == rows[::-1][:3]
    assert tr.get_range(begin, end, snapshot=True).wait() == rows
    assert len(tr.get_range(prefix, _end(prefix)).wait()) == 6


def test_versionstamp(cluster: FdbEngine, prefix: bytes) -> None:
    placeholder = b"\x00" * 10
    stamped = prefix + b"vs/"
    tr = cluster.create_transaction()
    tr.set_versionstamped_key(stamped + placeholder + struct.pack("<I", len(stamped)), b"item")
    tr.set_versionstamped_value(prefix + b"latest", placeholder + struct.pack("<I", 0))
    future = tr.get_versionstamp()
    tr.commit().wait()
    stamp = future.wait()
    assert type(stamp) is bytes
    assert len(stamp) == 10
    check = cluster.create_transaction()
    assert check.get_range(stamped, _end(stamped)).wait() == [(stamped + stamp, b"item")]
    assert check.get(prefix + b"latest").wait() == stamp

    read_only = cluster.create_transaction()
    read_only.get(prefix + b"latest").wait()
    read_only_future = read_only.get_versionstamp()
    read_only.commit().wait()
    with pytest.raises(EngineError) as error:
        read_only_future.wait()
    assert error.value.code == fdb_errors.NO_COMMIT_VERSION


def test_conflict(cluster: FdbEngine, prefix: bytes) -> None:
    key = prefix + b"contended"
    kv.run_sync(cluster, lambda tr: tr.set(key, b"0"))
    first, second = cluster.create_transaction(), cluster.create_transaction()
    assert first.get(key).wait() == b"0"
    assert second.get(key).wait() == b"0"
    first.set(key, b"first")
    second.set(key, b"second")
    first.commit().wait()
    with pytest.raises(EngineError) as error:
        second.commit().wait()
    assert error.value.code == fdb_errors.NOT_COMMITTED
    assert fdb_errors.is_retryable(error.value)
    assert cluster.create_transaction().get(key).wait() == b"first"


def test_transactional_retry(cluster: FdbEngine, prefix: bytes) -> None:
    key = prefix + b"counter"
    attempts: list[int] = []

    @kv.transactional
    async def bump(tr: kv.Transaction) -> int:
        attempts.append(1)
        current = await tr.get(key)
        if len(attempts) == 1:
            kv.run_sync(cluster, lambda other: other.set(key, b"\x05"))
        value = (current or b"\x00")[0] + 1
        tr.set(key, bytes([value]))
        return value

    assert drive(bump(cluster)) == 6
    assert len(attempts) == 2
    assert cluster.create_transaction().get(key).wait() == b"\x06"


# --------------------------------------------------------------------------- the real library

PREDICATE_RETRYABLE, PREDICATE_MAYBE_COMMITTED, PREDICATE_RETRYABLE_NOT_COMMITTED = (
    50000,
    50001,
    50002,
)


def test_retry_table_matches_the_client_library(fdb_cluster: FdbCluster) -> None:
    """Our copy of FoundationDB's retry table (used by the memory and SQLite engines) is
    exactly what libfdb_c's ``fdb_error_predicate`` answers, for every error code."""
    library = ctypes.CDLL(str(fdb_cluster.client_library))
    library.fdb_get_error.restype = ctypes.c_char_p

    def codes(predicate: int) -> set[int]:
        return {c for c in range(1, 5000) if library.fdb_error_predicate(predicate, c)}

    assert codes(PREDICATE_RETRYABLE) == set(fdb_errors.RETRYABLE)
    assert codes(PREDICATE_MAYBE_COMMITTED) == set(fdb_errors.MAYBE_COMMITTED)
    assert codes(PREDICATE_RETRYABLE_NOT_COMMITTED) == set(fdb_errors.RETRYABLE_NOT_COMMITTED)
    for code, name in fdb_errors.ERROR_DESCRIPTIONS.items():
        described = library.fdb_get_error(code).decode()
        assert described not in ("UNKNOWN_ERROR", "An unknown error occurred"), (code, name)


def test_engine_classifies_through_the_library(cluster: FdbEngine) -> None:
    for code in range(1000, 2200):
        error = fdb_errors.engine_error(code)
        assert cluster.is_retryable(error) == (code in fdb_errors.RETRYABLE), code


def test_unreachable_cluster_fails_within_the_timeout(
    fdb_cluster: FdbCluster, tmp_path: Path
) -> None:
    """A cluster file naming a port where nothing listens: the first read fails with 1031
    once the timeout has passed, in a fresh process (one network thread per process)."""
    dead = tmp_path / "dead.cluster"
    dead.write_text("dead:dead@127.0.0.1:1\n")
    script = f"""
import threading
import time
from backends.kv import open_engine
from persistence import kv
from persistence.errors import EngineError
engine = open_engine("fdb://{dead}?timeout_ms=1500&client_library={{lib}}")
def read():
    started = time.monotonic()
    try:
        kv.run(engine, lambda tr: tr.get(b"k"))
    except EngineError as exc:
        print(exc.code, round(time.monotonic() - started, 2))
read()
worker = threading.Thread(target=read)  # blocks in libfdb_c: the timeout ends it too
worker.start()
worker.join()
"""
    library = fdb_cluster.client_library
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script.replace("{lib}", str(library))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    main, worker = done.stdout.splitlines()
    for line in (main, worker):
        code, seconds = line.split()
        assert int(code) == fdb_errors.TRANSACTION_TIMED_OUT
        assert 1.4 <= float(seconds) < 5.0
    assert time.monotonic() - started < 30


class _CountedWaits:
    """Counts, per thread, the waits through the bindings' ``block_until_ready`` (on a
    future not ready yet), through libfdb_c's ``fdb_future_block_until_ready`` (the
    bindings' ``capi``, wrapped) and through the main thread's pipe (``fdb_wake.block``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import fdb.impl

        from backends.kv import fdb_wake

        self.bindings: Counter[str] = Counter()
        self.library: Counter[str] = Counter()
        self.pipe: Counter[str] = Counter()
        original_pipe = fdb_wake.block

        def pipe(future: Any) -> bool:
            waits.pipe[threading.current_thread().name] += 1
            return original_pipe(future)

        monkeypatch.setattr(fdb_wake, "block", pipe)
        original_block = fdb.impl.Future.block_until_ready
        capi = fdb.impl._FDBBase.capi
        waits = self

        def block_until_ready(future: Any) -> None:
            if not future.is_ready():  # reading a ready value calls it too: no wait
                waits.bindings[threading.current_thread().name] += 1
            original_block(future)

        class Capi:
            def __getattr__(self, name: str) -> Any:
                return getattr(capi, name)

            def fdb_future_block_until_ready(self, pointer: Any) -> Any:
                waits.library[threading.current_thread().name] += 1
                return capi.fdb_future_block_until_ready(pointer)

        monkeypatch.setattr(fdb.impl.Future, "block_until_ready", block_until_ready)
        monkeypatch.setattr(fdb.impl._FDBBase, "capi", Capi())


def test_waits_off_the_main_thread_block_in_the_client_library(
    cluster: FdbEngine, prefix: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread other than the main one waits in libfdb_c (no Python callback on the
    network thread); the main thread reads a pipe the C callback writes to (a signal can
    interrupt it there, and nothing runs Python on the network thread either), or waits
    through the bindings where the C part is missing. The outcomes are the same."""
    waits = _CountedWaits(monkeypatch)

    def transactions() -> list[bytes | None]:
        seen = []
        for n in range(10):
            key = prefix + b"%d" % n
            kv.run_sync(cluster, lambda tr: tr.set(key, b"v%d" % n))  # noqa: B023 -- run here
            seen.append(kv.run(cluster, lambda tr: tr.get(key)))  # noqa: B023
        return seen

    worker_saw: list[list[bytes | None]] = []
    worker = threading.Thread(target=lambda: worker_saw.append(transactions()), name="worker")
    worker.start()
    worker.join()
    main_saw = transactions()
    expected = [b"v%d" % n for n in range(10)]
    assert worker_saw == [expected] and main_saw == expected
    main = threading.main_thread().name
    assert waits.library["worker"] > 0 and waits.bindings["worker"] == waits.pipe["worker"] == 0
    assert waits.library[main] == 0
    if fdb_wake.available():
        assert waits.pipe[main] > 0 and waits.bindings[main] == 0
    else:
        assert waits.bindings[main] > 0


def test_one_c_callback_notifies_every_future_and_keeps_none(
    cluster: FdbEngine, prefix: bytes
) -> None:
    """Futures notified through the engine's one C callback: each callback runs once when
    its future is ready (on the network thread, or at once on the caller's if it is ready
    already), a future notified twice runs both, a callback that raises is logged without
    stopping the others, and no future is kept once its callbacks ran."""
    from backends.kv import fdb as fdb_engine

    kv.run_sync(cluster, lambda tr: tr.set(prefix + b"k", b"v"))
    calls: Counter[int] = Counter()
    done = threading.Event()
    reads = []
    tr = cluster._db.create_transaction()
    for n in range(50):
        read = tr[prefix + b"k" if n % 2 else prefix + b"missing"]
        reads.append(read)

        def called(n: int = n) -> None:
            calls[n] += 1
            if sum(calls.values()) == 75:
                done.set()

        fdb_engine._notify(read, called)
        if n % 2 == 0:
            fdb_engine._notify(read, functools.partial(called, n + 1000))

    logged: list[logging.LogRecord] = []
    failure_logged = threading.Event()

    class Logged(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record)
            failure_logged.set()

    def fails() -> None:
        raise RuntimeError("a callback that fails")

    handler = Logged()
    logging.getLogger(fdb_engine.__name__).addHandler(handler)
    try:
        fdb_engine._notify(reads[0], fails)
        assert done.wait(10) and failure_logged.wait(10)
    finally:
        logging.getLogger(fdb_engine.__name__).removeHandler(handler)
    assert [calls[n] for n in range(50)] == [1] * 50
    assert [calls[n + 1000] for n in range(0, 50, 2)] == [1] * 25
    assert [r.getMessage() for r in logged] == ["a callback of a FoundationDB future failed"]
    assert logged[0].exc_info is not None and "a callback that fails" in str(logged[0].exc_info[1])
    assert fdb_engine._notified == {}  # each is let go before its callback runs
    on: list[int] = []
    fdb_engine._notify(reads[1], lambda: on.append(threading.get_ident()))
    assert on == [threading.get_ident()]  # ready already: called here, before returning
    assert fdb_engine._notified == {}


def test_api_version_bounds_with_the_real_bindings(fdb_cluster: FdbCluster) -> None:
    script = """
from backends.kv.fdb import load_bindings
from persistence.errors import Validation
for version in (519, 731):
    try:
        load_bindings(version)
    except Validation as exc:
        print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines == [
        "fdb api_version: 519 is outside 520..730 (the installed bindings, foundationdb "
        "7.3.79, support up to 730)",
        "fdb api_version: 731 is outside 520..730 (the installed bindings, foundationdb "
        "7.3.79, support up to 730)",
    ]


# --------------------------------------------------------------------------- size accounting

LIMIT = 1_000
K10 = b"k" * 10
STAMPED_KEY = b"p" * 10 + b"\x00" * 10 + (10).to_bytes(4, "little")


def _stamped_value(n: int) -> bytes:
    return b"\x00" * 10 + b"v" * n + (0).to_bytes(4, "little")


SIZE_CASES: list[tuple[str, Callable[[int], Callable[[kv.Transaction], object]], int]] = [
    # (what, the transaction with a value of n bytes, txsize's count of it with n = 0)
    ("set", lambda n: lambda tr: tr.set(K10, b"v" * n), txsize.set_cost(10, 0)),
    ("add", lambda n: lambda tr: tr.add(K10, b"\x01" * n), txsize.set_cost(10, 0)),
    (
        "get then set",
        lambda n: lambda tr: (tr.get(K10), tr.set(K10, b"v" * n)),
        txsize.get_cost(10) + txsize.set_cost(10, 0),
    ),
    (
        "conflict range then set",
        lambda n: (
            lambda tr: (tr.add_read_conflict_range(b"a" * 10, b"b" * 10), tr.set(K10, b"v" * n))
        ),
        txsize.read_cost(10, 10) + txsize.set_cost(10, 0),
    ),
    (
        "clear then set",
        lambda n: lambda tr: (tr.clear(b"c" * 10), tr.set(K10, b"v" * n)),
        txsize.clear_cost(10) + txsize.set_cost(10, 0),
    ),
    (
        "clear_range then set",
        lambda n: lambda tr: (tr.clear_range(b"a" * 10, b"b" * 10), tr.set(K10, b"v" * n)),
        txsize.clear_range_cost(10, 10) + txsize.set_cost(10, 0),
    ),
    (
        "versionstamped key",
        lambda n: lambda tr: tr.set_versionstamped_key(STAMPED_KEY, b"v" * n),
        txsize.versionstamped_key_cost(len(STAMPED_KEY), 0),
    ),
    (
        "versionstamped value",
        lambda n: lambda tr: tr.set_versionstamped_value(K10, _stamped_value(n)),
        txsize.set_cost(10, 14),
    ),
    (
        "snapshot read then set",
        lambda n: lambda tr: (tr.get(b"o" * 20, snapshot=True), tr.set(K10, b"v" * n)),
        txsize.set_cost(10, 0),
    ),
]


def _commits(engine: kv.Engine, body: Callable[[kv.Transaction], object]) -> bool:
    tr = engine.create_transaction()
    body(tr)
    try:
        tr.commit().wait()
    except EngineError as exc:
        assert exc.code == fdb_errors.TRANSACTION_TOO_LARGE, exc
        return False
    return True


@pytest.mark.parametrize(("what", "make", "fixed"), SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
@pytest.mark.parametrize("kind", ["fdb", "memory", "sqlite"])
def test_transaction_size_is_counted_as_foundationdb_counts_it(
    kind: str,
    what: str,
    make: Callable[[int], Callable[[kv.Transaction], object]],
    fixed: int,
    fdb_cluster: FdbCluster,
    tmp_path: Path,
) -> None:
    """With a 1,000-byte size limit the largest value that commits is the same on the
    cluster, on the memory and SQLite engines, and in persistence.txsize's formula."""
    factories: dict[str, Callable[[], kv.Engine]] = {
        "fdb": lambda: fdb_cluster.engine(),
        "memory": MemoryEngine,
        "sqlite": lambda: SqliteEngine(tmp_path / "kv.db"),
    }
    engine = factories[kind]()
    engine.size_limit = LIMIT
    largest = LIMIT - fixed
    assert _commits(engine, make(largest)), f"{what}: {largest} bytes did not commit"
    assert not _commits(engine, make(largest + 1)), f"{what}: {largest + 1} bytes committed"


def test_the_engine_s_options_hold_across_on_error_and_stay_its_own(
    fdb_cluster: FdbCluster, prefix: bytes
) -> None:
    """The timeout and size limit are database options of the engine's own Database: a
    transaction reset by ``on_error`` keeps the size limit, and its timeout still counts
    from its creation; ``fdb.open``'s Database, shared with other code of the process,
    gets neither."""
    engine = fdb_cluster.engine(timeout_ms=1_500, size_limit=1_000)
    tr: kv.Transaction = engine.create_transaction()
    for _ in range(2):  # over the size limit, before and after a reset by on_error
        tr.set(prefix + b"big", b"x" * 2_000)
        with pytest.raises(EngineError) as too_large:
            tr.commit().wait()
        assert too_large.value.code == fdb_errors.TRANSACTION_TOO_LARGE
        tr = tr.on_error(fdb_errors.engine_error(fdb_errors.NOT_COMMITTED)).wait()
    tr = engine.create_transaction()
    time.sleep(1.0)
    tr = tr.on_error(fdb_errors.engine_error(fdb_errors.NOT_COMMITTED)).wait()
    time.sleep(0.7)  # 1.7 s after its creation, 0.7 s after the reset
    with pytest.raises(EngineError) as timed_out:
        tr.get(prefix + b"k").wait()
    assert timed_out.value.code == fdb_errors.TRANSACTION_TIMED_OUT
    shared = engine._fdb.open(str(fdb_cluster.cluster_file)).create_transaction()
    time.sleep(1.6)
    shared.set(prefix + b"small", b"x" * 2_000)
    shared.commit().wait()  # neither the engine's timeout nor its size limit


def test_a_start_whose_server_found_its_port_taken_starts_again_on_another(
    fdb_cluster: FdbCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose port another program took between the pick and the bind exits at
    once, and the database may still become available on the others: the start is stopped
    and made again on another port, and every server of the cluster returned runs."""
    del fdb_cluster  # only for the skip on a machine without the binaries
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    picks = iter([port - 1])  # the second server's port is the one taken
    pick = fdb_cluster_module._listening_port
    monkeypatch.setattr(
        fdb_cluster_module, "_listening_port", lambda n: next(picks, None) or _free_ports(pick, n)
    )
    try:
        cluster = fdb_cluster_module.start_cluster(tmp_path, processes=3)
    finally:
        taken.close()
    try:
        assert cluster.directory.name == "attempt-1"  # the first start was stopped
        assert all(running(pid) for pid in cluster.pids())
        assert not (tmp_path / "attempt-0" / "fdbserver.pid").exists()
        kv.run_sync(cluster.engine(), lambda tr: tr.set(b"started", b"again"))
    finally:
        fdb_cluster_module.stop_cluster(cluster)


def _free_ports(pick: Callable[[int], int], count: int) -> int:
    """A first port of ``count`` free ones in a row, as ``pick`` picks them (each held a
    moment to find them)."""
    while True:
        first = pick(count)
        held = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()


def test_a_start_that_takes_too_long_is_stopped_and_made_again(
    fdb_cluster: FdbCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fdb-local start`` past its time (a database that never became available, polled
    for minutes): the start is stopped and made again, as a failed one is."""
    del fdb_cluster  # only for the skip on a machine without the binaries
    run = subprocess.run
    starts: list[str] = []

    def first_start_times_out(command: list[str], **options: Any) -> Any:
        if command[1] == "start":
            starts.append(command[2])
            if len(starts) == 1:
                run(command, **options)  # servers started, then "too long"
                raise subprocess.TimeoutExpired(command, options["timeout"])
        return run(command, **options)

    monkeypatch.setattr(subprocess, "run", first_start_times_out)
    cluster = fdb_cluster_module.start_cluster(tmp_path)
    try:
        assert [Path(s).name for s in starts] == ["attempt-0", "attempt-1"]
        assert cluster.directory.name == "attempt-1"
        assert not (tmp_path / "attempt-0" / "fdbserver.pid").exists()  # stopped
        kv.run_sync(cluster.engine(), lambda tr: tr.set(b"started", b"again"))
    finally:
        fdb_cluster_module.stop_cluster(cluster)
