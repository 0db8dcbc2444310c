"""The FoundationDB tuple encoding, for the element types keys use here.

Byte-compatible with ``fdb.tuple`` (tests compare the two), but with no dependency on the
FoundationDB client library: ``fdb.tuple`` cannot pack a versionstamp without ``libfdb_c``,
and the memory and SQLite engines must build exactly the keys FoundationDB would.

Supported elements: ``None``, ``bytes``, ``str``, ``int``, ``bool``,
``uuid.UUID`` and :class:`Versionstamp`. The encoding is order-preserving: comparing packed
bytes compares the tuples element by element.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Final, Union

NULL: Final = 0x00
BYTES: Final = 0x01
_BYTES_CODE: Final = bytes([BYTES])
STRING: Final = 0x02
INT_ZERO: Final = 0x14
FALSE: Final = 0x26
TRUE: Final = 0x27
UUID: Final = 0x30
VERSIONSTAMP: Final = 0x33

INCOMPLETE: Final = b"\xff" * 10
"""Placeholder transaction version of a versionstamp the engine fills in at commit."""


@dataclass(frozen=True, slots=True, order=True)
class Versionstamp:
    """A 10-byte transaction version plus a 2-byte user version.

    ``tr_version`` is ``None`` for an incomplete versionstamp (filled in at commit by
    ``set_versionstamped_key``/``set_versionstamped_value``).
    """

    tr_version: bytes | None = None
    user_version: int = 0

    def __post_init__(self) -> None:
        if self.tr_version is not None and len(self.tr_version) != 10:
            raise ValueError("a versionstamp's transaction version is 10 bytes")
        if not 0 <= self.user_version <= 0xFFFF:
            raise ValueError("a versionstamp's user version is a u16")

    @property
    def complete(self) -> bool:
        """Whether the transaction version is known."""
        return self.tr_version is not None

    def to_bytes(self) -> bytes:
        """The 12-byte form (incomplete versionstamps use the 0xff placeholder)."""
        return (self.tr_version or INCOMPLETE) + struct.pack(">H", self.user_version)

    @classmethod
    def from_bytes(cls, raw: bytes) -> Versionstamp:
        """Parse the 12-byte form."""
        if len(raw) != 12:
            raise ValueError("a versionstamp is 12 bytes")
        tr = raw[:10]
        return cls(None if tr == INCOMPLETE else tr, struct.unpack(">H", raw[10:])[0])


Element = Union[None, bytes, str, int, bool, uuid.UUID, Versionstamp]  # noqa: UP007


def _escape(raw: bytes) -> bytes:
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00"


_SHORT_MAX: Final = 2**64 - 1
"""Magnitudes from here on use the long form (type code, length byte), as fdb.tuple does."""
POS_INT_END: Final = 0x1D
NEG_INT_START: Final = 0x0B


def _encode_int(n: int) -> bytes:
    if n == 0:
        return bytes([INT_ZERO])
    size = (abs(n).bit_length() + 7) // 8
    if size > 255:
        raise ValueError("integer too large for the tuple encoding")
    if abs(n) >= _SHORT_MAX:
        if n > 0:
            return bytes([POS_INT_END, size]) + n.to_bytes(size, "big")
        body = ((1 << (8 * size)) - 1 + n).to_bytes(size, "big")
        return bytes([NEG_INT_START, size ^ 0xFF]) + body
    if n > 0:
        return bytes([INT_ZERO + size]) + n.to_bytes(size, "big")
    return bytes([INT_ZERO - size]) + ((1 << (8 * size)) - 1 + n).to_bytes(size, "big")


def _decode_int(data: bytes, pos: int, code: int) -> tuple[int, int]:
    if code in (POS_INT_END, NEG_INT_START):
        if pos >= len(data):
            raise ValueError("truncated integer in tuple")
        width = data[pos] if code == POS_INT_END else data[pos] ^ 0xFF
        pos += 1
        sign = 1 if code == POS_INT_END else -1
    else:
        width = abs(code - INT_ZERO)
        sign = 1 if code >= INT_ZERO else -1
    if pos + width > len(data):
        raise ValueError("truncated integer in tuple")
    value = int.from_bytes(data[pos : pos + width], "big")
    if sign < 0:
        value -= (1 << (8 * width)) - 1
    return value, pos + width


def _encode(element: Element, out: bytearray) -> int | None:
    """Append one element; return the offset of an incomplete versionstamp, if any."""
    if element is None:
        out.append(NULL)
    elif isinstance(element, bool):
        out.append(TRUE if element else FALSE)
    elif isinstance(element, bytes):
        out.append(BYTES)
        out += _escape(element)
    elif isinstance(element, str):
        out.append(STRING)
        out += _escape(element.encode("utf-8"))
    elif isinstance(element, int):
        out += _encode_int(element)
    elif isinstance(element, uuid.UUID):
        out.append(UUID)
        out += element.bytes
    elif isinstance(element, Versionstamp):
        out.append(VERSIONSTAMP)
        offset = len(out)
        out += element.to_bytes()
        return None if element.complete else offset
    else:
        raise TypeError(f"cannot tuple-encode {type(element).__name__}")
    return None


def pack(items: tuple[Element, ...], prefix: bytes = b"") -> bytes:
    """Encode a tuple; refuses incomplete versionstamps (use :func:`pack_with_versionstamp`)."""
    out = bytearray(prefix)
    for element in items:
        if _encode(element, out) is not None:
            raise ValueError("incomplete versionstamp: use pack_with_versionstamp")
    return bytes(out)


def pack_bytes(raw: bytes) -> bytes:
    """``pack((raw,))`` for one byte string, without the general encoder (a call record's
    key is built on every write call)."""
    return _BYTES_CODE + _escape(raw)


def pack_with_versionstamp(items: tuple[Element, ...], prefix: bytes = b"") -> bytes:
    """Encode a tuple holding exactly one incomplete versionstamp, for
    ``set_versionstamped_key``: the packed bytes followed by the 4-byte little-endian
    offset of the 10-byte placeholder (FoundationDB API version 520 and later)."""
    out = bytearray(prefix)
    position: int | None = None
    for element in items:
        found = _encode(element, out)
        if found is not None:
            if position is not None:
                raise ValueError("more than one incomplete versionstamp")
            position = found
    if position is None:
        raise ValueError("no incomplete versionstamp in tuple")
    return bytes(out) + struct.pack("<I", position)


def _unescape_until_end(data: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        end = data.find(b"\x00", pos)
        if end < 0:
            raise ValueError("unterminated byte string in tuple")
        out += data[pos:end]
        if end + 1 < len(data) and data[end + 1] == 0xFF:
            out.append(0)
            pos = end + 2
        else:
            return bytes(out), end + 1


def unpack(data: bytes, prefix_len: int = 0, count: int | None = None) -> tuple[Element, ...]:
    """Decode a packed tuple (after skipping ``prefix_len`` bytes; only its first ``count``
    elements, the bytes after them unread: a key whose tail is not a tuple -- an
    application's own key -- still has its leading elements read); raises ``ValueError``."""
    items: list[Element] = []
    pos = prefix_len
    size = len(data)
    while pos < size and (count is None or len(items) < count):
        code = data[pos]
        pos += 1
        if code == NULL:
            items.append(None)
        elif code == BYTES:
            raw, pos = _unescape_until_end(data, pos)
            items.append(raw)
        elif code == STRING:
            raw, pos = _unescape_until_end(data, pos)
            items.append(raw.decode("utf-8"))
        elif NEG_INT_START <= code <= POS_INT_END:
            value, pos = _decode_int(data, pos, code)
            items.append(value)
        elif code in (FALSE, TRUE):
            items.append(code == TRUE)
        elif code == UUID:
            if pos + 16 > size:
                raise ValueError("truncated UUID in tuple")
            items.append(uuid.UUID(bytes=data[pos : pos + 16]))
            pos += 16
        elif code == VERSIONSTAMP:
            if pos + 12 > size:
                raise ValueError("truncated versionstamp in tuple")
            items.append(Versionstamp.from_bytes(data[pos : pos + 12]))
            pos += 12
        else:
            raise ValueError(f"unsupported tuple type code 0x{code:02x} at offset {pos - 1}")
    return tuple(items)


def range_of(prefix: bytes) -> tuple[bytes, bytes]:
    """The key range holding every tuple that extends ``prefix`` (as ``Subspace.range()``)."""
    return prefix + b"\x00", prefix + b"\xff"


def strinc(key: bytes) -> bytes:
    """The first key after every key that starts with ``key`` (FDB's ``strinc``)."""
    stripped = key.rstrip(b"\xff")
    if not stripped:
        raise ValueError("key of only 0xff bytes has no successor prefix")
    return stripped[:-1] + bytes([stripped[-1] + 1])
