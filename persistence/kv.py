"""The transactional ordered key-value interface every engine implements, and the retry runner.

It is shaped like the official FoundationDB Python binding's ``Transaction`` so that the
plane's protocols are written once and the FoundationDB engine is a thin adapter:

* keys and values are ``bytes``; keys sort bytewise; keys starting with ``0xff`` are reserved;
* reads see the transaction's own writes (read-your-writes) over a consistent snapshot
  taken at the transaction's read version;
* reads add read-conflict ranges unless ``snapshot=True``; at commit, a transaction whose
  read ranges were written by a transaction that committed after its read version fails
  with error 1020 (``not_committed``) and nothing is applied;
* ``add`` is an atomic little-endian add applied at commit (no read, no conflict);
* ``set_versionstamped_key``/``set_versionstamped_value`` take a 4-byte little-endian offset
  suffix (API version >= 520) naming where the engine writes the 10-byte versionstamp
  (8-byte big-endian commit version + 2-byte batch order) at commit;
* limits: key 10,000 B (2102), value 100,000 B (2103), transaction 10,000,000 B (2101).

Reads, commits and ``on_error`` return :class:`~persistence.futures.Future`s, as the
bindings' do: a read is issued when it is asked for and its value awaited later, so reads
that do not depend on each other go out together. Protocols are coroutines that ``await``
them, run by one of the two drivers of :mod:`persistence.futures` (blocking or asyncio).
Errors are :class:`~persistence.errors.EngineError` carrying FoundationDB's numeric codes.

:func:`transact` is the retry loop, a coroutine written once for both drivers; :func:`run`
is the same loop, blocking (:func:`run_sync` for a plain function that waits for its
reads, as the bindings' blocking style does). :func:`transactional` retries a function as
``fdb.transactional`` does: the function takes the transaction first; given a transaction
it is called through (so protocols compose into one transaction); given an :class:`Engine`
it runs in the retry loop, driven by the transaction's ``on_error`` (FoundationDB's own
classification and backoff on the FDB engine). **The body may run more than once,
including after a commit that applied** (1021 ``commit_unknown_result``), so every write
protocol must be idempotent.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from persistence import fdb_errors, metrics
from persistence.errors import Contended, EngineError, RetryLimitReached
from persistence.fdb_errors import is_retryable
from persistence.futures import Blocking, Future, Gathered, drive

log = logging.getLogger(__name__)

MAX_KEY_SIZE: Final = 10_000
MAX_VALUE_SIZE: Final = 100_000
MAX_TRANSACTION_SIZE: Final = 10_000_000
MAX_TRANSACTION_SECONDS: Final = 5.0
"""A transaction older than this fails reads and commit with 1007 (transaction_too_old)."""

SYSTEM_KEY_PREFIX: Final = b"\xff"


VersionstampFuture = Future[bytes]
"""The 10-byte versionstamp of a transaction, known only once it has committed (its error
is ``EngineError``: the commit's, or 2021 ``no_commit_version`` for one that wrote nothing)."""


P = ParamSpec("P")
T = TypeVar("T")


class Transaction(ABC):
    """One optimistic transaction. Not thread-safe: use it from one thread."""

    retry_alone: bool = False
    """Set by :meth:`on_error` on the transaction it returns when the next attempt should
    run inside :meth:`Engine.alone` (SQLite: after repeated read conflicts); :func:`run`
    honours it."""

    _after_commit: list[Callable[[], object]] | None = None

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Call ``fn`` once this attempt has committed (from :func:`transact`'s loop; an
        attempt that fails forgets it): bookkeeping outside the store that must follow only
        what committed (``calls.Sweeps``). A ``fn`` that raises is logged, and changes
        nothing else."""
        if self._after_commit is None:
            self._after_commit = []
        self._after_commit.append(fn)

    @abstractmethod
    def get(self, key: bytes, *, snapshot: bool = False) -> Future[bytes | None]:
        """The value of ``key`` or ``None``. Adds a read conflict unless ``snapshot``."""

    def get_many(
        self, keys: Sequence[bytes], *, snapshot: bool = False
    ) -> Future[list[bytes | None]]:
        """What :meth:`get` of each key gives, all read at once (one statement on SQLite;
        FoundationDB's futures in flight together)."""
        return Gathered([self.get(key, snapshot=snapshot) for key in keys])

    @abstractmethod
    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> Future[list[tuple[bytes, bytes]]]:
        """Key-value pairs with ``begin <= key < end`` in key order (descending when
        ``reverse``), at most ``limit`` of them (0 means no limit).

        The read conflict range covers only what was read: when ``limit`` stops the scan
        it ends just past the last key returned (FoundationDB's behaviour).

        The list is the caller's, and so is a row nothing else holds: an engine never reads
        either again once returned (a journal read strips checksums off such values in
        place, ``checksums.Sealing.opened_rows``); rows an engine keeps are rows something
        else holds.
        """

    @abstractmethod
    def set(self, key: bytes, value: bytes) -> None:
        """Write ``key``. Raises 2102/2103 on oversize keys/values, 2004 on system keys."""

    def set_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """What :meth:`set` of each ``(key, value)`` in turn does, in one call (bulk writes
        of journal entries and log records; an engine may skip per-call overhead)."""
        for key, value in pairs:
            self.set(key, value)

    @abstractmethod
    def clear(self, key: bytes) -> None:
        """Delete ``key`` (no error if absent)."""

    @abstractmethod
    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key in ``[begin, end)``."""

    @abstractmethod
    def add(self, key: bytes, param: bytes) -> None:
        """Atomically add little-endian ``param`` to the value of ``key`` at commit.

        A missing value counts as zero; the result has ``len(param)`` bytes (wrapping).
        """

    @abstractmethod
    def compare_and_clear(self, key: bytes, value: bytes) -> None:
        """Atomically delete ``key`` at commit if its value then is ``value`` (an absent key
        stays absent). Like :meth:`add` it reads nothing: no read conflict, so a writer
        that changes the key in between makes it keep its value rather than abort."""

    @abstractmethod
    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        """Write ``value`` at ``key`` whose 10 bytes at the little-endian offset in the
        last 4 bytes of ``key`` are replaced by the commit versionstamp."""

    @abstractmethod
    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        """Write ``value`` (offset suffix as for keys) at ``key``, with the versionstamp
        written into the value at commit."""

    @abstractmethod
    def get_versionstamp(self) -> VersionstampFuture:
        """A future for this transaction's versionstamp; ask before committing."""

    @abstractmethod
    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        """Make the commit conflict with any write to ``[begin, end)`` after the read version."""

    @abstractmethod
    def get_read_version(self) -> Future[int]:
        """The version this transaction reads at."""

    @abstractmethod
    def commit(self) -> Future[None]:
        """Apply every write atomically, or fail with ``EngineError`` and apply nothing
        (except 1021, after which the writes may or may not have been applied)."""

    @abstractmethod
    def on_error(self, error: EngineError) -> Future[Transaction]:
        """FoundationDB's ``on_error``: fail with ``error`` (or a later one, such as 1031
        once a timeout has passed) if it may not be retried; otherwise, after the backoff,
        the transaction for the next attempt (this one reset, or a new one)."""

    def add_read_conflict_key(self, key: bytes) -> None:
        """Make the commit conflict with any write to ``key`` after the read version."""
        self.add_read_conflict_range(key, key + b"\x00")

    def relax_durability(self) -> None:  # noqa: B027 -- most engines sync every commit
        """Let this transaction's commit skip its own sync to disk: it becomes durable with
        the engine's next durable commit (SQLite's write-ahead log is synced in order). Only
        for writes whose loss in a machine crash is harmless (a CAS put's pin, see
        ``plane/cas.py``). FoundationDB makes every commit durable and ignores it."""


POLL_MAX_SECONDS: Final = 0.01
"""The longest pause between two reads of :meth:`Engine.wait_changed`'s default poll."""


class Engine(ABC):
    """A transactional ordered key-value store (a FoundationDB ``Database``)."""

    url: str
    retry_limit: int = 100
    """Retries :func:`run` makes before raising :class:`RetryLimitReached`."""
    size_limit: int = MAX_TRANSACTION_SIZE
    """Bytes a transaction may count (:mod:`persistence.txsize`) before its commit fails
    with 2101: FoundationDB's ``size_limit``, 10,000,000 unless set lower."""
    max_retry_seconds: float = 60.0
    """How long :func:`run` keeps retrying one transaction before raising
    :class:`RetryLimitReached` (call records must outlive it: ``protocols/calls.py``)."""
    commit_may_be_unknown: bool = True
    """Whether a commit can fail after it may have applied (FoundationDB's 1021 and 1039,
    which :func:`run` retries). Only then does a retry need to find its call's earlier
    attempt, so the plane keeps per-call records only on such engines (``protocols/calls.py``)."""
    blocking: bool = False
    """Whether its futures are computed by blocking calls (SQLite: reads and commits are
    file I/O on the calling thread). The asyncio driver then runs each transaction's whole
    retry loop in an executor (:func:`transact`); FoundationDB's and the memory engine's
    futures are awaited from the event loop."""
    writers_serialize: bool = False
    """Whether a commit waits while another one writes (SQLite's single write lock;
    FoundationDB's writers never wait for each other). Background work then writes in
    small transactions and pauses between them (export's hot-key deletion:
    ``segments/export.py``), so that the foreground's commits wait for little."""

    versions_per_second: float | None = None
    """How fast commit versions advance with time, where they keep time (FoundationDB:
    about a million a second); ``None`` where they count commits (SQLite, memory). Lets
    a reader turn the versions between two commits into an age (``aosp status``)."""

    def alone(self) -> AbstractContextManager[object]:
        """A block in which no other writer commits, so that a transaction run inside it
        cannot conflict (SQLite: its writer queue held). Where writers do not serialize
        (FoundationDB) there is no such block: this one holds nothing."""
        return contextlib.nullcontext()

    def run_alone(self, tr: Transaction, body: Callable[[Transaction], T]) -> T:
        """One attempt of :func:`transact` inside :meth:`alone`, blocking: ``body(tr)``,
        then ``tr``'s commit; what ``body`` returned, or the error of either. An engine
        whose writers serialize may commit it together with other threads' attempts in one
        durable commit (SQLite's group commit): its outcome is still its own."""
        with self.alone():
            result = body(tr)
            tr.commit().wait()
        return result

    def is_retryable(self, error: EngineError) -> bool:
        """Whether ``on_error`` would retry ``error`` (FoundationDB's retry table)."""
        return is_retryable(error)

    @abstractmethod
    def create_transaction(self) -> Transaction:
        """A new transaction."""

    def wait_changed(self, key: bytes, seen: bytes | None, timeout: float) -> None:
        """Return once the committed value of ``key`` may differ from ``seen`` (``None``:
        absent), or after ``timeout`` seconds; the caller reads again (a return without a
        change is allowed). This default polls with a backoff from 1 ms to
        :data:`POLL_MAX_SECONDS`, one snapshot read each; engines with a change notification
        (FoundationDB's watches, the memory engine) override it."""
        deadline = time.monotonic() + timeout
        pause = 0.001
        while run(self, lambda tr: tr.get(key, snapshot=True)) == seen:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(pause, left))
            pause = min(2 * pause, POLL_MAX_SECONDS)

    def integrity_check(self, *, full: bool = True) -> list[str] | None:
        """The engine's own check of what it stores: the problems it found (``[]``:
        healthy), or ``None``: this engine has no such check (the memory engine). SQLite
        checks its file; a FoundationDB cluster, which checks its own storage, reports
        through its status whether data is readable and whole. ``full``: the thorough
        check, where the engine has a quicker one (SQLite's ``integrity_check`` against
        ``quick_check``)."""
        del full
        return None

    def close(self) -> None:  # noqa: B027 -- most engines hold nothing to release
        """Release connections and files. The engine is unusable afterwards."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RetryStats:
    """Per error code, how many engine errors :func:`run` retried and how many reached its
    caller (this process, since start or :meth:`clear`). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.retried: Counter[int] = Counter()
        self.raised: Counter[int] = Counter()

    def count(self, code: int, *, retried: bool) -> None:
        """Count one error ``code``, retried or raised (and as a metric:
        :func:`persistence.metrics.engine_error`)."""
        with self._lock:
            (self.retried if retried else self.raised)[code] += 1
        metrics.engine_error(code, retried=retried)

    def snapshot(self) -> dict[str, dict[int, int]]:
        """``{"retried": {code: n}, "raised": {code: n}}``."""
        with self._lock:
            return {"retried": dict(self.retried), "raised": dict(self.raised)}

    def clear(self) -> None:
        """Forget every count."""
        with self._lock:
            self.retried.clear()
            self.raised.clear()


RETRY_STATS: Final = RetryStats()


async def transact(
    engine: Engine,
    body: Callable[[Transaction], Awaitable[T]],
    *,
    retry_limit: int | None = None,
    alone: bool = False,
    conflicts: int | None = None,
    eager: bool = False,
) -> T:
    """Run ``body`` in a transaction and commit, retrying as FoundationDB's retry loop does.

    Returns what the committed attempt of ``body`` returned. Engine errors go through the
    transaction's ``on_error``, which fails on those that may not be retried and backs off
    before the others (or marks the next attempt to run :meth:`Engine.alone`:
    ``Transaction.retry_alone``); after ``retry_limit`` retries
    (default ``engine.retry_limit``) or ``engine.max_retry_seconds`` the last error is
    wrapped in :class:`RetryLimitReached`.
    Any other error raised by ``body`` propagates at once. With ``alone``, every attempt
    runs alone: for transactions that write a key every transaction of their kind writes
    (a universe log's head), which conflict whenever two overlap. With ``conflicts``, the
    loop gives up once that many attempts in a row failed on a conflict (1020,
    ``not_committed``) and none failed otherwise -- so none of them committed -- raising
    :class:`~persistence.errors.Contended` (a drain that must not wait on a busy world).
    With ``eager``, an attempt that failed on a conflict is retried at once in a new
    transaction, without ``on_error``'s backoff: for transactions whose conflict means
    another did their work (a settle of the universe log's queue), so that the retry finds
    it done sooner. Each new transaction's timeout counts from its own start; the loop as
    a whole is still bounded by ``retry_limit`` and ``engine.max_retry_seconds``.

    On an engine whose futures block (``Engine.blocking``: SQLite) the whole loop is one
    :class:`~persistence.futures.Blocking` step: run in place by the blocking driver, in an
    executor by the asyncio one.
    """
    attempts = _attempts(engine, body, retry_limit, alone, conflicts, eager)
    if engine.blocking:
        return await Blocking(lambda: drive(attempts))
    return await attempts


async def _attempts(
    engine: Engine,
    body: Callable[[Transaction], Awaitable[T]],
    retry_limit: int | None,
    alone: bool,
    conflicts: int | None,
    eager: bool = False,
) -> T:
    """The retry loop of :func:`transact`."""
    limit = engine.retry_limit if retry_limit is None else retry_limit
    deadline = time.monotonic() + engine.max_retry_seconds
    retries = 0
    conflicted = 0  # attempts failed on a conflict; -1 once one failed otherwise
    always_alone = alone
    tr = engine.create_transaction()
    while True:
        try:
            tr._after_commit = None  # an earlier attempt's are not this one's
            if alone and engine.writers_serialize:
                # the engine's writers are held, on this (blocking) thread
                result = engine.run_alone(tr, lambda t: drive(body(t)))
            else:
                result = await body(tr)
                await tr.commit()
        except EngineError as exc:
            if conflicts is not None and conflicted >= 0:
                conflicted = conflicted + 1 if exc.code == fdb_errors.NOT_COMMITTED else -1
                if conflicted >= conflicts:
                    RETRY_STATS.count(exc.code, retried=False)
                    raise Contended(conflicted) from exc
            out_of_time = time.monotonic() > deadline
            if (retries >= limit or out_of_time) and engine.is_retryable(exc):
                RETRY_STATS.count(exc.code, retried=False)
                raise RetryLimitReached(retries, exc) from exc
            try:
                if eager and exc.code == fdb_errors.NOT_COMMITTED:
                    tr = engine.create_transaction()
                else:
                    tr = await tr.on_error(exc)
            except EngineError as final:
                RETRY_STATS.count(final.code, retried=False)
                raise
            retries += 1
            alone = always_alone or tr.retry_alone
            RETRY_STATS.count(exc.code, retried=True)
            log.debug("retrying transaction after engine error %s (retry %d)", exc.code, retries)
            continue
        _after_commit(tr)
        return result


def _after_commit(tr: Transaction) -> None:
    """Run what the committed attempt registered (``Transaction.after_commit``), outside
    the retry loop's error handling: a hook that raises is logged, and neither makes the
    committed attempt run again nor reports it failed, nor stops the others."""
    for fn in tr._after_commit or ():
        try:
            fn()
        except Exception:
            log.exception("a transaction's after_commit hook failed")


def run(
    engine: Engine,
    body: Callable[[Transaction], Awaitable[T]],
    *,
    retry_limit: int | None = None,
    alone: bool = False,
) -> T:
    """:func:`transact`, blocking: what the committed attempt of ``body`` (a protocol, or
    any function of the transaction returning an awaitable: ``lambda tr: tr.get(key)``)
    returned."""
    return drive(transact(engine, body, retry_limit=retry_limit, alone=alone))


def run_sync(
    engine: Engine,
    body: Callable[[Transaction], T],
    *,
    retry_limit: int | None = None,
    alone: bool = False,
) -> T:
    """:func:`run` for a plain function of the transaction (a tool's, a test's), which
    waits for what it reads (``tr.get(key).wait()``), as the FoundationDB bindings'
    blocking style does."""

    async def attempt(tr: Transaction) -> T:
        return body(tr)

    return run(engine, attempt, retry_limit=retry_limit, alone=alone)


def transactional(
    fn: Callable[Concatenate[Transaction, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Transaction | Engine, P], Coroutine[Any, Any, T]]:
    """Decorate a protocol (a coroutine function taking a transaction first), as
    ``fdb.transactional`` does.

    Called with a :class:`Transaction` it runs inside that transaction (no commit);
    called with an :class:`Engine` it runs in a fresh transaction with retries
    (:func:`transact`). Either way the call is a coroutine: ``await`` it in a protocol,
    or run it with a driver (:func:`persistence.futures.drive` blocks).
    """

    def wrapper(
        db_or_tr: Transaction | Engine, /, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, T]:
        if isinstance(db_or_tr, Transaction):
            return fn(db_or_tr, *args, **kwargs)
        return transact(db_or_tr, lambda tr: fn(tr, *args, **kwargs))

    functools.update_wrapper(wrapper, fn)
    return wrapper
