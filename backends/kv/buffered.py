"""Read-your-writes buffering for engines that are not FoundationDB.

FoundationDB keeps a transaction's writes on the client until commit and layers them over
every read. The memory and SQLite engines do the same with :class:`WriteBuffer`: it records
writes, answers reads through the overlay, and hands the final mutations to the engine at
commit. It also enforces FoundationDB's size limits as writes arrive.

Versionstamped writes are resolved at commit and, as in FoundationDB, make what they write
unreadable to the same transaction: reading a key given a versionstamped value, or any key a
versionstamped key could become, fails with 1036 ``accessed_unreadable``. Mutations keep
FoundationDB's order: a later set, clear or range clear overrides an earlier versionstamped
write of the same key.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from backends.kv import checks
from persistence import fdb_errors, kv, txsize
from persistence.errors import EngineError
from persistence.futures import Failed, Future, Ready, Sleep, settled

INITIAL_BACKOFF: Final = 0.01
MAX_BACKOFF: Final = 1.0
"""FoundationDB's ``on_error`` backoff: 10 ms doubling per retry, capped at 1 s, jittered."""

_SET: Final = 0
_CLEAR: Final = 1
_ATOMIC: Final = 2
_STAMPED_VALUE: Final = 3

Mutation = Callable[[bytes | None, bytes], bytes | None]
"""An atomic mutation: the new value (``None``: cleared) from the current one and the
parameter (``checks.apply_add``, ``checks.apply_compare_and_clear``)."""


@dataclass(slots=True)
class _Entry:
    """The transaction's view of one key: a value, a deletion, atomic mutations over the
    (unread) committed value, or a value whose bytes at ``offset`` get the versionstamp
    (then the mutations issued after it)."""

    kind: int
    value: bytes | None = None
    mutations: tuple[tuple[Mutation, bytes], ...] = ()
    offset: int = 0
    unreadable: bool = False
    """Written with a versionstamped value: unreadable to this transaction until a clear
    (a later set or add keeps it so, as FoundationDB's write map does)."""

    def resolve(self, base: bytes | None, stamp: bytes = b"") -> bytes | None:
        if self.kind == _SET:
            return self.value
        if self.kind == _CLEAR:
            return None
        if self.kind == _STAMPED_VALUE:
            assert self.value is not None and len(stamp) == 10
            base = _splice(self.value, self.offset, stamp)
        for mutation, param in self.mutations:
            base = mutation(base, param)
        return base


@dataclass(slots=True)
class StampedKey:
    """A write whose key receives the commit versionstamp at ``offset``.

    ``min_version`` is the read version the transaction had cached when the write was
    issued (0 if none): FoundationDB's write-conflict and unreadable range starts at the key
    stamped with it. ``clears_before`` counts the range clears issued before it: a later
    one that covers the final key deletes it."""

    key: bytes
    value: bytes
    offset: int
    min_version: int
    clears_before: int

    def resolve(self, stamp: bytes) -> bytes:
        """The final key for a 10-byte ``stamp``."""
        return _splice(self.key, self.offset, stamp)

    def possible_keys(self) -> tuple[bytes, bytes]:
        """Every key this write could become (FoundationDB's ``getVersionstampKeyRange``)."""
        low = self.min_version.to_bytes(8, "big") + b"\x00\x00"
        return self.resolve(low), self.resolve(b"\xff" * 10) + b"\x00"


def _splice(data: bytes, offset: int, stamp: bytes) -> bytes:
    return data[:offset] + stamp + data[offset + 10 :]


def _subtract(
    ranges: list[tuple[bytes, bytes]], holes: Iterable[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """``ranges`` minus every range of ``holes``, in key order (empty ranges dropped)."""
    ranges = [(begin, end) for begin, end in ranges if begin < end]
    for h_begin, h_end in holes:
        ranges = [
            piece
            for r_begin, r_end in ranges
            for piece in ((r_begin, min(r_end, h_begin)), (max(r_begin, h_end), r_end))
            if piece[0] < piece[1]
        ]
    return sorted(ranges)


def _known(value: bytes | None, unreadable: bool = False) -> _Entry:
    """The entry of a key whose value the transaction knows (``None``: deleted)."""
    if value is None:
        return _Entry(_CLEAR, unreadable=unreadable)
    return _Entry(_SET, value, unreadable=unreadable)


def _unreadable(what: str) -> EngineError:
    return fdb_errors.engine_error(
        fdb_errors.ACCESSED_UNREADABLE, f"{what} written with a versionstamp by this transaction"
    )


class WriteBuffer:
    """A transaction's uncommitted writes, in the form they commit in."""

    __slots__ = ("_cleared", "_entries", "size", "stamped_keys")

    def __init__(self) -> None:
        self._entries: dict[bytes, _Entry] = {}
        self._cleared: list[tuple[bytes, bytes]] = []
        self.stamped_keys: list[StampedKey] = []
        self.size = 0

    # ------------------------------------------------------------------ writes

    def _grow(self, nbytes: int) -> None:
        """Count ``nbytes`` as FoundationDB counts them (:mod:`persistence.txsize`); the
        limit is checked at commit, as FoundationDB checks it."""
        self.size += nbytes

    def count_read(self, begin: bytes, end: bytes) -> None:
        """Count a read conflict range."""
        self.size += txsize.read_cost(len(begin), len(end))

    def set(self, key: bytes, value: bytes) -> None:
        """Record ``key = value``."""
        checks.check_pair(key, value)
        self._grow(txsize.set_cost(len(key), len(value)))
        previous = self._entries.get(key)
        self._entries[key] = (
            _Entry(_SET, value)
            if previous is None or not previous.unreadable
            else _Entry(_SET, value, unreadable=True)
        )

    def set_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Record ``key = value`` for each pair in turn: :meth:`set`'s checks, counts and
        view, in one loop (journal entries and log records are written in bulk)."""
        entries = self._entries
        size = 0
        try:
            for key, value in pairs:
                checks.check_pair(key, value)
                size += txsize.set_cost(len(key), len(value))
                previous = entries.get(key)
                entries[key] = (
                    _Entry(_SET, value)
                    if previous is None or not previous.unreadable
                    else _Entry(_SET, value, unreadable=True)
                )
        finally:
            self._grow(size)

    def clear(self, key: bytes) -> None:
        """Record the deletion of ``key``."""
        checks.check_key(key)
        self._grow(txsize.clear_cost(len(key)))
        self._entries[key] = _Entry(_CLEAR)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Record the deletion of ``[begin, end)`` (2005 if ``begin > end``)."""
        checks.check_range(begin, end)
        if begin > end:
            raise fdb_errors.engine_error(
                fdb_errors.INVERTED_RANGE, "clear_range begin key after its end"
            )
        if begin == end:
            return
        self._grow(txsize.clear_range_cost(len(begin), len(end)))
        for key in [k for k in self._entries if begin <= k < end]:
            del self._entries[key]
        self._cleared.append((begin, end))

    def mutate(self, key: bytes, mutation: Mutation, param: bytes) -> None:
        """Record an atomic mutation of ``key``: applied now if this transaction knows the
        value (it set or cleared the key), else at commit over the committed value."""
        checks.check_key(key)
        checks.check_value(param)
        self._grow(txsize.set_cost(len(key), len(param)))
        entry = self._entries.get(key)
        if entry is None:
            if self._is_cleared(key):
                self._entries[key] = _known(mutation(None, param))
            else:
                self._entries[key] = _Entry(_ATOMIC, mutations=((mutation, param),))
        elif entry.kind in (_ATOMIC, _STAMPED_VALUE):
            entry.mutations += ((mutation, param),)  # at commit, over the stamped value
        else:
            self._entries[key] = _known(mutation(entry.resolve(None), param), entry.unreadable)

    def set_versionstamped_key(self, key: bytes, value: bytes, read_version: int | None) -> None:
        """Record a versionstamped key (offset suffix on ``key``); ``read_version`` is the
        transaction's cached read version, if it has one yet."""
        try:
            body, offset = checks.split_versionstamp_offset(key, "key")
        except ValueError as exc:
            raise fdb_errors.engine_error(fdb_errors.CLIENT_INVALID_OPERATION, str(exc)) from None
        checks.check_key(body)
        checks.check_value(value)
        self._grow(txsize.versionstamped_key_cost(len(key), len(value)))
        self.stamped_keys.append(
            StampedKey(body, value, offset, read_version or 0, len(self._cleared))
        )

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        """Record a value (offset suffix on ``value``) that gets the versionstamp."""
        try:
            body, offset = checks.split_versionstamp_offset(value, "value")
        except ValueError as exc:
            raise fdb_errors.engine_error(fdb_errors.CLIENT_INVALID_OPERATION, str(exc)) from None
        checks.check_key(key)
        checks.check_value(body)
        self._grow(txsize.set_cost(len(key), len(value)))
        self._entries[key] = _Entry(_STAMPED_VALUE, body, offset=offset, unreadable=True)

    # ------------------------------------------------------------------ reads

    def _is_cleared(self, key: bytes) -> bool:
        return any(begin <= key < end for begin, end in self._cleared)

    def touches(self, begin: bytes, end: bytes) -> bool:
        """Whether any write of this buffer falls in ``[begin, end)`` (versionstamped keys
        excepted: see :meth:`check_readable`)."""
        return any(begin <= k < end for k in self._entries) or any(
            b < end and e > begin for b, e in self._cleared
        )

    def check_readable(self, begin: bytes, end: bytes) -> None:
        """Raise 1036 if ``[begin, end)`` holds a key written with a versionstamp by this
        transaction (a stamped value, or a key a stamped key could become)."""
        for write in self.stamped_keys:
            low, high = write.possible_keys()
            if low < end and begin < high:
                # unless a later range clear has made that part known again
                later = self._cleared[write.clears_before :]
                gaps = _subtract([(max(low, begin), min(high, end))], later)
                if gaps:
                    raise _unreadable("a key in this range could be one")
        for key, entry in self._entries.items():
            if entry.unreadable and begin <= key < end:
                raise _unreadable(f"key {key!r}")

    def unknown_parts(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """``[begin, end)`` minus what this transaction fixed itself (keys it set or
        cleared, ranges it cleared): the parts a read depends on the database for, which
        are its read-conflict ranges in FoundationDB."""
        known = [(b, e) for b, e in self._cleared if b < end and begin < e]
        known.extend(
            (k, k + b"\x00")
            for k, entry in self._entries.items()
            if begin <= k < end and entry.kind in (_SET, _CLEAR) and not entry.unreadable
        )
        return _subtract([(begin, end)], known)

    def needs_stamp(self) -> bool:
        """Whether committing writes a versionstamp."""
        return bool(self.stamped_keys) or any(
            e.kind == _STAMPED_VALUE for e in self._entries.values()
        )

    def has_writes(self) -> bool:
        """Whether committing would change anything."""
        return bool(self._entries or self._cleared or self.stamped_keys)

    def lookup(self, key: bytes, read_base: Callable[[bytes], bytes | None]) -> bytes | None:
        """The transaction's view of ``key``; ``read_base`` reads the committed snapshot."""
        self.check_readable(key, key + b"\x00")
        entry = self._entries.get(key)
        if entry is not None and entry.kind != _ATOMIC:
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
            entry = self._entries[okey]
            if entry.unreadable:
                raise _unreadable(f"key {okey!r}")
            value = entry.resolve(base_value)
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
        self, read_committed: Callable[[bytes], bytes | None], stamp: bytes = b""
    ) -> Iterable[tuple[bytes, bytes | None]]:
        """``(key, value or None for delete)`` to apply after the cleared ranges, in order:
        keyed writes first, then versionstamped keys not cleared by a later range clear.

        ``read_committed`` reads the value as of the commit, for atomic mutations; ``stamp`` is
        the commit's versionstamp (needed when :meth:`needs_stamp`)."""
        for key, entry in self._entries.items():
            kind = entry.kind
            if kind == _SET:
                yield key, entry.value
            elif kind == _ATOMIC:
                yield key, entry.resolve(read_committed(key))
            else:
                yield key, entry.resolve(None, stamp)
        for write in self.stamped_keys:
            key = write.resolve(stamp)
            later = self._cleared[write.clears_before :]
            if not any(b <= key < e for b, e in later):
                yield key, write.value

    def write_conflict_ranges(self) -> list[tuple[bytes, bytes]]:
        """The ranges this transaction writes, as FoundationDB's resolver sees them; a
        versionstamped key conflicts over every key it could become."""
        ranges = list(self._cleared)
        ranges.extend((k, k + b"\x00") for k in self._entries)
        ranges.extend(write.possible_keys() for write in self.stamped_keys)
        return ranges


class BufferedFuture(Future[bytes]):
    """A versionstamp future resolved by the engine at commit (the commit is made on the
    calling thread, so it is settled whenever it is awaited after the commit)."""

    __slots__ = ("_error", "_stamp")

    def __init__(self) -> None:
        self._stamp: bytes | None = None
        self._error: Exception | None = None

    def resolve(self, stamp: bytes | None, error: Exception | None = None) -> None:
        """Settle the future with a stamp or an error."""
        self._stamp, self._error = stamp, error

    def poll(self) -> bool:
        return True

    def block(self) -> None:
        pass

    def notify(self, callback: Callable[[], object]) -> None:
        callback()

    def result(self) -> bytes:
        if self._stamp is not None:
            return self._stamp
        if self._error is not None:
            raise self._error
        raise fdb_errors.engine_error(
            fdb_errors.USED_DURING_COMMIT, "versionstamp requested before the transaction committed"
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
        self.backoff = INITIAL_BACKOFF
        self._commit_error: EngineError | None = None  # a read of an unreadable key

    # ------------------------------------------------------------ engine hooks

    def _base_get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def _base_get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes | None]:
        """The committed snapshot's values of ``keys`` (one read each unless overridden)."""
        return {key: self._base_get(key) for key in keys}

    def _base_range(self, begin: bytes, end: bytes, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def _note_read(self, begin: bytes, end: bytes, rows: list[tuple[bytes, bytes]] | None) -> None:
        """Record a read conflict range and the committed rows read inside it, in
        ascending key order (``None`` when the range was declared without being read)."""
        raise NotImplementedError

    def _commit(self) -> bytes | None:
        """Apply the buffer atomically; return the versionstamp (None if read-only)."""
        raise NotImplementedError

    def _conflict(self, begin: bytes, end: bytes, rows: list[tuple[bytes, bytes]] | None) -> None:
        """A read conflict range: counted against the size limit, then noted."""
        self.buffer.count_read(begin, end)
        self._note_read(begin, end, rows)

    def _fresh(self) -> BufferedTransaction:
        """A new transaction of the same engine (the next attempt after an error)."""
        raise NotImplementedError

    def _cached_read_version(self) -> int | None:
        """The read version, if this transaction has taken one yet (no read is made)."""
        raise NotImplementedError

    def _size_limit(self) -> int:
        """The engine's transaction size limit (FoundationDB's ``size_limit``)."""
        raise NotImplementedError

    # ------------------------------------------------------------ reads

    def _check_open(self) -> None:
        if self._done:
            raise fdb_errors.engine_error(
                fdb_errors.USED_DURING_COMMIT, "transaction already committed"
            )

    # Reads are made when they are asked for, on the calling thread: their futures are
    # ready (an error is raised at once, as the read is made).

    def get(self, key: bytes, *, snapshot: bool = False) -> Future[bytes | None]:
        self._check_open()
        checks.check_type(key, "key")
        return Ready(self._get(key, snapshot, self._base_get))

    def get_many(
        self, keys: Sequence[bytes], *, snapshot: bool = False
    ) -> Future[list[bytes | None]]:
        self._check_open()
        for key in keys:
            checks.check_type(key, "key")
        committed = self._base_get_many(keys)
        if snapshot and not self.buffer.has_writes():
            # nothing of its own to overlay and no conflict to record: the committed values
            return Ready([committed[key] for key in keys])
        return Ready([self._get(key, snapshot, committed.__getitem__) for key in keys])

    def _get(
        self, key: bytes, snapshot: bool, base_get: Callable[[bytes], bytes | None]
    ) -> bytes | None:
        seen: list[bytes | None] = []

        def read_base(k: bytes) -> bytes | None:
            value = base_get(k)
            seen.append(value)
            return value

        try:
            value = self.buffer.lookup(key, read_base)
        except EngineError as exc:
            self._remember(exc)
            raise
        if seen and not snapshot:
            # Only a read that reached the committed snapshot can conflict; one answered
            # by this transaction's own write cannot (as FoundationDB's RYW cache).
            base = seen[0]
            self._conflict(key, key + b"\x00", [] if base is None else [(key, base)])
        return value

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> Future[list[tuple[bytes, bytes]]]:
        return Ready(self.read_range(begin, end, limit=limit, reverse=reverse, snapshot=snapshot))

    def read_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """:meth:`get_range`'s rows, read now."""
        self._check_open()
        checks.check_range(begin, end)
        if checks.check_limit(limit) < 0:
            raise fdb_errors.engine_error(
                fdb_errors.CLIENT_INVALID_OPERATION, f"negative limit {limit}"
            )
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
            try:
                for row in self.buffer.merge_range(
                    begin, end, reverse, tap(self._base_range(begin, end, reverse))
                ):
                    out.append(row)
                    if limit and len(out) >= limit:
                        break
            except EngineError as exc:
                self._remember(exc)
                raise
        lo, hi = begin, end
        if limit and len(out) >= limit:
            if reverse:
                lo = out[-1][0]
            else:
                hi = out[-1][0] + b"\x00"
        try:
            self.buffer.check_readable(lo, hi)
        except EngineError as exc:
            self._remember(exc)
            raise
        if snapshot:
            return out
        if consumed is out:
            # No overlay: every row returned is a committed row inside [lo, hi); still a
            # copy, as the caller owns ``out``.
            seen = list(reversed(out)) if reverse else list(out)
            self._conflict(lo, hi, seen)
            return out
        base_rows = sorted(consumed)  # engines compare with a forward re-read at commit
        for part_lo, part_hi in self.buffer.unknown_parts(lo, hi):
            self._conflict(part_lo, part_hi, [r for r in base_rows if part_lo <= r[0] < part_hi])
        return out

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        self._check_open()
        checks.check_range(begin, end)
        if begin > end:
            raise fdb_errors.engine_error(
                fdb_errors.INVERTED_RANGE, "conflict range begin key after its end"
            )
        # as a read would: keys this transaction fixed itself cannot conflict
        for part_begin, part_end in self.buffer.unknown_parts(begin, end):
            self._conflict(part_begin, part_end, None)

    # ------------------------------------------------------------ writes

    def set(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.set(key, value)

    def set_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self._check_open()
        self.buffer.set_many(pairs)

    def clear(self, key: bytes) -> None:
        self._check_open()
        self.buffer.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._check_open()
        self.buffer.clear_range(begin, end)

    def add(self, key: bytes, param: bytes) -> None:
        self._check_open()
        self.buffer.mutate(key, checks.apply_add, param)

    def compare_and_clear(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.mutate(key, checks.apply_compare_and_clear, value)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.set_versionstamped_key(key, value, self._cached_read_version())

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        self._check_open()
        self.buffer.set_versionstamped_value(key, value)

    def get_versionstamp(self) -> kv.VersionstampFuture:
        self.stamp_requested = True
        return self._future

    def on_error(self, error: EngineError) -> Future[kv.Transaction]:
        if not fdb_errors.is_retryable(error):
            return Failed(error)
        nxt = self._fresh()
        nxt.backoff = min(MAX_BACKOFF, self.backoff * 2)
        return Sleep(self.backoff * random.uniform(0.5, 1.0), nxt)

    def _remember(self, error: EngineError) -> None:
        """A read of a key this transaction stamped fails, and so does its commit (as in
        FoundationDB, where 1036 poisons the transaction)."""
        if error.code == fdb_errors.ACCESSED_UNREADABLE:
            self._commit_error = error

    def commit(self) -> Future[None]:
        """Commit now, on the calling thread: a ready future, failed if the commit failed."""
        return settled(self.commit_now)

    def commit_now(self) -> None:
        """:meth:`commit`, raising its error."""
        self._begin_commit()
        try:
            stamp = self._commit()
        except Exception as exc:
            self._fail(exc)
            raise
        self._settle(stamp)

    def _begin_commit(self) -> None:
        """End the transaction for its commit; refuse a commit that cannot succeed: after a
        read of a key it stamped (1036), or larger than the engine's limit (2101)."""
        self._check_open()
        self._done = True
        try:
            if self._commit_error is not None:
                raise self._commit_error
            if self.buffer.has_writes() and self.buffer.size > self._size_limit():
                raise fdb_errors.engine_error(
                    fdb_errors.TRANSACTION_TOO_LARGE,
                    f"transaction of {self.buffer.size} bytes > {self._size_limit()}",
                )
        except Exception as exc:
            self._fail(exc)
            raise

    def _fail(self, error: Exception) -> None:
        """The commit failed with ``error``: so does the versionstamp."""
        self._future.resolve(None, error)

    def _settle(self, stamp: bytes | None) -> None:
        """The commit succeeded, with versionstamp ``stamp`` (``None``: it wrote nothing)."""
        if stamp is not None:
            self._future.resolve(stamp)
        elif self.stamp_requested:
            self._future.resolve(
                None,
                fdb_errors.engine_error(
                    fdb_errors.NO_COMMIT_VERSION, "read-only transaction has no version"
                ),
            )
