"""CRC-32C of journal entries (layout 4): the C part against the Python one byte for byte,
its hardware path against its tables, and the in-place strip of ``open_rows`` -- which must
never change a value anything but its own row holds."""

from __future__ import annotations

import json
import random
import subprocess
import sys

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


FINALIZER = """
import gc, json
from persistence.keyspace import WorldKeys
from persistence.ids import UniverseId, WorldId
from persistence.protocols import _checksums
from persistence.protocols.checksums import CRC32C, SEAL_BYTES
key = WorldKeys(UniverseId.new(), WorldId.new()).entry_chunk(1, 0, 1)
events, rows, outcomes = [], [], []
class Cycle:
    __slots__ = ("me",)
    def __del__(self):
        events.append("finalizer")
        rows[0] = (key, b"X" * 64 + bytes(SEAL_BYTES))
for attempt in range(40):
    rows[:] = [(bytes(bytearray(key)), CRC32C.seal(key, b"A" * 64)) for _ in range(3)]
    events.clear()
    gc.set_threshold(1 + attempt % 8)
    gc.collect()
    cycle = Cycle()
    cycle.me = cycle
    del cycle
    events.append("open_rows")
    out = _checksums.open_rows(rows)
    gc.set_threshold(700)
    outcomes.append((list(events), out is None))
    if events == ["open_rows", "finalizer"]:
        break
print(json.dumps({"outcomes": outcomes, "row": rows[0][1].decode("latin-1")}))
"""


def test_a_finalizer_that_changes_the_rows_runs_before_they_are_checked() -> None:
    """The list ``open_rows`` returns is allocated before it takes any row's value: a
    collection that allocation runs may call a finalizer that replaces a row (here with a
    value that fails its check), and the row checked is then the new one -- never a value
    freed under the check (found by review: the payload of the freed value came back).
    In a fresh interpreter (another library's collector callbacks or hooks allocate and
    move the collection), trying thresholds until a collection runs inside the call."""
    done = subprocess.run(
        [sys.executable, "-c", FINALIZER], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    events, rejected = result["outcomes"][-1]
    assert events == ["open_rows", "finalizer"], result["outcomes"]  # collected in the call
    assert rejected  # the new row, checked: it fails
    assert result["row"] == "X" * 64 + "\x00" * SEAL_BYTES
