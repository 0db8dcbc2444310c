"""The keyspace: fast key paths equal the general tuple encoding; key order is logical order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from persistence import fdbtuple
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys

KEYS = WorldKeys(UniverseId.new(), WorldId.new())
BASE = ("u", KEYS.universe.uuid, "w", KEYS.world.uuid, "journal")


@given(st.integers(min_value=0, max_value=2**70))
def test_entry_keys_equal_the_tuple_encoding(height: int) -> None:
    assert KEYS.entry_chunk(height, 0, 1) == fdbtuple.pack((*BASE, "e", height, 0, 1))
    assert KEYS.entry_chunk(height, 2, 5) == fdbtuple.pack((*BASE, "e", height, 2, 5))
    begin, end = KEYS.entries_between(height, height + 3)
    assert begin == fdbtuple.pack((*BASE, "e", height))
    assert end == fdbtuple.pack((*BASE, "e", height + 4))


def test_head_key() -> None:
    assert KEYS.head() == fdbtuple.pack((*BASE, "head"))


@given(
    st.lists(st.integers(min_value=1, max_value=2**64 - 2), min_size=2, max_size=20, unique=True)
)
def test_entry_keys_sort_by_height_then_chunk(heights: list[int]) -> None:
    keys = [KEYS.entry_chunk(h, i, 3) for h in heights for i in range(3)]
    assert sorted(keys) == [KEYS.entry_chunk(h, i, 3) for h in sorted(heights) for i in range(3)]


def test_world_ranges_do_not_overlap() -> None:
    other = WorldKeys(KEYS.universe, WorldId.new())
    a, b = KEYS.all(), other.all()
    assert a[1] <= b[0] or b[1] <= a[0]


def test_call_keys_equal_the_tuple_encoding() -> None:
    world = ("u", KEYS.universe.uuid, "w", KEYS.world.uuid)
    assert KEYS.call(b"id") == fdbtuple.pack((*world, "calls", b"id"))
    assert KEYS.calls() == fdbtuple.range_of(fdbtuple.pack((*world, "calls")))
