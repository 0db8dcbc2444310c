"""Read-your-writes buffering for engines that are not FoundationDB.

FoundationDB keeps a transaction's writes on the client until commit and layers them over
every read. The memory and SQLite engines do the same with :class:`WriteBuffer`: it records
writes, answers reads through the overlay, and hands the final mutations to the engine at
commit. It also enforces FoundationDB's size limits as writes arrive.

Versionstamped writes are resolved at commit and are not visible to reads in the same
transaction (FoundationDB makes them unreadable; here they are simply absent).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from persistence import kv

_SET: Final = 0
_CLEAR: Final = 1
_ADDS: Final = 2


@dataclass(slots=True)
class _Entry:
    """The transaction's view of one key: a value, a deletion, or atomic adds over the
    (unread) committed value."""

    kind: int
    value: bytes | None = None
    adds: list[bytes] = field(default_factory=list)

    def resolve(self, base: bytes | None) -> bytes | None:
        if self.kind == _SET:
            return self.value
        if self.kind == _CLEAR:
            return None
        for param in self.adds:
            base = kv.apply_add(base, param)
        return base


@dataclass(slots=True)
class VersionstampedWrite:
    """A write whose key or value receives the commit versionstamp at ``offset``."""

    in_key: bool
    key: bytes
    value: bytes
    offset: int

    def resolve(self, stamp: bytes) -> tuple[bytes, bytes]:
        """The final key and value for a 10-byte ``stamp``."""
        if self.in_key:
            return _splice(self.key, self.offset, stamp), self.value
        return self.key, _splice(self.value, self.offset, stamp)


def _splice(data: bytes, offset: int, stamp: bytes) -> bytes:
    return data[:offset] + stamp + data[offset + 10 :]


class WriteBuffer:
    """A transaction's uncommitted writes, in the order-insensitive form they commit in."""

    __slots__ = ("_cleared", "_entries", "size", "versionstamped")

    def __init__(self) -> None:
        self._entries: dict[bytes, _Entry] = {}
        self._cleared: list[tuple[bytes, bytes]] = []
        self.versionstamped: list[VersionstampedWrite] = []
        self.size = 0

    # ------------------------------------------------------------------ writes

    def _grow(self, nbytes: int) -> None:
        self.size += nbytes
        if self.size > kv.MAX_TRANSACTION_SIZE:
            raise kv.engine_error(
                kv.TRANSACTION_TOO_LARGE,
                f"transaction of {self.size} bytes > {kv.MAX_TRANSACTION_SIZE}",
            )

    def set(self, key: bytes, value: bytes) -> None:
        """Record ``key = value``."""
        kv.check_key(key)
        kv.check_value(value)
        self._grow(len(key) + len(value))
        self._entries[key] = _Entry(_SET, value)

    def clear(self, key: bytes) -> None:
        """Record the deletion of ``key``."""
        kv.check_key(key)
        self._grow(len(key))
        self._entries[key] = _Entry(_CLEAR)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Record the deletion of ``[begin, end)``."""
        if begin >= end:
            return
        self._grow(len(begin) + len(end))
        for key in [k for k in self._entries if begin <= k < end]:
            del self._entries[key]
        self._cleared.append((begin, end))

    def add(self, key: bytes, param: bytes) -> None:
        """Record an atomic little-endian add."""
        kv.check_key(key)
        kv.check_value(param)
        self._grow(len(key) + len(param))
        entry = self._entries.get(key)
        if entry is None:
            if self._is_cleared(key):
                self._entries[key] = _Entry(_SET, kv.apply_add(None, param))
            else:
                self._entries[key] = _Entry(_ADDS, adds=[param])
        elif entry.kind == _ADDS:
            entry.adds.append(param)
        else:
            self._entries[key] = _Entry(_SET, kv.apply_add(entry.resolve(None), param))

    def set_versionstamped(self, key: bytes, value: bytes, *, in_key: bool) -> None:
        """Record a versionstamped key (``in_key``) or value write (with offset suffix)."""
        try:
            if in_key:
                body, offset = kv.split_versionstamp_offset(key, "key")
                final_key, final_value = body, value
            else:
                final_value, offset = kv.split_versionstamp_offset(value, "value")
                final_key = key
        except ValueError as exc:
            raise kv.engine_error(kv.CLIENT_INVALID_OPERATION, str(exc)) from None
        kv.check_key(final_key)
        kv.check_value(final_value)
        self._grow(len(final_key) + len(final_value))
        self.versionstamped.append(VersionstampedWrite(in_key, final_key, final_value, offset))

    # ------------------------------------------------------------------ reads

    def _is_cleared(self, key: bytes) -> bool:
        return any(begin <= key < end for begin, end in self._cleared)

    def touches(self, begin: bytes, end: bytes) -> bool:
        """Whether any write of this buffer falls in ``[begin, end)`` (versionstamped
        writes excepted: reads never see them)."""
        return any(begin <= k < end for k in self._entries) or any(
            b < end and e > begin for b, e in self._cleared
        )

    def has_writes(self) -> bool:
        """Whether committing would change anything."""
        return bool(self._entries or self._cleared or self.versionstamped)

    def lookup(self, key: bytes, read_base: Callable[[bytes], bytes | None]) -> bytes | None:
        """The transaction's view of ``key``; ``read_base`` reads the committed snapshot."""
        entry = self._entries.get(key)
        if entry is not None and entry.kind != _ADDS:
            return entry.resolve(None)
        base = None if self._is_cleared(key) else read_base(key)
        return base if entry is None else entry.resolve(base)

    def merge_range(
        self,
        begin: bytes,
        end: bytes,
        reverse: bool,
        base: Iterator[tuple[bytes, bytes]],
    ) -> Iterator[tuple[bytes, bytes]]:
        """Overlay this buffer on ``base`` (committed rows of ``[begin, end)`` in scan
        order), yielding the transaction's view in the same order."""
        overlay = sorted((k for k in self._entries if begin <= k < end), reverse=reverse)
        cleared = [(b, e) for b, e in self._cleared if b < end and e > begin]

        def visible(key: bytes) -> bool:
            return not any(b <= key < e for b, e in cleared)

        def before(a: bytes, b: bytes) -> bool:
            return a > b if reverse else a < b

        pending = next(base, None)
        for okey in overlay:
            while pending is not None and before(pending[0], okey):
                if visible(pending[0]):
                    yield pending
                pending = next(base, None)
            base_value: bytes | None = None
            if pending is not None and pending[0] == okey:
                base_value = pending[1] if visible(okey) else None
                pending = next(base, None)
            value = self._entries[okey].resolve(base_value)
            if value is not None:
                yield okey, value
        while pending is not None:
            if visible(pending[0]):
                yield pending
            pending = next(base, None)

    # ------------------------------------------------------------------ commit

    def cleared_ranges(self) -> list[tuple[bytes, bytes]]:
        """Ranges to delete, applied before :meth:`final_writes`."""
        return list(self._cleared)

    def final_writes(
        self, read_committed: Callable[[bytes], bytes | None]
    ) -> Iterable[tuple[bytes, bytes | None]]:
        """``(key, value or None for delete)`` to apply after the cleared ranges.

        ``read_committed`` reads the value as of the commit, for atomic adds."""
        for key, entry in self._entries.items():
            if entry.kind == _ADDS:
                yield key, entry.resolve(read_committed(key))
            else:
                yield key, entry.resolve(None)

    def write_conflict_ranges(self, read_version: int) -> list[tuple[bytes, bytes]]:
        """The ranges this transaction writes, as FoundationDB's resolver sees them.

        A versionstamped key conflicts over every key it could become: from the key
        stamped with the read version to the key stamped with all ``0xff``.
        """
        ranges = list(self._cleared)
        ranges.extend((k, k + b"\x00") for k in self._entries)
        low = read_version.to_bytes(8, "big") + b"\x00\x00"
        for write in self.versionstamped:
            if write.in_key:
                lo = _splice(write.key, write.offset, low)
                hi = _splice(write.key, write.offset, b"\xff" * 10) + b"\x00"
                ranges.append((lo, hi))
            else:
                ranges.append((write.key, write.key + b"\x00"))
        return ranges


class BufferedFuture(kv.VersionstampFuture):
    """A versionstamp future resolved by the engine at commit."""

    __slots__ = ("_error", "_stamp")

    def __init__(self) -> None:
        self._stamp: bytes | None = None
        self._error: Exception | None = None

    def resolve(self, stamp: bytes | None, error: Exception | None = None) -> None:
        """Settle the future with a stamp or an error."""
        self._stamp, self._error = stamp, error

    def wait(self) -> bytes:
        if self._stamp is not None:
            return self._stamp
        if self._error is not None:
            raise self._error
        raise kv.engine_error(
            kv.USED_DURING_COMMIT, "versionstamp requested before the transaction committed"
        )


class BufferedTransaction(kv.Transaction):
    """The transaction glue shared by the memory and SQLite engines.

    Reads go through the :class:`WriteBuffer` overlay to the engine's committed snapshot
    (``_base_get``/``_base_range``); non-snapshot reads are reported to ``_note_read``
    with the conflict range and the committed rows seen inside it; ``commit`` hands the
    buffer to ``_commit``.
    """

    def __init__(self) -> None:
        self.buffer = WriteBuffer()
        self._future = BufferedFuture()
        self._done = False
        self.stamp_requested = False

    # ------------------------------------------------------------ engine hooks

    def _base_get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _base_range(self, begin: bytes, end: bytes, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def _note_read(self, begin: bytes, end: bytes, rows: list[tuple[bytes, bytes]] | None) -> None:
        """Record a read conflict range and the committed rows read inside it, in
        ascending key order (``None`` when the range was declared without being read)."""
        raise NotImplementedError

    def _commit(self) -> bytes | None:
        """Apply the buffer atomically; return the versionstamp (None if read-only)."""
        raise NotImplementedError

    # ------------------------------------------------------------ reads

    def _check_open(self) -> None:
        if self._done:
            raise kv.engine_error(kv.USED_DURING_COMMIT, "transaction already committed")

    def get(self, key: bytes, *, snapshot: bool = False) -> bytes | None:
        self._check_open()
        seen: list[bytes | None] = []

        def read_base(k: bytes) -> bytes | None:
            value = self._base_get(k)
            seen.append(value)
            return value

        value = self.buffer.lookup(key, read_base)
        if seen and not snapshot:
            # Only a read that reached the committed snapshot can conflict; one answered
            # by this transaction's own write cannot (as FoundationDB's RYW cache).
            base = seen[0]
            self._note_read(key, key + b"\x00", [] if base is None else [(key, base)])
        return value

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        self._check_open()
        if limit < 0:
            raise kv.engine_error(kv.CLIENT_INVALID_OPERATION, f"negative limit {limit}")
        if begin >= end:
            return []
        out: list[tuple[bytes, bytes]]
        if not self.buffer.touches(begin, end):
            # Nothing of ours to overlay: take the committed rows as they come, without
            # per-row Python; every row returned is then exactly a committed row read.
            base = self._base_range(begin, end, reverse)
            out = list(itertools.islice(base, limit)) if limit else list(base)
            consumed = out
        else:
            consumed = []

            def tap(rows: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
                for row in rows:
                    consumed.append(row)
                    yield row

            out = []
            for row in self.buffer.merge_range(
                begin, end, reverse, tap(self._base_range(begin, end, reverse))
            ):
                out.append(row)
                if limit and len(out) >= limit:
                    break
        if not snapshot:
            lo, hi = begin, end
            if limit and len(out) >= limit:
                if reverse:
                    lo = out[-1][0]
                else:
                    hi = out[-1][0] + b"\x00"
            # Without an overlay every row returned is inside [lo, hi); still a copy, as
            # the caller owns ``out``.
            seen = list(out) if consumed is out else [r for r in consumed if lo <= r[0] < hi]
            if reverse:
                seen.reverse()  # engines compare with a forward re-read at commit
            self._note_read(lo, hi, seen)
        return out

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        self._check_open()
        if begin < end:
            self._note_read(begin, end, None)

    # ------------------------------------------------------------ writes

    def set(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.set(key, value)

    def clear(self, key: bytes) -> None:
        self._check_open()
        self.buffer.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._check_open()
        self.buffer.clear_range(begin, end)

    def add(self, key: bytes, param: bytes) -> None:
        self._check_open()
        self.buffer.add(key, param)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.set_versionstamped(key, value, in_key=True)

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.set_versionstamped(key, value, in_key=False)

    def get_versionstamp(self) -> kv.VersionstampFuture:
        self.stamp_requested = True
        return self._future

    def commit(self) -> None:
        self._check_open()
        self._done = True
        try:
            stamp = self._commit()
        except Exception as exc:
            self._future.resolve(None, exc)
            raise
        if stamp is not None:
            self._future.resolve(stamp)
        elif self.stamp_requested:
            self._future.resolve(
                None, kv.engine_error(kv.NO_COMMIT_VERSION, "read-only transaction has no version")
            )
