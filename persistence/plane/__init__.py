"""The plane: the contracts of :mod:`persistence.contracts` implemented once, over any
engine and object store.

:class:`Plane` is the facade a world host uses. Each method validates its input, does the
steps that cannot be inside a transaction (uploading a CAS body, drawing a batch id), and
runs the protocol's transactional function with retries. Batch ids are drawn once per call,
outside the retry loop, which is what lets a retry recognise an attempt that committed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Final, Protocol, TypeVar

from persistence import cbor, kv
from persistence.errors import (
    CorruptRecord,
    HeadAdvanced,
    MissingDependency,
    SegmentIndexCorruption,
    Validation,
    WorldExists,
)
from persistence.futures import drive
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.ids import MAX_HEIGHT, Hash, InboxSeq, UniverseId, WorldId, check_height, check_id
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane import roots
from persistence.plane.cas import Cas, VerifyMode
from persistence.protocols import (
    budget,
    calls,
    compaction,
    drain,
    effects,
    export,
    inbox,
    journal,
    log,
    segment_index,
    snapshots,
    worlds,
)
from persistence.protocols.calls import Call
from persistence.protocols.compaction import InboxCompaction
from persistence.protocols.drain import DrainResult, Normalizer
from persistence.protocols.snapshots import SnapshotOutcome
from persistence.records import (
    CasMeta,
    ColdHorizon,
    EffectDispatchItem,
    EffectInFlightItem,
    InboxCursor,
    InboxEnvelope,
    InboxItem,
    LogRecord,
    Record,
    SegmentIndexRecord,
    SnapshotRecord,
    TimerDueItem,
    WorldMeta,
    encode_inbox_item,
    envelope_bytes,
    ingress_bytes,
)
from persistence.sizes import (
    MAX_CALL_RECORD_SECONDS,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_NAME_CHARS,
    MAX_ROW_LIMIT,
    KiB,
    MiB,
    check_bool,
    check_bytes,
    check_int,
    check_number,
    check_sequence,
    check_text,
)
from persistence.telemetry import traced

MAX_INLINE_BYTES: Final = kv.MAX_VALUE_SIZE - (
    len(CasMeta(kv.MAX_VALUE_SIZE, inline_bytes=bytes(kv.MAX_VALUE_SIZE)).to_cbor())
    - kv.MAX_VALUE_SIZE
)
"""The largest CAS body kept inline: its ``CasMeta`` record must fit one FoundationDB value."""
GENESIS_STATE: Final = cbor.encode(None)
"""Default genesis snapshot bytes: a kernel hydrating from them starts empty."""
EMPTY_MANIFEST: Final = cbor.encode([])
"""The manifest of a snapshot that names no blobs (every genesis snapshot's)."""
CLAIM_RESERVE: Final = 4 * MAX_NAME_CHARS + 128
"""Room a dispatched effect's value leaves for its claim: the worker's name (UTF-8) and
claim time, and the call record that repeats the in-flight item."""
MAX_SETTING: Final = 2**63 - 1
"""The largest integer setting: a signed 64-bit integer, which every engine can take."""
MAX_WAIT_SECONDS: Final = 86_400.0
"""The longest wait of :meth:`Plane.wait_log` and :meth:`Plane.wait_tracking`: a day."""
INTERRUPT_SECONDS: Final = 0.05
"""How soon a wait notices its ``interrupt``."""
T = TypeVar("T")

MAX_INBOX_RETENTION_SECONDS: Final = 10 * 365 * 86_400.0
"""The longest inbox retention window (``PlaneConfig.inbox_retention_seconds``): ten years."""


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
    """How long a write call's record is kept for its own retries (``protocols/calls.py``)."""
    inbox_retention_seconds: float = 86_400.0
    """How long a consumed inbox item and its idempotency entry are kept before inbox
    compaction may remove them: an idempotency key deduplicates for at least this long after
    its item was drained (``protocols/compaction.py``)."""

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
            if high is not None and isinstance(value, int) and value > high:
                raise Validation(
                    f"PlaneConfig.{name}",
                    f"{value:,} > {high:,}: an inline body and its metadata must fit one "
                    f"FoundationDB value ({kv.MAX_VALUE_SIZE:,} bytes)",
                )
            check_int(value, f"PlaneConfig.{name}", low, MAX_SETTING if high is None else high)
        if self.verify_reads not in ("always", "sampled", "never"):
            raise Validation(
                "PlaneConfig.verify_reads", f"always, sampled or never, not {self.verify_reads!r}"
            )
        check_number(self.verify_sample_rate, "PlaneConfig.verify_sample_rate", 0, 1)
        field = "PlaneConfig.call_record_seconds"
        if not check_number(self.call_record_seconds, field, 0, MAX_CALL_RECORD_SECONDS):
            raise Validation(field, "must be a positive number of seconds")
        field = "PlaneConfig.inbox_retention_seconds"
        check_number(self.inbox_retention_seconds, field, 0, MAX_INBOX_RETENTION_SECONDS)
        if self.inbox_retention_ns < 1:
            raise Validation(field, "must be at least one nanosecond")

    @property
    def inbox_retention_ns(self) -> int:
        """``inbox_retention_seconds`` in nanoseconds."""
        return round(self.inbox_retention_seconds * 1_000_000_000)


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
    return ingress_bytes(seq, encode_inbox_item(item))


OWN_KEY_BYTES: Final = 16
"""Length of the idempotency key drawn for an item enqueued without one (where it gets one:
``Plane._own_key``)."""
_OWN_KEY: Final = bytes(OWN_KEY_BYTES)
OWN_KEY_ENVELOPE_BYTES: Final = len(InboxEnvelope(b"\x00", _OWN_KEY).to_cbor()) - len(
    InboxEnvelope(b"\x00", None).to_cbor()
)
"""What such a key adds to an inbox envelope (33 bytes)."""


def _world_keys(universe: object, world: object) -> WorldKeys:
    """The keys of ``world``, after checking that both ids are ids."""
    return WorldKeys(check_id(universe, UniverseId, "universe"), check_id(world, WorldId, "world"))


def _universe_keys(universe: object) -> UniverseKeys:
    """The keys of ``universe``, after checking that it is an id."""
    return UniverseKeys(check_id(universe, UniverseId, "universe"))


def _limit(value: object, field: str = "limit", low: int = 0) -> int:
    """A listing's row limit."""
    return check_int(value, field, low, MAX_ROW_LIMIT)


def _encoded(record: object, kinds: tuple[type[Record], ...], field: str) -> bytes:
    """The stored bytes of a caller's record, after checking its type (a record checks its
    fields when it is built, so encoding it cannot fail half-way through a protocol)."""
    if not isinstance(record, kinds):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise Validation(field, f"expected a {names}, got {type(record).__name__}")
    return record.to_cbor()


def _value_fits(encoded: bytes, field: str, limit: int = kv.MAX_VALUE_SIZE) -> None:
    """``Validation`` if a record stored as one value is over ``limit`` bytes."""
    if len(encoded) > limit:
        raise Validation(
            field,
            f"encodes to {len(encoded):,} bytes > {limit:,} (one FoundationDB value): put "
            "large payloads in the CAS and pass their hash",
        )


@dataclass(frozen=True, slots=True)
class _Genesis:
    """The default genesis snapshot record, and its blobs: those kept inline as their CAS
    metadata, the others as bodies to store."""

    record: SnapshotRecord
    inline: tuple[tuple[Hash, CasMeta], ...]
    external: tuple[bytes, ...]

    @classmethod
    def of(cls, inline_threshold: int) -> _Genesis:
        bodies = (GENESIS_STATE, EMPTY_MANIFEST)
        record = SnapshotRecord(
            Hash.of(GENESIS_STATE), 0, 0, Hash.of(EMPTY_MANIFEST), receipt_horizon_height=0
        )
        inline = tuple(
            (Hash.of(body), CasMeta(size=len(body), inline_bytes=body))
            for body in bodies
            if len(body) <= inline_threshold
        )
        return cls(record, inline, tuple(b for b in bodies if len(b) > inline_threshold))


class Plane:
    """CAS, journals, inboxes and snapshots of every universe in one engine + object store.
    Opening one records the store's layout version in a new store; with ``create=False``
    (reading tools) it writes nothing: the record is only checked."""

    def __init__(
        self,
        engine: Engine,
        objects: ObjectStore,
        config: PlaneConfig | None = None,
        segments: SegmentSource | None = None,
        *,
        hooks: StepHooks = NO_HOOKS,
        clock: Callable[[], int] = time.time_ns,
        create: bool = True,
    ) -> None:
        if not isinstance(engine, Engine):
            raise Validation("engine", f"expected an Engine, got {type(engine).__name__}")
        if not isinstance(objects, ObjectStore):
            raise Validation("objects", f"expected an ObjectStore, got {type(objects).__name__}")
        if config is not None and not isinstance(config, PlaneConfig):
            raise Validation("config", f"expected a PlaneConfig, got {type(config).__name__}")
        if not callable(clock):
            raise Validation("clock", f"expected a function, got {type(clock).__name__}")
        if not callable(getattr(hooks, "reached", None)):
            raise Validation("hooks", f"expected StepHooks, got {type(hooks).__name__}")
        if segments is not None and not callable(getattr(segments, "read", None)):
            raise Validation("segments", f"expected a SegmentSource, got {type(segments).__name__}")
        self.engine = engine
        self.objects = objects
        self.segments = segments
        self.hooks = hooks
        self.config = config or PlaneConfig()
        self.clock = clock
        """The wall clock (nanoseconds since the epoch) of call ids, creation and claim times
        and inbox compaction."""
        self.budget = budget.budget(engine)
        """Bytes one transaction of this plane may count (``protocols/budget.py``)."""
        self.cas = Cas(
            engine,
            objects,
            inline_threshold=self.config.inline_threshold,
            verify=self.config.verify_reads,
            sample_rate=self.config.verify_sample_rate,
            hooks=hooks,
            budget=self.budget,
            clock=self._now,
        )
        self._genesis = _Genesis.of(self.config.inline_threshold)
        """The default genesis, built once: group appends create worlds with it."""
        drive(worlds.ensure_layout(engine, check_bool(create, "create")))

    def new_call(self) -> Call:
        """A new write call: its id is drawn here, outside the retry loop."""
        return Call.new(
            self.config.call_record_seconds,
            self._now(),
            recorded=self.engine.commit_may_be_unknown,
        )

    def _now(self) -> int:
        """The plane's clock, checked: nanoseconds since the epoch."""
        return check_int(self.clock(), "clock", 0, budget.LATEST_NS)

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

        Returns the genesis record. A retried creation transaction is a no-op; a world that
        exists already is ``WorldExists`` (checked before the genesis blobs are stored)."""
        keys = _world_keys(universe, world)
        check_bytes(genesis_state, "genesis_state")
        meta = WorldMeta(
            created_ns=self._now(),
            handle=None if handle is None else check_text(handle, "handle"),
        )
        if drive(worlds.world_exists(self.engine, keys)):
            raise WorldExists(f"world {world} already exists in universe {universe}")
        snapshot_ref = self.put_verified(universe, genesis_state)
        manifest_hash = self.put_verified(universe, EMPTY_MANIFEST)
        genesis = SnapshotRecord(snapshot_ref, 0, 0, manifest_hash, receipt_horizon_height=0)
        drive(worlds.create_world(self.engine, keys, meta, genesis))
        self.hooks.reached("world.after_create")
        return genesis

    @traced("world.meta")
    def world_meta(self, universe: UniverseId, world: WorldId) -> WorldMeta:
        """Creation time and handle of a world (``NotFound`` if it does not exist)."""
        return drive(worlds.read_meta(self.engine, _world_keys(universe, world)))

    def universes(self, page: int = 1_000) -> Iterator[UniverseId]:
        """Every universe in the store, in id byte order (``page`` per transaction).
        Arguments are checked at the call, not at the first ``next``."""
        _limit(page, "page", 1)

        def scan() -> Iterator[UniverseId]:
            after: UniverseId | None = None
            while batch := drive(worlds.list_universes(self.engine, after, page)):
                yield from batch
                after = batch[-1]

        return scan()

    def worlds(self, universe: UniverseId, page: int = 1_000) -> Iterator[WorldId]:
        """Every world of ``universe``, in id byte order (``page`` per transaction).
        Arguments are checked at the call, not at the first ``next``."""
        keys = _universe_keys(universe)
        _limit(page, "page", 1)

        def scan() -> Iterator[WorldId]:
            after: WorldId | None = None
            while batch := drive(worlds.list_worlds(self.engine, keys, after, page)):
                yield from batch
                after = batch[-1]

        return scan()

    # ------------------------------------------------------------------ journal (B)

    def _check_entries(self, entries: Sequence[bytes], field: str) -> None:
        check_sequence(entries, field, 1, self.config.max_batch_entries)
        high = self.config.max_entry_bytes
        total = 0
        for index, entry in enumerate(entries):
            if type(entry) is not bytes or len(entry) > high:  # named only if refused
                check_bytes(entry, f"{field}[{index}]", high=high)
            total += len(entry)
        if total > self.config.max_batch_bytes:
            raise Validation(field, f"batch of {total} bytes > max {self.config.max_batch_bytes}")

    @traced("journal.append")
    def append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Append at ``expected_head``; return the first new height (``HeadAdvanced`` if moved)."""
        keys = _world_keys(universe, world)
        check_height(expected_head, "expected_head")
        self._check_entries(entries, "entries")
        if expected_head > MAX_HEIGHT - len(entries):
            raise Validation(
                "expected_head", f"{expected_head} + {len(entries)} entries passes 2**64-1"
            )
        batch = list(entries)
        if budget.group_append_bound([batch], ()) > self.budget:  # else surely within it
            budget.check(
                budget.append_cost(keys, expected_head + 1, batch),
                self.budget,
                "entries",
                f"appending {len(batch):,} entries ({sum(map(len, batch)):,} bytes)",
            )
        first = drive(
            journal.append_batch(self.engine, keys, expected_head, batch, self.new_call())
        )
        self.hooks.reached("journal.after_append")
        return first

    @traced("journal.append_batches")
    def append_batches(
        self,
        universe: UniverseId,
        batches: Sequence[tuple[WorldId, int, Sequence[bytes]]],
        *,
        create_missing: bool = False,
    ) -> list[int]:
        """Group commit: append each ``(world, expected_head, entries)`` of ``batches`` (one
        per world) in one transaction, all or nothing; return the first new heights, in
        order. ``HeadAdvanced`` names the world whose head moved (``.world``), and nothing is
        written. With ``create_missing``, a world that does not exist and whose batch
        expects head 0 is created in the same transaction (an empty genesis, as
        :meth:`create_world` with its defaults); otherwise it is ``WorldNotFound``. The
        limits of one append apply to the whole group: ``max_batch_entries``,
        ``max_batch_bytes`` and the transaction budget."""
        check_sequence(batches, "batches", 1, self.config.max_batch_entries)
        return self._append_group(universe, batches, create_missing, None).first_heights

    @traced("journal.append_sequenced")
    def append_sequenced(
        self,
        universe: UniverseId,
        batches: Sequence[tuple[WorldId, int, Sequence[bytes]]],
        tags: Sequence[Sequence[str]],
        *,
        create_missing: bool = False,
        tracking: tuple[str, int] | None = None,
    ) -> journal.GroupAppend:
        """:meth:`append_batches`, and every entry also gets the next position of the
        universe log, in batch order, tagged ``tags[batch][entry]`` (non-empty text):
        positions start at 1 and follow commit order without gaps, so a reader of the log
        sees a prefix of what committed (sequenced appends of a universe serialize on the
        log head). ``tracking=(name, position)`` records, in the same transaction, that
        consumer ``name`` processed upstream position ``position``: a position at or below
        the one it recorded is ``TrackingConflict`` and nothing is written. ``batches`` may
        be empty if ``tracking`` is given. Returns the first heights and the first position
        (``None`` if no entry)."""
        low = 0 if tracking is not None else 1
        check_sequence(batches, "batches", low, self.config.max_batch_entries)
        check_sequence(tags, "tags", len(batches), len(batches))
        if tracking is not None:
            if not isinstance(tracking, tuple) or len(tracking) != 2:
                raise Validation("tracking", "expected a (name, position) pair")
            check_text(tracking[0], "tracking.name")
            check_int(tracking[1], "tracking.position", 1, MAX_HEIGHT)
        return self._append_group(universe, batches, create_missing, (tags, tracking))

    def _append_group(
        self,
        universe: UniverseId,
        batches: Sequence[tuple[WorldId, int, Sequence[bytes]]],
        create_missing: bool,
        sequenced: tuple[Sequence[Sequence[str]], tuple[str, int] | None] | None,
    ) -> journal.GroupAppend:
        """Check a group append (``batches`` already checked as a sequence, ``sequenced``'s
        tags as one of their length, its tracking) and run it."""
        keys = _universe_keys(universe)
        check_bool(create_missing, "create_missing")
        parts: list[journal.WorldAppend] = []
        seen: set[WorldId] = set()
        for index, batch in enumerate(batches):
            field = f"batches[{index}]"
            if not isinstance(batch, (tuple, list)) or len(batch) != 3:
                raise Validation(field, "expected a (world, expected_head, entries) triple")
            world, expected_head, entries = batch
            world_keys = keys.world(check_id(world, WorldId, f"{field}.world"))
            if world_keys.world in seen:
                raise Validation(f"{field}.world", f"{world} has two batches: one per world")
            seen.add(world_keys.world)
            check_height(expected_head, f"{field}.expected_head")
            self._check_entries(entries, f"{field}.entries")
            if expected_head > MAX_HEIGHT - len(entries):
                raise Validation(
                    f"{field}.expected_head",
                    f"{expected_head} + {len(entries)} entries passes 2**64-1",
                )
            parts.append(journal.WorldAppend(world_keys, expected_head, list(entries)))
        sequencing = None
        if sequenced is not None:
            tags, tracking = sequenced
            checked: list[list[str]] = []
            valid: set[str] = set()  # tags checked already (an insert's mostly repeat)
            for index, (part, batch_tags) in enumerate(zip(parts, tags, strict=True)):
                field = f"tags[{index}]"
                check_sequence(batch_tags, field, len(part.entries), len(part.entries))
                for i, tag in enumerate(batch_tags):
                    if type(tag) is not str or tag not in valid:
                        valid.add(check_text(tag, f"{field}[{i}]"))
                checked.append(list(batch_tags))
            sequencing = log.Sequencing(checked, tracking)
        count = sum(len(part.entries) for part in parts)
        size = sum(len(entry) for part in parts for entry in part.entries)
        limits = self.config.max_batch_entries, self.config.max_batch_bytes
        if count > limits[0]:
            raise Validation("batches", f"{count:,} entries > max {limits[0]:,}")
        if size > limits[1]:
            raise Validation("batches", f"{size:,} bytes > max {limits[1]:,}")
        create = self._creation(universe) if create_missing else None
        tags = [] if sequencing is None else sequencing.tags
        if budget.group_append_bound([p.entries for p in parts], tags) > self.budget:
            budget.check(
                budget.group_append_cost(
                    keys, [(p.keys, p.expected_head + 1, p.entries) for p in parts], create
                )
                + (0 if sequencing is None else budget.sequencing_cost(keys, sequencing)),
                self.budget,
                "batches",
                f"appending {count:,} entries ({size:,} bytes) to {len(parts):,} worlds",
            )
        call = self.new_call()
        done = kv.run(
            self.engine,
            lambda tr: journal.append_batches(tr, keys, parts, create, call, sequencing),
            alone=sequencing is not None,  # every sequenced append writes the log head
        )
        self.hooks.reached("journal.after_append")
        return done

    def _creation(self, universe: UniverseId) -> journal.Creation:
        """How a group append creates a world: :meth:`create_world`'s defaults. Genesis
        blobs the configuration keeps inline are written in the append's transaction;
        others are stored first."""
        for body in self._genesis.external:
            self.put_verified(universe, body)
        return journal.Creation(
            WorldMeta(created_ns=self._now()), self._genesis.record, self._genesis.inline
        )

    @traced("log.head")
    def log_head(self, universe: UniverseId) -> int:
        """The universe log's last position (0 if nothing was sequenced)."""
        keys = _universe_keys(universe)
        return kv.run(self.engine, lambda tr: log.read_log_head(tr, keys, snapshot=True))

    def wait_log(
        self,
        universe: UniverseId,
        after: int,
        timeout: float,
        *,
        interrupt: threading.Event | None = None,
    ) -> int:
        """Wait until the universe log's head is above ``after``, ``timeout`` seconds pass
        or ``interrupt`` is set; return the head (at most ``after`` unless it moved). Uses
        the engine's change notification (``Engine.wait_changed``): no busy loop; with
        ``interrupt``, in slices of at most :data:`INTERRUPT_SECONDS`."""
        check_height(after, "after")
        key = _universe_keys(universe).log_head()
        return self._wait(
            key, log.log_position, lambda position: position > after, timeout, interrupt
        )

    def wait_tracking(
        self,
        universe: UniverseId,
        name: str,
        at_least: int,
        timeout: float,
        *,
        interrupt: threading.Event | None = None,
    ) -> int | None:
        """Wait until consumer ``name`` has recorded a position of at least ``at_least``,
        ``timeout`` seconds pass or ``interrupt`` is set; return its position (``None`` if
        it recorded none). Waits as :meth:`wait_log` does, on the tracking record."""
        check_text(name, "name")
        check_height(at_least, "at_least")
        key = _universe_keys(universe).tracking(name)
        return self._wait(
            key,
            log.tracked_position,
            lambda position: position is not None and position >= at_least,
            timeout,
            interrupt,
        )

    def _wait(
        self,
        key: bytes,
        decode: Callable[[bytes | None], T],
        reached: Callable[[T], bool],
        timeout: float,
        interrupt: threading.Event | None,
    ) -> T:
        """Read ``key`` until ``reached`` by its decoded value, ``timeout`` seconds pass or
        ``interrupt`` is set, waiting for it to change between reads; the last value."""
        check_number(timeout, "timeout", 0, MAX_WAIT_SECONDS)
        if interrupt is not None and not isinstance(interrupt, threading.Event):
            raise Validation("interrupt", f"a threading.Event, not {type(interrupt).__name__}")
        deadline = time.monotonic() + timeout
        while True:
            seen = kv.run(self.engine, lambda tr: tr.get(key, snapshot=True))
            value = decode(seen)
            left = deadline - time.monotonic()
            if reached(value) or left <= 0 or (interrupt is not None and interrupt.is_set()):
                return value
            if interrupt is not None:
                left = min(left, INTERRUPT_SECONDS)
            self.engine.wait_changed(key, seen, left)

    @traced("log.tracking")
    def tracking_position(self, universe: UniverseId, name: str) -> int | None:
        """The upstream position consumer ``name`` recorded last (``None`` if none)."""
        keys = _universe_keys(universe)
        check_text(name, "name")
        return kv.run(self.engine, lambda tr: log.read_tracking(tr, keys, name, snapshot=True))

    @traced("log.read")
    def read_log(
        self,
        universe: UniverseId,
        first: int,
        limit: int,
        *,
        last: int | None = None,
        tags: Collection[str] | None = None,
    ) -> list[log.LogEntry]:
        """Up to ``limit`` entries of the universe log from position ``first`` (to ``last``,
        or the head), in position order, each with its world, height, tag and journal entry
        (read through cold segments like :meth:`read_range`); with ``tags``, only entries
        with one of those tags. Reads a page of ``read_page_entries`` records per
        transaction, so a filter that matches nothing still ends."""
        keys = _universe_keys(universe)
        check_height(first, "first", allow_zero=False)
        _limit(limit)
        if last is not None:
            check_height(last, "last")
        wanted = None
        if tags is not None:
            if isinstance(tags, (str, bytes)) or not isinstance(tags, Collection):
                raise Validation(
                    "tags", f"expected a collection of text, got {type(tags).__name__}"
                )
            wanted = {check_text(tag, "tags") for tag in tags}

        def matches(record: LogRecord) -> bool:
            return wanted is None or record.tag in wanted

        found: list[tuple[int, LogRecord]] = []
        entries: dict[int, bytes] = {}
        while len(found) < limit:
            # without a filter, a page need not be longer than what is still wanted
            page_size = self.config.read_page_entries
            if wanted is None:
                page_size = min(page_size, limit - len(found))
            page = drive(log.read_log(self.engine, keys, first, page_size, last, matches))
            found.extend(item for item in page.records if matches(item[1]))
            entries.update(page.entries)
            if page.next is None:
                break
            first = page.next
        found = found[:limit]
        by_world: dict[WorldId, list[int]] = {}
        for position, record in found:
            if position not in entries:  # cold, or stored in chunks
                by_world.setdefault(record.world, []).append(record.height)
        read: dict[tuple[WorldId, int], bytes] = {}
        for world, heights in by_world.items():
            low, high = min(heights), max(heights)
            # one stitched read of the span, unless it is mostly other entries
            spans = [(low, high)] if high - low < 4 * len(heights) else [(h, h) for h in heights]
            wanted_heights = set(heights)
            for start, stop in spans:
                for height, entry in self.read_range(universe, world, start, stop - start + 1):
                    if height in wanted_heights:
                        read[(world, height)] = entry
        out = []
        for position, record in found:
            stored = entries.get(position)
            if stored is None:
                stored = read.get((record.world, record.height))
            if stored is None:
                raise CorruptRecord(
                    f"universe log at {position}",
                    f"names height {record.height} of world {record.world}, above its head",
                )
            out.append(log.LogEntry(position, record.world, record.height, record.tag, stored))
        return out

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
        keys = _world_keys(universe, world)
        check_height(from_inclusive, "from_inclusive", allow_zero=False)
        _limit(limit)
        if limit == 0:
            drive(
                journal.read_entries(self.engine, keys, from_inclusive, 0)
            )  # NotFound if no world
            return []
        out: list[tuple[int, bytes]] = []
        while len(out) < limit:
            first = from_inclusive + len(out)
            want = min(self.config.read_page_entries, limit - len(out))
            page = drive(
                journal.read_entries(self.engine, keys, first, want, self.config.read_page_bytes)
            )
            if page.segment is not None:
                segment = page.segment
                last = min(segment.end, page.head, first + want - 1)
                rows = self._cold(universe, world, segment, first, last)
                # Every page must move the read forward by exactly the heights it asked
                # for: a source that returns less (or other heights) fails, never loops.
                if len(rows) != last - first + 1 or rows[0][0] != first or rows[-1][0] != last:
                    raise SegmentIndexCorruption(
                        str(world),
                        segment.end,
                        f"segment {segment.start}-{segment.end} ({segment.object_key}) gave "
                        f"{len(rows)} entries for heights {first}-{last}",
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
        keys = _world_keys(universe, world)
        check_height(from_inclusive, "from_inclusive", allow_zero=False)
        _limit(limit)
        page = drive(
            journal.read_entries(
                self.engine, keys, from_inclusive, limit, self.config.read_page_bytes
            )
        )
        return page.rows

    @traced("journal.head")
    def head(self, universe: UniverseId, world: WorldId) -> int:
        """The journal head (0 when empty)."""
        return drive(journal.read_entries(self.engine, _world_keys(universe, world), 1, 0)).head

    # ------------------------------------------------------------------ segment index

    @traced("segments.put")
    def put_segment(self, universe: UniverseId, world: WorldId, record: SegmentIndexRecord) -> None:
        """Index an uploaded segment, checked as export guarantees it: the world exists
        (``WorldNotFound``); the record names the canonical object of its range, ends at or
        below the head and below the active baseline (or at or below the cold horizon), and
        continues the index without gap or overlap (``Validation`` naming the field,
        ``SegmentOverlap``); the object exists (``SegmentMissing``) and its header,
        checksum and size are the record's."""
        _world_keys(universe, world)  # ``Validation`` naming a malformed id
        if not isinstance(record, SegmentIndexRecord):
            raise Validation("record", f"a SegmentIndexRecord, not {type(record).__name__}")
        problem = segment_index.record_problem(universe, world, record)
        if problem is not None:
            raise Validation(f"record.{problem[0]}", problem[1])
        head = self.head(universe, world)  # WorldNotFound before any object is read
        if record.end > head:
            raise Validation("record.end", f"{record.end} is above the journal head {head}")
        if self.segments is None:
            raise MissingDependency(
                "put_segment verifies the segment object: open the plane with segments.open_plane"
            )
        try:
            self.segments.read(universe, world, record, 1, 0)  # reads and checks it whole
        except (
            segment_index.SegmentRecordMismatch,
            segment_index.SegmentRecordChecksumMismatch,
        ) as exc:
            raise Validation(f"record.{exc.field}", str(exc)) from None
        drive(export.put_segment(self.engine, UniverseKeys(universe), world, record))

    @traced("segments.cold_horizon")
    def set_cold_horizon(self, universe: UniverseId, world: WorldId, height: int) -> int:
        """Let export move heights ``1..height`` of ``world`` to cold segments whatever its
        active baseline: for worlds whose readers replay entries through :meth:`read_range`
        (which reads cold segments) rather than restoring from a baseline. The horizon only
        rises (a lower ``height`` leaves it); it cannot pass the head (``Validation``).
        Returns the horizon."""
        keys = _world_keys(universe, world)
        check_height(height, "height")

        async def raise_horizon(tr: kv.Transaction) -> int:
            head = (await journal.read_head(tr, keys, snapshot=True)).height
            if height > head:
                raise Validation("height", f"{height} is above the journal head {head}")
            current = await segment_index.read_cold_horizon(tr, keys, snapshot=False)
            if height <= current:
                return current
            tr.set(keys.cold_horizon(), ColdHorizon(height).to_cbor())
            return height

        return kv.run(self.engine, raise_horizon)

    @traced("segments.list")
    def list_segments(
        self, universe: UniverseId, world: WorldId, from_height: int = 1
    ) -> list[SegmentIndexRecord]:
        """Segments of ``world`` ending at or after ``from_height``, in height order."""
        keys = _world_keys(universe, world)
        check_height(from_height, "from_height")
        return drive(
            segment_index.list_segments(
                self.engine, UniverseKeys(keys.universe), keys.world, from_height
            )
        )

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
        encoded = encode_inbox_item(item, "item")
        if idempotency_key is None:
            idempotency_key = self._own_key()
        else:
            check_bytes(idempotency_key, "idempotency_key", low=1, high=MAX_IDEMPOTENCY_KEY_BYTES)
        return self._enqueue(_world_keys(universe, world), [encoded], [idempotency_key])[0]

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

        Items without a caller key get a random one where a commit result may be unknown,
        so a retry never duplicates them (``_own_key``); a caller key makes repeats across
        calls return the first sequence too, until inbox compaction removes the item: at
        least ``config.inbox_retention_seconds`` after it was drained (then a repeat makes a
        new item)."""
        keys = _world_keys(universe, world)
        # user versions are two bytes: at most 65,536 items per transaction
        check_sequence(items, "items", 1, min(self.config.max_batch_entries, 65_536))
        encoded = [encode_inbox_item(item, f"items[{i}]") for i, item in enumerate(items)]
        idem: list[bytes | None]
        if idempotency_keys is None:
            idem = [self._own_key() for _ in items]
        else:
            check_sequence(idempotency_keys, "idempotency_keys", len(items), len(items))
            idem = [
                check_bytes(key, f"idempotency_keys[{i}]", low=1, high=MAX_IDEMPOTENCY_KEY_BYTES)
                for i, key in enumerate(idempotency_keys)
            ]
            if len(set(idem)) != len(idem):
                raise Validation("idempotency_keys", "duplicate key within one batch")
        return self._enqueue(keys, encoded, idem)

    def _own_key(self) -> bytes | None:
        """The idempotency key of an item enqueued without one: random where a commit's
        result may be unknown (the retry must find the item the first attempt stored);
        none where it never is (SQLite: a failed commit stored nothing), which spares the
        index entry -- a random page of the B-tree per item."""
        return os.urandom(OWN_KEY_BYTES) if self.engine.commit_may_be_unknown else None

    def _enqueue(
        self, keys: WorldKeys, encoded: list[bytes], idem: list[bytes | None]
    ) -> list[InboxSeq]:
        """Protocol C for checked items (their stored bytes) and distinct idempotency keys
        (``None``: no idempotency entry). Limits are checked as FoundationDB stores the
        items: a keyless one counts the key it gets there (in its envelope and as an
        idempotency entry), so that what one engine accepts every engine accepts."""
        envelopes = [envelope_bytes(i, k) for i, k in zip(encoded, idem, strict=True)]
        if sum(len(item) for item in encoded) > self.config.max_batch_bytes:
            raise Validation("items", f"batch larger than {self.config.max_batch_bytes} bytes")
        counted = [_OWN_KEY if k is None else k for k in idem]
        sizes = [
            len(e) + (OWN_KEY_ENVELOPE_BYTES if k is None else 0)
            for e, k in zip(envelopes, idem, strict=True)
        ]
        for index, size in enumerate(sizes):
            if size > kv.MAX_VALUE_SIZE:
                raise Validation(
                    f"items[{index}]",
                    f"the item's inbox envelope, with an idempotency key, is {size:,} bytes > "
                    f"{kv.MAX_VALUE_SIZE:,} "
                    "(FoundationDB's value limit): put large payloads in the CAS and enqueue "
                    "their hash",
                )
        costed = list(zip(counted, sizes, strict=True))
        if budget.enqueue_bound(costed) > self.budget:  # else surely within it
            budget.check(
                budget.enqueue_cost(keys, costed),
                self.budget,
                "items",
                f"enqueueing {len(envelopes):,} items",
            )
        pending = drive(inbox.enqueue(self.engine, keys, list(zip(idem, envelopes, strict=True))))
        self.hooks.reached("inbox.after_enqueue")
        return pending.seqs(len(envelopes))

    @traced("inbox.read_after")
    def read_after(
        self, universe: UniverseId, world: WorldId, after_exclusive: InboxSeq | None, limit: int
    ) -> list[tuple[InboxSeq, InboxItem]]:
        """Up to ``limit`` items after ``after_exclusive`` in sequence order (``limit`` 0:
        none -- unlike the engine's ``get_range``, where 0 means no limit)."""
        keys = _world_keys(universe, world)
        if after_exclusive is not None:
            check_id(after_exclusive, InboxSeq, "after_exclusive")
        return drive(inbox.read_after(self.engine, keys, after_exclusive, _limit(limit)))

    @traced("inbox.cursor")
    def inbox_cursor(self, universe: UniverseId, world: WorldId) -> InboxSeq | None:
        """The drained boundary (``None`` before the first drain; ``WorldNotFound`` if there
        is no such world)."""
        keys = _world_keys(universe, world)

        async def read(tr: kv.Transaction) -> InboxCursor | None:
            await journal.read_head(tr, keys)
            return await inbox.read_cursor(tr, keys)

        record = kv.run(self.engine, read)
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
        keys = _world_keys(universe, world)
        if old_cursor is not None:
            check_id(old_cursor, InboxSeq, "old_cursor")
        check_id(new_cursor, InboxSeq, "new_cursor")
        drive(inbox.commit_cursor(self.engine, keys, old_cursor, new_cursor, self.new_call()))
        self.hooks.reached("inbox.after_commit_cursor")

    @traced("drain.drain")
    def drain_inbox_to_journal(
        self,
        universe: UniverseId,
        world: WorldId,
        max_items: int = 1_000,
        max_bytes: int = MiB,
        normalize: Normalizer = default_normalizer,
    ) -> DrainResult:
        """Protocol D: move up to ``max_items``/``max_bytes`` of items into the journal and
        advance the cursor, atomically; each item lands exactly once. ``normalize`` must
        return bytes; whatever else it returns or raises is ``Validation`` naming it, with
        nothing written."""
        keys = _world_keys(universe, world)
        check_int(max_items, "max_items", 1, self.config.max_batch_entries)
        check_int(max_bytes, "max_bytes", 1, self.config.max_batch_bytes)
        if not callable(normalize):
            raise Validation("normalize", f"expected a function, got {type(normalize).__name__}")
        limits = drain.DrainLimits(max_items, max_bytes, self.config.max_entry_bytes, self.budget)
        result = drive(drain.drain(self.engine, keys, limits, normalize, self.new_call()))
        self.hooks.reached("inbox.after_drain")
        return result

    @traced("drain.drain_worlds")
    def drain_worlds(
        self,
        universe: UniverseId,
        worlds: Sequence[WorldId],
        max_items: int = 100,
        max_bytes: int = 256 * KiB,
        normalize: Normalizer = default_normalizer,
    ) -> dict[WorldId, DrainResult]:
        """Protocol D for several worlds of ``universe`` in one transaction: one durable
        commit for all. Each world of ``worlds`` (distinct, at most 1,000) is drained as by
        :meth:`drain_inbox_to_journal` with ``max_items``/``max_bytes``, in order; the
        transaction's budget is shared, so a world reached when it is spent drains fewer
        items, possibly none (its result says so). ``len(worlds) * max_items`` and
        ``len(worlds) * max_bytes`` must be within ``max_batch_entries`` and
        ``max_batch_bytes``. A missing world is ``WorldNotFound``, a normalizer that fails
        ``Validation`` naming it: nothing is written. Returns each world's result, in the
        order given; a retry after an applied ``commit_unknown_result`` returns its own."""
        keys = _universe_keys(universe)
        check_sequence(worlds, "worlds", 1, drain.MAX_DRAIN_WORLDS)
        parts: list[WorldKeys] = []
        seen: set[WorldId] = set()
        for index, world in enumerate(worlds):
            part = keys.world(check_id(world, WorldId, f"worlds[{index}]"))
            if part.world in seen:
                raise Validation(f"worlds[{index}]", f"{world} is listed twice: once per call")
            seen.add(part.world)
            parts.append(part)
        for field, value, limit in (
            ("max_items", max_items, self.config.max_batch_entries),
            ("max_bytes", max_bytes, self.config.max_batch_bytes),
        ):
            check_int(value, field, 1, limit)
            if value * len(parts) > limit:
                raise Validation(
                    field,
                    f"{len(parts):,} worlds x {value:,} > {limit:,} for one transaction "
                    f"(PlaneConfig.max_batch_{'entries' if field == 'max_items' else 'bytes'})",
                )
        if not callable(normalize):
            raise Validation("normalize", f"expected a function, got {type(normalize).__name__}")
        limits = drain.DrainLimits(max_items, max_bytes, self.config.max_entry_bytes, self.budget)
        results = drive(
            drain.drain_worlds(self.engine, keys, parts, limits, normalize, self.new_call())
        )
        self.hooks.reached("inbox.after_drain")
        return {part.world: result for part, result in zip(parts, results, strict=True)}

    @traced("inbox.compact")
    def compact_inbox(
        self,
        universe: UniverseId,
        world: WorldId,
        *,
        max_items: int = 1_000,
        now_ns: Callable[[], int] | None = None,
    ) -> InboxCompaction:
        """One inbox compaction transaction (``protocols/compaction.py``): mark the cursor if a
        mark is due, then remove up to ``max_items`` items consumed at least
        ``config.inbox_retention_seconds`` ago (by the marks) with their idempotency
        entries; call again while the result's ``more``. Never removes an item above the
        cursor. ``now_ns`` is the clock (nanoseconds since the epoch; the plane's by default)."""
        keys = _world_keys(universe, world)
        check_int(max_items, "max_items", 1, self.config.max_batch_entries)
        now_ns = self.clock if now_ns is None else now_ns
        if not callable(now_ns):
            raise Validation("now_ns", f"expected a function, got {type(now_ns).__name__}")
        limits = compaction.CompactionLimits(
            self.config.inbox_retention_ns, max_items, self.config.read_page_bytes, self.budget
        )
        result = drive(
            compaction.compact(
                self.engine, keys, limits, compaction.never_back(now_ns), self.new_call()
            )
        )
        self.hooks.reached("inbox.after_compact")
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
        optionally promote (gated by the receipt-horizon fence and root completeness: every
        blob of ``manifest`` must be in the universe's CAS, else ``RootIncomplete``).

        Everything that can refuse the commit is checked before the blobs are put, so a
        refused commit stores nothing."""
        keys = _world_keys(universe, world)
        check_bytes(snapshot_bytes, "snapshot_bytes")
        check_height(height, "height")
        check_int(logical_time_ns, "logical_time_ns", 0, MAX_HEIGHT)
        check_sequence(manifest, "manifest", 0, MAX_ROW_LIMIT)
        listed = [check_id(h, Hash, f"manifest[{i}]") for i, h in enumerate(manifest)]
        if receipt_horizon_height is not None:
            check_height(receipt_horizon_height, "receipt_horizon_height")
        check_bool(promote_baseline, "promote_baseline")
        manifest_bytes = cbor.encode([h.digest for h in listed])
        record = SnapshotRecord(
            Hash.of(snapshot_bytes),
            height,
            logical_time_ns,
            Hash.of(manifest_bytes),
            receipt_horizon_height,
        )
        drive(snapshots.check_commit(self.engine, keys, record, promote_baseline))
        if promote_baseline:
            roots.check_root(self.cas, keys.universe, record, listed)
        self.put_verified(universe, snapshot_bytes)
        self.put_verified(universe, manifest_bytes)
        self.hooks.reached("snapshot.after_cas")
        outcome = drive(
            snapshots.commit_snapshot(self.engine, keys, record, promote_baseline, self.new_call())
        )
        self.hooks.reached("snapshot.after_commit")
        return record, outcome

    @traced("snapshot.index")
    def index_snapshot(self, universe: UniverseId, world: WorldId, record: SnapshotRecord) -> None:
        """Index an already stored snapshot (no promotion)."""
        keys = _world_keys(universe, world)
        _encoded(record, (SnapshotRecord,), "record")
        drive(snapshots.commit_snapshot(self.engine, keys, record, False, self.new_call()))

    @traced("baseline.read")
    def active_baseline(self, universe: UniverseId, world: WorldId) -> SnapshotRecord:
        """The active baseline."""
        keys = _world_keys(universe, world)
        return kv.run(self.engine, lambda tr: snapshots.read_baseline(tr, keys))

    @traced("baseline.promote")
    def promote_baseline(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Promote an indexed snapshot: the receipt-horizon fence, non-regression and root
        completeness (its snapshot, manifest and every blob the manifest names are in the
        universe's CAS, else ``RootIncomplete`` naming the missing blob) are checked."""
        keys = _world_keys(universe, world)
        _encoded(record, (SnapshotRecord,), "record")
        snapshots.check_fence(record)
        roots.check_root(self.cas, keys.universe, record, None)
        drive(snapshots.promote_baseline(self.engine, keys, record, self.new_call()))

    @traced("snapshot.list")
    def list_snapshots(self, universe: UniverseId, world: WorldId) -> list[SnapshotRecord]:
        """Every indexed snapshot of the world."""
        return drive(snapshots.list_snapshots(self.engine, _world_keys(universe, world)))

    # ------------------------------------------------------------------ effects and timers

    @traced("effects.dispatch")
    def dispatch_effect(self, universe: UniverseId, item: EffectDispatchItem) -> InboxSeq:
        """Queue an effect for the effect workers; once per intent hash."""
        keys = _universe_keys(universe)
        encoded = _encoded(item, (EffectDispatchItem,), "item")
        _value_fits(encoded, "item", kv.MAX_VALUE_SIZE - CLAIM_RESERVE)
        pending = drive(effects.dispatch(self.engine, keys, item))
        self.hooks.reached("effects.after_dispatch")
        return pending.seq()

    @traced("effects.pending")
    def pending_effects(
        self, universe: UniverseId, limit: int = 1_000
    ) -> list[tuple[InboxSeq, EffectDispatchItem]]:
        """Pending effects in dispatch order."""
        return drive(effects.list_pending(self.engine, _universe_keys(universe), _limit(limit)))

    @traced("effects.inflight")
    def inflight_effects(
        self, universe: UniverseId, limit: int = 1_000
    ) -> list[tuple[InboxSeq, EffectInFlightItem]]:
        """Claimed effects in dispatch order."""
        return drive(effects.list_inflight(self.engine, _universe_keys(universe), _limit(limit)))

    @traced("effects.claim")
    def claim_effect(self, universe: UniverseId, seq: InboxSeq, worker: str) -> EffectInFlightItem:
        """Move a pending effect to in-flight for ``worker`` (repeatable by the same worker)."""
        keys = _universe_keys(universe)
        check_id(seq, InboxSeq, "seq")
        check_text(worker, "worker")
        return drive(effects.claim(self.engine, keys, seq, worker, self._now(), self.new_call()))

    @traced("effects.complete")
    def complete_effect(self, universe: UniverseId, seq: InboxSeq, intent: Hash) -> None:
        """Forget a finished effect (``Validation`` if the effect at ``seq`` has another
        intent)."""
        keys = _universe_keys(universe)
        check_id(seq, InboxSeq, "seq")
        check_id(intent, Hash, "intent")
        drive(effects.complete(self.engine, keys, seq, intent))

    @traced("timers.schedule")
    def schedule_timer(self, universe: UniverseId, item: TimerDueItem) -> None:
        """Schedule a timer (idempotent)."""
        keys = _universe_keys(universe)
        _value_fits(_encoded(item, (TimerDueItem,), "item"), "item")
        drive(effects.put_timer(self.engine, keys, item))

    @traced("timers.due")
    def due_timers(
        self, universe: UniverseId, until_ns: int, limit: int = 1_000
    ) -> list[TimerDueItem]:
        """Timers due before ``until_ns``, earliest first."""
        keys = _universe_keys(universe)
        check_int(until_ns, "until_ns", 0, MAX_HEIGHT)
        return drive(effects.due_timers(self.engine, keys, until_ns, _limit(limit)))

    @traced("timers.remove")
    def remove_timer(self, universe: UniverseId, item: TimerDueItem) -> None:
        """Remove a fired or cancelled timer."""
        keys = _universe_keys(universe)
        _encoded(item, (TimerDueItem,), "item")
        drive(effects.remove_timer(self.engine, keys, item.deliver_at_ns, item.intent_hash))
