"""Protocol D: the drain that moves a world's inbox items into its journal exactly once,
advancing the cursor in the same transaction -- for one world, or for several worlds of a
universe in one transaction -- and clears the world's ready mark when it leaves the inbox
empty (the mark's rules: :mod:`persistence.protocols.inbox`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from persistence import cbor, kv
from persistence.errors import CorruptRecord, PersistError, Validation
from persistence.ids import InboxSeq
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.protocols import budget, calls
from persistence.protocols.calls import Call
from persistence.protocols.inbox import read_cursor, seq_of
from persistence.protocols.journal import append_at, read_head
from persistence.records import CallRecord, InboxCursor, InboxItem, envelope_item

Normalizer = Callable[[InboxSeq, InboxItem], bytes]
"""Turns one drained inbox item into its canonical journal entry. Must be deterministic:
a drain retried after an unknown commit result normalizes the same items again."""


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
            taken.append((seq_of(key, keys), envelope_item(value, "inbox entry")))
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
