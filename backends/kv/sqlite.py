"""The SQLite engine: the embedded, durable default (one file, WAL, stdlib ``sqlite3``).

Layout: one ``WITHOUT ROWID`` table ``kv(key BLOB PRIMARY KEY, value BLOB)`` so that a
range scan walks one B-tree in key order (SQLite compares BLOBs with ``memcmp``: byte
order), with 8 KiB pages so that a 1 KB journal entry fits in its leaf (~7 to a leaf; with
4 KiB pages it would spill to an overflow page) while a small commit writes two 8 KiB WAL
frames, not two 16 KiB ones (under ``synchronous=FULL`` the sync of the larger frames cost
~30 us more per commit); 100 KB values spill to overflow chains. Plus ``meta(name, value)``
holding the store's identity, format version and commit counter. ``PRAGMA application_id`` marks the
file as ours; ``PRAGMA user_version`` is the format version, checked at open.

Transactions are optimistic, like FoundationDB's, and serializable:

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

import contextlib
import itertools
import math
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, TypeVar, cast

from backends import check_path, resolve_path
from backends.kv.buffered import BufferedTransaction
from backends.kv.sqlite_errors import is_busy, sqlite_error
from backends.kv.sqlite_group import GROUP_BODY, GroupCommit
from backends.kv.sqlite_writers import MAX_WRITE_POLL, WRITE_POLL, Turn, WriterQueue
from persistence import fdb_errors, kv
from persistence.errors import (
    Backend,
    CorruptRecord,
    EngineError,
    NotFound,
    StoreFormatError,
    Validation,
)
from persistence.futures import Future, Ready, settled
from persistence.sizes import check_bool, check_int

APPLICATION_ID: Final = 0x414F5350  # "AOSP"
FORMAT_VERSION: Final = 1
STORE_KIND: Final = b"aos-persistence/kv"
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")
ALONE_AFTER_CONFLICTS: Final = 2
"""Read conflicts in a row after which a transaction's next attempt runs alone
(``Transaction.retry_alone``). The first retry backs off as FoundationDB's client does: a
long transaction (a drain that lost a read) would otherwise hold every writer up while
it reruns; a transaction that keeps losing then wins, so none starves."""
MAX_BUSY_TIMEOUT: Final = (2**31 - 1) / 1000  # PRAGMA busy_timeout takes a 32-bit millisecond count
PAGE_SIZE: Final = 8192  # of every store this engine creates (an existing one keeps its own)
MIN_DATABASE_BYTES: Final = 512  # SQLite's smallest page: a database file holds at least one
_PAGE: Final = 512  # rows fetched per range-scan statement


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
_COUNTER: Final = "SELECT value FROM meta WHERE name = 'commit_version'"


class SqliteTransaction(BufferedTransaction):
    """A transaction of :class:`SqliteEngine` (see the module docstring for the protocol)."""

    def __init__(self, engine: SqliteEngine) -> None:
        super().__init__()
        self._engine = engine
        self._conn: sqlite3.Connection | None = None
        self._read_version: int | None = None
        self._reading = False
        # Non-snapshot reads to validate at commit: (begin, end, committed rows seen).
        self._reads: list[tuple[bytes, bytes, list[tuple[bytes, bytes]]]] = []
        self._first_page = _PAGE  # rows the next range read's first statement fetches
        self._relaxed = False  # commit without its own sync (relax_durability)
        self._conflicts = 0  # read conflicts of the attempts before this one, in a row
        self._next_conflicts = 0  # the next attempt's (on_error)
        self._grouped = False  # run by a group commit, on its connection (GroupCommit)

    # ------------------------------------------------------------ read snapshot

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._engine._acquire()
        return self._conn

    def _snapshot(self) -> sqlite3.Connection:
        """The connection, inside the read transaction (its WAL snapshot starts with the
        first read)."""
        conn = self._connection()
        if not self._reading:
            try:
                conn.execute("BEGIN")
            except sqlite3.Error as exc:
                raise sqlite_error(exc, "begin read") from None
            self._reading = True
        return conn

    def on_error(self, error: EngineError) -> Future[kv.Transaction]:
        conflicts = self._conflicts + 1 if error.read_conflict else 0
        if conflicts < ALONE_AFTER_CONFLICTS:  # back off, as FoundationDB's client does
            self._next_conflicts = conflicts  # carried by _fresh
            return super().on_error(error)
        # no backoff: the next attempt runs alone, where it cannot conflict again
        nxt = self._fresh()
        nxt.backoff = self.backoff
        nxt.retry_alone = True
        nxt._conflicts = conflicts
        return Ready(nxt)

    def get_read_version(self) -> Future[int]:
        return settled(self._version)

    def _version(self) -> int:
        if self._read_version is None:
            try:
                row = self._snapshot().execute(_COUNTER).fetchone()
            except sqlite3.Error as exc:
                raise sqlite_error(exc, "read version") from None
            self._read_version = int(row[0])
        return self._read_version

    def _base_get(self, key: bytes) -> bytes | None:
        try:
            row = self._snapshot().execute("SELECT value FROM kv WHERE key = ?", (key,))
            row = row.fetchone()
        except sqlite3.Error as exc:
            raise sqlite_error(exc, "get") from None
        return None if row is None else _blob(key, row[0])

    def _base_get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes | None]:
        found: dict[bytes, bytes | None] = dict.fromkeys(keys)
        unique = list(found)
        try:
            conn = self._snapshot()
            for start in range(0, len(unique), _PAGE):
                part = unique[start : start + _PAGE]
                marks = ",".join("?" * len(part))
                rows = conn.execute(f"SELECT key, value FROM kv WHERE key IN ({marks})", part)
                found.update((bytes(k), _blob(k, v)) for k, v in rows)
        except sqlite3.Error as exc:
            raise sqlite_error(exc, "get") from None
        return found

    def read_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        # A limit sizes the first statement, so that reading the first few rows of a long
        # range (a call-record sweep) fetches only those, and a page of journal is one
        # statement; rows the write buffer hides are made up by the following pages.
        self._first_page = limit if type(limit) is int and limit > 0 else _PAGE
        try:
            return super().read_range(begin, end, limit=limit, reverse=reverse, snapshot=snapshot)
        finally:
            self._first_page = _PAGE

    def _base_range(self, begin: bytes, end: bytes, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        return _scan(self._snapshot(), begin, end, reverse, self._first_page)

    def _note_read(self, begin: bytes, end: bytes, rows: list[tuple[bytes, bytes]] | None) -> None:
        if rows is None:  # a declared conflict range: remember what it holds now
            rows = list(_scan(self._snapshot(), begin, end, False))
        self._reads.append((begin, end, rows))

    # ------------------------------------------------------------ commit

    def _commit(self) -> bytes | None:
        if self._grouped:  # a body that a group commit runs committing its own transaction
            raise fdb_errors.engine_error(
                fdb_errors.USED_DURING_COMMIT, "commit() inside a body: kv.run commits it"
            )
        try:
            if not self.buffer.has_writes():
                return None
            return self._write(self._connection())
        finally:
            self._close()

    def _write(self, conn: sqlite3.Connection) -> bytes | None:
        queue = self._engine._writers
        if getattr(GROUP_BODY, "locked", None) is queue:
            # This thread runs a body for a group commit whose connection holds the store's
            # write lock: this commit would wait for it until busy_timeout, every attempt.
            raise fdb_errors.engine_error(
                fdb_errors.CLIENT_INVALID_OPERATION,
                "a transaction committed inside a body run alone, after another attempt of "
                "its group commit wrote: a body run alone must not commit other transactions "
                "of its store",
            )
        deadline = time.monotonic() + self._engine.busy_timeout
        if self._reading and conn.in_transaction:
            with queue.turn(deadline) as granted:
                if granted:
                    # Fast path: upgrade the read transaction in place. SQLite allows it
                    # only while the snapshot is still the newest, i.e. when nothing
                    # committed since our reads, so success needs no validation. Otherwise
                    # it refuses (SQLITE_BUSY_SNAPSHOT; SQLITE_BUSY while a writer that does
                    # not queue holds the lock) and we validate under the lock.
                    try:
                        return self._apply(conn)
                    except sqlite3.OperationalError as exc:
                        if not is_busy(exc):
                            raise sqlite_error(exc, "commit") from None
                    _rollback(conn)
                    return self._validated(conn, deadline)
        _rollback(conn)  # wait without a snapshot (see the module docstring)
        with queue.turn(deadline, refused="begin write", timeout=self._engine.busy_timeout):
            return self._validated(conn, deadline)

    def _validated(self, conn: sqlite3.Connection, deadline: float) -> bytes | None:
        """Take SQLite's write lock, check that every read still holds (else 1020, nothing
        applied) and apply."""
        try:
            self._begin_write(conn, deadline)
        except sqlite3.Error as exc:
            raise sqlite_error(exc, "begin write") from None
        try:
            for begin, end, seen in self._reads:
                if list(_scan(conn, begin, end, False)) != seen:
                    raise fdb_errors.engine_error(
                        fdb_errors.NOT_COMMITTED,
                        "read conflict: data read by this transaction changed",
                        read_conflict=True,
                    )
            return self._apply(conn)
        except sqlite3.Error as exc:
            raise sqlite_error(exc, "commit") from None

    def _begin_write(self, conn: sqlite3.Connection, deadline: float) -> None:
        """``BEGIN IMMEDIATE``, polling the write lock every ``WRITE_POLL`` seconds at first
        (doubling up to ``MAX_WRITE_POLL``) until ``deadline``: the lock is free at once
        unless a writer that does not queue holds it. SQLite's own busy handler sleeps 1, 2,
        5, 10 ... ms between tries: a writer behind a 0.5 ms transaction would wait 1 ms or
        more."""
        pause = WRITE_POLL
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    left = deadline - time.monotonic()
                    if not is_busy(exc) or left <= 0:
                        raise
                time.sleep(min(pause, left))
                pause = min(2 * pause, MAX_WRITE_POLL)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self._engine.busy_timeout * 1000)}")

    def _apply(self, conn: sqlite3.Connection) -> bytes | None:
        """Apply the buffer and commit, inside a write transaction (taken by the first
        write statement when upgrading); the versionstamp, if one was needed."""
        stamp = self._write_buffer(conn)
        self._engine.check_same_file()
        conn.execute("COMMIT")
        return stamp

    def _write_buffer(self, conn: sqlite3.Connection) -> bytes | None:
        """Write the buffer into ``conn``'s transaction (the first write statement takes
        the write lock when upgrading), without committing. Only transactions that need a
        versionstamp touch the commit counter, so plain writes change one B-tree page fewer;
        those that do take the next commit version."""
        stamp = None
        if self.buffer.needs_stamp() or self.stamp_requested:
            version = int(conn.execute(_COUNTER).fetchone()[0]) + 1
            conn.execute("UPDATE meta SET value = ? WHERE name = 'commit_version'", (version,))
            stamp = version.to_bytes(8, "big") + b"\x00\x00"
        for begin, end in self.buffer.cleared_ranges():
            conn.execute("DELETE FROM kv WHERE key >= ? AND key < ?", (begin, end))
        upserts: list[tuple[bytes, bytes]] = []
        deletes: list[tuple[bytes]] = []

        def read_committed(key: bytes) -> bytes | None:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            return None if row is None else _blob(key, row[0])

        for key, value in self.buffer.final_writes(read_committed, stamp or b""):
            if value is None:
                deletes.append((key,))
            else:
                upserts.append((key, value))
        if deletes:
            conn.executemany("DELETE FROM kv WHERE key = ?", deletes)
        if upserts:
            conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", upserts)
        return stamp

    def run_in_group(
        self, conn: sqlite3.Connection, body: Callable[[kv.Transaction], object], locked: bool
    ) -> tuple[object, bytes | None]:
        """For a group commit: run ``body`` on ``conn`` (the group's connection, held under
        the writer queue, its transaction open or opened by the first read; ``locked`` if it
        holds the write lock) and write the buffer into it, uncommitted. The body's result
        and the versionstamp the group's commit gives (the next commit version, if one is
        needed)."""
        self._conn, self._reading, self._grouped = conn, conn.in_transaction, True
        try:
            GROUP_BODY.locked = self._engine._writers if locked else None
            try:
                result = body(self)
            finally:
                GROUP_BODY.locked = None
            self._begin_commit()
            try:
                stamp = None
                if self.buffer.has_writes():
                    if not conn.in_transaction:  # else each statement would commit on its own
                        conn.execute("BEGIN")
                    stamp = self._write_buffer(conn)
            except sqlite3.Error as exc:
                error = sqlite_error(exc, "commit")
                self._fail(error)
                raise error from None
            return result, stamp
        finally:
            self._conn, self._reading = None, False  # the connection stays the group's

    def relax_durability(self) -> None:
        """Commit with ``synchronous=NORMAL`` (WAL: the commit is not synced; the next FULL
        commit's sync of the log covers it, frames being appended in order). SQLite fixes
        the level outside a transaction: call it before the transaction's first read."""
        if self._relaxed or self._grouped or self._engine.synchronous not in ("FULL", "EXTRA"):
            return  # (a group commits with the engine's durability)
        conn = self._connection()
        if conn.in_transaction:
            raise ValueError("relax_durability must come before the transaction's first read")
        conn.execute("PRAGMA synchronous = NORMAL")
        self._relaxed = True

    def _size_limit(self) -> int:
        return self._engine.size_limit

    def _cached_read_version(self) -> int | None:
        return self._read_version

    def _fresh(self) -> SqliteTransaction:
        self._close()
        nxt = SqliteTransaction(self._engine)
        nxt._conflicts = self._next_conflicts
        return nxt

    def _close(self) -> None:
        # Releasing the connection rolls back its read transaction: a commit after this one
        # must take the slow path, which validates every read (never the in-place upgrade).
        self._reading = False
        if self._grouped:  # the connection is its group commit's, never released here
            self._conn = None
            return
        conn, self._conn = self._conn, None
        if conn is not None and self._relaxed:
            self._relaxed = False
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                conn.execute(f"PRAGMA synchronous = {self._engine.synchronous}")
            except sqlite3.Error:
                conn.close()  # never back in the pool at the relaxed level
                return
        if conn is not None:
            self._engine._release(conn)  # rolls back whatever was not committed

    def __del__(self) -> None:
        # An abandoned transaction must give back its connection and WAL snapshot.
        with contextlib.suppress(Exception):
            self._close()


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


def _rollback(conn: sqlite3.Connection) -> None:
    """End the connection's transaction, if any, with the engine's typed errors."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise sqlite_error(exc, "commit") from None


def _blob(key: bytes, value: object) -> bytes:
    """A value read from the ``kv`` table, where the engine writes only BLOBs: another
    type (a row altered outside the engine) is ``CorruptRecord`` naming the key, never
    handed on (``bytes()`` of a TEXT value raised ``TypeError``, of an INTEGER made that
    many zero bytes)."""
    if type(value) is bytes:
        return value
    kind = {str: "TEXT", int: "INTEGER", float: "REAL"}.get(type(value), type(value).__name__)
    raise CorruptRecord(f"row {key.hex()}", f"its value is an SQLite {kind}, not a BLOB")


def _scan(
    conn: sqlite3.Connection, begin: bytes, end: bytes, reverse: bool, first_page: int = _PAGE
) -> Iterator[tuple[bytes, bytes]]:
    """Rows of ``[begin, end)`` in key order, fetched a page of rows per statement."""
    return itertools.chain.from_iterable(_pages(conn, begin, end, reverse, first_page))


def _pages(
    conn: sqlite3.Connection, begin: bytes, end: bytes, reverse: bool, first_page: int
) -> Iterator[list[tuple[bytes, bytes]]]:
    """Pages of ``[begin, end)``: ``first_page`` rows, then up to ``_PAGE`` per statement.
    The rows are ``sqlite3``'s own tuples, used as they are once their values are checked to
    be BLOBs (``bytes``), which is all the engine writes (:func:`_blob`; keys of another type
    sort outside every range of BLOBs)."""
    lo, hi = begin, end
    page = first_page
    if reverse:
        sql = "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key DESC LIMIT ?"
    else:
        sql = "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key LIMIT ?"
    while True:
        try:
            rows: list[tuple[bytes, bytes]] = conn.execute(sql, (lo, hi, page)).fetchall()
        except sqlite3.Error as exc:
            raise sqlite_error(exc, "range read") from None
        if not all(type(value) is bytes for _, value in rows):
            for key, value in rows:
                _blob(key, value)
        yield rows
        if len(rows) < page:
            return
        page = _PAGE
        if reverse:
            hi = rows[-1][0]
        else:
            lo = rows[-1][0] + b"\x00"
