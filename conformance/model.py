"""An oracle of the plane's contracts in pure Python: what every backend must answer.

:class:`ContractModel` keeps, in plain dictionaries and lists, everything a caller of
:mod:`persistence.contracts` (and of :class:`persistence.plane.Plane`'s facade) can observe:
the CAS of each universe, each world's journal, inbox, idempotency keys, cursor, snapshot
index and active baseline. Each method takes the same arguments as the plane's and returns
the result the plane must return, or raises the :mod:`persistence.errors` exception (same
class, same distinguishing attributes) the plane must raise, checked in the same order.
A differential test drives a real backend and the model in lockstep and compares them.

The model cannot know versionstamps, so inbox sequences are abstract: a :class:`SeqRef`
is a position in a world's inbox *order* (the order of enqueue calls, which for a single
caller is commit order). The test maps the real sequences a backend returns onto
positions by order of appearance, and compares order and content, never sequence bytes.
For the same reason journal entries written by the plane itself are kept as
:data:`JournalEntry` values; :meth:`ContractModel.expected_entry_bytes` renders one with the
real sequences once the test knows them.

Two things are modelled from the plane's documented storage choices rather than from the
contracts alone: a drain's ``max_bytes`` budget counts the stored inbox envelope of each
item (:func:`envelope_size`), and the genesis snapshot is the plane's default
(``cbor.encode(None)`` with an empty manifest).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from persistence import cbor
from persistence.errors import (
    BaselineRegression,
    CursorAdvanced,
    HeadAdvanced,
    IdempotencyKeyReused,
    NotFound,
    ReceiptHorizonFence,
    RootIncomplete,
    SnapshotMismatch,
    Validation,
    WorldExists,
    WorldNotFound,
)
from persistence.ids import MAX_HEIGHT, Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxEnvelope, InboxItem, encode_inbox_item
from persistence.journal_records import (
    BaselineSnapshotJournalRecord,
    IngressJournalRecord,
    SnapshotJournalRecord,
)
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.kv import MAX_TRANSACTION_SIZE, MAX_VALUE_SIZE
from persistence.plane import (
    EMPTY_MANIFEST,
    GENESIS_STATE,
    OWN_KEY_BYTES,
    PlaneConfig,
    SnapshotOutcome,
)
from persistence.protocols import budget
from persistence.protocols.journal import Creation
from persistence.records import CasMeta, SnapshotRecord, WorldMeta
from persistence.sizes import MiB

OWN_KEY: Final = bytes(OWN_KEY_BYTES)
"""Stands for the random idempotency key the plane draws for an item enqueued without one
(only its length matters)."""

MAX_IDEMPOTENCY_KEY: Final = 256
MAX_ENQUEUE_ITEMS: Final = 65_536
"""A batch's items share one versionstamp and are told apart by a 2-byte user version."""


# --------------------------------------------------------------------------- sequences


@dataclass(frozen=True, slots=True, order=True)
class SeqRef:
    """An abstract inbox sequence: a position in one world's inbox order.

    ``SeqRef(i)`` is the sequence of the world's ``i``-th enqueued item (0-based).
    ``SeqRef(i, ghost=True)`` is a sequence that names no item and sorts just after item
    ``i`` and before item ``i + 1``; ``SeqRef(-1, ghost=True)`` sorts before every item.
    The dataclass order is the sequence order.
    """

    index: int
    ghost: bool = False

    @property
    def label(self) -> str:
        """A stable text form: ``#3`` for item 3, ``#3+`` for the gap after it."""
        return f"#{self.index}{'+' if self.ghost else ''}"


BEFORE_ALL: Final = SeqRef(-1, ghost=True)
"""A sequence that sorts before every item (the real all-zero sequence)."""


def label_of(ref: SeqRef | None) -> str | None:
    """The label of ``ref`` (``None`` for no sequence), as the model puts it in errors."""
    return None if ref is None else ref.label


def envelope_size(item: InboxItem, idempotency_key: bytes | None) -> int:
    """Bytes of the stored inbox envelope of ``item`` with ``idempotency_key`` (``None``:
    none): what a drain's ``max_bytes`` counts."""
    return len(InboxEnvelope(encode_inbox_item(item), idempotency_key).to_cbor())


# --------------------------------------------------------------------------- journal entries


@dataclass(frozen=True, slots=True)
class RawEntry:
    """An entry a caller appended with ``append_batch`` (opaque bytes)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class IngressEntry:
    """The default normalization of drained inbox item ``index`` (an ``ingress`` record)."""

    index: int


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """The ``snapshot`` record a snapshot commit appends when it indexes ``record``."""

    record: SnapshotRecord


@dataclass(frozen=True, slots=True)
class BaselineEntry:
    """The ``baseline_snapshot`` record appended when ``record`` becomes the baseline."""

    record: SnapshotRecord


JournalEntry = RawEntry | IngressEntry | SnapshotEntry | BaselineEntry


# --------------------------------------------------------------------------- model state


@dataclass(frozen=True, slots=True)
class ModelItem:
    """One enqueued inbox item, as the model keeps it."""

    item: InboxItem
    encoded: bytes
    envelope_size: int
    group: int
    """Ordinal of the enqueue call (one transaction, one versionstamp) that stored it."""


@dataclass(frozen=True, slots=True)
class ModelDrainResult:
    """The expected :class:`~persistence.protocols.drain.DrainResult`, with an abstract cursor."""

    first_height: int
    count: int
    cursor: SeqRef | None


@dataclass(slots=True)
class ModelWorld:
    """Everything observable about one world."""

    genesis: SnapshotRecord
    journal: list[JournalEntry] = field(default_factory=list)
    items: list[ModelItem] = field(default_factory=list)
    idempotency: dict[bytes, int] = field(default_factory=dict)
    cursor: int | None = None
    snapshots: dict[int, SnapshotRecord] = field(default_factory=dict)
    baseline: SnapshotRecord | None = None
    groups: int = 0

    @property
    def head(self) -> int:
        """The journal head."""
        return len(self.journal)

    def active(self) -> SnapshotRecord:
        """The active baseline (set at creation)."""
        assert self.baseline is not None
        return self.baseline


class ContractModel:
    """The oracle: the plane's contracts over plain Python state.

    Method names, arguments and the order of checks mirror :class:`persistence.plane.Plane`;
    inbox sequences are :class:`SeqRef` positions instead of versionstamps.
    """

    def __init__(
        self,
        config: PlaneConfig | None = None,
        size_limit: int = MAX_TRANSACTION_SIZE,
        *,
        commit_may_be_unknown: bool = True,
    ) -> None:
        """``commit_may_be_unknown``: the engine's (the plane then gives every item
        enqueued without a key a random one, stored in its envelope)."""
        self.config = config or PlaneConfig()
        self.own_key: bytes | None = OWN_KEY if commit_may_be_unknown else None
        self.budget = size_limit * (100 - budget.RESERVE) // 100
        self.blobs: dict[UniverseId, dict[Hash, bytes]] = {}
        self.worlds: dict[tuple[UniverseId, WorldId], ModelWorld] = {}

    # ------------------------------------------------------------------ helpers

    def _world(self, universe: UniverseId, world: WorldId) -> ModelWorld:
        state = self.worlds.get((universe, world))
        if state is None:
            raise WorldNotFound(universe, world)
        return state

    def world_exists(self, universe: UniverseId, world: WorldId) -> bool:
        """Whether the world was created."""
        return (universe, world) in self.worlds

    @staticmethod
    def _check_height(value: int, name: str, *, allow_zero: bool = True) -> None:
        low = 0 if allow_zero else 1
        if not low <= value <= MAX_HEIGHT:
            raise Validation(name, f"height {value} outside [{low}, 2**64-1]")

    @staticmethod
    def _ref(index: int | None) -> SeqRef | None:
        return None if index is None else SeqRef(index)

    # ------------------------------------------------------------------ CAS (Protocol A)

    def put_verified(self, universe: UniverseId, data: bytes) -> Hash:
        """Store ``data`` in ``universe``; return its sha256 (duplicates are no-ops)."""
        if not isinstance(data, bytes):
            raise Validation("data", f"expected bytes, got {type(data).__name__}")
        digest = Hash.of(data)
        self.blobs.setdefault(universe, {}).setdefault(digest, data)
        return digest

    def get(self, universe: UniverseId, hash: Hash) -> bytes:
        """The body of ``hash`` in ``universe``; ``NotFound`` if that universe lacks it."""
        body = self.blobs.get(universe, {}).get(hash)
        if body is None:
            raise NotFound(f"cas {hash} not found in universe {universe}")
        return body

    def has(self, universe: UniverseId, hash: Hash) -> bool:
        """Whether ``universe`` holds ``hash``."""
        return hash in self.blobs.get(universe, {})

    # ------------------------------------------------------------------ worlds

    def create_world(
        self, universe: UniverseId, world: WorldId, *, genesis_state: bytes = GENESIS_STATE
    ) -> SnapshotRecord:
        """Create a world whose genesis snapshot (height 0) is indexed and active.

        A world that exists is ``WorldExists`` before anything is stored (a second creation
        from another call has other metadata, its creation time); otherwise the genesis
        blobs go to CAS, then the world is created."""
        if (universe, world) in self.worlds:
            raise WorldExists(f"world {world} already exists in universe {universe}")
        snapshot_ref = self.put_verified(universe, genesis_state)
        manifest_hash = self.put_verified(universe, cbor.encode([]))
        genesis = SnapshotRecord(snapshot_ref, 0, 0, manifest_hash, receipt_horizon_height=0)
        state = ModelWorld(genesis=genesis)
        state.snapshots[0] = genesis
        state.baseline = genesis
        self.worlds[(universe, world)] = state
        return genesis

    # ------------------------------------------------------------------ journal (Protocol B)

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

    # ------------------------------------------------------------------ inbox (Protocols C, D)

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

    # ------------------------------------------------------------------ snapshots (Protocol E)

    def snapshot_commit(
        self,
        universe: UniverseId,
        world: WorldId,
        snapshot_bytes: bytes,
        *,
        height: int,
        logical_time_ns: int,
        manifest: Sequence[Hash] = (),
        receipt_horizon_height: int | None = None,
        promote_baseline: bool = False,
    ) -> tuple[SnapshotRecord, SnapshotOutcome]:
        """Protocol E. Every check runs before the snapshot and its manifest go to CAS, so a
        refused commit stores nothing: when promoting the fence first, then (see
        :meth:`_plan`) world, height, index and non-regression, then, when promoting, root
        completeness of the listed manifest blobs (``RootIncomplete``). Then the blobs are
        put and, all or nothing, the index + ``snapshot`` record and, when promoting, the
        baseline + ``baseline_snapshot`` record are written."""
        self._check_height(height, "height")
        manifest_bytes = cbor.encode([h.digest for h in manifest])
        record = SnapshotRecord(
            Hash.of(snapshot_bytes),
            height,
            logical_time_ns,
            Hash.of(manifest_bytes),
            receipt_horizon_height,
        )
        if promote_baseline:
            self._check_fence(record)
        state = self._world(universe, world)
        indexed, promoted = self._plan(universe, state, record, promote_baseline, refs_in_cas=False)
        if promote_baseline:
            # The snapshot and manifest blobs are put next: only the listed blobs must exist.
            self._check_root(universe, record, manifest)
        self.put_verified(universe, snapshot_bytes)
        self.put_verified(universe, manifest_bytes)
        self._apply(state, record, indexed, promoted)
        return record, SnapshotOutcome(indexed, promoted)

    def index_snapshot(self, universe: UniverseId, world: WorldId, record: SnapshotRecord) -> None:
        """Index an already stored snapshot (no promotion; ``NotFound`` unless its snapshot
        and manifest blobs are in the universe's CAS)."""
        state = self._world(universe, world)
        indexed, _ = self._plan(universe, state, record, False, refs_in_cas=True)
        self._apply(state, record, indexed, False)

    def _plan(
        self,
        universe: UniverseId,
        state: ModelWorld,
        record: SnapshotRecord,
        promote: bool,
        *,
        refs_in_cas: bool,
    ) -> tuple[bool, bool]:
        """Protocol E's checks on an existing world, in the plane's order: ``record`` at or
        below the head, (with ``refs_in_cas``) its snapshot and manifest in CAS, no other
        record indexed at its height and, if ``promote``, no regression. Returns whether
        ``record`` must be indexed and promoted (``False`` where it already is)."""
        if record.height > state.head:
            raise Validation(
                "snapshot.height", f"{record.height} is above the journal head {state.head}"
            )
        if refs_in_cas:
            for ref, what in (
                (record.snapshot_ref, "snapshot"),
                (record.manifest_hash, "manifest"),
            ):
                if not self.has(universe, ref):
                    raise NotFound(f"{what} {ref} is not in the CAS of universe {universe}")
        existing = state.snapshots.get(record.height)
        if existing is not None and existing != record:
            raise SnapshotMismatch(
                record.height, str(existing.snapshot_ref), str(record.snapshot_ref)
            )
        return existing is None, promote and self._check_promotion(state, record)

    @staticmethod
    def _apply(state: ModelWorld, record: SnapshotRecord, indexed: bool, promoted: bool) -> None:
        """Write what :meth:`_plan` decided, as one transaction: index, baseline, journal."""
        if indexed:
            state.snapshots[record.height] = record
            state.journal.append(SnapshotEntry(record))
        if promoted:
            state.baseline = record
            state.journal.append(BaselineEntry(record))

    @staticmethod
    def _check_fence(record: SnapshotRecord) -> None:
        if record.receipt_horizon_height != record.height:
            raise ReceiptHorizonFence(record.height, record.receipt_horizon_height)

    def _check_root(
        self, universe: UniverseId, record: SnapshotRecord, manifest: Sequence[Hash] | None
    ) -> None:
        """Root completeness: ``RootIncomplete`` naming the first blob of ``record`` that
        ``universe`` lacks. With the caller's ``manifest`` (its blobs are about to be put)
        only the listed blobs count; with ``None`` the snapshot blob, then the manifest blob,
        then each blob the stored manifest lists."""
        if manifest is None:
            self._require(universe, record, record.snapshot_ref, "snapshot_ref")
            manifest = self._read_manifest(universe, record)
        for index, blob in enumerate(manifest):
            self._require(universe, record, blob, f"manifest[{index}]")

    def _require(
        self, universe: UniverseId, record: SnapshotRecord, blob: Hash, named_by: str
    ) -> None:
        if not self.has(universe, blob):
            raise RootIncomplete(record.height, named_by, blob.hex, universe)

    def _read_manifest(self, universe: UniverseId, record: SnapshotRecord) -> list[Hash]:
        """The blobs the stored manifest of ``record`` lists (``RootIncomplete`` if it is
        not stored, ``Validation`` if it is not canonical CBOR of a list of sha256 digests)."""
        self._require(universe, record, record.manifest_hash, "manifest_hash")
        try:
            digests = cbor.decode(self.get(universe, record.manifest_hash))
        except cbor.NotCanonical as exc:
            raise Validation("record.manifest_hash", f"not canonical CBOR: {exc}") from None
        if not isinstance(digests, list) or not all(
            isinstance(d, bytes) and len(d) == 32 for d in digests
        ):
            raise Validation("record.manifest_hash", "not a list of sha256 digests")
        return [Hash(d) for d in digests]

    @staticmethod
    def _check_promotion(state: ModelWorld, record: SnapshotRecord) -> bool:
        """Whether promoting ``record`` changes the baseline (raises if it may not)."""
        baseline = state.active()
        if baseline == record:
            return False
        if baseline.height > record.height:
            raise BaselineRegression(baseline.height, record.height)
        if baseline.height == record.height:
            raise SnapshotMismatch(
                record.height, str(baseline.snapshot_ref), str(record.snapshot_ref)
            )
        return True

    def active_baseline(self, universe: UniverseId, world: WorldId) -> SnapshotRecord:
        """The active baseline."""
        return self._world(universe, world).active()

    def promote_baseline(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Promote the indexed ``record`` (a no-op if it already is the baseline).

        Fence first (``ReceiptHorizonFence``), then root completeness in the universe's CAS
        (``RootIncomplete``, also for a missing world), then ``NotFound`` unless ``record``
        is the record indexed at its height (also for a missing world), then
        non-regression."""
        self._check_fence(record)
        self._check_root(universe, record, None)
        state = self.worlds.get((universe, world))
        if state is None or state.snapshots.get(record.height) != record:
            raise NotFound(f"snapshot {record.snapshot_ref} is not indexed at {record.height}")
        _, promoted = self._plan(universe, state, record, True, refs_in_cas=False)
        self._apply(state, record, False, promoted)

    def list_snapshots(self, universe: UniverseId, world: WorldId) -> list[SnapshotRecord]:
        """Every indexed snapshot, by height."""
        state = self._world(universe, world)
        return [state.snapshots[height] for height in sorted(state.snapshots)]
