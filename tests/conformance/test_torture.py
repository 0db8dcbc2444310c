"""The SIGKILL crash torture: a seeded run on SQLite and a local object store must find no
violation, and its checks must catch violations planted in an otherwise clean store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from conformance.cases import CaseSkipped, TortureSize
from conformance.torture.checks import check_pending, check_store
from conformance.torture.evidence import (
    AppendAck,
    DrainAck,
    Evidence,
    Log,
    SegmentAck,
    SnapshotAck,
    append_resume_point,
    log_name,
    state_at,
)
from conformance.torture.monitor import Monitor
from conformance.torture.run import run_torture
from conformance.torture.workload import (
    append_entry,
    call_size,
    call_world,
    check_shared_urls,
    idempotency_key,
    item,
)
from persistence import kv
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.records import InboxCursor
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.fdb_cluster import FdbCluster, clear_keyspace

SEED = 20_240_607


@pytest.mark.parametrize("kind", ["sqlite", "fdb"])
def test_seeded_torture_with_local_objects(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Six processes (3 writers, 2 drainers, 1 exporter) on 3 worlds, one killed every
    0.25 s on average for 18 s, restarted each time: every invariant holds, on SQLite and on
    a real FoundationDB cluster."""
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
        TortureSize(worlds=3, writers=3, drainers=2, seconds=18.0, mean_kill_interval=0.25),
        seed=SEED,
        directory=logs,
    )
    figures = report.figures
    assert not report.violations, "\n".join(report.violations[:20])
    print(kind, figures)  # the run's figures, for -s
    assert figures["kills"] >= 40
    assert min(figures["kills_writer"], figures["kills_drainer"], figures["kills_exporter"]) >= 3
    assert figures["writer_calls_interrupted"] >= 1  # a call repeated after a kill
    assert figures["items_acknowledged"] >= 1_000
    assert figures["items_journaled"] >= figures["items_acknowledged"]
    assert figures["promotions_acknowledged"] >= 10 and figures["segments"] >= 10
    assert figures["monitor_samples"] >= 100


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


def clean_store() -> Store:
    """Two writers' items in two worlds, drained, snapshotted, promoted and exported, with
    the evidence the torture's processes would have logged for it."""
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
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
        for segment in exporter.export_all(universe, world):
            evidence.segments.append(
                SegmentAck(index, segment.start, segment.end, segment.checksum)
            )
    return plane, universe, worlds, evidence


def violations_of(store: Store) -> list[str]:
    plane, universe, worlds, evidence = store
    return check_pending(plane, universe, worlds, evidence) + check_store(
        plane, universe, worlds, evidence
    )


def test_a_clean_store_has_no_violations() -> None:
    store = clean_store()
    assert store[3].segments and len(store[3].acked) == 24 and len(store[3].appended) == 6
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
    kv.run(plane.engine, lambda tr: tr.clear(keys.entry_chunk(height, 0, 1)))


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


PLANTED: list[tuple[Callable[[Store], None], str]] = [
    (duplicate_append, "duplicate: appended entry a1#0 at world 1"),
    (phantom_append, "phantom: appended entry a0#7"),
    (append_reported_at_another_height, "append: a0#1 was reported at world 0 height"),
    (appends_out_of_order, "order: world 0: appender 0's entry 3"),
    (snapshot_indexing_reported_twice, "2 calls reported indexing height"),
    (promotion_reported_but_not_journaled, "calls reported promoting height"),
    (duplicate_item, "duplicate: item w"),
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
    kv.run(plane.engine, lambda tr: tr.set(keys.inbox_cursor(), InboxCursor(first).to_cbor()))
    monitor.sample(0, worlds[0])
    assert any("cursor moved back" in v for v in monitor.violations), monitor.violations


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
