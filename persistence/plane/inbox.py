"""Protocols C and D: the world inbox (commit-ordered enqueue, compare-and-swap cursor)
and the drain that moves items into the journal exactly once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from persistence import kv
from persistence.errors import (
    CorruptRecord,
    CursorAdvanced,
    PersistError,
    Validation,
    WorldNotFound,
)
from persistence.ids import InboxSeq
from persistence.keyspace import WorldKeys, seq_in_key
from persistence.plane import budget, calls
from persistence.plane.calls import Call
from persistence.plane.journal import append_at, read_head
from persistence.records import (
    CallRecord,
    InboxCursor,
    InboxEnvelope,
    InboxItem,
    decode_inbox_item,
    decode_record,
)

Normalizer = Callable[[InboxSeq, InboxItem], bytes]
"""Turns one drained inbox item into its canonical journal entry. Must be deterministic:
a drain retried after an unknown commit result normalizes the same items again."""

NOTIFY_INCREMENT = (1).to_bytes(8, "little")


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
def enqueue(
    tr: kv.Transaction,
    keys: WorldKeys,
    envelopes: Sequence[InboxEnvelope],
) -> PendingEnqueue:
    """Protocol C for a batch: versionstamped item keys (user version = position), an
    idempotency index entry per item, one atomic add to the notify counter."""
    # The world must exist. Its meta never changes, so a snapshot read suffices -- and
    # unlike the head (rewritten by every drain) it cannot make enqueues conflict with drains.
    if tr.get(keys.meta(), snapshot=True) is None:
        raise WorldNotFound(keys.universe, keys.world)
    known: dict[int, InboxSeq] = {}
    new: dict[int, int] = {}
    for index, envelope in enumerate(envelopes):
        if envelope.idempotency_key is None:
            raise Validation("idempotency_key", "every enqueued envelope carries one")
        idem_key = keys.inbox_idempotency(envelope.idempotency_key)
        existing = tr.get(idem_key)
        if existing is not None:
            known[index] = InboxSeq(existing)
            continue
        tr.set_versionstamped_key(keys.inbox_item_with_versionstamp(index), envelope.to_cbor())
        tr.set_versionstamped_value(
            idem_key, b"\x00" * 10 + index.to_bytes(2, "big") + (0).to_bytes(4, "little")
        )
        new[index] = index
    if new:
        tr.add(keys.notify_counter(), NOTIFY_INCREMENT)
    return PendingEnqueue(known, new, tr.get_versionstamp() if new else None)


def _seq_of(key: bytes, keys: WorldKeys) -> InboxSeq:
    return seq_in_key(key, keys.inbox_prefix_len(), f"inbox entry key of world {keys.world}")


@kv.transactional
def read_after(
    tr: kv.Transaction, keys: WorldKeys, after: InboxSeq | None, limit: int
) -> list[tuple[InboxSeq, InboxItem]]:
    """Up to ``limit`` items strictly after ``after``, in sequence order."""
    read_head(tr, keys)
    if limit == 0:
        return []
    rows = tr.get_range(*keys.inbox_after(after), limit=limit)
    return [
        (_seq_of(k, keys), decode_inbox_item(decode_record(InboxEnvelope, v, "inbox entry").item))
        for k, v in rows
    ]


def read_cursor(
    tr: kv.Transaction, keys: WorldKeys, *, snapshot: bool = False
) -> InboxCursor | None:
    """The cursor record (``None`` before the first drain); ``snapshot`` reads it without a
    conflict (the inbox compactor, which must not abort drains)."""
    raw = tr.get(keys.inbox_cursor(), snapshot=snapshot)
    return None if raw is None else decode_record(InboxCursor, raw, "inbox cursor")


@kv.transactional
def commit_cursor(
    tr: kv.Transaction, keys: WorldKeys, old: InboxSeq | None, new: InboxSeq, call: Call
) -> None:
    """Compare-and-swap the cursor from ``old`` to ``new`` (forward only). A retry whose
    earlier attempt committed succeeds, however far other drains moved the cursor since."""
    if old is not None and new <= old:
        raise Validation("new_cursor", f"cursor may only move forward: {new} <= {old}")
    if calls.replayed(tr, keys, call) is not None:
        return
    # The world's meta never changes: a snapshot read, so appends do not abort the swap.
    if tr.get(keys.meta(), snapshot=True) is None:
        raise WorldNotFound(keys.universe, keys.world)
    current = read_cursor(tr, keys)
    current_seq = None if current is None else current.seq
    if current_seq == new:
        return
    if current_seq != old:
        raise CursorAdvanced(
            None if old is None else str(old), None if current_seq is None else str(current_seq)
        )
    # Items are immutable while above the cursor: a snapshot read, so in-flight enqueues
    # (whose versionstamped keys could land anywhere after their read version) do not abort.
    if tr.get(keys.inbox_item(new), snapshot=True) is None:
        raise Validation("new_cursor", f"no inbox item has sequence {new}")
    tr.set(keys.inbox_cursor(), InboxCursor(new).to_cbor())
    calls.record(tr, keys, call, CallRecord("commit_cursor", seq=new))


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one drain moved: ``count`` items appended from height ``first_height``,
    and the cursor after it (``None`` if the inbox was never drained and is empty)."""

    first_height: int
    count: int
    cursor: InboxSeq | None


DRAIN_PAGE: Final = 64
"""Items read per range read of a drain, so a drain reads about ``max_bytes``, not
``max_items`` whole items."""


@dataclass(frozen=True, slots=True)
class DrainLimits:
    """How much one drain may take: ``max_items`` items of at most ``max_bytes`` of envelopes
    (at least one item), normalized entries of at most ``max_entry_bytes``, and a transaction
    counting at most ``budget`` bytes (``plane/budget.py``)."""

    max_items: int
    max_bytes: int
    max_entry_bytes: int
    budget: int


@kv.transactional
def drain(
    tr: kv.Transaction,
    keys: WorldKeys,
    limits: DrainLimits,
    normalize: Normalizer,
    call: Call,
) -> DrainResult:
    """Protocol D in one transaction: read cursor and head, read items after the cursor
    (within ``limits``), normalize them, append at the head, advance the cursor to the last
    drained item. If the entries would make the transaction count more than the budget,
    fewer items are drained; an entry that alone does not fit, or is longer than
    ``max_entry_bytes``, is ``Validation`` naming the normalizer (nothing is written).

    Conflicts are the ones the protocol needs: the cursor and the head are read with a
    conflict (another drain, a cursor commit or an append aborts this drain), the items at
    snapshot isolation -- they are immutable, and every item committed after this drain's
    read version sorts after them, so concurrent enqueues never abort a drain. A retry whose
    earlier attempt committed returns that attempt's result (its call record)."""
    done = calls.replayed(tr, keys, call)
    if done is not None:
        return DrainResult(_required(done.first_height), _required(done.count), done.seq)
    cursor = read_cursor(tr, keys)
    head = read_head(tr, keys)
    after = None if cursor is None else cursor.seq
    taken = _take(tr, keys, after, limits)
    if not taken:
        return DrainResult(head.height + 1, 0, after)
    first = head.height + 1
    entries = _normalized(keys, first, taken, normalize, limits)
    taken = taken[: len(entries)]
    append_at(tr, keys, head, entries)
    last_seq = taken[-1][0]
    tr.set(keys.inbox_cursor(), InboxCursor(last_seq).to_cbor())
    calls.record(
        tr, keys, call, CallRecord("drain", first_height=first, count=len(taken), seq=last_seq)
    )
    return DrainResult(first, len(taken), last_seq)


def _take(
    tr: kv.Transaction, keys: WorldKeys, after: InboxSeq | None, limits: DrainLimits
) -> list[tuple[InboxSeq, InboxItem]]:
    """The items after ``after`` within the item and byte limits (snapshot reads)."""
    taken: list[tuple[InboxSeq, InboxItem]] = []
    size = 0
    begin, end = keys.inbox_after(after)
    while len(taken) < limits.max_items and size < limits.max_bytes:
        page = min(DRAIN_PAGE, limits.max_items - len(taken))
        rows = tr.get_range(begin, end, limit=page, snapshot=True)
        for key, value in rows:
            if taken and size + len(value) > limits.max_bytes:
                return taken
            size += len(value)
            envelope = decode_record(InboxEnvelope, value, "inbox entry")
            taken.append((_seq_of(key, keys), decode_inbox_item(envelope.item)))
        if len(rows) < page:
            break
        begin = rows[-1][0] + b"\x00"
    return taken


def _normalized(
    keys: WorldKeys,
    first: int,
    taken: list[tuple[InboxSeq, InboxItem]],
    normalize: Normalizer,
    limits: DrainLimits,
) -> list[bytes]:
    """The journal entries of the longest prefix of ``taken`` that fits the budget."""
    fixed = budget.drain_cost(keys, first, [])
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
        fixed += budget.entries_cost(keys, first + len(entries), [entry])
        if fixed > limits.budget:
            if not entries:
                budget.check(fixed, limits.budget, "normalize", f"the journal entry of item {seq}")
            break
        entries.append(entry)
    return entries


def _required(value: int | None) -> int:
    if value is None:
        raise CorruptRecord("call record", "a drain record without its first height and count")
    return value
