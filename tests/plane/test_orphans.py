"""Orphan collection (issue #17): CAS bodies no metadata names and no put pins, segment
objects no export can index any more, finished export markers.

The races are run step by step: hooks stop a put or an exporter between two of its steps
and run a collector there, on every engine, with a simulated clock (grace and lease pass
when the test moves it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aosp.fsck import Fsck
from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.objects import open_object_store
from backends.objects.memory import MemoryObjectStore
from persistence import cbor
from persistence.errors import CasBodyHashMismatch
from persistence.futures import drive
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.ids import Hash, UniverseId, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane import Plane, PlaneConfig, cas_collection
from persistence.protocols import cas_bodies
from persistence.protocols.cas_bodies import object_key
from persistence.protocols.export import read_marker
from segments import open_plane
from segments.collect import collect_world
from segments.export import ExportConfig, Exporter
from segments.format import segment_key
from tests.objects.servers import S3Server

NS = 1_000_000_000
LATE = 300.0
U = UniverseId(uuid.UUID(int=0x51))
W = WorldId(uuid.UUID(int=0x52))
BIG = b"B" * 40_000
GRACE = 60.0


class RemoteLike(MemoryObjectStore):
    """A store whose DELETE requests may land after the call returned, as S3's may."""

    late_delete_seconds = LATE


class Clock:
    """The plane's clock: moves only when a test moves it."""

    def __init__(self) -> None:
        self.ns = 1_900_000_000 * NS

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += round(seconds * NS)


class At:
    """Hooks that run ``actions[step]`` once, the first time ``step`` is reached."""

    def __init__(self, **actions: Callable[[], object]) -> None:
        self.actions = {step.replace("__", "."): action for step, action in actions.items()}
        self.seen: list[str] = []

    def reached(self, step: str) -> None:
        self.seen.append(step)
        action = self.actions.pop(step, None)
        if action is not None:
            action()


def collect(plane: Plane, clock: Clock, *, dry_run: bool = False) -> cas_collection.CasCollection:
    return cas_collection.collect(plane.engine, plane.objects, U, clock, GRACE, dry_run=dry_run)


def fsck_findings(plane: Plane) -> list[tuple[str, str, str]]:
    report = Fsck(plane).run()
    return [(f.severity, f.area, f.message) for f in report.findings]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def plane_on(
    engine: Engine, objects: ObjectStore, clock: Clock, hooks: StepHooks = NO_HOOKS
) -> Plane:
    return open_plane(engine, objects, clock=clock, hooks=hooks)


# ---------------------------------------------------------------- CAS: on every engine


def test_a_crashed_puts_body_is_pinned_for_the_grace_then_collected(
    engine: Engine, clock: Clock
) -> None:
    injector = FaultInjector()
    injector.crash_at("cas.after_body")
    objects = MemoryObjectStore()
    crashed = plane_on(engine, objects, clock, injector)
    with pytest.raises(SimulatedCrash):
        crashed.put_verified(U, BIG)
    plane = plane_on(engine, objects, clock)
    kept = plane.put_verified(U, b"K" * 30_000)  # referenced: never collected
    orphan = object_key(U, Hash.of(BIG))
    assert objects.stat(orphan) is not None and not plane.has(U, Hash.of(BIG))

    young = collect(plane, clock)
    assert (young.listed, young.referenced, young.pinned, young.collected) == (2, 1, 1, 0)
    assert all(f[1] != "objects" for f in fsck_findings(plane))  # pinned: in flight

    clock.advance(GRACE)
    assert collect(plane, clock, dry_run=True).collected == 1
    assert objects.stat(orphan) is not None  # a dry run deletes nothing
    done = collect(plane, clock)
    assert (done.pins_expired, done.collected, done.collected_bytes) == (1, 1, len(BIG))
    assert objects.stat(orphan) is None and plane.get(U, kept) == b"K" * 30_000
    assert fsck_findings(plane) == []
    assert collect(plane, clock) == cas_collection.CasCollection(listed=1, referenced=1)


def test_a_put_in_flight_keeps_its_body_against_a_collector(engine: Engine, clock: Clock) -> None:
    objects = MemoryObjectStore()
    passes: list[cas_collection.CasCollection] = []
    hooks = At(cas__after_body=lambda: passes.append(collect(collector, clock)))
    collector = plane_on(engine, objects, clock)
    plane = plane_on(engine, objects, clock, hooks)
    h = plane.put_verified(U, BIG)
    assert passes[0].pinned == 1 and passes[0].collected == 0
    assert plane.get(U, h) == BIG and collect(collector, clock).referenced == 1


class Settling:
    """Hooks for a put that waits on a doom: each pause moves the clock by ``step``
    seconds (the wait passes without sleeping it), running ``first`` at the first pause."""

    def __init__(self, clock: Clock, step: float, first: Callable[[], object] = lambda: None):
        self.clock, self.step, self.first = clock, step, first
        self.seen: list[str] = []

    def reached(self, step: str) -> None:
        self.seen.append(step)
        if step == "cas.await_collection":
            if self.seen.count(step) == 1:
                self.first()
            self.clock.advance(self.step)


def test_a_put_stalled_past_the_grace_uploads_again(engine: Engine, clock: Clock) -> None:
    objects = MemoryObjectStore()
    key = object_key(U, Hash.of(BIG))
    stalled = [False]

    class Hooks(Settling):
        def reached(self, step: str) -> None:
            if step == "cas.after_body" and not stalled[0]:
                stalled[0] = True
                clock.advance(GRACE)
                done = collect(collector, clock)
                assert (done.pins_expired, done.collected) == (1, 1)
                assert objects.stat(key) is None
            super().reached(step)

    hooks = Hooks(clock, 0)
    collector = plane_on(engine, objects, clock)
    plane = plane_on(engine, objects, clock, hooks)
    h = plane.put_verified(U, BIG)
    assert hooks.seen.count("cas.after_pin") == 2  # its pin was gone: pinned again
    assert "cas.await_collection" not in hooks.seen  # a local delete is done when it returns
    assert plane.get(U, h) == BIG
    assert fsck_findings(plane) == []


def test_a_put_waits_until_a_collectors_delete_has_settled(engine: Engine, clock: Clock) -> None:
    """A DELETE may land after its call returned (a retried request): the doom stays,
    deleted, for the settle time, and no put uploads the body until it has passed."""
    objects = RemoteLike()
    h = Hash.of(BIG)
    key = object_key(U, h)
    objects.put(key, BIG)  # an orphan
    collector = plane_on(engine, objects, clock)
    assert collect(collector, clock).collected == 1
    assert objects.stat(key) is None

    def late_delete_lands() -> None:
        objects.delete(key)  # harmless: nothing was uploaded while the doom stood

    hooks = Settling(clock, LATE / 3, late_delete_lands)
    plane = plane_on(engine, objects, clock, hooks)
    assert plane.put_verified(U, BIG) == h
    assert hooks.seen.count("cas.await_collection") == 3
    assert hooks.seen.index("cas.await_collection") < hooks.seen.index("cas.after_pin")
    assert plane.get(U, h) == BIG and fsck_findings(plane) == []


def test_a_put_waits_for_a_collector_that_doomed_its_hash(engine: Engine, clock: Clock) -> None:
    objects = MemoryObjectStore()
    h = Hash.of(BIG)
    key = object_key(U, h)
    objects.put(key, BIG)  # an orphan
    plane_on(engine, objects, clock)  # the store, as a plane made it (its layout recorded)
    token = cas_collection.new_token()
    started = time.monotonic()
    assert drive(cas_bodies.decide(engine, UniverseKeys(U), h, key, clock(), 0, token)) == "doomed"

    def collector_deletes() -> None:
        assert objects.stat(key) is not None
        keys = UniverseKeys(U)
        assert cas_collection.delete_doomed(engine, objects, keys, h, key, token, started, clock)

    hooks = Settling(clock, 0, collector_deletes)
    plane = plane_on(engine, objects, clock, hooks)
    assert plane.put_verified(U, BIG) == h
    assert hooks.seen.index("cas.await_collection") < hooks.seen.index("cas.after_pin")
    assert plane.get(U, h) == BIG and fsck_findings(plane) == []


def test_a_doom_left_by_a_crashed_collector_is_taken_over_after_its_lease(
    engine: Engine, clock: Clock
) -> None:
    objects = RemoteLike()
    plane = plane_on(engine, objects, clock)
    h = Hash.of(BIG)
    key = object_key(U, h)
    objects.put(key, BIG)
    drive(
        cas_bodies.decide(engine, UniverseKeys(U), h, key, clock(), 0, cas_collection.new_token())
    )
    # the orphan being collected is still an orphan; the collection itself is no finding
    assert [area for _, area, _ in fsck_findings(plane)] == ["objects"]
    fresh = collect(plane, clock)
    assert (fresh.collecting, fresh.collected) == (1, 0)  # another collector's, not stale

    clock.advance(cas_bodies.DOOM_LEASE_SECONDS)
    [(severity, _, message)] = [f for f in fsck_findings(plane) if f[1] == "cas"]
    assert severity == "warning" and "is gone" in message
    done = collect(plane, clock)
    assert (done.listed, done.collected, done.dooms_resumed) == (1, 1, 0)
    assert objects.stat(key) is None and fsck_findings(plane) == []
    # one that crashed after its DELETE: no listing shows the object, the sweep finishes it
    other = Hash.of(b"gone")
    drive(cas_bodies.decide(engine, UniverseKeys(U), other, object_key(U, other), clock(), 0, b"t"))
    clock.advance(cas_bodies.DOOM_LEASE_SECONDS)
    assert collect(plane, clock, dry_run=True).dooms_settled == 2
    swept = collect(plane, clock)
    assert (swept.dooms_resumed, swept.dooms_settled) == (1, 1)
    assert kv_range(engine, *UniverseKeys(U).cas_dooms())  # settling: a DELETE may land late
    clock.advance(LATE)
    assert collect(plane, clock).dooms_settled == 1
    assert not kv_range(engine, *UniverseKeys(U).cas_dooms())


def test_a_put_takes_over_a_stale_doom(engine: Engine, clock: Clock) -> None:
    objects = RemoteLike()
    h = Hash.of(BIG)
    key = object_key(U, h)
    objects.put(key, b"a torn body under the hash")
    plane_on(engine, objects, clock)  # the store, as a plane made it (its layout recorded)
    drive(
        cas_bodies.decide(engine, UniverseKeys(U), h, key, clock(), 0, cas_collection.new_token())
    )
    clock.advance(cas_bodies.DOOM_LEASE_SECONDS)
    hooks = Settling(clock, LATE)
    plane = plane_on(engine, objects, clock, hooks)
    assert plane.put_verified(U, BIG) == h  # deleted the doomed object, settled, uploaded
    assert hooks.seen.count("cas.await_collection") == 1
    assert plane.get(U, h) == BIG and fsck_findings(plane) == []


def test_a_collector_deletes_only_its_own_young_doom(engine: Engine, clock: Clock) -> None:
    objects = MemoryObjectStore()
    h = Hash.of(BIG)
    key = object_key(U, h)
    objects.put(key, BIG)
    keys = UniverseKeys(U)
    slow = cas_collection.new_token()
    started = time.monotonic()
    assert drive(cas_bodies.decide(engine, keys, h, key, clock(), 0, slow)) == "doomed"
    clock.advance(cas_bodies.DOOM_LEASE_SECONDS)
    assert (
        drive(cas_bodies.decide(engine, keys, h, key, clock(), 0, cas_collection.new_token()))
        == "doomed"
    )
    assert not cas_collection.delete_doomed(engine, objects, keys, h, key, slow, started, clock)
    assert objects.stat(key) is not None  # taken over: the slow collector deletes nothing

    clock.advance(cas_bodies.DOOM_LEASE_SECONDS)
    own = cas_collection.new_token()
    assert drive(cas_bodies.decide(engine, keys, h, key, clock(), 0, own)) == "doomed"
    late = time.monotonic() - cas_bodies.DELETE_DEADLINE_SECONDS
    assert not cas_collection.delete_doomed(engine, objects, keys, h, key, own, late, clock)
    clock.advance(cas_bodies.DELETE_DEADLINE_SECONDS)  # its monotonic clock may lag (suspend)
    assert not cas_collection.delete_doomed(
        engine, objects, keys, h, key, own, time.monotonic(), clock
    )
    assert objects.stat(key) is not None


def test_a_damaged_object_under_the_hash_fails_the_put_and_is_then_collected(
    engine: Engine, clock: Clock
) -> None:
    objects = MemoryObjectStore()
    h = Hash.of(BIG)
    key = object_key(U, h)
    objects.put(key, b"torn")
    plane = plane_on(engine, objects, clock)
    with pytest.raises(CasBodyHashMismatch):
        plane.put_verified(U, BIG)
    assert not kv_range(engine, *UniverseKeys(U).cas_pins())  # its pin went with it
    assert collect(plane, clock).collected == 1  # no grace to wait: nothing pins it
    assert plane.put_verified(U, BIG) == h and plane.get(U, h) == BIG


def kv_range(engine: Engine, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    return engine.create_transaction().get_range(begin, end).wait()


# ---------------------------------------------------------------- segments and markers


def _world_with_segments(plane: Plane) -> Exporter:
    plane.create_world(U, W)
    plane.append_batch(U, W, 0, [cbor.encode(n) for n in range(10)])
    plane.snapshot_commit(
        U,
        W,
        b"state",
        height=10,
        logical_time_ns=0,
        receipt_horizon_height=10,
        promote_baseline=True,
    )
    return Exporter(plane, ExportConfig(enabled=True, target_entries=4))


def test_orphaned_segments_below_the_index_go_those_above_stay(clock: Clock) -> None:
    objects = MemoryObjectStore()
    injector = FaultInjector()
    injector.crash_at("export.after_delete", 2)
    plane = plane_on(MemoryEngine(), objects, clock, injector)
    exporter = _world_with_segments(plane)
    exporter.export_once(U, W)
    with pytest.raises(SimulatedCrash):
        exporter.export_once(U, W)  # second segment 5-8 done, its marker left finished
    marker = drive(read_marker(plane.engine, WorldKeys(U, W)))
    assert marker is not None and marker.state == "delete_finished"
    below = segment_key(U, W, 1, 3)  # a racing exporter's upload of a shorter range
    above = segment_key(U, W, 9, 9)  # may be adopted by the next export
    objects.put(below, b"x" * 7)
    objects.put(above, b"y" * 5)
    objects.put(f"segments/{U}/{W}/notes.txt", b"z")

    preview = collect_world(plane, U, W, dry_run=True)
    assert (preview.collected, preview.kept, preview.markers_cleared) == (1, 1, 1)
    assert objects.stat(below) is not None
    done = collect_world(plane, U, W)
    assert (done.listed, done.referenced, done.foreign) == (5, 2, 1)
    assert (done.collected, done.collected_bytes, done.kept, done.markers_cleared) == (1, 7, 1, 1)
    assert objects.stat(below) is None and objects.stat(above) is not None
    assert drive(read_marker(plane.engine, WorldKeys(U, W))) is None
    orphans = sorted(f[2].split(" (")[0] for f in fsck_findings(plane) if f[1] == "objects")
    assert orphans == ["orphaned object", "orphaned object"]  # the kept one and notes.txt
    assert [r.end for r in plane.list_segments(U, W)] == [4, 8]


# ---------------------------------------------------------------- every object store


@pytest.fixture(params=["local", "moto", "seaweedfs"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        store = open_object_store(f"file://{tmp_path}/objects")
    else:
        server: S3Server = request.getfixturevalue(f"{request.param}_s3")
        bucket = server.create_bucket()
        store = open_object_store(
            f"s3://{bucket}/orphans?endpoint_url={server.endpoint_url}&region={server.region}",
            credentials={
                "aws_access_key_id": server.access_key,
                "aws_secret_access_key": server.secret_key,
            },
        )
    yield store
    store.close()


def test_fsck_is_clean_after_orphan_collection(objects: ObjectStore, clock: Clock) -> None:
    injector = FaultInjector()
    injector.crash_at("cas.after_body")
    engine = MemoryEngine()
    with pytest.raises(SimulatedCrash):
        plane_on(engine, objects, clock, injector).put_verified(U, BIG)
    plane = plane_on(engine, objects, clock)
    exporter = _world_with_segments(plane)
    exporter.export_all(U, W)
    kept = plane.put_verified(U, b"K" * 30_000)
    objects.put(segment_key(U, W, 1, 2), b"x" * 9)
    assert {f[2].split(" (")[0] for f in fsck_findings(plane) if f[1] == "objects"} == {
        "orphaned object"
    }
    clock.advance(GRACE)
    cas = collect(plane, clock)
    segments = collect_world(plane, U, W)
    assert (cas.collected, segments.collected) == (1, 1)
    assert fsck_findings(plane) == []
    assert plane.get(U, kept) == b"K" * 30_000
    assert [e for _, e in plane.read_range(U, W, 1, 10)] == [cbor.encode(n) for n in range(10)]


# ---------------------------------------------------------------- commit faults


def _put_and_collect(engine: Engine, objects: ObjectStore, clock: Clock) -> None:
    """An orphan left by a crashed put, a put of another body, then a collection pass."""
    objects.put(object_key(U, Hash.of(b"O" * 20_000)), b"O" * 20_000)
    plane = plane_on(engine, objects, clock)
    plane.put_verified(U, BIG)
    clock.advance(GRACE)
    assert collect(plane, clock).collected == 1
    assert kv_range(engine, *UniverseKeys(U).cas_dooms())  # settling: a DELETE may land late
    clock.advance(LATE)
    assert collect(plane, clock).dooms_settled == 1


def _outcome(engine: Engine, objects: ObjectStore) -> tuple[object, ...]:
    keys = UniverseKeys(U)
    tr = engine.create_transaction()
    leftovers = tr.get_range(*keys.cas_pins()).wait() + tr.get_range(*keys.cas_dooms()).wait()
    meta = tr.get(keys.cas_meta(Hash.of(BIG))).wait()
    return [info.key for info in objects.list()], leftovers, meta is not None


@pytest.mark.parametrize(
    ("code", "how"),
    [(1020, "lost"), (1021, "applied"), (1021, "lost"), (1021, "late"), (1007, "lost")],
    ids=["1020", "1021-applied", "1021-lost", "1021-late", "1007"],
)
def test_every_commit_failed_once_collects_exactly_the_orphan(code: int, how: str) -> None:
    clean_engine, clean_objects = MemoryEngine(), RemoteLike()
    baseline = FaultInjector()
    _put_and_collect(FaultyEngine(clean_engine, baseline), clean_objects, Clock())
    expected = _outcome(clean_engine, clean_objects)
    assert expected == ([object_key(U, Hash.of(BIG))], [], True)
    for index in range(1, baseline.commits + 1):
        engine, objects, injector = MemoryEngine(), RemoteLike(), FaultInjector()
        injector.fail_commit(index, code, applied=how == "applied", late=how == "late")
        _put_and_collect(FaultyEngine(engine, injector), objects, Clock())
        injector.land_late()
        assert any(entry[0] == "commit" for entry in injector.log), index
        assert _outcome(engine, objects) == expected, f"commit {index} failed with {code} {how}"


def test_a_body_whose_metadata_is_inline_is_an_orphan(clock: Clock) -> None:
    """A host with a higher inline threshold stored the body in its metadata: the object
    another host uploaded under the hash is named by nothing."""
    engine, objects = MemoryEngine(), MemoryObjectStore()
    injector = FaultInjector()
    injector.crash_at("cas.after_body")
    with pytest.raises(SimulatedCrash):
        plane_on(engine, objects, clock, injector).put_verified(U, BIG)
    roomy = open_plane(engine, objects, PlaneConfig(inline_threshold=64 * 1024), clock=clock)
    h = roomy.put_verified(U, BIG)
    assert roomy.blob_meta(U, h).storage == "inline"
    clock.advance(GRACE)
    assert collect(roomy, clock).collected == 1
    assert objects.stat(object_key(U, h)) is None and roomy.get(U, h) == BIG
