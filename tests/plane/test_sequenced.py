"""Sequenced group appends: every entry gets the next position of its universe's log (1, 2,
... in commit order, no gaps), readable by position and tag; a consumer's tracking position
is stored atomically with the appends and never goes back. On every engine, and exactly once
after an applied ``commit_unknown_result`` with other clients committing before the retry."""

from __future__ import annotations

import threading

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors, kv
from persistence.errors import CorruptRecord, HeadAdvanced, TrackingConflict, Validation
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import CHUNK_SIZE, UniverseKeys
from persistence.kv import Engine
from persistence.plane import Plane, PlaneConfig
from segments import open_plane
from segments.export import ExportConfig, Exporter


def logged(
    plane: Plane, u: UniverseId, **kwargs: object
) -> list[tuple[int, WorldId, int, str, bytes]]:
    return [
        (e.position, e.world, e.height, e.tag, e.entry)
        for e in plane.read_log(u, 1, 1_000, **kwargs)  # type: ignore[arg-type]
    ]


def test_positions_follow_batch_order_across_calls(plane: Plane, universe: UniverseId) -> None:
    a, b = WorldId.new(), WorldId.new()
    assert plane.log_head(universe) == 0
    first = plane.append_sequenced(
        universe,
        [(a, 0, [b"a1", b"a2"]), (b, 0, [b"b1"])],
        [["t1", "t2"], ["t1"]],
        create_missing=True,
    )
    assert (first.first_heights, first.first_position) == ([1, 1], 1)
    second = plane.append_sequenced(universe, [(b, 1, [b"b2"])], [["t3"]])
    assert (second.first_heights, second.first_position) == ([2], 4)
    assert plane.log_head(universe) == 4
    assert logged(plane, universe) == [
        (1, a, 1, "t1", b"a1"),
        (2, a, 2, "t2", b"a2"),
        (3, b, 1, "t1", b"b1"),
        (4, b, 2, "t3", b"b2"),
    ]
    # plain appends take no positions, and other universes have their own log
    plane.append_batch(universe, a, 2, [b"unlogged"])
    other = UniverseId.new()
    assert (
        plane.append_sequenced(other, [(a, 0, [b"x"])], [["t"]], create_missing=True).first_position
        == 1
    )
    assert plane.log_head(universe) == 4 and len(logged(plane, universe)) == 4


def test_reads_by_position_range_and_tag(engine: Engine) -> None:
    plane = open_plane(engine, MemoryObjectStore(), PlaneConfig(read_page_entries=3))
    u, w = UniverseId.new(), WorldId.new()
    entries = [b"e%d" % i for i in range(1, 11)]
    tags = ["odd" if i % 2 else "even" for i in range(1, 11)]
    plane.append_sequenced(u, [(w, 0, entries)], [tags], create_missing=True)
    assert [e.position for e in plane.read_log(u, 4, 3)] == [4, 5, 6]
    assert [e.position for e in plane.read_log(u, 4, 100, last=7)] == [4, 5, 6, 7]
    assert [e.entry for e in plane.read_log(u, 1, 3, tags=["even"])] == [b"e2", b"e4", b"e6"]
    assert [e.position for e in plane.read_log(u, 2, 100, tags={"odd"})] == [3, 5, 7, 9]
    assert plane.read_log(u, 1, 100, tags=["none"]) == []  # pages through all, then ends
    assert plane.read_log(u, 11, 5) == [] and plane.read_log(u, 1, 0) == []


def test_a_damaged_log_record_is_corrupt_record_naming_its_position(engine: Engine) -> None:
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.append_sequenced(u, [(w, 0, [b"a", b"b", b"c"])], [["t"] * 3], create_missing=True)

    async def damage(tr: kv.Transaction) -> None:
        tr.set(UniverseKeys(u).log_entry(2), b"\xa1\x63tag\x01")

    kv.run(engine, damage)
    with pytest.raises(CorruptRecord, match=r"^corrupt universe log at 2: "):
        plane.read_log(u, 1, 10)
    assert [e.entry for e in plane.read_log(u, 3, 10)] == [b"c"]


def test_tracking_is_stored_with_the_appends_and_never_goes_back(
    plane: Plane, universe: UniverseId
) -> None:
    w = WorldId.new()
    assert plane.tracking_position(universe, "upstream") is None
    plane.append_sequenced(
        universe, [(w, 0, [b"e1"])], [["t"]], create_missing=True, tracking=("upstream", 5)
    )
    assert plane.tracking_position(universe, "upstream") == 5
    for stale in (5, 3):
        with pytest.raises(TrackingConflict) as refused:
            plane.append_sequenced(
                universe, [(w, 1, [b"e2"])], [["t"]], tracking=("upstream", stale)
            )
        assert (refused.value.recorded, refused.value.attempted) == (5, stale)
    assert plane.head(universe, w) == 1 and plane.log_head(universe) == 1  # nothing written
    # tracking alone (a processed upstream event that produced nothing)
    done = plane.append_sequenced(universe, [], [], tracking=("upstream", 9))
    assert (done.first_heights, done.first_position) == ([], None)
    assert plane.tracking_position(universe, "upstream") == 9
    assert plane.tracking_position(universe, "other") is None


def test_a_refused_group_takes_no_position(plane: Plane, universe: UniverseId) -> None:
    a, b = WorldId.new(), WorldId.new()
    plane.append_sequenced(universe, [(a, 0, [b"a1"])], [["t"]], create_missing=True)
    with pytest.raises(HeadAdvanced):
        plane.append_sequenced(
            universe,
            [(b, 0, [b"b1"]), (a, 0, [b"a1 again"])],
            [["t"], ["t"]],
            create_missing=True,
            tracking=("x", 1),
        )
    assert plane.log_head(universe) == 1 and plane.tracking_position(universe, "x") is None
    assert plane.append_sequenced(universe, [(a, 1, [b"a2"])], [["t"]]).first_position == 2


@pytest.mark.parametrize(
    ("batches", "tags", "tracking", "field"),
    [
        ([], [], None, "batches"),
        ([("w", 0, [b"x"])], [["t"]], None, "batches[0].world"),
        ([(None, 0, [b"x"])], [], None, "tags"),
        ([(WorldId.new(), 0, [b"x"])], [[]], None, "tags[0]"),
        ([(WorldId.new(), 0, [b"x"])], [["t", "u"]], None, "tags[0]"),
        ([(WorldId.new(), 0, [b"x"])], [[""]], None, "tags[0][0]"),
        ([(WorldId.new(), 0, [b"x"])], [[b"t"]], None, "tags[0][0]"),
        ([(WorldId.new(), 0, [b"x"])], "t", None, "tags"),
        ([], [], ("name", 0), "tracking.position"),
        ([], [], ("", 1), "tracking.name"),
        ([], [], ["name", 1], "tracking"),
        ([], [], ("name", True), "tracking.position"),
    ],
)
def test_bad_sequenced_appends_name_the_field(
    plane: Plane, universe: UniverseId, batches: object, tags: object, tracking: object, field: str
) -> None:
    with pytest.raises(Validation) as refused:
        plane.append_sequenced(
            universe,
            batches,  # type: ignore[arg-type]
            tags,  # type: ignore[arg-type]
            create_missing=True,
            tracking=tracking,  # type: ignore[arg-type]
        )
    assert refused.value.field == field
    assert plane.log_head(universe) == 0


@pytest.mark.parametrize(
    ("first", "limit", "field"), [(0, 1, "first"), (1, -1, "limit"), (1.0, 1, "first")]
)
def test_bad_log_reads_name_the_field(
    plane: Plane, universe: UniverseId, first: object, limit: object, field: str
) -> None:
    with pytest.raises(Validation) as refused:
        plane.read_log(universe, first, limit)  # type: ignore[arg-type]
    assert refused.value.field == field
    with pytest.raises(Validation) as refused:
        plane.read_log(universe, 1, 1, tags="topic")
    assert refused.value.field == "tags"


def test_concurrent_sequenced_appenders_get_gapless_unique_positions(engine: Engine) -> None:
    """... and where writers serialize (SQLite) none of them conflicts: every sequenced
    append writes the log head, so each runs alone (``kv.run(alone=True)``)."""
    plane = open_plane(engine, MemoryObjectStore())
    kv.RETRY_STATS.clear()
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(4)]
    errors: list[BaseException] = []

    def writer(world: WorldId) -> None:
        try:
            for height in range(10):
                plane.append_sequenced(
                    u,
                    [(world, height, [b"%s %d" % (str(world).encode(), height)])],
                    [["t"]],
                    create_missing=True,
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in worlds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    if engine.writers_serialize:
        assert kv.RETRY_STATS.snapshot()["retried"] == {}
    log = plane.read_log(u, 1, 1_000)
    assert [e.position for e in log] == list(range(1, 41))
    for w in worlds:  # each world's entries in height order, each once
        assert [e.height for e in log if e.world == w] == list(range(1, 11))


# ------------------------------------------------------------ exactly once under faults


@pytest.mark.parametrize("applied", [True, False])
def test_a_retry_reports_its_own_positions_after_another_client_sequenced(applied: bool) -> None:
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    objects = MemoryObjectStore()
    plane, other = open_plane(engine, objects, hooks=injector), open_plane(engine.inner, objects)
    u, mine, theirs = UniverseId.new(), WorldId.new(), WorldId.new()

    def interleave() -> None:
        other.append_sequenced(
            u, [(theirs, 0, [b"theirs"])], [["t"]], create_missing=True, tracking=("theirs", 1)
        )

    injector.fail_commit(
        1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=applied, interleave=interleave
    )
    done = plane.append_sequenced(
        u, [(mine, 0, [b"m1", b"m2"])], [["t", "t"]], create_missing=True, tracking=("up", 2)
    )
    order = [b"m1", b"m2", b"theirs"] if applied else [b"theirs", b"m1", b"m2"]
    assert (done.first_heights, done.first_position) == ([1], 1 if applied else 2)
    assert [e.entry for e in other.read_log(u, 1, 10)] == order
    assert other.tracking_position(u, "up") == 2
    assert other.tracking_position(u, "theirs") == 1


# ------------------------------------------------------------ change notification


def test_wait_log_wakes_on_a_sequenced_append(engine: Engine) -> None:
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(plane.wait_log(u, 0, 60.0)))
    waiter.start()
    plane.append_sequenced(u, [(w, 0, [b"e1"])], [["t"]], create_missing=True)
    waiter.join(timeout=30.0)
    assert not waiter.is_alive() and woke == [1]  # woken by the append, not the timeout
    assert plane.wait_log(u, 0, 60.0) == 1  # already past: returns at once
    assert plane.wait_log(u, 1, 0.05) == 1  # nothing new: returns at the timeout


def test_wait_tracking_wakes_when_the_position_reaches_the_wanted_one(engine: Engine) -> None:
    plane = open_plane(engine, MemoryObjectStore())
    u = UniverseId.new()
    assert plane.wait_tracking(u, "up", 1, 0.05) is None  # nothing recorded: the timeout
    plane.append_sequenced(u, [], [], tracking=("up", 3))
    assert plane.wait_tracking(u, "up", 3, 60.0) == 3  # already there: at once
    assert plane.wait_tracking(u, "up", 4, 0.05) == 3  # below the wanted one: the timeout
    woke: list[int | None] = []
    waiter = threading.Thread(target=lambda: woke.append(plane.wait_tracking(u, "up", 5, 60.0)))
    waiter.start()
    plane.append_sequenced(u, [], [], tracking=("other", 9))  # another consumer's record
    plane.append_sequenced(u, [], [], tracking=("up", 5))
    waiter.join(timeout=30.0)
    assert not waiter.is_alive() and woke == [5]  # woken by the record, not the timeout
    stop = threading.Event()
    stop.set()
    assert plane.wait_tracking(u, "up", 6, 60.0, interrupt=stop) == 5  # interrupted at once


@pytest.mark.parametrize(
    ("name", "at_least", "timeout", "field"),
    [("", 1, 1, "name"), (3, 1, 1, "name"), ("up", -1, 1, "at_least"), ("up", 1, -1, "timeout")],
)
def test_bad_tracking_waits_name_the_field(
    plane: Plane, universe: UniverseId, name: object, at_least: object, timeout: object, field: str
) -> None:
    with pytest.raises(Validation) as refused:
        plane.wait_tracking(universe, name, at_least, timeout)  # type: ignore[arg-type]
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("after", "timeout", "field"), [(-1, 1, "after"), (0, -1, "timeout"), (0, "1", "timeout")]
)
def test_bad_waits_name_the_field(
    plane: Plane, universe: UniverseId, after: object, timeout: object, field: str
) -> None:
    with pytest.raises(Validation) as refused:
        plane.wait_log(universe, after, timeout)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_log_reads_stitch_chunked_and_cold_entries(engine: Engine) -> None:
    plane = open_plane(engine, MemoryObjectStore())
    u, a, b = UniverseId.new(), WorldId.new(), WorldId.new()
    big = b"B" * (CHUNK_SIZE + 10)  # stored in two chunks
    plane.append_sequenced(
        u, [(a, 0, [b"a1", big, b"a3"]), (b, 0, [b"b1"])], [["t"] * 3, ["t"]], create_missing=True
    )
    plane.append_sequenced(u, [(a, 3, [b"a4"])], [["t"]])
    expected = [b"a1", big, b"a3", b"b1", b"a4"]
    assert [e.entry for e in plane.read_log(u, 1, 10)] == expected
    plane.set_cold_horizon(u, a, 3)
    Exporter(plane, ExportConfig(enabled=True, target_entries=2)).export_all(u, a)
    assert [(s.start, s.end) for s in plane.list_segments(u, a)] == [(1, 2), (3, 3)]
    assert [e.entry for e in plane.read_log(u, 1, 10)] == expected  # through the segments
    assert [e.entry for e in plane.read_log(u, 2, 2)] == [big, b"a3"]


def test_wait_log_returns_once_interrupted(plane: Plane, universe: UniverseId) -> None:
    stop = threading.Event()
    returned: list[int] = []
    waiter = threading.Thread(
        target=lambda: returned.append(plane.wait_log(universe, 0, 60.0, interrupt=stop))
    )
    waiter.start()
    stop.set()
    waiter.join(timeout=30.0)
    assert not waiter.is_alive() and returned == [0]  # not the 60 s timeout
    with pytest.raises(Validation) as refused:
        plane.wait_log(universe, 0, 1.0, interrupt=True)  # type: ignore[arg-type]
    assert refused.value.field == "interrupt"
