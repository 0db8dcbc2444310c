"""An application's own data (``app_data`` of a group append): written in the append's
transaction -- both or neither --, read back by key and by range in the application's key
order, checked before anything is written; on every engine, and exactly once after an
applied ``commit_unknown_result`` with another client committing before the retry."""

from __future__ import annotations

from typing import Any

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors
from persistence.errors import HeadAdvanced, TrackingConflict, Validation
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane, PlaneConfig
from persistence.sizes import MAX_APP_KEY_BYTES, MAX_APP_VALUE_BYTES
from segments import open_plane

KEYS = [b"\x00", b"\x00\x00", b"a", b"a\x00", b"a/b", b"ab", b"b", b"\xff", b"\xff\xff"]


def test_written_with_the_events_and_read_in_key_order(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    data = {key: key * 2 for key in reversed(KEYS)}
    assert plane.append_batches(universe, [(world, 0, [b"e"])], app_data=data) == [1]
    assert plane.read_app_range(universe) == [(key, key * 2) for key in KEYS]
    assert plane.read_app_range(universe, reverse=True) == [(key, key * 2) for key in KEYS[::-1]]
    assert plane.read_app_range(universe, b"a", b"b") == [(k, k * 2) for k in KEYS[2:6]]
    assert plane.read_app_range(universe, b"a", b"b", limit=2, reverse=True) == [
        (b"ab", b"abab"),
        (b"a/b", b"a/ba/b"),
    ]
    assert plane.read_app_range(universe, b"b", b"a") == []
    assert plane.read_app_range(universe, limit=0) == []
    assert plane.read_app_data(universe, b"a\x00") == b"a\x00a\x00"
    assert plane.read_app_data(universe, b"c") is None
    assert plane.read_app_range(UniverseId.new()) == []  # another universe's data is its own


def test_none_removes_a_key_and_an_empty_value_is_a_value(
    plane: Plane, universe: UniverseId
) -> None:
    plane.append_batches(universe, [], app_data={b"k": b"v", b"empty": b""})
    plane.append_sequenced(universe, [], [], app_data={b"k": None, b"missing": None})
    assert plane.read_app_range(universe) == [(b"empty", b"")]
    assert plane.read_app_data(universe, b"empty") == b""


def test_nothing_is_written_when_the_append_is_refused(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_sequenced(
        universe, [(world, 0, [b"e1"])], [["t"]], tracking=("up", 5), app_data={b"k": b"1"}
    )
    with pytest.raises(HeadAdvanced):
        plane.append_batches(universe, [(world, 0, [b"x"])], app_data={b"k": b"2", b"j": b"2"})
    with pytest.raises(TrackingConflict):
        plane.append_sequenced(universe, [], [], tracking=("up", 5), app_data={b"k": b"3"})
    assert plane.read_app_range(universe) == [(b"k", b"1")]
    assert plane.read_range(universe, world, 1, 10) == [(1, b"e1")]


BAD_DATA: list[tuple[Any, str]] = [
    ([(b"k", b"v")], "app_data"),
    ("k", "app_data"),
    ({"k": b"v"}, "app_data key"),
    ({b"": b"v"}, "app_data key"),
    ({b"k" * (MAX_APP_KEY_BYTES + 1): b"v"}, "app_data key"),
    ({1: b"v"}, "app_data key"),
    ({b"k": "v"}, r"app_data\[b'k'\]"),
    ({b"k": 1}, r"app_data\[b'k'\]"),
    ({b"k": b"v" * (MAX_APP_VALUE_BYTES + 1)}, r"app_data\[b'k'\]"),
]


@pytest.mark.parametrize(("data", "field"), BAD_DATA)
def test_bad_data_is_refused_naming_it_before_anything_is_written(
    plane: Plane, universe: UniverseId, world: WorldId, data: Any, field: str
) -> None:
    with pytest.raises(Validation, match=rf"^{field}"):
        plane.append_batches(universe, [(world, 0, [b"e"])], app_data=data)
    with pytest.raises(Validation, match=rf"^{field}"):
        plane.append_sequenced(universe, [], [], tracking=("up", 1), app_data=data)
    assert plane.head(universe, world) == 0
    assert plane.tracking_position(universe, "up") is None
    assert plane.read_app_range(universe) == []


def test_the_limits_are_at_the_documented_sizes(plane: Plane, universe: UniverseId) -> None:
    key, value = b"k" * MAX_APP_KEY_BYTES, b"v" * MAX_APP_VALUE_BYTES
    plane.append_batches(universe, [], app_data={key: value})
    assert plane.read_app_data(universe, key) == value
    assert plane.read_app_range(universe, key) == [(key, value)]


def test_a_group_with_its_data_keeps_within_the_batch_limits(universe: UniverseId) -> None:
    config = PlaneConfig(max_batch_entries=3, max_batch_bytes=100)
    plane = open_plane(MemoryEngine(), MemoryObjectStore(), config)
    world = WorldId.new()
    plane.create_world(universe, world)
    with pytest.raises(Validation, match=r"^app_data: 2 keys and 2 entries > max 3"):
        plane.append_batches(universe, [(world, 0, [b"a", b"b"])], app_data={b"1": b"", b"2": b""})
    with pytest.raises(Validation, match=r"^app_data: 91 bytes and 10 of entries > max 100"):
        plane.append_batches(universe, [(world, 0, [b"x" * 10])], app_data={b"k": b"v" * 90})
    assert plane.head(universe, world) == 0
    plane.append_batches(universe, [(world, 0, [b"x" * 10])], app_data={b"k": b"v" * 89})
    assert plane.read_app_data(universe, b"k") == b"v" * 89


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda p, u: p.read_app_data(u, b""), "key"),
        (lambda p, u: p.read_app_data(u, "k"), "key"),
        (lambda p, u: p.read_app_data(u, b"k" * (MAX_APP_KEY_BYTES + 1)), "key"),
        (lambda p, u: p.read_app_range(u, "a"), "begin"),
        (lambda p, u: p.read_app_range(u, b"a", "b"), "end"),
        (lambda p, u: p.read_app_range(u, limit=-1), "limit"),
        (lambda p, u: p.read_app_range(u, limit=True), "limit"),
        (lambda p, u: p.read_app_range(u, reverse=1), "reverse"),
        (lambda p, u: p.read_app_range("u"), "universe"),
    ],
)
def test_bad_reads_are_refused_naming_the_argument(
    plane: Plane, universe: UniverseId, call: Any, field: str
) -> None:
    with pytest.raises(Validation, match=rf"^{field}"):
        call(plane, universe)


@pytest.mark.parametrize("applied", [True, False])
def test_a_retry_after_an_unknown_result_reports_the_write_once(applied: bool) -> None:
    """The commit's result is lost (applied or not), and another client moves the tracking
    record on and rewrites a key before the retry: the retry reports the call's own
    outcome -- success, never ``TrackingConflict`` for its own record -- and the data is
    what committed, in commit order."""
    faulty = FaultyEngine(MemoryEngine(), FaultInjector(seed=3))
    plane = open_plane(faulty, MemoryObjectStore(), hooks=faulty.injector)
    other = open_plane(faulty.inner, MemoryObjectStore())
    universe = UniverseId.new()

    def interleave() -> None:
        other.append_sequenced(
            universe, [], [], tracking=("theirs", 1), app_data={b"k": b"theirs", b"t": b"1"}
        )

    faulty.injector.fail_commit(
        1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=applied, interleave=interleave
    )
    done = plane.append_sequenced(
        universe, [], [], tracking=("up", 1), app_data={b"k": b"mine", b"m": b"1"}
    )
    assert done.first_position is None
    assert [kind for kind, _ in faulty.injector.log] == ["commit"]
    assert plane.tracking_position(universe, "up") == 1
    mine_last = not applied  # a retry that had not applied commits after the other client
    assert plane.read_app_range(universe) == [
        (b"k", b"mine" if mine_last else b"theirs"),
        (b"m", b"1"),
        (b"t", b"1"),
    ]


def test_a_universe_holding_application_data_is_listed_and_walked(
    plane: Plane, universe: UniverseId
) -> None:
    """Its first key is an application key (``"app"`` sorts before the plane's own), whose
    bytes after the subspace are no tuple: listing universes reads only the id."""
    plane.append_batches(universe, [], app_data={b"page/1": b"{}", b"\xff\x00": b""})
    assert universe in set(plane.universes())
    assert list(plane.worlds(universe)) == []


def test_an_empty_mapping_is_not_a_write(plane: Plane, universe: UniverseId) -> None:
    with pytest.raises(Validation, match=r"^batches"):
        plane.append_batches(universe, [], app_data={})
    with pytest.raises(Validation, match=r"^batches"):
        plane.append_sequenced(universe, [], [], app_data={})
    assert universe not in set(plane.universes())


def test_a_range_pages_from_after_a_key_of_the_largest_size(
    plane: Plane, universe: UniverseId
) -> None:
    keys = [b"k" * MAX_APP_KEY_BYTES, b"k" * (MAX_APP_KEY_BYTES - 1) + b"l"]
    plane.append_batches(universe, [], app_data=dict.fromkeys(keys, b""))
    first = plane.read_app_range(universe, limit=1)
    assert first == [(keys[0], b"")]
    assert plane.read_app_range(universe, first[-1][0] + b"\x00") == [(keys[1], b"")]


def test_over_the_budget_with_its_data_names_the_data(universe: UniverseId) -> None:
    engine = MemoryEngine()
    engine.size_limit = 300_000
    plane = open_plane(engine, MemoryObjectStore())
    world = WorldId.new()
    plane.create_world(universe, world)
    data = {bytes([i]) * 8: b"v" * 60_000 for i in range(1, 6)}
    with pytest.raises(Validation, match=r"^app_data: appending 1 entries"):
        plane.append_batches(universe, [(world, 0, [b"e"])], app_data=data)
    assert plane.head(universe, world) == 0 and plane.read_app_range(universe) == []
