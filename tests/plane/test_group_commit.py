"""Group commit: ``append_batches`` appends to several worlds in one transaction, all or
nothing, on every engine; the conflict names the world that moved; worlds can be created in
the same transaction; a retry after an applied ``commit_unknown_result`` reports its own
outcome whatever other clients committed in between."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors
from persistence.errors import EngineError, HeadAdvanced, Validation, WorldNotFound
from persistence.futures import drive
from persistence.ids import Hash, UniverseId, WorldId
from persistence.keyspace import UniverseKeys
from persistence.plane import EMPTY_MANIFEST, GENESIS_STATE, Plane, PlaneConfig
from persistence.protocols import budget
from persistence.protocols.calls import REPLAYS
from persistence.protocols.log import Sequencing
from segments import open_plane


def journal(plane: Plane, u: UniverseId, w: WorldId) -> list[bytes]:
    return [entry for _, entry in plane.read_range(u, w, 1, plane.head(u, w))]


def made(plane: Plane, u: UniverseId, count: int) -> list[WorldId]:
    worlds = [WorldId.new() for _ in range(count)]
    for w in worlds:
        plane.create_world(u, w)
    return worlds


def test_appends_to_every_world_in_one_call(plane: Plane, universe: UniverseId) -> None:
    a, b, c = made(plane, universe, 3)
    plane.append_batch(universe, b, 0, [b"b1"])
    firsts = plane.append_batches(
        universe, [(a, 0, [b"a1", b"a2"]), (b, 1, [b"b2"]), (c, 0, [b"c1"])]
    )
    assert firsts == [1, 2, 1]
    assert journal(plane, universe, a) == [b"a1", b"a2"]
    assert journal(plane, universe, b) == [b"b1", b"b2"]
    assert journal(plane, universe, c) == [b"c1"]


def test_a_moved_head_refuses_the_whole_group_and_names_its_world(
    plane: Plane, universe: UniverseId
) -> None:
    a, b = made(plane, universe, 2)
    plane.append_batch(universe, b, 0, [b"other writer"])
    with pytest.raises(HeadAdvanced) as refused:
        plane.append_batches(universe, [(a, 0, [b"a1"]), (b, 0, [b"b1"])])
    assert (refused.value.world, refused.value.expected, refused.value.actual) == (b, 0, 1)
    assert str(b) in str(refused.value)
    assert plane.head(universe, a) == 0  # nothing of the group was written
    assert journal(plane, universe, b) == [b"other writer"]


def test_a_missing_world_refuses_the_group(plane: Plane, universe: UniverseId) -> None:
    (a,) = made(plane, universe, 1)
    ghost = WorldId.new()
    with pytest.raises(WorldNotFound):
        plane.append_batches(universe, [(a, 0, [b"a1"]), (ghost, 0, [b"g1"])])
    assert plane.head(universe, a) == 0
    with pytest.raises(WorldNotFound):  # created only where the batch expects an empty journal
        plane.append_batches(universe, [(ghost, 1, [b"g2"])], create_missing=True)
    with pytest.raises(WorldNotFound):
        plane.head(universe, ghost)


def test_create_missing_makes_worlds_as_create_world_does(
    plane: Plane, universe: UniverseId
) -> None:
    (old,) = made(plane, universe, 1)
    new = WorldId.new()
    firsts = plane.append_batches(
        universe, [(old, 0, [b"o1"]), (new, 0, [b"n1", b"n2"])], create_missing=True
    )
    assert firsts == [1, 1]
    assert journal(plane, universe, new) == [b"n1", b"n2"]
    assert new in set(plane.worlds(universe))
    baseline = plane.active_baseline(universe, new)
    assert baseline == plane.active_baseline(universe, old)  # the same genesis
    assert plane.list_snapshots(universe, new) == [baseline]
    assert plane.get(universe, baseline.snapshot_ref) == GENESIS_STATE
    assert plane.get(universe, baseline.manifest_hash) == EMPTY_MANIFEST
    plane.world_meta(universe, new)  # its meta is stored
    # existing worlds are appended to, not re-created
    assert plane.append_batches(universe, [(new, 2, [b"n3"])], create_missing=True) == [3]


def test_create_missing_in_a_new_universe_stores_the_genesis_blobs(engine: object) -> None:
    for threshold in (0, 16 * 1024):  # genesis blobs external, then inline
        plane = open_plane(
            engine,  # type: ignore[arg-type]
            MemoryObjectStore(),
            PlaneConfig(inline_threshold=threshold),
        )
        u, w = UniverseId.new(), WorldId.new()
        assert plane.append_batches(u, [(w, 0, [b"first"])], create_missing=True) == [1]
        assert list(plane.universes()).count(u) == 1
        assert plane.blob_meta(u, Hash.of(GENESIS_STATE)).inline_bytes == (
            GENESIS_STATE if threshold else None
        )
        assert plane.get(u, Hash.of(EMPTY_MANIFEST)) == EMPTY_MANIFEST


@pytest.mark.parametrize(
    ("batches", "field"),
    [
        ([], "batches"),
        ("not a list", "batches"),
        ([("w", 0, [b"x"])], "batches[0].world"),
        ([(None, 0)], "batches[0]"),
        (["triple"], "batches[0]"),
    ],
)
def test_malformed_groups_name_the_field(
    plane: Plane, universe: UniverseId, batches: object, field: str
) -> None:
    with pytest.raises(Validation) as refused:
        plane.append_batches(universe, batches)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_bad_batches_are_refused_before_anything_is_written(
    plane: Plane, universe: UniverseId
) -> None:
    a, b = made(plane, universe, 2)
    cases: list[tuple[object, str]] = [
        ([(a, 0, [b"x"]), (a, 0, [b"y"])], "batches[1].world"),
        ([(a, 0, [b"x"]), (b, -1, [b"y"])], "batches[1].expected_head"),
        ([(a, 0, [b"x"]), (b, 0, [])], "batches[1].entries"),
        ([(a, 0, [b"x"]), (b, 0, ["text"])], "batches[1].entries[0]"),
        ([(a, 0, [b"x"]), (b, 2**64 - 1, [b"y"])], "batches[1].expected_head"),
    ]
    for batches, field in cases:
        with pytest.raises(Validation) as refused:
            plane.append_batches(universe, batches)  # type: ignore[arg-type]
        assert refused.value.field == field
    with pytest.raises(Validation) as refused:
        plane.append_batches(universe, [(a, 0, [b"x"])], create_missing=1)  # type: ignore[arg-type]
    assert refused.value.field == "create_missing"
    assert plane.head(universe, a) == plane.head(universe, b) == 0


def test_the_group_counts_against_one_append_limits(engine: object) -> None:
    config = PlaneConfig(max_batch_entries=4, max_batch_bytes=100)
    plane = open_plane(engine, MemoryObjectStore(), config)  # type: ignore[arg-type]
    u = UniverseId.new()
    a, b, c = made(plane, u, 3)
    with pytest.raises(Validation, match="5 entries > max 4"):
        plane.append_batches(u, [(a, 0, [b"1", b"2"]), (b, 0, [b"3", b"4"]), (c, 0, [b"5"])])
    with pytest.raises(Validation, match="bytes > max 100"):
        plane.append_batches(u, [(a, 0, [b"x" * 60]), (b, 0, [b"y" * 60])])
    assert [plane.head(u, w) for w in (a, b, c)] == [0, 0, 0]


def test_the_group_counts_against_the_transaction_budget(engine: object) -> None:
    plane = open_plane(engine, MemoryObjectStore())  # type: ignore[arg-type]
    u = UniverseId.new()
    worlds = made(plane, u, 3)
    entry = b"e" * 90_000  # three worlds of 35 entries: 9.45 MB of values, over the budget
    batches = [(w, 0, [entry] * 35) for w in worlds]
    config = PlaneConfig(max_batch_entries=200, max_batch_bytes=16 * 2**20)
    plane = open_plane(engine, MemoryObjectStore(), config)  # type: ignore[arg-type]
    with pytest.raises(Validation) as refused:
        plane.append_batches(u, batches)
    assert refused.value.field == "batches" and "3 worlds" in str(refused.value)
    assert [plane.head(u, w) for w in worlds] == [0, 0, 0]


# ------------------------------------------------------------ exactly once under faults


def faulty() -> tuple[FaultInjector, Plane, Plane, UniverseId]:
    injector = FaultInjector()
    engine = FaultyEngine(MemoryEngine(), injector)
    objects = MemoryObjectStore()
    return (
        injector,
        open_plane(engine, objects, hooks=injector),
        open_plane(engine.inner, objects),
        UniverseId.new(),
    )


@pytest.mark.parametrize("create", [False, True])
def test_a_retry_after_an_applied_1021_reports_its_own_group(create: bool) -> None:
    injector, plane, other, u = faulty()
    a = WorldId.new()
    other.create_world(u, a)
    b = WorldId.new()
    if not create:
        other.create_world(u, b)

    def interleave() -> None:  # both heads move before the retry
        other.append_batch(u, a, 1, [b"other a"])
        other.append_batch(u, b, 1, [b"other b"])

    injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=True, interleave=interleave)
    replays = REPLAYS["append group"]
    firsts = plane.append_batches(u, [(a, 0, [b"a1"]), (b, 0, [b"b1"])], create_missing=create)
    assert firsts == [1, 1]
    assert REPLAYS["append group"] == replays + 1
    assert journal(other, u, a) == [b"a1", b"other a"]
    assert journal(other, u, b) == [b"b1", b"other b"]


def test_a_retry_after_a_1021_that_did_not_apply_appends_once() -> None:
    injector, plane, other, u = faulty()
    a, b = made(other, u, 2)
    injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT, applied=False)
    assert plane.append_batches(u, [(a, 0, [b"a1"]), (b, 0, [b"b1"])]) == [1, 1]
    assert journal(other, u, a) == [b"a1"] and journal(other, u, b) == [b"b1"]


def test_a_group_that_did_not_apply_conflicts_with_the_interleaved_writer() -> None:
    injector, plane, other, u = faulty()
    a, b = made(other, u, 2)
    injector.fail_commit(
        1,
        fdb_errors.COMMIT_UNKNOWN_RESULT,
        applied=False,
        interleave=lambda: other.append_batch(u, b, 0, [b"other b"]),
    )
    with pytest.raises(HeadAdvanced) as refused:
        plane.append_batches(u, [(a, 0, [b"a1"]), (b, 0, [b"b1"])])
    assert refused.value.world == b
    assert journal(other, u, a) == [] and journal(other, u, b) == [b"other b"]


def test_a_timed_out_group_is_reported_as_unknown() -> None:
    injector, plane, other, u = faulty()
    a, b = made(other, u, 2)
    injector.fail_commit(1, fdb_errors.TRANSACTION_TIMED_OUT, applied=True)
    with pytest.raises(EngineError) as unknown:
        plane.append_batches(u, [(a, 0, [b"a1"]), (b, 0, [b"b1"])])
    assert unknown.value.code == fdb_errors.TRANSACTION_TIMED_OUT
    # the host redoes the group at the heads it expected: refused, and it reads its entries
    with pytest.raises(HeadAdvanced):
        plane.append_batches(u, [(a, 0, [b"a1"]), (b, 0, [b"b1"])])
    assert journal(other, u, a) == [b"a1"] and journal(other, u, b) == [b"b1"]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(
        st.lists(st.sampled_from([0, 1, 100, 90_000, 90_001, 200_000]), min_size=1, max_size=5),
        min_size=1,
        max_size=4,
    ),
    heights=st.sampled_from([0, 255, 2**32, 2**63 - 10, 2**64 - 300_000]),
    tag=st.sampled_from(["t", "\U0001f600" * 1024, "x" * 1024]),
    tracking=st.sampled_from([None, "n", "\U0001f600" * 1024]),
)
def test_the_quick_budget_bound_is_never_below_the_exact_cost(
    sizes: list[list[int]], heights: int, tag: str, tracking: str | None
) -> None:
    """The plane computes a group's exact cost only when this bound is over the budget:
    it must bound the cost of the biggest keys and the creation of every world."""
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u = UniverseKeys(UniverseId.new())
    batches = [[bytes(n) for n in entries] for entries in sizes]
    tags = [[tag] * len(entries) for entries in batches]
    parts = [(u.world(WorldId.new()), heights + 1, entries) for entries in batches]
    sequencing = Sequencing(tags, None if tracking is None else (tracking, 2**64 - 1))
    exact = budget.group_append_cost(u, parts, drive(plane._operations.creation(u.universe)))
    exact += budget.sequencing_cost(u, sequencing)
    assert budget.group_append_bound(batches, tags) >= exact
