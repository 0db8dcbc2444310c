"""The oracle's journal (Protocol B): appends, group commits, reads, and the bytes a
backend must hold for each entry."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from conformance.model_core import ModelCore
from conformance.model_values import (
    IngressEntry,
    JournalEntry,
    RawEntry,
    SnapshotEntry,
)
from persistence.errors import HeadAdvanced, Validation
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.journal_records import (
    BaselineSnapshotJournalRecord,
    IngressJournalRecord,
    SnapshotJournalRecord,
)
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import EMPTY_MANIFEST, GENESIS_STATE
from persistence.protocols import budget
from persistence.protocols.journal import Creation
from persistence.records import CasMeta, SnapshotRecord, WorldMeta


class JournalModel(ModelCore):
    """Each world's journal, as the plane's contracts state it."""

    def _check_entries(self, entries: Sequence[bytes], name: str) -> None:
        if not entries:
            raise Validation(name, "a batch needs at least one entry")
        if len(entries) > self.config.max_batch_entries:
            raise Validation(name, f"{len(entries)} entries > max {self.config.max_batch_entries}")
        total = 0
        for index, entry in enumerate(entries):
            if not isinstance(entry, bytes):
                raise Validation(f"{name}[{index}]", "entries are bytes")
            if len(entry) > self.config.max_entry_bytes:
                raise Validation(f"{name}[{index}]", "entry over the size limit")
            total += len(entry)
        if total > self.config.max_batch_bytes:
            raise Validation(name, f"batch of {total} bytes > max {self.config.max_batch_bytes}")

    def append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Append ``entries`` after ``expected_head``; return the first new height."""
        self._check_height(expected_head, "expected_head")
        self._check_entries(entries, "entries")
        batch = list(entries)
        budget.check(
            budget.append_cost(WorldKeys(universe, world), expected_head + 1, batch),
            self.budget,
            "entries",
            "the batch",
        )
        state = self._world(universe, world)
        if state.head != expected_head:
            raise HeadAdvanced(expected_head, state.head, world)
        first = state.head + 1
        state.journal.extend(RawEntry(bytes(entry)) for entry in entries)
        return first

    def append_batches(
        self,
        universe: UniverseId,
        batches: Sequence[tuple[WorldId, int, Sequence[bytes]]],
        *,
        create_missing: bool = False,
    ) -> list[int]:
        """Group commit: every ``(world, expected_head, entries)`` appended, or none; a
        missing world expecting head 0 created first with ``create_missing``."""
        if not 1 <= len(batches) <= self.config.max_batch_entries:
            raise Validation("batches", f"{len(batches)} batches")
        seen: set[WorldId] = set()
        for index, (world, expected_head, entries) in enumerate(batches):
            if world in seen:
                raise Validation(f"batches[{index}].world", "two batches for one world")
            seen.add(world)
            self._check_height(expected_head, f"batches[{index}].expected_head")
            self._check_entries(entries, f"batches[{index}].entries")
        count = sum(len(entries) for _, _, entries in batches)
        size = sum(len(entry) for _, _, entries in batches for entry in entries)
        if count > self.config.max_batch_entries or size > self.config.max_batch_bytes:
            raise Validation("batches", f"{count} entries of {size} bytes")
        genesis = SnapshotRecord(
            Hash.of(GENESIS_STATE), 0, 0, Hash.of(EMPTY_MANIFEST), receipt_horizon_height=0
        )
        creation = Creation(
            WorldMeta(created_ns=time.time_ns()),
            genesis,
            tuple(
                (Hash.of(body), CasMeta(size=len(body), inline_bytes=body))
                for body in (GENESIS_STATE, EMPTY_MANIFEST)
                if len(body) <= self.config.inline_threshold
            ),
        )
        cost = budget.group_append_cost(
            UniverseKeys(universe),
            [(WorldKeys(universe, w), head + 1, list(entries)) for w, head, entries in batches],
            creation if create_missing else None,
        )
        budget.check(cost, self.budget, "batches", "the group")
        created: list[WorldId] = []
        for world, expected_head, _ in batches:
            if (universe, world) not in self.worlds and create_missing and expected_head == 0:
                created.append(world)
                continue
            head = self._world(universe, world).head
            if head != expected_head:
                raise HeadAdvanced(expected_head, head, world)
        for world in created:
            self.create_world(universe, world)
        firsts = []
        for world, _, entries in batches:
            state = self._world(universe, world)
            firsts.append(state.head + 1)
            state.journal.extend(RawEntry(bytes(entry)) for entry in entries)
        return firsts

    def read_range(
        self, universe: UniverseId, world: WorldId, from_inclusive: int, limit: int
    ) -> list[tuple[int, JournalEntry]]:
        """Up to ``limit`` entries from ``from_inclusive`` (fewer only at the head)."""
        self._check_height(from_inclusive, "from_inclusive", allow_zero=False)
        if limit < 0:
            raise Validation("limit", "must not be negative")
        state = self._world(universe, world)
        last = min(state.head, from_inclusive + limit - 1)
        return [(height, state.journal[height - 1]) for height in range(from_inclusive, last + 1)]

    def head(self, universe: UniverseId, world: WorldId) -> int:
        """The journal head (0 when empty)."""
        return self._world(universe, world).head

    def expected_entry_bytes(
        self,
        universe: UniverseId,
        world: WorldId,
        entry: JournalEntry,
        seq_of: Callable[[int], InboxSeq],
    ) -> bytes:
        """The exact bytes a backend must hold for ``entry``; ``seq_of`` maps an item
        position of this world to the real sequence the backend returned for it."""
        if isinstance(entry, RawEntry):
            return entry.data
        if isinstance(entry, IngressEntry):
            item = self._world(universe, world).items[entry.index]
            return IngressJournalRecord(seq_of(entry.index), item.encoded).to_cbor()
        if isinstance(entry, SnapshotEntry):
            return SnapshotJournalRecord.of(entry.record).to_cbor()
        return BaselineSnapshotJournalRecord.of(entry.record).to_cbor()
