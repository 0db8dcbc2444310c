"""Segment format: round trip, and every kind of damage is a SegmentCorruption naming the
object and the offset."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persistence.errors import SegmentChecksumMismatch, SegmentCorruption, Validation
from persistence.ids import UniverseId, WorldId
from segments.format import SegmentHeader, SegmentReader, SegmentWriter, segment_key

U, W = UniverseId.new(), WorldId.new()
KEY = "segments/u/w/x.log"


def build(start: int, entries: list[bytes]) -> tuple[bytes, bytes, SegmentHeader]:
    header = SegmentHeader(U, W, start, start + len(entries) - 1)
    out = io.BytesIO()
    writer = SegmentWriter(out, header)
    for offset, entry in enumerate(entries):
        writer.add(start + offset, entry)
    checksum = writer.finish()
    assert writer.size == len(out.getvalue())
    return out.getvalue(), checksum, header


@given(st.integers(1, 10**12), st.lists(st.binary(max_size=300), min_size=1, max_size=40))
@settings(max_examples=60)
def test_round_trip(start: int, entries: list[bytes]) -> None:
    data, checksum, header = build(start, entries)
    reader = SegmentReader(io.BytesIO(data), KEY, expect=header)
    assert reader.header == header
    assert list(reader) == [(start + i, e) for i, e in enumerate(entries)]
    assert reader.checksum == checksum


def test_same_entries_same_bytes() -> None:
    assert build(5, [b"a", b"bc"])[0] == build(5, [b"a", b"bc"])[0]


def test_key_is_zero_padded_so_listing_order_is_height_order() -> None:
    keys = [segment_key(U, W, s, e) for s, e in [(1, 9), (10, 99), (100, 100000)]]
    assert keys == sorted(keys)
    assert keys[0].endswith("00000000000000000001-00000000000000000009.log")


@pytest.mark.parametrize("position", [0, 9, 20, 60, -40, -1])
def test_any_flipped_byte_is_detected(position: int) -> None:
    data = bytearray(build(1, [b"x" * 50, b"y" * 50])[0])
    data[position] ^= 0x01
    with pytest.raises(SegmentCorruption) as err:
        SegmentReader(io.BytesIO(bytes(data)), KEY).verify()
    assert err.value.object_key == KEY


def test_flipped_entry_byte_is_a_checksum_mismatch_at_the_trailer() -> None:
    data = bytearray(build(1, [b"x" * 50, b"y" * 50])[0])
    data[-60] ^= 0x01  # inside the second entry
    with pytest.raises(SegmentChecksumMismatch) as err:
        SegmentReader(io.BytesIO(bytes(data)), KEY).verify()
    assert err.value.offset == len(data) - 32


@pytest.mark.parametrize("cut", [0, 5, 14, 30, 70, 100])
def test_truncation_is_reported_with_its_offset(cut: int) -> None:
    data = build(1, [b"x" * 50, b"y" * 50])[0]
    truncated = data[: len(data) - cut] if cut else data[:10]
    with pytest.raises(SegmentCorruption) as err:
        SegmentReader(io.BytesIO(truncated), KEY).verify()
    assert "truncated" in err.value.problem
    assert err.value.offset <= len(truncated)


def test_trailing_bytes_and_header_mismatch() -> None:
    data = build(3, [b"a"])[0]
    with pytest.raises(SegmentCorruption, match="trailing"):
        SegmentReader(io.BytesIO(data + b"\x00"), KEY).verify()
    other = SegmentHeader(U, W, 3, 4)
    with pytest.raises(SegmentCorruption, match="index says"):
        SegmentReader(io.BytesIO(data), KEY, expect=other)


def test_writer_refuses_gaps_and_short_segments() -> None:
    writer = SegmentWriter(io.BytesIO(), SegmentHeader(U, W, 1, 3))
    writer.add(1, b"a")
    with pytest.raises(Validation):
        writer.add(3, b"c")
    with pytest.raises(Validation):
        writer.finish()
