"""A late commit (``FaultInjector.fail_commit(..., late=True)``) lands before the next writing
commit only if nothing it read changed, on every engine -- including when the caller's retry
loop retried it (1021) and when the caller gave up (1031)."""

from __future__ import annotations

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from persistence import fdb_errors, kv
from persistence.errors import EngineError
from persistence.kv import Engine


def write(engine: Engine, key: bytes, value: bytes) -> None:
    kv.run_sync(engine, lambda tr: tr.set(key, value))


def read(engine: Engine, key: bytes) -> bytes | None:
    return kv.run(engine, lambda tr: tr.get(key))


def held_attempt(engine: Engine, code: int, *, change_what_it_read: bool) -> FaultInjector:
    """Run a body whose first attempt reads A and writes B, failed late with ``code``; its
    retry (for 1021) writes C. Another client changes A, or not, right after the fault."""
    injector = FaultInjector()
    faulty = FaultyEngine(engine, injector)
    write(engine, b"A", b"0")
    other = (lambda: write(engine, b"A", b"changed")) if change_what_it_read else None
    injector.fail_commit(1, code, late=True, interleave=other)
    attempts: list[int] = []

    def body(tr: kv.Transaction) -> None:
        attempts.append(1)
        tr.get(b"A").wait()
        tr.set(b"B" if len(attempts) == 1 else b"C", b"1")

    if code == fdb_errors.COMMIT_UNKNOWN_RESULT:
        kv.run_sync(faulty, body)
        assert read(engine, b"C") == b"1"  # the retry's commit landed the held attempt first
    else:
        with pytest.raises(EngineError) as raised:
            kv.run_sync(faulty, body)
        assert raised.value.code == code
        write(faulty, b"D", b"1")  # the caller's next write lands it
    return injector


@pytest.mark.parametrize(
    "code", [fdb_errors.COMMIT_UNKNOWN_RESULT, fdb_errors.TRANSACTION_TIMED_OUT]
)
def test_a_late_commit_whose_reads_changed_aborts_and_writes_nothing(
    engine: Engine, code: int
) -> None:
    injector = held_attempt(engine, code, change_what_it_read=True)
    assert injector.log[-1] == ("late", f"aborted {fdb_errors.NOT_COMMITTED}")
    assert read(engine, b"B") is None


@pytest.mark.parametrize(
    "code", [fdb_errors.COMMIT_UNKNOWN_RESULT, fdb_errors.TRANSACTION_TIMED_OUT]
)
def test_a_late_commit_whose_reads_held_lands(engine: Engine, code: int) -> None:
    injector = held_attempt(engine, code, change_what_it_read=False)
    assert injector.log[-1] == ("late", "landed")
    assert read(engine, b"B") == b"1"
