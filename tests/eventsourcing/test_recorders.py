"""What the module promises beyond eventsourcing's own cases: one durable commit per insert
(a new aggregate, a known one, several with a tracking record), all or nothing, exactly once
under an unknown commit result, reads that agree with eventsourcing's reference recorder for
any versions (snapshots' skip), text ids, errors, subscriptions woken by another writer, and
the factory's configuration."""

from __future__ import annotations

import itertools
import logging
import queue
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cbor2
import pytest
from eventsourcing.application import Application
from eventsourcing.dcb.api import DCBAppendCondition, DCBEvent, DCBQuery, DCBQueryItem
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import (
    ConnectionPoolClosedError,
    DataError,
    IntegrityError,
    InternalError,
    Notification,
    OperationalError,
    StoredEvent,
    Tracking,
    WaitInterruptedError,
)
from eventsourcing.popo import POPOAggregateRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteDatastore
from eventsourcing.utils import Environment
from hypothesis import given, settings
from hypothesis import strategies as st

from aos_eventsourcing import (
    PlaneAggregateRecorder,
    PlaneApplicationRecorder,
    PlaneFactory,
    PlaneProcessRecorder,
    PlaneSnapshotRecorder,
    codec,
)
from aos_eventsourcing.codec import NAMESPACE, TEXT_IDS
from aos_eventsourcing.dcb import PlaneDCBRecorder
from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.kv.roundtrips import CountingEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane, PlaneConfig
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.fdb_cluster import FdbCluster, clear_keyspace


@dataclass
class Counted:
    """A plane over a fault-injecting wrapper that counts writing commits (and injects only
    what a test scripts), and a second plane on the same store: another client."""

    plane: Plane
    other: Plane
    injector: FaultInjector


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Counted]:
    inner: Engine
    second: Engine
    if request.param == "memory":
        inner = second = MemoryEngine()
    else:
        inner = SqliteEngine(tmp_path / "aos.db")
        second = SqliteEngine(tmp_path / "aos.db")
    injector = FaultInjector()
    objects = MemoryObjectStore()
    yield Counted(
        open_plane(FaultyEngine(inner, injector), objects), open_plane(second, objects), injector
    )
    inner.close()
    second.close()


MEMORY = {"AOSP_KV_URL": "memory://"}
"""The environment of a factory on a memory store, chosen as a user must choose it."""


def event(aggregate: uuid.UUID | str, version: int, topic: str = "topic") -> StoredEvent:
    return StoredEvent(aggregate, version, topic, f"{aggregate}@{version}".encode())


def commits(store: Counted, do: object) -> int:
    """How many writing commits ``do()`` made."""
    before = store.injector.commits
    assert callable(do)
    do()
    return store.injector.commits - before


# --------------------------------------------------------------------------- one commit


def test_a_new_aggregate_costs_one_durable_commit(store: Counted) -> None:
    recorder = PlaneApplicationRecorder(store.plane, UniverseId.new())
    for new in (uuid.uuid4(), uuid.uuid4(), uuid.uuid4()):
        assert commits(store, lambda new=new: recorder.insert_events([event(new, 1)])) == 1
    snapshots = PlaneAggregateRecorder(store.plane, UniverseId.new())
    assert commits(store, lambda: snapshots.insert_events([event(new, 7)])) == 1


def test_an_insert_into_a_known_aggregate_is_one_commit(store: Counted) -> None:
    universe = UniverseId.new()
    recorder = PlaneApplicationRecorder(store.plane, universe)
    aggregate = uuid.uuid4()
    recorder.insert_events([event(aggregate, 1)])
    assert commits(store, lambda: recorder.insert_events([event(aggregate, 2)])) == 1
    # a recorder that read the aggregate first (as a repository does before a save)
    reader = PlaneApplicationRecorder(store.plane, universe)
    assert len(reader.select_events(aggregate)) == 2
    assert commits(store, lambda: reader.insert_events([event(aggregate, 3)])) == 1
    # a recorder that never saw it: its first attempt expects a new aggregate, finds the
    # head moved (nothing committed), reads the version there, and appends
    blind = PlaneApplicationRecorder(store.plane, universe)
    assert commits(store, lambda: blind.insert_events([event(aggregate, 4)])) == 1
    assert [e.originator_version for e in blind.select_events(aggregate)] == [1, 2, 3, 4]


def test_several_aggregates_and_a_tracking_record_are_one_commit(store: Counted) -> None:
    recorder = PlaneProcessRecorder(store.plane, UniverseId.new())
    known = uuid.uuid4()
    recorder.insert_events([event(known, 1)])
    batch = [event(known, 2), event(uuid.uuid4(), 1), event(uuid.uuid4(), 0)]
    tracking = Tracking("upstream", 5)
    assert commits(store, lambda: recorder.insert_events(batch, tracking=tracking)) == 1
    assert recorder.max_tracking_id("upstream") == 5
    assert recorder.max_notification_id() == 4


# --------------------------------------------------------------------------- atomicity


def test_an_insert_is_all_or_nothing_across_aggregates(store: Counted) -> None:
    recorder = PlaneProcessRecorder(store.plane, UniverseId.new())
    taken = uuid.uuid4()
    recorder.insert_events([event(taken, 1)])
    fresh = uuid.uuid4()
    with pytest.raises(IntegrityError):
        recorder.insert_events([event(fresh, 1), event(taken, 1)], tracking=Tracking("up", 1))
    with pytest.raises(IntegrityError):  # the taken version is found by a recorder that
        other = PlaneProcessRecorder(store.other, recorder.universe)  # never saw it
        other.insert_events([event(fresh, 1), event(taken, 1)], tracking=Tracking("up", 1))
    assert recorder.select_events(fresh) == []
    assert recorder.max_notification_id() == 1
    assert recorder.max_tracking_id("up") is None
    with pytest.raises(IntegrityError):  # a duplicate within one call
        recorder.insert_events([event(fresh, 1), event(fresh, 1)])
    with pytest.raises(IntegrityError):  # a lower version after a higher one
        recorder.insert_events([event(taken, 3), event(taken, 2)])
    assert recorder.select_events(fresh) == []


def test_notification_ids_follow_the_callers_order(store: Counted) -> None:
    recorder = PlaneApplicationRecorder(store.plane, UniverseId.new())
    a, b = uuid.uuid4(), uuid.uuid4()
    ids = recorder.insert_events([event(a, 1), event(b, 1), event(a, 2)])
    # one world per aggregate: a's events take consecutive positions, b's follows them
    assert ids == [1, 3, 2]
    by_id = {n.id: (n.originator_id, n.originator_version) for n in _all(recorder)}
    assert by_id == {1: (a, 1), 2: (a, 2), 3: (b, 1)}


def test_a_stale_recorder_gets_integrity_error_for_a_taken_version(store: Counted) -> None:
    universe = UniverseId.new()
    first = PlaneApplicationRecorder(store.plane, universe)
    second = PlaneApplicationRecorder(store.other, universe)
    aggregate = uuid.uuid4()
    first.insert_events([event(aggregate, 1)])
    assert len(second.select_events(aggregate)) == 1
    first.insert_events([event(aggregate, 2)])
    with pytest.raises(IntegrityError):
        second.insert_events([event(aggregate, 2)])
    assert second.insert_events([event(aggregate, 3)]) == [3]  # above the head: appended
    assert [e.originator_version for e in first.select_events(aggregate)] == [1, 2, 3]


def test_an_unknown_commit_result_is_exactly_once(store: Counted) -> None:
    """The insert's commit is applied but reported as 1021, and another client inserts
    before the retry: the retry finds its call record and reports its own ids."""
    recorder = PlaneProcessRecorder(store.plane, UniverseId.new())
    competitor = PlaneApplicationRecorder(store.other, recorder.universe)
    rival = uuid.uuid4()

    def compete() -> None:
        competitor.insert_events([event(rival, 1), event(rival, 2)])

    store.injector.fail_commit(
        1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True, interleave=compete
    )
    mine = uuid.uuid4()
    ids = recorder.insert_events([event(mine, 1), event(mine, 2)], tracking=Tracking("up", 9))
    assert ids == [1, 2]
    assert [(n.id, n.originator_id) for n in _all(recorder)] == [
        (1, mine),
        (2, mine),
        (3, rival),
        (4, rival),
    ]
    assert recorder.max_tracking_id("up") == 9
    assert recorder.insert_events([event(mine, 3)]) == [5]  # the cache holds the right head


# --------------------------------------------------------------------------- snapshots


def test_a_snapshot_below_a_later_one_is_stored(store: Counted) -> None:
    """A snapshot taken at version 3 after one at 7 was refused as "version 3 is taken"
    (an untrue conflict a caller retries); eventsourcing's SQLite recorder stores it. Reads
    then give versions in order, as SQLite's do, by a recorder that wrote them and by one
    that knows nothing; a version that is taken is still ``IntegrityError``."""
    universe = UniverseId.new()
    recorder = PlaneAggregateRecorder(store.plane, universe)
    datastore = SQLiteDatastore(":memory:")
    reference = SQLiteAggregateRecorder(datastore, "stored_snapshots")
    reference.create_table()
    aggregate = uuid.uuid4()
    for versions in ([4], [7], [3], [1, 2], [9], [5, 8]):
        events = [event(aggregate, v) for v in versions]
        for side in (recorder, reference):
            side.insert_events(events)
    for taken in ([7], [3], [5], [6, 8], [2]):
        for side in (recorder, reference):
            with pytest.raises(IntegrityError):
                side.insert_events([event(aggregate, v) for v in taken])
        with pytest.raises(IntegrityError, match=f"version {taken[-1]} is taken"):
            PlaneAggregateRecorder(store.other, universe).insert_events(
                [event(aggregate, v) for v in taken]
            )
    fresh = PlaneAggregateRecorder(store.other, universe)
    fresh.insert_events([event(aggregate, 6)])
    reference.insert_events([event(aggregate, 6)])
    bounds = (None, 0, 2, 3, 6, 9, 10)
    for gt, lte, desc, limit in itertools.product(bounds, bounds, (False, True), (None, 1, 3)):
        expected = reference.select_events(aggregate, gt=gt, lte=lte, desc=desc, limit=limit)
        for side in (recorder, fresh, PlaneAggregateRecorder(store.other, universe)):
            got = side.select_events(aggregate, gt=gt, lte=lte, desc=desc, limit=limit)
            assert got == expected, (gt, lte, desc, limit)
    assert [e.originator_version for e in recorder.select_events(aggregate)] == list(range(1, 10))
    # heights hold 4 7 3 1 2 9 5 8 6: the longest run from height 1 at or below 7 goes cold
    assert recorder.set_cold_version(aggregate, 7) == 5
    datastore.close()


def test_events_below_the_aggregates_last_version_are_still_a_conflict(store: Counted) -> None:
    """Only the aggregate recorder (snapshots) stores lower versions: an application
    recorder's events are appended by eventsourcing in order, and one below the last is
    another writer's conflict."""
    recorder = PlaneApplicationRecorder(store.plane, UniverseId.new())
    aggregate = uuid.uuid4()
    recorder.insert_events([event(aggregate, 1), event(aggregate, 7)])
    with pytest.raises(IntegrityError, match="version 3 is taken"):
        recorder.insert_events([event(aggregate, 3)])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=3), min_size=1, max_size=12),
    st.data(),
)
def test_snapshots_in_any_order_read_as_a_sorted_store(
    inserts: list[list[int]], data: st.DataObject
) -> None:
    """Inserts of any versions, in any order, by two writers in turn: each is stored unless
    a version is taken (or repeats within the insert), and every read agrees with a sorted
    model of what was stored."""
    plane = open_plane("memory://", "memory://")
    universe = UniverseId.new()
    writers = [PlaneAggregateRecorder(plane, universe), PlaneAggregateRecorder(plane, universe)]
    aggregate = uuid.uuid4()
    stored: dict[int, StoredEvent] = {}
    for turn, versions in enumerate(inserts):
        events = [event(aggregate, v) for v in sorted(set(versions))]
        writer = writers[turn % 2]
        if any(e.originator_version in stored for e in events):
            with pytest.raises(IntegrityError):
                writer.insert_events(events)
        else:
            writer.insert_events(events)
            stored.update((e.originator_version, e) for e in events)
    readers = [*writers, PlaneAggregateRecorder(plane, universe)]
    for _ in range(data.draw(st.integers(1, 8))):
        gt, lte = (
            data.draw(st.none() | st.integers(-1, 31)),
            data.draw(st.none() | st.integers(-1, 31)),
        )
        desc, limit = data.draw(st.booleans()), data.draw(st.none() | st.integers(1, 4))
        expected = [
            stored[v]
            for v in sorted(stored, reverse=desc)
            if (gt is None or v > gt) and (lte is None or v <= lte)
        ][:limit]
        for reader in readers:
            got = reader.select_events(aggregate, gt=gt, lte=lte, desc=desc, limit=limit)
            assert got == expected, (gt, lte, desc, limit)


@pytest.mark.parametrize("engine", ["memory", "sqlite", "fdb"])
def test_an_application_takes_a_snapshot_below_a_later_one(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """``take_snapshot(id, version=3)`` after one at 7: stored, and a read at version 5
    starts from it."""
    if engine == "fdb":
        cluster: FdbCluster = request.getfixturevalue("fdb_cluster")
        clear_keyspace(cluster.engine())  # the session's cluster, as earlier tests left it
        kv = cluster.url
    else:
        kv = "memory://" if engine == "memory" else f"sqlite://{tmp_path}/aos.db"
    env = {
        "PERSISTENCE_MODULE": "aos_eventsourcing",
        "AOSP_KV_URL": kv,
        "AOSP_OBJECTS_URL": f"file://{tmp_path}/objects",
        "AOSP_UNIVERSE": str(UniverseId.new()),  # a universe of its own on a shared cluster
        "IS_SNAPSHOTTING_ENABLED": "y",
    }
    application = Application[uuid.UUID](env=env)
    account = Aggregate()
    for _ in range(8):
        account.trigger_event(Aggregate.Event)
    application.save(account)
    application.take_snapshot(account.id, version=7)
    application.take_snapshot(account.id, version=3)
    assert application.snapshots is not None
    snapshots = application.snapshots.get(account.id)
    assert [s.originator_version for s in snapshots] == [3, 7]
    latest = application.snapshots.get(account.id, desc=True, limit=1)
    assert [s.originator_version for s in latest] == [7]
    assert application.repository.get(account.id, version=5).version == 5
    assert application.repository.get(account.id).version == 9
    with pytest.raises(IntegrityError, match="version 3 is taken"):
        application.take_snapshot(account.id, version=3)
    application.close()


# --------------------------------------------------------------------------- reads


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """An aggregate's versions (contiguous or with gaps, from 0, 1 or 7) and the sizes of
    the inserts that record them."""
    start = draw(st.sampled_from([0, 1, 7]))
    steps = draw(st.lists(st.integers(1, 1 if draw(st.booleans()) else 4), max_size=25))
    versions = [start]
    for step in steps:
        versions.append(versions[-1] + step)
    sizes = []
    left = len(versions)
    while left:
        size = draw(st.integers(1, left))
        sizes.append(size)
        left -= size
    return versions, sizes


def bound(versions: list[int]) -> st.SearchStrategy[int | None]:
    """``gt`` or ``lte``: none, or at or next to one of ``versions``."""
    near = st.builds(lambda v, d: v + d, st.sampled_from(versions), st.integers(-1, 1))
    return st.none() | near


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_reads_agree_with_the_reference_recorder(
    history: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    versions, sizes = history
    plane = open_plane("memory://", "memory://")
    universe = UniverseId.new()
    writer = PlaneAggregateRecorder(plane, universe)
    reference = POPOAggregateRecorder()
    aggregate = uuid.uuid4()
    done = 0
    for size in sizes:
        events = [event(aggregate, v) for v in versions[done : done + size]]
        writer.insert_events(events)
        reference.insert_events(events)
        done += size
    cold = PlaneAggregateRecorder(plane, universe)  # knows nothing yet
    for _ in range(data.draw(st.integers(1, 8))):
        gt, lte = data.draw(bound(versions)), data.draw(bound(versions))
        desc, limit = data.draw(st.booleans()), data.draw(st.none() | st.integers(1, 6))
        expected = reference.select_events(aggregate, gt=gt, lte=lte, desc=desc, limit=limit)
        for recorder in (writer, cold):
            got = recorder.select_events(aggregate, gt=gt, lte=lte, desc=desc, limit=limit)
            assert got == expected, (gt, lte, desc, limit)


def test_cold_versions_go_to_segments_and_read_back(store: Counted) -> None:
    universe = UniverseId.new()
    recorder = PlaneAggregateRecorder(store.plane, universe)
    aggregate = uuid.uuid4()
    events = [event(aggregate, v) for v in (1, 3, 5, 9, 12)]  # versions that skip
    recorder.insert_events(events)
    assert recorder.set_cold_version(aggregate, 6) == 3  # version 5 is at height 3
    assert recorder.set_cold_version(aggregate, 2) == 3  # the horizon only rises
    Exporter(store.plane, ExportConfig(enabled=True)).export_all(universe, WorldId(aggregate))
    assert [(s.start, s.end) for s in store.plane.list_segments(universe, WorldId(aggregate))] == [
        (1, 3)
    ]
    reader = PlaneAggregateRecorder(store.other, universe)
    assert reader.select_events(aggregate) == events
    assert reader.select_events(aggregate, gt=1, lte=9, desc=True, limit=2) == events[3:1:-1]
    with pytest.raises(OperationalError):  # no such aggregate
        recorder.set_cold_version(uuid.uuid4(), 1)


def test_a_snapshot_lets_its_aggregates_older_events_go_cold(
    store: Counted, caplog: pytest.LogCaptureFixture
) -> None:
    universe = UniverseId.new()
    events = PlaneAggregateRecorder(store.plane, universe)
    snapshots_universe = UniverseId.new()
    snapshots = PlaneSnapshotRecorder(store.plane, snapshots_universe, events)
    aggregate, unknown = uuid.uuid4(), uuid.uuid4()
    events.insert_events([event(aggregate, v) for v in (1, 2, 4, 5, 7)])
    snapshots.insert_events([event(aggregate, 5, "snapshot")])  # at height 4
    assert events.set_cold_version(aggregate, 0) == 4
    # two snapshots of one aggregate and one of an aggregate with no events: the newest
    # counts, the other raises nothing and is stored
    snapshots.insert_events([event(aggregate, 6, "s"), event(aggregate, 7, "s"), event(unknown, 3)])
    assert events.set_cold_version(aggregate, 0) == 5
    assert [e.originator_version for e in snapshots.select_events(unknown)] == [3]
    # the snapshot comes first: a snapshot refused changes no horizon ...
    events.insert_events([event(aggregate, 8)])
    for refused in (
        StoredEvent(aggregate, 8, "s", "text, not bytes"),  # type: ignore[arg-type]
        event(aggregate, 7, "s"),  # a version taken
    ):
        with pytest.raises((DataError, IntegrityError)):
            snapshots.insert_events([refused])
        assert events.set_cold_version(aggregate, 0) == 5
    # ... and when the horizon cannot rise after it, the snapshot is stored and the failure
    # logged, not raised: the insert's outcome is what the caller learns
    store.injector.fail_commit(2, fdb_errors.IO_ERROR)  # the snapshot's, then the horizon's
    with caplog.at_level(logging.WARNING, logger="aos_eventsourcing.recorders"):
        snapshots.insert_events([event(aggregate, 8, "s")])
    assert "snapshot 8 stored, its events' cold horizon not raised" in caplog.text
    assert [e.originator_version for e in snapshots.select_events(aggregate)] == [5, 6, 7, 8]
    assert events.set_cold_version(aggregate, 0) == 5
    Exporter(store.plane, ExportConfig(enabled=True)).export_all(universe, WorldId(aggregate))
    assert [(s.start, s.end) for s in store.plane.list_segments(universe, WorldId(aggregate))] == [
        (1, 5)
    ]
    reader = PlaneAggregateRecorder(store.other, universe)
    assert [e.originator_version for e in reader.select_events(aggregate)] == [1, 2, 4, 5, 7, 8]
    assert [e.originator_version for e in reader.select_events(aggregate, gt=7)] == [8]


def test_text_ids_come_back_as_text(store: Counted) -> None:
    recorder = PlaneApplicationRecorder(store.plane, UniverseId.new())
    name = "order-17"
    recorder.insert_events([event(name, 1), event(name, 2)])
    assert recorder.select_events(name) == [event(name, 1), event(name, 2)]
    assert [n.originator_id for n in _all(recorder)] == [name, name]
    twin = uuid.uuid5(uuid.NAMESPACE_DNS, "x")  # a UUID and its text are two aggregates
    recorder.insert_events([event(twin, 1), event(str(twin), 1)])
    assert recorder.select_events(twin) == [event(twin, 1)]
    assert recorder.select_events(str(twin)) == [event(str(twin), 1)]


def test_an_entry_that_is_not_a_stored_event_is_internal_error_saying_where(
    store: Counted,
) -> None:
    """A journal entry another writer put in an aggregate's world (not one this module
    encoded) fails the read naming its height and world, or its log position."""
    universe = UniverseId.new()
    recorder = PlaneApplicationRecorder(store.plane, universe)
    aggregate = uuid.uuid4()
    recorder.insert_events([event(aggregate, 1)])
    world = WorldId(aggregate)
    store.plane.append_sequenced(universe, [(world, 1, [b"\xa0"])], [["other"]])
    with pytest.raises(InternalError, match=f"^entry 2 of world {world} is not a stored event"):
        recorder.select_events(aggregate)
    with pytest.raises(InternalError, match=r"^log position 2 is not a stored event"):
        recorder.select_notifications(1, 10)


@pytest.mark.parametrize(
    ("item", "entry"),
    [
        ([3, "t", b"s"], codec.Entry(3, "t", b"s", None)),
        ([3, "t", b"s", "id"], codec.Entry(3, "t", b"s", "id")),
        ([3, "t", b"s", "id", True], codec.Entry(3, "t", b"s", "id", True)),
        ([3, "t", b"s", None, True], codec.Entry(3, "t", b"s", None, True)),
    ],
)
def test_an_entry_of_each_shape_decodes_to_its_stored_event(
    item: list[object], entry: codec.Entry
) -> None:
    decoded = codec.decode(cbor2.dumps(item), "x")
    assert decoded == entry and type(decoded) is codec.Entry


@pytest.mark.parametrize(
    "item",
    [
        [3, "t"],
        [3, "t", b"s", "id", True, 1],
        [True, "t", b"s"],
        [3.0, "t", b"s"],
        [3, b"t", b"s"],
        [3, "t", "s"],
        [3, "t", b"s", None],  # no mark: a UUID id's entry has three fields
        [3, "t", b"s", 7],
        [3, "t", b"s", "id", False],
        [3, "t", b"s", "id", 1],
        [True, "t", b"s", "id"],  # each field's type, in the shapes with an id too
        [3, b"t", b"s", "id"],
        [3, "t", "s", "id"],
        [3.0, "t", b"s", None, True],
        [3, "t", b"s", 7, True],
        {"version": 3},
        "entry",
    ],
)
def test_anything_else_is_not_a_stored_event(item: object) -> None:
    raw = cbor2.dumps(item)
    with pytest.raises(InternalError, match=r"^entry 9 is not a stored event of this module$"):
        codec.decode(raw, "entry", 9)


def test_bytes_that_are_not_cbor_are_not_a_stored_event() -> None:
    for raw in (b"", b"\xff", b"\x83\x03"):  # empty, a break, an array cut short
        with pytest.raises(InternalError, match="is not a stored event"):
            codec.decode(raw, "x")


def test_a_reader_of_the_newest_events_reads_them_with_the_head_in_one_wave() -> None:
    """A snapshot lookup (``desc=True, limit=1``) and any newest-first read of at most
    ``ROWS_PER_READ`` (64) events is one transaction of two round trips, in a recorder that has
    seen the aggregate or not; and it reads what the recorder's paged reads read."""
    counting = CountingEngine(MemoryEngine())
    plane = Plane(counting, MemoryObjectStore())
    universe, aggregate = UniverseId.new(), uuid.uuid4()
    writer = PlaneAggregateRecorder(plane, universe)
    writer.insert_events([event(aggregate, v) for v in range(1, 21)])
    for recorder in (writer, PlaneAggregateRecorder(plane, universe)):  # warm, then cold
        for gt, limit in ((None, 1), (None, 5), (17, 5), (None, 25), (25, 3)):
            counting.tally.take()
            got = recorder.select_events(aggregate, desc=True, gt=gt, limit=limit)
            tally = counting.tally.take()
            assert (tally.transactions, tally.round_trips) == (1, 2), (gt, limit)
            versions = [v for v in range(20, 0, -1) if gt is None or v > gt][:limit]
            assert got == [event(aggregate, v) for v in versions]
    assert (
        PlaneAggregateRecorder(plane, universe).select_events(uuid.uuid4(), desc=True, limit=1)
        == []
    )


def test_each_event_keeps_its_own_id_within_one_insert(store: Counted) -> None:
    """Events run aggregate by aggregate in an insert, and the recorder groups them so; an
    id is still each event's own: a text id and the UUID it hashes to (one world, two ids)
    are told apart -- refused together, nothing written -- and ids of a UUID subclass whose
    equality cannot be trusted are two aggregates."""
    recorder = PlaneApplicationRecorder(store.plane, UniverseId.new())
    text = "x"
    hashed = uuid.uuid5(TEXT_IDS, text)
    with pytest.raises(IntegrityError, match="a text id and the UUID it hashes to"):
        recorder.insert_events([event(text, 1), event(hashed, 2), event(text, 3)])
    assert _all(recorder) == []

    class Agreeable(uuid.UUID):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = uuid.UUID.__hash__

    a, b = Agreeable(int=1), Agreeable(int=2)
    recorder.insert_events([event(a, 1), event(b, 1)])  # two aggregates, version 1 each
    assert recorder.select_events(uuid.UUID(int=2)) == [event(b, 1)]


def test_refused_input_is_eventsourcings_data_error(store: Counted) -> None:
    recorder = PlaneProcessRecorder(store.plane, UniverseId.new())
    aggregate = uuid.uuid4()
    for bad in (
        [event(aggregate, 1, topic="")],  # a log tag is 1 to 1,024 characters
        [event(aggregate, 1, topic="t" * 1025)],
        [StoredEvent(aggregate, 1, "topic", "text, not bytes")],  # type: ignore[arg-type]
        [StoredEvent(17, 1, "topic", b"")],  # type: ignore[arg-type]
    ):
        with pytest.raises(DataError):
            recorder.insert_events(bad)
    with pytest.raises(DataError):
        recorder.insert_tracking(Tracking("up", 0))  # notification ids start at 1
    assert recorder.max_notification_id() is None


# --------------------------------------------------------------------------- subscriptions


def _all(recorder: PlaneApplicationRecorder) -> list[Notification]:
    return list(recorder.select_notifications(None, 1000))


def test_a_subscription_wakes_for_another_writer_and_stops_at_once(store: Counted) -> None:
    universe = UniverseId.new()
    reader = PlaneApplicationRecorder(store.plane, universe)
    writer = PlaneApplicationRecorder(store.other, universe)
    before = uuid.uuid4()
    writer.insert_events([event(before, 1, "seen")])
    received: queue.Queue[Notification | None] = queue.Queue()
    subscription = reader.subscribe(gt=None, topics=["seen"])

    def consume() -> None:
        with subscription:
            for notification in subscription:
                received.put(notification)
        received.put(None)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert received.get(timeout=30).originator_id == before  # type: ignore[union-attr]
    aggregate = uuid.uuid4()
    writer.insert_events([event(aggregate, 1, "skipped"), event(aggregate, 2, "seen")])
    writer.insert_events([event(aggregate, 3, "seen")])
    got = [received.get(timeout=30), received.get(timeout=30)]
    assert [(n.id, n.originator_version) for n in got if n] == [(3, 2), (4, 3)]
    subscription.stop()  # from another thread, while the consumer blocks
    consumer.join(timeout=30)
    assert not consumer.is_alive()
    assert received.get(timeout=30) is None


def test_wait_is_woken_by_another_writers_tracking_record(
    store: Counted, monkeypatch: pytest.MonkeyPatch
) -> None:
    universe = UniverseId.new()
    waiting = PlaneProcessRecorder(store.plane, universe)
    writer = PlaneProcessRecorder(store.other, universe)
    waits: list[int] = []
    wait_tracking = store.plane.wait_tracking

    def spy(*args: object, **kwargs: object) -> int | None:
        waits.append(1)
        return wait_tracking(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.plane, "wait_tracking", spy)
    done: queue.Queue[BaseException | None] = queue.Queue()

    def wait() -> None:
        try:
            waiting.wait("upstream", 5, timeout=60.0)
            done.put(None)
        except BaseException as exc:  # handed to the test's thread
            done.put(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    writer.insert_tracking(Tracking("upstream", 3))
    writer.insert_tracking(Tracking("upstream", 5))
    assert done.get(timeout=30) is None  # returned, not the 60 s TimeoutError
    waiter.join(timeout=30)
    assert waits  # through the plane's change notification, not eventsourcing's polling
    with pytest.raises(TimeoutError, match="notification 6 from application 'upstream'"):
        waiting.wait("upstream", 6, timeout=0.05)
    with pytest.raises(TimeoutError):
        waiting.wait("upstream", 6, timeout=-1.0)  # one look, then the timeout
    interrupt = threading.Event()
    interrupt.set()
    with pytest.raises(WaitInterruptedError):
        waiting.wait("upstream", 6, timeout=60.0, interrupt=interrupt)
    waiting.wait("upstream", 5, interrupt=interrupt)  # already there: no error
    with pytest.raises(DataError, match="timeout"):
        waiting.wait("upstream", 6, timeout=float("nan"))


# --------------------------------------------------------------------------- the factory


def test_the_universe_comes_from_the_application_name_or_the_environment() -> None:
    factory = PlaneFactory(Environment("Bank", MEMORY))
    named = UniverseId(uuid.uuid5(NAMESPACE, "Bank"))
    assert factory.universe() == named
    assert factory.universe("snapshots") == UniverseId(uuid.uuid5(named.uuid, "snapshots"))
    chosen = UniverseId.new()
    for env in ({"BANK_AOSP_UNIVERSE": str(chosen)}, {"AOSP_UNIVERSE": str(chosen)}):
        assert PlaneFactory(Environment("Bank", {**MEMORY, **env})).universe() == chosen
    other = PlaneFactory(Environment("Bank", {**MEMORY, "AOSP_UNIVERSE": "not-a-uuid"}))
    with pytest.raises(OSError, match="AOSP_UNIVERSE"):
        other.universe()


def test_cold_at_snapshots_selects_the_snapshot_recorder() -> None:
    for value, cold in (("y", True), ("TRUE", True), ("0", False)):
        env = {**MEMORY, "AOSP_COLD_AT_SNAPSHOTS": value}
        factory = PlaneFactory(Environment("Bank", env))
        snapshots = factory.aggregate_recorder("snapshots")
        assert isinstance(snapshots, PlaneSnapshotRecorder) is cold
        assert not isinstance(factory.aggregate_recorder(), PlaneSnapshotRecorder)
        factory.close()
    with pytest.raises(OSError, match="AOSP_COLD_AT_SNAPSHOTS='maybe'"):
        PlaneFactory(Environment("Bank", {**MEMORY, "AOSP_COLD_AT_SNAPSHOTS": "maybe"}))


def test_log_sequencing_is_the_planes_setting() -> None:
    """``AOSP_LOG_SEQUENCING`` (the application's own variable first) becomes the plane's
    ``log_sequencing``; unset it is ``adaptive``; anything else is refused naming it. The
    DCB recorder's plane sequences inline."""
    for env, mode in (
        ({}, "adaptive"),
        ({"AOSP_LOG_SEQUENCING": "queued"}, "queued"),
        ({"AOSP_LOG_SEQUENCING": "queued", "BANK_AOSP_LOG_SEQUENCING": "inline"}, "inline"),
    ):
        factory = PlaneFactory(Environment("Bank", {**MEMORY, **env}))
        recorder = factory.application_recorder()
        assert recorder.plane.config.log_sequencing == mode
        # a DCB store serializes on its world's head: its log records never queue
        assert factory.dcb_recorder().plane.config.log_sequencing == "inline"
        factory.close()
    with pytest.raises(OSError, match="AOSP_LOG_SEQUENCING='sometimes'"):
        PlaneFactory(Environment("Bank", {**MEMORY, "AOSP_LOG_SEQUENCING": "sometimes"}))


def test_the_factory_opens_the_store_at_the_first_recorder_and_closes_it(tmp_path: Path) -> None:
    env = {"AOSP_KV_URL": f"sqlite://{tmp_path}/aos.db", "AOSP_OBJECTS_URL": f"file://{tmp_path}/o"}
    factory = PlaneFactory(Environment("Bank", env))
    factory.mapper()
    assert not (tmp_path / "aos.db").exists()
    recorder = factory.application_recorder()
    assert (tmp_path / "aos.db").is_file()
    assert recorder.insert_events([event(uuid.uuid4(), 1)]) == [1]
    factory.close()
    again = PlaneFactory(Environment("Bank", env))
    assert again.application_recorder().max_notification_id() == 1
    again.close()
    bad = PlaneFactory(
        Environment("Bank", {"AOSP_KV_URL": "nosuch://x", "AOSP_OBJECTS_URL": "memory://"})
    )
    with pytest.raises(OSError, match="AOSP_KV_URL"):
        bad.application_recorder()


def test_create_table_false_opens_only_an_existing_store(tmp_path: Path) -> None:
    """eventsourcing's ``CREATE_TABLE`` was ignored: false now opens only an existing
    store and creates nothing (an ``OSError`` naming it if the store is missing)."""
    env = {"AOSP_KV_URL": f"sqlite://{tmp_path}/aos.db", "AOSP_OBJECTS_URL": f"file://{tmp_path}/o"}
    for value in ("n", "false", "0"):
        factory = PlaneFactory(Environment("Bank", {**env, "CREATE_TABLE": value}))
        with pytest.raises(OSError, match=r"^CREATE_TABLE=false: the store does not exist"):
            factory.application_recorder()
        assert not (tmp_path / "aos.db").exists()
        assert not (tmp_path / "o").exists()
    created = PlaneFactory(Environment("Bank", {**env, "CREATE_TABLE": "y"}))
    assert created.application_recorder().insert_events([event(uuid.uuid4(), 1)]) == [1]
    created.close()
    existing = PlaneFactory(Environment("Bank", {**env, "BANK_CREATE_TABLE": "no"}))
    recorder = existing.application_recorder()
    assert recorder.insert_events([event(uuid.uuid4(), 1)]) == [2]
    existing.close()
    with pytest.raises(OSError, match=r"^CREATE_TABLE='n': AOSP_KV_URL='memory://' is a new"):
        PlaneFactory(Environment("Bank", {**MEMORY, "CREATE_TABLE": "n"}))
    with pytest.raises(OSError, match=r"^CREATE_TABLE='maybe': not a yes or no"):
        PlaneFactory(Environment("Bank", {**env, "CREATE_TABLE": "maybe"}))


def test_originator_id_type_is_checked_and_both_kinds_of_id_work(tmp_path: Path) -> None:
    """``ORIGINATOR_ID_TYPE`` was ignored, whatever its value: it is checked as
    eventsourcing's SQLite module checks it; either way both kinds of id are stored."""
    for value in ("uuid", "text", "TEXT", ""):
        env = {**MEMORY, "ORIGINATOR_ID_TYPE": value}
        recorder = PlaneFactory(Environment("Bank", env)).application_recorder()
        recorder.insert_events([event("account-1", 1), event(uuid.uuid4(), 1)])
        assert [e.originator_id for e in recorder.select_events("account-1")] == ["account-1"]
    with pytest.raises(OSError, match=r"^ORIGINATOR_ID_TYPE='int': must be 'uuid' or 'text'"):
        PlaneFactory(Environment("Bank", {**MEMORY, "ORIGINATOR_ID_TYPE": "int"}))


def test_sqlite_lock_timeout_is_the_stores_busy_timeout(tmp_path: Path) -> None:
    """``SQLITE_LOCK_TIMEOUT`` was ignored: on an SQLite store it is the engine's
    ``busy_timeout``; anywhere else, or against the URL's own, it is refused naming it."""
    url = f"sqlite://{tmp_path}/aos.db"
    for kv, timeout in (
        (url, "7"),
        (f"{url}?synchronous=FULL", " 7 "),
        (f"{url}?busy_timeout=7", "7"),
    ):
        env = {
            "AOSP_KV_URL": kv,
            "AOSP_OBJECTS_URL": "memory://",
            "BANK_SQLITE_LOCK_TIMEOUT": timeout,
        }
        factory = PlaneFactory(Environment("Bank", env))
        assert isinstance(factory.plane.engine, SqliteEngine)
        assert factory.plane.engine.busy_timeout == 7.0
        factory.close()
    refusals = (
        (url, "1.5", "not a whole number of seconds"),
        (url, "-1", "not a whole number of seconds"),
        (f"{url}?busy_timeout=60", "7", "gives another busy_timeout"),
        ("memory://", "7", "applies to an SQLite store only, and AOSP_KV_URL is 'memory://'"),
    )
    for kv, timeout, problem in refusals:
        env = {"AOSP_KV_URL": kv, "AOSP_OBJECTS_URL": "memory://", "SQLITE_LOCK_TIMEOUT": timeout}
        with pytest.raises(
            OSError,
            match=re.escape(f"SQLITE_LOCK_TIMEOUT={timeout!r}: ") + f".*{re.escape(problem)}",
        ):
            PlaneFactory(Environment("Bank", env))
    assert PlaneFactory(Environment("Bank", {**MEMORY, "SQLITE_LOCK_TIMEOUT": ""})).kv_url == (
        "memory://"
    )


# --------------------------------------------------------------------------- careless callers


@pytest.mark.parametrize("env", [{}, {"AOSP_OBJECTS_URL": "memory://"}, {"OTHER_AOSP_KV_URL": "x"}])
def test_a_missing_kv_url_is_refused_naming_it(env: dict[str, str]) -> None:
    """Unset, ``AOSP_KV_URL`` once meant ``memory://``: an application that forgot it lost
    everything at exit. As eventsourcing's SQLite module refuses a missing
    ``SQLITE_DBNAME``, the factory refuses, naming the keys it read and how to ask for a
    memory store deliberately."""
    with pytest.raises(OSError, match=r"^AOSP_KV_URL not set \(looked for BANK_AOSP_KV_URL, "):
        PlaneFactory(Environment("Bank", env))
    with pytest.raises(OSError, match="or to memory:// for an in-memory store"):
        PlaneFactory(Environment("Bank", env))
    assert PlaneFactory(Environment("Bank", {"BANK_AOSP_KV_URL": "memory://"})).kv_url == (
        "memory://"
    )


def test_a_durable_engine_without_an_object_store_is_refused(tmp_path: Path) -> None:
    """Beside a durable engine an unset ``AOSP_OBJECTS_URL`` once meant ``memory://``: the
    large bodies and cold segments of a SQLite store were lost at exit. Now it is refused,
    naming it; beside a memory engine the memory store is still the default."""
    durable = {"AOSP_KV_URL": f"sqlite://{tmp_path}/aos.db"}
    with pytest.raises(OSError, match=r"^AOSP_OBJECTS_URL not set \(looked for BANK_AOSP_"):
        PlaneFactory(Environment("Bank", durable))
    assert not (tmp_path / "aos.db").exists()  # refused before anything was created
    memory = PlaneFactory(Environment("Bank", {"AOSP_KV_URL": "memory://"}))
    assert memory.objects_url == "memory://"
    given = {**durable, "BANK_AOSP_OBJECTS_URL": f"file://{tmp_path}/objects"}
    assert PlaneFactory(Environment("Bank", given)).objects_url == f"file://{tmp_path}/objects"


@pytest.mark.parametrize("prefix", ["BANK_", ""])
@pytest.mark.parametrize(
    "variable",
    [
        "AOSP_KV_URL",
        "AOSP_OBJECTS_URL",
        "AOSP_UNIVERSE",
        "AOSP_COLD_AT_SNAPSHOTS",
        "AOSP_LOG_SEQUENCING",
    ],
)
@pytest.mark.parametrize("value", ["", "  ", " memory://", "y "])
def test_a_setting_set_empty_or_padded_is_refused_naming_it(
    tmp_path: Path, prefix: str, variable: str, value: str
) -> None:
    """An empty value must not mean the default: for ``AOSP_KV_URL`` that is ``memory://``,
    and everything the application saved would be gone at exit. The application's own
    variable wins over the plain one, even empty."""
    env = {
        "AOSP_KV_URL": f"sqlite://{tmp_path}/aos.db",
        "AOSP_OBJECTS_URL": f"file://{tmp_path}/objects",
        "AOSP_UNIVERSE": str(UniverseId.new()),
        prefix + variable: value,
    }
    with pytest.raises(OSError, match=f"^{prefix}{variable}={value!r}: "):
        PlaneFactory(Environment("Bank", env)).universe()
    assert not (tmp_path / "aos.db").exists()


def test_read_bounds_beyond_any_read_limit_select_what_they_bound(store: Counted) -> None:
    recorder = PlaneAggregateRecorder(store.plane, UniverseId.new())
    reference = POPOAggregateRecorder()
    aggregate = uuid.uuid4()
    events = [event(aggregate, v) for v in (1, 2, 3, 2**40, 2**40 + 9)]
    for side in (recorder, reference):
        side.insert_events(events)
    for gt, lte in ((None, 2**31), (None, 2**63 - 1), (-(2**63), 2**40 + 5), (2, 2**64)):
        for desc in (False, True):
            expected = reference.select_events(aggregate, gt=gt, lte=lte, desc=desc)
            assert recorder.select_events(aggregate, gt=gt, lte=lte, desc=desc) == expected
            fresh = PlaneAggregateRecorder(store.other, recorder.universe)  # knows nothing
            assert fresh.select_events(aggregate, gt=gt, lte=lte, desc=desc) == expected


def test_mistyped_read_arguments_are_data_errors(store: Counted) -> None:
    recorder = PlaneApplicationRecorder(store.plane, UniverseId.new())
    aggregate = uuid.uuid4()
    recorder.insert_events([event(aggregate, 1)])
    for kwargs in ({"gt": "0"}, {"lte": "5"}, {"limit": "1"}, {"gt": 1.0}, {"lte": True}):
        with pytest.raises(DataError, match=f"^{next(iter(kwargs))} must be an int"):
            recorder.select_events(aggregate, **kwargs)
    for args, name in ((("1", 10), "start"), ((1, None), "limit"), ((1, 10, "9"), "stop")):
        with pytest.raises(DataError, match=f"^{name} must be an int"):
            recorder.select_notifications(*args)
    lone = "acct-\ud800"  # a lone surrogate: no UTF-8 encoding
    with pytest.raises(DataError, match=r"originator_id 'acct-.ud800' is not encodable"):
        recorder.insert_events([StoredEvent(lone, 1, "topic", b"")])
    with pytest.raises(DataError, match="originator_id"):
        recorder.select_events(lone)
    factory = PlaneFactory(Environment("Bank", MEMORY))
    with pytest.raises(DataError, match="purpose"):
        factory.aggregate_recorder("\udc80")
    factory.close()
    assert recorder.max_notification_id() == 1


def test_a_mistyped_cold_version_is_refused_before_the_horizon_moves(store: Counted) -> None:
    recorder = PlaneAggregateRecorder(store.plane, UniverseId.new())
    aggregate = uuid.uuid4()
    recorder.insert_events([event(aggregate, v) for v in (1, 2, 3)])
    for bad in (None, "2", 2.5, True):  # None once meant "no bound": the whole journal
        with pytest.raises(DataError, match=r"^version must be an int"):
            recorder.set_cold_version(aggregate, bad)  # type: ignore[arg-type]
    assert recorder.set_cold_version(aggregate, 0) == 0


def test_a_text_id_and_the_uuid_it_hashes_to_do_not_share_a_journal(store: Counted) -> None:
    """Both map to one world; whichever appends first owns it. The other is refused on
    insert (by a recorder that knows the world and by one that does not), reads as having
    no events, and cannot move the owner's cold horizon."""
    universe = UniverseId.new()
    recorder = PlaneApplicationRecorder(store.plane, universe)
    text = "account-42"
    twin = uuid.uuid5(TEXT_IDS, text)
    recorder.insert_events([event(text, 1), event(text, 2)])
    fresh = PlaneApplicationRecorder(store.other, universe)
    for writer in (recorder, fresh):
        with pytest.raises(IntegrityError, match="holds the events of another aggregate"):
            writer.insert_events([event(twin, 1)])
        assert writer.select_events(twin) == []
        with pytest.raises(OperationalError):  # no aggregate of that id
            writer.set_cold_version(twin, 2)
    assert recorder.set_cold_version(text, 0) == 0
    assert fresh.select_events(text) == [event(text, 1), event(text, 2)]
    with pytest.raises(IntegrityError, match="holds the events of another aggregate"):
        fresh.insert_events([event(twin, 3)])  # after a read of the owner's events
    assert [n.originator_id for n in _all(recorder)] == [text, text]


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_recorders_fail_once_their_factory_is_closed(tmp_path: Path, engine: str) -> None:
    """As eventsourcing's SQLite and PostgreSQL recorders after ``Application.close()``:
    every recorder of a closed factory, and every recorder it is asked for afterwards,
    fails with eventsourcing's ``ConnectionPoolClosedError`` (still an
    ``OperationalError``, as before) -- on a memory store they once went on saving and
    reading, on SQLite they failed with an ``OperationalError`` of the engine."""
    kv = "memory://" if engine == "memory" else f"sqlite://{tmp_path}/aos.db"
    env = {"AOSP_KV_URL": kv, "AOSP_OBJECTS_URL": f"file://{tmp_path}/o"}
    factory = PlaneFactory(Environment("Bank", env))
    application = factory.application_recorder()
    process = factory.process_recorder()
    tracking = factory.tracking_recorder()
    snapshots = factory.aggregate_recorder("snapshots")
    aggregate = uuid.uuid4()
    assert application.insert_events([event(aggregate, 1)]) == [1]
    subscription = application.subscribe(0)
    factory.close()
    calls = {
        "insert_events": lambda: application.insert_events([event(uuid.uuid4(), 1)]),
        "select_events": lambda: application.select_events(aggregate),
        "select_notifications": lambda: application.select_notifications(1, 10),
        "max_notification_id": application.max_notification_id,
        "subscribe": lambda: application.subscribe(0),
        "next(subscription)": lambda: next(subscription),
        "process insert_events": lambda: process.insert_events([event(uuid.uuid4(), 1)]),
        "insert_tracking": lambda: tracking.insert_tracking(Tracking("Up", 1)),
        "max_tracking_id": lambda: tracking.max_tracking_id("Up"),
        "wait": lambda: tracking.wait("Up", 1, timeout=0.1),
        "snapshot insert_events": lambda: snapshots.insert_events([event(aggregate, 1)]),
        "snapshot select_events": lambda: snapshots.select_events(aggregate),
        "set_cold_version": lambda: application.set_cold_version(aggregate, 1),
        "a new recorder": factory.application_recorder,
    }
    for name, call in calls.items():
        with pytest.raises(ConnectionPoolClosedError, match="factory was closed") as caught:
            call()
        assert isinstance(caught.value, OperationalError), name
    subscription.stop()
    factory.close()  # again: nothing to do
    if engine == "sqlite":
        again = PlaneFactory(Environment("Bank", env))
        assert again.application_recorder().max_notification_id() == 1
        again.close()


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_a_closed_application_neither_saves_nor_reads(tmp_path: Path, engine: str) -> None:
    """``Application.close()``, then ``save`` and a repository's ``get``: eventsourcing's
    ``ConnectionPoolClosedError`` on every engine, as on eventsourcing's SQLite."""
    kv = "memory://" if engine == "memory" else f"sqlite://{tmp_path}/aos.db"
    env = {
        "PERSISTENCE_MODULE": "aos_eventsourcing",
        "AOSP_KV_URL": kv,
        "AOSP_OBJECTS_URL": f"file://{tmp_path}/objects",
    }
    application = Application[uuid.UUID](env=env)
    account = Aggregate()
    application.save(account)
    application.close()
    with pytest.raises(ConnectionPoolClosedError):
        application.save(Aggregate())
    with pytest.raises(ConnectionPoolClosedError):
        application.repository.get(account.id)


# ------------------------------------------------------------ queued notification ids


def queued_plane(engine: Engine, injector: FaultInjector) -> Plane:
    return open_plane(
        FaultyEngine(engine, injector),
        MemoryObjectStore(),
        PlaneConfig(log_sequencing="queued"),
        hooks=injector,
    )


def test_an_insert_whose_ids_did_not_settle_finds_them_and_is_never_redone() -> None:
    """The settle after a queued insert's commit fails: the insert settles the log itself
    and returns the ids its events got; if that fails too, the error says the events are
    recorded (a retry of the save would be refused: their versions are taken)."""
    injector = FaultInjector()
    engine = MemoryEngine()
    recorder = PlaneApplicationRecorder(queued_plane(engine, injector), UniverseId.new())
    assert recorder.insert_events([event(uuid.uuid4(), 1)]) == [1]
    first, second = event(uuid.uuid4(), 1), event(uuid.uuid4(), 1)
    injector.fail_commit(2, fdb_errors.IO_ERROR)  # commit 1 records, 2 settles
    assert recorder.insert_events([first, second]) == [2, 3]
    assert [n.id for n in recorder.select_notifications(1, 10)] == [1, 2, 3]
    third = event(uuid.uuid4(), 1)
    for index in range(2, 200):  # every settle fails, the insert's and its own
        injector.fail_commit(index, fdb_errors.IO_ERROR)
    with pytest.raises(OperationalError, match="the events were recorded"):
        recorder.insert_events([third])
    with pytest.raises(IntegrityError):
        recorder.insert_events([third])


def test_a_dcb_append_whose_log_record_did_not_settle_reports_its_position() -> None:
    """A DCB position is its store world's height: an append whose settle committed returns
    it even if waking subscriptions (the log record: the third commit, after the enqueue and
    the settle) failed, and a retry never appends twice."""
    injector = FaultInjector()
    recorder = PlaneDCBRecorder(queued_plane(MemoryEngine(), injector), UniverseId.new())
    assert recorder.append([DCBEvent("Booked", b"seat-1", ["seat"])]) == 1
    injector.fail_commit(3, fdb_errors.IO_ERROR)
    assert recorder.append([DCBEvent("Booked", b"seat-2", ["seat"])]) == 2
    assert [(e.position, e.event.data) for e in recorder.read()] == [(1, b"seat-1"), (2, b"seat-2")]


def test_a_dcb_append_whose_settle_failed_is_placed_by_the_next_and_never_twice() -> None:
    """The enqueue committed, the settle failed for good: the call says its events are
    recorded and not to append them again; the next append (or ``settle``) places them,
    once, before its own."""
    injector = FaultInjector()
    plane = open_plane(FaultyEngine(MemoryEngine(), injector), MemoryObjectStore())
    recorder = PlaneDCBRecorder(plane, UniverseId.new())
    assert recorder.append([DCBEvent("Booked", b"seat-1", ["seat"])]) == 1
    injector.fail_commit(2, fdb_errors.IO_ERROR)
    with pytest.raises(OperationalError, match="do not append them again"):
        recorder.append([DCBEvent("Booked", b"seat-2", ["seat"])])
    assert [e.position for e in recorder.read()] == [1]  # queued: not at a position yet
    recorder.settle()
    assert recorder.append([DCBEvent("Booked", b"seat-3", ["seat"])]) == 3
    assert [e.event.data for e in recorder.read()] == [b"seat-1", b"seat-2", b"seat-3"]


def test_a_restarted_application_settles_what_a_stopped_save_left_queued() -> None:
    """A save killed between recording its events and settling their ids: the next
    process's application recorder settles them when it opens (its followers see them
    without waiting for its next save)."""
    injector = FaultInjector()
    engine = MemoryEngine()
    env = {"AOSP_KV_URL": "memory://", "AOSP_UNIVERSE": str(UniverseId.new())}
    factory = PlaneFactory(Environment("Bank", env))
    universe = factory.universe()
    crashing = PlaneApplicationRecorder(queued_plane(engine, injector), universe)
    injector.crash_at("journal.after_append")
    with pytest.raises(SimulatedCrash):
        crashing.insert_events([event(uuid.uuid4(), 1)])
    factory._plane = open_plane(engine, MemoryObjectStore())  # the store the crash left
    assert factory.application_recorder().max_notification_id() == 1
    factory.close()


def test_a_condition_that_matches_an_unplaced_event_places_it_and_then_refuses() -> None:
    """A writer stopped between its two steps (its settle failed for good): another
    writer's append conditioned on the boundary's head places the stopped one's event
    first, then refuses (the event is after that head); read again, it appends."""
    injector = FaultInjector()
    engine = MemoryEngine()
    stopped = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore()),
        universe := UniverseId.new(),
    )
    other = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)
    seat = DCBQuery([DCBQueryItem(tags=["seat"])])
    assert other.append([DCBEvent("Booked", b"first", ["seat"])]) == 1
    injector.fail_commit(2, fdb_errors.IO_ERROR)
    with pytest.raises(OperationalError, match="do not append them again"):
        stopped.append([DCBEvent("Booked", b"stopped", ["seat"])], DCBAppendCondition(seat, 1))
    head = other.read(seat).head
    assert head == 1  # not placed: not read
    with pytest.raises(IntegrityError):
        other.append([DCBEvent("Booked", b"late", ["seat"])], DCBAppendCondition(seat, head))
    assert [(e.position, e.event.data) for e in other.read(seat)] == [
        (1, b"first"),
        (2, b"stopped"),
    ]
    assert other.append([DCBEvent("Booked", b"next", ["seat"])], DCBAppendCondition(seat, 2)) == 3
