"""The oracle's inbox (Protocols C and D): enqueues with idempotency keys, reads, the
cursor, and drains into the journal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from conformance.model_core import ModelCore
from conformance.model_values import (
    OWN_KEY,
    IngressEntry,
    ModelDrainResult,
    ModelItem,
    SeqRef,
    envelope_size,
    label_of,
)
from persistence.errors import CursorAdvanced, IdempotencyKeyReused, Validation
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxItem, encode_inbox_item
from persistence.journal_records import IngressJournalRecord
from persistence.keyspace import WorldKeys
from persistence.kv import MAX_VALUE_SIZE
from persistence.protocols import budget
from persistence.sizes import MiB

MAX_IDEMPOTENCY_KEY: Final = 256
MAX_ENQUEUE_ITEMS: Final = 65_536
"""A batch's items share one versionstamp and are told apart by a 2-byte user version."""


class InboxModel(ModelCore):
    """Each world's inbox, idempotency keys and cursor, as the plane's contracts state them."""

    def enqueue(
        self,
        universe: UniverseId,
        world: WorldId,
        item: InboxItem,
        *,
        idempotency_key: bytes | None = None,
    ) -> SeqRef:
        """Enqueue one item (see :meth:`enqueue_batch`)."""
        keys = None if idempotency_key is None else [idempotency_key]
        return self.enqueue_batch(universe, world, [item], idempotency_keys=keys)[0]

    def enqueue_batch(
        self,
        universe: UniverseId,
        world: WorldId,
        items: Sequence[InboxItem],
        *,
        idempotency_keys: Sequence[bytes] | None = None,
    ) -> list[SeqRef]:
        """Enqueue ``items`` atomically and in order; return their positions.

        An item whose caller key the world has seen returns the first item's position and
        stores nothing (a different item under that key refuses the whole batch:
        ``IdempotencyKeyReused``); the other items of the batch are stored after every
        earlier item.
        """
        if not items:
            raise Validation("items", "a batch needs at least one item")
        if len(items) > min(self.config.max_batch_entries, MAX_ENQUEUE_ITEMS):
            raise Validation("items", f"{len(items)} items > max {self.config.max_batch_entries}")
        if idempotency_keys is not None and len(idempotency_keys) != len(items):
            raise Validation("idempotency_keys", "one key per item")
        keys: list[bytes | None] = list(idempotency_keys) if idempotency_keys else []
        for key in keys:
            if not isinstance(key, bytes) or not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
                raise Validation("idempotency_key", "1 to 256 bytes")
        if len(set(keys)) != len(keys):
            raise Validation("idempotency_keys", "duplicate key within one batch")
        if not keys:
            keys = [None] * len(items)
        encoded = [encode_inbox_item(item) for item in items]
        total = sum(len(e) for e in encoded)
        if total > self.config.max_batch_bytes:
            raise Validation("items", f"batch larger than {self.config.max_batch_bytes} bytes")
        # limits count the key a keyless item gets where commits may end unknown, on every
        # engine; a drain's max_bytes counts what is stored
        counted = [key or OWN_KEY for key in keys]
        sizes = [envelope_size(item, key) for item, key in zip(items, counted, strict=True)]
        for index, size in enumerate(sizes):
            if size > MAX_VALUE_SIZE:
                raise Validation(f"items[{index}]", "over FoundationDB's value limit")
        budget.check(
            budget.enqueue_cost(WorldKeys(universe, world), list(zip(counted, sizes, strict=True))),
            self.budget,
            "items",
            "the batch",
        )
        state = self._world(universe, world)
        for data, key in zip(encoded, keys, strict=True):  # refused before anything is stored
            if key is None or key not in state.idempotency:
                continue
            first = state.idempotency[key]
            if state.items[first].encoded != data:
                raise IdempotencyKeyReused(world, key, f"position {first}")
        group = state.groups
        out: list[SeqRef] = []
        stored = False
        for item, data, key in zip(items, encoded, keys, strict=True):
            if key is not None and key in state.idempotency:
                out.append(SeqRef(state.idempotency[key]))
                continue
            index = len(state.items)
            size = envelope_size(item, self.own_key if key is None else key)
            state.items.append(ModelItem(item, data, size, group))
            if key is not None:
                state.idempotency[key] = index
            out.append(SeqRef(index))
            stored = True
        if stored:
            state.groups += 1
        return out

    def ghost_after(self, universe: UniverseId, world: WorldId, index: int) -> SeqRef:
        """The position of a sequence that names no item and sorts right after the
        versionstamp of item ``index``: after every item of the same enqueue call (they
        share the versionstamp) and before the next call's items."""
        state = self._world(universe, world)
        group = state.items[index].group
        last = max(i for i, stored in enumerate(state.items) if stored.group == group)
        return SeqRef(last, ghost=True)

    def read_after(
        self, universe: UniverseId, world: WorldId, after_exclusive: SeqRef | None, limit: int
    ) -> list[tuple[SeqRef, InboxItem]]:
        """Up to ``limit`` items strictly after ``after_exclusive``, in order.

        As the contract says ("up to ``limit``"), ``limit`` 0 returns nothing and a
        negative limit is ``Validation`` (as for ``read_range``)."""
        if limit < 0:
            raise Validation("limit", "must not be negative")
        state = self._world(universe, world)
        out: list[tuple[SeqRef, InboxItem]] = []
        for index, stored in enumerate(state.items):
            if len(out) >= limit:
                break
            ref = SeqRef(index)
            if after_exclusive is None or ref > after_exclusive:
                out.append((ref, stored.item))
        return out

    def inbox_cursor(self, universe: UniverseId, world: WorldId) -> SeqRef | None:
        """The drained boundary (``None`` before the first drain or cursor commit)."""
        state = self._world(universe, world)
        return self._ref(state.cursor)

    def commit_cursor(
        self,
        universe: UniverseId,
        world: WorldId,
        old_cursor: SeqRef | None,
        new_cursor: SeqRef,
    ) -> None:
        """Compare-and-swap the cursor forward.

        Order of checks: ``new <= old`` is ``Validation``; a missing world ``NotFound``;
        a cursor already at ``new`` succeeds (a recognised repeat); a cursor other than
        ``old`` is ``CursorAdvanced``; a ``new`` naming no item is ``Validation``."""
        if old_cursor is not None and new_cursor <= old_cursor:
            raise Validation("new_cursor", "cursor may only move forward")
        state = self._world(universe, world)
        current = self._ref(state.cursor)
        if current == new_cursor:
            return
        if current != old_cursor:
            raise CursorAdvanced(label_of(old_cursor), label_of(current))
        if new_cursor.ghost or not 0 <= new_cursor.index < len(state.items):
            raise Validation("new_cursor", f"no inbox item has sequence {new_cursor.label}")
        state.cursor = new_cursor.index

    def drain_inbox_to_journal(
        self,
        universe: UniverseId,
        world: WorldId,
        max_items: int = 1_000,
        max_bytes: int = MiB,
    ) -> ModelDrainResult:
        """Protocol D with the default normalizer: append one ``ingress`` record per item
        after the cursor (at least one, then while ``max_items`` and ``max_bytes`` of
        stored envelopes allow) and advance the cursor to the last one."""
        if not 1 <= max_items <= self.config.max_batch_entries:
            raise Validation("max_items", f"between 1 and {self.config.max_batch_entries}")
        if not 1 <= max_bytes <= self.config.max_batch_bytes:
            raise Validation("max_bytes", f"between 1 and {self.config.max_batch_bytes}")
        state = self._world(universe, world)
        start = 0 if state.cursor is None else state.cursor + 1
        taken: list[int] = []
        size = 0
        for index in range(start, min(len(state.items), start + max_items)):
            size += state.items[index].envelope_size
            if taken and size > max_bytes:
                break
            taken.append(index)
        if not taken:
            return ModelDrainResult(state.head + 1, 0, self._ref(state.cursor))
        first = state.head + 1
        taken = self._within_budget(universe, world, first, taken)
        state.journal.extend(IngressEntry(index) for index in taken)
        state.cursor = taken[-1]
        return ModelDrainResult(first, len(taken), SeqRef(taken[-1]))

    def _within_budget(
        self, universe: UniverseId, world: WorldId, first: int, taken: list[int]
    ) -> list[int]:
        """The longest prefix of ``taken`` whose journal entries fit the budget (only their
        lengths count: an ``ingress`` record's is fixed by its item's)."""
        state = self._world(universe, world)
        keys = WorldKeys(universe, world)
        cost = budget.drain_cost(keys, first, [])
        kept: list[int] = []
        for index in taken:
            item = state.items[index]
            entry = IngressJournalRecord(InboxSeq(bytes(12)), item.encoded).to_cbor()
            cost += budget.entries_cost(keys, first + len(kept), [entry])
            if cost > self.budget:
                if not kept:
                    budget.check(cost, self.budget, "normalize", "the journal entry")
                break
            kept.append(index)
        return kept
