"""What every part of the plane shares: the engine and object store it runs on, its
settings, clock and step hooks, and the checks of arguments that many operations take.

Each part (``plane/cas.py``, ``journal.py``, ...) is a class of *operations*: coroutines that
check their arguments, then run protocols (:mod:`persistence.protocols`) in transactions and
do the steps that cannot be inside one (uploading a CAS body, reading a cold segment). An
operation does no I/O of its own: a transaction is awaited through
:func:`persistence.kv.transact`, work that can only block (object-store calls) as a
:class:`~persistence.futures.Blocking` future, so the blocking :class:`Plane` and the
:class:`AsyncPlane` run the very same operations (``plane/facade.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from persistence import kv, telemetry
from persistence.errors import StoreFormatError, Validation
from persistence.futures import Blocking, drive
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.ids import UniverseId, WorldId, check_id
from persistence.keyspace import LAYOUT_VERSION, UniverseKeys, WorldKeys
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane.config import PlaneConfig
from persistence.protocols import budget, drain, worlds
from persistence.protocols.calls import Call, Sweeps
from persistence.protocols.checksums import Sealing, sealing_of
from persistence.records import Record
from persistence.segment_records import SegmentIndexRecord
from persistence.sizes import MAX_ROW_LIMIT, check_bool, check_int

T = TypeVar("T")

operation = telemetry.traced_coroutine
"""Mark a coroutine method as a plane operation, traced as ``aos.<span>``
(``persistence/telemetry.py``) however it is called: by either facade, or by another
operation (its span is then a child of the caller's)."""


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


class KnownWorlds:
    """Worlds a plane has seen exist (it created them, or an enqueue read their meta).
    Worlds are never deleted, so an enqueue to one needs no read of its meta. Bounded: past
    ``capacity`` worlds it forgets them all and learns again (one read each)."""

    def __init__(self, capacity: int = 65_536) -> None:
        self._known: set[tuple[UniverseId, WorldId]] = set()
        self.capacity = capacity

    def __contains__(self, keys: WorldKeys) -> bool:
        return (keys.universe, keys.world) in self._known

    def add(self, keys: WorldKeys) -> None:
        """Note that the world of ``keys`` exists."""
        if len(self._known) >= self.capacity:
            self._known.clear()
        self._known.add((keys.universe, keys.world))


class Core:
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
        self.log_busy_until: dict[UniverseId, float] = {}
        """Until when (``time.monotonic()``) sequenced appends of a universe overlap: an
        adaptive plane queues their log records until then (``PlaneConfig.log_sequencing``)."""
        self.log_busy_lock = threading.Lock()
        """Held while ``log_busy_until`` is pruned or written."""
        self.budget = budget.budget(engine)
        """Bytes one transaction of this plane may count (``protocols/budget.py``)."""
        self.busy_worlds = drain.BusyWorlds()
        """Worlds the plane's group drains found busy lately (left out of groups' first
        attempts)."""
        self.sweeps = Sweeps()
        """When this plane's calls last cleared each scope's expired call records."""
        self.known_worlds = KnownWorlds()
        """Worlds the plane has seen exist: its enqueues to them read no meta."""
        self.layout = drive(worlds.ensure_layout(engine, check_bool(create, "create")))
        """The store's layout version (``keyspace.LAYOUT_VERSION``; an older store keeps
        its own); ``None`` while a store opened without ``create`` is empty."""

    @property
    def known_sealing(self) -> Sealing | None:
        """How the store's journal entries are sealed (``protocols/checksums.py``; ``None``:
        without checksums), as far as is known without reading: an empty store's first
        creator writes the current layout. Operations ask :meth:`sealing`."""
        return sealing_of(self.layout or LAYOUT_VERSION)

    @property
    def checksummed(self) -> bool:
        """Whether the store's journal entries carry checksums, as far as is known."""
        return self.known_sealing is not None

    async def sealing(self, *, writing: bool) -> Sealing | None:
        """How the store's journal entries are sealed: every write seals them, every read
        checks them. The layout never changes once recorded; a plane opened without
        ``create`` on an empty store reads it on first use. Until a creator records it, the
        store holds nothing to read, and a write is ``StoreFormatError`` (its entries' form
        would be a guess)."""
        if self.layout is None:
            self.layout = await self.transact(worlds.read_layout)
            if self.layout is None and writing:
                raise StoreFormatError(
                    "the store has no layout record yet (nothing was created in it): "
                    "a plane opened without create writes nothing into an empty store"
                )
        return self.known_sealing

    def new_call(self, *, recorded: bool = True) -> Call:
        """A new write call: its id is drawn here, outside the retry loop. It keeps a
        record where the engine's commits may end unknown, unless not ``recorded``."""
        return Call.new(
            self.config.call_record_seconds,
            self.now(),
            recorded=recorded and self.engine.commit_may_be_unknown,
            sweeps=self.sweeps,
        )

    def now(self) -> int:
        """The plane's clock, checked: nanoseconds since the epoch."""
        return check_int(self.clock(), "clock", 0, budget.LATEST_NS)

    def transact(
        self,
        body: Callable[[kv.Transaction], Awaitable[T]],
        *,
        alone: bool = False,
        eager: bool = False,
    ) -> Awaitable[T]:
        """``body`` in a transaction of the plane's engine, with retries (``kv.transact``)."""
        return kv.transact(self.engine, body, alone=alone, eager=eager)

    @staticmethod
    def blocking(call: Callable[[], T]) -> Blocking[T]:
        """Work that can only block (an object-store call), as a future to await."""
        return Blocking(call)


def world_keys(universe: object, world: object) -> WorldKeys:
    """The keys of ``world``, after checking that both ids are ids."""
    return WorldKeys(check_id(universe, UniverseId, "universe"), check_id(world, WorldId, "world"))


def universe_keys(universe: object) -> UniverseKeys:
    """The keys of ``universe``, after checking that it is an id."""
    return UniverseKeys(check_id(universe, UniverseId, "universe"))


def row_limit(value: object, field: str = "limit", low: int = 0) -> int:
    """A listing's row limit."""
    return check_int(value, field, low, MAX_ROW_LIMIT)


def encoded(record: object, kinds: tuple[type[Record], ...], field: str) -> bytes:
    """The stored bytes of a caller's record, after checking its type (a record checks its
    fields when it is built, so encoding it cannot fail half-way through a protocol)."""
    if not isinstance(record, kinds):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise Validation(field, f"expected a {names}, got {type(record).__name__}")
    return record.to_cbor()


def value_fits(encoded: bytes, field: str, limit: int = kv.MAX_VALUE_SIZE) -> None:
    """``Validation`` if a record stored as one value is over ``limit`` bytes."""
    if len(encoded) > limit:
        raise Validation(
            field,
            f"encodes to {len(encoded):,} bytes > {limit:,} (one FoundationDB value): put "
            "large payloads in the CAS and pass their hash",
        )
