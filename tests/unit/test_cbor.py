"""Canonical CBOR: RFC 8949 vectors, determinism, strict decoding."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persistence import cbor
from persistence.errors import CorruptRecord, Validation

# RFC 8949 Appendix A, the entries inside our data model.
RFC8949_VECTORS = [
    (0, "00"),
    (1, "01"),
    (10, "0a"),
    (23, "17"),
    (24, "1818"),
    (25, "1819"),
    (100, "1864"),
    (1000, "1903e8"),
    (1000000, "1a000f4240"),
    (1000000000000, "1b000000e8d4a51000"),
    (18446744073709551615, "1bffffffffffffffff"),
    (-18446744073709551616, "3bffffffffffffffff"),
    (-1, "20"),
    (-10, "29"),
    (-100, "3863"),
    (-1000, "3903e7"),
    (False, "f4"),
    (True, "f5"),
    (None, "f6"),
    (b"", "40"),
    (b"\x01\x02\x03\x04", "4401020304"),
    ("", "60"),
    ("a", "6161"),
    ("IETF", "6449455446"),
    ('"\\', "62225c"),
    ("\u00fc", "62c3bc"),
    ("\u6c34", "63e6b0b4"),
    ("\U00010151", "64f0908591"),
    ([], "80"),
    ([1, 2, 3], "83010203"),
    ([1, [2, 3], [4, 5]], "8301820203820405"),
    (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819"),
    ({}, "a0"),
    ({1: 2, 3: 4}, "a201020304"),
    ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
    (["a", {"b": "c"}], "826161a161626163"),
    (
        {"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"},
        "a56161614161626142616361436164614461656145",
    ),
]


@pytest.mark.parametrize(("value", "expected"), RFC8949_VECTORS)
def test_rfc8949_vectors_encode_and_decode(value: object, expected: str) -> None:
    assert cbor.encode(value).hex() == expected
    assert cbor.decode(bytes.fromhex(expected)) == value


def test_map_key_order_is_bytewise_not_insertion_order() -> None:
    forward = {"b": 1, "a": 2, "aa": 3, "z" * 30: 4, "y" * 24: 5}
    backward = dict(reversed(list(forward.items())))
    assert cbor.encode(forward) == cbor.encode(backward)
    # RFC 8949 4.2.1: keys sorted by their encoded bytes.
    encoded_keys = [cbor.encode(k) for k in cbor.decode(cbor.encode(forward))]
    assert encoded_keys == sorted(encoded_keys)


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64 - 1)
    | st.binary(max_size=40)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=10), children, max_size=5)
        | st.dictionaries(st.integers(min_value=0, max_value=2**64 - 1), children, max_size=5)
    ),
    max_leaves=20,
)


@given(values)
def test_round_trip_and_determinism(value: object) -> None:
    data = cbor.encode(value)
    assert cbor.decode(data) == value
    assert cbor.encode(cbor.decode(data)) == data


@given(st.dictionaries(st.text(max_size=8), st.integers(0, 2**64 - 1), min_size=2, max_size=8))
def test_insertion_order_never_changes_bytes(mapping: dict[str, int]) -> None:
    items = list(mapping.items())
    assert cbor.encode(dict(items)) == cbor.encode(dict(reversed(items)))


@pytest.mark.parametrize(
    ("hex_doc", "why"),
    [
        ("1817", "non-shortest integer head"),
        ("190017", "non-shortest integer head"),
        ("a2616201616102", "map keys out of order"),
        ("a2616101616102", "duplicate map key"),
        ("5f42010243030405ff", "indefinite-length bytes"),
        ("9fff", "indefinite-length array"),
        ("f93c00", "float"),
        ("c11a514b67b0", "tag"),
        ("c249010000000000000000", "bignum"),
        ("f7", "undefined"),
        ("0000", "trailing bytes"),
        ("62c3", "truncated"),
        ("", "empty"),
        ("a201020103", "duplicate integer key"),
        ("a2016161616102", "mixed key types"),
    ],
)
def test_strict_decoder_rejects(hex_doc: str, why: str) -> None:
    with pytest.raises(cbor.NotCanonical):
        cbor.decode(bytes.fromhex(hex_doc))


@pytest.mark.parametrize(
    "value",
    [1.5, 2**64, -(2**64) - 1, {1: "a", "b": 2}, {-1: 0}, object(), {1, 2}, bytearray(b"x")],
)
def test_encoder_rejects_values_outside_the_model(value: object) -> None:
    with pytest.raises(cbor.NotCanonical):
        cbor.encode(value)


def test_stored_and_caller_wrappers_raise_typed_errors() -> None:
    with pytest.raises(CorruptRecord) as stored:
        cbor.decode_stored(b"\x18\x17", "snapshot record")
    assert "snapshot record" in str(stored.value)
    with pytest.raises(Validation) as caller:
        cbor.check_canonical(b"\x18\x17", "value_cbor")
    assert caller.value.field == "value_cbor"
    with pytest.raises(Validation):
        cbor.check_canonical("not bytes", "value_cbor")


@pytest.mark.parametrize(
    "value",
    [0, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**64 - 1, True, False, b"", "", "é"]
    + [b"x" * n for n in (23, 24, 255, 256, 65_535, 65_536)]
    + ["ü" * n for n in (11, 12, 127, 128)],
    ids=lambda value: (
        f"{type(value).__name__}-{len(value) if isinstance(value, bytes | str) else value}"
    ),
)
def test_scalars_written_directly_are_cbor2s(value: object) -> None:
    """The directly built encoding of a scalar is cbor2's canonical one, at every head size."""
    assert cbor.scalar(value) == cbor2.dumps(value, canonical=True)


@pytest.mark.parametrize("value", [-1, 2**64, 1.5, None, [], {}, bytearray(b"x")], ids=repr)
def test_other_values_are_not_written_directly(value: object) -> None:
    assert cbor.scalar(value) is None


def _walked_decode(raw: bytes) -> object:
    """The strict decoder without its direct check: walk the value, encode it with cbor2,
    compare (what :func:`cbor.decode` does for values it does not build directly)."""
    try:
        value = cbor2.loads(raw, allow_indefinite=False, allow_duplicate_keys=False)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise cbor.NotCanonical(str(exc)) from None
    cbor._check(value, 0)
    if cbor2.dumps(value, canonical=True) != raw:
        raise cbor.NotCanonical("not canonical")
    return value


_SCALARS = st.one_of(
    st.integers(-(2**64), 2**64 - 1),
    st.booleans(),
    st.none(),
    st.binary(max_size=300),
    st.text(max_size=30),
)
_FLAT = st.one_of(_SCALARS, st.dictionaries(st.text(max_size=30), _SCALARS, max_size=6))


@given(_FLAT, st.integers(0, 4), st.data())
@settings(max_examples=500)
def test_the_direct_check_accepts_and_refuses_what_the_walk_does(
    value: object, mutation: int, data: st.DataObject
) -> None:
    """Scalars and flat maps are checked by building their encoding directly; for canonical
    documents and for each way a document can miss it (entries out of order, a longer
    head than needed, trailing bytes, any changed byte) the outcome is the walk's."""
    raw = bytes(cbor2.dumps(value, canonical=True))
    if mutation == 1 and isinstance(value, dict) and len(value) > 1:
        raw = bytes(cbor2.dumps(dict(reversed(list(value.items())))))  # insertion order
    elif mutation == 2:
        raw = raw + b"\x00"
    elif mutation == 3 and raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    elif (
        mutation == 4 and isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24
    ):
        raw = b"\x18" + bytes([value])  # a one-byte head where none is needed
    try:
        expected: object = _walked_decode(raw)
    except cbor.NotCanonical:
        with pytest.raises(cbor.NotCanonical):
            cbor.decode(raw)
    else:
        assert cbor.decode(raw) == expected
