"""Identifier parsing: valid forms round-trip, malformed input is a Validation naming the field."""

from __future__ import annotations

import uuid

import pytest

from persistence.errors import Validation
from persistence.ids import Hash, InboxSeq, SegmentId, UniverseId, WorldId, check_height


def test_uuid_ids_round_trip_and_are_distinct_types() -> None:
    text = "0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5a"
    assert str(UniverseId.parse(text)) == text
    assert str(WorldId.parse(text)) == text
    assert UniverseId.parse(text) != WorldId.parse(text)  # type: ignore[comparison-overlap]
    assert UniverseId(uuid.UUID(text)) == UniverseId.parse(text)
    assert UniverseId.parse(text.upper()) == UniverseId.parse(text)  # hex in either case


NON_CANONICAL_UUID_TEXT = [
    "",
    "not-a-uuid",
    "0b0c3b1e-55f1-4c8e-9d7a",
    "{0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5a}",
    "urn:uuid:0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5a",
    "0b0c3b1e55f14c8e9d7a6c1c2f3e4d5a",
    "0b0c3b1e-55f14c8e-9d7a-6c1c2f3e4d5a",
    "0b0c3b1-e55f1-4c8e-9d7a-6c1c2f3e4d5a",
    " 0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5a",
    "0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5a\n",
    "\uff11" * 8 + "-55f1-4c8e-9d7a-6c1c2f3e4d5a",  # full-width digits
    "0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5g",
]


@pytest.mark.parametrize("bad", [*NON_CANONICAL_UUID_TEXT, 42, None, b"x" * 16, uuid.UUID(int=1)])
@pytest.mark.parametrize(("cls", "field"), [(UniverseId, "universe"), (WorldId, "world")])
def test_uuid_ids_reject_malformed(
    cls: type[UniverseId] | type[WorldId], field: str, bad: object
) -> None:
    with pytest.raises(Validation) as err:
        cls.parse(bad)
    assert err.value.field == field


def test_hash_of_parse_and_hex() -> None:
    h = Hash.of(b"abc")
    assert h.hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert Hash.parse(h.hex) == h
    assert Hash.parse("sha256:" + h.hex) == h


@pytest.mark.parametrize(
    "value", ["not-a-uuid", "0b0c3b1e-55f1-4c8e-9d7a-6c1c2f3e4d5a", None, 1, b"\x00" * 16]
)
@pytest.mark.parametrize(("cls", "field"), [(UniverseId, "universe"), (WorldId, "world")])
def test_uuid_ids_refuse_anything_but_a_uuid_at_construction(
    cls: type[UniverseId] | type[WorldId], field: str, value: object
) -> None:
    with pytest.raises(Validation) as err:
        cls(value)  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize(
    "bad", ["", "ab", "zz" * 32, "a" * 63, "a" * 65, 5, None, " a" * 32, "\uff11" * 64]
)
def test_hash_rejects_malformed(bad: object) -> None:
    with pytest.raises(Validation) as err:
        Hash.parse(bad)
    assert err.value.field == "hash"


@pytest.mark.parametrize("digest", [b"", b"x" * 31, b"x" * 33])
def test_hash_requires_32_bytes(digest: bytes) -> None:
    with pytest.raises(Validation):
        Hash(digest)


def test_inbox_seq_orders_bytewise_and_parses() -> None:
    a = InboxSeq(bytes(8) + b"\x00\x01" + b"\x00\x00")
    b = InboxSeq(bytes(7) + b"\x01" + b"\x00\x00" + b"\x00\x00")
    assert a < b
    assert b.commit_version == 1
    assert InboxSeq.parse(str(a)) == a


def test_inbox_seq_refuses_the_incomplete_versionstamp() -> None:
    with pytest.raises(Validation, match="incomplete"):
        InboxSeq(b"\xff" * 10 + b"\x00\x01")
    with pytest.raises(Validation, match="incomplete"):
        InboxSeq.parse("ff" * 10 + "0001")
    assert InboxSeq(b"\xff" * 9 + b"\xfe\x00\x00").commit_version == 2**64 - 1


@pytest.mark.parametrize("bad", ["", "00" * 10, "zz" * 12, 12, " 0" * 12, bytearray(12)])
def test_inbox_seq_rejects_malformed(bad: object) -> None:
    with pytest.raises(Validation) as err:
        InboxSeq.parse(bad)
    assert err.value.field == "inbox_seq"


def test_segment_id_inclusive_range() -> None:
    seg = SegmentId.parse("10-19")
    assert (seg.start, seg.end, seg.count) == (10, 19, 10)
    assert str(seg) == "10-19"


@pytest.mark.parametrize(
    "bad", ["", "5", "9-3", "0-3", "a-b", "-1-3", "1-2-3", None, "01-3", "\uff11-3", " 1-3"]
)
def test_segment_id_rejects_malformed(bad: object) -> None:
    with pytest.raises(Validation):
        SegmentId.parse(bad)


@pytest.mark.parametrize("bad", [-1, 2**64, True, 1.0, "3"])
def test_height_rejects_out_of_range(bad: object) -> None:
    with pytest.raises(Validation) as err:
        check_height(bad, "expected_head")
    assert err.value.field == "expected_head"


def test_height_bounds() -> None:
    assert check_height(0) == 0
    assert check_height(2**64 - 1) == 2**64 - 1
    with pytest.raises(Validation):
        check_height(0, allow_zero=False)
