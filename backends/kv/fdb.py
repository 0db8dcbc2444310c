"""The FoundationDB engine: a thin adapter over the official Python bindings.

Install with ``pip install 'aos-persistence[fdb]'`` (PyPI package ``foundationdb``, imported
as ``fdb``; the PyPI package named ``fdb`` is an unrelated Firebird driver). The bindings load
``libfdb_c`` from the FoundationDB client package; bindings, client library and cluster must
agree: 7.3 bindings (API version <= 730) with a 7.3 ``libfdb_c`` for a 7.3 cluster, 8.0
bindings with an 8.0 library (they refuse a 7.3 one). See docs/engines.md.

The adapter does almost nothing of its own, on purpose. What it must get right:

* Reads, commits and ``on_error`` hand back the bindings' own futures, wrapped
  (:class:`_FdbFuture`): a protocol issues its reads, then awaits them, and the asyncio
  driver is woken by the future's callback -- no thread per call. ``tr.get`` returns a lazy
  ``Value``: its ``value`` is the bytes, or ``None`` when the key is absent. A blocking wait
  off the main thread waits in libfdb_c itself; on the main thread it reads a pipe written
  from C, where Ctrl-C still interrupts it (:func:`_block`).
* Ranges are lazy and die with the transaction: every range is materialised inside the
  transaction into a list of ``(bytes, bytes)``, batch by batch (:class:`_FdbRange`: the
  bindings' ``FDBRange`` iterator would block between batches), all rows in one batch when
  a limit is given (``StreamingMode.exact``), else as few as the cluster allows
  (``want_all``).
* ``get_versionstamp()`` is requested before commit and resolved after it; the result is
  converted with ``bytes()``.
* ``fdb.FDBError`` becomes :class:`~persistence.errors.EngineError` with the same code; the
  retry loop goes through the binding's own ``on_error`` (FoundationDB's classification and
  its throttling-aware backoff), and ``is_retryable`` asks ``libfdb_c``'s predicates.
* Every transaction carries a timeout and a size limit (its Database's options, set once:
  :func:`_database`), so an unreachable cluster fails in seconds with 1031 instead of
  hanging; the timeout spans ``on_error`` retries.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import importlib.metadata
import itertools
import json
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from backends.kv import checks, fdb_wake
from persistence import fdb_errors, kv
from persistence.errors import EngineError, MissingDependency, NotFound, Validation
from persistence.futures import Future
from persistence.sizes import check_bool

DEFAULT_API_VERSION: Final = 730
MIN_API_VERSION: Final = 520
"""Below 520 ``set_versionstamped_key`` takes a 2-byte offset, which the keyspace does not
write: keys would land outside it."""

BINDINGS_INSTALL: Final = "pip install 'aos-persistence[fdb]' (foundationdb==7.3.*)"

T = TypeVar("T")

_fdb: Any = None


@dataclass(frozen=True, slots=True)
class FdbOptions:
    """How to reach a cluster and bound every transaction (URL query options)."""

    api_version: int = DEFAULT_API_VERSION
    timeout_ms: int = 10_000
    """Per transaction, across its retries: an unreachable cluster fails with 1031."""
    retry_limit: int = 100
    size_limit: int = kv.MAX_TRANSACTION_SIZE
    """FoundationDB's ``size_limit`` (32 .. 10,000,000 bytes)."""
    client_library: str | None = None
    """Path of ``libfdb_c.so`` to load instead of the one on the library search path."""

    def __post_init__(self) -> None:
        for name, low, high in (
            ("timeout_ms", 1, 2**31 - 1),
            ("retry_limit", 0, 2**31 - 1),
            ("size_limit", 32, kv.MAX_TRANSACTION_SIZE),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise Validation(f"fdb {name}", f"an integer in {low}..{high}, not {value!r}")


def load_bindings(api_version: int, client_library: str | None = None) -> Any:
    """Import ``fdb`` and select ``api_version`` (``MIN_API_VERSION`` up to the bindings'
    maximum), or explain what to install."""
    global _fdb
    if isinstance(api_version, bool) or not isinstance(api_version, int):
        raise Validation("fdb api_version", f"must be an integer, not {api_version!r}")
    if _fdb is not None:
        selected = _fdb.get_api_version()
        if selected != api_version:
            raise MissingDependency(
                f"FoundationDB API version {selected} is already selected in this process; "
                f"cannot also use {api_version}"
            )
        return _fdb
    try:
        import fdb
    except ImportError:
        raise MissingDependency(
            "the FoundationDB engine needs the official bindings matching the cluster: "
            f"{BINDINGS_INSTALL} (PyPI package 'foundationdb', not 'fdb')"
        ) from None
    latest = int(getattr(fdb, "LATEST_API_VERSION", DEFAULT_API_VERSION))
    if not MIN_API_VERSION <= api_version <= latest:
        raise Validation(
            "fdb api_version",
            f"{api_version} is outside {MIN_API_VERSION}..{latest} (the installed bindings, "
            f"foundationdb {_bindings_version(fdb)}, support up to {latest})",
        )
    if fdb.is_api_version_selected() and fdb.get_api_version() != api_version:
        raise MissingDependency(
            f"FoundationDB API version {fdb.get_api_version()} was already selected by this "
            f"process (the host application?); cannot also use {api_version}"
        )
    try:
        if client_library is not None:
            # The bindings dlopen "libfdb_c.so" by name; a library already loaded under that
            # soname is the one they get.
            ctypes.CDLL(os.path.abspath(client_library), mode=ctypes.RTLD_GLOBAL)
        if not fdb.is_api_version_selected():
            fdb.api_version(api_version)
    except Exception as exc:  # RuntimeError/OSError: no libfdb_c, or one of another version
        raise MissingDependency(
            f"the FoundationDB client library (libfdb_c) refused API version {api_version}: "
            f"{exc}. Bindings, client library and cluster must be the same release: for a 7.3 "
            f"cluster, {BINDINGS_INSTALL} and FoundationDB's 7.3 client package (or "
            "client_library=/path/to/libfdb_c.so in the fdb:// URL)"
        ) from None
    _fdb = fdb
    return fdb


def _bindings_version(fdb: Any) -> str:
    try:
        return importlib.metadata.version("foundationdb")
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(fdb, "__version__", "?"))


def _engine_error(exc: Any, timeout_hint: str = "") -> EngineError:
    """The bindings' ``FDBError`` as an ``EngineError`` with the same code."""
    code, text = int(exc.code), exc.description
    text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    if code == fdb_errors.TRANSACTION_TIMED_OUT and timeout_hint:
        text = f"{text} ({timeout_hint})"
    return EngineError(code, text)


def _translate(fdb: Any, call: Callable[[], T], timeout_hint: str = "") -> T:
    try:
        return call()
    except fdb.FDBError as exc:
        raise _engine_error(exc, timeout_hint) from None


_main_thread = [threading.main_thread().ident]
"""The main thread's ident (a forked child's main thread is the thread that forked)."""
os.register_at_fork(after_in_child=lambda: _main_thread.__setitem__(0, threading.get_ident()))


def _block(fdb: Any, future: Any, hint: str) -> None:
    """Block the calling thread until the bindings' ``future`` is ready.

    Off the main thread the wait is libfdb_c's own (``fdb_future_block_until_ready``, with
    the GIL released): nothing runs on the client's network thread when the future is
    ready. The bindings' ``block_until_ready`` instead has the network thread call back into
    Python (it must take the GIL, contended by every thread that is waiting its turn) to
    release a semaphore (docs/engines.md has what that cost 16 threads). On the main
    thread a signal (Ctrl-C) must interrupt the wait, and Python handles signals only
    there: it reads a pipe the C callback writes to (``fdb_wake.block``), or else waits as
    the bindings do."""
    try:  # each wait returns at once if the future is ready
        if threading.get_ident() != _main_thread[0]:
            future.capi.fdb_future_block_until_ready(future.fpointer)
        elif not future.is_ready() and not fdb_wake.block(future):
            future.block_until_ready()
    except fdb.FDBError as exc:
        raise _engine_error(exc, hint) from None


_notified: dict[int, tuple[Any, Callable[[], object]]] = {}
"""Callbacks due, by the number each was given (the C callback's parameter): with its
future, kept alive here until it is ready."""
_numbers = itertools.count(1)
_log = logging.getLogger(__name__)


def _fire(pointer: int | None, number: int) -> None:
    del pointer
    _, callback = _notified.pop(number)
    try:
        callback()
    except Exception:  # on the client's network thread: nobody to raise it to
        _log.exception("a callback of a FoundationDB future failed")


_FIRE: Final = fdb_wake.CALLBACK(_fire)
"""The one C callback of every future notified (:func:`_notify`)."""


def _notify(future: Any, callback: Callable[[], object]) -> None:
    """Call ``callback`` (on the client's network thread, or here if ready already) once the
    bindings' ``future`` is ready. One C callback serves every future, told apart by the
    number it is given; the bindings' ``on_ready`` instead makes and pins a ctypes closure
    per call (docs/benchmarks.md has what that cost an asyncio plane)."""
    number = next(_numbers)  # atomic, as the dict's own operations are: no lock
    _notified[number] = (future, callback)
    try:
        future.capi.fdb_future_set_callback(future.fpointer, _FIRE, number)
    except Exception:  # refused (an interrupt once the call returned: it will be called)
        _notified.pop(number, None)
        raise


class _FdbFuture(Future[T]):
    """One of the bindings' futures; its value is ``convert`` of it once ready (bindings
    errors become ``EngineError``)."""

    __slots__ = ("_convert", "_fdb", "_future", "_hint")

    def __init__(self, fdb: Any, future: Any, convert: Callable[[Any], T], hint: str) -> None:
        self._fdb = fdb
        self._future = future
        self._convert = convert
        self._hint = hint

    def poll(self) -> bool:
        return bool(self._future.is_ready())

    def __await__(self) -> Generator[Future[Any], None, T]:
        # The base's loop, polled once: a driver resumes the awaiting coroutine only once
        # the future is ready (``block`` returns then, ``notify`` calls back then).
        if not self._future.is_ready():
            yield self
        return self.result()

    def result(self) -> T:
        try:
            return self._convert(self._future)
        except self._fdb.FDBError as exc:
            raise _engine_error(exc, self._hint) from None

    def block(self) -> None:
        _block(self._fdb, self._future, self._hint)

    def notify(self, callback: Callable[[], object]) -> None:
        _notify(self._future, callback)

    def settle_async(
        self, executor: concurrent.futures.Executor | None
    ) -> Coroutine[Any, Any, None]:
        return _settle_async(self._future, self, executor)


async def _settle_async(
    future: Any, outer: Future[Any], executor: concurrent.futures.Executor | None
) -> None:
    """Return once the bindings' ``future`` (of ``outer``; ``None``: nothing in flight) is
    ready: woken from C through the loop's pipe (``fdb_wake``), or else as any future that
    notifies. The one coroutine between the driver and the loop's waiter."""
    if future is None:
        return
    registered = fdb_wake.register(future)
    if registered is None:
        await Future.settle_async(outer, executor)
        return
    channel, slot, waiter = registered
    try:
        await waiter
    except BaseException:  # cancelled: the loop may be left unclosed; do not hold it
        channel.forget(slot, waiter)
        raise


def _value(future: Any) -> bytes | None:
    value: bytes | None = future.value  # the bindings' bytes, or None: absent
    return value


def _waited(future: Any) -> Any:
    return future.wait()


def _versionstamp(future: Any) -> bytes:
    return bytes(future.wait())


class _FdbRange(Future[list[tuple[bytes, bytes]]]):
    """A range read, batch by batch: each batch's future is issued when the one before it
    is in (by the thread that polls), so the read blocks nobody between batches."""

    __slots__ = (
        "_begin",
        "_end",
        "_error",
        "_fdb",
        "_future",
        "_hint",
        "_iteration",
        "_left",
        "_mode",
        "_reader",
        "_reverse",
        "_rows",
    )

    def __init__(
        self, fdb: Any, reader: Any, begin: bytes, end: bytes, limit: int, reverse: bool, hint: str
    ) -> None:
        self._fdb = fdb
        self._reader = reader
        self._begin = fdb.KeySelector.first_greater_or_equal(begin)
        self._end = fdb.KeySelector.first_greater_or_equal(end)
        self._left = limit
        self._reverse = reverse
        self._mode = fdb.StreamingMode.exact if limit > 0 else fdb.StreamingMode.want_all
        self._hint = hint
        self._iteration = 1
        self._rows: list[tuple[bytes, bytes]] = []
        self._error: EngineError | None = None
        self._future: Any = self._issue()

    def _issue(self) -> Any:
        # The bindings' own FDBRange issues its batches with this method.
        return self._reader._get_range(
            self._begin, self._end, self._left, self._mode, self._iteration, self._reverse
        )

    def poll(self) -> bool:
        while self._future is not None:
            if not self._future.is_ready():
                return False
            try:
                kvs, count, more = _translate(self._fdb, self._future.wait, self._hint)
            except EngineError as exc:
                self._error, self._future = exc, None
                break
            self._rows.extend((row.key, row.value) for row in kvs)
            if self._left:
                self._left -= count
                if not self._left:
                    more = False
            if not count or not more:
                self._future = None
                break
            last = kvs[-1].key
            if self._reverse:
                self._end = self._fdb.KeySelector.first_greater_or_equal(last)
            else:
                self._begin = self._fdb.KeySelector.first_greater_than(last)
            self._iteration += 1
            self._future = _translate(self._fdb, self._issue, self._hint)
        return True

    def result(self) -> list[tuple[bytes, bytes]]:
        if self._error is not None:
            raise self._error
        return self._rows

    def block(self) -> None:
        if self._future is not None:
            _block(self._fdb, self._future, self._hint)

    def notify(self, callback: Callable[[], object]) -> None:
        if self._future is None:
            callback()
        else:
            _notify(self._future, callback)

    def settle_async(
        self, executor: concurrent.futures.Executor | None
    ) -> Coroutine[Any, Any, None]:
        return _settle_async(self._future, self, executor)


class FdbTransaction(kv.Transaction):
    """Delegates to an ``fdb.Transaction`` of the engine's own Database, whose options give
    it its timeout and size limit (:func:`_database`)."""

    def __init__(self, fdb: Any, tr: Any, hint: str) -> None:
        self._fdb = fdb
        self._tr = tr
        self._hint = hint

    def _call(self, call: Callable[[], T]) -> T:
        return _translate(self._fdb, call, self._hint)

    # Arguments are checked here, as the memory and SQLite engines check them: the binding
    # would raise TypeError (or pass a str key through as UTF-8) instead of Validation.
    # Reads and mutations call the binding directly: its reads hand back a future and its
    # mutations return nothing (``libfdb_c`` reports their errors at commit), so neither
    # raises ``FDBError``; the futures translate theirs.

    def get(self, key: bytes, *, snapshot: bool = False) -> Future[bytes | None]:
        if type(key) is not bytes:
            checks.check_type(key, "key")
        reader = self._tr.snapshot if snapshot else self._tr
        return _FdbFuture(self._fdb, reader.get(key), _value, self._hint)

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> Future[list[tuple[bytes, bytes]]]:
        checks.check_range(begin, end)
        checks.check_limit(limit)
        reader = self._tr.snapshot if snapshot else self._tr
        return self._call(
            lambda: _FdbRange(self._fdb, reader, begin, end, limit, reverse, self._hint)
        )

    # Sets call libfdb_c's ``fdb_transaction_set`` as the bindings' ``set`` does, without
    # its conversions: the pair is checked to be bytes here.

    def set(self, key: bytes, value: bytes) -> None:
        checks.check_pair(key, value)
        tr = self._tr
        tr.capi.fdb_transaction_set(tr.tpointer, key, len(key), value, len(value))

    def set_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        tr, check = self._tr, checks.check_pair
        c_set, pointer = tr.capi.fdb_transaction_set, tr.tpointer
        for key, value in pairs:
            check(key, value)
            c_set(pointer, key, len(key), value, len(value))

    def clear(self, key: bytes) -> None:
        checks.check_type(key, "key")
        self._tr.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        if type(begin) is not bytes or type(end) is not bytes:
            checks.check_range(begin, end)
        self._tr.clear_range(begin, end)

    def add(self, key: bytes, param: bytes) -> None:
        checks.check_type(key, "key")
        checks.check_type(param, "param")
        self._tr.add(key, param)

    def compare_and_clear(self, key: bytes, value: bytes) -> None:
        checks.check_type(key, "key")
        checks.check_type(value, "value")
        self._tr.compare_and_clear(key, value)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        checks.check_type(key, "key")
        checks.check_type(value, "value")
        self._tr.set_versionstamped_key(key, value)

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        checks.check_type(key, "key")
        checks.check_type(value, "value")
        self._tr.set_versionstamped_value(key, value)

    def get_versionstamp(self) -> kv.VersionstampFuture:
        return _FdbFuture(self._fdb, self._tr.get_versionstamp(), _versionstamp, self._hint)

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        checks.check_range(begin, end)
        self._call(lambda: self._tr.add_read_conflict_range(begin, end))

    def get_read_version(self) -> Future[int]:
        return _FdbFuture(self._fdb, self._tr.get_read_version(), _waited, self._hint)

    def approximate_size(self) -> int:
        """What FoundationDB counts against ``size_limit`` so far (mutations and conflict
        ranges), as ``get_approximate_size`` reports it."""
        return self._call(lambda: int(self._tr.get_approximate_size().wait()))

    def commit(self) -> Future[None]:
        return _FdbFuture(self._fdb, self._tr.commit(), _waited, self._hint)

    def on_error(self, error: EngineError) -> Future[kv.Transaction]:
        future = self._tr.on_error(self._fdb.FDBError(error.code))
        return _FdbFuture(self._fdb, future, self._reset, self._hint)

    def _reset(self, future: Any) -> FdbTransaction:
        """The next attempt, once ``on_error``'s future is ready (its error, if any, is
        raised here: not retryable). The reset transaction has its database's options
        again; its timeout still counts from its creation (API >= 610)."""
        future.wait()
        return self


_databases: dict[tuple[Any, str | None, int, int], Any] = {}
_databases_lock = threading.Lock()


def _database(fdb: Any, cluster_file: str | None, options: FdbOptions) -> Any:
    """The Database of engines on ``cluster_file`` with ``options``' timeout and size
    limit: one of their own, whose database options make those every transaction's
    defaults. A transaction then sets no option of its own, and ``on_error`` keeps them:
    the size limit is applied again, the timeout counts from the transaction's creation
    (both checked on a real cluster: ``tests/engines/test_fdb_cluster.py``). Not
    ``fdb.open``'s Database: that one is shared by every user of the cluster file in the
    process (the host application's too), whose transactions its options would change."""
    key = (fdb, cluster_file, options.timeout_ms, options.size_limit)
    with _databases_lock:
        database = _databases.get(key)
        if database is None:
            fdb.open(cluster_file)  # starts the client's network thread, as the bindings do
            database = fdb.impl.create_database(cluster_file)
            database.options.set_transaction_timeout(options.timeout_ms)
            database.options.set_transaction_size_limit(options.size_limit)
            _databases[key] = database
    return database


class FdbEngine(kv.Engine):
    """A FoundationDB cluster, named by its cluster file."""

    versions_per_second = 1_000_000.0

    def __init__(self, cluster_file: str | None = None, options: FdbOptions | None = None) -> None:
        self.cluster_file = cluster_file or os.environ.get("FDB_CLUSTER_FILE") or None
        self.options = options or FdbOptions()
        self.url = f"fdb://{self.cluster_file or ''}"
        self.retry_limit = self.options.retry_limit
        # The transaction timeout spans retries and ends them (1031) before the runner would.
        self.max_retry_seconds = self.options.timeout_ms / 1000 + 1.0
        if self.cluster_file is not None and not os.path.isfile(self.cluster_file):
            raise NotFound(f"FoundationDB cluster file {self.cluster_file} does not exist")
        self._timeout_hint = (
            f"timeout_ms={self.options.timeout_ms} on cluster file "
            f"{self.cluster_file or 'the default'}: is the cluster reachable?"
        )
        self._fdb = load_bindings(self.options.api_version, self.options.client_library)
        self._db = _translate(
            self._fdb, lambda: _database(self._fdb, self.cluster_file, self.options)
        )

    @property
    def size_limit(self) -> int:
        """FoundationDB's ``size_limit`` of the engine's transactions (its options')."""
        return self.options.size_limit

    @size_limit.setter
    def size_limit(self, value: int) -> None:
        """Give the engine's later transactions another size limit: they come from the
        Database whose options say so (:func:`_database`; the others keep theirs)."""
        options = dataclasses.replace(self.options, size_limit=value)  # checks it
        self._db = _translate(self._fdb, lambda: _database(self._fdb, self.cluster_file, options))
        self.options = options

    def create_transaction(self) -> FdbTransaction:
        fdb = self._fdb
        try:
            return FdbTransaction(fdb, self._db.create_transaction(), self._timeout_hint)
        except fdb.FDBError as exc:
            raise _engine_error(exc, self._timeout_hint) from None

    def is_retryable(self, error: EngineError) -> bool:
        return bool(self._fdb.predicates.is_retryable(self._fdb.FDBError(error.code)))

    def integrity_check(self, *, full: bool = True) -> list[str] | None:
        """What the cluster's status (``\xff\xff/status/json``, read in a transaction with
        the engine's timeout) says of the data: :func:`status_problems` (``None`` while the
        status is incomplete: not checked). FoundationDB checks its own storage (checksummed
        pages, replicas); ``full`` changes nothing."""
        check_bool(full, "full")
        raw = kv.run(self, lambda tr: tr.get(STATUS_KEY))
        if raw is None:
            return ["the cluster returned no status document"]
        try:
            status = json.loads(raw)
        except ValueError as exc:
            return [f"the cluster's status document is not JSON: {exc}"]
        return status_problems(status)

    def wait_changed(self, key: bytes, seen: bytes | None, timeout: float) -> None:
        """A FoundationDB watch on ``key``, set in a transaction that found it ``seen``;
        waited for up to ``timeout`` seconds, then cancelled. A failed watch returns (the
        caller reads again, and a read reports what is wrong)."""

        def watch() -> Any:
            tr = self._db.create_transaction()
            value = tr.get(key).wait()
            if (bytes(value) if value.present() else None) != seen:
                return None
            future = tr.watch(key)
            tr.commit().wait()
            return future

        try:
            future = _translate(self._fdb, watch)
        except EngineError:
            return
        if future is None:
            return
        fired = threading.Event()
        _notify(future, fired.set)
        try:
            fired.wait(timeout)
        finally:  # interrupted too: the watch ends, and its callback with it
            future.cancel()


STATUS_KEY: Final = b"\xff\xff/status/json"
"""The special key holding the cluster's status document (``fdbcli``'s ``status json``)."""


def status_problems(status: Any) -> list[str] | None:
    """The problems of a cluster's status document that mean data cannot be read or is
    lost: the database unavailable, or data missing (no replica left of some of it: data
    distribution's state ``missing_data``, or ``min_replicas_remaining`` 0). A cluster that
    is healing or moving data, with every piece still readable, has none. A document that
    does not say (a cluster still starting reports an incomplete status) is ``None``: not
    checked, never reported clean; one that is not a status document is a problem."""
    if not isinstance(status, dict):
        return ["the cluster's status document is not an object"]
    problems = []
    client = status.get("client")
    database = client.get("database_status") if isinstance(client, dict) else None
    if not isinstance(database, dict) or not isinstance(database.get("available"), bool):
        return None
    if not database["available"]:
        messages = client.get("messages") if isinstance(client, dict) else None
        why = "; ".join(
            str(m.get("description", m.get("name", "")))
            for m in messages or []
            if isinstance(m, dict)
        )
        problems.append("the database is unavailable" + (f": {why}" if why else ""))
        return problems
    cluster = status.get("cluster")
    data = cluster.get("data") if isinstance(cluster, dict) else None
    state = data.get("state") if isinstance(data, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("name"), str):
        return None
    if state["name"] == "missing_data" or state.get("min_replicas_remaining") == 0:
        description = state.get("description") or state["name"]
        problems.append(f"data is missing: no replica left of some of it ({description})")
    return problems
