"""The memory engine: an in-process model of FoundationDB's transaction semantics.

It is the reference engine and the test bed, so it behaves like FoundationDB rather than
like a dict:

* **MVCC.** Each key keeps its recent versions. A transaction reads at the read version it
  takes at its first read (the latest committed version), so it sees one consistent
  snapshot however long other transactions keep committing.
* **Optimistic conflicts.** Non-snapshot reads record read-conflict ranges. At commit, the
  resolver compares them with the write-conflict ranges of every transaction that committed
  after the read version; any overlap fails the commit with 1020 and applies nothing.
* **Versionstamps** are assigned at commit in commit order: 8-byte big-endian commit version
  and 2-byte batch order (always 0: one transaction per version here).
* **The five-second window.** History older than :data:`persistence.kv.MAX_TRANSACTION_SECONDS`
  is discarded; a transaction reading or committing past it fails with 1007.
* **Limits** of :mod:`persistence.kv` (2101/2102/2103) are enforced by the write buffer.

Faults (1020/1021/1007 at commit, crashes at named points) are injected by wrapping the
engine in :class:`backends.kv.faults.FaultyEngine`. Thread-safe: one lock guards the store.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from backends.kv.buffered import BufferedTransaction
from persistence import fdb_errors, kv
from persistence.futures import Future, Ready

_CHUNK = 256


def _overlaps(a: list[tuple[bytes, bytes]], b: list[tuple[bytes, bytes]]) -> bool:
    return any(ab < be and bb < ae for ab, ae in a for bb, be in b)


def _version_of(entry: tuple[int, bytes | None]) -> int:
    return entry[0]


class MemoryEngine(kv.Engine):
    """FoundationDB semantics in one process's memory."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        size_limit: int = kv.MAX_TRANSACTION_SIZE,
    ) -> None:
        self.url = "memory://"
        self.size_limit = size_limit
        self._clock = clock
        self._lock = threading.Lock()
        self._committed = threading.Condition(self._lock)
        self._keys: list[bytes] = []  # sorted; every key with retained history
        self._history: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self._version = 0
        self._floor = 0  # versions at or below this may be compacted: reads below fail 1007
        # each commit in the window: version, time, write conflict ranges, keys it wrote
        self._commits: deque[tuple[int, float, list[tuple[bytes, bytes]], list[bytes]]] = deque()
        self._written: list[bytes] = []  # keys the commit being applied wrote
        self.commit_count = 0

    def create_transaction(self) -> MemoryTransaction:
        return MemoryTransaction(self)

    # ------------------------------------------------------------ snapshot reads

    def _read_version(self) -> int:
        with self._lock:
            return self._version

    @staticmethod
    def _visible(history: list[tuple[int, bytes | None]], version: int) -> bytes | None:
        for at, value in reversed(history):
            if at <= version:
                return value
        return None

    def _get(self, key: bytes, version: int) -> bytes | None:
        with self._lock:
            self._check_version(version)
            history = self._history.get(key)
            return None if history is None else self._visible(history, version)

    def _scan(
        self, begin: bytes, end: bytes, reverse: bool, version: int
    ) -> Iterator[tuple[bytes, bytes]]:
        """Committed rows of ``[begin, end)`` at ``version``, fetched a chunk at a time."""
        cursor_lo, cursor_hi = begin, end
        while True:
            with self._lock:
                self._check_version(version)
                lo = bisect.bisect_left(self._keys, cursor_lo)
                hi = bisect.bisect_left(self._keys, cursor_hi)
                window = (
                    self._keys[max(lo, hi - _CHUNK) : hi]
                    if reverse
                    else self._keys[lo : min(hi, lo + _CHUNK)]
                )
                if reverse:
                    window.reverse()
                rows = []
                for key in window:
                    value = self._visible(self._history[key], version)
                    if value is not None:
                        rows.append((key, value))
            yield from rows
            if len(window) < _CHUNK:
                return
            if reverse:
                cursor_hi = window[-1]
            else:
                cursor_lo = window[-1] + b"\x00"

    def _check_version(self, version: int) -> None:
        if version < self._floor:
            raise fdb_errors.engine_error(
                fdb_errors.TRANSACTION_TOO_OLD, f"read version {version} is below the MVCC window"
            )

    # ------------------------------------------------------------ commit

    def _commit(self, tr: MemoryTransaction) -> bytes | None:
        buffer = tr.buffer
        if not buffer.has_writes():
            # FoundationDB commits a read-only transaction at once, without a conflict
            # check or a version: its reads were never validated, and nothing is applied.
            return None
        with self._lock:
            now = self._clock()
            self._expire(now)
            read_version = tr.read_version
            if read_version is not None:
                if read_version < self._floor or now - tr.started > kv.MAX_TRANSACTION_SECONDS:
                    raise fdb_errors.engine_error(
                        fdb_errors.TRANSACTION_TOO_OLD, "transaction older than 5 s"
                    )
                if tr.read_ranges:
                    for version, _, writes, _ in reversed(self._commits):
                        if version <= read_version:
                            break
                        if _overlaps(tr.read_ranges, writes):
                            raise fdb_errors.engine_error(
                                fdb_errors.NOT_COMMITTED,
                                f"read conflict with commit at version {version}",
                                read_conflict=True,
                            )
            version = self._version + 1
            stamp = version.to_bytes(8, "big") + b"\x00\x00"
            write_ranges = buffer.write_conflict_ranges()
            for begin, end in buffer.cleared_ranges():
                lo = bisect.bisect_left(self._keys, begin)
                hi = bisect.bisect_left(self._keys, end)
                for key in self._keys[lo:hi]:
                    if self._visible(self._history[key], version) is not None:
                        self._put(key, version, None)
            for key, value in list(buffer.final_writes(self._latest, stamp)):
                self._put(key, version, value)
            self._version = version
            self._commits.append((version, now, write_ranges, self._written))
            self._written = []
            self.commit_count += 1
            self._committed.notify_all()
            return stamp

    def wait_changed(self, key: bytes, seen: bytes | None, timeout: float) -> None:
        """Wait on the engine's commits (no polling) until ``key`` is not ``seen``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._latest(key) == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._committed.wait(left)

    def _latest(self, key: bytes) -> bytes | None:
        history = self._history.get(key)
        return None if history is None else history[-1][1]

    def _put(self, key: bytes, version: int, value: bytes | None) -> None:
        history = self._history.get(key)
        if history is None:
            if value is None:
                return
            bisect.insort(self._keys, key)
            self._history[key] = [(version, value)]
        elif history[-1][0] == version:
            history[-1] = (version, value)
        else:
            history.append((version, value))
        self._written.append(key)

    def _expire(self, now: float) -> None:
        """Drop commits that left the five-second window, and the history of the keys they
        wrote that no read version in the window can see."""
        horizon = now - kv.MAX_TRANSACTION_SECONDS
        expired: set[bytes] = set()
        while self._commits and self._commits[0][1] < horizon:
            version, _, _, keys = self._commits.popleft()
            self._floor = max(self._floor, version)
            expired.update(keys)
        floor = self._floor
        for key in expired:
            history = self._history.get(key)
            if history is None:
                continue
            # versions ascend: those at or below the floor are a prefix; keep its last
            # entry (the value visible at the floor) unless it is a deletion
            older = bisect.bisect_right(history, floor, key=_version_of)
            if older and history[older - 1][1] is None:
                del history[:older]
            elif older > 1:
                del history[: older - 1]
            if not history:
                del self._history[key]
                self._keys.pop(bisect.bisect_left(self._keys, key))

    def key_count(self) -> int:
        """Number of live keys at the latest version (for tests and inspection)."""
        with self._lock:
            return sum(1 for h in self._history.values() if h[-1][1] is not None)


class MemoryTransaction(BufferedTransaction):
    """A transaction of :class:`MemoryEngine`."""

    def __init__(self, engine: MemoryEngine) -> None:
        super().__init__()
        self._engine = engine
        self.read_version: int | None = None
        self.started = engine._clock()
        self.read_ranges: list[tuple[bytes, bytes]] = []

    def get_read_version(self) -> Future[int]:
        return Ready(self._version())

    def _version(self) -> int:
        if self.read_version is None:
            self.read_version = self._engine._read_version()
        return self.read_version

    def _check_age(self) -> None:
        if self._engine._clock() - self.started > kv.MAX_TRANSACTION_SECONDS:
            raise fdb_errors.engine_error(
                fdb_errors.TRANSACTION_TOO_OLD, "transaction older than 5 s"
            )

    def _base_get(self, key: bytes) -> bytes | None:
        self._check_age()
        return self._engine._get(key, self._version())

    def _base_range(self, begin: bytes, end: bytes, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        self._check_age()
        return self._engine._scan(begin, end, reverse, self._version())

    def _note_read(self, begin: bytes, end: bytes, rows: list[tuple[bytes, bytes]] | None) -> None:
        del rows  # the resolver works on ranges, not values
        self.read_ranges.append((begin, end))

    def _commit(self) -> bytes | None:
        return self._engine._commit(self)

    def _fresh(self) -> MemoryTransaction:
        return MemoryTransaction(self._engine)

    def _size_limit(self) -> int:
        return self._engine.size_limit

    def _cached_read_version(self) -> int | None:
        return self.read_version
