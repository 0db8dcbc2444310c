"""The journal's hot paths on every engine: the append compares the stored head with the
expected head's known encoding and falls back to the strict decode for anything else (so a
damaged head is still ``CorruptRecord``), keys and head bytes are built once, and a read
takes a page of whole entries in bulk with the same checks and byte budget as row by row."""

from __future__ import annotations

from typing import Any

import pytest

from backends.objects.memory import MemoryObjectStore
from persistence import cbor, keyspace, kv
from persistence.errors import (
    CorruptRecord,
    DamagedJournalEntry,
    HeadAdvanced,
    MissingJournalEntry,
    Validation,
    WorldNotFound,
)
from persistence.futures import drive
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId
from persistence.journal_records import JOURNAL_HEAD, JournalHead
from persistence.keyspace import CHUNK_SIZE, UniverseKeys, WorldKeys
from persistence.log_records import LOG_HEAD, TRACKING, LogHead, TrackingRecord
from persistence.plane import Plane, PlaneConfig
from persistence.protocols import journal
from persistence.protocols.calls import Call
from persistence.records import CounterCodec, Record, decode_record
from segments import open_plane

BOUNDARY_HEIGHTS = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**63, MAX_HEIGHT]


COUNTERS = [(JOURNAL_HEAD, JournalHead), (LOG_HEAD, LogHead), (TRACKING, TrackingRecord)]


@pytest.mark.parametrize("value", BOUNDARY_HEIGHTS)
@pytest.mark.parametrize(("codec", "record"), COUNTERS)
def test_counter_bytes_are_the_records_encoding_both_ways(
    codec: CounterCodec, record: type[Record], value: int
) -> None:
    stored = record(value).to_cbor()  # type: ignore[call-arg]
    assert codec.encode(value) == stored
    assert codec.decode(stored, "x") == value


@pytest.mark.parametrize(("codec", "record"), COUNTERS)
def test_counter_bytes_of_what_the_record_refuses_are_refused_as_the_record_does(
    codec: CounterCodec, record: type[Record]
) -> None:
    for bad in (-1, 2**64, True, 1.0):
        with pytest.raises(Validation, match=record.__name__):
            codec.encode(bad)  # type: ignore[arg-type]


def _damaged(stored: bytes) -> list[bytes]:
    """Bytes near those of a counter record holding 200 that are not one: truncated,
    extended, a longer integer head than the shortest, a negative integer, another field's
    name, empty."""
    assert stored[-2:] == b"\x18\xc8"  # 200: a one-byte head
    body = stored[:-2]
    return [
        stored[:-1],
        stored + b"\x00",
        body + b"\x18\x05",  # 5 with a one-byte head: not the shortest encoding
        body + b"\x19\x00\xff",
        body + b"\x1b" + (5).to_bytes(8, "big"),
        body + b"\x20",  # -1
        body + b"\x1c",  # a reserved head
        b"\xa1\x65other\x05",
        b"",
    ]


@pytest.mark.parametrize(("codec", "record"), COUNTERS)
def test_counter_bytes_that_are_not_the_record_are_corrupt(
    codec: CounterCodec, record: type[Record]
) -> None:
    for damaged in _damaged(record(200).to_cbor()):  # type: ignore[call-arg]
        with pytest.raises(CorruptRecord):
            decode_record(record, damaged)  # the strict decoder refuses them too
        with pytest.raises(CorruptRecord, match="the thing"):
            codec.decode(damaged, "the thing")


@pytest.mark.parametrize(
    ("first", "count"),
    [
        (1, 0),
        (1, 1),
        (2**63 + 5, 1),
        (1, 300),
        (250, 20),
        (65_530, 10),
        (2**32 - 3, 6),
        (2**63 - 3, 6),
        (MAX_HEIGHT - 2, 3),
    ],
)
def test_height_keys_are_the_keys_of_whole_entries_and_log_records(first: int, count: int) -> None:
    keys = WorldKeys(UniverseId.new(), WorldId.new())
    built = keyspace.height_keys(keys.whole_entry_key(), keys.entry_prefix_len(), first, count)
    assert built == [keys.entry_chunk(h, 0, 1) for h in range(first, first + count)]
    universe = UniverseKeys(keys.universe)
    built = keyspace.height_keys(universe.log_entry, universe.log_prefix_len(), first, count)
    assert built == [universe.log_entry(p) for p in range(first, first + count)]


def _stored_head(plane: Plane, keys: WorldKeys) -> bytes | None:
    return kv.run(plane.engine, lambda tr: tr.get(keys.head()))


def test_append_moves_the_head_to_its_canonical_record(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    keys = WorldKeys(universe, world)
    assert plane.append_batch(universe, world, 0, [b"a", b"b", b"c"]) == 1
    assert plane.append_batch(universe, world, 3, [b"d"]) == 4
    assert _stored_head(plane, keys) == JournalHead(4).to_cbor()
    assert plane.read_range(universe, world, 1, 10) == [(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")]


@pytest.mark.parametrize("expected", [0, 2, 4, MAX_HEIGHT - 1])
def test_append_at_another_head_names_both_heights(
    plane: Plane, universe: UniverseId, world: WorldId, expected: int
) -> None:
    plane.append_batch(universe, world, 0, [b"a", b"b", b"c"])
    with pytest.raises(HeadAdvanced) as err:
        plane.append_batch(universe, world, expected, [b"x"])
    assert (err.value.expected, err.value.actual) == (expected, 3)
    assert plane.head(universe, world) == 3


def _universe_state(plane: Plane, universe: UniverseId) -> list[tuple[bytes, bytes]]:
    return kv.run(plane.engine, lambda tr: tr.get_range(*UniverseKeys(universe).all()))


@pytest.mark.parametrize("expected", [0, 2, 4, 5])
@pytest.mark.parametrize("count", [1, 3, 20])
def test_a_refused_append_writes_nothing_though_it_issued_its_writes_before_its_read(
    plane: Plane, universe: UniverseId, world: WorldId, expected: int, count: int
) -> None:
    """A first attempt issues its entries and call record with the head's read
    (``Opening.fresh``); a refused head must leave all of them uncommitted."""
    plane.append_batch(universe, world, 0, [b"a", b"b", b"c"])
    before = _universe_state(plane, universe)
    with pytest.raises(HeadAdvanced):
        plane.append_batch(universe, world, expected, [b"x" * (CHUNK_SIZE + 1)] * count)
    with pytest.raises(WorldNotFound):
        plane.append_batches(universe, [(world, 3, [b"y"]), (WorldId.new(), 1, [b"z"])])
    assert _universe_state(plane, universe) == before


def test_a_refused_group_append_writes_no_world_s_entries(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    other = WorldId.new()
    plane.create_world(universe, other)
    plane.append_batch(universe, other, 0, [b"o"])
    before = _universe_state(plane, universe)
    with pytest.raises(HeadAdvanced) as err:
        plane.append_batches(universe, [(world, 0, [b"w"] * 5), (other, 0, [b"x"])])
    assert err.value.world == other
    assert _universe_state(plane, universe) == before


def test_a_retry_that_finds_its_record_writes_nothing_of_its_own(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """A retry reads its record before writing anything: were it to write first, as a first
    attempt does, the commit that follows its replay would store its entries again."""
    keys = WorldKeys(universe, world)
    call = Call.new()
    sealing = plane.sealing
    assert drive(journal.append_batch(plane.engine, keys, 0, [b"a"], call, sealing)) == 1
    before = _universe_state(plane, universe)
    # the same call again, as a retry after commit_unknown_result (other entries, so that a
    # write of its own would show)
    assert drive(journal.append_batch(plane.engine, keys, 0, [b"z"], call, sealing)) == 1
    assert _universe_state(plane, universe) == before
    assert plane.read_range(universe, world, 1, 5) == [(1, b"a")]


class _UnhashableType(type):
    """A metaclass whose classes cannot be hashed (``__eq__`` without ``__hash__``)."""

    def __eq__(cls, other: object) -> bool:
        return cls is other

    __hash__ = None  # type: ignore[assignment]


class _Unhashable(metaclass=_UnhashableType):
    def __len__(self) -> int:
        return 1


class _PosingType(type):
    """A metaclass whose classes compare and hash equal to ``bytes``."""

    def __eq__(cls, other: object) -> bool:
        return other is bytes or cls is other

    def __hash__(cls) -> int:
        return hash(bytes)


class _Posing(bytes, metaclass=_PosingType):
    pass


@pytest.mark.parametrize("before", [[], [b"ok"]], ids=["alone", "after-bytes"])
@pytest.mark.parametrize(
    "odd", [_Unhashable, lambda: _Posing(b"posing")], ids=["unhashable", "posing"]
)
def test_an_entry_whose_type_only_poses_as_bytes_is_refused_naming_it(
    plane: Plane, universe: UniverseId, world: WorldId, before: list[bytes], odd: Any
) -> None:
    """Entries are checked by their exact type (found by a review: a check by comparing
    types let a class equal to ``bytes`` through, and an unhashable type raised TypeError)."""
    entries = [*before, odd()]
    with pytest.raises(Validation) as err:
        plane.append_batch(universe, world, 0, entries)
    assert err.value.field == f"entries[{len(before)}]"
    with pytest.raises(Validation) as err:
        plane.append_batches(universe, [(world, 0, entries)])
    assert err.value.field == f"batches[0].entries[{len(before)}]"
    assert plane.head(universe, world) == 0


def test_append_to_a_missing_world_is_not_found(plane: Plane, universe: UniverseId) -> None:
    with pytest.raises(WorldNotFound):
        plane.append_batch(universe, WorldId.new(), 0, [b"a"])


DAMAGED_HEADS = {
    # the head 2, but not in canonical form: equal in value, never in bytes
    "non-shortest integer": b"\xa1\x66height\x18\x02",
    "trailing byte": JournalHead(2).to_cbor() + b"\x00",
    "unknown field": cbor.encode({"extra": 1, "height": 2}),
    "wrong type": cbor.encode({"height": b"\x02"}),
    "not a map": cbor.encode([2]),
    "not CBOR": b"\xff\x00",
    "empty": b"",
}


@pytest.mark.parametrize("damaged", DAMAGED_HEADS.values(), ids=DAMAGED_HEADS.keys())
def test_append_on_a_damaged_head_is_corruption_and_writes_nothing(
    plane: Plane, universe: UniverseId, world: WorldId, damaged: bytes
) -> None:
    plane.append_batch(universe, world, 0, [b"a", b"b"])
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.head(), damaged))
    with pytest.raises(CorruptRecord):
        plane.append_batch(universe, world, 2, [b"c"])
    assert _stored_head(plane, keys) == damaged
    assert kv.run(plane.engine, lambda tr: tr.get_range(*keys.entry_prefix(3))) == []


def test_entries_of_every_size_round_trip_across_pages(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Pages of whole entries (taken in bulk) and pages with chunked or empty ones (row by
    row), with page boundaries inside and between them."""
    entries = [
        b"c" * (2 * CHUNK_SIZE + 1) if i % 97 == 0 else b"" if i % 89 == 0 else i.to_bytes(3, "big")
        for i in range(1, 701)
    ]
    plane.append_batch(universe, world, 0, entries[:350])
    plane.append_batch(universe, world, 350, entries[350:])
    assert plane.read_range(universe, world, 1, 700) == list(enumerate(entries, 1))
    for first in (2, 97, 98, 255, 256, 257, 600):
        rows = plane.read_range(universe, world, first, 300)
        assert rows == list(enumerate(entries, 1))[first - 1 : first + 299]


def test_stored_sizes_are_the_bytes_held_per_height_without_reading_them_as_entries(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """``journal.stored_sizes``: a height's stored bytes (chunks together, with the seal
    where the layout has one), only heights the engine holds, a height cut by the read's
    row limit left for the next read; a damaged entry is sized, not refused."""
    keys = WorldKeys(universe, world)
    seal_bytes = 4 if plane.sealing else 0
    big = b"c" * (2 * CHUNK_SIZE + 1)  # three chunks
    entries = [big if i % 50 == 0 else b"x" * (i % 7) for i in range(1, 301)]
    plane.append_batch(universe, world, 0, entries)

    def sizes(first: int, last: int) -> list[tuple[int, int]]:
        return kv.run(plane.engine, lambda tr: journal.stored_sizes(tr, keys, first, last))

    chunked = 3 * seal_bytes + len(big)
    stored = [chunked if e is big else len(e) + seal_bytes for e in entries]
    assert sizes(1, 300) == list(enumerate(stored, 1))
    assert sizes(50, 50) == [(50, chunked)] and sizes(5, 4) == []
    assert sizes(299, 400) == [(299, len(entries[298]) + seal_bytes), (300, chunked)]
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.whole_entry_key()(7)))
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.whole_entry_key()(8), b"damaged"))
    assert [h for h, _ in sizes(6, 9)] == [6, 8, 9] and dict(sizes(6, 9))[8] == 7
    filler = [b"f"] * (journal.MAX_ROWS_PER_READ - 2)
    other = WorldId.new()
    plane.create_world(universe, other)
    plane.append_batch(universe, other, 0, [*filler, big])  # its chunks cross the row limit
    other_keys = WorldKeys(universe, other)
    cut = kv.run(plane.engine, lambda tr: journal.stored_sizes(tr, other_keys, 1, 10**6))
    assert [h for h, _ in cut] == list(range(1, len(filler) + 1))
    rest = kv.run(
        plane.engine, lambda tr: journal.stored_sizes(tr, other_keys, len(filler) + 1, 10**6)
    )
    assert rest == [(len(filler) + 1, chunked)]
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.whole_entry_key()(49)))  # before big
    for limit in (1, 2):  # a read cut inside the only height reads all its chunks
        alone = drive(journal.stored_sizes(plane.engine, other_keys, len(filler) + 1, 10**6, limit))
        assert alone == [(len(filler) + 1, chunked)]
        # ... the height found, also where the first height asked for is missing
        after_hole = drive(journal.stored_sizes(plane.engine, keys, 49, 60, limit))
        assert after_hole == [(50, chunked)]


@pytest.mark.parametrize(
    ("budget", "rows"),
    [
        (1, 1),  # at least one entry
        (10_000, 10),  # stops at the entry that reaches the budget, inside the first page
        (journal.ROWS_PER_READ * 1_000, journal.ROWS_PER_READ),  # reached by a page's last
        (journal.ROWS_PER_READ * 1_000 + 1, journal.ROWS_PER_READ + 1),  # just past a page
        (600_000, 600),  # in a later read, sized by the bytes read so far
        (999_999, 1_000),  # by the last entry
    ],
)
def test_a_read_stops_at_the_entry_that_reaches_its_byte_budget(
    engine: kv.Engine, budget: int, rows: int
) -> None:
    plane = open_plane(engine, MemoryObjectStore(), PlaneConfig(read_page_bytes=budget))
    universe, world = UniverseId.new(), WorldId.new()
    plane.create_world(universe, world)
    entries = [i.to_bytes(2, "big") * 500 for i in range(1_000)]
    plane.append_batch(universe, world, 0, entries)
    assert plane.read_hot(universe, world, 1, 1_000) == list(enumerate(entries, 1))[:rows]


def test_a_hole_in_a_page_of_whole_entries_is_missing(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"e"] * 600)
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.entry_chunk(300, 0, 1)))
    with pytest.raises(MissingJournalEntry) as err:
        plane.read_range(universe, world, 1, 600)
    assert err.value.height == 300


def test_a_stray_chunk_among_whole_entries_is_missing(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """A first chunk of two in place of a whole entry: its key has a whole entry's length
    and sorts where that entry's would."""
    plane.append_batch(universe, world, 0, [b"e"] * 600)
    keys = WorldKeys(universe, world)
    stray = keys.entry_chunk(5, 0, 2)
    assert len(stray) == len(keys.entry_chunk(5, 0, 1))

    def swap(tr: kv.Transaction) -> None:
        tr.clear(keys.entry_chunk(5, 0, 1))
        tr.set(stray, plane.sealing.seal(stray, b"e") if plane.sealing else b"e")  # as a writer

    kv.run_sync(plane.engine, swap)
    with pytest.raises(MissingJournalEntry) as err:
        plane.read_range(universe, world, 1, 600)
    assert err.value.height == 5
    if plane.sealing:  # a stray value no writer sealed: damage, found at its height
        kv.run_sync(plane.engine, lambda tr: tr.set(stray, b"e"))
        with pytest.raises(DamagedJournalEntry) as damaged:
            plane.read_range(universe, world, 1, 600)
        assert damaged.value.height == 5
