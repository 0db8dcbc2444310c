"""The keyspace: fast key paths equal the general tuple encoding; key order is logical order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persistence import fdbtuple
from persistence.errors import CorruptRecord, Validation
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.keyspace import WorldKeys, seq_in_key

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


@given(st.binary(min_size=12, max_size=12), st.binary(max_size=3))
def test_a_sequence_is_read_from_a_key_as_the_tuple_decodes_it(raw: bytes, tail: bytes) -> None:
    """The direct read of a key that is its prefix then one versionstamp agrees with the
    tuple decoding, on every 12 bytes (an incomplete stamp is refused either way); keys with
    anything after the stamp go to the decoder and are corrupt."""
    keys = WorldKeys(UniverseId.new(), WorldId.new())
    prefix = keys.inbox_prefix_len()
    key = keys.inbox_item(InboxSeq(raw)) if raw[:10] != b"\xff" * 10 else b""
    if key:
        assert key == _item_prefix(keys) + b"\x33" + raw
        assert seq_in_key(key, prefix, "x") == InboxSeq(raw)
    if tail:
        with pytest.raises(CorruptRecord):
            seq_in_key(_item_prefix(keys) + b"\x33" + raw + tail, prefix, "x")
    incomplete = _item_prefix(keys) + b"\x33" + b"\xff" * 10 + raw[10:]
    with pytest.raises(Validation):
        seq_in_key(incomplete, prefix, "x")


def _item_prefix(keys: WorldKeys) -> bytes:
    """What precedes the versionstamp in the keys of the world's inbox items."""
    return keys.inbox_after(None)[0][:-1]
