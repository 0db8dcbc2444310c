"""The plane: the contracts of :mod:`persistence.contracts` implemented once, over any
engine and object store.

:class:`Plane` is the facade a world host uses. Each method validates its input, does the
steps that cannot be inside a transaction (uploading a CAS body, drawing a batch id), and
runs the protocol's transactional function with retries. Batch ids are drawn once per call,
outside the retry loop, which is what lets a retry recognise an attempt that committed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Final, Protocol

from persistence import cbor, kv
from persistence.errors import HeadAdvanced, MissingDependency, SegmentCorruption, Validation
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId, check_height
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane import (
    budget,
    calls,
    effects,
    inbox,
    journal,
    segment_index,
    snapshots,
    worlds,
)
from persistence.plane.calls import Call
from persistence.plane.cas import Cas, VerifyMode
from persistence.plane.inbox import DrainResult, Normalizer
from persistence.plane.snapshots import SnapshotOutcome
from persistence.records import (
    CasMeta,
    EffectDispatchItem,
    EffectInFlightItem,
    InboxEnvelope,
    InboxItem,
    IngressJournalRecord,
    SegmentIndexRecord,
    SnapshotRecord,
    TimerDueItem,
    WorldMeta,
    encode_inbox_item,
)
from persistence.sizes import MiB
from persistence.telemetry import traced

MAX_INLINE_BYTES: Final = kv.MAX_VALUE_SIZE - (
    len(CasMeta(kv.MAX_VALUE_SIZE, inline_bytes=bytes(kv.MAX_VALUE_SIZE)).to_cbor())
    - kv.MAX_VALUE_SIZE
)
"""The largest CAS body kept inline: its ``CasMeta`` record must fit one FoundationDB value."""
GENESIS_STATE: Final = cbor.encode(None)
"""Default genesis snapshot bytes: a kernel hydrating from them starts empty."""


@dataclass(frozen=True, slots=True)
class PlaneConfig:
    """Limits and policies. Defaults keep every transaction well inside FoundationDB's."""

    inline_threshold: int = 16 * 1024
    max_entry_bytes: int = 4 * MiB
    max_batch_entries: int = 10_000
    max_batch_bytes: int = 8 * MiB
    read_page_entries: int = 2_000
    read_page_bytes: int = 4 * MiB
    verify_reads: VerifyMode = "always"
    verify_sample_rate: float = 0.01
    call_record_seconds: float = calls.DEFAULT_WINDOW_SECONDS
    """How long a write call's record is kept for its own retries (``plane/calls.py``)."""

    def __post_init__(self) -> None:
        for name, low, high in (
            ("inline_threshold", 0, MAX_INLINE_BYTES),
            ("max_entry_bytes", 1, None),
            ("max_batch_entries", 1, None),
            ("max_batch_bytes", 1, None),
            ("read_page_entries", 1, None),
            ("read_page_bytes", 1, None),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise Validation(f"PlaneConfig.{name}", f"an integer >= {low}, not {value!r}")
            if high is not None and value > high:
                raise Validation(
                    f"PlaneConfig.{name}",
                    f"{value:,} > {high:,}: an inline body and its metadata must fit one "
                    f"FoundationDB value ({kv.MAX_VALUE_SIZE:,} bytes)",
                )
        if self.verify_reads not in ("always", "sampled", "never"):
            raise Validation(
                "PlaneConfig.verify_reads", f"always, sampled or never, not {self.verify_reads!r}"
            )
        if not (
            isinstance(self.verify_sample_rate, float | int) and 0 <= self.verify_sample_rate <= 1
        ):
            raise Validation("PlaneConfig.verify_sample_rate", "a number from 0 to 1")
        if not (isinstance(self.call_record_seconds, float | int) and self.call_record_seconds > 0):
            raise Validation("PlaneConfig.call_record_seconds", "a positive number of seconds")


class SegmentSource(Protocol):
    """Where stitched reads get cold entries: the segment objects named by the index."""

    def read(
        self,
        universe: UniverseId,
        world: WorldId,
        record: SegmentIndexRecord,
        first: int,
        last: int,
    ) -> list[tuple[int, bytes]]:
        """Entries ``first..last`` of the segment ``record``, after verifying the whole
        object against the index. Raises ``Corruption`` (missing, damaged, mismatched)."""
        ...


def default_normalizer(seq: InboxSeq, item: InboxItem) -> bytes:
    """The journal entry of a drained item: an ``ingress`` record of its sequence and bytes."""
    return IngressJournalRecord(seq, encode_inbox_item(item)).to_cbor()


def _random_key() -> bytes:
    return os.urandom(16)


class Plane:
    """CAS, journals, inboxes and snapshots of every universe in one engine + object store."""

    def __init__(
        self,
        engine: Engine,
        objects: ObjectStore,
        config: PlaneConfig | None = None,
        segments: SegmentSource | None = None,
        *,
        hooks: StepHooks = NO_HOOKS,
    ) -> None:
        self.engine = engine
        self.objects = objects
        self.segments = segments
        self.hooks = hooks
        self.config = config or PlaneConfig()
        self.budget = budget.budget(engine)
        """Bytes one transaction of this plane may count (``plane/budget.py``)."""
        self.cas = Cas(
            engine,
            objects,
            inline_threshold=self.config.inline_threshold,
            verify=self.config.verify_reads,
            sample_rate=self.config.verify_sample_rate,
            hooks=hooks,
            budget=self.budget,
        )
        worlds.ensure_layout(engine)

    def _call(self) -> Call:
        """A new write call: its id is drawn here, outside the retry loop."""
        return Call.new(self.config.call_record_seconds)

    # ------------------------------------------------------------------ CAS (Protocol A)

    @traced("cas.put")
    def put_verified(self, universe: UniverseId, data: bytes) -> Hash:
        """Store ``data``; return its sha256 (computed here). Idempotent."""
        return self.cas.put(universe, data)

    @traced("cas.put_stream")
    def put_stream(
        self, universe: UniverseId, stream: BinaryIO, expected: Hash | None = None
    ) -> Hash:
        """Store a body from ``stream`` with bounded memory (see :class:`Cas`)."""
        return self.cas.put_stream(universe, stream, expected)

    @traced("cas.get")
    def get(self, universe: UniverseId, hash: Hash) -> bytes:
        """The verified body of ``hash``."""
        return self.cas.get(universe, hash)

    @traced("cas.open")
    def open_blob(self, universe: UniverseId, hash: Hash) -> BinaryIO:
        """A verified stream of the body of ``hash``."""
        return self.cas.open(universe, hash)

    @traced("cas.stat")
    def blob_meta(self, universe: UniverseId, hash: Hash) -> CasMeta:
        """Size and location of the body of ``hash`` (``NotFound`` if absent)."""
        return self.cas.stat(universe, hash)

    @traced("cas.has")
    def has(self, universe: UniverseId, hash: Hash) -> bool:
        """Whether the universe holds ``hash``."""
        return self.cas.has(universe, hash)

    # ------------------------------------------------------------------ worlds

    @traced("world.create")
    def create_world(
        self,
        universe: UniverseId,
        world: WorldId,
        *,
        genesis_state: bytes = GENESIS_STATE,
        handle: str | None = None,
    ) -> SnapshotRecord:
        """Create a world with its genesis snapshot as active baseline (height 0).

        Returns the genesis record. Repeating the same creation is a no-op; a different
        world with the same id is ``WorldExists``."""
        snapshot_ref = self.put_verified(universe, genesis_state)
        manifest_hash = self.put_verified(universe, cbor.encode([]))
        genesis = SnapshotRecord(snapshot_ref, 0, 0, manifest_hash, receipt_horizon_height=0)
        meta = WorldMeta(created_ns=time.time_ns(), handle=handle)
        worlds.create_world(self.engine, WorldKeys(universe, world), meta, genesis)
        self.hooks.reached("world.after_create")
        return genesis

    @traced("world.meta")
    def world_meta(self, universe: UniverseId, world: WorldId) -> WorldMeta:
        """Creation time and handle of a world (``NotFound`` if it does not exist)."""
        return worlds.read_meta(self.engine, WorldKeys(universe, world))

    def universes(self, page: int = 1_000) -> Iterator[UniverseId]:
        """Every universe in the store, in id byte order (``page`` per transaction)."""
        after: UniverseId | None = None
        while batch := worlds.list_universes(self.engine, after, page):
            yield from batch
            after = batch[-1]

    def worlds(self, universe: UniverseId, page: int = 1_000) -> Iterator[WorldId]:
        """Every world of ``universe``, in id byte order (``page`` per transaction)."""
        after: WorldId | None = None
        while batch := worlds.list_worlds(self.engine, UniverseKeys(universe), after, page):
            yield from batch
            after = batch[-1]

    # ------------------------------------------------------------------ journal (B)

    def _check_entries(self, entries: Sequence[bytes], field: str) -> None:
        if not entries:
            raise Validation(field, "a batch needs at least one entry")
        if len(entries) > self.config.max_batch_entries:
            raise Validation(field, f"{len(entries)} entries > max {self.config.max_batch_entries}")
        total = 0
        for index, entry in enumerate(entries):
            if not isinstance(entry, bytes):
                raise Validation(f"{field}[{index}]", "entries are bytes")
            if len(entry) > self.config.max_entry_bytes:
                raise Validation(
                    f"{field}[{index}]",
                    f"entry of {len(entry)} bytes > max {self.config.max_entry_bytes}",
                )
            total += len(entry)
        if total > self.config.max_batch_bytes:
            raise Validation(field, f"batch of {total} bytes > max {self.config.max_batch_bytes}")

    @traced("journal.append")
    def append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Append at ``expected_head``; return the first new height (``HeadAdvanced`` if moved)."""
        check_height(expected_head, "expected_head")
        self._check_entries(entries, "entries")
        keys = WorldKeys(universe, world)
        batch = list(entries)
        budget.check(
            budget.append_cost(keys, expected_head + 1, batch),
            self.budget,
            "entries",
            f"appending {len(batch):,} entries ({sum(map(len, batch)):,} bytes)",
        )
        first = journal.append_batch(self.engine, keys, expected_head, batch, self._call())
        self.hooks.reached("journal.after_append")
        return first

    @traced("journal.retry_append")
    def retry_append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Redo an append whose outcome is unknown: append at ``expected_head``, or find
        where the earlier attempt put ``entries`` (``HeadAdvanced`` if it did not land)."""
        try:
            return self.append_batch(universe, world, expected_head, entries)
        except HeadAdvanced:
            first = expected_head + 1  # the head has moved: the earlier attempt is settled
            stored = self.read_range(universe, world, first, len(entries))
            if [entry for _, entry in stored] == list(entries):
                return first
            raise

    @traced("journal.read_range")
    def read_range(
        self, universe: UniverseId, world: WorldId, from_inclusive: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``limit`` contiguous entries from ``from_inclusive``, stitched from cold
        segments and the hot tail, paged across transactions so no read transaction
        outgrows FoundationDB's limits. A missing or damaged segment is ``Corruption``."""
        check_height(from_inclusive, "from_inclusive", allow_zero=False)
        if limit < 0:
            raise Validation("limit", "must not be negative")
        keys = WorldKeys(universe, world)
        if limit == 0:
            journal.read_entries(self.engine, keys, from_inclusive, 0)  # NotFound if no world
            return []
        out: list[tuple[int, bytes]] = []
        while len(out) < limit:
            first = from_inclusive + len(out)
            want = min(self.config.read_page_entries, limit - len(out))
            page = journal.read_entries(self.engine, keys, first, want, self.config.read_page_bytes)
            if page.segment is not None:
                last = min(page.segment.end, page.head, first + want - 1)
                rows = self._cold(universe, world, page.segment, first, last)
                if [h for h, _ in rows[:1]] != [first]:  # a read must make progress
                    raise SegmentCorruption(
                        page.segment.object_key, 0, f"holds no entry at height {first}"
                    )
                out.extend(rows)
                continue
            out.extend(page.rows)
            if not page.rows or page.rows[-1][0] >= page.head:
                break
        return out

    def _cold(
        self,
        universe: UniverseId,
        world: WorldId,
        segment: SegmentIndexRecord,
        first: int,
        last: int,
    ) -> list[tuple[int, bytes]]:
        if self.segments is None:
            raise MissingDependency(
                f"world {world}: heights {segment.start}-{segment.end} are in a cold segment and "
                "this plane has no segment reader (open it with segments.open_plane)"
            )
        return self.segments.read(universe, world, segment, first, last)

    @traced("journal.read_hot")
    def read_hot(
        self, universe: UniverseId, world: WorldId, from_inclusive: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Entries still held in the engine, from ``from_inclusive`` (one transaction, at
        most ``read_page_bytes`` of them but at least one; empty if a segment covers that
        height). Used by segment export and fsck."""
        keys = WorldKeys(universe, world)
        page = journal.read_entries(
            self.engine, keys, from_inclusive, limit, self.config.read_page_bytes
        )
        return page.rows

    @traced("journal.head")
    def head(self, universe: UniverseId, world: WorldId) -> int:
        """The journal head (0 when empty)."""
        return journal.read_entries(self.engine, WorldKeys(universe, world), 1, 0).head

    # ------------------------------------------------------------------ segment index

    @traced("segments.put")
    def put_segment(self, universe: UniverseId, world: WorldId, record: SegmentIndexRecord) -> None:
        """Index an uploaded segment (it must continue the index without gap or overlap)."""
        segment_index.put_segment(self.engine, UniverseKeys(universe), world, record)

    @traced("segments.list")
    def list_segments(
        self, universe: UniverseId, world: WorldId, from_height: int = 1
    ) -> list[SegmentIndexRecord]:
        """Segments of ``world`` ending at or after ``from_height``, in height order."""
        return segment_index.list_segments(self.engine, UniverseKeys(universe), world, from_height)

    # ------------------------------------------------------------------ inbox (C, D)

    @traced("inbox.enqueue")
    def enqueue(
        self,
        universe: UniverseId,
        world: WorldId,
        item: InboxItem,
        *,
        idempotency_key: bytes | None = None,
    ) -> InboxSeq:
        """Enqueue one item (see :meth:`enqueue_batch`)."""
        keys = None if idempotency_key is None else [idempotency_key]
        return self.enqueue_batch(universe, world, [item], idempotency_keys=keys)[0]

    @traced("inbox.enqueue_batch")
    def enqueue_batch(
        self,
        universe: UniverseId,
        world: WorldId,
        items: Sequence[InboxItem],
        *,
        idempotency_keys: Sequence[bytes] | None = None,
    ) -> list[InboxSeq]:
        """Enqueue ``items`` atomically, in order; return their sequences.

        Items without a caller key get a random one, so a retry after an unknown commit
        result never duplicates them; a caller key makes repeats across calls return the
        first sequence too (for as long as the item is in the inbox)."""
        if not items:
            raise Validation("items", "a batch needs at least one item")
        if len(items) > min(self.config.max_batch_entries, 65_536):
            raise Validation("items", f"{len(items)} items > max {self.config.max_batch_entries}")
        if idempotency_keys is not None and len(idempotency_keys) != len(items):
            raise Validation("idempotency_keys", "one key per item")
        idem = list(idempotency_keys) if idempotency_keys else [_random_key() for _ in items]
        for key in idem:
            if not isinstance(key, bytes) or not 1 <= len(key) <= 256:
                raise Validation("idempotency_key", "1 to 256 bytes")
        if len(set(idem)) != len(idem):
            raise Validation("idempotency_keys", "duplicate key within one batch")
        envelopes = [
            InboxEnvelope(encode_inbox_item(i), k) for i, k in zip(items, idem, strict=True)
        ]
        if sum(len(e.item) for e in envelopes) > self.config.max_batch_bytes:
            raise Validation("items", f"batch larger than {self.config.max_batch_bytes} bytes")
        sizes = [len(e.to_cbor()) for e in envelopes]
        for index, size in enumerate(sizes):
            if size > kv.MAX_VALUE_SIZE:
                raise Validation(
                    f"items[{index}]",
                    f"the item's inbox envelope is {size:,} bytes > {kv.MAX_VALUE_SIZE:,} "
                    "(FoundationDB's value limit): put large payloads in the CAS and enqueue "
                    "their hash",
                )
        keys = WorldKeys(universe, world)
        budget.check(
            budget.enqueue_cost(keys, list(zip(idem, sizes, strict=True))),
            self.budget,
            "items",
            f"enqueueing {len(items):,} items",
        )
        pending = inbox.enqueue(self.engine, keys, envelopes)
        self.hooks.reached("inbox.after_enqueue")
        return pending.seqs(len(items))

    @traced("inbox.read_after")
    def read_after(
        self, universe: UniverseId, world: WorldId, after_exclusive: InboxSeq | None, limit: int
    ) -> list[tuple[InboxSeq, InboxItem]]:
        """Up to ``limit`` items after ``after_exclusive`` in sequence order (``limit`` 0:
        none -- unlike the engine's ``get_range``, where 0 means no limit)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise Validation("limit", f"must be a non-negative integer, got {limit!r}")
        return inbox.read_after(self.engine, WorldKeys(universe, world), after_exclusive, limit)

    @traced("inbox.cursor")
    def inbox_cursor(self, universe: UniverseId, world: WorldId) -> InboxSeq | None:
        """The drained boundary (``None`` before the first drain)."""
        keys = WorldKeys(universe, world)
        record = kv.run(self.engine, lambda tr: inbox.read_cursor(tr, keys))
        return None if record is None else record.seq

    @traced("inbox.commit_cursor")
    def commit_cursor(
        self,
        universe: UniverseId,
        world: WorldId,
        old_cursor: InboxSeq | None,
        new_cursor: InboxSeq,
    ) -> None:
        """Compare-and-swap the cursor forward."""
        inbox.commit_cursor(
            self.engine, WorldKeys(universe, world), old_cursor, new_cursor, self._call()
        )
        self.hooks.reached("inbox.after_commit_cursor")

    @traced("inbox.drain")
    def drain_inbox_to_journal(
        self,
        universe: UniverseId,
        world: WorldId,
        max_items: int = 1_000,
        max_bytes: int = MiB,
        normalize: Normalizer = default_normalizer,
    ) -> DrainResult:
        """Protocol D: move up to ``max_items``/``max_bytes`` of items into the journal and
        advance the cursor, atomically; each item lands exactly once."""
        if not 1 <= max_items <= self.config.max_batch_entries:
            raise Validation("max_items", f"between 1 and {self.config.max_batch_entries}")
        if not 1 <= max_bytes <= self.config.max_batch_bytes:
            raise Validation("max_bytes", f"between 1 and {self.config.max_batch_bytes}")
        limits = inbox.DrainLimits(max_items, max_bytes, self.config.max_entry_bytes, self.budget)
        result = inbox.drain(
            self.engine, WorldKeys(universe, world), limits, normalize, self._call()
        )
        self.hooks.reached("inbox.after_drain")
        return result

    # ------------------------------------------------------------------ snapshots (E)

    @traced("snapshot.commit")
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
        """Protocol E: CAS-put the snapshot and its manifest, index, journal, and
        optionally promote (gated by the receipt-horizon fence)."""
        check_height(height, "height")
        snapshot_ref = self.put_verified(universe, snapshot_bytes)
        manifest_hash = self.put_verified(universe, cbor.encode([h.digest for h in manifest]))
        self.hooks.reached("snapshot.after_cas")
        record = SnapshotRecord(
            snapshot_ref, height, logical_time_ns, manifest_hash, receipt_horizon_height
        )
        outcome = snapshots.commit_snapshot(
            self.engine, WorldKeys(universe, world), record, promote_baseline, self._call()
        )
        self.hooks.reached("snapshot.after_commit")
        return record, outcome

    @traced("snapshot.index")
    def index_snapshot(self, universe: UniverseId, world: WorldId, record: SnapshotRecord) -> None:
        """Index an already stored snapshot (no promotion)."""
        snapshots.commit_snapshot(
            self.engine, WorldKeys(universe, world), record, False, self._call()
        )

    @traced("baseline.read")
    def active_baseline(self, universe: UniverseId, world: WorldId) -> SnapshotRecord:
        """The active baseline."""
        keys = WorldKeys(universe, world)
        return kv.run(self.engine, lambda tr: snapshots.read_baseline(tr, keys))

    @traced("baseline.promote")
    def promote_baseline(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Promote an indexed snapshot (fence and non-regression checked)."""
        snapshots.promote_baseline(self.engine, WorldKeys(universe, world), record, self._call())

    @traced("snapshot.list")
    def list_snapshots(self, universe: UniverseId, world: WorldId) -> list[SnapshotRecord]:
        """Every indexed snapshot of the world."""
        return snapshots.list_snapshots(self.engine, WorldKeys(universe, world))

    # ------------------------------------------------------------------ effects and timers

    @traced("effects.dispatch")
    def dispatch_effect(self, universe: UniverseId, item: EffectDispatchItem) -> InboxSeq:
        """Queue an effect for the effect workers; once per intent hash."""
        pending = effects.dispatch(self.engine, UniverseKeys(universe), item)
        self.hooks.reached("effects.after_dispatch")
        return pending.seq()

    @traced("effects.pending")
    def pending_effects(
        self, universe: UniverseId, limit: int = 1_000
    ) -> list[tuple[InboxSeq, EffectDispatchItem]]:
        """Pending effects in dispatch order."""
        return effects.list_pending(self.engine, UniverseKeys(universe), limit)

    @traced("effects.inflight")
    def inflight_effects(
        self, universe: UniverseId, limit: int = 1_000
    ) -> list[tuple[InboxSeq, EffectInFlightItem]]:
        """Claimed effects in dispatch order."""
        return effects.list_inflight(self.engine, UniverseKeys(universe), limit)

    @traced("effects.claim")
    def claim_effect(self, universe: UniverseId, seq: InboxSeq, worker: str) -> EffectInFlightItem:
        """Move a pending effect to in-flight for ``worker`` (repeatable by the same worker)."""
        return effects.claim(
            self.engine, UniverseKeys(universe), seq, worker, time.time_ns(), self._call()
        )

    @traced("effects.complete")
    def complete_effect(self, universe: UniverseId, seq: InboxSeq, intent: Hash) -> None:
        """Forget a finished effect."""
        effects.complete(self.engine, UniverseKeys(universe), seq, intent)

    @traced("timers.schedule")
    def schedule_timer(self, universe: UniverseId, item: TimerDueItem) -> None:
        """Schedule a timer (idempotent)."""
        effects.put_timer(self.engine, UniverseKeys(universe), item)

    @traced("timers.due")
    def due_timers(
        self, universe: UniverseId, until_ns: int, limit: int = 1_000
    ) -> list[TimerDueItem]:
        """Timers due before ``until_ns``, earliest first."""
        return effects.due_timers(self.engine, UniverseKeys(universe), until_ns, limit)

    @traced("timers.remove")
    def remove_timer(self, universe: UniverseId, item: TimerDueItem) -> None:
        """Remove a fired or cancelled timer."""
        effects.remove_timer(
            self.engine, UniverseKeys(universe), item.deliver_at_ns, item.intent_hash
        )
