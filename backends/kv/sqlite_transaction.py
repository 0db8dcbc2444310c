"""The SQLite engine's transactions (:class:`SqliteTransaction`; the protocol is described in
:mod:`backends.kv.sqlite`): reads in one WAL snapshot, buffered writes, and a commit that
upgrades the read transaction in place or, under the write lock, validates every read first.
What a transaction needs of its engine is stated here (:class:`TransactionEngine`).
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Protocol

from backends.kv.buffered import BufferedTransaction
from backends.kv.sqlite_errors import is_busy, sqlite_error
from backends.kv.sqlite_group import GROUP_BODY, GroupEngine
from backends.kv.sqlite_writers import MAX_WRITE_POLL, WRITE_POLL
from persistence import fdb_errors, kv
from persistence.errors import CorruptRecord, EngineError
from persistence.futures import Future, Ready, settled

ALONE_AFTER_CONFLICTS: Final = 2
"""Read conflicts in a row after which a transaction's next attempt runs alone
(``Transaction.retry_alone``). The first retry backs off as FoundationDB's client does: a
long transaction (a drain that lost a read) would otherwise hold every writer up while
it reruns; a transaction that keeps losing then wins, so none starves."""
_PAGE: Final = 512  # rows fetched per range-scan statement
_COUNTER: Final = "SELECT value FROM meta WHERE name = 'commit_version'"


class TransactionEngine(GroupEngine, Protocol):
    """What a transaction uses of its engine: what a group commit does, and the engine's
    durability level and transaction size limit."""

    @property
    def synchronous(self) -> str: ...

    @property
    def size_limit(self) -> int: ...


class SqliteTransaction(BufferedTransaction):
    """A transaction of :class:`~backends.kv.sqlite.SqliteEngine` (see :mod:`backends.kv.sqlite`
    for the protocol)."""

    def __init__(self, engine: TransactionEngine) -> None:
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
                rows = conn.execute(
                    f"SELECT key, value FROM kv WHERE key IN ({marks})", part
                ).fetchall()
                # keys are BLOBs (bytes): equal to a parameter, which is; values are checked
                if not all(type(value) is bytes for _, value in rows):
                    for key, value in rows:
                        _blob(key, value)
                found.update(rows)
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
        _rollback(conn)  # wait without a snapshot (see :mod:`backends.kv.sqlite`)
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
