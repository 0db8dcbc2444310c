"""Drain fairness at 1,000 active worlds, and the payoff of multi-world drains (issue #16).

**Fairness.** ``worlds`` worlds (1,000) on the embedded default store (SQLite,
``synchronous=FULL``, and a local object directory, in a temporary directory) receive
``rate`` items per second (400) for ``seconds`` (30) from one ingress process: item ``n`` is
due at ``n / rate`` and goes to a world drawn by a seeded generator -- any world
(*uniform*), or with probability ``hot_share`` (0.5) one of the first ``hot_worlds`` (10),
else one of the others (*skewed*). Each item carries the ingress process's monotonic clock
(system-wide on Linux) read just before its ``enqueue`` call. The benchmark's process runs a
:class:`~persistence.workers.drain_worker.DrainWorker` with its defaults meanwhile (one
shard, a quantum of 64 items, 32 worlds per transaction, a 5 ms pause after a pass that
drained nothing) and notes when each ``drain_worlds`` call returned; it stops once the
ingress has ended and a pass finds no ready world. An item's *wait* is from just before its
enqueue to the return of the drain that journaled it (its heights, read back from the
journal, tell which). The *backlog* at time ``t`` is the number of items enqueued and not
yet journaled at ``t``, computed exactly from those times, over all worlds and per world.
Both runs are checked before any figure is given: every item sent is in its world's journal
exactly once, in the order sent.

Figures per run: the largest backlog against one second of ingress (target <= 1x), the p99
wait against 1 s (target <= 1x), the largest backlog of one world, the items still pending
when the ingress stopped; for the skewed run the hot worlds' longest wait against the cold
worlds' (target <= 2x). The plot (``plot_path``, default ``docs/fairness.png``): each item's
wait over the time it was enqueued, hot and cold worlds apart, and the backlog over time.

**Group commit.** ``group_worlds`` worlds (32) with ``group_items`` items each (4), drained
by one ``drain_worlds`` call, against the same items in as many other worlds drained by one
``drain_inbox_to_journal`` call per world: items per second of each, ``group_sets`` (10) such
sets per side and round, after a warm-up round, ``rounds`` (5) rounds alternating which side
goes first; the figure is the median of the per-round ratios, with the lowest and highest.
"""

from __future__ import annotations

import bisect
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from aos_bench import Figure, require
from persistence import cbor
from persistence.errors import Corruption, Validation
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, decode_inbox_item
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.plane import DrainResult, Plane
from persistence.workers.drain_worker import DrainWorker

if TYPE_CHECKING:
    from matplotlib.figure import Figure as Chart

NS: Final = 1_000_000_000
SCHEMA: Final = "bench/FairnessItem@1"
CREATED: Final = b"fairness: created"
"""The first entry of every world: worlds are created by group appends of 100."""
START_DELAY: Final = 2.0
"""Seconds between the ingress process's start and its first item (its imports)."""


@dataclass(frozen=True, slots=True)
class FairnessConfig:
    """The runs' sizes and rates (see the module)."""

    worlds: int = 1_000
    seconds: float = 30.0
    rate: float = 400.0
    hot_worlds: int = 10
    hot_share: float = 0.5
    idle_seconds: float = 0.005
    seed: int = 16
    group_worlds: int = 32
    group_items: int = 4
    group_sets: int = 10
    rounds: int = 5

    def __post_init__(self) -> None:
        for name in ("worlds", "hot_worlds", "group_worlds", "group_items", "group_sets", "rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise Validation(f"FairnessConfig.{name}", f"must be an integer >= 1: {value!r}")
        if self.hot_worlds >= self.worlds:
            raise Validation("FairnessConfig.hot_worlds", "must be fewer than the worlds")
        for name in ("seconds", "rate", "idle_seconds"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise Validation(f"FairnessConfig.{name}", f"must be a positive number: {value}")
        if not 0 <= self.hot_share <= 1:
            raise Validation("FairnessConfig.hot_share", f"must be in [0, 1]: {self.hot_share}")

    @property
    def items(self) -> int:
        """Items sent in a run."""
        return int(self.seconds * self.rate)


# --------------------------------------------------------------------------- ingress


def _ingress(
    db: str, objects: str, universe: str, worlds: list[str], skewed: bool, config: FairnessConfig
) -> dict[str, Any]:
    """The ingress process: every item at its due time into its drawn world. Returns the
    world (index) of each item, when the first was due and the last enqueue returned
    (monotonic nanoseconds), and how late the latest call started."""
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.local import LocalObjectStore
    from segments import open_plane

    plane = open_plane(SqliteEngine(db, create=False), LocalObjectStore(objects, create=False))
    u = UniverseId.parse(universe)
    ids = [WorldId.parse(w) for w in worlds]
    rng = random.Random(config.seed)
    sent: list[int] = []
    start = time.monotonic_ns() + round(START_DELAY * NS)
    late = 0
    for n in range(config.items):
        due = start + round(n * NS / config.rate)
        if (wait := due - time.monotonic_ns()) > 0:
            time.sleep(wait / NS)
        if not skewed:
            index = rng.randrange(len(ids))
        elif rng.random() < config.hot_share:
            index = rng.randrange(config.hot_worlds)
        else:
            index = rng.randrange(config.hot_worlds, len(ids))
        now = time.monotonic_ns()
        late = max(late, now - due)
        item = DomainEventIngress(SCHEMA, cbor.encode({"n": n, "t": now}))
        plane.enqueue(u, ids[index], item, idempotency_key=b"fairness/%d" % n)
        sent.append(index)
    stopped = time.monotonic_ns()
    plane.engine.close()
    return {"sent": sent, "start": start, "stopped": stopped, "late": late}


# --------------------------------------------------------------------------- one run


@dataclass(slots=True)
class FairnessRun:
    """One run: each item's world (index), enqueue and drain times (seconds from the first
    item's due time), when the ingress stopped, and what the worker did."""

    skewed: bool
    config: FairnessConfig
    worlds: list[int] = field(default_factory=list)
    enqueued: list[float] = field(default_factory=list)
    drained: list[float] = field(default_factory=list)
    stopped: float = 0.0
    late: float = 0.0
    passes: int = 0
    transactions: int = 0

    @property
    def mode(self) -> str:
        """``skewed`` or ``uniform``."""
        return "skewed" if self.skewed else "uniform"

    def waits(self, hot: bool | None = None) -> list[float]:
        """Every item's wait (of the hot or the cold worlds only, if asked)."""
        return [
            d - e
            for w, e, d in zip(self.worlds, self.enqueued, self.drained, strict=True)
            if hot is None or (w < self.config.hot_worlds) == hot
        ]

    def backlog(self) -> list[tuple[float, int]]:
        """The backlog over all worlds after each change: ``(time, items)``."""
        return _levels(zip(self.enqueued, self.drained, strict=True))

    def largest_backlog(self) -> int:
        """The most items enqueued and not yet journaled at any time."""
        return max((level for _, level in self.backlog()), default=0)

    def pending_at_stop(self) -> int:
        """Items enqueued and not yet journaled when the ingress stopped."""
        return sum(d > self.stopped for d in self.drained)

    def largest_world_backlog(self) -> int:
        """The most items of one world enqueued and not yet journaled at any time."""
        per_world: dict[int, list[tuple[float, float]]] = {}
        for w, e, d in zip(self.worlds, self.enqueued, self.drained, strict=True):
            per_world.setdefault(w, []).append((e, d))
        return max(max(n for _, n in _levels(items)) for items in per_world.values())


def _levels(items: Iterable[tuple[float, float]]) -> list[tuple[float, int]]:
    """How many of the ``(enqueued, drained)`` items are pending after each change."""
    events = sorted(event for e, d in items for event in ((e, 1), (d, -1)))
    level, out = 0, []
    for at, change in events:
        level += change
        out.append((at, level))
    return out


def run_once(
    root: Path, config: FairnessConfig, skewed: bool, progress: Callable[[str], None]
) -> FairnessRun:
    """One run in a fresh store under ``root`` (see the module), checked."""
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.local import LocalObjectStore
    from segments import open_plane

    plane = open_plane(SqliteEngine(root / "aos.db"), LocalObjectStore(root / "objects"))
    try:
        u = UniverseId.new()
        worlds = [WorldId.new() for _ in range(config.worlds)]
        for first in range(0, len(worlds), 100):
            batch = [(w, 0, [CREATED]) for w in worlds[first : first + 100]]
            plane.append_batches(u, batch, create_missing=True)
        drains: dict[WorldId, list[tuple[int, int]]] = {w: [] for w in worlds}

        def drained(universe: UniverseId, results: dict[WorldId, DrainResult]) -> None:
            now = time.monotonic_ns()
            for world, result in results.items():
                if result.count:
                    drains[world].append((result.first_height + result.count - 1, now))

        worker = DrainWorker(plane, universes=[u], drained=drained)
        context = get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            ingress = pool.submit(
                _ingress,
                str(root / "aos.db"),
                str(root / "objects"),
                str(u),
                [str(w) for w in worlds],
                skewed,
                config,
            )
            label = "skewed" if skewed else "uniform"
            progress(f"fairness ({label}): {config.items:,} items at {config.rate:g}/s")
            while True:
                finished = ingress.done()
                report = worker.run_pass()
                if finished and not report.ready:
                    break
                if not report.items:
                    time.sleep(config.idle_seconds)
            sent = ingress.result()
        run = FairnessRun(skewed, config, passes=worker.passes, transactions=worker.transactions)
        start = sent["start"]
        run.stopped, run.late = (sent["stopped"] - start) / NS, sent["late"] / NS
        _collect(plane, u, worlds, sent["sent"], drains, start, run)
        return run
    finally:
        plane.engine.close()


def _collect(
    plane: Plane,
    u: UniverseId,
    worlds: list[WorldId],
    sent: list[int],
    drains: dict[WorldId, list[tuple[int, int]]],
    start: int,
    run: FairnessRun,
) -> None:
    """Each item's times, from the journals; ``Corruption`` unless every item sent is in
    its world's journal exactly once, in the order sent."""
    expected: dict[int, list[int]] = {}
    for n, index in enumerate(sent):
        expected.setdefault(index, []).append(n)
    times: dict[int, tuple[int, float, float]] = {}
    for index, world in enumerate(worlds):
        lasts = [last for last, _ in drains[world]]
        got = []
        for height, entry in plane.read_range(u, world, 2, plane.head(u, world)):
            record = decode_journal_record(entry)
            item = (
                decode_inbox_item(record.item) if isinstance(record, IngressJournalRecord) else None
            )
            if not isinstance(item, DomainEventIngress) or item.schema != SCHEMA:
                raise Corruption(f"fairness run: world {index} height {height} is not an item")
            payload = cbor.decode(item.value_cbor)
            got.append(payload["n"])
            at = bisect.bisect_left(lasts, height)
            if at == len(lasts):
                raise Corruption(f"fairness run: no drain reported height {height} of {index}")
            times[payload["n"]] = (
                index,
                (payload["t"] - start) / NS,
                (drains[world][at][1] - start) / NS,
            )
        if got != expected.get(index, []):
            raise Corruption(f"fairness run: world {index} journaled other items than it was sent")
    for n in range(len(sent)):
        index, enqueued, drained = times[n]
        run.worlds.append(index)
        run.enqueued.append(enqueued)
        run.drained.append(drained)


# --------------------------------------------------------------------------- group commit


def group_payoff(
    root: Path, config: FairnessConfig, progress: Callable[[str], None]
) -> tuple[list[float], list[float]]:
    """Items per second of multi-world drains and of a drain per world, per round (after a
    warm-up round), on a fresh store under ``root``."""
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.local import LocalObjectStore
    from segments import open_plane

    plane = open_plane(SqliteEngine(root / "aos.db"), LocalObjectStore(root / "objects"))
    try:
        u = UniverseId.new()
        count = config.group_worlds * config.group_sets
        sides = [[WorldId.new() for _ in range(count)] for _ in range(2)]
        for worlds in sides:
            for first in range(0, count, 100):
                batch = [(w, 0, [CREATED]) for w in worlds[first : first + 100]]
                plane.append_batches(u, batch, create_missing=True)
        group: list[float] = []
        single: list[float] = []
        for round_ in range(config.rounds + 1):
            progress(f"fairness: group commit round {round_}/{config.rounds} (0: warm-up)")
            for worlds in sides:
                for w in worlds:
                    items = [
                        DomainEventIngress(SCHEMA, cbor.encode(n))
                        for n in range(config.group_items)
                    ]
                    plane.enqueue_batch(u, w, items)
            rates: dict[str, float] = {}
            order = ("group", "single") if round_ % 2 == 0 else ("single", "group")
            for side in order:
                worlds = sides[0] if side == "group" else sides[1]
                rates[side] = count * config.group_items / _drain(plane, u, worlds, side, config)
            if round_:
                group.append(rates["group"])
                single.append(rates["single"])
        return group, single
    finally:
        plane.engine.close()


def _drain(
    plane: Plane, u: UniverseId, worlds: list[WorldId], side: str, config: FairnessConfig
) -> float:
    """Drain every world's items, ``group`` worlds per ``drain_worlds`` call or a call per
    world; the seconds it took (``Corruption`` unless every call took every item)."""
    began = time.perf_counter()
    if side == "group":
        size = config.group_worlds
        counts = [
            r.count
            for first in range(0, len(worlds), size)
            for r in plane.drain_worlds(
                u, worlds[first : first + size], max_items=config.group_items
            ).values()
        ]
    else:
        counts = [
            plane.drain_inbox_to_journal(u, w, max_items=config.group_items).count for w in worlds
        ]
    elapsed = time.perf_counter() - began
    if counts != [config.group_items] * len(worlds):
        raise Corruption(f"group commit round: the {side} drains took {sum(counts)} items")
    return elapsed


# --------------------------------------------------------------------------- figures and plot


def figures(
    config: FairnessConfig, runs: Sequence[FairnessRun], group: list[float], single: list[float]
) -> list[Figure]:
    """The figures of the runs and the group-commit rounds (see the module)."""
    out = [figure for run in runs for figure in _run_figures(config, run)]
    out.append(
        Figure(
            name=(
                f"group commit: drain_worlds of {config.group_worlds} worlds x "
                f"{config.group_items} items, {config.rounds} rounds"
            ),
            value=round(statistics.median(group), 1),
            unit="items/s",
            baseline="the same items, one drain_inbox_to_journal per world",
            baseline_value=round(statistics.median(single), 1),
            target=None,
            better="higher",
            round_ratios=tuple(g / s for g, s in zip(group, single, strict=True)),
        )
    )
    return out


def _run_figures(config: FairnessConfig, run: FairnessRun) -> list[Figure]:
    """One run's backlogs and waits (and, skewed, its hot worlds' longest wait)."""
    setup = f"{config.worlds:,} worlds, {config.rate:g} items/s for {config.seconds:g} s, " + (
        f"{config.hot_share:.0%} of items to {config.hot_worlds} worlds"
        if run.skewed
        else "uniform"
    )
    waits = run.waits()
    p99 = statistics.quantiles(waits, n=100)[98]
    busiest = Counter(run.worlds).most_common(1)[0][1]
    out = [
        Figure(
            name=f"fairness ({run.mode}): largest backlog over all worlds ({setup})",
            value=run.largest_backlog(),
            unit="items",
            baseline="1 s of ingress",
            baseline_value=config.rate,
            target=1.0,
            better="lower",
        ),
        Figure(
            name=f"fairness ({run.mode}): p99 wait, enqueue to journal",
            value=round(p99, 4),
            unit="s",
            baseline="1 s",
            baseline_value=1.0,
            target=1.0,
            better="lower",
        ),
        Figure(
            name=f"fairness ({run.mode}): median wait, enqueue to journal",
            value=round(statistics.median(waits), 4),
            unit="s",
            baseline="1 s",
            baseline_value=1.0,
            target=None,
            better="lower",
        ),
        Figure(
            name=f"fairness ({run.mode}): largest backlog of one world",
            value=run.largest_world_backlog(),
            unit="items",
            baseline=f"1 s of the busiest world's ingress ({busiest:,} items in all)",
            baseline_value=round(busiest / config.seconds, 2),
            target=None,
            better="lower",
        ),
        Figure(
            name=f"fairness ({run.mode}): items still pending when the ingress stopped",
            value=run.pending_at_stop(),
            unit="items",
            baseline="items sent",
            baseline_value=len(waits),
            target=None,
            better="lower",
        ),
    ]
    if run.skewed:
        out.append(
            Figure(
                name=f"fairness (skewed): longest wait of the {config.hot_worlds} hot worlds",
                value=round(max(run.waits(hot=True)), 4),
                unit="s",
                baseline="the longest wait of the cold worlds",
                baseline_value=round(max(run.waits(hot=False)), 4),
                target=2.0,
                better="lower",
            )
        )
    return out


def plot(runs: Sequence[FairnessRun], config: FairnessConfig, path: Path) -> None:
    """Each item's wait over the time it was enqueued (one panel per run, hot and cold
    worlds apart) and the backlog over time, as a PNG at ``path``."""
    chart = _chart_class()(figsize=(14, 4.2), layout="constrained")
    panels = chart.subplots(1, len(runs) + 1)
    for axes, run in zip(panels, runs, strict=False):
        for hot, colour, label in (
            (False, "tab:blue", "cold worlds"),
            (True, "tab:orange", f"{config.hot_worlds} hot worlds"),
        ):
            if hot and not run.skewed:
                continue
            points = [
                (e, (d - e) * 1000)
                for w, e, d in zip(run.worlds, run.enqueued, run.drained, strict=True)
                if not run.skewed or (w < config.hot_worlds) == hot
            ]
            axes.scatter(
                *zip(*points, strict=True),
                s=2,
                alpha=0.4,
                color=colour,
                label=label if run.skewed else "every world",
            )
        axes.set_title(f"{run.mode} ingress: item wait")
        axes.set_xlabel("enqueued at (s)")
        axes.set_ylabel("wait, enqueue to journal (ms)")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small", markerscale=4)
    backlog = panels[-1]
    for run in runs:
        steps = run.backlog()
        backlog.step(
            [t for t, _ in steps],
            [n for _, n in steps],
            where="post",
            label=f"{run.mode}: all worlds",
        )
    backlog.axhline(config.rate, linestyle="--", color="grey", label="1 s of ingress")
    backlog.set_title("backlog (items enqueued, not yet journaled)")
    backlog.set_xlabel("time (s)")
    backlog.set_ylim(bottom=0)
    backlog.grid(alpha=0.3)
    backlog.legend(fontsize="small")
    chart.suptitle(
        f"{config.worlds:,} worlds, {config.rate:g} items/s, DrainWorker (quantum 64, 32 worlds "
        "per transaction) on SQLite FULL + local directory",
        fontsize="medium",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    chart.savefig(path, dpi=100)


def _chart_class() -> type[Chart]:
    """matplotlib's ``Figure`` (no pyplot), imported lazily; ``MissingDependency`` without."""
    require("the fairness plot", "bench", "matplotlib")
    from matplotlib.figure import Figure

    return Figure


def default_plot_path() -> Path:
    """``docs/fairness.png`` when run from the checkout (a ``docs`` directory here), else
    ``fairness.png``."""
    docs = Path("docs")
    return docs / "fairness.png" if docs.is_dir() else Path("fairness.png")


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    config: FairnessConfig | None = None,
    plot_path: Path | None = None,
) -> list[Figure]:
    """Both runs and the group-commit rounds on fresh embedded stores, checked; the plot;
    the figures. Each ingress run lasts ``15 * seconds`` (``--seconds``, 30 s by default)
    unless ``config`` says otherwise."""
    config = config or FairnessConfig(seconds=15 * seconds)
    _chart_class()  # a missing extra fails now, not after the runs
    runs: list[FairnessRun] = []
    with tempfile.TemporaryDirectory(prefix="aosp-bench-fairness-") as tmp:
        for skewed in (False, True):
            root = Path(tmp) / ("skewed" if skewed else "uniform")
            root.mkdir()
            done = run_once(root, config, skewed, progress)
            progress(
                f"fairness ({done.mode}): checked; {done.passes:,} passes, "
                f"{done.transactions:,} transactions, ingress at most {done.late * 1000:.1f} ms "
                "late"
            )
            runs.append(done)
        root = Path(tmp) / "group"
        root.mkdir()
        group, single = group_payoff(root, config, progress)
    path = plot_path or default_plot_path()
    plot(runs, config, path)
    progress(f"fairness: plot written to {path}")
    return figures(config, runs, group, single)
