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
  another client (nine kinds of competing writer) commits before the retry; the run must
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
Compaction reads the time from a clock the workload sets (:data:`COMPACT_AT`, then one
window later).

Faults are injected by :class:`~backends.kv.faults.FaultyEngine`, so the case needs an engine
it can wrap without changing what is tested: the memory engine, or an engine that is already
a ``FaultyEngine`` (its inner engine is wrapped with the case's own injector). Other engines
are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from conformance.context import CaseSkipped, ConformanceFailure, Context, check, event
from persistence import fdb_errors, kv
from persistence.errors import Conflict, EngineError, NotFound, PersistError, WorldExists
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import encode_inbox_item, idempotency_entry
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.kv import Engine
from persistence.plane import DrainResult, Plane
from persistence.protocols import inbox as inbox_protocol
from persistence.protocols.compaction import InboxCompaction, read_marks
from persistence.protocols.export import read_marker
from persistence.records import EffectDispatchItem, EffectInFlightItem, TimerDueItem
from segments.export import ExportConfig, Exporter

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
    run.plane.put_verified(run.universe, _large_body(run.plane))


def _large_body(plane: Plane) -> bytes:
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


def _after_window(plane: Plane) -> int:
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
    ("compact inbox after the window", _compact(_after_window)),
    ("enqueue k1 again after the window", _enqueue_one(b"k1", 1)),
    ("snapshot and promote", _snapshot),
    ("export segments", _export),
    ("dispatch and claim effect", _effect),
    ("schedule timer", _timer),
    ("group append creating a second world", _group),
    ("enqueue k6 and k7 into both worlds", _enqueue_both),
    ("multi-world drain of both worlds", _drain_both),
)


# ---------------------------------------------------------------- competing writers


def _compete_append(other: Plane, u: UniverseId, w: WorldId) -> None:
    other.append_batch(u, w, other.head(u, w), [b"competitor"])


def _compete_drain(other: Plane, u: UniverseId, w: WorldId) -> None:
    other.drain_inbox_to_journal(u, w, max_items=1)


def _compete_enqueue(other: Plane, u: UniverseId, w: WorldId) -> None:
    other.enqueue(u, w, event(99, "competitor"))


def _compete_snapshot(other: Plane, u: UniverseId, w: WorldId) -> None:
    head = other.head(u, w)
    taken = {s.height for s in other.list_snapshots(u, w)}
    if head > other.active_baseline(u, w).height and head not in taken:
        other.snapshot_commit(
            u,
            w,
            b"competitor state at %d" % head,
            height=head,
            logical_time_ns=head,
            receipt_horizon_height=head,
            promote_baseline=True,
        )


def _compete_export(other: Plane, u: UniverseId, w: WorldId) -> None:
    Exporter(other, EXPORT).export_once(u, w)


def _compete_cursor(other: Plane, u: UniverseId, w: WorldId) -> None:
    cursor = other.inbox_cursor(u, w)
    following = other.read_after(u, w, cursor, 1)
    if following:
        other.commit_cursor(u, w, cursor, following[0][0])


def _compete_claim(other: Plane, u: UniverseId, w: WorldId) -> None:
    for seq, _ in other.pending_effects(u, 1):
        other.claim_effect(u, seq, "competitor")


def _compete_drain_worlds(other: Plane, u: UniverseId, w: WorldId) -> None:
    worlds = [w]
    with contextlib.suppress(NotFound):
        other.head(u, second_world(w))
        worlds.append(second_world(w))
    other.drain_worlds(u, worlds, max_items=1)


def _compete_compact(other: Plane, u: UniverseId, w: WorldId) -> None:
    later = _after_window(other)
    other.compact_inbox(u, w, max_items=1, now_ns=lambda: later)


COMPETITORS: Final[dict[str, Callable[[Plane, UniverseId, WorldId], None]]] = {
    "append": _compete_append,
    "drain": _compete_drain,
    "enqueue": _compete_enqueue,
    "snapshot and promotion": _compete_snapshot,
    "export step": _compete_export,
    "cursor commit": _compete_cursor,
    "effect claim": _compete_claim,
    "inbox compaction": _compete_compact,
    "multi-world drain": _compete_drain_worlds,
}
"""Other clients, each committing between an attempt of the workload's commit and its retry
(the interleaving mode): a plane without faults on the same engine, world and universe."""


def _competitor(kind: str, other: Plane, u: UniverseId, w: WorldId) -> Callable[[], None]:
    def compete() -> None:
        with contextlib.suppress(Conflict, NotFound):  # the same in both runs of a pair
            COMPETITORS[kind](other, u, w)

    return compete


def _normal(outcome: object, position: dict[InboxSeq, int]) -> object:
    """An outcome with what legitimately differs between runs (sequences) replaced by
    positions in the inbox."""
    if isinstance(outcome, InboxSeq):
        return ("seq", position.get(outcome, str(outcome)))
    if isinstance(outcome, list):
        return [_normal(item, position) for item in outcome]
    if isinstance(outcome, DrainResult):
        return ("drain", outcome.first_height, outcome.count, _normal(outcome.cursor, position))
    return outcome


def _work(run: Run) -> None:
    """Start a "process", then every step; a crash or an unknown outcome (1031) restarts the
    process, which redoes the step it was in."""
    running = False
    for name, step in STEPS:
        for _ in range(STEP_ATTEMPTS):
            try:
                if not running:
                    run.restart()
                    running = True
                step(run)
                break
            except SimulatedCrash:
                running = False
            except EngineError as exc:  # the outcome is unknown: check and redo, as a host
                if exc.code != fdb_errors.TRANSACTION_TIMED_OUT:
                    raise
                running = False
        else:
            raise ConformanceFailure(f"step {name!r} failed {STEP_ATTEMPTS} times in a row")


def _positions(
    plane: Plane, u: UniverseId, w: WorldId, reported: Iterable[InboxSeq]
) -> dict[InboxSeq, int]:
    """Each inbox sequence by its rank among those the world (and the second world) still
    shows -- items in the inbox, in the journal, the cursor, the consumed marks -- and those
    the run's calls reported (compaction removes consumed items, also ones skipped and never
    journaled)."""
    seqs = set(reported)
    for world in _worlds(plane, u, w).values():
        keys = WorldKeys(u, world)
        seqs.update(seq for seq, _ in plane.read_after(u, world, None, 100))
        for _, entry in plane.read_range(u, world, 1, plane.head(u, world)):
            record = decode_journal_record(entry)
            if isinstance(record, IngressJournalRecord):
                seqs.add(record.seq)
        cursor = plane.inbox_cursor(u, world)
        marks = kv.run(plane.engine, functools.partial(read_marks, keys=keys))
        seqs.update(seq for _, seq in marks)
        if cursor is not None:
            seqs.add(cursor)
    return {seq: i for i, seq in enumerate(sorted(seqs))}


def _worlds(plane: Plane, u: UniverseId, w: WorldId) -> dict[str, WorldId]:
    """The run's world and, once the group append created it, the second world."""
    worlds = {"W": w}
    with contextlib.suppress(NotFound):
        plane.head(u, second_world(w))
        worlds["W2"] = second_world(w)
    return worlds


def _seqs(outcome: object) -> Iterator[InboxSeq]:
    """The inbox sequences in a call's reported outcome."""
    if isinstance(outcome, InboxSeq):
        yield outcome
    elif isinstance(outcome, list):
        for item in outcome:
            yield from _seqs(item)
    elif isinstance(outcome, DrainResult) and outcome.cursor is not None:
        yield outcome.cursor


def logical_state(
    plane: Plane, u: UniverseId, w: WorldId, position: dict[InboxSeq, int]
) -> dict[str, Any]:
    """What a caller observes of world ``w``, with what legitimately differs between runs
    (inbox sequences, universe and world ids) replaced by ``position`` and placeholders."""
    keys = WorldKeys(u, w)
    second = second_world(w)
    head = plane.head(u, w)
    inbox = plane.read_after(u, w, None, 100)
    cursor = plane.inbox_cursor(u, w)
    notify = kv.run(plane.engine, lambda tr: tr.get(keys.notify_counter()))
    entries = kv.run(plane.engine, lambda tr: tr.get_range(*keys.inbox_idempotency_entries()))
    marks = kv.run(plane.engine, lambda tr: read_marks(tr, keys))

    def placeholders(key: str) -> str:
        return key.replace(str(u), "U").replace(str(w), "W").replace(str(second), "W2")

    objects = [
        (placeholders(info.key), info.size)
        for prefix in (f"cas/{u}/", f"segments/{u}/")
        for info in plane.objects.list(prefix)
    ]
    worlds = _worlds(plane, u, w)
    ready = set(
        drive(
            inbox_protocol.read_ready(plane.engine, UniverseKeys(u), *UniverseKeys(u).ready_range())
        )[0]
    )
    second_cursor = plane.inbox_cursor(u, second) if "W2" in worlds else None
    return {
        "head": head,
        "journal": _journal(plane, u, w, position),
        "second world": _journal(plane, u, second, position) if "W2" in worlds else None,
        "second world cursor": None if second_cursor is None else position[second_cursor],
        "pending without a ready mark": [
            label
            for label, world in worlds.items()
            if world not in ready and plane.read_after(u, world, plane.inbox_cursor(u, world), 1)
        ],
        "inbox": [(position[seq], _digest(encode_inbox_item(item))) for seq, item in inbox],
        "idempotency entries": sorted(
            (
                position.get(idempotency_entry(v, "idempotency entry")[0], str(v))
                for _, v in entries
            ),
            key=str,
        ),
        "consumed marks": [(at_ns - COMPACT_AT, position[seq]) for at_ns, seq in marks],
        "cursor": None if cursor is None else position[cursor],
        "notifications": int.from_bytes(notify or b"", "little"),
        "snapshots": plane.list_snapshots(u, w),
        "baseline": plane.active_baseline(u, w),
        "blobs": [
            _digest(plane.get(u, Hash.of(b"conformance small blob"))),
            _digest(plane.get(u, Hash.of(_large_body(plane)))),
        ],
        "objects": objects,
        "segments": [(s.start, s.end, s.entry_count) for s in plane.list_segments(u, w)],
        "export marker": drive(read_marker(plane.engine, WorldKeys(u, w))),
        "pending effects": [(i.world == w, i.intent_hash) for _, i in plane.pending_effects(u)],
        "inflight effects": [
            (i.world == w, i.intent_hash, i.claimed_by) for _, i in plane.inflight_effects(u)
        ],
        "timers": [
            (t.world == w, t.intent_hash, t.deliver_at_ns) for t in plane.due_timers(u, 1 << 62)
        ],
    }


def _journal(
    plane: Plane, u: UniverseId, w: WorldId, position: dict[InboxSeq, int]
) -> list[tuple[int, str, object, str]]:
    """World ``w``'s journal: each drained item by its position, other entries by kind."""
    journal: list[tuple[int, str, object, str]] = []
    for height, entry in plane.read_range(u, w, 1, plane.head(u, w)):
        record = decode_journal_record(entry)
        if isinstance(record, IngressJournalRecord):
            at = position.get(record.seq, str(record.seq))
            journal.append((height, "item", at, _digest(record.item)))
        else:
            journal.append(
                (height, "opaque" if record is None else str(record.KIND), None, _digest(entry))
            )
    return journal


def _digest(data: bytes) -> str:
    """What the state keeps of bytes: enough of their sha256 to compare, none of the bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def _check_reference(state: dict[str, Any]) -> None:
    """The fault-free run itself must show the workload's effects exactly once."""
    items = [entry[2] for entry in state["journal"] if entry[1] == "item"]
    check(
        items == [0, 1, 2, 3, 5, 6],
        f"fault-free run journaled inbox positions {items}, not 0-3, 5, 6",
    )
    check(state["head"] == SNAPSHOT_HEIGHT + 5, f"fault-free run ended at head {state['head']}")
    group = state["journal"][SNAPSHOT_HEIGHT + 2]
    second = state["second world"] or []
    check(
        group[3] == _digest(GROUP_ENTRIES[0])
        and [entry[1:3] for entry in second] == [("opaque", None), ("item", 7)]
        and second[0][3] == _digest(GROUP_ENTRIES[1]),
        f"fault-free run: the group append and the multi-world drain left {group} in the "
        f"world and {second} in the second world",
    )
    check(
        (state["cursor"], state["second world cursor"]) == (6, 7),
        f"fault-free run left the cursors at {state['cursor']}, {state['second world cursor']}",
    )
    check(
        state["notifications"] == 6,
        "fault-free run: six enqueue calls that stored items did not notify six times",
    )
    # Compaction removed the five consumed items and their entries; k1 retried after the
    # window is a new item (position 5), k4 retried inside it was not; k6 is position 6.
    check(
        [position for position, _ in state["inbox"]] == [5, 6],
        f"fault-free run left inbox positions {state['inbox']} after compaction, not [5, 6]",
    )
    check(
        state["idempotency entries"] == [5, 6],
        f"fault-free run left idempotency entries {state['idempotency entries']}, not [5, 6]",
    )
    check(
        state["consumed marks"] == [(0, 4)],
        f"fault-free run left consumed marks {state['consumed marks']}, not [(0, 4)]",
    )
    check(
        state["pending without a ready mark"] == [],
        f"fault-free run: {state['pending without a ready mark']} have items and no ready mark",
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
            _work(run)
            reported = [seq for _, outcome in run.outcomes for seq in _seqs(outcome)]
            position = _positions(observer, universe, world, reported)
            state = logical_state(observer, universe, world, position)
        except PersistError as exc:
            raise ConformanceFailure(f"{what}: {type(exc).__name__}: {exc}") from exc
        outcomes = [(name, _normal(outcome, position)) for name, outcome in run.outcomes]
        return Outcome(state, outcomes, injector)

    fault_free = run_with(_scripted(lambda _: None), "fault-free run")
    reference = fault_free.state
    _check_reference(reference)
    commits, points = fault_free.injector.commits, dict(fault_free.injector.points)
    runs = 1

    def expect(faults: Faults, what: str, fired: object) -> None:
        got = run_with(faults, what)
        check(fired in got.injector.log, f"{what}: the fault was not injected ({got.injector.log})")
        difference = _difference(reference, got.state)
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
    interleaved = _interleaving(ctx, observer, run_with, commits)
    for seed in range(ctx.profile.fault_seeds):
        got = run_with(_random(seed), f"random faults, seed {seed}")
        difference = _difference(reference, got.state)
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


def _interleaving(
    ctx: Context, observer: Plane, run_with: Callable[[Faults, str], Outcome], commits: int
) -> int:
    """The interleaving mode: for each commit of the workload and each competing writer,
    the commit fails with 1021 (applied, then not applied) while the competitor commits
    before the retry. Each such run must end in the state, and every call in it must report
    the outcome, of its fault-free twin: the same competitor committing right after the
    commit (applied), or a 1020 with the same competitor (not applied). The quick profile
    pairs each commit with one competitor kind in turn; the full profile with all nine."""
    kinds = list(COMPETITORS)
    runs = 0
    ctx.progress(f"faults: commit 1-{commits}, 1021 with a competing writer between the tries")
    for index in range(1, commits + 1):
        chosen = kinds if ctx.profile.fault_seeds else [kinds[index % len(kinds)]]
        for kind in chosen:
            for applied in (True, False):
                twin, faulty = _pair(index, kind, applied, observer)
                what = f"commit {index}: 1021 {'' if applied else 'not '}applied, {kind} between"
                expected = run_with(twin, f"{what} (fault-free twin)")
                got = run_with(faulty, what)
                difference = _difference(expected.state, got.state)
                check(not difference, f"{what}: {difference}")
                misreport = _first_difference(expected.outcomes, got.outcomes)
                check(not misreport, f"{what}: misreported outcome: {misreport}")
                runs += 2
    return runs


def _pair(index: int, kind: str, applied: bool, other: Plane) -> tuple[Faults, Faults]:
    """The faults of an interleaved run and of its fault-free twin."""

    def twin(u: UniverseId, w: WorldId) -> FaultInjector:
        injector = FaultInjector()
        compete = _competitor(kind, other, u, w)
        if applied:
            injector.after_commit(index, compete)
        else:  # not applied: the same as a plain conflict with the competitor in between
            injector.fail_commit(index, fdb_errors.NOT_COMMITTED, interleave=compete)
        return injector

    def faulty(u: UniverseId, w: WorldId) -> FaultInjector:
        injector = FaultInjector()
        compete = _competitor(kind, other, u, w)
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


def _first_difference(expected: list[tuple[str, object]], got: list[tuple[str, object]]) -> str:
    """The first call whose reported outcome differs ("" if none)."""
    for i, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            return f"call {i} {want[0]!r} reported {_short(have[1])}, twin {_short(want[1])}"
    if len(got) != len(expected):
        return f"{len(got)} calls reported, fault-free twin {len(expected)}"
    return ""
