"""The fault-matrix case: commit faults and crashes at every protocol step, then recovery.

A host-like workload (create a world, store an inline and an external blob, append, enqueue
singly and in a batch with idempotency keys, drain, move the cursor past an item, snapshot
and promote, export segments, dispatch and claim an effect, schedule a timer) runs once
without faults, then again with:

* each of its commits failed in turn with 1020 ``not_committed``, 1021
  ``commit_unknown_result`` (applied, and not applied) and 1007 ``transaction_too_old``;
* a crash at each occurrence of each named crash point the plane and the exporter declare;
* seeded random faults and crashes (``Profile.fault_seeds`` runs: none in ``quick``, 24 in
  ``full``), 25% of commits failed and 10% of crash points crashing.

Each run uses a new plane of the class under test (``type(ctx.plane)``, constructed as
``Plane(engine, objects, config, segments, hooks=injector)``) on the wrapped engine and the
same object store. A crash ends the "process": another new plane redoes the interrupted
step, as a restarted host would. Every run must end in exactly the state of the fault-free
run (sequences, ids and wall-clock times aside): each item journaled once, each blob and
segment stored once, one notification per enqueue, and the journal read through the
segments unchanged.

Faults are injected by :class:`~backends.kv.faults.FaultyEngine`, so the case needs an engine
it can wrap without changing what is tested: the memory engine, or an engine that is already
a ``FaultyEngine`` (its inner engine is wrapped with the case's own injector). Other engines
are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from conformance.cases import CaseSkipped, ConformanceFailure, Context, check, event
from persistence import fdb_errors, kv
from persistence.errors import PersistError, WorldExists
from persistence.ids import Hash, UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.kv import Engine
from persistence.plane import Plane
from persistence.records import (
    EffectDispatchItem,
    IngressJournalRecord,
    TimerDueItem,
    decode_journal_record,
    encode_inbox_item,
)
from segments.export import ExportConfig, Exporter, read_marker

FAULTS: Final = (
    ("1020", fdb_errors.NOT_COMMITTED, False),
    ("1021 applied", fdb_errors.COMMIT_UNKNOWN_RESULT, True),
    ("1021 not applied", fdb_errors.COMMIT_UNKNOWN_RESULT, False),
    ("1007", fdb_errors.TRANSACTION_TOO_OLD, False),
)
"""Each commit of the workload is failed with each of these in turn."""

SNAPSHOT_HEIGHT: Final = 7
"""3 appended entries and 4 drained items: the snapshot is taken at the head."""
EXPORT: Final = ExportConfig(enabled=True, target_entries=3, delete_chunk_entries=2)
"""Two segments (1-3, 4-6) below the baseline at 7, each deleted in two chunks."""
STEP_ATTEMPTS: Final = 20
INTENT: Final = Hash.of(b"conformance/fault-matrix/intent")


@dataclass
class Run:
    """One run of the workload: where it writes, and the plane of the current "process"."""

    engine: FaultyEngine
    plane: Plane
    universe: UniverseId
    world: WorldId

    def restart(self) -> None:
        """The process died: a new plane (of the class under test) on the same engine and
        object store."""
        old = self.plane
        self.plane = type(old)(
            self.engine, old.objects, old.config, old.segments, hooks=self.engine.injector
        )


def _create(run: Run) -> None:
    with contextlib.suppress(WorldExists):  # the crashed attempt had created it
        run.plane.create_world(run.universe, run.world)


def _small(run: Run) -> None:
    run.plane.put_verified(run.universe, b"conformance small blob")


def _large(run: Run) -> None:
    run.plane.put_verified(run.universe, _large_body(run.plane))


def _large_body(plane: Plane) -> bytes:
    return b"L" * (plane.config.inline_threshold + 1_000)


def _append(run: Run) -> None:
    if run.plane.head(run.universe, run.world) < 3:  # a host checks what it already wrote
        run.plane.append_batch(run.universe, run.world, 0, [b"a", b"b", b"c"])


def _enqueue_one(key: bytes, n: int) -> Callable[[Run], Any]:
    def step(run: Run) -> None:
        run.plane.enqueue(run.universe, run.world, event(n, "faults"), idempotency_key=key)

    return step


def _enqueue_batch(run: Run) -> None:
    run.plane.enqueue_batch(
        run.universe,
        run.world,
        [event(2, "faults"), event(3, "faults")],
        idempotency_keys=[b"k2", b"k3"],
    )


def _drain(run: Run) -> None:
    while run.plane.drain_inbox_to_journal(run.universe, run.world, max_items=2).count:
        pass


def _skip(run: Run) -> None:
    """Enqueue an item and move the cursor past it without journaling it (a host that
    handled it another way); redone, the cursor is found already moved."""
    u, w = run.universe, run.world
    seq = run.plane.enqueue(u, w, event(5, "faults"), idempotency_key=b"k5")
    cursor = run.plane.inbox_cursor(u, w)
    if cursor != seq:
        run.plane.commit_cursor(u, w, cursor, seq)


def _snapshot(run: Run) -> None:
    run.plane.snapshot_commit(
        run.universe,
        run.world,
        b"kernel state at 7",
        height=SNAPSHOT_HEIGHT,
        logical_time_ns=70,
        manifest=[Hash.of(b"conformance small blob")],
        receipt_horizon_height=SNAPSHOT_HEIGHT,
        promote_baseline=True,
    )


def _export(run: Run) -> None:
    Exporter(run.plane, EXPORT).export_all(run.universe, run.world)


def _effect(run: Run) -> None:
    item = EffectDispatchItem(run.world, INTENT, "http.request", event(9).value_cbor)
    seq = run.plane.dispatch_effect(run.universe, item)
    run.plane.claim_effect(run.universe, seq, "worker-1")


def _timer(run: Run) -> None:
    item = TimerDueItem(run.world, INTENT, 1_000, event(10).value_cbor)
    run.plane.schedule_timer(run.universe, item)


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
    ("snapshot and promote", _snapshot),
    ("export segments", _export),
    ("dispatch and claim effect", _effect),
    ("schedule timer", _timer),
)


def _work(run: Run) -> None:
    """Every step; a crash restarts the "process", which redoes the step it was in."""
    for name, step in STEPS:
        for _ in range(STEP_ATTEMPTS):
            try:
                step(run)
                break
            except SimulatedCrash:
                run.restart()
        else:
            raise ConformanceFailure(f"step {name!r} crashed {STEP_ATTEMPTS} times in a row")


def logical_state(plane: Plane, u: UniverseId, w: WorldId) -> dict[str, Any]:
    """What a caller observes of world ``w``, with what legitimately differs between runs
    (inbox sequences, universe and world ids) replaced by positions and placeholders."""
    head = plane.head(u, w)
    inbox = plane.read_after(u, w, None, 100)
    position = {seq: i for i, (seq, _) in enumerate(inbox)}
    journal: list[tuple[int, str, object, str]] = []
    for height, entry in plane.read_range(u, w, 1, head + 1):
        record = decode_journal_record(entry)
        if isinstance(record, IngressJournalRecord):
            at = position.get(record.seq, str(record.seq))
            journal.append((height, "item", at, _digest(record.item)))
        else:
            journal.append(
                (height, "opaque" if record is None else str(record.KIND), None, _digest(entry))
            )
    cursor = plane.inbox_cursor(u, w)
    notify = kv.run(plane.engine, lambda tr: tr.get(WorldKeys(u, w).notify_counter()))

    def placeholders(key: str) -> str:
        return key.replace(str(u), "U").replace(str(w), "W")

    objects = [
        (placeholders(info.key), info.size)
        for prefix in (f"cas/{u}/", f"segments/{u}/")
        for info in plane.objects.list(prefix)
    ]
    return {
        "head": head,
        "journal": journal,
        "inbox": [_digest(encode_inbox_item(item)) for _, item in inbox],
        "cursor": None if cursor is None else position.get(cursor, str(cursor)),
        "notifications": int.from_bytes(notify or b"", "little"),
        "snapshots": plane.list_snapshots(u, w),
        "baseline": plane.active_baseline(u, w),
        "blobs": [
            _digest(plane.get(u, Hash.of(b"conformance small blob"))),
            _digest(plane.get(u, Hash.of(_large_body(plane)))),
        ],
        "objects": objects,
        "segments": [(s.start, s.end, s.entry_count) for s in plane.list_segments(u, w)],
        "export marker": read_marker(plane.engine, WorldKeys(u, w)),
        "pending effects": [(i.world == w, i.intent_hash) for _, i in plane.pending_effects(u)],
        "inflight effects": [
            (i.world == w, i.intent_hash, i.claimed_by) for _, i in plane.inflight_effects(u)
        ],
        "timers": [
            (t.world == w, t.intent_hash, t.deliver_at_ns) for t in plane.due_timers(u, 1 << 62)
        ],
    }


def _digest(data: bytes) -> str:
    """What the state keeps of bytes: enough of their sha256 to compare, none of the bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def _check_reference(state: dict[str, Any]) -> None:
    """The fault-free run itself must show the workload's effects exactly once."""
    items = [entry[2] for entry in state["journal"] if entry[1] == "item"]
    check(items == [0, 1, 2, 3], f"fault-free run journaled inbox positions {items}, not 0-3")
    check(state["head"] == SNAPSHOT_HEIGHT + 2, f"fault-free run ended at head {state['head']}")
    check(state["cursor"] == 4, f"fault-free run left the cursor at {state['cursor']}")
    check(
        state["notifications"] == 4,
        "fault-free run: four enqueue calls did not notify four times",
    )
    check(state["baseline"].height == SNAPSHOT_HEIGHT, "fault-free run did not promote at 7")
    check(state["segments"] == [(1, 3, 3), (4, 6, 3)], f"segments {state['segments']}")


def _difference(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    parts = []
    for name, value in expected.items():
        if actual.get(name) != value:
            parts.append(f"{name}: {_short(actual.get(name))}, fault-free {_short(value)}")
    return "; ".join(parts)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 240 else text[:240] + "..."


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


def commit_faults_and_crash_points(ctx: Context) -> None:
    """Faults 1: every commit failed with 1020, 1021 (applied and not) and 1007, and a crash
    at every crash point, then recovery by a new plane: exactly the fault-free state."""
    base = _wrappable(ctx.plane.engine)
    observer = Plane(base, ctx.plane.objects, ctx.plane.config, ctx.plane.segments)  # no faults

    def run_with(injector: FaultInjector, what: str) -> dict[str, Any]:
        engine = FaultyEngine(base, injector)
        universe, world = UniverseId.new(), WorldId.new()
        plane = type(ctx.plane)(
            engine, ctx.plane.objects, ctx.plane.config, ctx.plane.segments, hooks=injector
        )
        run = Run(engine, plane, universe, world)
        try:
            _work(run)
            return logical_state(observer, universe, world)
        except PersistError as exc:
            raise ConformanceFailure(f"{what}: {type(exc).__name__}: {exc}") from exc

    reference_injector = FaultInjector()
    reference = run_with(reference_injector, "fault-free run")
    _check_reference(reference)
    commits, points = reference_injector.commits, dict(reference_injector.points)
    runs = 1

    def expect(injector: FaultInjector, what: str, fired: object) -> None:
        state = run_with(injector, what)
        check(fired in injector.log, f"{what}: the fault was not injected ({injector.log})")
        difference = _difference(reference, state)
        check(not difference, f"{what}: {difference}")

    for label, code, applied in FAULTS:
        ctx.progress(f"faults: commit 1-{commits} failed with {label}")
        for index in range(1, commits + 1):
            injector = FaultInjector()
            injector.fail_commit(index, code, applied=applied)
            expect(
                injector, f"commit {index} failed with {label}", ("commit", (index, code, applied))
            )
            runs += 1
    for point, occurrences in sorted(points.items()):
        for occurrence in range(1, occurrences + 1):
            injector = FaultInjector()
            injector.crash_at(point, occurrence)
            expect(injector, f"crash at {point} #{occurrence}", ("crash", (point, occurrence)))
            runs += 1
    for seed in range(ctx.profile.fault_seeds):
        injector = FaultInjector(seed=seed, commit_fault_rate=0.25, crash_rate=0.1)
        state = run_with(injector, f"random faults, seed {seed}")
        difference = _difference(reference, state)
        check(not difference, f"random faults, seed {seed} ({injector.log}): {difference}")
        runs += 1
    ctx.notes["fault_matrix_commits_per_run"] = commits
    ctx.notes["fault_matrix_crash_points"] = sum(points.values())
    ctx.notes["fault_matrix_runs"] = runs
