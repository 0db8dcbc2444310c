"""The SQLite engine's writer queue: writers of a store queue outside SQLite.

A commit first takes the store's writer queue: a lock of the process's threads, then an
``flock`` on the file ``<store>-writer`` beside the database, polled every
:data:`WRITE_POLL` seconds at first (doubling to :data:`MAX_WRITE_POLL`) until the
engine's ``busy_timeout``. Only then does it take SQLite's write lock, which is therefore
free at once unless a writer that does not queue (another program) holds it. Why (see
:mod:`backends.kv.sqlite`): a writer waiting on SQLite's lock with its read snapshot open
keeps the WAL from restarting after a checkpoint. One queue per store file in a process,
shared by every engine open on it; a fork's child starts with queues of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Final

from persistence import fdb_errors

WRITE_POLL: Final = 50e-6
"""Seconds between the first tries of a busy lock (the queue's, or SQLite's write lock)."""
MAX_WRITE_POLL: Final = 1e-3
"""The longest pause between two tries (the pause doubles up to it)."""


class Turn:
    """A turn of a :class:`WriterQueue` as a ``with`` block (see :meth:`WriterQueue.turn`;
    a class rather than a generator: every commit takes one or two)."""

    __slots__ = ("_deadline", "_granted", "_queue", "_refused", "_timeout")

    def __init__(
        self, queue: WriterQueue, deadline: float, refused: str | None, timeout: float
    ) -> None:
        self._queue = queue
        self._deadline = deadline
        self._refused = refused
        self._timeout = timeout
        self._granted = False

    def __enter__(self) -> bool:
        if self._granted:
            raise RuntimeError("a turn of the writer queue is entered once")
        refused = self._refused
        self._granted = self._queue._acquire(self._deadline, wait=refused is not None)
        if refused is not None and not self._granted:
            raise fdb_errors.engine_error(
                fdb_errors.NOT_COMMITTED,
                f"{refused}: the writer queue was not granted within busy_timeout "
                f"({self._timeout} s)",
            )
        return self._granted

    def __exit__(self, *exc: object) -> None:
        if self._granted:
            self._granted = False
            self._queue._release()


class WriterQueue:
    """The writer queue of one store in this process (see the module docstring), shared by
    every engine open on it: a lock of the process's threads, then an exclusive ``flock``
    on ``path``. The thread holding it may take it again (a commit inside
    :meth:`~backends.kv.sqlite.SqliteEngine.alone`, through any engine on the store). A
    fork's child starts with a queue of its own (:func:`_after_fork`): the parent's open
    file and its lock stay the parent's."""

    @classmethod
    def of(cls, database: Path) -> WriterQueue:
        """The queue of the store in the file ``database`` (which exists), made on first
        use: found by the file's identity, so that every path to it (symlinks, bind
        mounts) gives the one queue, on the file beside its real path."""
        real = database.resolve()
        status = real.stat()
        key = (status.st_dev, status.st_ino)
        with _QUEUES_LOCK:
            queue = _SHARED.get(key)
            if queue is None:
                queue = _SHARED[key] = cls(Path(f"{real}-writer"))
            queue._users += 1
            queue._closing = False
            return queue

    def __init__(self, path: Path) -> None:
        self.path = path
        self._threads = threading.Lock()
        self._fd: int | None = None
        self._locked = False  # the flock is held (under _threads)
        self._owner: int | None = None  # the thread holding the queue
        self._depth = 0  # how many turns the owner holds
        self._users = 0  # engines open on the store (under _QUEUES_LOCK)
        self._closing = False  # the last of them closed: close the file when free
        _QUEUES.add(self)

    def turn(self, deadline: float, *, refused: str | None = None, timeout: float = 0.0) -> Turn:
        """The queue for a ``with`` block, which gets whether it was granted: only if free
        now; or with ``refused``, waited for until ``deadline`` and else 1020 (naming
        ``refused``, what needed it, and the ``timeout`` that set the deadline)."""
        return Turn(self, deadline, refused, timeout)

    def held_here(self) -> bool:
        """Whether the calling thread holds the queue."""
        return self._owner == threading.get_ident()

    def _acquire(self, deadline: float, wait: bool) -> bool:
        me = threading.get_ident()
        if self._owner == me:  # only the owner ever sees its own id here
            self._depth += 1
            return True
        if not self._threads.acquire(timeout=max(0.0, deadline - time.monotonic()) if wait else 0):
            return False
        try:
            fd = self._file()
            pause = WRITE_POLL
            while fd is not None:
                self._locked = True  # before the call: an interrupt after it must unlock
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    self._locked = False
                except OSError:  # no locks on this file system: SQLite's lock alone
                    self._locked = False
                    break
                left = deadline - time.monotonic()
                if not wait or left <= 0:
                    self._threads.release()
                    return False
                time.sleep(min(pause, left))
                pause = min(2 * pause, MAX_WRITE_POLL)
            self._owner, self._depth = me, 1
            return True
        except BaseException:
            self._give_back()
            raise

    def _release(self) -> None:
        if self._depth > 1:
            self._depth -= 1
            return
        if self._depth == 0:  # a turn taken before a fork, left in the child: not its own
            return
        self._owner, self._depth = None, 0
        self._give_back()

    def _give_back(self) -> None:
        """Unlock the ``flock`` if held, close the file if the last engine closed, and
        release the thread lock."""
        try:
            if self._locked and self._fd is not None:
                self._locked = False
                with contextlib.suppress(OSError):  # unlocking an unheld lock is harmless
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
            if self._closing:
                self._close_file()
        finally:
            self._threads.release()

    def close(self) -> None:
        """An engine on the store is closed: once every one is, the queue's file is closed
        -- now if the queue is free, else by its holder's release (never waited for). A
        commit after that opens it again."""
        with _QUEUES_LOCK:
            self._users -= 1
            if self._users > 0:
                return
            self._closing = True
        if self._threads.acquire(blocking=False):
            try:
                self._close_file()
            finally:
                self._threads.release()

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self._close_file()

    def _file(self) -> int | None:
        """The queue file's descriptor (``None``: it cannot be opened, e.g. a read-only
        directory; a read-only queue file is opened read-only: ``flock`` needs no more)."""
        if self._fd is None:
            with contextlib.suppress(OSError):
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if self._fd is None:
                with contextlib.suppress(OSError):
                    self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        return self._fd

    def _forked(self) -> None:
        """In a fork's child: a lock of its own (a parent's thread may have held this one),
        the inherited descriptor closed (the parent's lock lives on its own descriptor).
        A child forked inside a turn holds none: it queues behind its parent, and leaving
        the inherited block gives nothing back."""
        self._threads = threading.Lock()
        self._locked = False
        self._owner, self._depth = None, 0
        self._close_file()


_QUEUES: Final[weakref.WeakSet[WriterQueue]] = weakref.WeakSet()
_SHARED: Final[weakref.WeakValueDictionary[tuple[int, int], WriterQueue]] = (
    weakref.WeakValueDictionary()
)
"""The queue of each store open in this process, by its database file's device and inode."""
_QUEUES_LOCK = threading.Lock()  # replaced in a fork's child (_after_fork)


def _after_fork() -> None:
    """In a fork's child, before anything else runs: fresh locks for the registry and every
    queue of the parent (a lock held by another parent thread would never be released)."""
    global _QUEUES_LOCK
    _QUEUES_LOCK = threading.Lock()
    for queue in list(_QUEUES):
        queue._forked()


os.register_at_fork(after_in_child=_after_fork)
