"""Our tuple encoding is byte-identical to fdb.tuple and order-preserving."""

from __future__ import annotations

import struct
import types
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persistence import fdbtuple
from persistence.fdbtuple import Versionstamp

fdb_tuple = pytest.importorskip("fdb.tuple", reason="foundationdb bindings not installed")

elements = st.one_of(
    st.none(),
    st.binary(max_size=12),
    st.text(max_size=12),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.booleans(),
    st.uuids(),
)
tuples = st.lists(elements, max_size=6).map(tuple)


@given(tuples)
def test_pack_matches_fdb_tuple(items: tuple[object, ...]) -> None:
    assert fdbtuple.pack(items) == fdb_tuple.pack(items)  # type: ignore[arg-type]
    assert fdbtuple.unpack(fdbtuple.pack(items)) == items  # type: ignore[arg-type]


@given(st.binary(max_size=40))
def test_pack_bytes_is_pack_of_one_byte_string(raw: bytes) -> None:
    assert fdbtuple.pack_bytes(raw) == fdb_tuple.pack((raw,))


def _sort_key(items: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(fdb_tuple.pack((x,)) for x in items)


@given(st.lists(tuples, min_size=2, max_size=8))
def test_byte_order_equals_tuple_order(many: list[tuple[object, ...]]) -> None:
    by_bytes = sorted(many, key=fdbtuple.pack)  # type: ignore[arg-type]
    assert [fdbtuple.pack(t) for t in by_bytes] == sorted(fdbtuple.pack(t) for t in many)  # type: ignore[arg-type]
    # Byte order agrees with FoundationDB's own tuple comparison.
    assert sorted(many, key=fdb_tuple.pack) == by_bytes


@given(st.lists(st.integers(min_value=-(2**80), max_value=2**80), min_size=2))
def test_integer_order(ints: list[int]) -> None:
    assert sorted(ints) == sorted(ints, key=lambda n: fdbtuple.pack((n,)))


def test_versionstamp_matches_fdb_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    # fdb.tuple consults fdb.impl.Value when packing versionstamps; it needs the C library.
    # Give it a stand-in type so it can run here and compare bytes.
    import fdb

    monkeypatch.setattr(fdb, "impl", types.SimpleNamespace(Value=type("V", (), {})), raising=False)
    prefix_items = ("u", uuid.UUID(int=7), "inbox")
    for tr, user in [(None, 0), (None, 513), (b"\x00" * 9 + b"\x01", 3)]:
        ours = Versionstamp(tr, user)
        theirs = fdb_tuple.Versionstamp(tr, user)
        if tr is None:
            assert fdbtuple.pack_with_versionstamp((*prefix_items, ours)) == (
                fdb_tuple.pack_with_versionstamp((*prefix_items, theirs))
            )
        else:
            assert fdbtuple.pack((*prefix_items, ours)) == fdb_tuple.pack((*prefix_items, theirs))


def test_pack_with_versionstamp_offset_points_at_placeholder() -> None:
    packed = fdbtuple.pack_with_versionstamp(("x", Versionstamp(None, 9)))
    key, offset = packed[:-4], struct.unpack("<I", packed[-4:])[0]
    assert key[offset : offset + 10] == fdbtuple.INCOMPLETE
    assert key[offset + 10 : offset + 12] == b"\x00\x09"


def test_versionstamp_misuse_is_refused() -> None:
    with pytest.raises(ValueError):
        fdbtuple.pack((Versionstamp(),))
    with pytest.raises(ValueError):
        fdbtuple.pack_with_versionstamp(("a",))
    with pytest.raises(ValueError):
        fdbtuple.pack_with_versionstamp((Versionstamp(), Versionstamp()))
    with pytest.raises(ValueError):
        fdbtuple.pack((2**2048,))
    with pytest.raises(TypeError):
        fdbtuple.pack((1.5,))  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", [b"\x02abc", b"\x16\x01", b"\x30\x00", b"\x99", b"\x33\x00\x01"])
def test_unpack_rejects_malformed(raw: bytes) -> None:
    with pytest.raises(ValueError):
        fdbtuple.unpack(raw)


def test_range_and_strinc() -> None:
    prefix = fdbtuple.pack(("a",))
    begin, end = fdbtuple.range_of(prefix)
    inside = fdbtuple.pack(("a", 5))
    assert begin <= inside < end
    assert fdbtuple.strinc(b"ab\xff") == b"ac"
    with pytest.raises(ValueError):
        fdbtuple.strinc(b"\xff\xff")
