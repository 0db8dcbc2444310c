"""Protocol D: the drain that moves a world's inbox items into its journal exactly once,
advancing the cursor in the same transaction -- for one world, or for several worlds of a
universe in one transaction -- and clears the world's ready mark when it leaves the inbox
empty (the mark's rules: :mod:`persistence.protocols.inbox`)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from persistence import cbor, kv
from persistence.errors import CorruptRecord, PersistError, Validation
from persistence.futures import Future
from persistence.ids import InboxSeq, WorldId
from persistence.inbox_records import InboxCursor, InboxItem, encode_inbox_item, envelope_parts
from persistence.journal_records import JournalHead, ingress_bytes
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.protocols import budget, calls
from persistence.protocols.calls import Call
from persistence.protocols.checksums import Sealing
from persistence.protocols.inbox import read_cursor_record, seq_of
from persistence.protocols.journal import append_at, decode_head
from persistence.records import CallRecord

Normalizer = Callable[[InboxSeq, InboxItem], bytes]
"""Turns one drained inbox item into its canonical journal entry. Must be deterministic:
a drain retried after an unknown commit result normalizes the same items again."""


def default_normalizer(seq: InboxSeq, item: InboxItem) -> bytes:
    """The journal entry of a drained item: an ``ingress`` record of its sequence and bytes.
    A drain with this normalizer builds each entry from the item's stored bytes, which are
    these bytes (``inbox_records.envelope_parts``), without encoding the item again."""
    return ingress_bytes(seq, encode_inbox_item(item))


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one drain moved: ``count`` items appended from height ``first_height``, the
    cursor after it (``None`` if the inbox was never drained and is empty), and whether
    items followed that cursor when the drain read the inbox (``more``: drain again; items
    enqueued since are not seen; ``None`` if not known, from a call record written before
    drains recorded it). ``contended``: in a group drain, the world's head or cursor kept
    moving under the group's transaction, so the group committed without it (and the plane
    then drained it alone)."""

    first_height: int
    count: int
    cursor: InboxSeq | None
    more: bool | None = None
    contended: bool = False


Drained = Callable[[dict[WorldId, DrainResult]], None]
"""Told the results of one transaction of a multi-world drain call once it has committed
(``Plane.drain_worlds``' ``drained``)."""


FIRST_PAGE: Final = 128
"""Items a drain's first range read asks for at most (it asks for one more than it may
take, so that it learns whether items remain without another read); the next reads, if
any, are sized by the bytes read so far."""
MAX_PAGE: Final = 1_024
"""The most items one range read of a drain asks for."""


@dataclass(frozen=True, slots=True)
class DrainLimits:
    """How much one drain may take: ``max_items`` items of at most ``max_bytes`` of envelopes
    (at least one item), normalized entries of at most ``max_entry_bytes``, and a transaction
    counting at most ``budget`` bytes (``protocols/budget.py``)."""

    max_items: int
    max_bytes: int
    max_entry_bytes: int
    budget: int


@dataclass(slots=True)
class _World:
    """One world's drain in a transaction, as its reads come in: the first wave (cursor,
    head and ready mark, snapshot reads, issued together), then the items after the cursor
    (one read, a few more for a drain of many bytes)."""

    keys: WorldKeys
    cursor_read: Future[bytes | None]
    head_read: Future[bytes | None]
    ready_read: Future[bytes | None]
    cursor_raw: bytes | None = None
    head_raw: bytes | None = None
    taken: list[tuple[InboxSeq, InboxItem, bytes]] = field(default_factory=list)
    """Each item taken: its sequence, the item, and its stored bytes."""
    size: int = 0
    rows: Future[list[tuple[bytes, bytes]]] | None = None
    asked: int = 0
    begin: bytes = b""
    end: bytes = b""
    done: bool = False
    more: bool = False

    @classmethod
    def start(cls, tr: kv.Transaction, keys: WorldKeys) -> _World:
        """Issue the world's first wave."""
        return cls(
            keys,
            tr.get(keys.inbox_cursor(), snapshot=True),
            tr.get(keys.head(), snapshot=True),
            tr.get(keys.ready(), snapshot=True),
        )

    async def read_positions(self) -> tuple[InboxCursor | None, JournalHead]:
        """The cursor and head the first wave read (``WorldNotFound`` without a head)."""
        self.cursor_raw = await self.cursor_read
        self.head_raw = await self.head_read
        return read_cursor_record(self.cursor_raw), decode_head(self.keys, self.head_raw)

    def read_items(self, tr: kv.Transaction, after: InboxSeq | None, limits: DrainLimits) -> None:
        """Issue the first read of the items after ``after``: one more than the drain may
        take (up to :data:`FIRST_PAGE`)."""
        self.begin, self.end = self.keys.inbox_after(after)
        self.asked = min(limits.max_items + 1, FIRST_PAGE)
        self.rows = tr.get_range(self.begin, self.end, limit=self.asked, snapshot=True)

    async def take(self, tr: kv.Transaction, limits: DrainLimits) -> None:
        """Take the items read, within the item and byte limits, reading on while the limits
        allow; ``more``: an item follows the last one taken."""
        while self.rows is not None:
            rows = await self.rows
            self.rows = None
            for key, value in rows:
                full = len(self.taken) >= limits.max_items
                if full or (self.taken and self.size + len(value) > limits.max_bytes):
                    self.more = True
                    return
                self.size += len(value)
                item, raw = envelope_parts(value, "inbox entry")
                self.taken.append((seq_of(key, self.keys), item, raw))
            if len(rows) < self.asked:
                return  # every item after the cursor was read
            if self.size >= limits.max_bytes:  # is there another? one row tells
                self.more = bool(rows) and await self._another(tr, rows[-1][0])
                return
            self.begin = rows[-1][0] + b"\x00"
            per_item = max(1, self.size // max(1, len(self.taken)))
            left = min(limits.max_items - len(self.taken) + 1, MAX_PAGE)
            self.asked = max(1, min(left, (limits.max_bytes - self.size) // per_item + 1))
            self.rows = tr.get_range(self.begin, self.end, limit=self.asked, snapshot=True)

    async def _another(self, tr: kv.Transaction, last: bytes) -> bool:
        return bool(await tr.get_range(last + b"\x00", self.end, limit=1, snapshot=True))


@kv.transactional
async def drain(
    tr: kv.Transaction,
    keys: WorldKeys,
    limits: DrainLimits,
    normalize: Normalizer,
    call: Call,
    sealing: Sealing | None,
) -> DrainResult:
    """Protocol D in one transaction: read cursor and head, read items after the cursor
    (within ``limits``), normalize them, append at the head (sealed with ``sealing``,
    as the store's layout says), advance the cursor to the last drained item, and clear the
    world's ready mark if no item follows (see the module). If
    the entries would make the transaction count more than the budget, fewer items are
    drained; an entry that alone does not fit, or is longer than ``max_entry_bytes``, is
    ``Validation`` naming the normalizer (nothing is written).

    Two waves of reads: the cursor, head and ready mark with the call's own; then the items
    after the cursor, one more than it may take (so it knows whether items remain).

    Conflicts are the ones the protocol needs: a drain that takes items reads the cursor and
    the head with a conflict (another drain, a cursor commit or an append aborts it), the
    items at snapshot isolation -- they are immutable, and every item committed after this
    drain's read version sorts after them, so concurrent enqueues never abort a drain (one
    that leaves the inbox empty clears the ready mark with ``compare_and_clear``, which
    reads nothing). A drain that takes nothing has no conflict at all. A retry whose
    earlier attempt committed returns that attempt's result (its call record)."""
    opening = calls.begin(tr, keys, call)
    world = _World.start(tr, keys)
    done = await calls.replayed(opening)
    if done is not None:
        more = None if done.value is None else cbor.decode_stored(done.value, "drain record")
        if more is not None and not isinstance(more, bool):
            raise CorruptRecord("call record", "a drain record's value is not a boolean")
        return DrainResult(_required(done.first_height), _required(done.count), done.seq, more)
    cursor, head = await world.read_positions()
    world.read_items(tr, None if cursor is None else cursor.seq, limits)
    await world.take(tr, limits)
    result, _, wrote = await _drain_world(
        tr, world, cursor, head, limits, normalize, budget.call_cost(keys), True, sealing
    )
    if wrote:
        calls.record(
            opening,
            "drain",
            first_height=result.first_height,
            count=result.count,
            seq=result.cursor,
            value=cbor.encode(result.more),
        )
    return result


MAX_DRAIN_WORLDS: Final = 1_000
"""The most worlds one multi-world drain takes (its call record holds every result)."""
GROUP_OP: Final = "drain group"
"""The call record's ``op`` of a multi-world drain."""


@dataclass(slots=True)
class GroupMemo:
    """What the attempts of one multi-world drain call remember: the cursor and head each
    world that drained items in the last attempt read (its read conflicts), and the worlds
    found busy -- whose cursor or head had moved when the next attempt read them."""

    seen: dict[WorldId, tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    busy: set[WorldId] = field(default_factory=set)
    built: Callable[[], Awaitable[None]] | None = None
    """Awaited when an attempt has built its transaction, before it commits (or has found
    the call's record of one that committed): a drain run beside the group waits for it,
    and it may wait for that drain in turn; what it raises withdraws the attempt."""


CALM_DRAINS: Final = 8
"""Drains of a busy world in a row that commit at their first attempt before
:class:`BusyWorlds` forgets it."""


class BusyWorlds:
    """The worlds multi-world drains found busy lately, for the drains that follow (a
    plane's, across its calls and threads): such a world is left out of a group's first
    attempt -- which its moving head would fail, making the group run twice -- and drained
    alone beside the group. It is forgotten once ``calm_drains`` drains of it in a row
    commit at their first attempt (one alone proves little: a drain alone is short, and
    its appender may be between appends), and the oldest is forgotten beyond ``capacity``
    worlds."""

    def __init__(self, capacity: int = 1_024, calm_drains: int = CALM_DRAINS) -> None:
        self._capacity = capacity
        self._calm_drains = calm_drains
        self._worlds: dict[WorldKeys, int] = {}  # calm drains left before it is forgotten
        self._lock = threading.Lock()

    def among(self, worlds: Sequence[WorldKeys]) -> set[WorldId]:
        """Which of ``worlds`` are busy."""
        with self._lock:
            return {keys.world for keys in worlds if keys in self._worlds}

    def note(self, keys: WorldKeys, busy: bool) -> None:
        """Note how a drain of ``keys``'s world went: it met a conflict (``busy``: remember
        the world, or keep it longer), or it committed at its first attempt (one calm drain
        closer to forgetting it)."""
        with self._lock:
            if busy:
                self._worlds.pop(keys, None)
                self._worlds[keys] = self._calm_drains
                if len(self._worlds) > self._capacity:
                    del self._worlds[next(iter(self._worlds))]
            elif keys in self._worlds:
                left = self._worlds[keys] - 1
                if left > 0:
                    self._worlds[keys] = left
                else:
                    del self._worlds[keys]


@kv.transactional
async def drain_worlds(
    tr: kv.Transaction,
    universe: UniverseKeys,
    worlds: Sequence[WorldKeys],
    limits: DrainLimits,
    normalize: Normalizer,
    call: Call,
    sealing: Sealing | None,
    memo: GroupMemo | None = None,
) -> list[DrainResult]:
    """Protocol D for each of ``worlds`` (distinct worlds of ``universe``), in order, in one
    transaction: one durable commit for all. Each world's drain is :func:`drain`'s, with
    ``limits`` per world; the transaction's budget is shared, so a world reached when it is
    spent drains fewer items, possibly none (an entry that does not fit when nothing before
    it in the transaction drained an item is ``Validation`` naming the normalizer). A
    missing world is ``WorldNotFound``; nothing is written. The call record is kept in the
    universe's scope: a retry whose earlier attempt committed returns that attempt's results,
    whatever committed in between. Every world's reads go out together: two waves for the
    group, as for one world.

    One busy world must not stall the group: with ``memo`` (the same for every attempt of
    the call), every attempt leaves out the worlds of ``memo.busy`` (the caller may start it
    with the worlds it knows are busy: :class:`BusyWorlds`), and an attempt after one that
    failed also leaves out each world whose cursor or head moved since the failed attempt
    read them -- a world it drained items of, so one whose read conflict may have failed
    it; a world left out has the result ``contended`` (nothing drained; ``more``), for the
    caller to drain it alone."""
    opening = calls.begin(tr, universe, call)
    started = [_World.start(tr, keys) for keys in worlds]
    done = await calls.replayed(opening)
    if done is not None:
        if memo is not None and memo.built is not None:
            await memo.built()
        return _recorded_group(done, len(worlds))
    positions = [await world.read_positions() for world in started]
    if memo is not None and call.attempts > 1:
        for world in started:
            seen = memo.seen.get(world.keys.world)
            if seen is not None and seen != (world.cursor_raw, world.head_raw):
                memo.busy.add(world.keys.world)
    for world, (cursor, _) in zip(started, positions, strict=True):
        if memo is None or world.keys.world not in memo.busy:
            world.read_items(tr, None if cursor is None else cursor.seq, limits)
    counted = budget.drain_group_cost(universe, len(worlds))
    results: list[DrainResult] = []
    wrote = False
    if memo is not None:
        memo.seen.clear()
    for world, (cursor, head) in zip(started, positions, strict=True):
        if world.rows is None:  # left out: busy
            after = None if cursor is None else cursor.seq
            results.append(DrainResult(head.height + 1, 0, after, True, contended=True))
            continue
        await world.take(tr, limits)
        alone = not any(result.count for result in results)
        result, counted, changed = await _drain_world(
            tr, world, cursor, head, limits, normalize, counted, alone, sealing
        )
        results.append(result)
        wrote |= changed
        if memo is not None and result.count:
            memo.seen[world.keys.world] = (world.cursor_raw, world.head_raw)
    if wrote:
        value = cbor.encode([_row(r) for r in results])
        calls.record(opening, GROUP_OP, count=len(worlds), value=value)
    if memo is not None and memo.built is not None:
        await memo.built()
    return results


async def _drain_world(
    tr: kv.Transaction,
    world: _World,
    cursor: InboxCursor | None,
    head: JournalHead,
    limits: DrainLimits,
    normalize: Normalizer,
    counted: int,
    alone: bool,
    sealing: Sealing | None,
) -> tuple[DrainResult, int, bool]:
    """One world's drain inside ``tr`` once its items are taken, after ``counted`` bytes of
    the budget: its result, the bytes counted with it, and whether it wrote. It clears the
    ready mark when no item follows; with ``alone`` (no item drained before it in ``tr``)
    an entry that does not fit is ``Validation``, else the world drains fewer items."""
    # Cursor and head were read at snapshot isolation and get their conflicts only if the
    # world drains items: a world that drains nothing writes neither (an append or another
    # drain of it then aborts nothing, in a multi-world drain especially).
    keys = world.keys
    after = None if cursor is None else cursor.seq
    first = head.height + 1
    taken = world.taken
    entries, counted = _normalized(keys, first, taken, normalize, limits, counted, alone)
    if entries:
        tr.add_read_conflict_key(keys.inbox_cursor())
        tr.add_read_conflict_key(keys.head())
        after = taken[len(entries) - 1][0]
        append_at(tr, keys, head, entries, sealing)
        tr.set(keys.inbox_cursor(), InboxCursor(after).to_cbor())
    more = len(entries) < len(taken) or world.more
    cleared = False
    if not more:
        # No item follows: clear the ready mark unless an enqueue rewrites it before the
        # commit. Every enqueue writes its own versionstamp there, so compare_and_clear
        # with the value read keeps the mark of any enqueue committed after this
        # transaction's read version -- without a conflict.
        seen = await world.ready_read
        if seen is not None:
            tr.compare_and_clear(keys.ready(), seen)
            cleared = True
    return DrainResult(first, len(entries), after, more), counted, bool(entries) or cleared


def _normalized(
    keys: WorldKeys,
    first: int,
    taken: list[tuple[InboxSeq, InboxItem, bytes]],
    normalize: Normalizer,
    limits: DrainLimits,
    counted: int,
    alone: bool,
) -> tuple[list[bytes], int]:
    """The journal entries of the longest prefix of ``taken`` that fits the budget after
    ``counted`` bytes, and the bytes counted with them."""
    cost = counted + budget.drain_world_cost(keys, first, [])
    entries: list[bytes] = []
    stored = normalize is default_normalizer  # its entry is built from the stored bytes
    for seq, item, raw in taken:
        try:
            entry = ingress_bytes(seq, raw) if stored else normalize(seq, item)
        except PersistError:
            raise
        except Exception as exc:
            # The caller's code failed inside the drain transaction, which writes nothing:
            # the caller learns which item, as the one error kind a refused call has.
            raise Validation(
                "normalize", f"raised {type(exc).__name__} on item {seq}: {exc}"
            ) from exc
        if not isinstance(entry, bytes) or len(entry) > limits.max_entry_bytes:
            what = type(entry).__name__ if not isinstance(entry, bytes) else f"{len(entry):,} bytes"
            raise Validation(
                "normalize",
                f"the journal entry of item {seq} is {what}: entries are bytes of at most "
                f"{limits.max_entry_bytes:,}",
            )
        grown = cost + budget.entries_cost(keys, first + len(entries), [entry])
        if grown > limits.budget:
            if not entries and alone:
                budget.check(grown, limits.budget, "normalize", f"the journal entry of item {seq}")
            break
        cost = grown
        entries.append(entry)
    return entries, cost


def _row(result: DrainResult) -> list[object]:
    """A result as the group's call record keeps it."""
    raw = None if result.cursor is None else result.cursor.raw
    row: list[object] = [result.first_height, result.count, raw, result.more]
    return [*row, True] if result.contended else row


def _recorded_group(done: CallRecord, worlds: int) -> list[DrainResult]:
    """The results an earlier attempt of a multi-world drain of ``worlds`` recorded."""
    rows = None if done.value is None else cbor.decode_stored(done.value, "drain group record")
    if done.op != GROUP_OP or not isinstance(rows, list) or len(rows) != worlds:
        raise CorruptRecord("call record", f"a {done.op!r} record for a drain of {worlds} worlds")
    results = []
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) not in (4, 5)
            or not all(type(n) is int and n >= 0 for n in row[:2])
            or not (row[2] is None or isinstance(row[2], bytes))
            or not isinstance(row[3], bool)
            or row[4:] not in ([], [True])
        ):
            raise CorruptRecord(
                "call record", "a drain group result is not [height, count, seq, more(, busy)]"
            )
        try:
            cursor = None if row[2] is None else InboxSeq(row[2])
        except Validation as exc:
            raise CorruptRecord("call record", f"a drain group cursor: {exc}") from None
        results.append(DrainResult(row[0], row[1], cursor, row[3], contended=len(row) == 5))
    return results


def _required(value: int | None) -> int:
    if value is None:
        raise CorruptRecord("call record", "a drain record without its first height and count")
    return value
