"""Deterministic fault injection for any engine: commit faults and crash points.

:class:`FaultyEngine` wraps an engine (the memory engine in the test suites) and consults a
:class:`FaultInjector` at every commit; the same injector, given to the plane as its
:class:`~persistence.hooks.StepHooks`, is told of every named step the protocols pass and
may crash the "process" there. Faults are either scripted ("fail the 3rd
commit with 1021, applied") or drawn from a seeded generator, so the same seed always
injects the same faults at the same places.

Commit faults follow FoundationDB, and are never kinder than it:

* 1020 ``not_committed`` and 1007 ``transaction_too_old``: nothing was applied.
* 1021 ``commit_unknown_result`` (and 1039, and 1031 ``transaction_timed_out`` raised by a
  commit): the commit may or may not have been applied; the injector decides which
  (``applied``), and the caller cannot tell.
* Other clients commit between an attempt and its retry: an ``interleave`` callback (a
  competing writer on the inner engine) runs after the faulted attempt, before the error
  reaches the retry loop.
* A commit that timed out (1031) may still be in flight and land *later*: a ``late`` fault
  raises at once and holds the transaction, which commits (conflict-checked at its own read
  version, as FoundationDB's resolver does, so it lands only if nothing it read changed)
  right before the next writing commit on the engine -- after whatever the caller read to
  learn its outcome.

Read faults: reads (``get``, ``get_range``) fail with 1007, 1009 or 1037 as FoundationDB's
do when a storage server lags or a transaction ages.

A crash raises :class:`SimulatedCrash`, a ``BaseException`` so that no ``except Exception``
in the code under test swallows it and no retry loop retries it: the "process" is gone.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Final

from persistence import fdb_errors, kv
from persistence.errors import EngineError
from persistence.futures import Failed, Future, Mapped, Ready


class SimulatedCrash(BaseException):
    """The process "died" at the named crash point."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


MAYBE_APPLIED: Final = fdb_errors.MAYBE_COMMITTED | {fdb_errors.TRANSACTION_TIMED_OUT}
"""Commit errors after which the commit may have been applied."""

READ_CODES: Final = (
    fdb_errors.TRANSACTION_TOO_OLD,
    fdb_errors.FUTURE_VERSION,
    fdb_errors.PROCESS_BEHIND,
)

Interleave = Callable[[], object]
"""Another client's work, committed between an attempt and its retry."""


@dataclass(frozen=True, slots=True)
class CommitFault:
    """One injected commit outcome: an error ``code`` (``None``: the commit succeeds), whether
    the commit was applied anyway, and a competing writer to run before the caller learns."""

    code: int | None
    applied: bool = False
    interleave: Interleave | None = None
    late: bool = False
    """Not applied now; committed before the next writing commit (see the module)."""


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
    read_fault_rate: float = 0.0
    read_codes: tuple[int, ...] = READ_CODES
    interleave: Interleave | None = None
    """With random faults: run after every faulted commit (a competing writer)."""
    before_every_commit: Interleave | None = None
    """Run before every writing commit, between its reads and its commit (a writer that
    commits as often as this client does, each time just ahead of it)."""
    log: list[tuple[str, object]] = field(default_factory=list)
    points: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    reads: int = 0

    def __post_init__(self) -> None:
        self._late: list[kv.Transaction] = []
        self._random = random.Random(self.seed)
        self._scripted_commits: dict[int, CommitFault] = {}
        self._scripted_reads: dict[int, int] = {}
        self._scripted_crashes: dict[tuple[str, int], bool] = {}
        self._lock = threading.Lock()

    def fail_commit(
        self,
        index: int,
        code: int,
        *,
        applied: bool = False,
        interleave: Interleave | None = None,
        late: bool = False,
    ) -> None:
        """Fail the ``index``-th writing commit (1-based, counted from now on) with
        ``code``; with ``interleave``, another client commits before the error reaches the
        caller; with ``late``, the commit lands before the next writing commit instead."""
        if (applied or late) and code not in MAYBE_APPLIED:
            raise ValueError(f"a commit failing with {code} is never applied")
        if applied and late:
            raise ValueError("a commit is applied now or late, not both")
        self._scripted_commits[self.commits + index] = CommitFault(code, applied, interleave, late)

    def hold(self, transaction: kv.Transaction) -> None:
        """Keep ``transaction`` to commit late (see :meth:`land_late`)."""
        with self._lock:
            self._late.append(transaction)

    def holds(self, transaction: kv.Transaction) -> bool:
        """Whether ``transaction`` is held to commit late."""
        with self._lock:
            return any(held is transaction for held in self._late)

    def land_late(self) -> None:
        """Commit the held transactions; one whose reads changed since aborts (logged)."""
        with self._lock:
            held, self._late = self._late, []
        for transaction in held:
            try:
                transaction.commit().wait()
                self.log.append(("late", "landed"))
            except EngineError as exc:
                self.log.append(("late", f"aborted {exc.code}"))

    def after_commit(self, index: int, interleave: Interleave) -> None:
        """Let the ``index``-th commit succeed, then run ``interleave`` before it returns:
        the fault-free twin of an applied :meth:`fail_commit` with the same competitor."""
        self._scripted_commits[self.commits + index] = CommitFault(None, True, interleave)

    def fail_read(self, index: int, code: int) -> None:
        """Fail the ``index``-th read (1-based, counted from now on) with ``code``."""
        self._scripted_reads[self.reads + index] = code

    def next_read(self) -> int | None:
        """The error code for the read about to happen, if any."""
        with self._lock:
            self.reads += 1
            code = self._scripted_reads.pop(self.reads, None)
            if (
                code is None
                and self.read_fault_rate
                and self._random.random() < self.read_fault_rate
            ):
                code = self._random.choice(self.read_codes)
            if code is not None:
                self.log.append(("read", (self.reads, code)))
            return code

    def crash_at(self, point: str, occurrence: int = 1) -> None:
        """Crash when ``point`` is reached for the ``occurrence``-th time (counted from now)."""
        self._scripted_crashes[(point, self.points[point] + occurrence)] = True

    def next_commit(self, *, writes: bool = True) -> CommitFault | None:
        """The fault for the commit about to happen, if any. Only commits that write are
        counted and faulted: FoundationDB commits a read-only transaction at once, without
        a round trip, so it never fails (its reads can: :meth:`next_read`)."""
        if not writes:
            return None
        with self._lock:
            self.commits += 1
            fault = self._scripted_commits.pop(self.commits, None)
            if (
                fault is None
                and self.commit_fault_rate
                and (self._random.random() < self.commit_fault_rate)
            ):
                code = self._random.choice(self.codes)
                applied = code in MAYBE_APPLIED and (
                    self._random.random() < self.unknown_result_applied_rate
                )
                fault = CommitFault(code, applied, self.interleave)
            if fault is not None and fault.code is not None:
                how: bool | str = "late" if fault.late else fault.applied
                self.log.append(("commit", (self.commits, fault.code, how)))
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


class _FailedFuture(Future[bytes]):
    """The inner transaction's versionstamp, unless the injector failed the commit."""

    def __init__(self, inner: kv.VersionstampFuture) -> None:
        self.inner = inner
        self.error: Exception | None = None

    def poll(self) -> bool:
        return self.error is not None or self.inner.poll()

    def result(self) -> bytes:
        if self.error is not None:
            raise self.error
        return self.inner.result()

    def block(self) -> None:
        self.inner.block()

    def notify(self, callback: Callable[[], object]) -> None:
        if self.error is not None:
            callback()
        else:
            self.inner.notify(callback)


class FaultyTransaction(kv.Transaction):
    """Delegates to an engine transaction; the injector may fail its commit."""

    def __init__(self, inner: kv.Transaction, injector: FaultInjector, engine: kv.Engine) -> None:
        self._inner = inner
        self._injector = injector
        self._engine = engine
        self._future: _FailedFuture | None = None
        self._writes = False

    def _read_fault(self) -> None:
        code = self._injector.next_read()
        if code is not None:
            raise fdb_errors.engine_error(code, "injected read fault")

    def get(self, key: bytes, *, snapshot: bool = False) -> Future[bytes | None]:
        self._read_fault()
        return self._inner.get(key, snapshot=snapshot)

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> Future[list[tuple[bytes, bytes]]]:
        self._read_fault()
        return self._inner.get_range(begin, end, limit=limit, reverse=reverse, snapshot=snapshot)

    def set(self, key: bytes, value: bytes) -> None:
        self._writes = True
        self._inner.set(key, value)

    def set_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        pairs = list(pairs)
        self._writes = self._writes or bool(pairs)
        self._inner.set_many(pairs)

    def clear(self, key: bytes) -> None:
        self._writes = True
        self._inner.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._writes = True
        self._inner.clear_range(begin, end)

    def add(self, key: bytes, param: bytes) -> None:
        self._writes = True
        self._inner.add(key, param)

    def compare_and_clear(self, key: bytes, value: bytes) -> None:
        self._writes = True
        self._inner.compare_and_clear(key, value)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._writes = True
        self._inner.set_versionstamped_key(key, value)

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        self._writes = True
        self._inner.set_versionstamped_value(key, value)

    def get_versionstamp(self) -> kv.VersionstampFuture:
        if self._future is None:
            self._future = _FailedFuture(self._inner.get_versionstamp())
        return self._future

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        self._inner.add_read_conflict_range(begin, end)

    def relax_durability(self) -> None:
        self._inner.relax_durability()

    def get_read_version(self) -> Future[int]:
        return self._inner.get_read_version()

    def commit(self) -> Future[None]:
        """The inner commit, made now (waited for on this thread), or the injected fault."""
        if self._writes:
            self._injector.land_late()
            if self._injector.before_every_commit is not None:
                self._injector.before_every_commit()
        fault = self._injector.next_commit(writes=self._writes)
        if fault is None:
            return self._inner.commit()
        if fault.applied:
            try:
                self._inner.commit().wait()
            except EngineError as exc:
                return Failed(exc)
        elif fault.late:
            self._injector.hold(self._inner)
        if fault.interleave is not None:
            fault.interleave()
        if fault.code is None:
            return Ready(None)
        error = fdb_errors.engine_error(fault.code, "injected fault")
        if self._future is not None:
            self._future.error = error
        return Failed(error)

    def on_error(self, error: EngineError) -> Future[kv.Transaction]:
        if self._injector.holds(self._inner):
            # The held transaction commits later, as it is: on_error would reset it (an FDB
            # transaction is reused by its retry), so the retry gets a new one instead.
            if not self._engine.is_retryable(error):
                return Failed(error)
            return Ready(
                FaultyTransaction(self._engine.create_transaction(), self._injector, self._engine)
            )
        return Mapped(self._inner.on_error(error), self._next)

    def _next(self, inner: kv.Transaction) -> kv.Transaction:
        """The faulty transaction of the inner one's next attempt."""
        nxt = FaultyTransaction(inner, self._injector, self._engine)
        nxt.retry_alone = inner.retry_alone
        return nxt


class FaultyEngine(kv.Engine):
    """An engine whose commits and crash points are governed by a :class:`FaultInjector`."""

    def __init__(self, inner: kv.Engine, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector
        self.url = inner.url
        self.retry_limit = inner.retry_limit
        self.size_limit = inner.size_limit
        self.max_retry_seconds = inner.max_retry_seconds
        self.commit_may_be_unknown = True  # it injects 1021 whatever the inner engine does
        self.writers_serialize = inner.writers_serialize
        self.blocking = inner.blocking
        self.versions_per_second = inner.versions_per_second

    def create_transaction(self) -> FaultyTransaction:
        return FaultyTransaction(self.inner.create_transaction(), self.injector, self.inner)

    def is_retryable(self, error: EngineError) -> bool:
        return self.inner.is_retryable(error)

    def wait_changed(self, key: bytes, seen: bytes | None, timeout: float) -> None:
        self.inner.wait_changed(key, seen, timeout)

    def alone(self) -> AbstractContextManager[object]:
        return self.inner.alone()

    def integrity_check(self, *, full: bool = True) -> list[str] | None:
        return self.inner.integrity_check(full=full)

    def close(self) -> None:
        self.inner.close()
