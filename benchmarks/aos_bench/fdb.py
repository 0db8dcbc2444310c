"""The plane on FoundationDB against the raw bindings, in the same run (issue #34).

Every figure puts a plane call beside the minimal transaction it stands for, written with
the ``fdb`` bindings alone on keys of the same layout (the plane's keyspace, entries
sealed with their checksums as the plane stores them): what the plane costs over the
cluster's own work. Rounds alternate (raw, plane) after a warm-up
round, each on fresh worlds; a figure is the median of the per-round ratios plane / raw,
with their lowest and highest.

* **single calls** (one thread): a 1-entry and a 100-entry append (raw: read the head, write
  the entries and the head), a 1-item enqueue (raw: a versionstamped item, the notify add,
  the ready mark, and the commit's versionstamp, which the plane's call returns as the
  item's sequence), a drain of 1 and of 100 items (raw: cursor and head read together, the
  items after the cursor, the journal entries the plane writes -- an ingress record of each
  item -- head, cursor, the ready mark cleared when empty), a read of a whole 5-entry journal
  (what eventsourcing's ``repository.get`` reads; raw: the head and the entries in one wave,
  their seals checked), and a 20,000-entry read. Each
  figure's name gives the plane's round trips per call, counted from the shape of the call
  (``backends/kv/roundtrips.py``) beside the raw transaction's, and the client CPU per call
  of both sides (the process's CPU time, the client's network thread included);
* **sync threads** 1, 4 and 16, each appending single entries to its own world; and at 16
  threads, the plane against raw bindings that wait for their futures in libfdb_c as the
  plane's engine does off the main thread (``backends/kv/fdb.py``: ``_block``), so that the
  wait's share of the plane's figure is seen apart from the rest of its cost;
* **asyncio** 1, 16, 64 and 256 tasks in flight on one thread, each appending to its own
  world: the plane's :class:`~persistence.plane.AsyncPlane` against the raw bindings whose
  futures resolve asyncio futures (``on_ready`` -> ``call_soon_threadsafe``), and the plane's
  asyncio against its sync door at 16 threads (measured beside it);
* **a group drain under contention**: ``drain_worlds`` calls on 32 worlds with full
  inboxes, 20 items of each world per call, while another process appends to one of them
  without pause, against the same drains with no appender: items/s, with the drains that
  failed (timeouts), the world drains left out of the group as busy, and the appender's
  appends counted; and the same appender on a world outside the group, against the same
  drains with none: what the appender's CPU alone costs on the machine (on 2 cores it
  shares them with the cluster and the drainer), beside what its conflicts cost.

The cluster is what ``--fdb`` names: for the issue's figures a single ``fdbserver`` on
loopback with the memory storage engine (``../shared/fdb/fdb-local start DIR``), so the
figures show the client's and the protocols' cost, not a production cluster's network.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from aos_bench import Figure
from aos_bench.fdb_raw import Raw
from backends.kv.fdb import FdbEngine
from backends.kv.roundtrips import CountingEngine
from backends.objects.memory import MemoryObjectStore
from persistence.errors import HeadAdvanced, PersistError, Validation
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, encode_inbox_item, envelope_bytes
from persistence.keyspace import WorldKeys
from persistence.plane import AsyncPlane, Plane

ROUNDS: Final = 5
ENTRY: Final = b"x" * 1_000
ITEM: Final = DomainEventIngress("bench/Item@1", b"\x59\x03\x84" + b"x" * 900)
READ_ENTRIES: Final = 20_000
SHORT_READ: Final = 5
GROUP_WORLDS: Final = 32
GROUP_ITEMS: Final = 20
"""Items per world of one group drain (``max_items``)."""
GROUP_RATE: Final = 25_000
"""Items/s a group drain on loopback stays below: the inboxes are filled for a round of
this rate, so that they do not run dry before its end."""


@dataclass(slots=True)
class _Side:
    rate: list[float]
    cpu: list[float]


def _timed(calls: int, work: Callable[[], object]) -> tuple[float, float]:
    """``calls`` calls of ``work``: calls/s and client CPU seconds per call."""
    cpu, started = time.process_time(), time.perf_counter()
    for _ in range(calls):
        work()
    elapsed = time.perf_counter() - started
    return calls / elapsed, (time.process_time() - cpu) / calls


class _Appender:
    """A process appending to one world without pause, from its own client (a thread of
    this process would share its interpreter lock with the drain it contends with). It
    says ``running`` after its first append, stops when its stdin closes and then prints
    how many appends it committed."""

    def __init__(self, url: str, universe: UniverseId, world: WorldId) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, url, str(universe), str(world)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline() != "running\n":
            raise RuntimeError(f"the appender process exited with {self._process.wait()}")

    def stop(self) -> int:
        """Stop the appender; how many appends it committed."""
        out, _ = self._process.communicate(timeout=60)
        if self._process.returncode != 0:
            raise RuntimeError(f"the appender process exited with {self._process.returncode}")
        return int(out)


def _wait_for_eof(closed: threading.Event) -> None:
    sys.stdin.read()
    closed.set()


def _append_until_stdin_closes(url: str, universe: UniverseId, world: WorldId) -> None:
    from backends.kv import open_engine

    plane = Plane(open_engine(url), MemoryObjectStore())
    closed = threading.Event()
    threading.Thread(target=_wait_for_eof, args=(closed,), daemon=True).start()
    count = 0
    while not closed.is_set():
        try:
            plane.append_batch(universe, world, plane.head(universe, world), [ENTRY])
        except HeadAdvanced:
            continue
        count += 1
        if count == 1:
            print("running", flush=True)
    print(count, flush=True)


class Bench:
    """One cluster, the plane (blocking and asyncio) and the raw bindings on it."""

    def __init__(
        self, engine: FdbEngine, url: str, seconds: float, progress: Callable[[str], None]
    ):
        self.engine = engine
        self.url = url
        """The cluster's ``fdb://`` URL, options included (for the appender process)."""
        self.plane = Plane(engine, MemoryObjectStore())
        self.raw = Raw(engine)
        self.seconds = seconds
        self.progress = progress
        self.universe = UniverseId.new()
        self.made: list[WorldKeys] = []

    def clear(self) -> None:
        """Clear the worlds made since the last clear (but the kept ones): each round starts
        on the same cluster (a run's worlds would otherwise fill a memory storage engine,
        1 GB by default, until the cluster throttles every transaction to a halt)."""
        tr = self.raw.db.create_transaction()
        for keys in self.made:
            tr.clear_range(*keys.all())
        tr.commit().wait()
        self.made.clear()

    def world(self, *, keep: bool = False) -> tuple[WorldId, WorldKeys]:
        """A new world (cleared by the next :meth:`clear` unless ``keep``)."""
        world = WorldId.new()
        self.plane.create_world(self.universe, world)
        keys = WorldKeys(self.universe, world)
        if not keep:
            self.made.append(keys)
        return world, keys

    def calls_per_round(self, per_second: float) -> int:
        return max(20, round(per_second * self.seconds / 2))

    # ------------------------------------------------------------------ single calls

    def single(
        self,
        name: str,
        unit: str,
        plane_call: Callable[[WorldId], Callable[[], object]],
        raw_call: Callable[[WorldKeys], Callable[[], object]],
        calls: int,
        per_call: int,
        round_trips: tuple[int, int],
        target: float | None,
    ) -> Figure:
        self.progress(f"fdb: {name}")
        sides = {"raw": _Side([], []), "plane": _Side([], [])}
        for round_ in range(ROUNDS + 1):  # round 0 warms up
            for side in ("raw", "plane"):
                world, keys = self.world()
                work = raw_call(keys) if side == "raw" else plane_call(world)
                rate, cpu = _timed(calls, work)
                self.clear()
                if round_:
                    sides[side].rate.append(rate * per_call)
                    sides[side].cpu.append(cpu)
        plane, raw = sides["plane"], sides["raw"]
        rt_plane, rt_raw = round_trips
        return _against(
            raw.rate,
            plane.rate,
            f"fdb: {name} ({rt_plane} round trips per call, raw {rt_raw}; client CPU "
            f"{statistics.median(plane.cpu) * 1e6:,.0f} vs "
            f"{statistics.median(raw.cpu) * 1e6:,.0f} us per call)",
            unit,
            "the raw bindings, the same transaction, alternate rounds",
            target,
        )

    def round_trips(self, call: Callable[[Plane, WorldId], object], setup: int = 0) -> int:
        """The plane's round trips for one ``call`` (after ``setup`` items enqueued)."""
        counting = CountingEngine(self.engine)
        plane = Plane(counting, MemoryObjectStore())
        world = WorldId.new()
        plane.create_world(self.universe, world)
        if setup:
            plane.enqueue_batch(self.universe, world, [ITEM] * setup)
        counting.tally.take()
        call(plane, world)
        return counting.tally.take().round_trips

    def singles(self) -> list[Figure]:
        """The single-call figures: appends, an enqueue, drains, a short and a long read."""
        return [*self._writes(), *self._drains(), self._short_read(), self._read()]

    def _short_read(self) -> Figure:
        """A read of a whole 5-entry journal (what eventsourcing's ``repository.get`` reads
        of an aggregate)."""
        u, plane, raw = self.universe, self.plane, self.raw

        def written(world: WorldId) -> WorldId:
            plane.append_batch(u, world, 0, [ENTRY] * SHORT_READ)
            return world

        def round_trips() -> int:
            counting = CountingEngine(self.engine)
            counted = Plane(counting, MemoryObjectStore())
            world = WorldId.new()
            counted.create_world(u, world)
            counted.append_batch(u, world, 0, [ENTRY] * SHORT_READ)
            counting.tally.take()
            if len(counted.read_range(u, world, 1, 1_000)) != SHORT_READ:
                raise AssertionError("the short read read the wrong entries")
            return counting.tally.take().round_trips

        def reading(world: WorldId) -> Callable[[], object]:
            world = written(world)
            return lambda: plane.read_range(u, world, 1, 1_000)

        def raw_reading(keys: WorldKeys) -> Callable[[], object]:
            written(keys.world)
            return lambda: raw.read_world(keys, 1_000)

        return self.single(
            f"read of a {SHORT_READ}-entry journal",
            "reads/s",
            reading,
            raw_reading,
            self.calls_per_round(500),
            1,
            (round_trips(), 2),
            None,
        )

    def _writes(self) -> list[Figure]:
        """A 1-entry and a 100-entry append, a 1-item enqueue."""
        u, plane, raw = self.universe, self.plane, self.raw
        envelope = envelope_bytes(encode_inbox_item(ITEM), None)
        heads: dict[WorldId, int] = {}

        def appending(count: int) -> Callable[[WorldId], Callable[[], object]]:
            def make(world: WorldId) -> Callable[[], object]:
                heads[world] = 0

                def call() -> None:
                    heads[world] = plane.append_batch(u, world, heads[world], [ENTRY] * count)
                    heads[world] += count - 1

                return call

            return make

        def raw_appending(count: int) -> Callable[[WorldKeys], Callable[[], object]]:
            return lambda keys: lambda: raw.append(keys, [ENTRY] * count)

        calls = self.calls_per_round(300)
        batches = self.calls_per_round(60)
        return [
            self.single(
                "1-entry append",
                "appends/s",
                appending(1),
                raw_appending(1),
                calls,
                1,
                (self.round_trips(lambda p, w: p.append_batch(u, w, 0, [ENTRY])), 3),
                0.95,
            ),
            self.single(
                "100-entry append",
                "entries/s",
                appending(100),
                raw_appending(100),
                batches,
                100,
                (self.round_trips(lambda p, w: p.append_batch(u, w, 0, [ENTRY] * 100)), 3),
                0.95,
            ),
            self.single(
                "enqueue, 1 item",
                "enqueues/s",
                lambda world: lambda: plane.enqueue(u, world, ITEM),
                lambda keys: lambda: raw.enqueue(keys, envelope),
                calls,
                1,
                (self.round_trips(lambda p, w: p.enqueue(u, w, ITEM)), 2),
                0.9,
            ),
        ]

    def _drains(self) -> list[Figure]:
        """A drain of 1 and of 100 items, each from an inbox filled for the whole round."""
        u, plane, raw = self.universe, self.plane, self.raw

        def fill(world: WorldId, items: int) -> None:
            for start in range(0, items, 5_000):
                plane.enqueue_batch(u, world, [ITEM] * min(5_000, items - start))

        def draining(count: int, calls: int) -> Callable[[WorldId], Callable[[], object]]:
            def make(world: WorldId) -> Callable[[], object]:
                fill(world, count * calls)
                return lambda: plane.drain_inbox_to_journal(u, world, max_items=count)

            return make

        def raw_draining(count: int, calls: int) -> Callable[[WorldKeys], Callable[[], object]]:
            def make(keys: WorldKeys) -> Callable[[], object]:
                fill(keys.world, count * calls)
                return lambda: raw.drain(keys, count)

            return make

        drains = max(5, self.calls_per_round(60) // 2)
        calls = self.calls_per_round(200)
        return [
            self.single(
                "drain, 1 item",
                "items/s",
                draining(1, calls),
                raw_draining(1, calls),
                calls,
                1,
                (self.round_trips(lambda p, w: p.drain_inbox_to_journal(u, w, 1), 2), 4),
                0.85,
            ),
            self.single(
                "drain, 100 items",
                "items/s",
                draining(100, drains),
                raw_draining(100, drains),
                drains,
                100,
                (self.round_trips(lambda p, w: p.drain_inbox_to_journal(u, w, 100), 101), 4),
                0.85,
            ),
        ]

    def _read(self) -> Figure:
        """A 20,000-entry read of one world's journal."""
        u, plane, raw = self.universe, self.plane, self.raw
        self.progress("fdb: read_range 20k")
        reader, keys = self.world(keep=True)
        for start in range(0, READ_ENTRIES, 1_000):
            plane.append_batch(u, reader, start, [ENTRY] * 1_000)
        return self.single(
            "read_range 20k",
            "entries/s",
            lambda _: lambda: plane.read_range(u, reader, 1, READ_ENTRIES),
            lambda _: lambda: raw.read(keys, READ_ENTRIES),
            2,
            READ_ENTRIES,
            (0, 0),
            None,
        )

    # ------------------------------------------------------------------ concurrency

    def _threads_round(self, threads: int, raw: bool, floor: Raw | None = None) -> float:
        worlds = [self.world() for _ in range(threads)]
        stop, appended = threading.Event(), threading.Event()
        counts = [0] * threads
        failed: list[BaseException] = []

        def work(index: int) -> None:
            world, keys = worlds[index]
            head = 0
            try:
                while not stop.is_set():
                    if raw:
                        (floor or self.raw).append(keys, [ENTRY])
                    else:
                        self.plane.append_batch(self.universe, world, head, [ENTRY])
                    head += 1
                    counts[index] += 1
                    appended.set()
            except BaseException as exc:
                failed.append(exc)
                appended.set()

        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        started = time.perf_counter()
        for thread in pool:
            thread.start()
        time.sleep(self.seconds / 2)
        appended.wait()  # a round holds at least one append, however loaded the machine
        stop.set()
        for thread in pool:
            thread.join()
        if failed:
            raise RuntimeError(f"an appender failed: {failed[0]!r}")
        return sum(counts) / (time.perf_counter() - started)

    async def _async_main(self, tasks: int, raw: bool, door: AsyncPlane) -> float:
        worlds = [self.world() for _ in range(tasks)]
        counts = [0] * tasks
        deadline = time.perf_counter() + self.seconds / 2  # from when the worlds are made

        async def work(index: int) -> None:
            world, keys = worlds[index]
            head = 0
            while time.perf_counter() < deadline or not any(counts):  # at least one
                if raw:
                    await self.raw.append_async(keys, ENTRY)
                else:
                    await door.append_batch(self.universe, world, head, [ENTRY])
                head += 1
                counts[index] += 1

        started = time.perf_counter()
        await asyncio.gather(*(work(i) for i in range(tasks)))
        return sum(counts) / (time.perf_counter() - started)

    def _async_round(self, tasks: int, raw: bool) -> float:
        door = self.plane.asyncio()
        coroutine: Coroutine[Any, Any, float] = self._async_main(tasks, raw, door)
        return asyncio.run(coroutine)

    def alternate(
        self, name: str, a: Callable[[], float], b: Callable[[], float]
    ) -> tuple[list[float], list[float]]:
        self.progress(f"fdb: {name}")
        first, second = [], []
        for round_ in range(ROUNDS + 1):
            x = a()
            self.clear()
            y = b()
            self.clear()
            if round_:
                first.append(x)
                second.append(y)
        return first, second

    def concurrency(self) -> list[Figure]:
        figures = []
        for threads in (1, 4, 16):
            raw, plane = self.alternate(
                f"{threads} threads",
                functools.partial(self._threads_round, threads, True),
                functools.partial(self._threads_round, threads, False),
            )
            figures.append(
                _against(
                    raw,
                    plane,
                    f"fdb: appends from {threads} threads, one world each (sync plane)",
                    "appends/s",
                    f"the raw bindings, {threads} threads, alternate rounds",
                    0.85 if threads == 16 else None,
                )
            )
        waiting_in_library = Raw(self.engine, library_waits=True)
        raw, plane = self.alternate(
            "16 threads, raw waits in libfdb_c",
            functools.partial(self._threads_round, 16, True, waiting_in_library),
            functools.partial(self._threads_round, 16, False),
        )
        figures.append(
            _against(
                raw,
                plane,
                "fdb: appends from 16 threads, against raw bindings that wait as the plane does",
                "appends/s",
                "the raw bindings waiting in libfdb_c, 16 threads, alternate rounds",
                None,
            )
        )
        for tasks in (1, 16, 64, 256):
            raw, plane = self.alternate(
                f"asyncio, {tasks} in flight",
                functools.partial(self._async_round, tasks, True),
                functools.partial(self._async_round, tasks, False),
            )
            figures.append(
                _against(
                    raw,
                    plane,
                    f"fdb: appends with {tasks} in flight on one event loop (AsyncPlane)",
                    "appends/s",
                    f"the raw bindings from asyncio, {tasks} in flight, alternate rounds",
                    0.85 if tasks >= 64 else None,
                )
            )
            if tasks == 256:
                sync, asynchronous = self.alternate(
                    "asyncio 256 vs sync 16 threads",
                    lambda: self._threads_round(16, False),
                    lambda: self._async_round(256, False),
                )
                figures.append(
                    _against(
                        sync,
                        asynchronous,
                        "fdb: AsyncPlane with 256 in flight against the sync plane's 16 threads",
                        "appends/s",
                        "the sync plane, 16 threads, alternate rounds",
                        3.0,
                    )
                )
        return figures

    # ------------------------------------------------------------------ group drains

    def _group_round(self, appended: str | None, tally: dict[str, int]) -> float:
        """Items/s of ``drain_worlds`` calls on 32 worlds for half the round's seconds (or
        until all but one world's worth of items moved), while another process appends to
        one of them (``appended="inside"``), to a world outside the group (``"outside"``:
        the appender's CPU without its conflicts), or not at all (``None``)."""
        u = self.universe
        worlds = [self.world()[0] for _ in range(GROUP_WORLDS)]
        per_world = max(4 * GROUP_ITEMS, round(GROUP_RATE * self.seconds / 2 / GROUP_WORLDS))
        for world in worlds:
            for start in range(0, per_world, 200):
                self.plane.enqueue_batch(u, world, [ITEM] * min(200, per_world - start))
        target = {"inside": worlds[GROUP_WORLDS // 2], "outside": self.world()[0]}
        appender = None if appended is None else _Appender(self.url, u, target[appended])
        moved, failing, most = 0, 0, (GROUP_WORLDS - 1) * per_world
        started = time.perf_counter()
        deadline = started + self.seconds / 2
        try:
            # at least one drain that moved items, however loaded the machine
            while moved < most and (time.perf_counter() < deadline or not moved):
                try:
                    results = self.plane.drain_worlds(u, worlds, max_items=GROUP_ITEMS)
                except PersistError as exc:
                    tally["failed"] += 1
                    failing += 1
                    if failing == 100:
                        raise RuntimeError(f"100 group drains failed in a row: {exc}") from exc
                    continue
                failing = 0
                moved += sum(r.count for r in results.values())
                tally["contended"] += sum(r.contended for r in results.values())
                tally["calls"] += 1
        finally:
            elapsed = time.perf_counter() - started
            if appender is not None:
                tally["appended"] += appender.stop()
        return moved / elapsed

    def group(self) -> list[Figure]:
        """The group drain with one of its worlds under an appender, and the same appender on
        a world outside the group (what its CPU alone costs on this machine), each against
        the drain with no appender."""
        figures = []
        for appended, what, target in (
            ("inside", "one under a continuous appender", 0.8),
            ("outside", "a continuous appender on a world outside the group", None),
        ):
            tally = {"failed": 0, "contended": 0, "appended": 0, "calls": 0}
            calm, busy = self.alternate(
                f"group drain, appender {appended}",
                functools.partial(self._group_round, None, tally),
                functools.partial(self._group_round, appended, tally),
            )
            figures.append(
                _against(
                    calm,
                    busy,
                    f"fdb: group drain of {GROUP_WORLDS} worlds, {what} ({tally['calls']:,} "
                    f"drains, {tally['failed']} failed; {tally['contended']:,} world drains "
                    f"left out as busy and done alone; {tally['appended']:,} appends by the "
                    "appender)",
                    "items/s",
                    "the same drain with no appender, alternate rounds",
                    target,
                )
            )
        return figures


def _against(
    base: list[float],
    measured: list[float],
    name: str,
    unit: str,
    baseline: str,
    target: float | None,
) -> Figure:
    """The figure of ``measured`` rounds against ``base`` rounds of the same run (higher is
    better): the medians, and the per-round ratios."""
    return Figure(
        name,
        round(statistics.median(measured), 1),
        unit,
        baseline,
        round(statistics.median(base), 1),
        target,
        "higher",
        round_ratios=tuple(m / b for m, b in zip(measured, base, strict=True)),
    )


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    fdb_url: str | None = None,
) -> list[Figure]:
    """Measure every figure on the cluster of ``fdb_url``, the plane against raw."""
    if not fdb_url:
        raise Validation("--fdb", "the fdb suite needs a cluster: --fdb fdb:///path/fdb.cluster")
    from backends.kv import open_engine

    engine = open_engine(fdb_url)
    if not isinstance(engine, FdbEngine):
        raise Validation("--fdb", f"{fdb_url} is not a FoundationDB cluster")
    bench = Bench(engine, fdb_url, seconds, progress)
    return [*bench.singles(), *bench.concurrency(), *bench.group()]


if __name__ == "__main__":  # the appender of a group-drain round (:class:`_Appender`)
    _append_until_stdin_closes(
        sys.argv[1], UniverseId.parse(sys.argv[2]), WorldId.parse(sys.argv[3])
    )
