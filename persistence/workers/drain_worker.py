"""The drain worker: finds the worlds with pending inbox items through the pending-work index
and drains them fairly, several worlds per transaction (:meth:`Plane.drain_worlds`), as one
process or several.

**Finding work.** A pass begins with a scan of the ready marks of its universes
(``protocols/inbox.py``), only the buckets of its shard, with snapshot reads (a scan never aborts
anything). Every world with items after its cursor has its mark, so the scan finds every
world whose items were committed before it; a mark without items costs one empty drain,
which clears it.

**Fairness: deficit round-robin by items.** Each pass gives every world its scan found one
turn of at most ``quantum`` items (and about ``max_bytes`` of envelopes, at least one item).
In deficit round-robin every item costs one unit, so a world that uses its quantum ends its
turn with no deficit, and one whose inbox empties has its deficit reset: a turn is
``min(quantum, backlog)`` items and no deficit carries from one pass to the next. What does
carry is the rotation: a pass starts after the world the previous pass served last, so no
world is always served last. Turns go, in that order, into transactions of up to
``worlds_per_transaction`` worlds of one universe: one ``drain_worlds`` call, one durable
commit.

The bound: a world whose mark committed before a pass's scan gets a turn in that pass, so a
world waits at most the rest of the pass under way and one more pass; an item with ``k``
older items pending in its world at a pass's scan is journaled by the end of pass
``floor(k / quantum)`` after that one (``tests/plane/test_fairness.py`` checks both). A
turn the transaction's size budget cuts short (entries far larger than their envelopes)
takes fewer items; the world keeps its mark and gets its next turn in the next pass.

**Several processes.** Worker ``i`` of ``n`` (:class:`Shard`) scans buckets
``[i * 256 // n, (i + 1) * 256 // n)`` of the index. A world's bucket is a hash of its id
(``keyspace.ready_bucket``), so each world belongs to exactly one shard: ``n`` workers with
the ``n`` shards drain disjoint worlds and each reads only its part of the index. Two
workers given the same shard are safe -- drains of a world conflict on its cursor and each
item is journaled once -- but duplicate work. A shard without a running worker is not
drained: run the ``n`` processes under a supervisor that restarts them.

**Lag** (:class:`Lag`): the ready worlds of the last scan, items drained, transactions,
passes, and the oldest wait the worker can bound honestly. Every item pending in a world was
enqueued after the worker last knew the world empty: the last scan that did not find its
mark, or the last drain that found nothing after its new cursor. ``oldest_wait_at_most`` is
the longest such time over the ready worlds: no pending item of the shard has waited
longer. A world ready at every scan since the worker started has no such time; their number
is ``ready_since_start`` (``oldest_wait_at_most`` is then ``None``).

A world whose drain fails for a reason that a retry would not change (``Validation``: its
next item cannot be normalized or stored; ``Corruption``) is drained alone to tell it from
the rest of its transaction, then left out of later passes and reported in ``failures``
(skip its item with ``commit_cursor``, or repair it, and restart the worker). ``Backend``
errors reach the caller: the worker's state survives, call :meth:`DrainWorker.run_pass` or
:meth:`DrainWorker.run` again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from persistence.errors import Corruption, Validation
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import READY_BUCKETS, UniverseKeys, WorldKeys, ready_bucket
from persistence.plane import Plane, default_normalizer
from persistence.protocols import drain, inbox
from persistence.protocols.drain import DrainResult, Normalizer
from persistence.sizes import KiB, check_int

Drained = Callable[[UniverseId, dict[WorldId, DrainResult]], None]
"""Told what each transaction drained, after it committed."""
World = tuple[UniverseId, WorldId]

DEFAULT_QUANTUM: Final = 64
DEFAULT_MAX_BYTES: Final = 256 * KiB
DEFAULT_WORLDS_PER_TRANSACTION: Final = 32


@dataclass(frozen=True, slots=True)
class Shard:
    """Worker ``index`` of ``count``: the buckets of the pending-work index it drains."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        check_int(self.count, "shard.count", 1, READY_BUCKETS)
        check_int(self.index, "shard.index", 0, self.count - 1)

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"i/n"``: worker ``i`` (from 0) of ``n``."""
        index, slash, count = text.partition("/")
        if not (slash and index.isdigit() and count.isdigit()):
            raise Validation("shard", f"expected i/n (worker i of n, from 0), got {text!r}")
        return cls(int(index), int(count))

    @property
    def buckets(self) -> tuple[int, int]:
        """The first bucket and the one after the last."""
        return (
            self.index * READY_BUCKETS // self.count,
            (self.index + 1) * READY_BUCKETS // self.count,
        )

    def holds(self, world: WorldId) -> bool:
        """Whether this shard's worker drains ``world``."""
        first, end = self.buckets
        return first <= ready_bucket(world) < end

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True, slots=True)
class PassReport:
    """One pass: the ready worlds its scan found, the turns it gave, the items they
    journaled (counted as each transaction commits, also one of a call that then raised),
    the drain calls they made (``transactions``: one a group, one each world alone or item
    tried after it, committed or not), how long it took, and the worlds that failed in it."""

    ready: int
    turns: int
    items: int
    transactions: int
    seconds: float
    failures: tuple[tuple[UniverseId, WorldId, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Lag:
    """How far behind the worker is (see the module): ready worlds at the last scan, what it
    did since it started, and the longest any pending item can have waited."""

    ready_worlds: int
    passes: int
    transactions: int
    items: int
    seconds: float
    """Since the worker started."""
    oldest_wait_at_most: float | None
    """No item pending in the shard at the last scan has waited longer (seconds, at the
    time of the report); ``None`` if some ready world has been ready since the start."""
    ready_since_start: int
    """Ready worlds whose mark every scan since the start found (their wait is unknown)."""
    failures: tuple[tuple[UniverseId, WorldId, str], ...]


@dataclass
class _Tracking:
    """When the worker last knew each world of its shard empty."""

    last_scan: float | None = None
    """When the last scan began (``None``: no scan yet)."""
    ready: list[World] = field(default_factory=list)
    """The worlds the last scan found."""
    empty_since: dict[World, float] = field(default_factory=dict)
    """Of those, when the worker last knew each empty (absent: ready since the start)."""
    emptied: dict[World, float] = field(default_factory=dict)
    """Worlds a drain found empty since the last scan, and when that drain began."""

    def scanned(self, began: float, found: list[World]) -> None:
        """A scan that began at ``began`` found ``found``. Every item pending in one of them
        was enqueued after the last drain that found the world empty, or else after the
        previous scan began if that scan did not find it, or else after what was known at
        the previous scan (nothing, if it has been ready at every scan)."""
        previous = set(self.ready)
        since: dict[World, float] = {}
        for world in found:
            if world in self.emptied:
                since[world] = self.emptied[world]
            elif world in self.empty_since:
                since[world] = self.empty_since[world]
            elif world not in previous and self.last_scan is not None:
                since[world] = self.last_scan
        self.last_scan, self.ready, self.empty_since, self.emptied = began, found, since, {}


class DrainWorker:
    """Drains the ready worlds of ``universes`` (every universe of the store by default) in
    shard ``shard``, ``quantum`` items and about ``max_bytes`` of envelopes per world and
    turn, ``worlds_per_transaction`` worlds per transaction, with ``normalize``. ``clock``
    (seconds, monotonic) times the lag; ``drained`` is told each transaction's results."""

    def __init__(
        self,
        plane: Plane,
        *,
        universes: Sequence[UniverseId] | None = None,
        shard: Shard = Shard(),
        quantum: int = DEFAULT_QUANTUM,
        max_bytes: int = DEFAULT_MAX_BYTES,
        worlds_per_transaction: int = DEFAULT_WORLDS_PER_TRANSACTION,
        normalize: Normalizer = default_normalizer,
        clock: Callable[[], float] = time.monotonic,
        drained: Drained | None = None,
    ) -> None:
        config = plane.config
        check_int(worlds_per_transaction, "worlds_per_transaction", 1, drain.MAX_DRAIN_WORLDS)
        check_int(quantum, "quantum", 1, config.max_batch_entries // worlds_per_transaction)
        check_int(max_bytes, "max_bytes", 1, config.max_batch_bytes // worlds_per_transaction)
        if not isinstance(shard, Shard):
            raise Validation("shard", f"expected a Shard, got {type(shard).__name__}")
        self.plane = plane
        self.universes = None if universes is None else list(universes)
        self.shard = shard
        self.quantum = quantum
        self.max_bytes = max_bytes
        self.worlds_per_transaction = worlds_per_transaction
        self.normalize = normalize
        self.clock = clock
        self.drained = drained
        self.started = clock()
        self.passes = self.transactions = self.items = 0
        self.failures: dict[World, str] = {}
        self._last: bytes | None = None
        """The ready key of the world the last pass served last (where the next one starts)."""
        self._tracking = _Tracking()

    # ------------------------------------------------------------------ one pass

    def scan(self) -> list[World]:
        """The ready worlds of the shard, in index order (universe, bucket, world), without
        those that failed."""
        tracking = self._tracking
        began = self.clock()
        found: list[World] = []
        first, end = self.shard.buckets
        for universe in self.plane.universes() if self.universes is None else self.universes:
            keys = UniverseKeys(universe)
            begin, stop = keys.ready_range(first, end)
            after: bytes | None = begin
            while after is not None:
                worlds, after = drive(inbox.read_ready(self.plane.engine, keys, after, stop))
                found.extend((universe, w) for w in worlds if (universe, w) not in self.failures)
        tracking.scanned(began, found)
        return found

    def run_pass(self) -> PassReport:
        """Scan, then give every ready world of the shard one turn (see the module)."""
        began = self.clock()
        ready = self.scan()
        order = sorted(ready, key=_ready_key)
        if self._last is not None:
            pivot = next((i for i, w in enumerate(order) if _ready_key(w) > self._last), 0)
            order = order[pivot:] + order[:pivot]
        items = self.items  # counted as each transaction commits (_commit)
        transactions = 0
        failures: list[tuple[UniverseId, WorldId, str]] = []
        for universe, worlds in self._batches(order):
            count, failed = self._drain(universe, worlds)
            transactions += count
            failures.extend((universe, world, why) for world, why in failed)
        if order:
            self._last = _ready_key(order[-1])
        self.passes += 1
        self.transactions += transactions
        return PassReport(
            len(ready),
            len(order),
            self.items - items,
            transactions,
            self.clock() - began,
            tuple(failures),
        )

    def _batches(self, order: list[World]) -> Iterable[tuple[UniverseId, list[WorldId]]]:
        """Consecutive turns of one universe, ``worlds_per_transaction`` at a time."""
        batch: list[WorldId] = []
        universe: UniverseId | None = None
        for u, w in order:
            if batch and (u != universe or len(batch) == self.worlds_per_transaction):
                assert universe is not None
                yield universe, batch
                batch = []
            universe = u
            batch.append(w)
        if batch:
            assert universe is not None
            yield universe, batch

    def _drain(
        self, universe: UniverseId, worlds: list[WorldId]
    ) -> tuple[int, list[tuple[WorldId, str]]]:
        """One transaction for ``worlds``; if it fails for a world (``Validation``,
        ``Corruption``: a retry would fail too), each world alone, to drain the others and
        find that one. Returns the calls made and the worlds that failed (now left out)."""
        try:
            self._commit(universe, worlds, self.quantum)
            return 1, []
        except (Validation, Corruption):
            pass
        calls = 1
        failed: list[tuple[WorldId, str]] = []
        for world in worlds:
            count, why = self._alone(universe, world)
            calls += count
            if why is not None:
                failed.append((world, why))
        return calls, failed

    def _alone(self, universe: UniverseId, world: WorldId) -> tuple[int, str | None]:
        """``world``'s turn alone; if it fails, its items one at a time up to the one that
        fails (the world is then left out). Returns the calls made and why the world
        failed (``None``: it did not)."""
        try:
            self._commit(universe, [world], self.quantum)
            return 1, None
        except (Validation, Corruption):
            pass
        for tried in range(self.quantum):
            try:
                result = self._commit(universe, [world], 1)[world]
            except (Validation, Corruption) as exc:
                return 2 + tried, self._failed(universe, world, exc)
            if not result.more:
                return 2 + tried, None
        return 1 + self.quantum, None

    def _failed(self, universe: UniverseId, world: WorldId, exc: Exception) -> str:
        """Leave ``world`` out of later passes, for the reason ``exc`` gives."""
        why = f"{type(exc).__name__}: {exc}"
        self.failures[(universe, world)] = why
        return why

    def _commit(
        self, universe: UniverseId, worlds: list[WorldId], max_items: int
    ) -> dict[WorldId, DrainResult]:
        """One ``drain_worlds`` call; the worlds it found empty are noted (lag). Each of its
        transactions, as it commits -- also those of a call that then raises --, is counted
        (:attr:`items`) and told to ``drained``."""
        began = self.clock()

        def committed(results: dict[WorldId, DrainResult]) -> None:
            self.items += sum(result.count for result in results.values())
            if self.drained is not None:
                self.drained(universe, results)

        results = self.plane.drain_worlds(
            universe, worlds, max_items, self.max_bytes, self.normalize, committed
        )
        for world, result in results.items():
            if result.more is False:
                self._tracking.emptied[(universe, world)] = began
        return results

    def backfill(self) -> int:
        """Mark every world of the shard whose inbox holds items after its cursor but has no
        ready mark -- items enqueued before the pending-work index existed, which no scan
        finds: run once on such a store. Reads every world of the universes; returns how
        many it marked."""
        marked = 0
        for universe in self.plane.universes() if self.universes is None else self.universes:
            for world in self.plane.worlds(universe):
                if self.shard.holds(world):
                    marked += drive(
                        inbox.mark_pending(self.plane.engine, WorldKeys(universe, world))
                    )
        return marked

    # ------------------------------------------------------------------ running

    def run(
        self,
        stop: threading.Event,
        *,
        idle_seconds: float = 0.05,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> Lag:
        """Passes until ``stop`` is set; after a pass that drained nothing, wait up to
        ``idle_seconds`` (woken by ``stop``). Returns the lag at the end."""
        while not stop.is_set():
            report = self.run_pass()
            if on_pass is not None:
                on_pass(report)
            if not report.items:
                stop.wait(idle_seconds)
        return self.lag()

    def lag(self) -> Lag:
        """The lag now (see the module)."""
        now = self.clock()
        tracking = self._tracking
        ready = tracking.ready
        known = [now - tracking.empty_since[w] for w in ready if w in tracking.empty_since]
        unknown = len(ready) - len(known)
        return Lag(
            ready_worlds=len(ready),
            passes=self.passes,
            transactions=self.transactions,
            items=self.items,
            seconds=now - self.started,
            oldest_wait_at_most=None if unknown else max(known, default=0.0),
            ready_since_start=unknown,
            failures=tuple((u, w, why) for (u, w), why in self.failures.items()),
        )


def _ready_key(world: World) -> bytes:
    return UniverseKeys(world[0]).ready(world[1])
