"""A fake of the official FoundationDB Python binding (``import fdb``) over the memory engine.

:func:`make_fake_fdb` builds a module object that stands in for ``fdb`` in ``sys.modules``, so
:mod:`backends.kv.fdb` runs unchanged without ``libfdb_c`` or a cluster. The database
semantics (MVCC, conflicts, atomic adds, versionstamps, limits) are the memory engine's. What
the fake adds is the *shape* of the real binding (``fdb/impl.py`` of PyPI ``foundationdb``
7.3.79, over ``ReadYourWritesTransaction``/``ThreadSafeTransaction`` of the C client), kept
strict so that misuse of that API fails here as it fails against a cluster:

* ``fdb.open`` before ``fdb.api_version`` raises ``RuntimeError``; ``FDBError``,
  ``Database``, ``Transaction``, ``KeyValue`` and ``Future`` exist on the module only once an
  API version is selected; a second, different ``api_version`` raises ``RuntimeError``.
* Reads are issued when called but their errors surface only when the result is used.
  ``get`` returns a lazy ``Value``: test it with ``present()``. It is never ``None``;
  ``bytes()`` of an absent value raises ``TypeError`` (the real ``__bytes__`` returns
  ``None``), and so do ``len()``, ``bool()``, ``hash()`` and indexing of it.
* ``get_range`` returns a lazy ``FDBRange`` of ``KeyValue`` (``.key``, ``.value``, unpacks
  as a pair). It has no ``len()`` and no indexing, and iterating it once ``commit()`` was
  called raises ``FDBError(2017)``: ranges die with their transaction.
* Writes (``set``, ``clear``, ``clear_range``, ``add``, ``set_versionstamped_*``,
  ``add_read_conflict_range``) never raise an ``FDBError``: as in the C client, their error
  is deferred (the first one wins, later writes are dropped) and fails the next read,
  ``get_versionstamp`` or ``commit``. Keys and values that are not ``bytes`` raise
  ``TypeError`` at once, as in ``keyToBytes``/``valueToBytes``.
* ``commit()`` returns a ``FutureVoid``: the commit happens when the future is waited on,
  and its error is raised there. (A real commit is sent at once and an unobserved failure is
  lost; here a commit never waited on never applies, which makes a missing ``.wait()``
  visible.) Any use of the transaction after ``commit()`` fails with 2017
  ``used_during_commit``, as ``checkUsedDuringCommit`` does, and if the commit was still
  outstanding it fails with 2017 too.
* ``get_versionstamp()`` returns a lazy ``Key``. Waiting on it before the commit completed
  raises ``FDBError(2017)`` (the real one blocks until the commit resolves: forever, if it
  is never committed); after a successful commit ``wait()`` returns the ``Key``, whose
  ``bytes()`` are the 10-byte versionstamp; after a failed or read-only commit it raises
  that commit's error or 2021. Asked for after ``commit()`` it fails with 2017.
* ``get_read_version()`` returns a ``FutureInt64``; reads of keys at or past ``\\xff`` fail
  with 2004 ``key_outside_legal_range``, but for ``\\xff\\xff/status/json``: the fields of
  a healthy cluster's status document that the engine reads (:data:`STATUS`).
* ``persistence.errors.EngineError`` from the memory engine becomes ``FDBError`` with the
  same code and FoundationDB's description (the engine's detail is kept as a note).

* ``fdb.impl.create_database`` makes a Database of the caller's own (``fdb.open`` shares
  one per cluster file). ``Database.options`` takes ``set_transaction_timeout`` and
  ``set_transaction_size_limit``: defaults of every transaction it creates.
* ``Transaction.options`` takes ``set_timeout`` and ``set_size_limit`` (the options in
  effect, set on the transaction or its database's defaults, are in
  ``Transaction.option_calls``; the size limit is recorded, not enforced). The timeout is
  measured from the transaction's creation and is not reset by ``on_error`` (API >= 610);
  every other option is, as in the C client.
  With ``FakeFdb.reachable = False`` every read and commit waits for that timeout and fails
  with 1031; with no timeout set it raises instead of hanging forever, naming the hang.
* ``on_error(error)`` returns a ``FutureVoid``: for a code the library's predicate calls
  retryable it resets the transaction (a fresh one on the engine; ``on_error_calls``
  counts them), for any other code, or once the timeout has passed, it fails. ``reset()``
  starts the transaction over. ``fdb.predicates.is_retryable``/``is_maybe_committed``/
  ``is_retryable_not_committed`` answer from the same table as ``fdb_error_predicate``.

Not modelled (absent, so using them fails loudly): key selectors, other options, watches,
``cancel``, ``fdb.transactional``, tenants, atomic operations other than ``add``, and
streaming modes (accepted and ignored). The backoff of ``on_error`` is not slept.
"""

from __future__ import annotations

import json
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from persistence import kv
from persistence.errors import EngineError

T = TypeVar("T")

LATEST_API_VERSION: Final = 730
"""``fdb.LATEST_API_VERSION`` of the 7.3 bindings."""

FDB_VERSION: Final = "7.3.79"
MIN_MODELLED_API_VERSION: Final = 520
"""Below 520 versionstamp offsets are 2 bytes; the memory engine models only the 4-byte form."""

MAX_READ_KEY: Final = b"\xff"
"""Reads at or past this key fail with 2004 (no ``read_system_keys`` option here)."""

KEY_OUTSIDE_LEGAL_RANGE: Final = 2004
STATUS_KEY: Final = b"\xff\xff/status/json"
STATUS: Final = json.dumps(
    {
        "client": {"database_status": {"available": True, "healthy": True}, "messages": []},
        "cluster": {
            "data": {"state": {"healthy": True, "min_replicas_remaining": 1, "name": "healthy"}}
        },
    }
).encode()
"""What a healthy one-process cluster's status document says of availability and data."""
USED_DURING_COMMIT: Final = 2017
TRANSACTION_TIMED_OUT: Final = 1031
RETRYABLE_NOT_COMMITTED: Final = frozenset(
    {1007, 1009, 1020, 1037, 1038, 1042, 1051, 1078, 1213, 1223}
)
MAYBE_COMMITTED: Final = frozenset({1021, 1039})
"""``fdb_error_predicate`` of libfdb_c 7.3.79 (a test checks them against the real library)."""

ERROR_DESCRIPTIONS: Final[dict[int, str]] = {
    1007: "Transaction is too old to perform reads or be committed",
    1009: "Request for future version",
    1020: "Transaction not committed due to conflict with another transaction",
    1021: "Transaction may or may not have committed",
    1025: "Operation aborted because the transaction was cancelled",
    1031: "Operation aborted because the transaction timed out",
    1036: "Read or wrote an unreadable key",
    1037: "Storage process does not have recent mutations",
    1038: "Database is locked",
    1039: "The protocol version of the cluster has changed",
    1042: "CommitProxy commit memory limit exceeded",
    1051: "Batch GRV request rate limit exceeded",
    1078: "GetReadVersion proxy memory limit exceeded",
    1213: "Transaction tag is being throttled",
    1223: "Exceeded maximum proxy tag throttling duration",
    1510: "Disk i/o operation failed",
    2000: "Invalid API call",
    2004: "Key outside legal range",
    2017: "Operation issued while a commit was outstanding",
    2020: "Transaction does not have a valid commit version",
    2021: "Transaction is read-only and therefore does not have a commit version",
    2101: "Transaction exceeds byte limit",
    2102: "Key length exceeds limit",
    2103: "Value length exceeds limit",
}
"""What ``fdb_get_error`` says for the codes the engines use (flow/error_definitions.h)."""

UNKNOWN_ERROR_DESCRIPTION: Final = "An unknown error occurred"


class FDBError(Exception):
    """``fdb.FDBError``: constructed from a code alone, with ``code`` and ``description``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code

    @property
    def description(self) -> bytes:
        """FoundationDB's text for :attr:`code`, as bytes (``fdb_get_error`` is a
        ``c_char_p``)."""
        return ERROR_DESCRIPTIONS.get(self.code, UNKNOWN_ERROR_DESCRIPTION).encode()

    def __str__(self) -> str:
        return f"{self.description!r} ({self.code})"

    def __repr__(self) -> str:
        return f"FDBError({self.code})"


class _Pending(FDBError):
    """A future was waited on before it could be ready. Not remembered as its outcome."""


def fdb_error(code: int, note: str = "") -> FDBError:
    """An :class:`FDBError` for ``code``, with ``note`` attached for diagnostics."""
    error = FDBError(code)
    if note:
        error.add_note(note)
    return error


def _memory(call: Callable[[], T]) -> T:
    """Run a memory-engine call, turning its ``EngineError`` into ``FDBError``."""
    try:
        return call()
    except EngineError as exc:
        raise fdb_error(exc.code, f"memory engine: {exc.description}") from None


def _issue(call: Callable[[], T]) -> Callable[[], T]:
    """Run ``call`` now (the operation is issued) and keep its outcome for a future."""
    try:
        result = call()
    except FDBError as exc:
        error = exc

        def fail() -> T:
            raise error

        return fail
    return lambda: result


def _failing(error: FDBError) -> Callable[[], Any]:
    def fail() -> Any:
        raise error

    return fail


def _key_to_bytes(key: object) -> bytes:
    """``keyToBytes``: accepts ``bytes`` and objects with ``as_foundationdb_key``."""
    as_key = getattr(key, "as_foundationdb_key", None)
    if as_key is not None:
        key = as_key()
    if not isinstance(key, bytes):
        raise TypeError("Key must be of type bytes")
    return key


def _value_to_bytes(value: object) -> bytes:
    """``valueToBytes``: accepts ``bytes`` and objects with ``as_foundationdb_value``."""
    as_value = getattr(value, "as_foundationdb_value", None)
    if as_value is not None:
        value = as_value()
    if not isinstance(value, bytes):
        raise TypeError("Value must be of type bytes")
    return value


def strinc(key: bytes) -> bytes:
    """``fdb.impl.strinc``: the first key after every key starting with ``key``."""
    key = key.rstrip(b"\xff")
    if not key:
        raise ValueError("Key must contain at least one byte not equal to 0xFF.")
    return key[:-1] + bytes([key[-1] + 1])


# --------------------------------------------------------------------------- futures


class _Capi:
    """The part of ``fdb.impl``'s ``capi`` (libfdb_c through ctypes) that the engine calls."""

    @staticmethod
    def fdb_future_block_until_ready(fpointer: Future) -> None:
        """Block until the future is ready (its own error, if any, is left for ``wait``)."""
        fpointer.block_until_ready()

    @staticmethod
    def fdb_transaction_set(
        tpointer: Transaction, key: bytes, key_length: int, value: bytes, value_length: int
    ) -> None:
        """Write ``key`` as ``Transaction.set`` does (the lengths are the C call's)."""
        assert (key_length, value_length) == (len(key), len(value))
        tpointer.set(key, value)

    @staticmethod
    def fdb_future_set_callback(
        fpointer: Future | Watch, callback: Callable[[Any, Any], None], parameter: Any
    ) -> None:
        """Call the C callback ``callback(future, parameter)`` once the future is ready (the
        future as a null pointer: here there is no C future to point at)."""
        fpointer.on_ready(lambda _: callback(None, parameter))


class Future:
    """``fdb.Future``: settles when first observed and keeps its outcome. Its ``capi`` and
    ``fpointer`` stand for libfdb_c and the C future (the engine blocks through them off the
    main thread)."""

    capi = _Capi()

    def __init__(self, settle: Callable[[], Any]) -> None:
        self.fpointer = self  # the C future: here, the future itself
        self._settle = settle
        self._settled = False
        self._result: Any = None
        self._error: FDBError | None = None

    def _outcome(self) -> Any:
        if not self._settled:
            try:
                self._result = self._settle()
            except _Pending:
                raise
            except FDBError as exc:
                self._error = exc
            self._settled = True
        if self._error is not None:
            raise self._error
        return self._result

    @property
    def settled(self) -> bool:
        """Whether the outcome is known (not part of the real API; for the fake itself)."""
        return self._settled

    def is_ready(self) -> bool:
        """Whether ``wait()`` would return or raise without blocking."""
        try:
            self._outcome()
        except _Pending:
            return False
        except FDBError:
            pass
        return True

    def block_until_ready(self) -> None:
        """Settle the future; one that could never become ready raises instead of hanging."""
        try:
            self._outcome()
        except _Pending:
            raise
        except FDBError:
            pass

    def on_ready(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` once ready: here at once, as the outcome is known (a
        future that could never be ready raises, where the real one would never call)."""
        self.block_until_ready()
        callback(self)

    def wait(self) -> Any:
        """The result, or the operation's ``FDBError``."""
        raise NotImplementedError


class FutureVoid(Future):
    """``fdb.impl.FutureVoid`` (commit): ``wait()`` returns ``None`` or raises."""

    def wait(self) -> None:
        self._outcome()


class FutureInt64(Future):
    """``fdb.impl.FutureInt64`` (read version): ``wait()`` returns an ``int``."""

    def wait(self) -> int:
        return int(self._outcome())


def _bytes_method(name: str) -> Callable[..., Any]:
    method = getattr(bytes, name)

    def call(self: _FutureString, *args: Any) -> Any:
        return method(self.value, *args)

    call.__name__ = name
    return call


class _FutureString(Future):
    """``fdb.impl.FutureString``: a lazy ``bytes`` look-alike.

    As in the real binding, ``isinstance(x, bytes)`` is true (``__class__`` says ``bytes``),
    the ``bytes`` methods work on the resolved value, and every use resolves the future,
    raising the read's ``FDBError`` if it failed.
    """

    @property
    def value(self) -> Any:
        """The resolved ``bytes`` (``None`` for an absent ``Value``)."""
        return self._outcome()

    def wait(self) -> _FutureString:
        """Resolve (raising the read's error) and return this object, as the real one."""
        self._outcome()
        return self

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # mirrors FutureString.getclass
        return bytes

    def as_foundationdb_key(self) -> Any:
        """The resolved value, for use as a key."""
        return self.value

    def as_foundationdb_value(self) -> Any:
        """The resolved value, for use as a value."""
        return self.value

    def __bytes__(self) -> bytes:
        value = self.value
        if value is None:
            # What Python raises for the real FutureString.__bytes__ returning None.
            raise TypeError("__bytes__ returned non-bytes (type NoneType)")
        return bytes(value)

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)

    def __add__(self, rhs: Any) -> Any:
        if isinstance(rhs, _FutureString):
            rhs = rhs.value
        return self.value + rhs

    def __radd__(self, lhs: Any) -> Any:
        if isinstance(lhs, _FutureString):
            lhs = lhs.value
        return lhs + self.value

    def __mul__(self, rhs: Any) -> Any:
        return self.value * rhs

    def __rmul__(self, lhs: Any) -> Any:
        return lhs * self.value

    def __lt__(self, rhs: Any) -> Any:
        return self.value < (rhs.value if isinstance(rhs, _FutureString) else rhs)

    def __le__(self, rhs: Any) -> Any:
        return self.value <= (rhs.value if isinstance(rhs, _FutureString) else rhs)

    def __gt__(self, rhs: Any) -> Any:
        return self.value > (rhs.value if isinstance(rhs, _FutureString) else rhs)

    def __ge__(self, rhs: Any) -> Any:
        return self.value >= (rhs.value if isinstance(rhs, _FutureString) else rhs)

    def __eq__(self, rhs: object) -> bool:
        return bool(self.value == (rhs.value if isinstance(rhs, _FutureString) else rhs))

    def __ne__(self, rhs: object) -> bool:
        return not self == rhs

    def __int__(self) -> int:
        return int(self.value)

    # Wrapped like the real makewrapper(): bytes' own slots applied to the value, so an
    # absent value fails with TypeError ("requires a 'bytes' object but received 'NoneType'").
    __len__ = _bytes_method("__len__")
    __getitem__ = _bytes_method("__getitem__")
    __hash__ = _bytes_method("__hash__")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not hasattr(bytes, name):
            raise AttributeError(name)
        method = getattr(bytes, name)
        return lambda *args: method(self.value, *args)


class Value(_FutureString):
    """``fdb.impl.Value``: the lazy result of ``get``."""

    def present(self) -> bool:
        """Whether the key exists (the only right way to test a ``Value``)."""
        return self.value is not None


class Key(_FutureString):
    """``fdb.impl.Key``: a lazy key (here: the versionstamp future)."""


# --------------------------------------------------------------------------- ranges


class KeyValue:
    """``fdb.KeyValue``: ``key`` and ``value``, unpacking as a pair."""

    def __init__(self, key: bytes, value: bytes) -> None:
        self.key = key
        self.value = value

    def __repr__(self) -> str:
        return f"{self.key!r}: {self.value!r}"

    def __iter__(self) -> Iterator[bytes]:
        return iter((self.key, self.value))


class KeySelector:
    """``fdb.KeySelector``: the two forms the adapter uses (first key >= or > ``key``)."""

    def __init__(self, key: bytes, or_equal: bool, offset: int) -> None:
        self.key, self.or_equal, self.offset = key, or_equal, offset

    @classmethod
    def first_greater_or_equal(cls, key: bytes) -> KeySelector:
        """The first key at or after ``key``."""
        return cls(key, False, 1)

    @classmethod
    def first_greater_than(cls, key: bytes) -> KeySelector:
        """The first key after ``key``."""
        return cls(key, True, 1)

    def resolved(self) -> bytes:
        """The key this selector names, as the fake's ranges take it (the two forms only)."""
        if self.offset != 1:
            raise NotImplementedError("the fake models first_greater_or_equal/_than only")
        return self.key + b"\x00" if self.or_equal else self.key


class FutureKeyValueArray(Future):
    """``fdb.impl.FutureKeyValueArray``: one batch of a range read, ``(kvs, count, more)``."""

    def wait(self) -> tuple[list[KeyValue], int, bool]:
        rows, more = self._outcome()
        return [KeyValue(k, v) for k, v in rows], len(rows), more


WANT_ALL_BATCH: Final = 7
"""Rows the fake returns per batch outside ``exact`` mode (small, so that reads of a few
dozen rows take several batches, as reads of many bytes do on a cluster)."""


class FDBRange:
    """``fdb.impl.FDBRange``: an iterable (not a sequence) of :class:`KeyValue`.

    The read is issued when the range is created; iterating yields its rows or raises its
    error, and fails with 2017 once the transaction's ``commit()`` was called.
    """

    def __init__(self, state: _TxState, rows: Callable[[], list[tuple[bytes, bytes]]]) -> None:
        self._state = state
        self._rows = rows

    def __iter__(self) -> Iterator[KeyValue]:
        self._state.check_range_alive()
        rows = self._rows()
        for key, value in rows:
            self._state.check_range_alive()
            yield KeyValue(key, value)

    def to_list(self) -> list[KeyValue]:
        """Every row, as a list."""
        return list(self)


# --------------------------------------------------------------------------- transactions


class _TxState:
    """What a transaction and its snapshot view share (the C ``FDBTransaction``)."""

    def __init__(self, inner: kv.Transaction, database: Database) -> None:
        self.inner = inner
        self.database = database
        self.deferred: FDBError | None = None
        self.commit_started = False
        self.poisoned = False
        self.commit: FutureVoid | None = None
        self.created = time.monotonic()
        self.deadline: float | None = None
        self.options: dict[str, int] = {}
        defaults = database.transaction_defaults
        if "size_limit" in defaults:
            self.options["size_limit"] = defaults["size_limit"]
        if "timeout" in defaults:
            self.options["timeout"] = defaults["timeout"]
            self.deadline = self.created + defaults["timeout"] / 1000

    def reach_cluster(self) -> None:
        """Fail as a request to an unreachable cluster does: at the timeout (1031)."""
        if self.database.module.reachable:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise fdb_error(TRANSACTION_TIMED_OUT, "transaction timed out")
            return
        if self.deadline is None:
            pending = _Pending(TRANSACTION_TIMED_OUT)
            pending.add_note("the cluster is unreachable and no timeout is set: this hangs")
            raise pending
        time.sleep(max(0.0, self.deadline - time.monotonic()))
        raise fdb_error(TRANSACTION_TIMED_OUT, "cluster unreachable until the timeout")

    def used_during_commit(self, what: str) -> FDBError:
        """``checkUsedDuringCommit``: poison the transaction and return the 2017 error."""
        self.poisoned = True
        return fdb_error(USED_DURING_COMMIT, f"{what} issued after commit() was called")

    def read(self, what: str, call: Callable[[], T]) -> Callable[[], T]:
        """Issue a read now: deferred write error first, then used-during-commit, then the
        read itself. Its outcome is delivered by the future built on the returned thunk."""

        def issue() -> T:
            if self.deferred is not None:
                raise self.deferred
            if self.commit_started:
                raise self.used_during_commit(what)
            self.reach_cluster()
            return _memory(call)

        return _issue(issue)

    def write(self, what: str, call: Callable[[], None]) -> None:
        """Apply a write, deferring its error (``onMainThreadVoid`` with ``deferredError``)."""
        if self.deferred is not None:
            return
        if self.commit_started:
            self.deferred = self.used_during_commit(what)
            return
        try:
            _memory(call)
        except FDBError as exc:
            self.deferred = exc

    def check_range_alive(self) -> None:
        """Fail the iteration of a range whose transaction was committed."""
        if self.commit_started:
            raise fdb_error(
                USED_DURING_COMMIT,
                "range iterated after commit() was called: ranges are lazy and die with "
                "their transaction; materialise them before committing",
            )


class TransactionRead:
    """``fdb.impl.TransactionRead``: the reads of a transaction (``tr.snapshot`` is one)."""

    def __init__(self, state: _TxState, snapshot: bool) -> None:
        self._state = state
        self._snapshot = snapshot

    def get_read_version(self) -> FutureInt64:
        """A future for the read version."""
        state = self._state

        def issue() -> int:
            if state.deferred is not None:
                raise state.deferred
            if state.poisoned:
                raise fdb_error(USED_DURING_COMMIT, "transaction used during its commit")
            state.reach_cluster()
            return _memory(lambda: state.inner.get_read_version().wait())

        return FutureInt64(_issue(issue))

    def get(self, key: object) -> Value:
        """A lazy :class:`Value` for ``key``."""
        k = _key_to_bytes(key)
        state, snapshot = self._state, self._snapshot

        def call() -> bytes | None:
            if k == STATUS_KEY:
                return STATUS
            if k >= MAX_READ_KEY:
                raise fdb_error(KEY_OUTSIDE_LEGAL_RANGE, f"read of {k!r}")
            return state.inner.get(k, snapshot=snapshot).wait()

        return Value(state.read("get", call))

    def get_range(
        self,
        begin: object,
        end: object,
        limit: int = 0,
        reverse: bool = False,
        streaming_mode: int = -1,
    ) -> FDBRange:
        """A lazy :class:`FDBRange` of ``[begin, end)`` (``None`` means the keyspace's edge)."""
        del streaming_mode
        b = b"" if begin is None else _key_to_bytes(begin)
        e = MAX_READ_KEY if end is None else _key_to_bytes(end)
        state, snapshot = self._state, self._snapshot

        def call() -> list[tuple[bytes, bytes]]:
            if b > MAX_READ_KEY or e > MAX_READ_KEY:
                raise fdb_error(KEY_OUTSIDE_LEGAL_RANGE, f"range read [{b!r}, {e!r})")
            return state.inner.get_range(
                b, e, limit=limit, reverse=reverse, snapshot=snapshot
            ).wait()

        return FDBRange(state, state.read("get_range", call))

    def _get_range(
        self,
        begin: KeySelector,
        end: KeySelector,
        limit: int,
        streaming_mode: int,
        iteration: int,
        reverse: bool,
    ) -> FutureKeyValueArray:
        """One batch of a range read (what ``FDBRange`` issues): all ``limit`` rows in
        ``exact`` mode, else at most :data:`WANT_ALL_BATCH`; ``more`` if rows remain."""
        del iteration
        b, e = begin.resolved(), end.resolved()
        state, snapshot = self._state, self._snapshot
        if streaming_mode == StreamingMode.exact and limit <= 0:
            return FutureKeyValueArray(_failing(fdb_error(2210, "exact mode needs a limit")))
        batch = limit if streaming_mode == StreamingMode.exact else WANT_ALL_BATCH
        if limit:
            batch = min(batch, limit)

        def call() -> tuple[list[tuple[bytes, bytes]], bool]:
            if b > MAX_READ_KEY or e > MAX_READ_KEY:
                raise fdb_error(KEY_OUTSIDE_LEGAL_RANGE, f"range read [{b!r}, {e!r})")
            rows = state.inner.get_range(
                b, e, limit=batch, reverse=reverse, snapshot=snapshot
            ).wait()
            if len(rows) < batch:
                return rows, False
            # whether rows remain, read without widening the conflict range (as a cluster
            # knows it from its shard)
            last = rows[-1][0]
            rest = (last + b"\x00", e) if not reverse else (b, last)
            return rows, bool(state.inner.get_range(*rest, limit=1, snapshot=True).wait())

        return FutureKeyValueArray(state.read("get_range", call))

    def get_range_startswith(self, prefix: object, *args: Any, **kwargs: Any) -> FDBRange:
        """The range of keys starting with ``prefix``."""
        p = _key_to_bytes(prefix)
        return self.get_range(p, strinc(p), *args, **kwargs)

    def __getitem__(self, key: object) -> Value | FDBRange:
        if isinstance(key, slice):
            return self.get_range(key.start, key.stop, reverse=(key.step == -1))
        return self.get(key)


class Transaction(TransactionRead):
    """``fdb.Transaction``: reads, writes, ``snapshot``, versionstamp and commit."""

    capi = _Capi()

    def __init__(self, state: _TxState) -> None:
        super().__init__(state, snapshot=False)
        self.tpointer = self  # the C transaction: here, the transaction itself
        self.snapshot = TransactionRead(state, snapshot=True)
        self.options = _TransactionOptions(state)

    def set(self, key: object, value: object) -> None:
        """Write ``key``; errors are deferred to the next read or commit."""
        k, v = _key_to_bytes(key), _value_to_bytes(value)
        self._state.write("set", lambda: self._state.inner.set(k, v))

    def clear(self, key: object) -> None:
        """Delete ``key``; errors are deferred."""
        k = _key_to_bytes(key)
        self._state.write("clear", lambda: self._state.inner.clear(k))

    def clear_range(self, begin: object, end: object) -> None:
        """Delete ``[begin, end)``; errors are deferred."""
        b = b"" if begin is None else _key_to_bytes(begin)
        e = MAX_READ_KEY if end is None else _key_to_bytes(end)
        self._state.write("clear_range", lambda: self._state.inner.clear_range(b, e))

    def clear_range_startswith(self, prefix: object) -> None:
        """Delete every key starting with ``prefix``."""
        p = _key_to_bytes(prefix)
        self.clear_range(p, strinc(p))

    def add(self, key: object, param: object) -> None:
        """The ``ADD`` atomic operation; errors are deferred."""
        v = _value_to_bytes(param)
        k = _key_to_bytes(key)
        self._state.write("add", lambda: self._state.inner.add(k, v))

    def compare_and_clear(self, key: object, param: object) -> None:
        """The ``COMPARE_AND_CLEAR`` atomic operation; errors are deferred."""
        v = _value_to_bytes(param)
        k = _key_to_bytes(key)
        self._state.write("compare_and_clear", lambda: self._state.inner.compare_and_clear(k, v))

    def set_versionstamped_key(self, key: object, param: object) -> None:
        """``SET_VERSIONSTAMPED_KEY`` (4-byte offset suffix on ``key``); errors are deferred."""
        v = _value_to_bytes(param)
        k = _key_to_bytes(key)
        self._state.write(
            "set_versionstamped_key", lambda: self._state.inner.set_versionstamped_key(k, v)
        )

    def set_versionstamped_value(self, key: object, param: object) -> None:
        """``SET_VERSIONSTAMPED_VALUE`` (4-byte offset suffix on ``param``); errors deferred."""
        v = _value_to_bytes(param)
        k = _key_to_bytes(key)
        self._state.write(
            "set_versionstamped_value", lambda: self._state.inner.set_versionstamped_value(k, v)
        )

    def add_read_conflict_range(self, begin: object, end: object) -> None:
        """Add a read conflict range; errors are deferred."""
        b, e = _key_to_bytes(begin), _key_to_bytes(end)
        self._state.write(
            "add_read_conflict_range", lambda: self._state.inner.add_read_conflict_range(b, e)
        )

    def add_read_conflict_key(self, key: object) -> None:
        """Add a read conflict on ``key`` alone."""
        k = _key_to_bytes(key)
        self.add_read_conflict_range(k, k + b"\x00")

    def watch(self, key: object) -> Watch:
        """``fdb.Transaction.watch``: a future that fires once the committed value of ``key``
        is no longer the one this transaction reads."""
        k = _key_to_bytes(key)
        seen = _memory(lambda: self._state.inner.get(k).wait())
        return Watch(self._state.database.engine, k, seen)

    def get_versionstamp(self) -> Key:
        """A lazy :class:`Key` for the versionstamp; ready once the commit succeeded."""
        state = self._state
        if state.deferred is not None:
            return Key(_failing(state.deferred))
        if state.commit_started:
            return Key(_failing(state.used_during_commit("get_versionstamp")))
        inner = state.inner.get_versionstamp()

        def settle() -> bytes:
            commit = state.commit
            if commit is None or not commit.settled:
                pending = _Pending(USED_DURING_COMMIT)
                pending.add_note(
                    "versionstamp waited for before the commit completed: the real binding "
                    "blocks until commit() resolves (forever if it never does)"
                )
                raise pending
            return _memory(inner.wait)

        return Key(settle)

    def commit(self) -> FutureVoid:
        """Start the commit; it is applied, or fails, when the future is waited on."""
        state = self._state
        if state.deferred is not None:
            return FutureVoid(_failing(state.deferred))
        if state.commit_started:
            return FutureVoid(_failing(state.used_during_commit("commit")))
        state.commit_started = True

        def settle() -> None:
            if state.poisoned:
                raise fdb_error(USED_DURING_COMMIT, "transaction used while its commit was pending")
            state.reach_cluster()
            _memory(lambda: state.inner.commit().wait())

        state.commit = FutureVoid(settle)
        return state.commit

    def on_error(self, error: object) -> FutureVoid:
        """Reset for a retry if ``error`` is retryable and the timeout has not passed."""
        code = error.code if isinstance(error, FDBError) else error
        if not isinstance(code, int):
            raise TypeError("on_error takes an FDBError or an error code")
        state = self._state

        def settle() -> None:
            if code not in RETRYABLE_NOT_COMMITTED | MAYBE_COMMITTED:
                raise fdb_error(code, "not retryable")
            if state.deadline is not None and time.monotonic() > state.deadline:
                raise fdb_error(TRANSACTION_TIMED_OUT, "timed out before the retry")
            state.database.on_error_calls += 1
            self._restart(keep_deadline=True)

        return FutureVoid(settle)

    def reset(self) -> None:
        """Start the transaction over (a new read version, no writes, a new timeout)."""
        self._restart(keep_deadline=False)

    def _restart(self, *, keep_deadline: bool) -> None:
        old = self._state
        fresh = _TxState(old.database.engine.create_transaction(), old.database)
        if keep_deadline:
            fresh.created, fresh.deadline = old.created, old.deadline
            if "timeout" in old.options:
                fresh.options["timeout"] = old.options["timeout"]
        self._state = fresh
        self.snapshot._state = fresh
        self.options._state = fresh

    @property
    def option_calls(self) -> dict[str, int]:
        """The options set on this transaction since its last reset (fake only)."""
        return dict(self._state.options)

    def __setitem__(self, key: object, value: object) -> None:
        self.set(key, value)

    def __delitem__(self, key: object) -> None:
        if isinstance(key, slice):
            self.clear_range(key.start, key.stop)
        else:
            self.clear(key)


class _TransactionOptions:
    """The transaction options the adapter sets (``fdb.impl._TransactionOptions``)."""

    def __init__(self, state: _TxState) -> None:
        self._state = state

    def _set(self, name: str, value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"option {name} takes an integer")
        self._state.options[name] = value

    def set_timeout(self, value: int) -> None:
        self._set("timeout", value)
        self._state.deadline = self._state.created + value / 1000 if value else None

    def set_size_limit(self, value: int) -> None:
        if isinstance(value, int) and not 32 <= value <= kv.MAX_TRANSACTION_SIZE:
            raise fdb_error(2006, "invalid_option_value")
        self._set("size_limit", value)


class Watch:
    """A watch's future (``FutureVoid``): ``on_ready`` runs its callback, on a thread, once
    the backing engine's value of the key changes, or once ``cancel`` stops it."""

    capi = _Capi()

    def __init__(self, engine: kv.Engine, key: bytes, seen: bytes | None) -> None:
        self._engine, self._key, self._seen = engine, key, seen
        self._cancelled = threading.Event()
        self.fpointer = self

    def on_ready(self, callback: Callable[[Watch], None]) -> None:
        """Call ``callback(self)`` when the value changes, or once cancelled (the real
        future is then ready with ``operation_cancelled``)."""

        def wait() -> None:
            while not self._cancelled.is_set():
                self._engine.wait_changed(self._key, self._seen, 0.05)
                latest = kv.run(self._engine, lambda tr: tr.get(self._key, snapshot=True))
                if latest != self._seen:
                    break
            callback(self)

        threading.Thread(target=wait, daemon=True).start()

    def cancel(self) -> None:
        """Stop watching."""
        self._cancelled.set()


class Database:
    """``fdb.Database``: creates transactions on the backing engine, with the transaction
    options its own options set as their defaults (``transaction_defaults``)."""

    def __init__(self, module: FakeFdb) -> None:
        self.module = module
        self.engine = module.engine
        self.on_error_calls = 0
        self.transaction_defaults: dict[str, int] = {}
        self.options = _DatabaseOptions(self)

    def create_transaction(self) -> Transaction:
        """A new :class:`Transaction`."""
        return Transaction(_TxState(self.engine.create_transaction(), self))


class _DatabaseOptions:
    """The database options the adapter sets (``fdb.impl._DatabaseOptions``): defaults of
    every transaction the database creates, applied again when one is reset by
    ``on_error`` (whose timeout still counts from the transaction's creation)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def set_transaction_timeout(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError("option transaction_timeout takes an integer")
        self._database.transaction_defaults["timeout"] = value

    def set_transaction_size_limit(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError("option transaction_size_limit takes an integer")
        if not 32 <= value <= kv.MAX_TRANSACTION_SIZE:
            raise fdb_error(2006, "invalid_option_value")
        self._database.transaction_defaults["size_limit"] = value


class _ErrorPredicates:
    """``fdb.predicates``: ``fdb_error_predicate`` of the library."""

    def is_retryable(self, error: FDBError) -> bool:
        return error.code in RETRYABLE_NOT_COMMITTED | MAYBE_COMMITTED

    def is_maybe_committed(self, error: FDBError) -> bool:
        return error.code in MAYBE_COMMITTED

    def is_retryable_not_committed(self, error: FDBError) -> bool:
        return error.code in RETRYABLE_NOT_COMMITTED


# --------------------------------------------------------------------------- the module


class FakeFdb(types.ModuleType):
    """The fake ``fdb`` module. ``opened`` records the ``cluster_file`` of each ``open``."""

    def __init__(self, engine: kv.Engine, *, client_library: bool = True) -> None:
        super().__init__("fdb", __doc__)
        self.engine = engine
        self.client_library = client_library
        self.opened: list[str | bytes | None] = []
        self.LATEST_API_VERSION = LATEST_API_VERSION
        self.__version__ = FDB_VERSION
        self._version: int | None = None
        self._databases: dict[str | bytes | None, Database] = {}
        self.reachable = True
        self.impl = types.SimpleNamespace(create_database=self._create_database)
        """``fdb.impl``: its ``create_database``, a Database of the caller's own."""
        self.created_databases: list[str | bytes | None] = []
        """The ``cluster_file`` of each ``impl.create_database`` (fake only)."""

    def _create_database(self, cluster_file: str | bytes | None = None) -> Database:
        if self._version is None:
            raise RuntimeError("You must call api_version() before using any fdb methods")
        self.created_databases.append(cluster_file)
        return Database(self)

    def api_version(self, ver: int) -> None:
        """Select the API version, with the checks of ``fdb.api_version``."""
        if self._version is not None:
            if self._version != ver:
                raise RuntimeError(f"FDB API already loaded at version {self._version}")
            return
        if ver < 13:
            raise RuntimeError("FDB API versions before 13 are not supported")
        if ver > LATEST_API_VERSION:
            raise RuntimeError(f"Latest known FDB API version is {LATEST_API_VERSION}")
        if not self.client_library:
            # What `import fdb.impl` raises when libfdb_c cannot be found.
            raise Exception("Unable to locate the FoundationDB API shared library!")
        if ver < MIN_MODELLED_API_VERSION:
            raise RuntimeError(
                f"the fake binding models API versions >= {MIN_MODELLED_API_VERSION} only"
            )
        self._version = ver
        for name, symbol in (
            ("FDBError", FDBError),
            ("Future", Future),
            ("Database", Database),
            ("Transaction", Transaction),
            ("KeyValue", KeyValue),
            ("KeySelector", KeySelector),
            ("StreamingMode", StreamingMode),
            ("predicates", _ErrorPredicates()),
        ):
            setattr(self, name, symbol)

    def is_api_version_selected(self) -> bool:
        """Whether :meth:`api_version` was called."""
        return self._version is not None

    def get_api_version(self) -> int:
        """The selected API version."""
        if self._version is None:
            raise RuntimeError("API version is not set")
        return self._version

    def open(self, cluster_file: str | bytes | None = None, event_model: object = None) -> Database:
        """The database of ``cluster_file`` (one per file, as the real cache)."""
        del event_model
        if self._version is None:
            raise RuntimeError("You must call api_version() before using any fdb methods")
        if cluster_file is not None and not isinstance(cluster_file, str | bytes):
            raise TypeError("Parameter must be a string")
        self.opened.append(cluster_file)
        if cluster_file not in self._databases:
            self._databases[cluster_file] = Database(self)
        return self._databases[cluster_file]


class StreamingMode:
    """The binding's streaming modes (values as in ``fdb.impl.StreamingMode``)."""

    want_all = -2
    iterator = -1
    exact = 0
    small = 1
    medium = 2
    large = 3
    serial = 4


def make_fake_fdb(engine: kv.Engine, *, client_library: bool = True) -> FakeFdb:
    """A fake ``fdb`` module over ``engine`` (a :class:`~backends.kv.memory.MemoryEngine`,
    possibly wrapped in a fault injector).

    With ``client_library=False`` it behaves as the bindings do when ``libfdb_c`` is not
    installed: ``api_version`` raises.
    """
    return FakeFdb(engine, client_library=client_library)
