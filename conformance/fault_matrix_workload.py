"""The fault matrix's workload: a host-like sequence of steps (:data:`STEPS`), made by a
:class:`Run` through a faulty engine and redone, after a crash or an unknown outcome, by a
new plane as a restarted host would (:func:`run_steps`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from backends.kv.faults import FaultyEngine, SimulatedCrash
from conformance.context import ConformanceFailure, event
from persistence import fdb_errors
from persistence.errors import (
    Conflict,
    EngineError,
    NotFound,
    SequencingIncomplete,
    WorldExists,
)
from persistence.ids import Hash, UniverseId, WorldId
from persistence.plane import DrainResult, InboxCompaction, Plane
from persistence.records import EffectDispatchItem, EffectInFlightItem, TimerDueItem
from segments.export import ExportConfig, Exporter

SNAPSHOT_HEIGHT: Final = 7
"""3 appended entries and 4 drained items: the fault-free snapshot is taken at this head."""
SNAPSHOT_TIME: Final = 70
"""The logical time of the workload's snapshot (competitors use their height)."""
EXPORT: Final = ExportConfig(enabled=True, target_entries=3, delete_chunk_entries=2)
"""Two segments (1-3, 4-6) below the baseline at 7, each deleted in two chunks."""
STEP_ATTEMPTS: Final = 20
COMPACT_AT: Final = 1_000_000 * 1_000_000_000
"""The compactor's clock at its first pass (nanoseconds); its second pass is one window
(``PlaneConfig.inbox_retention_seconds``) later."""
COMPACT_CHUNK: Final = 2
"""Items per compaction transaction: the five consumed items go in three."""
INTENT: Final = Hash.of(b"conformance/fault-matrix/intent")


@dataclass
class Run:
    """One run of the workload: where it writes, the plane under test (its class, objects,
    config and segment reader), the plane of the current "process", and what each of its
    calls reported."""

    engine: FaultyEngine
    template: Plane
    universe: UniverseId
    world: WorldId
    plane: Plane = field(init=False)
    outcomes: list[tuple[str, object]] = field(default_factory=list)
    step_commits: dict[str, range] = field(default_factory=dict)
    """The writing commits (by index, from 1) each step made: exact in a fault-free run."""

    def restart(self) -> None:
        """A new "process": a new plane of the class under test on the same engine and
        object store (opening it commits: it may fail too)."""
        t = self.template
        self.plane = type(t)(
            self.engine, t.objects, t.config, t.segments, hooks=self.engine.injector
        )

    def report(self, what: str, call: Callable[[], object]) -> object:
        """Make ``call`` and keep what it reported: its result, or the conflict it raised
        (a competing writer can make a call conflict; both runs of a pair see the same)."""
        try:
            outcome: object = call()
        except (Conflict, NotFound) as exc:
            outcome = type(exc).__name__
        self.outcomes.append((what, outcome))
        return outcome


def _create(run: Run) -> None:
    with contextlib.suppress(WorldExists):  # the crashed attempt had created it
        run.plane.create_world(run.universe, run.world)


def _small(run: Run) -> None:
    run.plane.put_verified(run.universe, b"conformance small blob")


def _large(run: Run) -> None:
    run.plane.put_verified(run.universe, large_body(run.plane))


def large_body(plane: Plane) -> bytes:
    """The workload's external blob: over ``plane``'s inline threshold."""
    return b"L" * (plane.config.inline_threshold + 1_000)


OWN_ENTRIES: Final = [b"a", b"b", b"c"]


def _append(run: Run) -> None:
    """Append the host's three entries once: a restarted host looks for them first, and
    appends at whatever head it finds (again, if another writer moved it meanwhile)."""
    u, w = run.universe, run.world
    for _ in range(STEP_ATTEMPTS):
        head = run.plane.head(u, w)
        entries = [e for _, e in run.plane.read_range(u, w, 1, head)]
        if any(entries[i : i + 3] == OWN_ENTRIES for i in range(len(entries))):
            return
        append = functools.partial(run.plane.append_batch, u, w, head, OWN_ENTRIES)
        if run.report("append", append) != "HeadAdvanced":
            return
    raise ConformanceFailure(f"the head moved under {STEP_ATTEMPTS} appends in a row")


def _enqueue_one(key: bytes, n: int) -> Callable[[Run], Any]:
    def step(run: Run) -> None:
        run.report(
            f"enqueue {key!r}",
            lambda: run.plane.enqueue(
                run.universe, run.world, event(n, "faults"), idempotency_key=key
            ),
        )

    return step


def _enqueue_batch(run: Run) -> None:
    run.report(
        "enqueue batch",
        lambda: run.plane.enqueue_batch(
            run.universe,
            run.world,
            [event(2, "faults"), event(3, "faults")],
            idempotency_keys=[b"k2", b"k3"],
        ),
    )


def _drain(run: Run) -> None:
    while True:
        result = run.report(
            "drain", lambda: run.plane.drain_inbox_to_journal(run.universe, run.world, max_items=2)
        )
        if not isinstance(result, DrainResult) or not result.count:
            return


def _skip(run: Run) -> None:
    """Enqueue an item and move the cursor past it without journaling it (a host that
    handled it another way); redone, the cursor is found already past it."""
    u, w = run.universe, run.world
    seq = run.plane.enqueue(u, w, event(5, "faults"), idempotency_key=b"k5")
    cursor = run.plane.inbox_cursor(u, w)
    if cursor is None or cursor < seq:
        run.report("commit cursor", lambda: run.plane.commit_cursor(u, w, cursor, seq))


def after_window(plane: Plane) -> int:
    """The compactor's clock one window after :data:`COMPACT_AT` (its second pass)."""
    return COMPACT_AT + plane.config.inbox_retention_ns


def _compact(at: Callable[[Plane], int]) -> Callable[[Run], Any]:
    """A compaction pass at the time ``at`` gives, chunk by chunk (each reported)."""

    def step(run: Run) -> None:
        now = at(run.plane)
        while True:
            done = run.report(
                "compact",
                lambda: run.plane.compact_inbox(
                    run.universe, run.world, max_items=COMPACT_CHUNK, now_ns=lambda: now
                ),
            )
            if not isinstance(done, InboxCompaction) or not done.more:
                return

    return step


def _snapshot(run: Run) -> None:
    """Snapshot at the head and promote it, once: a restarted host finds its snapshot (its
    logical time marks it) and does not take another."""
    u, w = run.universe, run.world
    if any(s.logical_time_ns == SNAPSHOT_TIME for s in run.plane.list_snapshots(u, w)):
        return
    height = run.plane.head(u, w)
    run.report(
        "snapshot",
        lambda: run.plane.snapshot_commit(
            u,
            w,
            b"kernel state at %d" % height,
            height=height,
            logical_time_ns=SNAPSHOT_TIME,
            manifest=[Hash.of(b"conformance small blob")],
            receipt_horizon_height=height,
            promote_baseline=True,
        )[1],
    )


def _export(run: Run) -> None:
    Exporter(run.plane, EXPORT).export_all(run.universe, run.world)


def _effect(run: Run) -> None:
    item = EffectDispatchItem(run.world, INTENT, "http.request", event(9).value_cbor)
    seq = run.plane.dispatch_effect(run.universe, item)
    claimed = run.report("claim", lambda: run.plane.claim_effect(run.universe, seq, "worker-1"))
    if isinstance(claimed, EffectInFlightItem):
        run.outcomes[-1] = ("claim", (claimed.claimed_by, claimed.intent_hash))


def _timer(run: Run) -> None:
    item = TimerDueItem(run.world, INTENT, 1_000, event(10).value_cbor)
    run.plane.schedule_timer(run.universe, item)


def second_world(world: WorldId) -> WorldId:
    """The world the group append creates next to the run's world."""
    return WorldId(uuid.uuid5(world.uuid, "fault-matrix second world"))


GROUP_ENTRIES: Final = (b"group: first world", b"group: second world")


def _group(run: Run) -> None:
    """Append to the run's world and create a second world with its first entry, in one
    group commit, once: a restarted host finds the second world's entry and stops; a group
    refused because another writer moved the first world's head is redone at the new head."""
    u, w, second = run.universe, run.world, second_world(run.world)
    for _ in range(STEP_ATTEMPTS):
        with contextlib.suppress(NotFound):
            run.plane.head(u, second)
            return  # the group created it: it landed
        batches = [(w, run.plane.head(u, w), [GROUP_ENTRIES[0]]), (second, 0, [GROUP_ENTRIES[1]])]
        group = functools.partial(run.plane.append_batches, u, batches, create_missing=True)
        if run.report("group append", group) != "HeadAdvanced":
            return
    raise ConformanceFailure(f"the head moved under {STEP_ATTEMPTS} group appends in a row")


def _enqueue_both(run: Run) -> None:
    """An item into each world (the second one's first), with idempotency keys."""
    for world, key, n in ((run.world, b"k6", 6), (second_world(run.world), b"k7", 7)):
        run.report(
            f"enqueue {key!r}",
            lambda world=world, key=key, n=n: run.plane.enqueue(  # type: ignore[misc]
                run.universe, world, event(n, "faults"), idempotency_key=key
            ),
        )


def _drain_both(run: Run) -> None:
    """Multi-world drains of both worlds, one item per world each, until neither has more
    (a restarted host drains what is left)."""
    worlds = [run.world, second_world(run.world)]
    while True:
        results = run.report(
            "multi-world drain",
            lambda: list(run.plane.drain_worlds(run.universe, worlds, max_items=1).values()),
        )
        if not isinstance(results, list) or not any(r.more for r in results):
            return


def sequenced_world(world: WorldId) -> WorldId:
    """The world the sequenced appends create (their universe log positions are the run's)."""
    return WorldId(uuid.uuid5(world.uuid, "fault-matrix sequenced world"))


SEQUENCED_ENTRIES: Final = (b"sequenced: queued", b"sequenced: inline")


SEQUENCED_STEP: Final = "sequenced appends, queued and inline"


def _sequenced(run: Run) -> None:
    """Two sequenced appends to a third world, once each: the first queued for its log
    position (``PlaneConfig.log_sequencing``), the second inline (behind anything still
    queued); a restarted host finds an append that landed by its world's head, and settles
    what a crash between an append and its settle left queued."""
    u, third = run.universe, sequenced_world(run.world)
    t = run.template
    queuing, inline = (
        type(t)(
            run.engine,
            t.objects,
            dataclasses.replace(t.config, log_sequencing=mode),
            t.segments,
            hooks=run.engine.injector,
        )
        for mode in ("queued", "inline")
    )
    for height, (label, plane) in enumerate((("queued", queuing), ("inline", inline))):
        try:
            landed = run.plane.head(u, third) > height
        except NotFound:
            landed = False
        if not landed:
            batches = [(third, height, [SEQUENCED_ENTRIES[height]])]
            append = functools.partial(
                _positions, plane, u, batches, [["sequenced"]], create_missing=True
            )
            run.report(f"sequenced append, {label}", append)
    run.report("settle the log", lambda: run.plane.settle_log(u))


def _positions(plane: Plane, *args: Any, **kwargs: Any) -> tuple[list[int], int | None]:
    """``plane.append_sequenced(*args, **kwargs)``: the heights and the first position."""
    done = plane.append_sequenced(*args, **kwargs)
    return done.first_heights, done.first_position


STEPS: Final[tuple[tuple[str, Callable[[Run], Any]], ...]] = (
    ("create world", _create),
    ("put inline blob", _small),
    ("put external blob", _large),
    ("append", _append),
    ("enqueue k1", _enqueue_one(b"k1", 1)),
    ("enqueue batch k2 k3", _enqueue_batch),
    ("enqueue k4", _enqueue_one(b"k4", 4)),
    ("drain", _drain),
    ("enqueue k5 and skip it", _skip),
    ("compact inbox: mark the cursor", _compact(lambda _: COMPACT_AT)),
    ("enqueue k4 again inside the window", _enqueue_one(b"k4", 4)),
    ("compact inbox after the window", _compact(after_window)),
    ("enqueue k1 again after the window", _enqueue_one(b"k1", 1)),
    ("snapshot and promote", _snapshot),
    ("export segments", _export),
    ("dispatch and claim effect", _effect),
    ("schedule timer", _timer),
    ("group append creating a second world", _group),
    ("enqueue k6 and k7 into both worlds", _enqueue_both),
    ("multi-world drain of both worlds", _drain_both),
    (SEQUENCED_STEP, _sequenced),
)


def run_steps(run: Run) -> None:
    """Start a "process", then every step; a crash, an unknown outcome (1031) or an append
    whose log positions were not settled (``SequencingIncomplete``) restarts the process,
    which redoes the step it was in."""
    running = False
    for name, step in STEPS:
        first = run.engine.injector.commits + 1
        for _ in range(STEP_ATTEMPTS):
            try:
                if not running:
                    run.restart()
                    running = True
                step(run)
                break
            except (SimulatedCrash, SequencingIncomplete):  # appended, not yet settled
                running = False
            except EngineError as exc:  # the outcome is unknown: check and redo, as a host
                if exc.code != fdb_errors.TRANSACTION_TIMED_OUT:
                    raise
                running = False
        else:
            raise ConformanceFailure(f"step {name!r} failed {STEP_ATTEMPTS} times in a row")
        run.step_commits[name] = range(first, run.engine.injector.commits + 1)
