"""The retry runner's per-code counts (``persistence.kv.RETRY_STATS``): what it retried and
what reached its caller, as the torture reports them."""

from __future__ import annotations

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from persistence import fdb_errors, kv
from persistence.errors import EngineError, RetryLimitReached


@pytest.fixture
def stats() -> kv.RetryStats:
    kv.RETRY_STATS.clear()
    return kv.RETRY_STATS


def _write(tr: kv.Transaction) -> None:
    tr.set(b"k", b"v")


def test_retried_and_raised_codes_are_counted(stats: kv.RetryStats) -> None:
    injector = FaultInjector(seed=1)
    engine = FaultyEngine(MemoryEngine(), injector)
    injector.fail_commit(1, fdb_errors.NOT_COMMITTED)
    injector.fail_commit(2, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True)
    kv.run_sync(engine, _write)  # two failed attempts, retried; the third commits
    assert stats.snapshot() == {"retried": {1020: 1, 1021: 1}, "raised": {}}

    def too_large(tr: kv.Transaction) -> None:
        raise fdb_errors.engine_error(fdb_errors.TRANSACTION_TOO_LARGE)

    with pytest.raises(EngineError):
        kv.run_sync(engine, too_large)  # not retryable: reaches the caller at once
    assert stats.snapshot() == {"retried": {1020: 1, 1021: 1}, "raised": {2101: 1}}


def test_a_retry_limit_counts_the_last_error_as_raised(stats: kv.RetryStats) -> None:
    def conflicts(tr: kv.Transaction) -> None:
        raise fdb_errors.engine_error(fdb_errors.NOT_COMMITTED)

    with pytest.raises(RetryLimitReached):
        kv.run_sync(MemoryEngine(), conflicts, retry_limit=3)
    assert stats.snapshot() == {"retried": {1020: 3}, "raised": {1020: 1}}
    stats.clear()
    assert stats.snapshot() == {"retried": {}, "raised": {}}
