"""The fault-matrix case: commit faults and crashes at every protocol step, then recovery.

A host-like workload (create a world, store an inline and an external blob, append, enqueue
singly and in a batch with idempotency keys, drain, move the cursor past an item, compact the
inbox -- mark the cursor, retry an enqueue inside the window, remove the consumed items after
it in chunks, retry an enqueue after it --, snapshot and promote, export segments, dispatch
and claim an effect, schedule a timer, append to the world and create a second world in one
group commit, then enqueue into both worlds and drain both in multi-world drains of one item
per world) runs once without faults, then again with:

* each of its commits failed in turn with 1020 ``not_committed``, 1021
  ``commit_unknown_result`` (applied, and not applied), 1007 ``transaction_too_old`` and
  1031 ``transaction_timed_out`` (applied and not: the host redoes the step);
* a crash at each occurrence of each named crash point the plane and the exporter declare;
* the interleaving mode: each writing commit failed with 1021, applied and not, while
  another client (ten kinds of competing writer) commits before the retry; the run must
  match its fault-free twin in state and in every outcome its calls reported;
* seeded random faults and crashes (``Profile.fault_seeds`` runs: none in ``quick``, 24 in
  ``full``), 25% of commits failed, 5% of reads failed (1007, 1009, 1037) and 10% of crash
  points crashing.

Each run uses a new plane of the class under test (``type(ctx.plane)``, constructed as
``Plane(engine, objects, config, segments, hooks=injector)``) on the wrapped engine and the
same object store. A crash ends the "process": another new plane redoes the interrupted
step, as a restarted host would. Every run must end in exactly the state of the fault-free
run (sequences, ids and wall-clock times aside): each item journaled once, each blob and
segment stored once, one notification per enqueue, the same items and idempotency entries
compacted away, and the journal read through the segments unchanged -- and no world with
items after its cursor without its ready mark (a mark without items is allowed).
Compaction reads the time from a clock the workload sets
(:data:`~conformance.fault_matrix_workload.COMPACT_AT`, then one window later). The
workload is in :mod:`~conformance.fault_matrix_workload`, the competing writers in
:mod:`~conformance.fault_matrix_competitors`, what a run leaves and its comparisons in
:mod:`~conformance.fault_matrix_state`.

Faults are injected by :class:`~backends.kv.faults.FaultyEngine`, so the case needs an engine
it can wrap without changing what is tested: the memory engine, or an engine that is already
a ``FaultyEngine`` (its inner engine is wrapped with the case's own injector). Other engines
are skipped with the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from conformance.context import CaseSkipped, ConformanceFailure, Context, check
from conformance.fault_matrix_competitors import COMPETITORS, SEQUENCED_COMPETITOR, competitor
from conformance.fault_matrix_state import (
    check_reference,
    first_misreport,
    logical_state,
    normal_outcome,
    positions,
    reported_seqs,
    state_difference,
)
from conformance.fault_matrix_workload import SEQUENCED_STEP, Run, run_steps
from persistence import fdb_errors
from persistence.errors import PersistError
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane

FAULTS: Final[tuple[tuple[str, int, bool | str], ...]] = (
    ("1020", fdb_errors.NOT_COMMITTED, False),
    ("1021 applied", fdb_errors.COMMIT_UNKNOWN_RESULT, True),
    ("1021 not applied", fdb_errors.COMMIT_UNKNOWN_RESULT, False),
    ("1007", fdb_errors.TRANSACTION_TOO_OLD, False),
    ("1031 applied", fdb_errors.TRANSACTION_TIMED_OUT, True),
    ("1031 not applied", fdb_errors.TRANSACTION_TIMED_OUT, False),
    ("1031 late", fdb_errors.TRANSACTION_TIMED_OUT, "late"),
)
"""Each commit of the workload is failed with each of these in turn. 1031 (a timeout during
the commit) is not retried: the call reports it, and the host redoes the step as after a
crash. "late": the timed-out commit lands just before the host's next writing commit, after
the reads the host made to find out (as a commit still in flight at FoundationDB can)."""


def _wrappable(engine: Engine) -> Engine:
    """The engine to wrap in the case's own fault injector, or ``CaseSkipped``."""
    if isinstance(engine, FaultyEngine):
        return engine.inner
    if isinstance(engine, MemoryEngine):
        return engine
    raise CaseSkipped(
        f"engine {type(engine).__name__} ({engine.url}) cannot inject faults: run this case on "
        "memory:// or wrap the engine in backends.kv.faults.FaultyEngine"
    )


Faults = Callable[[UniverseId, WorldId], FaultInjector]
"""Makes a run's fault injector once its universe and world are known."""


def _scripted(script: Callable[[FaultInjector], None]) -> Faults:
    def make(u: UniverseId, w: WorldId) -> FaultInjector:
        injector = FaultInjector()
        script(injector)
        return injector

    return make


def commit_faults_and_crash_points(ctx: Context) -> None:
    """Faults 1: every commit failed with 1020, 1021 (applied and not), 1007 and 1031
    (applied, not applied and late), a crash at every crash point, and every commit's 1021
    with another client committing before the retry, then recovery by a new plane: exactly
    the fault-free state and, with the interleaving, exactly the outcomes the fault-free
    twin reported."""
    base = _wrappable(ctx.plane.engine)
    observer = Plane(base, ctx.plane.objects, ctx.plane.config, ctx.plane.segments)  # no faults

    def run_with(faults: Faults, what: str) -> Outcome:
        universe, world = UniverseId.new(), WorldId.new()
        injector = faults(universe, world)
        run = Run(FaultyEngine(base, injector), ctx.plane, universe, world)
        try:
            run_steps(run)
            reported = [seq for _, outcome in run.outcomes for seq in reported_seqs(outcome)]
            position = positions(observer, universe, world, reported)
            state = logical_state(observer, universe, world, position)
        except PersistError as exc:
            raise ConformanceFailure(f"{what}: {type(exc).__name__}: {exc}") from exc
        outcomes = [(name, normal_outcome(outcome, position)) for name, outcome in run.outcomes]
        return Outcome(state, outcomes, injector, run.step_commits)

    fault_free = run_with(_scripted(lambda _: None), "fault-free run")
    reference = fault_free.state
    check_reference(reference)
    commits, points = fault_free.injector.commits, dict(fault_free.injector.points)
    runs = 1

    def expect(faults: Faults, what: str, fired: object) -> None:
        got = run_with(faults, what)
        check(fired in got.injector.log, f"{what}: the fault was not injected ({got.injector.log})")
        difference = state_difference(reference, got.state)
        check(not difference, f"{what}: {difference}")

    for label, code, applied in FAULTS:
        ctx.progress(f"faults: commit 1-{commits} failed with {label}")
        for index in range(1, commits + 1):
            expect(
                _scripted(functools.partial(_fail, index=index, code=code, applied=applied)),
                f"commit {index} failed with {label}",
                ("commit", (index, code, applied)),
            )
            runs += 1
    for point, occurrences in sorted(points.items()):
        for occurrence in range(1, occurrences + 1):
            expect(
                _scripted(
                    functools.partial(FaultInjector.crash_at, point=point, occurrence=occurrence)
                ),
                f"crash at {point} #{occurrence}",
                ("crash", (point, occurrence)),
            )
            runs += 1
    sequenced = fault_free.step_commits[SEQUENCED_STEP]
    interleaved = _interleaving(ctx, observer, run_with, commits, sequenced)
    for seed in range(ctx.profile.fault_seeds):
        got = run_with(_random(seed), f"random faults, seed {seed}")
        difference = state_difference(reference, got.state)
        check(not difference, f"random faults, seed {seed} ({got.injector.log}): {difference}")
        runs += 1
    ctx.notes["fault_matrix_plane_class"] = type(ctx.plane).__name__  # each run's (Run.restart)
    ctx.notes["fault_matrix_commits_per_run"] = commits
    ctx.notes["fault_matrix_crash_points"] = sum(points.values())
    ctx.notes["fault_matrix_interleaved_runs"] = interleaved
    ctx.notes["fault_matrix_runs"] = runs + interleaved


def _fail(injector: FaultInjector, *, index: int, code: int, applied: bool | str) -> None:
    injector.fail_commit(index, code, applied=applied is True, late=applied == "late")


@dataclass
class Outcome:
    """What one run of the workload left and reported."""

    state: dict[str, Any]
    outcomes: list[tuple[str, object]]
    injector: FaultInjector
    step_commits: dict[str, range]
    """The writing commits each step made (``Run.step_commits``)."""


def _interleaving(
    ctx: Context,
    observer: Plane,
    run_with: Callable[[Faults, str], Outcome],
    commits: int,
    sequenced: range,
) -> int:
    """The interleaving mode: for each commit of the workload and each competing writer,
    the commit fails with 1021 (applied, then not applied) while the competitor commits
    before the retry. Each such run must end in the state, and every call in it must report
    the outcome, of its fault-free twin: the same competitor committing right after the
    commit (applied), or a 1020 with the same competitor (not applied). The quick profile
    pairs each commit with one competitor kind in turn (and each commit of the sequenced
    appends' step with a competing sequenced append too); the full profile with all ten."""
    kinds = list(COMPETITORS)
    runs = 0
    ctx.progress(f"faults: commit 1-{commits}, 1021 with a competing writer between the tries")
    for index in range(1, commits + 1):
        chosen = kinds if ctx.profile.fault_seeds else [kinds[index % len(kinds)]]
        if index in sequenced and SEQUENCED_COMPETITOR not in chosen:
            chosen.append(SEQUENCED_COMPETITOR)
        for kind in chosen:
            for applied in (True, False):
                twin, faulty = _pair(index, kind, applied, observer)
                what = f"commit {index}: 1021 {'' if applied else 'not '}applied, {kind} between"
                expected = run_with(twin, f"{what} (fault-free twin)")
                got = run_with(faulty, what)
                difference = state_difference(expected.state, got.state)
                check(not difference, f"{what}: {difference}")
                misreport = first_misreport(expected.outcomes, got.outcomes)
                check(not misreport, f"{what}: misreported outcome: {misreport}")
                runs += 2
    return runs


def _pair(index: int, kind: str, applied: bool, other: Plane) -> tuple[Faults, Faults]:
    """The faults of an interleaved run and of its fault-free twin."""

    def twin(u: UniverseId, w: WorldId) -> FaultInjector:
        injector = FaultInjector()
        compete = competitor(kind, other, u, w)
        if applied:
            injector.after_commit(index, compete)
        else:  # not applied: the same as a plain conflict with the competitor in between
            injector.fail_commit(index, fdb_errors.NOT_COMMITTED, interleave=compete)
        return injector

    def faulty(u: UniverseId, w: WorldId) -> FaultInjector:
        injector = FaultInjector()
        compete = competitor(kind, other, u, w)
        code = fdb_errors.COMMIT_UNKNOWN_RESULT
        injector.fail_commit(index, code, applied=applied, interleave=compete)
        return injector

    return twin, faulty


def _random(seed: int) -> Faults:
    def make(u: UniverseId, w: WorldId) -> FaultInjector:
        return FaultInjector(
            seed=seed, commit_fault_rate=0.25, crash_rate=0.1, read_fault_rate=0.05
        )

    return make
