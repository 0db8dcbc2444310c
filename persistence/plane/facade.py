"""The two doors to the plane: :class:`Plane` (blocking) and :class:`AsyncPlane` (asyncio).

Both are thin: every operation is a coroutine of :class:`Operations` (the parts of
``plane/*.py``, composed), checked and written once; :class:`Plane` runs it with the
blocking driver on the calling thread, :class:`AsyncPlane` with the asyncio driver, so one
event loop keeps many transactions in flight (``persistence/futures.py``). The surface of
each is a list of the operations it exposes (a descriptor per operation, typed from the
coroutine's own signature: ``Plane.append_batch`` takes what
``Operations.append_batch`` takes and returns its value; ``AsyncPlane.append_batch``
returns an awaitable of it).
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, Final, Generic, ParamSpec, TypeVar, overload

from persistence.errors import Validation
from persistence.futures import drive, drive_async
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.ids import UniverseId, WorldId, check_id
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane.app_data import AppDataOperations
from persistence.plane.config import PlaneConfig
from persistence.plane.core import SegmentSource, universe_keys
from persistence.plane.effects import EffectOperations
from persistence.plane.inbox import InboxOperations
from persistence.plane.log import LogOperations
from persistence.plane.segments import SegmentOperations
from persistence.plane.snapshots import SnapshotOperations
from persistence.protocols.calls import Call
from persistence.protocols.checksums import Sealing

P = ParamSpec("P")
T = TypeVar("T")


class Operations(
    LogOperations,
    SegmentOperations,
    InboxOperations,
    SnapshotOperations,
    EffectOperations,
    AppDataOperations,
):
    """Every operation of the plane, as coroutines: what both doors run."""


Op = Callable[Concatenate[Operations, P], Coroutine[Any, Any, T]]


class _Door:
    """What both doors share: the operations, and the settings they run with."""

    def __init__(self, operations: Operations) -> None:
        self._operations = operations
        self.engine = operations.engine
        self.objects = operations.objects
        self.config = operations.config
        self.segments = operations.segments
        self.hooks = operations.hooks
        self.clock = operations.clock
        """The wall clock (nanoseconds since the epoch) of call ids, creation and claim
        times and inbox compaction."""
        self.budget = operations.budget
        """Bytes one transaction of this plane may count (``protocols/budget.py``)."""
        self.busy_worlds = operations.busy_worlds
        """Worlds the plane's group drains found busy lately (``protocols/drain.py``)."""
        self.log_busy_until = operations.log_busy_until
        """Universes whose sequenced appends overlapped lately, and until when an adaptive
        plane queues their log records (``PlaneConfig.log_sequencing``)."""

    def new_call(self) -> Call:
        """A new write call: its id is drawn here, outside the retry loop."""
        return self._operations.new_call()

    @property
    def layout(self) -> int | None:
        """The store's layout version (``keyspace.LAYOUT_VERSION``; an older store keeps
        its own); ``None`` while a store opened without ``create`` is empty."""
        return self._operations.layout

    @property
    def checksummed(self) -> bool:
        """Whether the store's journal entries carry checksums (``protocols/checksums.py``),
        as far as is known (an empty store's first creator writes the current layout)."""
        return self._operations.checksummed

    @property
    def sealing(self) -> Sealing | None:
        """How the store's journal entries are sealed (their checksum: ``algorithm``;
        ``None``: without checksums), as far as is known, as :attr:`checksummed`."""
        return self._operations.known_sealing


class _Blocking(Generic[P, T]):
    """An operation of :class:`Plane`: the coroutine run on the calling thread."""

    def __init__(self, fn: Op[P, T]) -> None:
        self._fn = fn
        self.__doc__ = fn.__doc__
        self._name = fn.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __call__(self, door: Plane, /, *args: P.args, **kwargs: P.kwargs) -> T:
        """The operation on ``door`` (``Plane.append_batch(plane, ...)``, as a method)."""
        return drive(self._fn(door._operations, *args, **kwargs))

    @overload
    def __get__(self, door: None, owner: type) -> _Blocking[P, T]: ...

    @overload
    def __get__(self, door: Plane, owner: type) -> Callable[P, T]: ...

    def __get__(self, door: Plane | None, owner: type) -> _Blocking[P, T] | Callable[P, T]:
        if door is None:
            return self
        fn, operations = self._fn, door._operations

        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return drive(fn(operations, *args, **kwargs))

        functools.update_wrapper(call, fn)
        door.__dict__[self._name] = call  # made once per plane: later lookups find it
        return call


class _Awaitable(Generic[P, T]):
    """An operation of :class:`AsyncPlane`: the coroutine run from the event loop."""

    def __init__(self, fn: Op[P, T]) -> None:
        self._fn = fn
        self.__doc__ = fn.__doc__
        self._name = fn.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    async def __call__(self, door: AsyncPlane, /, *args: P.args, **kwargs: P.kwargs) -> T:
        """The operation on ``door``, as a method."""
        return await drive_async(self._fn(door._operations, *args, **kwargs), door.executor)

    @overload
    def __get__(self, door: None, owner: type) -> _Awaitable[P, T]: ...

    @overload
    def __get__(self, door: AsyncPlane, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(
        self, door: AsyncPlane | None, owner: type
    ) -> _Awaitable[P, T] | Callable[P, Coroutine[Any, Any, T]]:
        if door is None:
            return self
        fn, operations, executor = self._fn, door._operations, door.executor

        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return await drive_async(fn(operations, *args, **kwargs), executor)

        functools.update_wrapper(call, fn)
        door.__dict__[self._name] = call
        return call


def _executor(executor: object) -> concurrent.futures.Executor | None:
    if executor is not None and not isinstance(executor, concurrent.futures.Executor):
        raise Validation(
            "executor", f"expected a concurrent.futures.Executor, got {type(executor).__name__}"
        )
    return executor


class Plane(_Door):
    """CAS, journals, inboxes and snapshots of every universe in one engine + object store,
    blocking: each call runs on the calling thread. Opening one records the store's layout
    version in a new store; with ``create=False`` (reading tools) it writes nothing: the
    record is only checked. :meth:`asyncio` gives the same plane for an event loop."""

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
        super().__init__(
            Operations(engine, objects, config, segments, hooks=hooks, clock=clock, create=create)
        )

    def asyncio(self, executor: concurrent.futures.Executor | None = None) -> AsyncPlane:
        """This plane for asyncio: the same engine, store and settings, its operations
        awaitable (``executor`` runs what can only block; the loop's default if ``None``)."""
        return AsyncPlane._of(self._operations, _executor(executor))

    def universes(
        self, page: int = 1_000, *, after: UniverseId | None = None
    ) -> Iterator[UniverseId]:
        """Every universe in the store (after ``after``), in id byte order (``page`` per
        transaction). Arguments are checked at the call, not at the first ``next``."""
        operations = self._operations
        size = operations.listing_page(page)
        start = None if after is None else check_id(after, UniverseId, "after")

        def scan() -> Iterator[UniverseId]:
            after = start
            while batch := drive(operations.universes_page(after, size)):
                yield from batch
                after = batch[-1]

        return scan()

    def worlds(
        self, universe: UniverseId, page: int = 1_000, *, after: WorldId | None = None
    ) -> Iterator[WorldId]:
        """Every world of ``universe`` (after ``after``), in id byte order (``page`` per
        transaction). Arguments are checked at the call, not at the first ``next``."""
        operations = self._operations
        universe_keys(universe)
        size = operations.listing_page(page)
        start = None if after is None else check_id(after, WorldId, "after")

        def scan() -> Iterator[WorldId]:
            after = start
            while batch := drive(operations.worlds_page(universe, after, size)):
                yield from batch
                after = batch[-1]

        return scan()

    def handles(
        self, universe: UniverseId, prefix: str = "", page: int = 1_000
    ) -> Iterator[tuple[str, WorldId]]:
        """Every handle of ``universe``'s worlds that starts with ``prefix``, with its world,
        in handle order (``page`` per transaction; worlds created before handles were
        indexed are not in it)."""
        operations = self._operations
        universe_keys(universe)
        size = operations.listing_page(page)
        if not isinstance(prefix, str):
            raise Validation("prefix", f"expected text, got {type(prefix).__name__}")

        def scan() -> Iterator[tuple[str, WorldId]]:
            after: str | None = None
            while batch := drive(operations.handles_page(universe, prefix, after, size)):
                yield from batch
                after = batch[-1][0]

        return scan()

    # CAS (Protocol A)
    put_verified = _Blocking(Operations.put_verified)
    put_stream = _Blocking(Operations.put_stream)
    get = _Blocking(Operations.get)
    open_blob = _Blocking(Operations.open_blob)
    blob_meta = _Blocking(Operations.blob_meta)
    has = _Blocking(Operations.has)
    require_blob = _Blocking(Operations.require_blob)
    # worlds
    create_world = _Blocking(Operations.create_world)
    world_meta = _Blocking(Operations.world_meta)
    world_of_handle = _Blocking(Operations.world_of_handle)
    hashes_from = _Blocking(Operations.hashes_from)
    # journal (Protocol B) and the universe log
    append_batch = _Blocking(Operations.append_batch)
    append_batches = _Blocking(Operations.append_batches)
    append_sequenced = _Blocking(Operations.append_sequenced)
    retry_append_batch = _Blocking(Operations.retry_append_batch)
    read_range = _Blocking(Operations.read_range)
    read_last = _Blocking(Operations.read_last)
    read_hot = _Blocking(Operations.read_hot)
    head = _Blocking(Operations.head)
    log_head = _Blocking(Operations.log_head)
    settle_log = _Blocking(Operations.settle_log)
    wait_log = _Blocking(Operations.wait_log)
    wait_tracking = _Blocking(Operations.wait_tracking)
    tracking_position = _Blocking(Operations.tracking_position)
    read_log = _Blocking(Operations.read_log)
    # the application's own data (written by group appends)
    read_app_data = _Blocking(Operations.read_app_data)
    read_app_range = _Blocking(Operations.read_app_range)
    transact_app = _Blocking(Operations.transact_app)
    transact_app_stamped = _Blocking(Operations.transact_app_stamped)
    # segment index
    put_segment = _Blocking(Operations.put_segment)
    set_cold_horizon = _Blocking(Operations.set_cold_horizon)
    list_segments = _Blocking(Operations.list_segments)
    # inbox (Protocols C, D)
    enqueue = _Blocking(Operations.enqueue)
    enqueue_batch = _Blocking(Operations.enqueue_batch)
    enqueue_outcomes = _Blocking(Operations.enqueue_outcomes)
    read_after = _Blocking(Operations.read_after)
    inbox_cursor = _Blocking(Operations.inbox_cursor)
    commit_cursor = _Blocking(Operations.commit_cursor)
    drain_inbox_to_journal = _Blocking(Operations.drain_inbox_to_journal)
    drain_worlds = _Blocking(Operations.drain_worlds)
    compact_inbox = _Blocking(Operations.compact_inbox)
    # snapshots (Protocol E)
    snapshot_commit = _Blocking(Operations.snapshot_commit)
    index_snapshot = _Blocking(Operations.index_snapshot)
    active_baseline = _Blocking(Operations.active_baseline)
    promote_baseline = _Blocking(Operations.promote_baseline)
    list_snapshots = _Blocking(Operations.list_snapshots)
    # effects and timers
    dispatch_effect = _Blocking(Operations.dispatch_effect)
    pending_effects = _Blocking(Operations.pending_effects)
    inflight_effects = _Blocking(Operations.inflight_effects)
    claim_effect = _Blocking(Operations.claim_effect)
    complete_effect = _Blocking(Operations.complete_effect)
    schedule_timer = _Blocking(Operations.schedule_timer)
    due_timers = _Blocking(Operations.due_timers)
    remove_timer = _Blocking(Operations.remove_timer)


class AsyncPlane(_Door):
    """:class:`Plane` for asyncio: the same operations and guarantees, each awaitable. On
    FoundationDB a call waits for the bindings' futures from the event loop (no thread per
    call), so one process keeps many transactions in flight; on SQLite each transaction,
    and every object-store call, runs in ``executor`` (the loop's default if ``None``).
    Opening one checks the store's layout in one blocking transaction."""

    executor: concurrent.futures.Executor | None

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
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        super().__init__(
            Operations(engine, objects, config, segments, hooks=hooks, clock=clock, create=create)
        )
        self.executor = _executor(executor)

    @classmethod
    def _of(
        cls, operations: Operations, executor: concurrent.futures.Executor | None
    ) -> AsyncPlane:
        door = cls.__new__(cls)
        _Door.__init__(door, operations)
        door.executor = executor
        return door

    async def universes(self, page: int = 1_000) -> AsyncIterator[UniverseId]:
        """Every universe in the store, in id byte order (``page`` per transaction)."""
        operations = self._operations
        size = operations.listing_page(page)
        after: UniverseId | None = None
        while batch := await drive_async(operations.universes_page(after, size), self.executor):
            for universe in batch:
                yield universe
            after = batch[-1]

    async def worlds(self, universe: UniverseId, page: int = 1_000) -> AsyncIterator[WorldId]:
        """Every world of ``universe``, in id byte order (``page`` per transaction)."""
        operations = self._operations
        universe_keys(universe)
        size = operations.listing_page(page)
        after: WorldId | None = None
        while batch := await drive_async(
            operations.worlds_page(universe, after, size), self.executor
        ):
            for world in batch:
                yield world
            after = batch[-1]

    # CAS (Protocol A)
    put_verified = _Awaitable(Operations.put_verified)
    put_stream = _Awaitable(Operations.put_stream)
    get = _Awaitable(Operations.get)
    open_blob = _Awaitable(Operations.open_blob)
    blob_meta = _Awaitable(Operations.blob_meta)
    has = _Awaitable(Operations.has)
    require_blob = _Awaitable(Operations.require_blob)
    # worlds
    create_world = _Awaitable(Operations.create_world)
    world_meta = _Awaitable(Operations.world_meta)
    world_of_handle = _Awaitable(Operations.world_of_handle)
    hashes_from = _Awaitable(Operations.hashes_from)
    # journal (Protocol B) and the universe log
    append_batch = _Awaitable(Operations.append_batch)
    append_batches = _Awaitable(Operations.append_batches)
    append_sequenced = _Awaitable(Operations.append_sequenced)
    retry_append_batch = _Awaitable(Operations.retry_append_batch)
    read_range = _Awaitable(Operations.read_range)
    read_last = _Awaitable(Operations.read_last)
    read_hot = _Awaitable(Operations.read_hot)
    head = _Awaitable(Operations.head)
    log_head = _Awaitable(Operations.log_head)
    settle_log = _Awaitable(Operations.settle_log)
    wait_log = _Awaitable(Operations.wait_log)
    wait_tracking = _Awaitable(Operations.wait_tracking)
    tracking_position = _Awaitable(Operations.tracking_position)
    read_log = _Awaitable(Operations.read_log)
    # the application's own data (written by group appends)
    read_app_data = _Awaitable(Operations.read_app_data)
    read_app_range = _Awaitable(Operations.read_app_range)
    transact_app = _Awaitable(Operations.transact_app)
    transact_app_stamped = _Awaitable(Operations.transact_app_stamped)
    # segment index
    put_segment = _Awaitable(Operations.put_segment)
    set_cold_horizon = _Awaitable(Operations.set_cold_horizon)
    list_segments = _Awaitable(Operations.list_segments)
    # inbox (Protocols C, D)
    enqueue = _Awaitable(Operations.enqueue)
    enqueue_batch = _Awaitable(Operations.enqueue_batch)
    enqueue_outcomes = _Awaitable(Operations.enqueue_outcomes)
    read_after = _Awaitable(Operations.read_after)
    inbox_cursor = _Awaitable(Operations.inbox_cursor)
    commit_cursor = _Awaitable(Operations.commit_cursor)
    drain_inbox_to_journal = _Awaitable(Operations.drain_inbox_to_journal)
    drain_worlds = _Awaitable(Operations.drain_worlds)
    compact_inbox = _Awaitable(Operations.compact_inbox)
    # snapshots (Protocol E)
    snapshot_commit = _Awaitable(Operations.snapshot_commit)
    index_snapshot = _Awaitable(Operations.index_snapshot)
    active_baseline = _Awaitable(Operations.active_baseline)
    promote_baseline = _Awaitable(Operations.promote_baseline)
    list_snapshots = _Awaitable(Operations.list_snapshots)
    # effects and timers
    dispatch_effect = _Awaitable(Operations.dispatch_effect)
    pending_effects = _Awaitable(Operations.pending_effects)
    inflight_effects = _Awaitable(Operations.inflight_effects)
    claim_effect = _Awaitable(Operations.claim_effect)
    complete_effect = _Awaitable(Operations.complete_effect)
    schedule_timer = _Awaitable(Operations.schedule_timer)
    due_timers = _Awaitable(Operations.due_timers)
    remove_timer = _Awaitable(Operations.remove_timer)


OPERATIONS: Final = tuple(name for name, op in vars(Plane).items() if isinstance(op, _Blocking))
"""The names of the operations both doors expose, each a coroutine of :class:`Operations`
(``Plane.universes`` and ``Plane.worlds``, iterators, aside)."""
