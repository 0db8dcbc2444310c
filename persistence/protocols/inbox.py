"""Protocols C and D: the world inbox (commit-ordered enqueue, compare-and-swap cursor),
the drain that moves items into the journal exactly once -- for one world, or for several
worlds of a universe in one transaction -- and the pending-work index that tells drain
workers which worlds have items.

The pending-work index is one *ready mark* per world, ``("u", U, "ready", bucket, W)``
(``keyspace.UniverseKeys.ready``). Every enqueue that stores items writes it blindly (no
read: enqueues never conflict on it), with its own versionstamp as the value, so every write
changes it. A drain that leaves the inbox empty clears it with ``compare_and_clear`` and the
value it read at snapshot isolation: an enqueue that commits between the drain's read version
and its commit rewrote the mark with another value, so the mark stays -- and the drain, which
reads it with no conflict, commits. Hence a world with items after its cursor always has its
mark (a mark without items -- left by ``commit_cursor`` moving past the last item -- is
harmless: the next drain of the world finds nothing and clears it), and enqueues never abort
a drain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from persistence import cbor, fdbtuple, kv
from persistence.errors import (
    CorruptRecord,
    CursorAdvanced,
    PersistError,
    Validation,
    WorldNotFound,
)
from persistence.ids import InboxSeq, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys, seq_in_key
from persistence.protocols import budget, calls
from persistence.protocols.calls import Call
from persistence.protocols.journal import append_at, read_head
from persistence.records import (
    CallRecord,
    InboxCursor,
    InboxItem,
    decode_record,
    envelope_item,
)

Normalizer = Callable[[InboxSeq, InboxItem], bytes]
"""Turns one drained inbox item into its canonical journal entry. Must be deterministic:
a drain retried after an unknown commit result normalizes the same items again."""

NOTIFY_INCREMENT = (1).to_bytes(8, "little")
READY_VALUE: Final = bytes(10) + (0).to_bytes(4, "little")
"""A ready mark as an enqueue writes it: the enqueue's versionstamp, set at commit."""


@dataclass(frozen=True, slots=True)
class PendingEnqueue:
    """What an enqueue transaction did: sequences already known (idempotent repeats) and
    the user versions of new items, whose sequences are known after commit."""

    known: dict[int, InboxSeq]
    new: dict[int, int]
    stamp: kv.VersionstampFuture | None

    def seqs(self, count: int) -> list[InboxSeq]:
        """Every item's sequence, in call order (call after the commit)."""
        stamp = self.stamp.wait() if self.new and self.stamp is not None else b""
        out = []
        for index in range(count):
            if index in self.known:
                out.append(self.known[index])
            else:
                out.append(InboxSeq(stamp + self.new[index].to_bytes(2, "big")))
        return out


@kv.transactional
async def enqueue(
    tr: kv.Transaction,
    keys: WorldKeys,
    envelopes: Sequence[tuple[bytes | None, bytes]],
) -> PendingEnqueue:
    """Protocol C for a batch of ``(idempotency key or None, stored InboxEnvelope)``:
    versionstamped item keys (user version = position), an idempotency index entry per item
    that carries a key, one atomic add to the notify counter and the world's ready mark (a
    blind versionstamped write, see the module)."""
    # The world must exist. Its meta never changes, so a snapshot read suffices -- and
    # unlike the head (rewritten by every drain) it cannot make enqueues conflict with drains.
    if await tr.get(keys.meta(), snapshot=True) is None:
        raise WorldNotFound(keys.universe, keys.world)
    known: dict[int, InboxSeq] = {}
    new: dict[int, int] = {}
    for index, (idempotency_key, envelope) in enumerate(envelopes):
        idem_key = None
        if idempotency_key is not None:
            idem_key = keys.inbox_idempotency(idempotency_key)
            existing = await tr.get(idem_key)
            if existing is not None:
                known[index] = InboxSeq(existing)
                continue
        tr.set_versionstamped_key(keys.inbox_item_with_versionstamp(index), envelope)
        if idem_key is not None:
            tr.set_versionstamped_value(
                idem_key, b"\x00" * 10 + index.to_bytes(2, "big") + (0).to_bytes(4, "little")
            )
        new[index] = index
    if new:
        tr.add(keys.notify_counter(), NOTIFY_INCREMENT)
        tr.set_versionstamped_value(keys.ready(), READY_VALUE)
    return PendingEnqueue(known, new, tr.get_versionstamp() if new else None)


@kv.transactional
async def mark_pending(tr: kv.Transaction, keys: WorldKeys) -> bool:
    """Write the world's ready mark if items follow its cursor and it has none (inboxes
    filled before the pending-work index existed); whether it did. Always safe: a mark
    without items only costs a drain that finds nothing. ``WorldNotFound`` without a world."""
    cursor = await read_cursor(tr, keys, snapshot=True)
    await read_head(tr, keys, snapshot=True)
    after = None if cursor is None else cursor.seq
    if not await tr.get_range(*keys.inbox_after(after), limit=1, snapshot=True):
        return False
    if await tr.get(keys.ready(), snapshot=True) is not None:
        return False
    tr.set_versionstamped_value(keys.ready(), READY_VALUE)
    return True


READY_PAGE: Final = 1_000
"""Ready marks read per transaction of a scan of the pending-work index."""


@kv.transactional
async def read_ready(
    tr: kv.Transaction, universe: UniverseKeys, begin: bytes, end: bytes
) -> tuple[list[WorldId], bytes | None]:
    """The worlds whose ready mark is in ``[begin, end)`` (a part of
    ``universe.ready_range()``), up to :data:`READY_PAGE`, in key order, and where the next
    page begins (``None``: no more). Snapshot reads: a scan never aborts anything."""
    rows = await tr.get_range(begin, end, limit=READY_PAGE, snapshot=True)
    prefix = universe.ready_prefix_len()
    worlds = []
    for key, _ in rows:
        try:
            element = fdbtuple.unpack(key, prefix)
        except ValueError:
            element = ()
        if len(element) != 2 or type(element[0]) is not int or not isinstance(element[1], UUID):
            raise CorruptRecord("ready mark key", f"{key.hex()} does not end with (bucket, world)")
        worlds.append(WorldId(element[1]))
    more = len(rows) == READY_PAGE
    return worlds, (rows[-1][0] + b"\x00" if more else None)


def _seq_of(key: bytes, keys: WorldKeys) -> InboxSeq:
    return seq_in_key(key, keys.inbox_prefix_len(), f"inbox entry key of world {keys.world}")


@kv.transactional
async def read_after(
    tr: kv.Transaction, keys: WorldKeys, after: InboxSeq | None, limit: int
) -> list[tuple[InboxSeq, InboxItem]]:
    """Up to ``limit`` items strictly after ``after``, in sequence order."""
    await read_head(tr, keys)
    if limit == 0:
        return []
    rows = await tr.get_range(*keys.inbox_after(after), limit=limit)
    return [(_seq_of(k, keys), envelope_item(v, "inbox entry")) for k, v in rows]


async def read_cursor(
    tr: kv.Transaction, keys: WorldKeys, *, snapshot: bool = False
) -> InboxCursor | None:
    """The cursor record (``None`` before the first drain); ``snapshot`` reads it without a
    conflict (the inbox compactor, which must not abort drains)."""
    raw = await tr.get(keys.inbox_cursor(), snapshot=snapshot)
    return None if raw is None else decode_record(InboxCursor, raw, "inbox cursor")


@kv.transactional
async def commit_cursor(
    tr: kv.Transaction, keys: WorldKeys, old: InboxSeq | None, new: InboxSeq, call: Call
) -> None:
    """Compare-and-swap the cursor from ``old`` to ``new`` (forward only). A retry whose
    earlier attempt committed succeeds, however far other drains moved the cursor since."""
    if old is not None and new <= old:
        raise Validation("new_cursor", f"cursor may only move forward: {new} <= {old}")
    if await calls.replayed(tr, keys, call) is not None:
        return
    # The world's meta never changes: a snapshot read, so appends do not abort the swap.
    if await tr.get(keys.meta(), snapshot=True) is None:
        raise WorldNotFound(keys.universe, keys.world)
    current = await read_cursor(tr, keys)
    current_seq = None if current is None else current.seq
    if current_seq == new:
        return
    if current_seq != old:
        raise CursorAdvanced(
            None if old is None else str(old), None if current_seq is None else str(current_seq)
        )
    # Items are immutable while above the cursor: a snapshot read, so in-flight enqueues
    # (whose versionstamped keys could land anywhere after their read version) do not abort.
    if await tr.get(keys.inbox_item(new), snapshot=True) is None:
        raise Validation("new_cursor", f"no inbox item has sequence {new}")
    tr.set(keys.inbox_cursor(), InboxCursor(new).to_cbor())
    await calls.record(tr, keys, call, "commit_cursor", seq=new)


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one drain moved: ``count`` items appended from height ``first_height``, the
    cursor after it (``None`` if the inbox was never drained and is empty), and whether
    items followed that cursor when the drain read the inbox (``more``: drain again; items
    enqueued since are not seen; ``None`` if not known, from a call record written before
    drains recorded it)."""

    first_height: int
    count: int
    cursor: InboxSeq | None
    more: bool | None = None


DRAIN_PAGE: Final = 64
"""Items read per range read of a drain, so a drain reads about ``max_bytes``, not
``max_items`` whole items."""


@dataclass(frozen=True, slots=True)
class DrainLimits:
    """How much one drain may take: ``max_items`` items of at most ``max_bytes`` of envelopes
    (at least one item), normalized entries of at most ``max_entry_bytes``, and a transaction
    counting at most ``budget`` bytes (``protocols/budget.py``)."""

    max_items: int
    max_bytes: int
    max_entry_bytes: int
    budget: int


@kv.transactional
async def drain(
    tr: kv.Transaction,
    keys: WorldKeys,
    limits: DrainLimits,
    normalize: Normalizer,
    call: Call,
) -> DrainResult:
    """Protocol D in one transaction: read cursor and head, read items after the cursor
    (within ``limits``), normalize them, append at the head, advance the cursor to the last
    drained item, and clear the world's ready mark if no item follows (see the module). If
    the entries would make the transaction count more than the budget, fewer items are
    drained; an entry that alone does not fit, or is longer than ``max_entry_bytes``, is
    ``Validation`` naming the normalizer (nothing is written).

    Conflicts are the ones the protocol needs: a drain that takes items reads the cursor and
    the head with a conflict (another drain, a cursor commit or an append aborts it), the
    items at snapshot isolation -- they are immutable, and every item committed after this
    drain's read version sorts after them, so concurrent enqueues never abort a drain (one
    that leaves the inbox empty clears the ready mark with ``compare_and_clear``, which
    reads nothing). A drain that takes nothing has no conflict at all. A retry whose
    earlier attempt committed returns that attempt's result (its call record)."""
    done = await calls.replayed(tr, keys, call)
    if done is not None:
        more = None if done.value is None else cbor.decode_stored(done.value, "drain record")
        if more is not None and not isinstance(more, bool):
            raise CorruptRecord("call record", "a drain record's value is not a boolean")
        return DrainResult(_required(done.first_height), _required(done.count), done.seq, more)
    result, _, wrote = await _drain_world(tr, keys, limits, normalize, budget.call_cost(keys), True)
    if wrote:
        await calls.record(
            tr,
            keys,
            call,
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


@kv.transactional
async def drain_worlds(
    tr: kv.Transaction,
    universe: UniverseKeys,
    worlds: Sequence[WorldKeys],
    limits: DrainLimits,
    normalize: Normalizer,
    call: Call,
) -> list[DrainResult]:
    """Protocol D for each of ``worlds`` (distinct worlds of ``universe``), in order, in one
    transaction: one durable commit for all. Each world's drain is :func:`drain`'s, with
    ``limits`` per world; the transaction's budget is shared, so a world reached when it is
    spent drains fewer items, possibly none (an entry that does not fit when nothing before
    it in the transaction drained an item is ``Validation`` naming the normalizer). A
    missing world is ``WorldNotFound``; nothing is written. The call record is kept in the
    universe's scope: a retry whose earlier attempt committed returns that attempt's results,
    whatever committed in between."""
    done = await calls.replayed(tr, universe, call)
    if done is not None:
        return _recorded_group(done, len(worlds))
    counted = budget.drain_group_cost(universe, len(worlds))
    results: list[DrainResult] = []
    wrote = False
    for keys in worlds:
        alone = not any(result.count for result in results)
        result, counted, changed = await _drain_world(tr, keys, limits, normalize, counted, alone)
        results.append(result)
        wrote |= changed
    if wrote:
        value = cbor.encode([[r.first_height, r.count, _raw(r.cursor), r.more] for r in results])
        await calls.record(tr, universe, call, GROUP_OP, count=len(worlds), value=value)
    return results


async def _drain_world(
    tr: kv.Transaction,
    keys: WorldKeys,
    limits: DrainLimits,
    normalize: Normalizer,
    counted: int,
    alone: bool,
) -> tuple[DrainResult, int, bool]:
    """One world's drain inside ``tr``, after ``counted`` bytes of the budget: its result,
    the bytes counted with it, and whether it wrote. It clears the ready mark when no item
    follows; with ``alone`` (no item drained before it in ``tr``) an entry that does not
    fit is ``Validation``, else the world drains fewer items."""
    # Cursor and head are read at snapshot isolation and get their conflicts only if the
    # world drains items: a world that drains nothing writes neither (an append or another
    # drain of it then aborts nothing, in a multi-world drain especially).
    cursor = await read_cursor(tr, keys, snapshot=True)
    head = await read_head(tr, keys, snapshot=True)
    after = None if cursor is None else cursor.seq
    first = head.height + 1
    taken, exhausted = await _take(tr, keys, after, limits)
    entries, counted = _normalized(keys, first, taken, normalize, limits, counted, alone)
    if entries:
        tr.add_read_conflict_key(keys.inbox_cursor())
        tr.add_read_conflict_key(keys.head())
        after = taken[len(entries) - 1][0]
        append_at(tr, keys, head, entries)
        tr.set(keys.inbox_cursor(), InboxCursor(after).to_cbor())
    if len(entries) < len(taken):
        more = True
    elif exhausted:
        more = False
    else:  # stopped at a limit: is there a next item? (a snapshot read: no conflict)
        more = bool(await tr.get_range(*keys.inbox_after(after), limit=1, snapshot=True))
    cleared = not more and await _clear_ready(tr, keys)
    return DrainResult(first, len(entries), after, more), counted, bool(entries) or cleared


async def _clear_ready(tr: kv.Transaction, keys: WorldKeys) -> bool:
    """Clear the ready mark of a world whose inbox this drain leaves empty, if no enqueue
    rewrites it before the commit; whether there was one. Every enqueue writes its own
    versionstamp there, so ``compare_and_clear`` with the value read keeps the mark of any
    enqueue committed after this transaction's read version -- without a conflict."""
    mark = keys.ready()
    seen = await tr.get(mark, snapshot=True)
    if seen is None:
        return False
    tr.compare_and_clear(mark, seen)
    return True


async def _take(
    tr: kv.Transaction, keys: WorldKeys, after: InboxSeq | None, limits: DrainLimits
) -> tuple[list[tuple[InboxSeq, InboxItem]], bool]:
    """The items after ``after`` within the item and byte limits (snapshot reads), and
    whether they are every item after it."""
    taken: list[tuple[InboxSeq, InboxItem]] = []
    size = 0
    begin, end = keys.inbox_after(after)
    while len(taken) < limits.max_items and size < limits.max_bytes:
        page = min(DRAIN_PAGE, limits.max_items - len(taken))
        rows = await tr.get_range(begin, end, limit=page, snapshot=True)
        for key, value in rows:
            if taken and size + len(value) > limits.max_bytes:
                return taken, False
            size += len(value)
            taken.append((_seq_of(key, keys), envelope_item(value, "inbox entry")))
        if len(rows) < page:
            return taken, True
        begin = rows[-1][0] + b"\x00"
    return taken, False


def _normalized(
    keys: WorldKeys,
    first: int,
    taken: list[tuple[InboxSeq, InboxItem]],
    normalize: Normalizer,
    limits: DrainLimits,
    counted: int,
    alone: bool,
) -> tuple[list[bytes], int]:
    """The journal entries of the longest prefix of ``taken`` that fits the budget after
    ``counted`` bytes, and the bytes counted with them."""
    cost = counted + budget.drain_world_cost(keys, first, [])
    entries: list[bytes] = []
    for seq, item in taken:
        try:
            entry = normalize(seq, item)
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


def _raw(seq: InboxSeq | None) -> bytes | None:
    return None if seq is None else seq.raw


def _recorded_group(done: CallRecord, worlds: int) -> list[DrainResult]:
    """The results an earlier attempt of a multi-world drain of ``worlds`` recorded."""
    rows = None if done.value is None else cbor.decode_stored(done.value, "drain group record")
    if done.op != GROUP_OP or not isinstance(rows, list) or len(rows) != worlds:
        raise CorruptRecord("call record", f"a {done.op!r} record for a drain of {worlds} worlds")
    results = []
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != 4
            or not all(type(n) is int and n >= 0 for n in row[:2])
            or not (row[2] is None or isinstance(row[2], bytes))
            or not isinstance(row[3], bool)
        ):
            raise CorruptRecord(
                "call record", "a drain group result is not [height, count, seq, more]"
            )
        try:
            cursor = None if row[2] is None else InboxSeq(row[2])
        except Validation as exc:
            raise CorruptRecord("call record", f"a drain group cursor: {exc}") from None
        results.append(DrainResult(row[0], row[1], cursor, row[3]))
    return results


def _required(value: int | None) -> int:
    if value is None:
        raise CorruptRecord("call record", "a drain record without its first height and count")
    return value
