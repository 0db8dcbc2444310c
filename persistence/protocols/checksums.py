"""Checksums of journal entries: in a checksummed layout (``keyspace.CHECKSUM_LAYOUT`` and
later) every stored value of an entry -- the whole entry, or one chunk of it -- ends with a
checksum of its key and payload, so a changed byte, or a value copied under another key,
is detected on read. Layout 3 seals with CRC-32 (zlib's), layout 4 with CRC-32C, computed
in C (``_checksums.c``, with the CPU's CRC instruction where it has one) and stripped
without a copy where nothing else holds the value read; without the C part (no compiler at
install) the same functions run here in Python, much slower."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from zlib import crc32

from persistence.errors import DamagedJournalEntry
from persistence.keyspace import WorldKeys

SEAL_BYTES: Final = 4
"""Bytes a checksummed layout adds after each stored value of a journal entry
(:meth:`Sealing.seal`)."""

_payload_of = operator.itemgetter(slice(None, -SEAL_BYTES))
_key_of = operator.itemgetter(0)
_value_of = operator.itemgetter(1)
Rows = list[tuple[bytes, bytes]]
"""A range read's ``(key, value)`` rows (``kv.Transaction.get_range``)."""


@dataclass(frozen=True, slots=True)
class Sealing:
    """How a layout seals the stored values of journal entries: a 32-bit CRC of the key
    followed by the payload, after the payload, little-endian. A value followed by its own
    CRC has a fixed CRC (the ``residue``), so a sealed value is checked by one CRC over its
    key and the value, without slicing it."""

    layout: int
    algorithm: str
    crc: Callable[..., int]
    """``crc(data, value=0)``: the CRC of ``data``, continuing from ``value`` (as zlib's)."""
    residue: int
    seal: Callable[[bytes, bytes], bytes]
    """``seal(key, payload)``: the value stored at ``key`` for ``payload`` (a whole entry
    or one chunk of it). The key is covered, so a value copied under another height, index
    or world fails its check."""
    open_rows: Callable[[Rows], list[bytes] | None] | None
    """The payloads of rows that all check, stripped in C; ``None`` where a row does not
    (then :meth:`opened_rows` finds which). ``None``: not built."""
    in_python: bool = False
    """Whether the CRC runs in Python, a byte at a time (slow: the C part was not built)."""

    def opened(self, keys: WorldKeys, height: int, key: bytes, value: bytes) -> bytes:
        """The payload of ``value``, read at ``key`` (of the entry at ``height``);
        ``DamagedJournalEntry`` if it fails its checksum."""
        if len(value) < SEAL_BYTES or self.crc(value, self.crc(key)) != self.residue:
            raise DamagedJournalEntry(str(keys.world), height)
        return value[:-SEAL_BYTES]

    def opened_rows(self, keys: WorldKeys, first: int, rows: Rows) -> list[bytes]:
        """The payloads of ``rows`` (whole entries at heights ``first..``), each checked as
        :meth:`opened` does: in one pass in C when all are sound. ``rows`` is the caller's
        own range read, which it reads no value of afterwards: a value nothing else holds
        is stripped in place (its row then holds ``None``)."""
        if self.open_rows is not None:
            payloads = self.open_rows(rows)
            if payloads is not None:
                return payloads
        values = list(map(_value_of, rows))
        stored = list(map(_key_of, rows))
        crc = self.crc
        sums = list(map(crc, values, map(crc, stored)))
        if (
            sums.count(self.residue) != len(sums)
            or min(map(len, values), default=SEAL_BYTES) < SEAL_BYTES
        ):
            for height, key, value in zip(
                range(first, first + len(values)), stored, values, strict=True
            ):
                self.opened(keys, height, key, value)
        return list(map(_payload_of, values))


def _sealer(crc: Callable[..., int]) -> Callable[[bytes, bytes], bytes]:
    """``Sealing.seal`` for ``crc`` (``crc(data, value=0)``), computed in Python."""

    def seal(key: bytes, payload: bytes) -> bytes:
        return payload + crc(payload, crc(key)).to_bytes(SEAL_BYTES, "little")

    return seal


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ 0x82F63B78 if value & 1 else value >> 1
        table.append(value)
    return tuple(table)


_TABLE: Final = _crc32c_table()


def crc32c_python(data: bytes, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value``, a byte at a time (the C part's
    stand-in, and the reference the tests hold it to)."""
    state = value ^ 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state ^ 0xFFFFFFFF


CRC32_RESIDUE: Final = 0x2144DF1C
"""CRC-32 of any bytes followed by their own CRC-32, little-endian."""
CRC32C_RESIDUE: Final = 0x48674BC7
"""CRC-32C of any bytes followed by their own CRC-32C, little-endian."""
CRC32: Final = Sealing(3, "crc32", crc32, CRC32_RESIDUE, _sealer(crc32), None)
"""Layout 3's seal: CRC-32, zlib's."""
CRC32C_IN_PYTHON: Final = Sealing(
    4, "crc32c", crc32c_python, CRC32C_RESIDUE, _sealer(crc32c_python), None, in_python=True
)
"""Layout 4's seal computed in Python: the stand-in where the C part was not built."""


def _in_c() -> Sealing | None:
    try:
        from persistence.protocols import _checksums
    except ImportError:
        return None
    return Sealing(
        4, "crc32c", _checksums.crc32c, CRC32C_RESIDUE, _checksums.seal, _checksums.open_rows
    )


CRC32C: Final = _in_c() or CRC32C_IN_PYTHON
"""Layout 4's seal: CRC-32C (Castagnoli), in C where it was built."""
IN_C: Final = not CRC32C.in_python
"""Whether CRC-32C runs in C here (the optional extension was built)."""


def sealing_of(layout: int) -> Sealing | None:
    """The seal of a store of ``layout``; ``None`` for a layout without checksums."""
    return {CRC32.layout: CRC32, CRC32C.layout: CRC32C}.get(layout)
