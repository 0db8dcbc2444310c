"""The FoundationDB adapter (:mod:`backends.kv.fdb`) against a faithful fake of the binding.

The fake (:mod:`tests.engines.fake_fdb`) is installed as ``sys.modules["fdb"]``, so the
adapter's own ``load_bindings`` imports it and selects an API version exactly as it would with
the real bindings; the database underneath is a :class:`~backends.kv.memory.MemoryEngine`.
The last sections check ``load_bindings`` without the bindings or without ``libfdb_c``, and
that the fake still mirrors the real binding's source.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from backends.kv import fdb as fdb_backend
from backends.kv import open_engine
from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.fdb import (
    DEFAULT_API_VERSION,
    FdbEngine,
    FdbOptions,
    FdbTransaction,
    load_bindings,
)
from backends.kv.memory import MemoryEngine
from persistence import fdb_errors, kv
from persistence.errors import (
    EngineError,
    MissingDependency,
    NotFound,
    RetryLimitReached,
    Validation,
)
from persistence.futures import Future, drive
from tests.engines import fake_fdb
from tests.engines.fake_fdb import FakeFdb, FDBError, make_fake_fdb

# --------------------------------------------------------------------------- fixtures


def _install(monkeypatch: pytest.MonkeyPatch, module: object) -> None:
    """Make ``import fdb`` return ``module`` and forget the adapter's cached bindings."""
    monkeypatch.setattr(fdb_backend, "_fdb", None)
    monkeypatch.setitem(sys.modules, "fdb", module)
    monkeypatch.delenv("FDB_CLUSTER_FILE", raising=False)


@pytest.fixture
def memory() -> MemoryEngine:
    return MemoryEngine()


@pytest.fixture
def fake(memory: MemoryEngine, monkeypatch: pytest.MonkeyPatch) -> FakeFdb:
    module = make_fake_fdb(memory)
    _install(monkeypatch, module)
    return module


@pytest.fixture
def engine(fake: FakeFdb) -> FdbEngine:
    return FdbEngine()


def _put(engine: kv.Engine, rows: dict[bytes, bytes]) -> None:
    def write(tr: kv.Transaction) -> None:
        for key, value in rows.items():
            tr.set(key, value)

    kv.run_sync(engine, write)


def _offset(n: int) -> bytes:
    """The 4-byte little-endian versionstamp offset suffix (API version >= 520)."""
    return struct.pack("<I", n)


def _code(error: pytest.ExceptionInfo[EngineError]) -> int:
    return error.value.code


# --------------------------------------------------------------------------- opening


def _cluster_file(directory: Path) -> str:
    path = directory / "fdb.cluster"
    path.write_text("test:abc@127.0.0.1:4500\n")
    return str(path)


def test_engine_loads_fake_bindings_and_opens_cluster_file(fake: FakeFdb, tmp_path: Path) -> None:
    cluster = _cluster_file(tmp_path)
    engine = FdbEngine(cluster, FdbOptions(api_version=710))
    assert fake.get_api_version() == 710
    assert fake.opened == [cluster]
    assert engine.url == f"fdb://{cluster}"
    assert isinstance(engine.create_transaction(), FdbTransaction)


def test_cluster_file_defaults_to_environment(
    fake: FakeFdb, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster = _cluster_file(tmp_path)
    monkeypatch.setenv("FDB_CLUSTER_FILE", cluster)
    FdbEngine()
    assert fake.opened == [cluster]
    assert fake.get_api_version() == DEFAULT_API_VERSION


def test_missing_cluster_file_is_not_found(fake: FakeFdb, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"cluster file .*missing\.cluster does not exist"):
        FdbEngine(str(tmp_path / "missing.cluster"))
    assert fake.opened == []


def test_open_engine_url_reaches_the_adapter(fake: FakeFdb, tmp_path: Path) -> None:
    cluster = _cluster_file(tmp_path)
    engine = open_engine(
        f"fdb://{cluster}?api_version=720&timeout_ms=1500&retry_limit=7&size_limit=5000000"
    )
    assert isinstance(engine, FdbEngine)
    assert fake.opened == [cluster]
    assert fake.get_api_version() == 720
    assert engine.retry_limit == 7
    tr = engine.create_transaction()
    assert tr._tr.option_calls == {"timeout": 1500, "size_limit": 5_000_000}


def test_options_are_per_engine_and_the_shared_database_keeps_its_own(
    fake: FakeFdb, tmp_path: Path
) -> None:
    """``fdb.open`` returns one Database per cluster file, shared with the host's own code:
    an engine's options are database options of a Database of its own (one per cluster
    file and options), never of that one."""
    cluster = _cluster_file(tmp_path)
    small = FdbEngine(cluster, FdbOptions(timeout_ms=100, size_limit=1000))
    default = FdbEngine(cluster)
    assert small._db is not default._db and fake.open(cluster) not in (small._db, default._db)
    assert small.create_transaction()._tr.option_calls == {"timeout": 100, "size_limit": 1000}
    assert default.create_transaction()._tr.option_calls == {
        "timeout": 10_000,
        "size_limit": 10_000_000,
    }
    assert fake.open(cluster).create_transaction().option_calls == {}


def test_on_error_keeps_the_timeout_and_sets_the_size_limit_again(
    fake: FakeFdb, tmp_path: Path
) -> None:
    engine = FdbEngine(_cluster_file(tmp_path), FdbOptions(timeout_ms=5_000, size_limit=2_000))
    tr = engine.create_transaction()
    assert tr.on_error(fdb_errors.engine_error(fdb_errors.NOT_COMMITTED)).wait() is tr
    assert tr._tr.option_calls == {"timeout": 5_000, "size_limit": 2_000}


@pytest.mark.parametrize(
    "query",
    [
        "api_version=abc",
        "timeout_ms=-1",
        "timeout_ms=0",
        "retry_limit=1.5",
        "size_limit=31",
        "size_limit=10000001",
        "colour=blue",
        "timeout_ms=\u0661\u0660",  # Arabic-Indic digits: isdigit() but not ASCII
    ],
)
def test_bad_url_options_are_refused_before_opening(
    fake: FakeFdb, tmp_path: Path, query: str
) -> None:
    with pytest.raises(Validation) as error:
        open_engine(f"fdb://{_cluster_file(tmp_path)}?{query}")
    assert "fdb" in str(error.value) or "kv url" in str(error.value)
    assert fake.opened == []


@pytest.mark.parametrize("version", [519, 731, 13, 0])
def test_api_version_outside_the_supported_range(fake: FakeFdb, version: int) -> None:
    with pytest.raises(Validation) as error:
        load_bindings(version)
    message = str(error.value)
    assert f"{version} is outside 520..{fake.LATEST_API_VERSION}" in message
    assert fake.LATEST_API_VERSION == 730 and not fake.is_api_version_selected()


def test_bindings_are_loaded_once(fake: FakeFdb) -> None:
    first, second = FdbEngine(), FdbEngine()
    assert fdb_backend._fdb is fake
    assert fake.opened == [None]  # the network started once
    assert first._db is second._db and fake.created_databases == [None]  # same options


# --------------------------------------------------------------------------- reads


def test_get_absent_and_present(engine: FdbEngine) -> None:
    _put(engine, {b"k": b"value", b"empty": b""})
    tr = engine.create_transaction()
    assert tr.get(b"missing").wait() is None
    present = tr.get(b"k").wait()
    assert present == b"value"
    assert type(present) is bytes
    empty = tr.get(b"empty").wait()
    assert empty == b""
    assert type(empty) is bytes


def test_get_reads_own_writes(engine: FdbEngine) -> None:
    _put(engine, {b"a": b"1", b"b": b"2"})
    tr = engine.create_transaction()
    tr.set(b"a", b"one")
    tr.clear(b"b")
    tr.set(b"c", b"3")
    assert tr.get(b"a").wait() == b"one"
    assert tr.get(b"b").wait() is None
    assert tr.get(b"c").wait() == b"3"
    assert tr.get_range(b"a", b"z").wait() == [(b"a", b"one"), (b"c", b"3")]


@pytest.mark.parametrize(
    ("limit", "reverse", "expected"),
    [
        (0, False, [b"r/0", b"r/1", b"r/2", b"r/3", b"r/4"]),
        (2, False, [b"r/0", b"r/1"]),
        (0, True, [b"r/4", b"r/3", b"r/2", b"r/1", b"r/0"]),
        (3, True, [b"r/4", b"r/3", b"r/2"]),
        (10, False, [b"r/0", b"r/1", b"r/2", b"r/3", b"r/4"]),
    ],
)
def test_get_range_forward_and_reverse_with_limits(
    engine: FdbEngine, limit: int, reverse: bool, expected: list[bytes]
) -> None:
    rows = {b"r/%d" % i: b"v%d" % i for i in range(5)}
    _put(engine, {b"q": b"before", **rows, b"s": b"after"})
    tr = engine.create_transaction()
    got = tr.get_range(b"r/", b"r0", limit=limit, reverse=reverse).wait()
    assert got == [(key, rows[key]) for key in expected]
    assert all(type(k) is bytes and type(v) is bytes for k, v in got)


def test_get_range_empty_and_inverted(engine: FdbEngine) -> None:
    _put(engine, {b"a": b"1"})
    tr = engine.create_transaction()
    assert tr.get_range(b"b", b"c").wait() == []
    assert tr.get_range(b"z", b"a").wait() == []


def test_ranges_are_materialised_inside_the_transaction(engine: FdbEngine) -> None:
    _put(engine, {b"a": b"1", b"b": b"2"})
    tr = engine.create_transaction()
    rows = tr.get_range(b"a", b"z").wait()
    snapshot_rows = tr.get_range(b"a", b"z", snapshot=True).wait()
    tr.commit().wait()
    # The fake's ranges fail once the transaction commits; the adapter returned lists.
    assert rows == [(b"a", b"1"), (b"b", b"2")]
    assert snapshot_rows == rows


@pytest.mark.parametrize("snapshot", [True, False])
def test_snapshot_reads_take_no_read_conflicts(engine: FdbEngine, snapshot: bool) -> None:
    _put(engine, {b"k": b"old", b"r/1": b"x"})
    reader = engine.create_transaction()
    assert reader.get(b"k", snapshot=snapshot).wait() == b"old"
    assert reader.get_range(b"r/", b"r0", snapshot=snapshot).wait() == [(b"r/1", b"x")]
    _put(engine, {b"k": b"new", b"r/2": b"y"})
    reader.set(b"elsewhere", b"1")
    if snapshot:
        reader.commit().wait()
        assert kv.run(engine, lambda tr: tr.get(b"elsewhere")) == b"1"
    else:
        with pytest.raises(EngineError) as error:
            reader.commit().wait()
        assert _code(error) == fdb_errors.NOT_COMMITTED


def test_snapshot_reads_see_own_writes_and_a_consistent_version(engine: FdbEngine) -> None:
    _put(engine, {b"k": b"old"})
    tr = engine.create_transaction()
    assert tr.get(b"k", snapshot=True).wait() == b"old"
    _put(engine, {b"k": b"newer"})
    assert tr.get(b"k", snapshot=True).wait() == b"old"
    tr.set(b"k", b"mine")
    assert tr.get(b"k", snapshot=True).wait() == b"mine"


def test_get_read_version(engine: FdbEngine) -> None:
    tr = engine.create_transaction()
    version = tr.get_read_version().wait()
    assert isinstance(version, int)
    assert tr.get_read_version().wait() == version
    _put(engine, {b"k": b"v"})
    assert engine.create_transaction().get_read_version().wait() > version


# --------------------------------------------------------------------------- writes


def test_clear_clear_range_and_add(engine: FdbEngine) -> None:
    _put(engine, {b"a": b"1", b"b/1": b"x", b"b/2": b"y", b"c": b"3"})

    def body(tr: kv.Transaction) -> None:
        tr.clear(b"a")
        tr.clear_range(b"b/", b"b0")
        tr.add(b"counter", (5).to_bytes(8, "little"))
        tr.add(b"counter", (7).to_bytes(8, "little"))

    kv.run_sync(engine, body)
    kv.run_sync(engine, lambda tr: tr.add(b"counter", (1).to_bytes(8, "little")))
    tr = engine.create_transaction()
    assert tr.get_range(b"", b"\xff").wait() == [
        (b"c", b"3"),
        (b"counter", (13).to_bytes(8, "little")),
    ]


def test_add_read_conflict_range_conflicts(engine: FdbEngine) -> None:
    tr = engine.create_transaction()
    tr.get_read_version().wait()
    tr.add_read_conflict_range(b"m", b"n")
    tr.add_read_conflict_key(b"solo")
    _put(engine, {b"m/inside": b"1"})
    tr.set(b"x", b"1")
    with pytest.raises(EngineError) as error:
        tr.commit().wait()
    assert _code(error) == fdb_errors.NOT_COMMITTED


def test_conflicting_read_then_write_fails_the_second_commit(engine: FdbEngine) -> None:
    _put(engine, {b"k": b"0"})
    first, second = engine.create_transaction(), engine.create_transaction()
    assert first.get(b"k").wait() == b"0"
    assert second.get(b"k").wait() == b"0"
    first.set(b"k", b"first")
    second.set(b"k", b"second")
    first.commit().wait()
    with pytest.raises(EngineError) as error:
        second.commit().wait()
    assert _code(error) == fdb_errors.NOT_COMMITTED
    assert error.value.description == fake_fdb.ERROR_DESCRIPTIONS[fdb_errors.NOT_COMMITTED]
    assert fdb_errors.is_retryable(error.value)
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"first"


# --------------------------------------------------------------------------- versionstamps


def test_versionstamp_resolves_after_commit(engine: FdbEngine) -> None:
    placeholder = b"\x00" * 10
    tr = engine.create_transaction()
    tr.set_versionstamped_key(b"vs/" + placeholder + b"/tail" + _offset(3), b"payload")
    tr.set_versionstamped_value(b"latest", b"v:" + placeholder + _offset(2))
    future = tr.get_versionstamp()
    tr.commit().wait()
    stamp = future.wait()
    assert type(stamp) is bytes
    assert len(stamp) == 10
    assert future.wait() == stamp
    check = engine.create_transaction()
    assert check.get_range(b"vs/", b"vs0").wait() == [(b"vs/" + stamp + b"/tail", b"payload")]
    assert check.get(b"latest").wait() == b"v:" + stamp
    version = int.from_bytes(stamp[:8], "big")
    assert version <= check.get_read_version().wait()

    later = engine.create_transaction()
    later.set(b"other", b"1")
    later_future = later.get_versionstamp()
    later.commit().wait()
    assert later_future.wait() > stamp


def test_versionstamp_before_commit_is_an_error(engine: FdbEngine) -> None:
    tr = engine.create_transaction()
    tr.set(b"k", b"v")
    future = tr.get_versionstamp()
    with pytest.raises(EngineError) as error:
        future.wait()
    assert _code(error) == fdb_errors.USED_DURING_COMMIT
    tr.commit().wait()
    assert len(future.wait()) == 10


def test_versionstamp_of_read_only_transaction(engine: FdbEngine) -> None:
    tr = engine.create_transaction()
    tr.get(b"k").wait()
    future = tr.get_versionstamp()
    tr.commit().wait()
    with pytest.raises(EngineError) as error:
        future.wait()
    assert _code(error) == fdb_errors.NO_COMMIT_VERSION


def test_versionstamp_of_failed_commit(engine: FdbEngine) -> None:
    tr = engine.create_transaction()
    tr.get(b"k").wait()
    tr.set(b"k", b"mine")
    future = tr.get_versionstamp()
    _put(engine, {b"k": b"theirs"})
    with pytest.raises(EngineError):
        tr.commit().wait()
    with pytest.raises(EngineError) as error:
        future.wait()
    assert _code(error) == fdb_errors.NOT_COMMITTED


# --------------------------------------------------------------------------- errors


def _too_old(engine: FdbEngine, clock: list[float]) -> None:
    tr = engine.create_transaction()
    clock[0] += kv.MAX_TRANSACTION_SECONDS + 1
    tr.get(b"k").wait()


ERROR_CASES: dict[str, tuple[int, Callable[[FdbEngine], object]]] = {
    "set key too large": (
        fdb_errors.KEY_TOO_LARGE,
        lambda e: e.create_transaction().set(b"k" * (kv.MAX_KEY_SIZE + 1), b"v"),
    ),
    "set value too large": (
        fdb_errors.VALUE_TOO_LARGE,
        lambda e: e.create_transaction().set(b"k", b"v" * (kv.MAX_VALUE_SIZE + 1)),
    ),
    "set system key": (
        fdb_errors.KEY_OUTSIDE_LEGAL_RANGE,
        lambda e: e.create_transaction().set(b"\xff/system", b"v"),
    ),
    "get system key": (
        fdb_errors.KEY_OUTSIDE_LEGAL_RANGE,
        lambda e: e.create_transaction().get(b"\xff/system"),
    ),
    "range past the system keys": (
        fdb_errors.KEY_OUTSIDE_LEGAL_RANGE,
        lambda e: e.create_transaction().get_range(b"a", b"\xff\xff"),
    ),
    "negative range limit": (
        fdb_errors.CLIENT_INVALID_OPERATION,
        lambda e: e.create_transaction().get_range(b"a", b"b", limit=-1),
    ),
    "use after commit": (fdb_errors.USED_DURING_COMMIT, lambda e: _commit_then(e, "get")),
    "write after commit": (fdb_errors.USED_DURING_COMMIT, lambda e: _commit_then(e, "set")),
    "commit twice": (fdb_errors.USED_DURING_COMMIT, lambda e: _commit_then(e, "commit")),
}


def _commit_then(engine: FdbEngine, action: str) -> None:
    tr = engine.create_transaction()
    tr.set(b"k", b"v")
    tr.commit().wait()
    if action == "get":
        tr.get(b"k").wait()
    elif action == "set":
        # The binding defers write errors: this one surfaces at the next read or commit.
        tr.set(b"k", b"again")
        tr.get_range(b"a", b"z").wait()
    else:
        tr.commit().wait()


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_surface_as_engine_errors_with_fdb_codes(engine: FdbEngine, case: str) -> None:
    code, action = ERROR_CASES[case]
    with pytest.raises(EngineError) as error:
        outcome = action(engine)
        if isinstance(outcome, Future):  # a read: its error comes with its value
            outcome.wait()
    assert _code(error) == code
    if case.startswith("set "):
        # Checked by the adapter itself before the call: the binding would defer the error.
        assert error.value.description.startswith(fdb_errors.ERROR_DESCRIPTIONS[code])
    else:
        assert error.value.description == fake_fdb.ERROR_DESCRIPTIONS[code]


@pytest.mark.parametrize(
    ("code", "write"),
    [
        (fdb_errors.KEY_TOO_LARGE, lambda tr: tr.add(b"k" * (kv.MAX_KEY_SIZE + 1), b"\x01")),
        (fdb_errors.KEY_OUTSIDE_LEGAL_RANGE, lambda tr: tr.clear(b"\xff/system")),
        (fdb_errors.CLIENT_INVALID_OPERATION, lambda tr: tr.set_versionstamped_key(b"short", b"v")),
        (
            fdb_errors.CLIENT_INVALID_OPERATION,
            lambda tr: tr.set_versionstamped_value(b"k", b"\x00"),
        ),
    ],
)
def test_deferred_write_errors_fail_the_commit(
    engine: FdbEngine, code: int, write: Callable[[kv.Transaction], None]
) -> None:
    tr = engine.create_transaction()
    write(tr)  # as with the real binding, the error is deferred ...
    tr.set(b"dropped", b"1")  # ... and later writes are dropped
    with pytest.raises(EngineError) as error:
        tr.commit().wait()
    assert _code(error) == code
    assert engine.create_transaction().get(b"dropped").wait() is None


def test_transaction_too_old(fake: FakeFdb) -> None:
    clock = [0.0]
    fake.engine = MemoryEngine(clock=lambda: clock[0])
    engine = FdbEngine()
    with pytest.raises(EngineError) as error:
        _too_old(engine, clock)
    assert _code(error) == fdb_errors.TRANSACTION_TOO_OLD
    assert fdb_errors.is_retryable(error.value)


# --------------------------------------------------------------------------- retries


def test_transactional_retries_a_conflict_through_the_adapter(engine: FdbEngine) -> None:
    attempts: list[int] = []

    @kv.transactional
    async def bump(tr: kv.Transaction, key: bytes) -> int:
        attempts.append(1)
        current = await tr.get(key)
        if len(attempts) == 1:  # a concurrent writer commits between our read and commit
            _put(engine, {key: (5).to_bytes(1, "little")})
        value = int.from_bytes(current or b"\x00", "little") + 1
        tr.set(key, value.to_bytes(1, "little"))
        return value

    assert drive(bump(engine, b"counter")) == 6
    assert len(attempts) == 2
    assert kv.run(engine, lambda tr: tr.get(b"counter")) == (6).to_bytes(1, "little")

    # Given a transaction, the decorated function runs inside it and does not commit.
    tr = engine.create_transaction()
    assert drive(bump(tr, b"counter")) == 7
    assert engine.create_transaction().get(b"counter").wait() == (6).to_bytes(1, "little")
    tr.commit().wait()
    assert engine.create_transaction().get(b"counter").wait() == (7).to_bytes(1, "little")


@pytest.mark.parametrize("applied", [False, True])
def test_run_retries_commit_unknown_result(
    memory: MemoryEngine, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    injector = FaultInjector()
    injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=applied)
    _install(monkeypatch, make_fake_fdb(FaultyEngine(memory, injector)))
    engine = FdbEngine()
    calls: list[int] = []

    def body(tr: kv.Transaction) -> None:
        calls.append(1)
        tr.set(b"idempotent", b"1")

    kv.run_sync(engine, body)
    assert len(calls) == 2
    assert memory.create_transaction().get(b"idempotent").wait() == b"1"


def test_non_retryable_errors_propagate_at_once(engine: FdbEngine) -> None:
    calls: list[int] = []

    def body(tr: kv.Transaction) -> None:
        calls.append(1)
        tr.add(b"\xff/system", b"\x01")

    with pytest.raises(EngineError) as error:
        kv.run_sync(engine, body)
    assert _code(error) == fdb_errors.KEY_OUTSIDE_LEGAL_RANGE
    assert calls == [1]


# --------------------------------------------------------------------------- timeouts, retries


def test_unreachable_cluster_fails_within_the_timeout(fake: FakeFdb, tmp_path: Path) -> None:
    engine = FdbEngine(_cluster_file(tmp_path), FdbOptions(timeout_ms=200))
    fake.reachable = False
    started = time.monotonic()
    with pytest.raises(EngineError) as error:
        kv.run(engine, lambda tr: tr.get(b"k"))
    elapsed = time.monotonic() - started
    assert _code(error) == fdb_errors.TRANSACTION_TIMED_OUT
    assert 0.2 <= elapsed < 10.0  # within the timeout, not hung (slack for a loaded machine)
    message = str(error.value)  # the library's text decoded, then what to check
    assert "transaction timed out" in message and "b'" not in message
    assert f"timeout_ms=200 on cluster file {engine.cluster_file}" in message


def test_the_timeout_spans_retries(fake: FakeFdb, tmp_path: Path) -> None:
    engine = FdbEngine(_cluster_file(tmp_path), FdbOptions(timeout_ms=300))
    calls: list[int] = []

    def always_conflicts(tr: kv.Transaction) -> None:
        calls.append(1)
        time.sleep(0.05)
        raise fdb_errors.engine_error(fdb_errors.NOT_COMMITTED, "conflict")

    with pytest.raises(EngineError) as error:
        kv.run_sync(engine, always_conflicts)
    assert _code(error) == fdb_errors.TRANSACTION_TIMED_OUT
    assert 2 <= len(calls) <= 10  # retried, then ended by the timeout


@pytest.mark.parametrize("code", [1213, 1223, 1037, 1021, 1039])
def test_throttling_and_maybe_committed_errors_are_retried_through_on_error(
    fake: FakeFdb, tmp_path: Path, code: int
) -> None:
    engine = FdbEngine(_cluster_file(tmp_path))
    calls: list[int] = []

    def body(tr: kv.Transaction) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise fdb_errors.engine_error(code, "from the cluster")
        tr.set(b"k", b"v")
        return "done"

    assert kv.run_sync(engine, body) == "done"
    assert calls == [1, 1]
    assert engine._db.on_error_calls == 1


def test_retry_classification_follows_the_loaded_library(
    fake: FakeFdb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1235 is ``transaction_throttled_hot_shard`` (retryable) from FDB 7.4 on, but in
    libfdb_c 7.3.79 an internal, non-retryable error: the engine asks the library, so the
    same code reaches the caller at once from a 7.3 library and is retried under 7.4's."""
    engine = FdbEngine(_cluster_file(tmp_path))
    calls: list[int] = []

    def body(tr: kv.Transaction) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise fdb_errors.engine_error(1235, "hot shard")
        return "done"

    with pytest.raises(EngineError) as error:
        kv.run_sync(engine, body)
    assert _code(error) == 1235 and calls == [1]
    assert not engine.is_retryable(fdb_errors.engine_error(1235))

    newer = fake_fdb.RETRYABLE_NOT_COMMITTED | {1235}  # fdb_error_predicate of 7.4
    monkeypatch.setattr(fake_fdb, "RETRYABLE_NOT_COMMITTED", newer)
    calls.clear()
    assert engine.is_retryable(fdb_errors.engine_error(1235))
    assert kv.run_sync(engine, body) == "done"
    assert calls == [1, 1]
    assert engine._db.on_error_calls == 1


def test_retry_limit_reached_carries_the_last_error(fake: FakeFdb, tmp_path: Path) -> None:
    engine = FdbEngine(_cluster_file(tmp_path), FdbOptions(retry_limit=2))

    def body(tr: kv.Transaction) -> None:
        raise fdb_errors.engine_error(fdb_errors.TAG_THROTTLED, "throttled")

    with pytest.raises(RetryLimitReached) as error:
        kv.run_sync(engine, body)
    assert error.value.retries == 2
    assert error.value.last.code == fdb_errors.TAG_THROTTLED
    assert "1213" in str(error.value)


def test_is_retryable_asks_the_library(fake: FakeFdb, tmp_path: Path) -> None:
    engine = FdbEngine(_cluster_file(tmp_path))
    assert engine.is_retryable(fdb_errors.engine_error(1223))
    assert not engine.is_retryable(fdb_errors.engine_error(1031))
    assert not engine.is_retryable(fdb_errors.engine_error(2101))


# --------------------------------------------------------------------------- the fake itself


@pytest.fixture
def raw(fake: FakeFdb) -> FakeFdb:
    """The fake with an API version selected, used directly as the binding."""
    fake.api_version(DEFAULT_API_VERSION)
    return fake


def test_fake_value_must_be_tested_with_present(raw: FakeFdb) -> None:
    tr = raw.open().create_transaction()
    absent = tr.get(b"missing")
    assert absent is not None
    assert not absent.present()
    assert absent == None  # noqa: E711 -- the real FutureString compares its value
    assert isinstance(absent, bytes)  # the real FutureString claims to be bytes
    with pytest.raises(TypeError):
        bytes(absent)
    with pytest.raises(TypeError):
        bool(absent)
    with pytest.raises(TypeError):
        len(absent)
    tr.set(b"empty", b"")
    empty = tr.get(b"empty")
    assert empty.present()
    assert not empty  # present but falsy: `if value:` is not a presence test
    assert bytes(empty) == b""
    tr.set(b"k", b"hello")
    value = tr.get(b"k")
    assert value.startswith(b"he")
    assert value[1:3] == b"el"
    assert value.wait() is value


def test_fake_read_errors_surface_when_the_value_is_used(raw: FakeFdb) -> None:
    tr = raw.open().create_transaction()
    value = tr.get(b"\xffsystem")  # issued, no error yet
    with pytest.raises(FDBError) as error:
        value.present()
    assert error.value.code == fdb_errors.KEY_OUTSIDE_LEGAL_RANGE
    assert str(error.value) == "b'Key outside legal range' (2004)"  # as the real bindings print it
    assert repr(error.value) == "FDBError(2004)"


def test_fake_ranges_are_lazy_and_die_with_the_transaction(raw: FakeFdb) -> None:
    db = raw.open()
    setup = db.create_transaction()
    setup.set(b"a", b"1")
    setup.set(b"b", b"2")
    setup.commit().wait()
    tr = db.create_transaction()
    rows = tr.get_range(b"a", b"z", limit=0, reverse=False)
    with pytest.raises(TypeError):
        len(rows)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rows[0]  # type: ignore[index]
    assert [(kv_.key, kv_.value) for kv_ in rows] == [(b"a", b"1"), (b"b", b"2")]
    assert [tuple(kv_) for kv_ in rows.to_list()] == [(b"a", b"1"), (b"b", b"2")]
    snapshot_rows = tr.snapshot.get_range(b"a", b"z")
    tr.commit().wait()
    for dead in (rows, snapshot_rows):
        with pytest.raises(FDBError) as error:
            list(dead)
        assert error.value.code == fdb_errors.USED_DURING_COMMIT


def test_fake_write_errors_are_deferred(raw: FakeFdb) -> None:
    tr = raw.open().create_transaction()
    tr.add(b"\xff", b"\x01")  # no error here, as with the real binding
    tr.set(b"k", b"v")
    value = tr.get(b"k")
    with pytest.raises(FDBError) as error:
        value.present()
    assert error.value.code == fdb_errors.KEY_OUTSIDE_LEGAL_RANGE
    with pytest.raises(FDBError):
        tr.commit().wait()
    with pytest.raises(TypeError):
        tr.set("text key", b"v")


def test_fake_commit_applies_only_when_waited(raw: FakeFdb) -> None:
    db = raw.open()
    tr = db.create_transaction()
    tr.set(b"k", b"v")
    future = tr.commit()
    assert not db.create_transaction().get(b"k").present()
    future.wait()
    assert db.create_transaction().get(b"k") == b"v"


def test_fake_versionstamp_future(raw: FakeFdb) -> None:
    tr = raw.open().create_transaction()
    tr.set(b"k", b"v")
    stamp = tr.get_versionstamp()
    assert not stamp.is_ready()
    with pytest.raises(FDBError) as error:
        stamp.wait()
    assert error.value.code == fdb_errors.USED_DURING_COMMIT
    tr.commit().wait()
    key = stamp.wait()
    assert key is stamp
    assert len(bytes(key)) == 10
    late = tr.get_versionstamp()
    with pytest.raises(FDBError) as error:
        late.wait()
    assert error.value.code == fdb_errors.USED_DURING_COMMIT


def test_fake_module_needs_an_api_version(memory: MemoryEngine) -> None:
    module = make_fake_fdb(memory)
    assert not hasattr(module, "FDBError")
    with pytest.raises(RuntimeError, match="api_version"):
        module.open()
    with pytest.raises(RuntimeError):
        module.api_version(fake_fdb.LATEST_API_VERSION + 1)
    module.api_version(710)
    module.api_version(710)
    with pytest.raises(RuntimeError, match="already loaded"):
        module.api_version(720)
    assert module.FDBError is FDBError
    assert module.open("a") is module.open("a")
    assert module.open("a") is not module.open("b")


def _real_binding_dir() -> Path:
    spec = importlib.util.find_spec("fdb")
    if spec is None or spec.origin is None:
        pytest.skip("foundationdb bindings not installed")
    directory = Path(spec.origin).parent
    if not (directory / "impl.py").exists():
        pytest.skip("the installed 'fdb' is not the FoundationDB binding")
    return directory


Signature = tuple[tuple[str, ...], int, bool, bool]


def _signature(node: ast.FunctionDef, drop_self: bool) -> Signature:
    names = tuple(a.arg for a in [*node.args.posonlyargs, *node.args.args])
    if drop_self:
        names = names[1:]
    args = node.args
    return names, len(args.defaults), args.vararg is not None, args.kwarg is not None


def _methods(classes: dict[str, ast.ClassDef], name: str) -> dict[str, Signature]:
    """Methods of class ``name`` of the real impl.py, inherited ones included."""
    node = classes[name]
    found: dict[str, Signature] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            found.update(_methods(classes, base.id))
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            found[item.name] = _signature(item, drop_self=True)
    return found


def test_fake_mirrors_the_real_binding_source() -> None:
    directory = _real_binding_dir()
    impl = ast.parse((directory / "impl.py").read_text())
    init = ast.parse((directory / "__init__.py").read_text())
    options = ast.parse((directory / "fdboptions.py").read_text())
    classes = {n.name: n for n in impl.body if isinstance(n, ast.ClassDef)}
    functions = {
        n.name: _signature(n, drop_self=False)
        for tree in (init, impl)
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
    }
    mutations: set[str] = set()
    for stmt in options.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == "MutationType"
            and isinstance(stmt.value, ast.Dict)
        ):
            mutations = {
                k.value
                for k in stmt.value.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    atomic: Signature = (("key", "param"), 0, False, False)
    fake_only = {"settled", "option_calls"}

    fake_tree = ast.parse(Path(fake_fdb.__file__).read_text())
    fake_classes = {n.name: n for n in fake_tree.body if isinstance(n, ast.ClassDef)}
    pairs = {
        "Transaction": "Transaction",
        "TransactionRead": "TransactionRead",
        "Database": "Database",
        "FDBRange": "FDBRange",
        "KeyValue": "KeyValue",
        "Future": "Future",
        "FutureVoid": "FutureVoid",
        "FutureInt64": "FutureInt64",
        "_FutureString": "FutureString",
        "Value": "Value",
        "Key": "Key",
        "FDBError": "FDBError",
    }
    checked = 0
    for fake_name, real_name in pairs.items():
        real = _methods(classes, real_name)
        for item in fake_classes[fake_name].body:
            if not isinstance(item, ast.FunctionDef) or item.name.startswith("_"):
                continue
            if item.name in fake_only:
                continue
            expected = atomic if item.name in mutations else real.get(item.name)
            assert expected is not None, f"{real_name}.{item.name} is not in the real binding"
            assert _signature(item, drop_self=True) == expected, f"{real_name}.{item.name}"
            checked += 1
    for item in fake_classes["FakeFdb"].body:
        if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
            assert _signature(item, drop_self=True) == functions[item.name], item.name
            checked += 1
    assert {"add", "set_versionstamped_key", "set_versionstamped_value"} <= mutations
    assert checked >= 25


# --------------------------------------------------------------------------- load_bindings


def test_load_bindings_without_the_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, None)  # sys.modules["fdb"] = None: `import fdb` raises ImportError
    with pytest.raises(MissingDependency) as error:
        load_bindings(DEFAULT_API_VERSION)
    assert "foundationdb" in str(error.value)
    assert "aos-persistence[fdb]" in str(error.value)
    assert fdb_backend._fdb is None
    with pytest.raises(MissingDependency):
        FdbEngine()


def test_load_bindings_without_libfdb_c(
    memory: MemoryEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(monkeypatch, make_fake_fdb(memory, client_library=False))
    with pytest.raises(MissingDependency) as error:
        load_bindings(DEFAULT_API_VERSION)
    message = str(error.value)
    assert "libfdb_c" in message
    assert "foundationdb" in message
    assert "Unable to locate the FoundationDB API shared library" in message
    assert fdb_backend._fdb is None


_WITHOUT_LIBRARY = """
from backends.kv.fdb import DEFAULT_API_VERSION, load_bindings
from persistence.errors import MissingDependency
try:
    load_bindings(DEFAULT_API_VERSION)
except MissingDependency as exc:
    print(exc)
else:
    print("loaded")
"""


def test_real_load_bindings_without_libfdb_c() -> None:
    """The real bindings in a fresh process whose library path holds no libfdb_c (the
    session may have loaded one into this process)."""
    _real_binding_dir()
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LIBRARY], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    if message == "loaded":
        pytest.skip("libfdb_c is on this machine's default library search path")
    assert "libfdb_c" in message
    assert "foundationdb==7.3" in message
    assert "client_library=" in message
