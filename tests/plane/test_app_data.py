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
from persistence.plane import AppTransaction, Plane, PlaneConfig
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


# ---------------------------------------------------------------- the application's transactions


def test_a_transaction_of_the_application_reads_and_writes_its_keys(
    plane: Plane, universe: UniverseId
) -> None:
    plane.append_batches(universe, [], app_data={b"a": b"1", b"b": b"2", b"c": b"3"})

    async def body(tr: AppTransaction) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        one, rows = tr.get(b"a"), tr.get_range(b"b", None)  # issued together
        tr.set(b"d", b"4")
        tr.clear(b"c")
        tr.clear_range(b"a", b"b")
        return await one, await rows

    assert plane.transact_app(universe, body) == (b"1", [(b"b", b"2"), (b"c", b"3")])
    assert plane.read_app_range(universe) == [(b"b", b"2"), (b"d", b"4")]

    async def reverse(tr: AppTransaction) -> list[tuple[bytes, bytes]]:
        return await tr.get_range(b"", b"z", limit=1, reverse=True, snapshot=True)

    assert plane.transact_app(universe, reverse) == [(b"d", b"4")]
    assert plane.transact_app(UniverseId.new(), reverse) == []  # another universe's own


def test_versionstamped_keys_sort_in_commit_order_and_the_stamp_is_returned(
    plane: Plane, universe: UniverseId
) -> None:
    stamps: list[bytes] = []
    for value in (b"first", b"second", b"third"):

        async def body(tr: AppTransaction, value: bytes = value) -> str:
            tr.set_versionstamped_key(b"q" + bytes(10) + b"/0", 1, value)
            tr.set_versionstamped_key(b"q" + bytes(10) + b"/1", 1, value + b"!")
            return "done"

        result, stamp = plane.transact_app_stamped(universe, body)
        assert result == "done" and stamp is not None and len(stamp) == 10
        stamps.append(stamp)
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    rows = plane.read_app_range(universe, b"q", b"r")
    assert rows == [
        (b"q" + stamp + suffix, value + extra)
        for stamp, value in zip(stamps, (b"first", b"second", b"third"), strict=True)
        for suffix, extra in ((b"/0", b""), (b"/1", b"!"))
    ]


def _racing(key_of_other: bytes, stamped: bool) -> tuple[Plane, UniverseId, list[int]]:
    """A body that reads the range ``p..p\\xff`` with a conflict, while another client
    writes ``key_of_other`` (versionstamped or not) before its commit, once."""
    engine = MemoryEngine()
    plane, other = open_plane(engine, MemoryObjectStore()), open_plane(engine, MemoryObjectStore())
    universe = UniverseId.new()
    runs: list[int] = []

    async def theirs(tr: AppTransaction) -> None:
        if stamped:
            tr.set_versionstamped_key(key_of_other + bytes(10), len(key_of_other), b"")
        else:
            tr.set(key_of_other, b"")

    async def mine(tr: AppTransaction) -> None:
        rows = await tr.get_range(b"p", b"p\xff")
        runs.append(len(rows))
        if len(runs) == 1:
            other.transact_app(universe, theirs)  # commits between the read and the commit
        tr.set(b"mine", b"")

    plane.transact_app(universe, mine)
    return plane, universe, runs


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "versionstamped"])
def test_a_write_into_a_range_read_with_a_conflict_makes_the_body_run_again(
    stamped: bool,
) -> None:
    plane, universe, runs = _racing(b"p/x", stamped)
    assert runs == [0, 1]  # the second run saw the other client's key
    assert plane.read_app_data(universe, b"mine") == b""


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "versionstamped"])
def test_a_write_outside_the_ranges_read_does_not_conflict(stamped: bool) -> None:
    plane, universe, runs = _racing(b"r/x", stamped)
    assert runs == [0]
    assert len(plane.read_app_range(universe)) == 2


def test_a_snapshot_read_does_not_conflict() -> None:
    engine = MemoryEngine()
    plane, other = open_plane(engine, MemoryObjectStore()), open_plane(engine, MemoryObjectStore())
    universe = UniverseId.new()
    runs: list[bytes | None] = []

    async def theirs(tr: AppTransaction) -> None:
        tr.set(b"k", b"theirs")

    async def mine(tr: AppTransaction) -> None:
        runs.append(await tr.get(b"k", snapshot=True))
        if len(runs) == 1:
            other.transact_app(universe, theirs)
        tr.set(b"mine", b"")

    plane.transact_app(universe, mine)
    assert runs == [None]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda tr: tr.get(b""), "key"),
        (lambda tr: tr.get(b"k" * (MAX_APP_KEY_BYTES + 1)), "key"),
        (lambda tr: tr.get("k"), "key"),
        (lambda tr: tr.get_range(b"k" * (MAX_APP_KEY_BYTES + 2), None), "begin"),
        (lambda tr: tr.get_range(b"a", "z"), "end"),
        (lambda tr: tr.get_range(b"a", None, limit=-1), "limit"),
        (lambda tr: tr.set(b"k", "v"), "value"),
        (lambda tr: tr.set(b"k", b"v" * (MAX_APP_VALUE_BYTES + 1)), "value"),
        (lambda tr: tr.clear(b""), "key"),
        (lambda tr: tr.clear_range(b"a", None), "end"),
        (lambda tr: tr.set_versionstamped_key(b"short", 0, b""), "key"),
        (lambda tr: tr.set_versionstamped_key(bytes(12), 3, b""), "offset"),
        (lambda tr: tr.set_versionstamped_key(bytes(12), True, b""), "offset"),
        (lambda tr: tr.set_versionstamped_key(bytes(12), 0, None), "value"),
    ],
)
def test_bad_arguments_inside_a_body_are_refused_and_nothing_is_written(
    plane: Plane, universe: UniverseId, call: Any, field: str
) -> None:
    async def body(tr: AppTransaction) -> None:
        tr.set(b"before", b"1")
        call(tr)

    with pytest.raises(Validation) as caught:
        plane.transact_app(universe, body)
    assert caught.value.field == field
    assert plane.read_app_range(universe) == []


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_the_body_runs_again_after_an_unknown_result(applied: bool) -> None:
    """As documented: a body may run again after a commit that applied, so one that must
    not repeat its writes reads a key of its own call first."""
    faulty = FaultyEngine(MemoryEngine(), FaultInjector(seed=5))
    plane = open_plane(faulty, MemoryObjectStore(), hooks=faulty.injector)
    universe = UniverseId.new()
    runs: list[bytes | None] = []

    async def body(tr: AppTransaction) -> bool:
        done = await tr.get(b"call-1")
        runs.append(done)
        if done is not None:
            return False
        tr.set(b"call-1", b"")
        tr.set_versionstamped_key(b"q" + bytes(10), 1, b"event")
        return True

    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=applied)
    assert plane.transact_app(universe, body) is not applied
    assert runs == [None, b"" if applied else None]
    assert len(plane.read_app_range(universe, b"q", b"r")) == 1


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_stamped_call_whose_committed_attempt_wrote_nothing_has_no_stamp(
    applied: bool,
) -> None:
    """The documented idempotent body, stamped: after an unknown result that applied, the
    re-run finds its key and writes nothing, so the call returns what it returned and no
    stamp (the stamp is the key's, written by the attempt that applied); after one that did
    not apply, the re-run writes and the call returns its stamp."""
    faulty = FaultyEngine(MemoryEngine(), FaultInjector(seed=5))
    plane = open_plane(faulty, MemoryObjectStore(), hooks=faulty.injector)
    universe = UniverseId.new()

    async def body(tr: AppTransaction) -> bool:
        if await tr.get(b"call-1") is not None:
            return False
        tr.set(b"call-1", b"")
        tr.set_versionstamped_key(b"q" + bytes(10), 1, b"event")
        return True

    faulty.injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=applied)
    result, stamp = plane.transact_app_stamped(universe, body)
    [(key, _)] = plane.read_app_range(universe, b"q", b"r")
    assert (result, stamp) == ((False, None) if applied else (True, key[1:]))
