"""CRC-32C of journal entries (layout 4): the C part against the Python one byte for byte,
its hardware path against its tables, and the in-place strip of ``open_rows`` -- which must
never change a value anything but its own row holds."""

from __future__ import annotations

import gc
import random

import pytest

from persistence.errors import DamagedJournalEntry
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.protocols import checksums
from persistence.protocols.checksums import CRC32, CRC32C, SEAL_BYTES, crc32c_python

if not checksums.IN_C:
    pytest.skip(
        "the C part of the checksums was not built here (no C compiler)", allow_module_level=True
    )

from persistence.protocols import _checksums

IN_PYTHON = checksums.CRC32C_IN_PYTHON
KEYS = WorldKeys(UniverseId.new(), WorldId.new())
LENGTHS = [*range(40), 63, 64, 65, 1_000, 1_023, 1_024, 1_025, 4_096, 90_000]


def test_crc32c_is_castagnoli_in_c_in_tables_and_in_python() -> None:
    """The check value of the CRC catalogue ("123456789"), and random data of every length
    around the 8-byte steps, continued from random values."""
    assert _checksums.crc32c(b"123456789") == crc32c_python(b"123456789") == 0xE3069283
    assert _checksums.crc32c(b"") == 0
    rng = random.Random(4)
    for length in LENGTHS:
        data, value = rng.randbytes(length), rng.getrandbits(32)
        expected = crc32c_python(data, value)
        assert _checksums.crc32c(data, value) == expected, length
        assert _checksums.crc32c_tables(data, value) == expected, length
        assert _checksums.crc32c(memoryview(data)) == crc32c_python(data)


def test_the_c_seal_is_the_python_seal() -> None:
    rng = random.Random(5)
    for length in LENGTHS:
        key, payload = rng.randbytes(rng.randrange(1, 60)), rng.randbytes(length)
        assert CRC32C.seal(key, payload) == IN_PYTHON.seal(key, payload)
        assert CRC32C.crc(CRC32C.seal(key, payload), CRC32C.crc(key)) == CRC32C.residue


def _rows(
    rng: random.Random, count: int, lengths: tuple[int, ...] = (0, 1, 2, 7, 8, 9, 100, 1_024, 3_001)
) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """``count`` fresh rows of sealed values of the ``lengths`` drawn (so the three values
    checked together differ in length), and their payloads."""
    payloads = [rng.randbytes(rng.choice(lengths)) for _ in range(count)]
    keys = [KEYS.entry_chunk(1 + i, 0, 1) for i in range(count)]
    # bytes(bytearray(...)): a new object each, held by its row alone, as an engine's
    return [
        (bytes(bytearray(k)), bytes(bytearray(CRC32C.seal(k, p))))
        for k, p in zip(keys, payloads, strict=True)
    ], payloads


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 7, 100])
def test_open_rows_gives_the_payloads_and_finds_every_damaged_byte(count: int) -> None:
    rng = random.Random(count)
    rows, payloads = _rows(rng, count)
    assert IN_PYTHON.opened_rows(KEYS, 1, list(rows)) == payloads
    for _ in range(20 if count else 0):
        damaged = list(rows)
        at = rng.randrange(count)
        key, value = damaged[at]
        flipped = bytearray(value)
        flipped[rng.randrange(len(value))] ^= 1 << rng.randrange(8)
        damaged[at] = (key, bytes(flipped))
        assert _checksums.open_rows(damaged) is None
        for sealing in (CRC32C, IN_PYTHON):
            with pytest.raises(DamagedJournalEntry) as err:
                sealing.opened_rows(KEYS, 1, damaged)
            assert err.value.height == 1 + at
    assert CRC32C.opened_rows(KEYS, 1, rows) == payloads


def test_open_rows_strips_in_place_only_what_nothing_else_holds() -> None:
    """A value its row alone holds is shrunk in place (its row then holds None); a value
    held elsewhere too, or a row held elsewhere, is copied and left as it was."""
    rows, payloads = _rows(random.Random(6), 6, (2, 9, 1_024))
    kept_value = rows[1][1]
    kept_row = rows[4]
    # copies (bytes(b) of a bytes is b itself, tuple(t) of a tuple is t)
    value_before, row_value_before = bytearray(kept_value), bytearray(kept_row[1])
    assert _checksums.open_rows(rows) == payloads
    assert rows[1][1] is kept_value and kept_value == value_before
    assert rows[4] is kept_row and kept_row[1] is not None and kept_row[1] == row_value_before
    for i in (0, 2, 3, 5):
        assert rows[i][1] is None


def test_open_rows_leaves_anything_but_bytes_pairs_to_python() -> None:
    """A row that is not a (bytes, bytes) tuple, or a value too short to hold a checksum:
    None, nothing changed; the Python path then checks (and names a short value)."""
    key = KEYS.entry_chunk(1, 0, 1)
    sealed = CRC32C.seal(key, b"payload")
    for rows in (
        [[key, sealed]],
        [(key, bytearray(sealed))],
        [(key, sealed, b"")],
        [(key, b"abc")],
    ):
        assert _checksums.open_rows(rows) is None
    with pytest.raises(DamagedJournalEntry):
        CRC32C.opened_rows(KEYS, 1, [(key, b"abc")])
    assert CRC32C.opened_rows(KEYS, 1, [(key, memoryview(sealed).tobytes())]) == [b"payload"]
    with pytest.raises(TypeError):
        _checksums.open_rows((key, sealed))  # type: ignore[arg-type]


def test_layout_3_keeps_zlib_crc32() -> None:
    """The seal layout-3 stores hold: CRC-32 (zlib's), never CRC-32C."""
    key = KEYS.entry_chunk(1, 0, 1)
    assert CRC32.seal(key, b"e") != CRC32C.seal(key, b"e")
    assert CRC32.opened_rows(KEYS, 1, [(key, CRC32.seal(key, b"e"))]) == [b"e"]
    with pytest.raises(DamagedJournalEntry):
        CRC32.opened_rows(KEYS, 1, [(key, CRC32C.seal(key, b"e"))])
    with pytest.raises(DamagedJournalEntry):
        CRC32C.opened_rows(KEYS, 1, [(key, CRC32.seal(key, b"e"))])


def test_a_finalizer_that_changes_the_rows_runs_before_they_are_checked() -> None:
    """The list ``open_rows`` returns is allocated before it takes any row's value: a
    collection that allocation runs may call a finalizer that replaces a row (here with a
    value that fails its check), and the row checked is then the new one -- never a value
    freed under the check (found by review: the payload of the freed value came back).
    The collector is enabled for the test, without the callbacks other libraries gave it;
    an attempt whose collection came elsewhere than in the call is tried again."""
    key = KEYS.entry_chunk(1, 0, 1)
    events: list[str] = []
    rows: list[tuple[bytes, bytes]] = []

    class Cycle:
        __slots__ = ("me",)
        me: object

        def __del__(self) -> None:
            events.append("finalizer")
            rows[0] = (key, b"X" * 64 + bytes(SEAL_BYTES))

    enabled, threshold, callbacks = gc.isenabled(), gc.get_threshold(), gc.callbacks[:]
    outcomes = []
    try:
        gc.enable()
        gc.callbacks.clear()  # another library's (hypothesis times collections) allocate
        for attempt in range(40):
            rows[:] = [(bytes(bytearray(key)), CRC32C.seal(key, b"A" * 64)) for _ in range(3)]
            events.clear()
            # a collection after the next few tracked allocations: how many the lines below
            # make before the call's own is the interpreter's business, so each is tried
            gc.set_threshold(1 + attempt % 8)
            gc.collect()
            cycle = Cycle()
            cycle.me = cycle
            del cycle  # unreachable, freed only by a collection
            events.append("open_rows")
            out = _checksums.open_rows(rows)
            gc.set_threshold(*threshold)
            outcomes.append((list(events), out))
            if events == ["open_rows", "finalizer"]:
                break
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks[:] = callbacks
        if not enabled:
            gc.disable()
    assert outcomes[-1][0] == ["open_rows", "finalizer"], outcomes  # collected inside the call
    assert outcomes[-1][1] is None  # the new row, checked: it fails
    assert rows[0] == (key, b"X" * 64 + bytes(SEAL_BYTES))
