"""Round trips per call, counted from the shape of the protocol, for any engine.

FoundationDB charges a transaction one round trip for its read version (at its first read,
or at the commit of a transaction that wrote without reading), one per *wave* of reads --
the reads issued before the protocol waits for any of them -- and one for a commit that
writes. :class:`CountingEngine` wraps an engine and counts exactly
that, from the order in which a protocol issues reads and waits for them, not from timing:
the count is the same on every engine and every run, so a test can fail when a protocol
gains a round trip, and ``aosp bench fdb`` prints it beside the figures. A range read the
cluster answers in several batches costs more than this counts (the protocols' ranges on
the hot paths fit one batch: their limits are small, and a limited read asks for every row
at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TypeVar

from persistence import kv
from persistence.errors import EngineError
from persistence.futures import Future, Mapped

T = TypeVar("T")


@dataclass(slots=True)
class Tally:
    """What the transactions counted so far did: their round trips (read versions, waves of
    reads, writing commits) and how many transactions there were."""

    transactions: int = 0
    read_versions: int = 0
    waves: int = 0
    commits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def round_trips(self) -> int:
        """Read versions + waves of reads + writing commits."""
        return self.read_versions + self.waves + self.commits

    def take(self) -> Tally:
        """The counts so far, and start again from zero."""
        with self.lock:
            out = Tally(self.transactions, self.read_versions, self.waves, self.commits)
            self.transactions = self.read_versions = self.waves = self.commits = 0
        return out


class _Counted(Future[T]):
    """A read's future: the first time it is waited for, a new wave begins if it was issued
    after the last wave began."""

    __slots__ = ("_index", "_inner", "_seen", "_tr")

    def __init__(self, tr: CountingTransaction, inner: Future[T], index: int) -> None:
        self._tr = tr
        self._inner = inner
        self._index = index
        self._seen = False

    def _observe(self) -> None:
        if not self._seen:
            self._seen = True
            self._tr._waited(self._index)

    def poll(self) -> bool:
        self._observe()
        return self._inner.poll()

    def result(self) -> T:
        self._observe()
        return self._inner.result()

    def block(self) -> None:
        self._inner.block()

    def notify(self, callback: Callable[[], object]) -> None:
        self._inner.notify(callback)


class CountingTransaction(kv.Transaction):
    """Delegates to a transaction of the inner engine, counting as the module says."""

    def __init__(self, inner: kv.Transaction, tally: Tally) -> None:
        self._inner = inner
        self._tally = tally
        self._issued = 0  # reads issued so far
        self._boundary = 0  # reads issued when the last wave began
        self._writes = False
        with tally.lock:
            tally.transactions += 1

    def _read(self, future: Future[T]) -> Future[T]:
        if self._issued == 0:
            with self._tally.lock:
                self._tally.read_versions += 1
        self._issued += 1
        return _Counted(self, future, self._issued)

    def _waited(self, index: int) -> None:
        if index > self._boundary:
            self._boundary = self._issued
            with self._tally.lock:
                self._tally.waves += 1

    def get(self, key: bytes, *, snapshot: bool = False) -> Future[bytes | None]:
        return self._read(self._inner.get(key, snapshot=snapshot))

    def get_many(
        self, keys: Sequence[bytes], *, snapshot: bool = False
    ) -> Future[list[bytes | None]]:
        if not keys:  # nothing to ask the cluster
            return self._inner.get_many(keys, snapshot=snapshot)
        return self._read(self._inner.get_many(keys, snapshot=snapshot))

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> Future[list[tuple[bytes, bytes]]]:
        return self._read(
            self._inner.get_range(begin, end, limit=limit, reverse=reverse, snapshot=snapshot)
        )

    def get_read_version(self) -> Future[int]:
        return self._read(self._inner.get_read_version())

    def _write(self) -> None:
        self._writes = True

    def set(self, key: bytes, value: bytes) -> None:
        self._write()
        self._inner.set(key, value)

    def set_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self._write()
        self._inner.set_many(pairs)

    def clear(self, key: bytes) -> None:
        self._write()
        self._inner.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._write()
        self._inner.clear_range(begin, end)

    def add(self, key: bytes, param: bytes) -> None:
        self._write()
        self._inner.add(key, param)

    def compare_and_clear(self, key: bytes, value: bytes) -> None:
        self._write()
        self._inner.compare_and_clear(key, value)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._write()
        self._inner.set_versionstamped_key(key, value)

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        self._write()
        self._inner.set_versionstamped_value(key, value)

    def get_versionstamp(self) -> kv.VersionstampFuture:
        return self._inner.get_versionstamp()

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        self._inner.add_read_conflict_range(begin, end)

    def relax_durability(self) -> None:
        self._inner.relax_durability()

    def commit(self) -> Future[None]:
        if self._writes:
            with self._tally.lock:
                self._tally.commits += 1
                if self._issued == 0:  # a blind write still needs its read version
                    self._tally.read_versions += 1
        return self._inner.commit()

    def on_error(self, error: EngineError) -> Future[kv.Transaction]:
        return Mapped(self._inner.on_error(error), self._next)

    def _next(self, inner: kv.Transaction) -> kv.Transaction:
        nxt = CountingTransaction(inner, self._tally)
        nxt.retry_alone = inner.retry_alone
        return nxt


class CountingEngine(kv.Engine):
    """An engine whose transactions count their round trips in :attr:`tally`."""

    def __init__(self, inner: kv.Engine) -> None:
        self.inner = inner
        self.tally = Tally()
        self.url = inner.url
        self.retry_limit = inner.retry_limit
        self.size_limit = inner.size_limit
        self.max_retry_seconds = inner.max_retry_seconds
        self.commit_may_be_unknown = inner.commit_may_be_unknown
        self.writers_serialize = inner.writers_serialize
        self.blocking = inner.blocking
        self.versions_per_second = inner.versions_per_second

    def create_transaction(self) -> CountingTransaction:
        return CountingTransaction(self.inner.create_transaction(), self.tally)

    def is_retryable(self, error: EngineError) -> bool:
        return self.inner.is_retryable(error)

    def wait_changed(self, key: bytes, seen: bytes | None, timeout: float) -> None:
        self.inner.wait_changed(key, seen, timeout)

    def alone(self) -> AbstractContextManager[object]:
        return self.inner.alone()

    def close(self) -> None:
        self.inner.close()
