"""The SQLite engine's group commit (see :mod:`backends.kv.sqlite`): attempts that run
alone on concurrent threads of one engine are committed together, one sync for the group,
each with its own outcome (:class:`GroupCommit`). What it needs of the engine and of a
transaction is stated here (:class:`GroupEngine`, :class:`Grouped`); the engine's module
and its transactions' (:mod:`backends.kv.sqlite_transaction`) implement them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Final, Protocol

from backends.kv.buffered import WriteBuffer
from backends.kv.sqlite_errors import sqlite_error
from backends.kv.sqlite_writers import WriterQueue
from persistence import fdb_errors, kv
from persistence.errors import EngineError


class GroupEngine(Protocol):
    """What a group commit uses of its engine."""

    @property
    def busy_timeout(self) -> float: ...

    @property
    def _writers(self) -> WriterQueue: ...

    def _acquire(self) -> sqlite3.Connection: ...

    def _release(self, conn: sqlite3.Connection) -> None: ...

    def check_same_file(self) -> None: ...


class Grouped(Protocol):
    """What a group commit uses of a transaction it runs."""

    @property
    def buffer(self) -> WriteBuffer: ...

    def run_in_group(
        self, conn: sqlite3.Connection, body: Callable[[kv.Transaction], object], locked: bool
    ) -> tuple[object, bytes | None]: ...

    def _fail(self, error: Exception) -> None: ...

    def _settle(self, stamp: bytes | None) -> None: ...


GROUP_LIMIT: Final = 64
"""The most transactions one group commit carries."""
GROUP_BODY = threading.local()
"""``locked``: the writer queue of the store whose group commit this thread runs a body for
while the group's connection holds the write lock (else ``None``)."""


def _own(error: Exception) -> Exception:
    """An engine error for one attempt of a group that failed with ``error`` (an exception
    raised in several threads at once would share its traceback); other errors as they are."""
    if isinstance(error, EngineError):
        return EngineError(error.code, error.description, read_conflict=error.read_conflict)
    return error


class _Member:
    """An attempt in a :class:`GroupCommit`: its transaction, body and outcome."""

    __slots__ = ("body", "error", "lead", "result", "settled", "tr", "wake")

    def __init__(self, tr: Grouped, body: Callable[[kv.Transaction], object]) -> None:
        self.tr = tr
        self.body = body
        self.result: object = None
        self.error: BaseException | None = None
        self.settled = False
        self.lead = False  # asked to commit the next group
        self.wake: threading.Lock | None = None
        """Held while the attempt waits; released to wake it (settled, or asked to lead)."""


class GroupCommit:
    """Group commit of the transactions that run alone on one engine.

    A thread whose attempt arrives while no group is being committed leads: it takes the
    writer queue and one connection, runs the waiting attempts' bodies in arrival order on
    that connection -- each sees the writes of those before it, as if they had committed
    one after the other alone -- and commits them all with one ``COMMIT``: one sync of the
    log for the group. Attempts that arrive meanwhile wait for the next group, which the
    first of them leads. Each attempt's outcome is its own: a body that raises (anything,
    ``KeyboardInterrupt`` included: it is given to the attempt's own thread) has its writes
    rolled back to a savepoint and gets its error; the others commit. If the group cannot
    commit (the queue or the write lock not granted in time, an I/O error), every attempt
    staged in it gets that error and nothing of it is applied. Other readers see a group's
    writes only after its ``COMMIT``, i.e. after its sync, as with any commit. An attempt
    not taken by a group within ``busy_timeout`` gets 1020."""

    def __init__(self, engine: GroupEngine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._pending: list[_Member] = []  # under _lock, as _leading
        self._leading = False

    def waiting(self) -> int:
        """Attempts waiting for a group (not yet taken by one)."""
        with self._lock:
            return len(self._pending)

    def run(self, tr: Grouped, body: Callable[[kv.Transaction], object]) -> object:
        """Run ``body`` in ``tr`` and commit it in a group; what it returned, or its error."""
        member = _Member(tr, body)
        with self._lock:
            self._pending.append(member)
            if self._leading:
                member.wake = threading.Lock()
                member.wake.acquire()
            else:
                self._leading = True
        if member.wake is not None:
            self._wait(member)
        if not member.settled:  # released unsettled only to lead
            self._lead(member)
        if member.error is not None:
            raise member.error
        return member.result

    def _wait(self, member: _Member) -> None:
        """Wait until a leader settles ``member`` or asks it to lead. Not taken by a group
        within ``busy_timeout``: it leaves the queue with 1020."""
        assert member.wake is not None
        if member.wake.acquire(timeout=self._engine.busy_timeout):
            return
        with self._lock:
            if member in self._pending and not member.lead:
                self._pending.remove(member)
                raise fdb_errors.engine_error(
                    fdb_errors.NOT_COMMITTED,
                    "group commit: not taken by a group within busy_timeout "
                    f"({self._engine.busy_timeout} s)",
                )
        member.wake.acquire()  # taken by a group, or asked to lead: it is released then

    def _hand_on(self) -> None:
        """(Holding ``_lock``.) Ask the first waiting attempt to lead, or stop leading."""
        if self._pending:
            first = self._pending[0]
            first.lead = True
            if first.wake is not None:
                first.wake.release()
        else:
            self._leading = False

    def _lead(self, member: _Member) -> None:
        """Commit groups until ``member``'s is committed; then hand the lead on."""
        try:
            while not member.settled:
                with self._lock:
                    group = self._pending[:GROUP_LIMIT]
                    del self._pending[: len(group)]
                try:
                    self._commit(group)
                finally:
                    for each in group:
                        if each is not member and each.wake is not None:
                            each.wake.release()
        finally:
            with self._lock:
                self._hand_on()

    def _commit(self, group: list[_Member]) -> None:
        """Run and commit ``group``; every member leaves settled, with its result or its
        error (the group's, if the group did not commit: then nothing of it is applied)."""
        engine = self._engine
        timeout = engine.busy_timeout
        staged: list[tuple[_Member, bytes | None]] = []
        committed = False
        error: Exception = fdb_errors.engine_error(fdb_errors.NOT_COMMITTED, "group commit failed")
        try:
            with engine._writers.turn(
                time.monotonic() + timeout, refused="group commit", timeout=timeout
            ):
                conn = engine._acquire()
                try:
                    wrote = False  # some staged attempt holds the write lock for the group
                    for member in group:
                        wrote = self._stage(conn, member, staged, wrote) or wrote
                    if staged and conn.in_transaction:
                        engine.check_same_file()
                        conn.execute("COMMIT")
                    committed = True
                except sqlite3.Error as exc:
                    raise sqlite_error(exc, "commit") from None
                finally:
                    engine._release(conn)  # rolls back whatever was not committed
        except Exception as exc:
            error = exc
        finally:
            if not committed:
                for each, _ in staged:
                    each.error, each.result = _own(error), None
                    each.tr._fail(each.error)
                staged = []
                for each in group:
                    if each.error is None:  # not run: the group failed before it
                        each.error = _own(error)
            for each, stamp in staged:
                each.tr._settle(stamp)
            for each in group:
                each.settled = True

    @staticmethod
    def _stage(
        conn: sqlite3.Connection,
        member: _Member,
        staged: list[tuple[_Member, bytes | None]],
        wrote: bool,
    ) -> bool:
        """Run ``member`` in the group's transaction (``wrote``: an attempt staged before it
        wrote); on success add it to ``staged`` and say whether it wrote; if its body or its
        writes fail, undo them (to a savepoint when others are staged) and give it the
        error."""
        savepoint = bool(staged)
        if savepoint:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            conn.execute("SAVEPOINT member")
        try:
            member.result, stamp = member.tr.run_in_group(conn, member.body, wrote)
        except BaseException as exc:  # the attempt's own outcome, whatever it is
            member.error, member.result = exc, None
            if savepoint:
                conn.execute("ROLLBACK TO member")
                conn.execute("RELEASE member")
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
            return False
        if savepoint:
            conn.execute("RELEASE member")
        staged.append((member, stamp))
        return member.tr.buffer.has_writes()
