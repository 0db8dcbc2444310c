"""Protocols C and D: the world inbox (commit-ordered enqueue, compare-and-swap cursor)
and the drain that moves items into the journal exactly once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from persistence import kv
from persistence.errors import CorruptRecord, CursorAdvanced, Validation, WorldNotFound
from persistence.ids import InboxSeq
from persistence.keyspace import WorldKeys, seq_in_key
from persistence.plane.journal import append_at, read_head
from persistence.records import (
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


def read_cursor(tr: kv.Transaction, keys: WorldKeys) -> InboxCursor | None:
    """The cursor record (``None`` before the first drain)."""
    raw = tr.get(keys.inbox_cursor())
    return None if raw is None else decode_record(InboxCursor, raw, "inbox cursor")


@kv.transactional
def commit_cursor(tr: kv.Transaction, keys: WorldKeys, old: InboxSeq | None, new: InboxSeq) -> None:
    """Compare-and-swap the cursor forward; a repeat of a swap that committed succeeds."""
    if old is not None and new <= old:
        raise Validation("new_cursor", f"cursor may only move forward: {new} <= {old}")
    read_head(tr, keys)
    current = read_cursor(tr, keys)
    current_seq = None if current is None else current.seq
    if current_seq == new:
        return
    if current_seq != old:
        raise CursorAdvanced(
            None if old is None else str(old), None if current_seq is None else str(current_seq)
        )
    if tr.get(keys.inbox_item(new)) is None:
        raise Validation("new_cursor", f"no inbox item has sequence {new}")
    tr.set(keys.inbox_cursor(), InboxCursor(new).to_cbor())


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one drain moved: ``count`` items appended from height ``first_height``,
    and the cursor after it (``None`` if the inbox was never drained and is empty)."""

    first_height: int
    count: int
    cursor: InboxSeq | None


@kv.transactional
def drain(
    tr: kv.Transaction,
    keys: WorldKeys,
    max_items: int,
    max_bytes: int,
    normalize: Normalizer,
    drain_id: bytes,
) -> DrainResult:
    """Protocol D in one transaction: read cursor and head, read items after the cursor,
    normalize them, append at the head, advance the cursor to the last drained item.

    Items are read at snapshot isolation and then a read conflict is declared over exactly
    the drained keys: concurrent enqueues (which sort after them) do not abort the drain,
    while a concurrent drain or append does (through the cursor and head reads)."""
    cursor = read_cursor(tr, keys)
    if cursor is not None and cursor.drain_id == drain_id:
        if cursor.drain_first is None or cursor.drain_count is None:
            raise CorruptRecord("inbox cursor", "a drain id without its first height and count")
        return DrainResult(cursor.drain_first, cursor.drain_count, cursor.seq)
    head = read_head(tr, keys)
    after = None if cursor is None else cursor.seq
    rows = tr.get_range(*keys.inbox_after(after), limit=max_items, snapshot=True)
    taken: list[tuple[bytes, InboxSeq, InboxItem]] = []
    size = 0
    for key, value in rows:
        size += len(value)
        if taken and size > max_bytes:
            break
        envelope = decode_record(InboxEnvelope, value, "inbox entry")
        taken.append((key, _seq_of(key, keys), decode_inbox_item(envelope.item)))
    if not taken:
        return DrainResult(head.height + 1, 0, after)
    tr.add_read_conflict_range(taken[0][0], taken[-1][0] + b"\x00")
    entries = [normalize(seq, item) for _, seq, item in taken]
    first = append_at(tr, keys, head, entries, drain_id)
    last_seq = taken[-1][1]
    tr.set(keys.inbox_cursor(), InboxCursor(last_seq, drain_id, first, len(taken)).to_cbor())
    return DrainResult(first, len(taken), last_seq)
