"""The SQLite engine: the embedded, durable default (one file, WAL, stdlib ``sqlite3``).

Layout: one ``WITHOUT ROWID`` table ``kv(key BLOB PRIMARY KEY, value BLOB)`` so that a
range scan walks one B-tree in key order (SQLite compares BLOBs with ``memcmp``: byte
order), with 8 KiB pages so that a 1 KB journal entry fits in its leaf (~7 to a leaf; with
4 KiB pages it would spill to an overflow page) while a small commit writes two 8 KiB WAL
frames, not two 16 KiB ones (under ``synchronous=FULL`` the sync of the larger frames cost
~30 us more per commit); 100 KB values spill to overflow chains. Plus ``meta(name, value)``
holding the store's identity, format version and commit counter. ``PRAGMA application_id`` marks the
file as ours; ``PRAGMA user_version`` is the format version, checked at open.

Transactions are optimistic, like FoundationDB's, and serializable
(:mod:`backends.kv.sqlite_transaction`):

1. Reads run inside a deferred SQLite read transaction, i.e. one WAL snapshot.
2. Writes are buffered (read-your-writes, see :mod:`backends.kv.buffered`).
3. ``commit`` first tries to **upgrade the read transaction in place**: SQLite grants it only
   while the snapshot is still the newest (nothing committed since our reads), so success
   needs no further checks. Otherwise SQLite refuses (``SQLITE_BUSY_SNAPSHOT``, or
   ``SQLITE_BUSY`` while another writer holds the lock) and the commit takes the write lock
   with ``BEGIN IMMEDIATE`` (writers of every thread and process queue on it) and
   **validates** every non-snapshot read: re-read and compared with the rows seen. Any
   difference fails the commit with 1020 and nothing is applied -- the contract of
   FoundationDB's resolver (value-based rather than range-based, so no false conflicts for
   unchanged data). A transaction that only wrote goes straight to ``BEGIN IMMEDIATE``.
4. The buffer is applied and SQLite commits: atomically and, with ``synchronous=FULL``,
   durably. Transactions that need a versionstamp (versionstamped writes, or
   ``get_versionstamp()`` asked) increment the commit counter in ``meta`` under the write
   lock and use it as the versionstamp's commit version, so versionstamps strictly
   increase in commit order across processes; other transactions leave it alone (one
   B-tree page fewer per commit).

A process killed at any point leaves the file consistent: SQLite's WAL recovery discards
the uncommitted transaction on the next open.

**Writers queue outside SQLite** (:mod:`backends.kv.sqlite_writers`). A commit first takes
the store's writer queue: a lock of the engine's threads, then an ``flock`` on the file
``<store>-writer`` beside the database, polled every 50 us at first (doubling to 1 ms)
until ``busy_timeout``. Only then does it take SQLite's write lock, which is therefore free
at once unless a writer that does not queue (another program) holds it. Why not poll
SQLite's lock directly: a writer waiting with its read snapshot open, or polling ``BEGIN
IMMEDIATE`` (each try takes a read mark), keeps the WAL from restarting after a checkpoint;
with four writer processes the WAL grew to 60 MB in 3 s and every commit ran a checkpoint
that could not finish (commits 3x slower). So a commit that finds the queue busy first
ends its read transaction and waits without a snapshot, then validates its reads under
the lock (step 3's slow path). A directory where
the queue file cannot be created leaves SQLite's lock alone to order writers.

**Group commit.** Attempts that run alone (``kv.run(..., alone=True)``: sequenced appends,
and retries after repeated conflicts) on concurrent threads of one engine (the main thread
excepted) are committed together: the first leads, runs the waiting attempts' bodies in
arrival order on one connection under the writer queue and commits them with one
``COMMIT`` -- one sync for the group; each attempt still gets its own outcome
(:class:`~backends.kv.sqlite_group.GroupCommit`).

Opening with ``create=False`` (what reading tools use) never creates anything (a first
commit creates the queue's lock file): the file must already be a store of ours. A missing
file is ``NotFound``; an empty (0-byte) file, an SQLite database without our schema, or any
other file is ``StoreFormatError``, left untouched.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar, cast

from backends import check_path, resolve_path
from backends.kv.sqlite_errors import is_busy, sqlite_error
from backends.kv.sqlite_group import GroupCommit
from backends.kv.sqlite_transaction import SqliteTransaction
from backends.kv.sqlite_writers import Turn, WriterQueue
from persistence import kv
from persistence.errors import Backend, NotFound, StoreFormatError, Validation
from persistence.sizes import check_bool, check_int

APPLICATION_ID: Final = 0x414F5350  # "AOSP"
FORMAT_VERSION: Final = 1
STORE_KIND: Final = b"aos-persistence/kv"
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")
MAX_BUSY_TIMEOUT: Final = (2**31 - 1) / 1000  # PRAGMA busy_timeout takes a 32-bit millisecond count
PAGE_SIZE: Final = 8192  # of every store this engine creates (an existing one keeps its own)
MIN_DATABASE_BYTES: Final = 512  # SQLite's smallest page: a database file holds at least one


class SqliteEngine(kv.Engine):
    """A store in one SQLite file, shared safely by threads and processes. With ``create``
    (the default) a missing or empty file becomes a new store; without, only an existing
    store of ours opens and nothing is ever created."""

    commit_may_be_unknown = False
    """A commit applies, or fails with 1020 (the write lock was not granted: nothing was
    applied), or with an I/O error that :func:`persistence.kv.run` does not retry: no
    retry ever follows a commit that may have applied."""
    writers_serialize = True
    """One write lock for every writer of the file, held from the first write to the end
    of the commit's sync."""
    blocking = True
    """Reads and commits are file I/O on the calling thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 60.0,
        cache_mib: int = 16,
        size_limit: int = kv.MAX_TRANSACTION_SIZE,
        create: bool = True,
    ) -> None:
        self.path = Path(check_path(path, "path"))
        self.create = check_bool(create, "create")
        self.size_limit = check_int(size_limit, "size_limit", 32, kv.MAX_TRANSACTION_SIZE)
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in SYNCHRONOUS_MODES:
            raise Validation("synchronous", f"one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        self.synchronous = mode
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, int | float)
            or not (math.isfinite(busy_timeout) and 0 <= busy_timeout <= MAX_BUSY_TIMEOUT)
        ):
            raise Validation(
                "busy_timeout", f"seconds in [0, {MAX_BUSY_TIMEOUT:g}], not {busy_timeout!r}"
            )
        self.busy_timeout = busy_timeout
        self.cache_mib = check_int(cache_mib, "cache_mib", 1, 1024 * 1024)
        real = self._real = resolve_path(str(self.path), "path")
        self.url = f"sqlite://{real}"
        # A URI, so that an open without create cannot create the file (mode=rw) even when
        # it is deleted after _check_file looked.
        self._uri = f"{real.as_uri()}?mode={'rwc' if create else 'rw'}"
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []  # pooled connections of this process
        self._pid = _PID
        self._closed = False
        _ENGINES.add(self)
        self._check_file()
        conn = self._acquire()
        try:
            self._initialise(conn)
        finally:
            self._release(conn)
        self._writers = WriterQueue.of(self.path)
        self._identity = _identity(self._real)
        """The database file's device and inode: every commit checks that the file at the
        path is still this one (:meth:`check_same_file`)."""
        self._open = True  # counted among the queue's engines until closed
        self._group = GroupCommit(self)

    # ------------------------------------------------------------ opening

    def _check_file(self) -> None:
        """Refuse a missing directory, a path that is not a regular file and, without
        ``create``, a missing or empty file -- by ``stat`` alone. Opening and closing the
        file here would drop every SQLite lock this process holds on it (POSIX advisory
        locks belong to the process and go with any close of the file): another process's
        closing connection could then take itself for the last one and reset the WAL and
        its shared-memory index under live connections. A file that is not an SQLite
        database is refused when SQLite first reads it (``NOTADB``), before any write."""
        try:
            if not self.path.parent.is_dir():
                message = f"{self.path}: directory {self.path.parent} does not exist"
                raise StoreFormatError(message) if self.create else NotFound(message)
            if not self.path.exists():
                if not self.create:
                    raise NotFound(f"{self.path}: no such database (opened without create)")
                return
            if not self.path.is_file():
                raise StoreFormatError(f"{self.path}: not a regular file")
            size = self.path.stat().st_size
        except OSError as exc:
            raise Backend(f"{self.path}: cannot read: {exc}") from None
        if not size and not self.create:
            # SQLite would treat it as an empty database; a store truncated to nothing is
            # data loss to report, not a new store to start.
            raise StoreFormatError(f"{self.path}: an empty file (0 bytes), not a store; untouched")
        if 0 < size < MIN_DATABASE_BYTES:  # SQLite takes a 1-byte file for an empty database
            raise StoreFormatError(
                f"{self.path}: {size} bytes, less than an SQLite page: not an SQLite "
                "database, so not a store of ours; left untouched"
            )

    def _acquire(self) -> sqlite3.Connection:
        """A connection for one transaction (pooled; never shared by two at once)."""
        with self._lock:
            if self._closed:  # its connections were closed: no new ones
                raise Backend(f"{self.path}: the engine is closed")
            if self._pid != _PID:  # forked: the parent's connections are not ours
                self._idle, self._pid = [], _PID
            if self._idle:
                return self._idle.pop()
        try:
            conn = sqlite3.connect(
                self._uri,
                uri=True,
                isolation_level=None,
                timeout=self.busy_timeout,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute(f"PRAGMA cache_size = {-1024 * self.cache_mib}")
        except sqlite3.OperationalError as exc:  # cannot open: permissions, vanished, I/O
            raise Backend(f"{self.path}: cannot open: {exc}") from None
        except sqlite3.Error as exc:  # not a database, damaged header
            raise self._format_error(exc, "cannot open") from None
        return conn

    def _release(self, conn: sqlite3.Connection) -> None:
        """Return a connection to the pool, ending any transaction it was left in."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            conn.close()
            return
        with self._lock:
            if self._pid == _PID and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Create the schema in an empty file, or check that the file is our store."""
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if app_id == 0 and not self.create:
                raise StoreFormatError(
                    f"{self.path}: an SQLite database that was never made a store "
                    "(opened without create); left untouched"
                )
            if app_id == 0:
                # Look before writing anything: a foreign database must stay byte-identical.
                self._refuse_foreign(conn)
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Re-check under the write lock: another process may have won the race.
                    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                    if app_id == 0:
                        self._refuse_foreign(conn)
                        conn.execute(
                            "CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB NOT NULL)"
                            " WITHOUT ROWID"
                        )
                        conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value NOT NULL)")
                        conn.executemany(
                            "INSERT INTO meta VALUES (?, ?)",
                            [("kind", STORE_KIND), ("commit_version", 0)],
                        )
                        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                        conn.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if app_id != APPLICATION_ID:
                raise StoreFormatError(
                    f"{self.path}: SQLite application_id {app_id:#x} is not ours "
                    f"({APPLICATION_ID:#x}); left untouched"
                )
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > FORMAT_VERSION:
                raise StoreFormatError(
                    f"{self.path}: store format {version} is newer than this software "
                    f"supports ({FORMAT_VERSION}); upgrade aos-persistence"
                )
            kind = conn.execute("SELECT value FROM meta WHERE name = 'kind'").fetchone()
            if kind is None or kind[0] != STORE_KIND:
                raise StoreFormatError(f"{self.path}: store identity record is missing or wrong")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise self._format_error(exc, "damaged or not a database") from None

    def _format_error(self, exc: sqlite3.Error, what: str) -> StoreFormatError:
        """The error for a file SQLite cannot read as a database: ``what``, or that it is
        not an SQLite database at all (``NOTADB``: SQLite wrote nothing)."""
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
            return StoreFormatError(
                f"{self.path}: not an SQLite database, so not a store of ours; left untouched"
            )
        return StoreFormatError(f"{self.path}: {what}: {exc}")

    def _refuse_foreign(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreFormatError(
                f"{self.path}: an SQLite database with other tables, not a store of ours; "
                "left untouched"
            )

    # ------------------------------------------------------------ engine

    def create_transaction(self) -> SqliteTransaction:
        return SqliteTransaction(self)

    def alone(self) -> Turn:
        """Hold the writer queue for the block (a commit inside it takes the queue again,
        as its holder): no other writer that queues can commit meanwhile, so reads made
        in the block stay the newest and its commit upgrades in place. 1020 if the queue
        is not granted within ``busy_timeout``."""
        timeout = self.busy_timeout
        return self._writers.turn(time.monotonic() + timeout, refused="alone", timeout=timeout)

    def run_alone(self, tr: kv.Transaction, body: Callable[[kv.Transaction], T]) -> T:
        """Group commit: the attempt joins the transactions of this engine that other
        threads run alone meanwhile, and one thread commits them all in one SQLite
        transaction -- one sync (:class:`~backends.kv.sqlite_group.GroupCommit`). The main
        thread runs its attempts as :meth:`Engine.run_alone` does: Python runs signal
        handlers (Ctrl-C's ``KeyboardInterrupt``) in it, between any two steps, and a
        group's bookkeeping must not be cut short. So do a thread that already holds the
        writer queue and a transaction already used."""
        if (
            type(tr) is not SqliteTransaction
            or tr._engine is not self
            or tr._conn is not None
            or tr._done
            or threading.current_thread() is threading.main_thread()
            or self._writers.held_here()
        ):
            return super().run_alone(tr, body)
        return cast(T, self._group.run(tr, body))

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
            closing, self._open = self._open, False
        for conn in idle:
            conn.close()
        if closing:
            self._writers.close()

    def check_same_file(self) -> None:
        """``Backend`` if the file at the engine's path is no longer the one it opened (it
        was replaced, or removed): a commit into the open file would be acknowledged with
        nothing at the path holding it. Every commit calls it before ``COMMIT``."""
        try:
            identity = _identity(self._real)  # wherever the process moved since it opened
        except FileNotFoundError:
            raise Backend(
                f"{self.path}: the store file was removed while open; nothing was committed"
            ) from None
        except OSError as exc:
            raise Backend(f"{self.path}: cannot look at the store file: {exc}") from None
        if identity != self._identity:
            raise Backend(
                f"{self.path}: another file replaced the store file while it was open; "
                "nothing was committed"
            )

    def integrity_check(self, *, full: bool = True) -> list[str]:
        """SQLite's ``PRAGMA integrity_check`` (``PRAGMA quick_check`` without ``full``: the
        pages and B-trees, not the indexes' agreement, in a fraction of the time); an empty
        list means healthy. Damage too deep for the check to run is ``StoreFormatError``; a
        lock not granted in time is the usual retryable ``EngineError``."""
        check = "integrity_check" if check_bool(full, "full") else "quick_check"
        conn = self._acquire()
        try:
            rows = conn.execute(f"PRAGMA {check}").fetchall()
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
                raise sqlite_error(exc, "integrity_check") from None
            raise StoreFormatError(f"{self.path}: {check} cannot run: {exc}") from None
        finally:
            self._release(conn)
        return [] if rows == [("ok",)] else [row[0] for row in rows]


T = TypeVar("T")

_ENGINES: Final[weakref.WeakSet[SqliteEngine]] = weakref.WeakSet()
_PID = os.getpid()
"""This process's id, kept by :func:`_after_fork` (the pool checks it per transaction)."""


def _after_fork() -> None:
    """In a fork's child, before anything else runs: its process id, and fresh locks for
    every engine of the parent (a lock held by another parent thread would never be
    released; the writer queues renew theirs: ``sqlite_writers``)."""
    global _PID
    _PID = os.getpid()
    for engine in list(_ENGINES):
        engine._lock = threading.Lock()
        engine._group = GroupCommit(engine)  # a parent's leader or waiters are not here


os.register_at_fork(after_in_child=_after_fork)


def _identity(path: Path) -> tuple[int, int]:
    """The device and inode of the file at ``path``."""
    status = os.stat(path)
    return status.st_dev, status.st_ino
