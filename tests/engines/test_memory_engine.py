"""Memory engine specifics: the five-second MVCC window and the deterministic fault injector."""

from __future__ import annotations

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from persistence import fdb_errors, kv
from persistence.errors import EngineError
from persistence.futures import drive
from persistence.hooks import NO_HOOKS


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_transaction_older_than_five_seconds_fails_with_1007() -> None:
    clock = FakeClock()
    engine = MemoryEngine(clock=clock)
    tr = engine.create_transaction()
    tr.get(b"a").wait()
    clock.now += kv.MAX_TRANSACTION_SECONDS + 0.1
    with pytest.raises(EngineError) as read_err:
        tr.get(b"b").wait()
    assert read_err.value.code == fdb_errors.TRANSACTION_TOO_OLD
    tr.set(b"a", b"1")
    with pytest.raises(EngineError) as commit_err:
        tr.commit().wait()
    assert commit_err.value.code == fdb_errors.TRANSACTION_TOO_OLD


def test_history_beyond_the_window_is_discarded_and_old_readers_fail() -> None:
    clock = FakeClock()
    engine = MemoryEngine(clock=clock)
    kv.run_sync(engine, lambda tr: tr.set(b"k", b"1"))
    reader = engine.create_transaction()
    assert reader.get(b"k").wait() == b"1"
    for i in range(3):
        clock.now += 3

        def write(tr: kv.Transaction, i: int = i) -> None:
            tr.set(b"k", str(i).encode())

        kv.run_sync(engine, write)
    # the reader's version left the window: its snapshot is gone
    with pytest.raises(EngineError) as err:
        reader.get(b"k").wait()
    assert err.value.code == fdb_errors.TRANSACTION_TOO_OLD
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"2"


def test_deleted_keys_are_compacted_after_the_window() -> None:
    clock = FakeClock()
    engine = MemoryEngine(clock=clock)
    kv.run_sync(engine, lambda tr: [tr.set(bytes([i]), b"x") for i in range(100)])
    kv.run_sync(engine, lambda tr: tr.clear_range(b"\x00", b"\x50"))
    clock.now += 10
    kv.run_sync(engine, lambda tr: tr.set(b"\x90", b"y"))
    assert engine.key_count() == 21  # 20 survivors of 0..99 above 0x50, plus 0x90
    assert len(engine._keys) == 21  # tombstones are gone, not just hidden


def _run_workload(seed: int) -> tuple[list[tuple[str, object]], bytes | None]:
    injector = FaultInjector(seed=seed, commit_fault_rate=0.3)
    engine = FaultyEngine(MemoryEngine(), injector)

    @kv.transactional
    async def bump(tr: kv.Transaction) -> None:
        tr.add(b"n", (1).to_bytes(8, "little"))

    for _ in range(60):
        drive(bump(engine))
    return injector.log, kv.run(engine.inner, lambda tr: tr.get(b"n"))


def test_same_seed_same_faults() -> None:
    first, second, other = _run_workload(7), _run_workload(7), _run_workload(8)
    assert first == second
    assert first[0] != other[0]
    codes = {entry[1][1] for entry in first[0]}  # type: ignore[index]
    assert codes == {
        fdb_errors.NOT_COMMITTED,
        fdb_errors.COMMIT_UNKNOWN_RESULT,
        fdb_errors.TRANSACTION_TOO_OLD,
    }


def test_commit_unknown_result_that_applied_shows_why_writes_must_be_idempotent() -> None:
    # A non-idempotent increment retried after 1021-applied counts twice: the injector
    # really applies the commit before reporting the unknown result.
    _, final = _run_workload(7)
    log, _ = _run_workload(7)
    applied_unknowns = sum(
        kind == "commit" and info == (info[0], fdb_errors.COMMIT_UNKNOWN_RESULT, True)
        for kind, info in log
        if isinstance(info, tuple)
    )
    assert applied_unknowns > 0
    assert final == (60 + applied_unknowns).to_bytes(8, "little")


def test_scripted_faults_fire_exactly_where_asked() -> None:
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    injector.fail_commit(2, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    injector.fail_commit(3, fdb_errors.NOT_COMMITTED)
    kv.run_sync(engine, lambda tr: tr.set(b"a", b"1"))  # commit 1: fine
    tr = engine.create_transaction()
    tr.set(b"b", b"2")
    future = tr.get_versionstamp()
    with pytest.raises(EngineError) as err:
        tr.commit().wait()  # commit 2: applied, reported unknown
    assert err.value.code == fdb_errors.COMMIT_UNKNOWN_RESULT
    with pytest.raises(EngineError):
        future.wait()
    assert kv.run(engine.inner, lambda tr: tr.get(b"b")) == b"2"
    tr = engine.create_transaction()
    tr.set(b"c", b"3")
    with pytest.raises(EngineError):
        tr.commit().wait()  # commit 3: not applied
    assert kv.run(engine.inner, lambda tr: tr.get(b"c")) is None
    with pytest.raises(ValueError):
        injector.fail_commit(1, fdb_errors.NOT_COMMITTED, applied=True)


def test_crash_points_are_counted_and_fire_on_the_chosen_occurrence() -> None:
    injector = FaultInjector()
    injector.crash_at("export.after_upload", occurrence=2)
    injector.reached("export.after_upload")
    with pytest.raises(SimulatedCrash) as crash:
        injector.reached("export.after_upload")
    assert crash.value.point == "export.after_upload"
    injector.reached("export.after_upload")
    assert injector.points["export.after_upload"] == 3
    assert not isinstance(crash.value, Exception)  # escapes `except Exception`
    NO_HOOKS.reached("anything")  # a production plane's hooks do nothing
