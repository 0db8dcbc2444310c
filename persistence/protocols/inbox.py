"""Protocol C: the world inbox -- commit-ordered enqueue with idempotency keys, the
compare-and-swap cursor -- and the pending-work index that tells drain workers which worlds
have items (Protocol D, the drain, is :mod:`persistence.protocols.drain`).

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from persistence import fdbtuple, kv
from persistence.errors import (
    CorruptRecord,
    CursorAdvanced,
    IdempotencyKeyReused,
    Validation,
    WorldNotFound,
)
from persistence.ids import InboxSeq, WorldId
from persistence.inbox_records import (
    InboxCursor,
    InboxItem,
    envelope_fingerprint,
    envelope_item,
    idempotency_entry,
)
from persistence.keyspace import UniverseKeys, WorldKeys, seq_in_key
from persistence.protocols import calls
from persistence.protocols.calls import Call
from persistence.protocols.journal import decode_head, read_head
from persistence.records import decode_record

NOTIFY_INCREMENT = (1).to_bytes(8, "little")
READY_VALUE: Final = bytes(10) + (0).to_bytes(4, "little")
"""A ready mark as an enqueue writes it: the enqueue's versionstamp, set at commit."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    """One item's outcome of an enqueue: its sequence, and whether it was a ``repeat`` --
    its idempotency key held this item and no attempt of the call wrote it, so the call
    stored nothing for it. Not a repeat: an attempt of the call wrote the item, and it is
    stored once (by that attempt, or -- if that attempt did not commit -- by a concurrent
    call with the same key and item: one request either way)."""

    seq: InboxSeq
    repeat: bool


@dataclass(frozen=True, slots=True)
class PendingEnqueue:
    """What an enqueue transaction did: sequences already known (idempotent repeats) and
    the user versions of new items, whose sequences are known after commit."""

    known: dict[int, InboxSeq]
    new: dict[int, int]
    stamp: kv.VersionstampFuture | None

    async def seqs(self, count: int) -> list[InboxSeq]:
        """Every item's sequence, in call order (await after the commit)."""
        stamp = await self.stamp if self.new and self.stamp is not None else b""
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
    call: Call | None = None,
    drawn: frozenset[int] = frozenset(),
    world_known: bool = False,
    wrote: set[int] | None = None,
) -> PendingEnqueue:
    """Protocol C for a batch of ``(idempotency key or None, stored InboxEnvelope)``:
    versionstamped item keys (user version = position), an idempotency index entry per item
    that carries a key (the item's sequence and its envelope's fingerprint: a key already
    held for another item is ``IdempotencyKeyReused``, the same item returns the first
    sequence), one atomic add to the notify counter and the world's ready mark (a
    blind versionstamped write, see the module). ``drawn``: the positions whose key this
    call drew at random -- no one else knows it, so the first attempt does not read its
    entry (a retry does: an earlier attempt may have committed). One wave of reads: the
    world's meta and the idempotency entries. Without ``call`` every attempt reads every
    entry. ``world_known``: the caller has seen the world exist (worlds are never deleted),
    so its meta is not read -- a keyless enqueue then reads nothing at all. ``wrote``: every
    attempt adds the positions it writes an item for (a position the committed attempt
    found held and that no attempt wrote is a repeat: the call stored nothing for it)."""
    first = call is not None and calls.next_attempt(call)
    # The world must exist. Its meta never changes, so a snapshot read suffices -- and
    # unlike the head (rewritten by every drain) it cannot make enqueues conflict with drains.
    meta = None if world_known else tr.get(keys.meta(), snapshot=True)
    looked = [
        index
        for index, (key, _) in enumerate(envelopes)
        if key is not None and not (first and index in drawn)
    ]
    read = tr.get_many([keys.inbox_idempotency(envelopes[i][0] or b"") for i in looked])
    if meta is not None and await meta is None:
        raise WorldNotFound(keys.universe, keys.world)
    existing = dict(zip(looked, await read, strict=True))
    known: dict[int, InboxSeq] = {}
    new: dict[int, int] = {}
    for index, (idempotency_key, envelope) in enumerate(envelopes):
        idem_key = None
        if idempotency_key is not None:
            idem_key = keys.inbox_idempotency(idempotency_key)
            fingerprint = envelope_fingerprint(envelope)
            stored = existing.get(index)
            if stored is not None:
                seq, kept = idempotency_entry(stored, f"idempotency entry of world {keys.world}")
                if kept is not None and kept != fingerprint:
                    raise IdempotencyKeyReused(keys.world, idempotency_key, str(seq))
                known[index] = seq
                continue
        tr.set_versionstamped_key(keys.inbox_item_with_versionstamp(index), envelope)
        if wrote is not None:
            wrote.add(index)
        if idem_key is not None:
            # the versionstamp fills the first ten bytes; the user version and the
            # fingerprint follow (records.IDEMPOTENCY_ENTRY_BYTES in all)
            stamp_at = (0).to_bytes(4, "little")
            value = bytes(10) + index.to_bytes(2, "big") + fingerprint + stamp_at
            tr.set_versionstamped_value(idem_key, value)
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


def seq_of(key: bytes, keys: WorldKeys) -> InboxSeq:
    """The sequence of the inbox item at ``key``; ``CorruptRecord`` naming the world if the
    key holds none (the name is built only then: drains call this for every item)."""
    try:
        return seq_in_key(key, keys.inbox_prefix_len(), "inbox entry key")
    except CorruptRecord as exc:
        raise CorruptRecord(f"inbox entry key of world {keys.world}", exc.problem) from None


@kv.transactional
async def read_after(
    tr: kv.Transaction, keys: WorldKeys, after: InboxSeq | None, limit: int
) -> list[tuple[InboxSeq, InboxItem]]:
    """Up to ``limit`` items strictly after ``after``, in sequence order (``WorldNotFound``
    if the world does not exist). One wave: the head with the items."""
    head = tr.get(keys.head())
    rows_read = tr.get_range(*keys.inbox_after(after), limit=limit) if limit else None
    decode_head(keys, await head)
    if rows_read is None:
        return []
    return [(seq_of(k, keys), envelope_item(v, "inbox entry")) for k, v in await rows_read]


async def read_cursor(
    tr: kv.Transaction, keys: WorldKeys, *, snapshot: bool = False
) -> InboxCursor | None:
    """The cursor record (``None`` before the first drain); ``snapshot`` reads it without a
    conflict (the inbox compactor, which must not abort drains)."""
    return read_cursor_record(await tr.get(keys.inbox_cursor(), snapshot=snapshot))


def read_cursor_record(raw: bytes | None) -> InboxCursor | None:
    """The cursor record stored as ``raw``."""
    return None if raw is None else decode_record(InboxCursor, raw, "inbox cursor")


@kv.transactional
async def commit_cursor(
    tr: kv.Transaction, keys: WorldKeys, old: InboxSeq | None, new: InboxSeq, call: Call
) -> None:
    """Compare-and-swap the cursor from ``old`` to ``new`` (forward only). A retry whose
    earlier attempt committed succeeds, however far other drains moved the cursor since."""
    if old is not None and new <= old:
        raise Validation("new_cursor", f"cursor may only move forward: {new} <= {old}")
    opening = calls.begin(tr, keys, call)
    # The world's meta never changes: a snapshot read, so appends do not abort the swap.
    # Items are immutable while above the cursor: a snapshot read, so in-flight enqueues
    # (whose versionstamped keys could land anywhere after their read version) do not abort.
    # One wave: meta, cursor, the item, the call's own reads.
    meta = tr.get(keys.meta(), snapshot=True)
    cursor = tr.get(keys.inbox_cursor())
    item = tr.get(keys.inbox_item(new), snapshot=True)
    if await calls.replayed(opening) is not None:
        return
    if await meta is None:
        raise WorldNotFound(keys.universe, keys.world)
    current = read_cursor_record(await cursor)
    current_seq = None if current is None else current.seq
    if current_seq == new:
        return
    if current_seq != old:
        raise CursorAdvanced(
            None if old is None else str(old), None if current_seq is None else str(current_seq)
        )
    if await item is None:
        raise Validation("new_cursor", f"no inbox item has sequence {new}")
    tr.set(keys.inbox_cursor(), InboxCursor(new).to_cbor())
    calls.record(opening, "commit_cursor", seq=new)
