"""Deterministic fault injection for any engine: commit faults and crash points.

:class:`FaultyEngine` wraps an engine (the memory engine in the test suites) and consults a
:class:`FaultInjector` at every commit; the same injector, given to the plane as its
:class:`~persistence.hooks.StepHooks`, is told of every named step the protocols pass and
may crash the "process" there. Faults are either scripted ("fail the 3rd
commit with 1021, applied") or drawn from a seeded generator, so the same seed always
injects the same faults at the same places.

Commit faults follow FoundationDB:

* 1020 ``not_committed`` and 1007 ``transaction_too_old``: nothing was applied.
* 1021 ``commit_unknown_result``: the commit may or may not have been applied; the
  injector decides which (``applied``), and the caller cannot tell.

A crash raises :class:`SimulatedCrash`, a ``BaseException`` so that no ``except Exception``
in the code under test swallows it and no retry loop retries it: the "process" is gone.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass, field

from persistence import fdb_errors, kv
from persistence.errors import EngineError


class SimulatedCrash(BaseException):
    """The process "died" at the named crash point."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


@dataclass(frozen=True, slots=True)
class CommitFault:
    """One injected commit failure."""

    code: int
    applied: bool = False


@dataclass
class FaultInjector:
    """Decides, deterministically, which commits fail and where the process crashes.

    ``commit_fault_rate`` draws faults at random (from ``seed``) among ``codes``; scripted
    faults (:meth:`fail_commit`, :meth:`crash_at`) fire exactly where asked. Every injected
    fault is appended to ``log`` and every crash point reached is counted in ``points``.
    """

    seed: int = 0
    commit_fault_rate: float = 0.0
    codes: tuple[int, ...] = (
        fdb_errors.NOT_COMMITTED,
        fdb_errors.COMMIT_UNKNOWN_RESULT,
        fdb_errors.TRANSACTION_TOO_OLD,
    )
    unknown_result_applied_rate: float = 0.5
    crash_rate: float = 0.0
    log: list[tuple[str, object]] = field(default_factory=list)
    points: Counter[str] = field(default_factory=Counter)
    commits: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._scripted_commits: dict[int, CommitFault] = {}
        self._scripted_crashes: dict[tuple[str, int], bool] = {}
        self._lock = threading.Lock()

    def fail_commit(self, index: int, code: int, *, applied: bool = False) -> None:
        """Fail the ``index``-th commit (1-based, counted from now on) with ``code``."""
        if applied and code not in fdb_errors.MAYBE_COMMITTED:
            raise ValueError(f"only commit_unknown_result may have applied, not {code}")
        self._scripted_commits[self.commits + index] = CommitFault(code, applied)

    def crash_at(self, point: str, occurrence: int = 1) -> None:
        """Crash when ``point`` is reached for the ``occurrence``-th time (counted from now)."""
        self._scripted_crashes[(point, self.points[point] + occurrence)] = True

    def next_commit(self) -> CommitFault | None:
        """The fault for the commit about to happen, if any."""
        with self._lock:
            self.commits += 1
            fault = self._scripted_commits.pop(self.commits, None)
            if (
                fault is None
                and self.commit_fault_rate
                and (self._random.random() < self.commit_fault_rate)
            ):
                code = self._random.choice(self.codes)
                applied = code in fdb_errors.MAYBE_COMMITTED and (
                    self._random.random() < self.unknown_result_applied_rate
                )
                fault = CommitFault(code, applied)
            if fault is not None:
                self.log.append(("commit", (self.commits, fault.code, fault.applied)))
            return fault

    def reached(self, point: str) -> None:
        """Count ``point``; raise :class:`SimulatedCrash` if a crash is due there (the
        plane's :class:`~persistence.hooks.StepHooks`)."""
        with self._lock:
            self.points[point] += 1
            due = self._scripted_crashes.pop((point, self.points[point]), False)
            if not due and self.crash_rate:
                due = self._random.random() < self.crash_rate
            if due:
                self.log.append(("crash", (point, self.points[point])))
        if due:
            raise SimulatedCrash(point)


class _FailedFuture(kv.VersionstampFuture):
    def __init__(self, inner: kv.VersionstampFuture) -> None:
        self.inner = inner
        self.error: Exception | None = None

    def wait(self) -> bytes:
        if self.error is not None:
            raise self.error
        return self.inner.wait()


class FaultyTransaction(kv.Transaction):
    """Delegates to an engine transaction; the injector may fail its commit."""

    def __init__(self, inner: kv.Transaction, injector: FaultInjector) -> None:
        self._inner = inner
        self._injector = injector
        self._future: _FailedFuture | None = None

    def get(self, key: bytes, *, snapshot: bool = False) -> bytes | None:
        return self._inner.get(key, snapshot=snapshot)

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        return self._inner.get_range(begin, end, limit=limit, reverse=reverse, snapshot=snapshot)

    def set(self, key: bytes, value: bytes) -> None:
        self._inner.set(key, value)

    def clear(self, key: bytes) -> None:
        self._inner.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._inner.clear_range(begin, end)

    def add(self, key: bytes, param: bytes) -> None:
        self._inner.add(key, param)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._inner.set_versionstamped_key(key, value)

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        self._inner.set_versionstamped_value(key, value)

    def get_versionstamp(self) -> kv.VersionstampFuture:
        if self._future is None:
            self._future = _FailedFuture(self._inner.get_versionstamp())
        return self._future

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        self._inner.add_read_conflict_range(begin, end)

    def get_read_version(self) -> int:
        return self._inner.get_read_version()

    def commit(self) -> None:
        fault = self._injector.next_commit()
        if fault is None:
            self._inner.commit()
            return
        if fault.applied:
            self._inner.commit()
        error = fdb_errors.engine_error(fault.code, "injected fault")
        if self._future is not None:
            self._future.error = error
        raise error

    def on_error(self, error: EngineError) -> FaultyTransaction:
        return FaultyTransaction(self._inner.on_error(error), self._injector)


class FaultyEngine(kv.Engine):
    """An engine whose commits and crash points are governed by a :class:`FaultInjector`."""

    def __init__(self, inner: kv.Engine, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector
        self.url = inner.url
        self.retry_limit = inner.retry_limit

    def create_transaction(self) -> FaultyTransaction:
        return FaultyTransaction(self.inner.create_transaction(), self.injector)

    def is_retryable(self, error: EngineError) -> bool:
        return self.inner.is_retryable(error)

    def close(self) -> None:
        self.inner.close()
