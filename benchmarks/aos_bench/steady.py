"""Steady state: a world's hot state with and without inbox compaction (issue #17).

``WORLDS`` worlds (100 by default) on the embedded default store (SQLite, ``synchronous=FULL``,
and a local object directory, in a temporary directory) receive items continuously: item
``n`` is due at ``n / rate`` seconds and goes to a world drawn by a seeded generator, with the
idempotency key ``steady/<n>``; the items are the demo's five inbox kinds
(:func:`aosp.demo.demo_item`, a receipt among them naming one small CAS blob). One loop, ticking
every ``tick_seconds``, does what a world host does:

* enqueues the items that are due;
* drains every world that received items since the last tick;
* every ``snapshot_seconds`` per world (staggered over the worlds): restores the world
  (baseline + hot tail, through the reference kernel), commits the state as a snapshot at
  the head and promotes it to the baseline, then exports to segments every full
  ``segment_entries`` range below the baseline. (Not the demo's snapshot helper: it replays
  from genesis, a cost that grows with history -- the very thing a steady-state run must
  not have.)
* with compaction, runs a :class:`~persistence.workers.compactor.Compactor` pass over every
  world every ``window / 16`` seconds (its consumed marks are that far apart), with
  ``PlaneConfig.inbox_retention_seconds = window_seconds``;
* every ``sample_seconds``, counts every world's hot keys and bytes by family
  (:func:`persistence.protocols.hot_state.measure`).

The run is made twice in one invocation, with and without compaction, in two stores with
the same seed, so with the same ingress. Call records are kept ``call_record_seconds`` (5 s
instead of the 600 s default): they guard a call's own retries, which last seconds, and at
the default window they would dominate a short run's hot state in both runs alike.

Figures (per world = total over the worlds / worlds): hot keys and hot bytes per world at
the end, with compaction against without; the plateau, the least-squares slope of hot keys
(and bytes) per world over the second half of each run; the compactor's throughput, items
removed per second of compaction time, against the ingress rate (below 1x it could not keep
up); the items enqueued in each run. Both runs are verified before any figure is given:
every item is in its world's journal exactly once, and restore equals a full replay.

What compaction cannot remove grows with history by design, one key per snapshot (the
snapshot index) and one per segment (the segment index): the slope with compaction is
theirs.

The loop reads time from a :class:`Clock`; tests pass a simulated one, so nothing sleeps.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from aos_bench import Figure, require
from aosp.demo import demo_item, item_payload
from persistence import cbor
from persistence.errors import Corruption, Validation
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import decode_inbox_item
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.kernel import ReferenceKernel
from persistence.keyspace import WorldKeys
from persistence.plane import Plane, PlaneConfig
from persistence.protocols.compaction import MARKS_PER_WINDOW
from persistence.protocols.hot_state import FAMILIES, measure
from persistence.workers.compactor import Compactor
from segments.export import ExportConfig, Exporter
from segments.restore import full_replay, restore

if TYPE_CHECKING:
    from matplotlib.figure import Figure as Chart

NS: Final = 1_000_000_000
DRAIN_ITEMS: Final = 1_000


BOUNDED: Final = tuple(
    f for f in FAMILIES if f not in ("snapshots", "segment_index", "call_records")
)
"""The families whose size compaction keeps flat in a steady world: all but the two indexes
that grow with history by design, and the call records, which their own window bounds in
both runs alike (a saw-tooth: a plane clears a world's expired records at most once per
eighth of the window; none on SQLite, whose calls keep no records)."""


class Clock(Protocol):
    """Where the loop reads time (nanoseconds since the epoch) and waits."""

    def now_ns(self) -> int:
        """The time now."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (>= 0)."""
        ...


class WallClock:
    """The real clock."""

    def now_ns(self) -> int:
        """``time.time_ns()``."""
        return time.time_ns()

    def sleep(self, seconds: float) -> None:
        """``time.sleep``."""
        time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class SteadyConfig:
    """The run's sizes and rates (see the module)."""

    worlds: int = 100
    seconds: float = 180.0
    """Length of each of the two runs."""
    rate: float = 100.0
    """Items enqueued per second, over all worlds."""
    window_seconds: float = 10.0
    """The inbox retention window (``PlaneConfig.inbox_retention_seconds``)."""
    call_record_seconds: float = 5.0
    sample_seconds: float = 5.0
    snapshot_seconds: float = 30.0
    segment_entries: int = 50
    tick_seconds: float = 0.25
    seed: int = 17

    def __post_init__(self) -> None:
        if isinstance(self.worlds, bool) or not isinstance(self.worlds, int) or self.worlds < 1:
            raise Validation("SteadyConfig.worlds", f"must be an integer >= 1, not {self.worlds!r}")
        if not isinstance(self.segment_entries, int) or self.segment_entries < 1:
            raise Validation(
                "SteadyConfig.segment_entries",
                f"must be an integer >= 1, not {self.segment_entries!r}",
            )
        for name in (
            "rate",
            "window_seconds",
            "call_record_seconds",
            "sample_seconds",
            "snapshot_seconds",
            "tick_seconds",
        ):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise Validation(f"SteadyConfig.{name}", f"must be a positive number, not {value}")
        # The plateau is the second half of the run; it starts about one window after the
        # first marks (the first pass removes nothing), so the run must be a few windows.
        if not 4 * self.window_seconds <= self.seconds < float("inf"):
            raise Validation(
                "SteadyConfig.seconds",
                f"{self.seconds} s is shorter than 4 windows ({4 * self.window_seconds} s): "
                "no plateau to measure",
            )

    @property
    def pass_seconds(self) -> float:
        """Time between compaction passes: the distance of the consumed marks."""
        return self.window_seconds / MARKS_PER_WINDOW

    @property
    def items(self) -> int:
        """Items enqueued in a run."""
        return int(self.seconds * self.rate)

    def plane_config(self) -> PlaneConfig:
        """The plane's config: the window and the short call-record window."""
        return PlaneConfig(
            inbox_retention_seconds=self.window_seconds,
            call_record_seconds=self.call_record_seconds,
        )


@dataclass(frozen=True, slots=True)
class Sample:
    """Every world's hot state at ``seconds`` into the run, when ``items`` had been
    enqueued: totals over the worlds, and ``(count, bytes)`` by family."""

    seconds: float
    items: int
    keys: int
    bytes: int
    families: dict[str, tuple[int, int]]


@dataclass(slots=True)
class SteadyRun:
    """One run: what it did and what it sampled."""

    compaction: bool
    universe: UniverseId
    worlds: list[WorldId]
    sent: list[list[int]]
    """The items sent to each world (by index), in order."""
    samples: list[Sample] = field(default_factory=list)
    removed: int = 0
    compaction_seconds: float = 0.0
    compaction_passes: int = 0
    snapshots: int = 0
    segments: int = 0
    busy_seconds: float = 0.0
    """Time the loop worked rather than waited for its next tick: near the run's length,
    the one loop could not keep up (items still arrive on time; passes come late)."""
    longest_tick_seconds: float = 0.0
    longest_pass_gap_seconds: float = 0.0
    """The longest time between the starts of two compaction passes."""

    @property
    def enqueued(self) -> int:
        """Items enqueued."""
        return sum(len(s) for s in self.sent)

    def per_world(self, sample: Sample) -> tuple[float, float]:
        """Hot keys and bytes per world of ``sample``."""
        return sample.keys / len(self.worlds), sample.bytes / len(self.worlds)

    def slope(self, bytes_: bool = False, families: Sequence[str] = FAMILIES) -> float:
        """Least-squares slope of hot keys (or bytes) per world of ``families`` over the second
        half of the run, per minute."""
        end = self.samples[-1].seconds
        half = [s for s in self.samples if s.seconds >= end / 2]
        if len(half) < 2:
            raise Validation("SteadyConfig.sample_seconds", "fewer than 2 samples in a half run")
        x = [s.seconds / 60 for s in half]
        y = [
            sum(s.families[f][1 if bytes_ else 0] for f in families) / len(self.worlds)
            for s in half
        ]
        return statistics.linear_regression(x, y).slope

    @property
    def throughput(self) -> float:
        """Items the compactor removed per second of compaction time."""
        return self.removed / self.compaction_seconds if self.compaction_seconds else 0.0


def sample(run: SteadyRun, plane: Plane, at: float) -> Sample:
    """Every world's hot state, summed (``at``: seconds into the run)."""
    totals = {name: [0, 0] for name in FAMILIES}
    for w in run.worlds:
        for name, family in measure(plane.engine, WorldKeys(run.universe, w)).families.items():
            totals[name][0] += family.count
            totals[name][1] += family.bytes
    return Sample(
        at,
        run.enqueued,
        sum(c for c, _ in totals.values()),
        sum(b for _, b in totals.values()),
        {name: (c, b) for name, (c, b) in totals.items()},
    )


def snapshot_and_export(
    plane: Plane, exporter: Exporter, universe: UniverseId, world: WorldId, now_ns: int
) -> tuple[int, int]:
    """Snapshot the world at its head from its baseline + hot tail, promote it, and export
    what became exportable; return the snapshots (0 or 1) and segments made."""
    state = restore(plane, universe, world, ReferenceKernel())
    if state.head == state.from_height:
        return 0, 0
    plane.snapshot_commit(
        universe,
        world,
        state.state,
        height=state.head,
        logical_time_ns=now_ns,
        receipt_horizon_height=state.head,
        promote_baseline=True,
    )
    return 1, len(exporter.export_all(universe, world))


def run_once(
    plane: Plane,
    config: SteadyConfig,
    *,
    compaction: bool,
    clock: Clock,
    progress: Callable[[str], None] = lambda _: None,
) -> SteadyRun:
    """One run on ``plane`` (whose config should be ``config.plane_config()``) in a new
    universe; every item is drained by the end."""
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(config.worlds)]
    for w in worlds:
        plane.create_world(universe, w)
    run = SteadyRun(compaction, universe, worlds, [[] for _ in worlds])
    blob = plane.put_verified(universe, b"steady-state receipt body")
    exporter = Exporter(
        plane,
        ExportConfig(
            enabled=True,
            target_entries=config.segment_entries,
            min_entries=config.segment_entries,
        ),
    )
    compactor = Compactor(plane, now_ns=clock.now_ns) if compaction else None
    rng = random.Random(config.seed)
    start = clock.now_ns()
    end = start + round(config.seconds * NS)
    tick_ns, pass_ns = round(config.tick_seconds * NS), round(config.pass_seconds * NS)
    sample_ns, snapshot_ns = round(config.sample_seconds * NS), round(config.snapshot_seconds * NS)
    # Stagger the worlds' snapshots over the period, as hosts would not take them all at once.
    next_snapshot = [start + snapshot_ns * (1 + i) // len(worlds) for i in range(len(worlds))]
    next_pass = next_sample = start
    dirty: set[int] = set()
    last_pass: int | None = None
    label = "with" if compaction else "without"
    while (now := clock.now_ns()) < end:
        due = (now - start) * config.items // (end - start)
        dirty.update(_enqueue(plane, run, rng, blob, n) for n in range(run.enqueued, due))
        _drain(plane, universe, [worlds[i] for i in sorted(dirty)])
        dirty.clear()
        for i, w in enumerate(worlds):
            if now >= next_snapshot[i]:
                made, segments = snapshot_and_export(plane, exporter, universe, w, now)
                run.snapshots += made
                run.segments += segments
                next_snapshot[i] += snapshot_ns
        if compactor is not None and now >= next_pass:
            begun = clock.now_ns()
            if last_pass is not None:
                gap = (begun - last_pass) / NS
                run.longest_pass_gap_seconds = max(run.longest_pass_gap_seconds, gap)
            last_pass = begun
            totals = compactor.run([universe])
            if totals.failures:
                raise Corruption(f"steady run: compaction failed: {totals.failures[0]}")
            run.removed += totals.compaction.items
            run.compaction_seconds += totals.seconds
            run.compaction_passes += 1
            next_pass += pass_ns
        if now >= next_sample:
            run.samples.append(sample(run, plane, (now - start) / NS))
            next_sample += sample_ns
            keys, size = run.per_world(run.samples[-1])
            progress(
                f"steady {label} compaction: {(now - start) / NS:.0f}/{config.seconds:.0f} s, "
                f"{run.enqueued:,} items, {keys:,.1f} hot keys and {size / 1024:,.1f} KiB "
                "per world"
            )
        done = clock.now_ns()
        run.busy_seconds += (done - now) / NS
        run.longest_tick_seconds = max(run.longest_tick_seconds, (done - now) / NS)
        # the next tick on the schedule; ticks missed while working are skipped
        clock.sleep((start + ((done - start) // tick_ns + 1) * tick_ns - done) / NS)
    for n in range(run.enqueued, config.items):
        _enqueue(plane, run, rng, blob, n)
    _drain(plane, universe, worlds)
    run.samples.append(sample(run, plane, config.seconds))
    return run


def _enqueue(plane: Plane, run: SteadyRun, rng: random.Random, blob: Hash, n: int) -> int:
    """Enqueue item ``n`` into the world the generator draws; return the world's index."""
    i = rng.randrange(len(run.worlds))
    item = demo_item(i, n, blob)
    plane.enqueue(run.universe, run.worlds[i], item, idempotency_key=f"steady/{n}".encode())
    run.sent[i].append(n)
    return i


def _drain(plane: Plane, universe: UniverseId, worlds: Sequence[WorldId]) -> None:
    """Drain each world until its inbox is empty."""
    for w in worlds:
        while plane.drain_inbox_to_journal(universe, w, max_items=DRAIN_ITEMS).count:
            pass


def verify(plane: Plane, run: SteadyRun) -> dict[str, bool]:
    """The run's checks: every item sent to a world is in its journal exactly once, in
    the order sent, and restore equals a full replay."""
    exactly_once = restore_equal = True
    for i, w in enumerate(run.worlds):
        head = plane.head(run.universe, w)
        indexes = []
        for _, entry in plane.read_range(run.universe, w, 1, head):
            record = decode_journal_record(entry)
            if isinstance(record, IngressJournalRecord):
                tag = cbor.decode(item_payload(decode_inbox_item(record.item)))
                exactly_once &= tag["writer"] == i
                indexes.append(tag["index"])
        exactly_once &= indexes == run.sent[i]
        restored = restore(plane, run.universe, w, ReferenceKernel())
        replayed = full_replay(plane, run.universe, w, ReferenceKernel())
        restore_equal &= restored.state == replayed.state and restored.head == replayed.head
    return {
        "every item in its journal exactly once, in order": exactly_once,
        "restore equals full replay": restore_equal,
    }


def plot(runs: Sequence[SteadyRun], config: SteadyConfig, path: Path) -> None:
    """Hot keys and hot bytes per world over time for each run, and the families of the run
    with compaction, as a PNG at ``path`` (``MissingDependency`` without matplotlib)."""
    chart = _chart_class()(figsize=(13, 4.2), layout="constrained")
    keys, size, families = chart.subplots(1, 3)
    for run in runs:
        label = "with compaction" if run.compaction else "without compaction"
        seconds = [s.seconds for s in run.samples]
        keys.plot(seconds, [run.per_world(s)[0] for s in run.samples], label=label)
        size.plot(seconds, [run.per_world(s)[1] / 1024 for s in run.samples], label=label)
        if run.compaction:
            for name in FAMILIES:
                counts = [s.families[name][0] / len(run.worlds) for s in run.samples]
                if any(counts):
                    # idempotency entries go with their items: dashed, over the items' line
                    style = "--" if name == "idempotency" else "-"
                    families.plot(seconds, counts, style, label=name)
    for axes, title in (
        (keys, "hot keys per world"),
        (size, "hot KiB per world"),
        (families, "with compaction: keys per world by family"),
    ):
        axes.set_title(title)
        axes.set_xlabel("seconds")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    chart.suptitle(
        f"{config.worlds} worlds, {config.rate:g} items/s, retention window "
        f"{config.window_seconds:g} s, snapshot every {config.snapshot_seconds:g} s, "
        f"{config.segment_entries}-entry segments (SQLite FULL + local directory)",
        fontsize="medium",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    chart.savefig(path, dpi=100)


def _chart_class() -> type[Chart]:
    """matplotlib's ``Figure`` (no pyplot: no global state, no GUI backend), imported lazily;
    ``MissingDependency`` naming the extra without it."""
    require("the steady-state plot", "bench", "matplotlib")
    from matplotlib.figure import Figure

    return Figure


def default_plot_path() -> Path:
    """``steady-state.png`` in the system's temporary directory: never a file of the
    checkout a run starts in (``--plot`` names another place)."""
    return Path(tempfile.gettempdir()) / "steady-state.png"


def figures(config: SteadyConfig, with_: SteadyRun, without: SteadyRun) -> list[Figure]:
    """The figures of the two runs (see the module)."""
    setup = (
        f"{config.worlds} worlds, {config.rate:g} items/s for {config.seconds:g} s, "
        f"window {config.window_seconds:g} s"
    )
    peer = "the same run without compaction"
    end_with, end_without = (
        with_.per_world(with_.samples[-1]),
        without.per_world(without.samples[-1]),
    )
    return [
        Figure(
            name=f"steady: hot keys per world at the end, with compaction ({setup})",
            value=round(end_with[0], 1),
            unit="keys",
            baseline=peer,
            baseline_value=round(end_without[0], 1),
            target=None,
            better="lower",
        ),
        Figure(
            name=f"steady: hot bytes per world at the end, with compaction ({setup})",
            value=round(end_with[1]),
            unit="bytes",
            baseline=peer,
            baseline_value=round(end_without[1]),
            target=None,
            better="lower",
        ),
        Figure(
            name="steady: plateau, slope of hot keys per world over the second half",
            value=round(with_.slope(), 2),
            unit="keys/min",
            baseline=peer,
            baseline_value=round(without.slope(), 2),
            target=0.1,
            better="lower",
        ),
        Figure(
            name=(
                "steady: plateau of what compaction bounds, slope of hot keys per world over "
                "the second half, snapshot and segment index and call records aside"
            ),
            value=round(with_.slope(families=BOUNDED), 2),
            unit="keys/min, compactable",
            baseline=peer,
            baseline_value=round(without.slope(families=BOUNDED), 2),
            target=0.01,
            better="lower",
        ),
        Figure(
            name="steady: plateau, slope of hot bytes per world over the second half",
            value=round(with_.slope(bytes_=True)),
            unit="bytes/min",
            baseline=peer,
            baseline_value=round(without.slope(bytes_=True)),
            target=None,
            better="lower",
        ),
        Figure(
            name=(
                f"steady: compactor throughput, {with_.removed:,} items removed in "
                f"{with_.compaction_passes:,} passes over every world"
            ),
            value=round(with_.throughput, 1),
            unit="items/s of compaction time",
            baseline="the ingress rate",
            baseline_value=config.rate,
            target=1.0,
            better="higher",
        ),
        Figure(
            name="steady: items enqueued (with idempotency keys), with compaction",
            value=with_.enqueued,
            unit="items",
            baseline=peer,
            baseline_value=without.enqueued,
            target=None,
            better="higher",
        ),
    ]


def run(
    config: SteadyConfig | None = None,
    plot_path: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
    clock: Clock | None = None,
) -> list[Figure]:
    """Both runs on fresh embedded stores, verified; the plot at ``plot_path`` (default
    :func:`default_plot_path`); the figures. ``Corruption`` if a run fails its checks."""
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.local import LocalObjectStore
    from segments import open_plane

    config = config or SteadyConfig()
    clock = clock or WallClock()
    _chart_class()  # a missing extra fails now, not after the runs
    runs: list[SteadyRun] = []
    with tempfile.TemporaryDirectory(prefix="aosp-bench-steady-") as tmp:
        for compaction in (True, False):
            root = Path(tmp) / ("with" if compaction else "without")
            root.mkdir()
            plane = open_plane(
                SqliteEngine(root / "aos.db"),
                LocalObjectStore(root / "objects"),
                config.plane_config(),
            )
            try:
                done = run_once(
                    plane, config, compaction=compaction, clock=clock, progress=progress
                )
                checks = verify(plane, done)
            finally:
                plane.engine.close()
            failed = [name for name, ok in checks.items() if not ok]
            if failed:
                raise Corruption(f"steady run ({compaction=}) failed: {', '.join(failed)}")
            passes = (
                f"passes at most {done.longest_pass_gap_seconds:.2f} s apart, "
                if compaction
                else ""
            )
            progress(
                f"steady: run {'with' if compaction else 'without'} compaction verified; "
                f"{done.snapshots:,} snapshots, {done.segments:,} segments, loop busy "
                f"{done.busy_seconds / config.seconds:.0%} of the time (longest tick "
                f"{done.longest_tick_seconds:.2f} s), {passes}"
                f"{(root / 'aos.db').stat().st_size:,} bytes of SQLite file"
            )
            last = done.samples[-1]
            progress(
                "steady: keys per world at the end: "
                + ", ".join(
                    f"{name} {c / config.worlds:,.1f}" for name, (c, _) in last.families.items()
                )
            )
            runs.append(done)
    path = plot_path or default_plot_path()
    plot(runs, config, path)
    progress(f"steady: plot written to {path}")
    return figures(config, runs[0], runs[1])
