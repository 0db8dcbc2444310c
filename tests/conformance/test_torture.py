"""The SIGKILL crash torture: a seeded run on SQLite and a local object store must find no
violation, and its checks must catch violations planted in an otherwise clean store."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from conformance.context import CaseSkipped, TortureSize
from conformance.torture.checks import InboxTally, check_pending, check_store, inbox_tally
from conformance.torture.evidence import (
    AckedCall,
    AppendAck,
    AttachmentAck,
    CompactionAck,
    DrainAck,
    Evidence,
    Log,
    RedoAck,
    SegmentAck,
    SnapshotAck,
    append_resume_point,
    attachment_resume_point,
    log_name,
    read_evidence,
    state_at,
    writer_history,
)
from conformance.torture.figures import compaction_due, orphan_collection_due
from conformance.torture.fleet import FORKS, Fleet, Process
from conformance.torture.killer import Killer
from conformance.torture.monitor import Monitor
from conformance.torture.orphan_checks import collect_orphans
from conformance.torture.reads import read_inbox
from conformance.torture.run import _await_commits_in_flight, run_torture, spread_worlds
from conformance.torture.worker import Attachments, PutSteps
from conformance.torture.workload import (
    ATTACHMENT_SIZES,
    ItemId,
    TortureConfig,
    append_entry,
    attachment,
    call_size,
    call_world,
    check_shared_urls,
    idempotency_key,
    item,
)
from persistence import kv
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxCursor
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane, PlaneConfig, cas_collection
from persistence.protocols.cas_bodies import object_key
from persistence.records import CasDoom, CasMeta
from persistence.workers.compactor import Compactor
from persistence.workers.drain_worker import Shard
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.fdb_cluster import FdbCluster, clear_keyspace

SEED = 20_240_607
TORTURE_FLOORS = (
    ("kills", 40),
    *((f"kills_{role}", 3) for role in ("writer", "drainer", "drainworker", "exporter")),
    ("kills_compactor", 3),
    ("drains_acknowledged_by_drain_workers", 20),
    ("multi_world_drains_acknowledged", 1),
    ("writer_calls_interrupted", 1),
    ("writer_redos_after_unknown_outcome", 1),
    ("items_acknowledged", 1_000),
    ("promotions_acknowledged", 3),
    ("monitor_samples", 20),
    ("writer_redos_of_acknowledged_calls", 50),
    ("compaction_items_reported", 500),
    ("orphan_passes", 5),
    ("attachments_acknowledged", 3),
    ("attachment_puts_stalled", 1),
)
"""What the seeded runs must reach (they go on past their length until they do)."""
SEQ = "00" * 12


@pytest.mark.parametrize(
    ("kind", "door"), [("sqlite", "blocking"), ("fdb", "blocking"), ("fdb", "asyncio")]
)
def test_seeded_torture_with_local_objects(
    kind: str, door: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Eleven processes (3 writers, an appender, 2 drainers, 2 drain workers, the exporter,
    a compactor) on 3 worlds, one killed every 0.25 s on average for 24 s, restarted each
    time: every invariant holds, on SQLite and on a real FoundationDB cluster, whose
    processes call it blocking or (the asyncio door) await every call from an event loop."""
    engine: kv.Engine
    if kind == "fdb":
        cluster: FdbCluster = request.getfixturevalue("fdb_cluster")
        engine = cluster.engine()
        clear_keyspace(engine)
        kv_url = cluster.url
    else:
        engine = SqliteEngine(tmp_path / "aos.db")
        kv_url = engine.url
    plane = open_plane(engine, LocalObjectStore(tmp_path / "objects"))
    logs = tmp_path / "logs"
    logs.mkdir()
    report = run_torture(
        plane,
        kv_url,
        plane.objects.url,
        TortureSize(
            worlds=3,
            writers=3,
            drainers=2,
            seconds=24.0,
            mean_kill_interval=0.25,
            floors=TORTURE_FLOORS,
            max_seconds=90.0,
        ),
        seed=SEED,
        directory=logs,
        door=door,
    )
    figures = report.figures
    assert not report.violations, "\n".join(report.violations[:20])
    assert figures["door"] == door
    print(kind, door, figures)  # the run's figures, for -s
    # The run went on past its 24 s until these were reached (a loaded machine is slower):
    # the drain workers (one per shard) found the worlds through the ready marks and drained
    # them, several worlds per transaction; calls were interrupted and redone; the exporter
    # promoted between its kills; orphan collection ran after compaction passes; the
    # exporter's fourth attachment put stalled until a collector took its body.
    assert figures["floors_unmet_at_the_cap"] == []
    for name, floor in TORTURE_FLOORS:
        assert figures[name] >= floor, name
    assert figures["items_journaled"] >= figures["items_acknowledged"]
    assert figures["segments"] >= 10
    # Compaction ran among them: it removed consumed items with their idempotency entries
    # while writers repeated acknowledged calls inside the window (each deduplicated).
    assert figures["compaction_due"] and figures["compaction_window_seconds"] == 16.0
    assert figures["idempotency_entries_compacted"] == figures["items_compacted"]
    assert figures["compaction_items_reported"] <= figures["items_compacted"]  # >= 500: a floor
    assert figures["oldest_redo_of_acknowledged_call_seconds"] >= 4.0  # a quarter window
    # Orphan collection ran among them, a pass after each compaction pass with a 1 s grace,
    # while the exporter put an external attachment per snapshot (the fourth put stalling
    # until a collector took its body): the checks found every acknowledged one readable as
    # its bytes, every CAS body readable, and the final clean pass nothing left collectable.
    # (What was collected depends on where the kills landed: figures, not floors.)
    assert figures["orphan_collection_due"] and figures["orphan_grace_seconds"] == 1.0
    assert figures["attachment_puts"] >= figures["attachments_acknowledged"]


def test_the_checks_wait_until_no_commit_of_a_killed_process_can_land(
    fdb_cluster: FdbCluster, tmp_path: Path
) -> None:
    """A killed process's commit may land after its death; the checks read the store only
    once the cluster's version is a whole MVCC window past the kill (on SQLite a commit
    lands in the process that asks: no wait)."""
    engine = fdb_cluster.engine()
    before = kv.run_sync(engine, lambda tr: tr.get_read_version().wait())
    assert _await_commits_in_flight(engine) == []
    after = kv.run_sync(engine, lambda tr: tr.get_read_version().wait())
    assert after - before > kv.MAX_TRANSACTION_SECONDS * 1_000_000  # 1007 for any older
    wrapped = FaultyEngine(engine, FaultInjector(seed=1))  # as the conformance suite runs it
    before = kv.run_sync(engine, lambda tr: tr.get_read_version().wait())
    assert _await_commits_in_flight(wrapped) == []
    after = kv.run_sync(engine, lambda tr: tr.get_read_version().wait())
    assert after - before > kv.MAX_TRANSACTION_SECONDS * 1_000_000
    sqlite = SqliteEngine(tmp_path / "kv.db")
    started = time.monotonic()
    assert _await_commits_in_flight(sqlite) == [] and time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("kv_url", "objects_url", "named"),
    [
        ("memory://", "file:///tmp/objects", "memory://"),
        ("sqlite:///tmp/aos.db", "memory://", "memory://"),
        ("memory+memory", "memory+memory", "memory+memory"),
    ],
)
def test_stores_inside_one_process_are_refused(kv_url: str, objects_url: str, named: str) -> None:
    with pytest.raises(CaseSkipped, match="several OS processes") as refused:
        check_shared_urls(kv_url, objects_url)
    assert named in str(refused.value)


# --------------------------------------------------------------------------- planted violations


Store = tuple[Plane, UniverseId, tuple[WorldId, ...], Evidence]


WINDOW = 60.0
"""The doctored stores' inbox window (seconds)."""
START_NS = 1_000 * 10**9
"""The compactor's clock at the first pass over a doctored store."""


def clean_store() -> Store:
    """Two writers' items in two worlds, drained, snapshotted, promoted and exported, the
    first drained items compacted (the others consumed but kept), with the evidence the
    torture's processes would have logged for it."""
    plane = open_plane(
        MemoryEngine(), MemoryObjectStore(), PlaneConfig(inbox_retention_seconds=WINDOW)
    )
    universe = UniverseId.new()
    worlds = (WorldId.new(), WorldId.new())
    for world in worlds:
        plane.create_world(universe, world)
    evidence = Evidence()
    for writer in range(2):
        n = 0
        while n < 12:
            numbers = range(n, n + call_size(n))
            target = call_world(writer, n, len(worlds))
            evidence.intents.update({(writer, i): target for i in numbers})
            evidence.first_tried.update({(writer, i): time.time() for i in numbers})
            seqs = plane.enqueue_batch(
                universe,
                worlds[target],
                [item(writer, i) for i in numbers],
                idempotency_keys=[idempotency_key(writer, i) for i in numbers],
            )
            evidence.acked.update(
                {(writer, i): (target, s) for i, s in zip(numbers, seqs, strict=True)}
            )
            n = numbers[-1] + 1
    for index, world in enumerate(worlds):  # consumed before the first compaction pass
        drained = plane.drain_inbox_to_journal(universe, world, max_items=3)
        assert drained.cursor is not None
        evidence.drains.append(
            DrainAck("drainer-0.0", index, drained.first_height, drained.count, drained.cursor)
        )
    compact(plane, universe, evidence, START_NS)  # marks the cursors
    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=4))
    for index, world in enumerate(worlds):
        for n in range(3):  # appender `index` writes straight to world `index`
            evidence.append_intents[(index, n)] = index
            first = plane.append_batch(
                universe, world, plane.head(universe, world), [append_entry(index, n)]
            )
            evidence.appended[(index, n)] = AppendAck(index, first, retried=False)
        while (result := plane.drain_inbox_to_journal(universe, world, max_items=3)).count:
            assert result.cursor is not None
            evidence.drains.append(
                DrainAck("drainer-0.0", index, result.first_height, result.count, result.cursor)
            )
        height = plane.head(universe, world)
        record, _ = plane.snapshot_commit(
            universe,
            world,
            state_at(plane, universe, world, height),
            height=height,
            logical_time_ns=height,
            receipt_horizon_height=height,
            promote_baseline=True,
        )
        evidence.snapshots.append(SnapshotAck(index, height, record.snapshot_ref, True, True))
        hash = plane.put_verified(universe, attachment(index, height))  # an external body
        evidence.attachments[(index, height)] = AttachmentAck(index, height, hash, 1, 0, False)
        for segment in exporter.export_all(universe, world):
            evidence.segments.append(
                SegmentAck(index, segment.start, segment.end, segment.checksum)
            )
    # One window after the marks: the first three items of each world go, the rest stay.
    compact(plane, universe, evidence, START_NS + round(WINDOW * 1e9))
    return plane, universe, worlds, evidence


def compact(plane: Plane, universe: UniverseId, evidence: Evidence, at_ns: int) -> None:
    """A compaction pass at ``at_ns`` on the compactor's clock, logged as a compactor would."""
    totals = Compactor(plane, max_items=2, now_ns=lambda: at_ns).run([universe])
    evidence.compactions.append(
        CompactionAck(
            "compactor-0.0",
            totals.transactions,
            totals.compaction.items,
            totals.compaction.idempotency_entries,
        )
    )


def violations_of(store: Store) -> list[str]:
    plane, universe, worlds, evidence = store
    return check_pending(plane, universe, worlds, evidence) + check_store(
        plane, universe, worlds, evidence
    )


def test_a_clean_store_has_no_violations() -> None:
    """Including the consumed items compaction removed, and those it kept."""
    store = clean_store()
    plane, universe, worlds, evidence = store
    assert evidence.segments and len(evidence.acked) == 24 and len(evidence.appended) == 6
    assert len(evidence.attachments) == 2
    for ack in evidence.attachments.values():
        assert plane.blob_meta(universe, ack.hash).object_key == object_key(universe, ack.hash)
    assert [c.items for c in evidence.compactions] == [0, 6]
    tally = inbox_tally(plane, universe, worlds)
    assert tally == InboxTally(items_journaled=24, items_removed=6, entries_removed=6)
    assert violations_of(store) == []


def _first_item_entry(plane: Plane, universe: UniverseId, world: WorldId) -> bytes:
    rows = plane.read_range(universe, world, 1, 1_000)
    return next(entry for _, entry in rows if b"TortureItem" in entry)


def duplicate_item(store: Store) -> None:
    plane, universe, worlds, _ = store
    head = plane.head(universe, worlds[0])
    plane.append_batch(universe, worlds[0], head, [_first_item_entry(plane, universe, worlds[0])])


def hole_in_hot_tail(store: Store) -> None:
    plane, universe, worlds, _ = store
    keys = WorldKeys(universe, worlds[1])
    height = plane.head(universe, worlds[1]) - 1  # the snapshot announcement, still hot
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.entry_chunk(height, 0, 1)))


def cursor_skips_an_acknowledged_item(store: Store) -> None:
    plane, universe, worlds, evidence = store
    seq = plane.enqueue(universe, worlds[0], item(0, 99), idempotency_key=idempotency_key(0, 99))
    evidence.intents[(0, 99)] = 0
    evidence.acked[(0, 99)] = (0, seq)
    plane.commit_cursor(universe, worlds[0], plane.inbox_cursor(universe, worlds[0]), seq)


def snapshot_of_another_state(store: Store) -> None:
    plane, universe, worlds, _ = store
    height = plane.head(universe, worlds[0])
    plane.snapshot_commit(
        universe,
        worlds[0],
        state_at(plane, universe, worlds[0], height - 1),  # one entry short
        height=height,
        logical_time_ns=height,
    )


def drain_acknowledged_but_not_journaled(store: Store) -> None:
    evidence = store[3]
    drain = evidence.drains[0]
    evidence.drains.append(replace(drain, first=drain.first + 100))


def segment_acknowledged_differently(store: Store) -> None:
    evidence = store[3]
    evidence.segments[0] = replace(evidence.segments[0], checksum=b"\x00" * 32)


def duplicate_append(store: Store) -> None:
    plane, universe, worlds, _ = store
    plane.append_batch(universe, worlds[1], plane.head(universe, worlds[1]), [append_entry(1, 0)])


def phantom_append(store: Store) -> None:
    plane, universe, worlds, _ = store
    plane.append_batch(universe, worlds[0], plane.head(universe, worlds[0]), [append_entry(0, 7)])


def append_reported_at_another_height(store: Store) -> None:
    evidence = store[3]
    ack = evidence.appended[(0, 1)]
    evidence.appended[(0, 1)] = replace(ack, first=ack.first + 1)


def appends_out_of_order(store: Store) -> None:
    plane, universe, worlds, evidence = store
    evidence.append_intents[(0, 3)] = evidence.append_intents[(0, 4)] = 0
    head = plane.head(universe, worlds[0])
    plane.append_batch(universe, worlds[0], head, [append_entry(0, 4), append_entry(0, 3)])


def snapshot_indexing_reported_twice(store: Store) -> None:
    evidence = store[3]
    evidence.snapshots.append(replace(evidence.snapshots[0], promoted=False))


def promotion_reported_but_not_journaled(store: Store) -> None:
    plane, universe, worlds, evidence = store
    height = plane.head(universe, worlds[1])
    record, _ = plane.snapshot_commit(
        universe,
        worlds[1],
        state_at(plane, universe, worlds[1], height),
        height=height,
        logical_time_ns=height,
    )  # indexed, not promoted
    evidence.snapshots.append(SnapshotAck(1, height, record.snapshot_ref, True, True))


def _pending(store: Store) -> tuple[WorldKeys, InboxSeq, bytes]:
    """A new acknowledged item pending in world 0: its world's keys, sequence and key."""
    plane, universe, worlds, evidence = store
    key = idempotency_key(0, 99)
    seq = plane.enqueue(universe, worlds[0], item(0, 99), idempotency_key=key)
    evidence.intents[(0, 99)] = 0
    evidence.acked[(0, 99)] = (0, seq)
    return WorldKeys(universe, worlds[0]), seq, key


def item_removed_above_the_cursor(store: Store) -> None:
    """As a compaction that ignored the cursor would: the item and its entry."""
    keys, seq, key = _pending(store)

    def remove(tr: kv.Transaction) -> None:
        tr.clear(keys.inbox_item(seq))
        tr.clear(keys.inbox_idempotency(key))

    kv.run_sync(store[0].engine, remove)


def entry_of_a_pending_item_removed(store: Store) -> None:
    keys, _, key = _pending(store)
    kv.run_sync(store[0].engine, lambda tr: tr.clear(keys.inbox_idempotency(key)))


def ready_mark_of_a_pending_world_removed(store: Store) -> None:
    """As a drain that cleared the mark blindly (not comparing it with what it read) could
    leave it."""
    keys, _, _ = _pending(store)
    kv.run_sync(store[0].engine, lambda tr: tr.clear(keys.ready()))


def ready_mark_left_after_the_final_drain(store: Store) -> None:
    """As a drain that never clears the mark would leave it."""
    plane, universe, worlds, _ = store
    keys = WorldKeys(universe, worlds[1])
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.ready(), b"\x00" * 10))


def _compacted_item(store: Store) -> tuple[ItemId, int]:
    """An acknowledged item compaction removed, and its world."""
    plane, universe, worlds, evidence = store
    left = {w: read_inbox(plane, universe, world).items for w, world in enumerate(worlds)}
    return next((k, w) for k, (w, seq) in sorted(evidence.acked.items()) if seq not in left[w])


def redo_inside_the_window_got_a_new_sequence(store: Store) -> None:
    """A writer repeats an acknowledged call a second after its first attempt, but its
    item and entry are gone (as if compacted before the window ended): a new item."""
    plane, universe, worlds, evidence = store
    (writer, n), world = _compacted_item(store)
    seq = plane.enqueue(
        universe, worlds[world], item(writer, n), idempotency_key=idempotency_key(writer, n)
    )
    now = time.time()
    evidence.first_tried[(writer, n)] = now - 1.0
    evidence.redos.append(RedoAck("writer-0.1", writer, world, ((n, seq),), now - 1.0, now, True))


def redo_later_than_the_window(store: Store) -> None:
    evidence = store[3]
    (writer, n), world = _compacted_item(store)
    seq = evidence.acked[(writer, n)][1]
    now = time.time()
    evidence.redos.append(
        RedoAck("writer-0.1", writer, world, ((n, seq),), now - WINDOW - 1, now, False)
    )


def compaction_reported_more_than_it_removed(store: Store) -> None:
    evidence = store[3]
    evidence.compactions[-1] = replace(evidence.compactions[-1], items=7)


def attachment_object_deleted(store: Store) -> None:
    """As a collector that ignored the metadata would: the body of an acknowledged put."""
    plane, universe, _, evidence = store
    plane.objects.delete(object_key(universe, evidence.attachments[min(evidence.attachments)].hash))


def attachment_acknowledged_with_another_hash(store: Store) -> None:
    evidence = store[3]
    first = min(evidence.attachments)
    evidence.attachments[first] = replace(evidence.attachments[first], hash=Hash.of(b"other"))


UNACKNOWLEDGED = b"U" * 30_000
"""An external body no process acknowledged (a put killed after its metadata commit)."""


def body_of_an_unacknowledged_put_deleted(store: Store) -> None:
    plane, universe, _, _ = store
    plane.objects.delete(object_key(universe, plane.put_verified(universe, UNACKNOWLEDGED)))


def segment_object_deleted(store: Store) -> None:
    plane, universe, worlds, _ = store
    plane.objects.delete(plane.list_segments(universe, worlds[0])[0].object_key)


def external_snapshot_body_deleted(store: Store) -> None:
    """The torture's snapshot bodies are inline; as if one were external and collected."""
    plane, universe, _, evidence = store
    ref = evidence.snapshots[0].ref
    meta = CasMeta(size=plane.blob_meta(universe, ref).size, object_key=object_key(universe, ref))
    kv.run_sync(
        plane.engine, lambda tr: tr.set(UniverseKeys(universe).cas_meta(ref), meta.to_cbor())
    )


PLANTED: list[tuple[Callable[[Store], None], str]] = [
    (attachment_object_deleted, "orphans: the acknowledged attachment of world 0"),
    (attachment_acknowledged_with_another_hash, "returned a hash that is not its bytes'"),
    (
        body_of_an_unacknowledged_put_deleted,
        f"orphans: the CAS body {Hash.of(UNACKNOWLEDGED).hex[:16]} is unreadable: CasBodyMissing",
    ),
    (segment_object_deleted, "journal: world 0: the stitched read failed: SegmentMissing"),
    (external_snapshot_body_deleted, "snapshot: world 0: replay failed: CasBodyMissing"),
    (item_removed_above_the_cursor, "removed: acknowledged item w0#99 (world 0"),
    (entry_of_a_pending_item_removed, "its idempotency entry b'torture/0/99' is gone"),
    (redo_inside_the_window_got_a_new_sequence, "dedup: writer-0.1's redo of w"),
    (redo_later_than_the_window, "beyond the run's 60 s window"),
    (compaction_reported_more_than_it_removed, "compaction: passes reported removing 7 items"),
    (duplicate_append, "duplicate: appended entry a1#0 at world 1"),
    (phantom_append, "phantom: appended entry a0#7"),
    (append_reported_at_another_height, "append: a0#1 was reported at world 0 height"),
    (appends_out_of_order, "order: world 0: appender 0's entry 3"),
    (snapshot_indexing_reported_twice, "2 calls reported indexing height"),
    (promotion_reported_but_not_journaled, "calls reported promoting height"),
    (duplicate_item, "duplicate: item w"),
    (ready_mark_of_a_pending_world_removed, "ready: world 0 has 1 items after its cursor"),
    (ready_mark_left_after_the_final_drain, "ready: world 1 is still marked ready"),
    (hole_in_hot_tail, "journal: world 1: the stitched read failed: MissingJournalEntry"),
    (cursor_skips_an_acknowledged_item, "lost: acknowledged item w0#99"),
    (snapshot_of_another_state, "differs from the replay of the journal"),
    (drain_acknowledged_but_not_journaled, "drain: drainer-0.0 acknowledged world 0"),
    (segment_acknowledged_differently, "not indexed as acknowledged"),
]


@pytest.mark.parametrize(
    ("doctor", "expected"), [pytest.param(d, e, id=d.__name__) for d, e in PLANTED]
)
def test_the_checks_catch_a_planted_violation(
    doctor: Callable[[Store], None], expected: str
) -> None:
    store = clean_store()
    doctor(store)
    violations = violations_of(store)
    assert any(expected in v for v in violations), violations


def test_the_monitor_catches_a_cursor_moving_back() -> None:
    plane, universe, worlds, _ = clean_store()
    monitor = Monitor(plane, universe, worlds)
    monitor.sample(0, worlds[0])
    first = plane.read_after(universe, worlds[0], None, 1)[0][0]
    keys = WorldKeys(universe, worlds[0])
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.inbox_cursor(), InboxCursor(first).to_cbor()))
    monitor.sample(0, worlds[0])
    assert any("cursor moved back" in v for v in monitor.violations), monitor.violations


def test_a_writer_resumes_at_its_first_unacknowledged_call(tmp_path: Path) -> None:
    """Its history: where to resume, when that call was first tried (two incarnations
    tried it), and when each acknowledged call's first attempt began."""
    for incarnation, lines in enumerate(
        [
            [{"intent": [0], "at": 10.0}, {"ack": [[0, SEQ]], "at": 10.5}],
            [{"intent": [1], "at": 11.0}, {"ack": [[1, SEQ]], "at": 11.5}],
            [{"intent": [2, 3, 4], "at": 12.0}],
            [{"intent": [2, 3, 4], "at": 13.0}],
        ]
    ):
        log = Log(tmp_path / log_name("writer", 0, incarnation))
        for line in lines:
            log.append({"writer": 0, "world": 1, **line})
    history = writer_history(tmp_path, 0)
    assert (history.resume, history.pending_since) == (2, 12.0)
    assert history.acked == [AckedCall(10.0, 1, (0,)), AckedCall(11.0, 1, (1,))]
    log.append({"writer": 0, "world": 1, "ack": [[2, SEQ], [3, SEQ], [4, SEQ]], "at": 14.0})
    log.append({"writer": 0, "world": 1, "redo": [[0, SEQ]], "at": 15.0})
    evidence = read_evidence(tmp_path)
    assert [(r.items[0][0], r.first_at, r.at, r.acknowledged) for r in evidence.redos] == [
        (2, 12.0, 14.0, False),  # the call two incarnations tried, acknowledged by the last
        (0, 10.0, 15.0, True),
    ]
    assert writer_history(tmp_path, 0).resume == 5


def test_compaction_is_due_one_window_and_two_mark_intervals_after_the_start() -> None:
    assert not compaction_due(13.9, 8.0)
    assert compaction_due(14.0, 8.0)


def test_an_appender_resumes_at_its_last_unknown_attempt(tmp_path: Path) -> None:
    """Twelve incarnations: the last attempt of the newest (``.11``, which sorts before
    ``.2`` as text) is the unknown one, whatever older files say."""
    for incarnation in range(12):
        log = Log(tmp_path / log_name("appender", 0, incarnation))
        n = incarnation
        log.append({"appender": 0, "world": 0, "intent": n, "head": 100 + n})
        log.append({"appender": 0, "world": 0, "appended": n, "first": 101 + n, "retried": False})
        log.append({"appender": 0, "world": 0, "intent": n + 1, "head": 200 + n})
    assert append_resume_point(tmp_path, 0) == (12, 211)
    Log(tmp_path / log_name("appender", 0, 12)).append(
        {"appender": 0, "world": 0, "appended": 12, "first": 212, "retried": True}
    )
    assert append_resume_point(tmp_path, 0) == (13, None)


def test_the_worlds_give_every_drain_worker_work() -> None:
    for count, shards in ((3, 2), (2, 2), (5, 3), (1, 2)):
        worlds = spread_worlds(count, shards)
        assert len(set(worlds)) == count
        covered = {s for s in range(shards) for w in worlds if Shard(s, shards).holds(w)}
        assert len(covered) == min(count, shards)


def test_compaction_and_orphan_collection_due() -> None:
    assert not orphan_collection_due(5.9, 1.0)
    assert orphan_collection_due(6.0, 1.0)


def test_attachments_are_external_and_the_same_in_every_incarnation() -> None:
    sizes = {len(attachment(w, h)) for w in range(3) for h in range(1, 200)}
    low, high = ATTACHMENT_SIZES
    assert PlaneConfig().inline_threshold < low <= min(sizes) < max(sizes) < high
    assert attachment(1, 7) == attachment(1, 7) != attachment(7, 1)


def test_an_exporter_puts_its_unacknowledged_attachment_again(tmp_path: Path) -> None:
    """The last attachment put without an ack (the process died after its intent) is put
    again by the next incarnation; one given up on a doom is not."""
    hash = Hash.of(b"x").hex
    first = Log(tmp_path / log_name("exporter", 0, 0))
    first.append({"attach": 0, "height": 5})
    first.append({"attached": 0, "height": 5, "hash": hash, "pins": 1, "waits": 0, "redo": False})
    first.append({"attach": 1, "height": 6})
    assert attachment_resume_point(tmp_path) == (1, 6)
    second = Log(tmp_path / log_name("exporter", 0, 1))
    second.append({"attach": 1, "height": 6})
    second.append({"attached": 1, "height": 6, "hash": hash, "pins": 2, "waits": 3, "redo": True})
    second.append({"attach": 2, "height": 9, "stall": True})
    stall = {"seconds": 1.25, "collected": True}
    second.append({"attachment_blocked": 2, "height": 9, "why": "waited", "stall": stall})
    assert attachment_resume_point(tmp_path) is None
    second.append({"orphans": {"collected": 1}, "segment_orphans": {"collected": 0}})
    evidence = read_evidence(tmp_path)
    assert sorted(evidence.attachments) == [(0, 5), (1, 6)]
    assert evidence.attachments[(1, 6)] == AttachmentAck(1, 6, Hash.parse(hash), 2, 3, True)
    assert (evidence.attachment_intents, evidence.attachments_interrupted) == (4, 1)
    assert evidence.attachments_blocked == evidence.attachment_stalls == 1
    assert evidence.stalls == [(1.25, True)]
    assert [p.cas for p in evidence.orphan_passes] == [{"collected": 1}]


def doom(plane: Plane, universe: UniverseId, hash: Hash, at_ns: int) -> UniverseKeys:
    """Doom ``hash`` as a collector does before it deletes the body (and then dies)."""
    keys = UniverseKeys(universe)
    kv.run_sync(
        plane.engine, lambda tr: tr.set(keys.cas_doom(hash), CasDoom(at_ns, b"t" * 16).to_cbor())
    )
    return keys


def test_an_attachment_put_gives_up_on_a_doom_whose_collector_is_gone(tmp_path: Path) -> None:
    """A doom whose collector died stands for its 300 s lease and a put of its body waits
    that long: the exporter gives the put up after its limit, logs it and goes on."""
    steps = PutSteps(limit=0.05)
    plane = open_plane(MemoryEngine(), MemoryObjectStore(), hooks=steps)
    universe = UniverseId.new()
    hash = Hash.of(attachment(0, 7))
    keys = doom(plane, universe, hash, plane.clock())
    config = TortureConfig(
        "sqlite:///unused", "file:///unused", universe, (WorldId.new(),), tmp_path, 0, WINDOW
    )
    log = Log(tmp_path / log_name("exporter", 0, 0))
    attachments = Attachments(plane, config, steps, log, stall_every=None)
    attachments.put(0, 7)
    assert attachments.pending is None and attachment_resume_point(tmp_path) is None
    assert steps.waits >= 2 and not plane.has(universe, hash)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.cas_doom(hash)))  # the lease taken over
    attachments.put(0, 7)
    evidence = read_evidence(tmp_path)
    assert evidence.attachments_blocked == 1
    assert evidence.attachments == {(0, 7): AttachmentAck(0, 7, hash, 1, 0, False)}


def test_the_final_collection_takes_what_killed_processes_left() -> None:
    """A put killed after its upload leaves a body and its pin: the final clean pass (the
    grace over) collects it. A collector killed after its decision leaves a doom: counted,
    its body left to the lease. The checks find nothing wrong after it."""
    store = clean_store()
    plane, universe, worlds, _ = store
    orphans = [attachment(0, 900), attachment(1, 900)]
    for data in orphans:
        injector = FaultInjector()
        injector.crash_at("cas.after_body")
        killed = Plane(plane.engine, plane.objects, plane.config, plane.segments, hooks=injector)
        with pytest.raises(SimulatedCrash):
            killed.put_verified(universe, data)
    doomed = Hash.of(orphans[1])
    doom(plane, universe, doomed, plane.clock())
    violations: list[str] = []
    tally = collect_orphans(plane, universe, worlds, 1.0, violations)
    assert violations == [] and tally is not None
    assert (tally.cas.collected, tally.cas.pins_expired, tally.cas.collecting) == (1, 2, 1)
    # the killed collector's doom stands (and the final pass's own, if kept while it settles)
    assert tally.cas.referenced == 2 and tally.dooms in (1, 2)
    assert plane.objects.stat(object_key(universe, Hash.of(orphans[0]))) is None
    assert plane.objects.stat(object_key(universe, doomed)) is not None
    assert violations_of(store) == []


def test_a_stalled_attachment_put_starts_over_after_a_collector_took_its_body(
    tmp_path: Path,
) -> None:
    """A stalling put (here the run's first) waits after its upload until a collector
    (here a thread collecting in a loop until it has collected a body, its clock past the
    grace, then clearing its doom as once it has settled) has expired its pin and collected
    its body; the put then finds its pin gone at its metadata commit, waits for the doom,
    pins again, uploads anew and commits: the body is stored, and the next put does not
    stall."""
    steps = PutSteps()
    plane = open_plane(MemoryEngine(), MemoryObjectStore(), hooks=steps)
    universe = UniverseId.new()
    config = TortureConfig(
        "sqlite:///unused", "file:///unused", universe, (WorldId.new(),), tmp_path, 0, WINDOW
    )
    log = Log(tmp_path / log_name("exporter", 0, 0))
    attachments = Attachments(plane, config, steps, log, stall_every=50, stall_first=0)
    keys = UniverseKeys(universe)
    done = threading.Event()
    collected = cas_collection.CasCollection()

    def later() -> int:
        return plane.clock() + 2 * 10**9  # every pin is older than the 1 s grace

    def collector() -> None:  # until it has collected a body
        nonlocal collected
        while not done.is_set() and not collected.collected:
            collected += cas_collection.collect(plane.engine, plane.objects, universe, later, 1.0)
        kv.run_sync(plane.engine, lambda tr: tr.clear(keys.cas_doom(Hash.of(attachment(0, 7)))))

    thread = threading.Thread(target=collector)
    thread.start()
    try:
        attachments.put(0, 7)
    finally:
        done.set()
        thread.join()
    attachments.put(0, 8)
    evidence = read_evidence(tmp_path)
    first, second = evidence.attachment_acks
    assert (first.pins, first.collected_while_stalled) == (2, True)
    assert first.stalled is not None
    assert (second.pins, second.stalled) == (1, None)
    assert evidence.attachment_stalls == 1
    assert collected.collected == 1  # its pin expired: swept, or cleared by the decision
    assert plane.get(universe, first.hash) == attachment(0, 7)


class _SleepersFleet(Fleet):
    """A fleet whose processes are real children, forked as the workers are, that sleep
    (never a worker)."""

    def start(self, role: str, ident: int, incarnation: int = 0) -> None:
        child = FORKS.Process(target=time.sleep, args=(600,))
        child.start()
        self.processes.append(Process(role, ident, incarnation, child))


def test_the_killer_spares_processes_that_have_not_opened_their_logs(tmp_path: Path) -> None:
    """A kill draws among every process, and falls only on one that has opened its log
    (past its start, before it opens the plane); a draw of one still starting is skipped
    and counted, never moved to another (the started ones are not killed more often)."""
    fleet = _SleepersFleet(tmp_path / "no-config.json", tmp_path)
    fleet.start("writer", 0)
    fleet.start("writer", 1)
    size = TortureSize(worlds=1, writers=2, drainers=0, seconds=1.0, mean_kill_interval=1.0)
    killer = Killer(fleet, None, size, random.Random(7), now=0.0)
    draws = 40
    try:
        starting = fleet.processes[0]
        for _ in range(draws):
            writer_1 = next(p for p in fleet.processes if p.ident == 1)
            (tmp_path / log_name("writer", 1, writer_1.incarnation)).touch()  # started
            assert [fleet.started(p) for p in fleet.processes] == [False, True]
            killer.act(killer.next_process_kill)
        assert starting in fleet.processes and starting.proc.exitcode is None  # never killed
        assert fleet.kills["writer"] + killer.process_kills_skipped == draws
        assert fleet.kills["writer"] > 0 and killer.process_kills_skipped > 0
        writer_1 = next(p for p in fleet.processes if p.ident == 1)
        assert writer_1.incarnation == fleet.kills["writer"]
    finally:
        fleet.kill_all()


class _UnusedServers:
    """Servers for a killer that is only asked when its first server kill falls (no
    cluster: nothing is killed)."""

    def healthy(self) -> bool:
        raise AssertionError("not asked")

    def kill(self, rng: random.Random) -> str:
        raise AssertionError("not asked")

    def restart(self) -> None:
        raise AssertionError("not asked")

    def recoveries(self, since: float) -> list[float] | None:
        raise AssertionError("not asked")


def test_the_first_server_kill_falls_within_the_first_interval(tmp_path: Path) -> None:
    """Whatever the seed, a run as long as ``server_kill_interval`` kills a server (an
    exponential first draw left one run in 400 of six intervals without any, reported as
    passed)."""
    fleet = _SleepersFleet(tmp_path / "no-config.json", tmp_path)
    size = TortureSize(1, 1, 0, 12.0, 0.5, server_kill_interval=2.0)
    firsts = [
        Killer(fleet, _UnusedServers(), size, random.Random(seed), now=100.0).next_server_event
        for seed in range(500)
    ]
    assert all(100.0 <= first <= 102.0 for first in firsts)
    assert Killer(fleet, None, size, random.Random(1), now=100.0).next_server_event == float("inf")
