"""Checksums of journal entries (layout 3, ``keyspace.CHECKSUM_LAYOUT``): every stored value
of an entry -- the whole entry, or one chunk of it -- ends with CRC-32 of its key and
payload, so a changed byte, or a value copied under another key, is detected on read."""

from __future__ import annotations

import operator
from typing import Final
from zlib import crc32

from persistence.errors import DamagedJournalEntry
from persistence.keyspace import WorldKeys

SEAL_BYTES: Final = 4
"""Bytes a checksummed layout (``keyspace.CHECKSUM_LAYOUT``) adds after each stored value
of a journal entry (:func:`seal`)."""
_SEALED: Final = 0x2144DF1C
"""CRC-32 of any bytes followed by their own CRC-32, little-endian (CRC-32's residue): a
sealed value is checked by one CRC over its key and the value, without slicing it."""
_payload_of = operator.itemgetter(slice(None, -SEAL_BYTES))


def seal(key: bytes, payload: bytes) -> bytes:
    """The value stored at ``key`` for ``payload`` (a whole entry or one chunk of it) in a
    checksummed layout: the payload, then CRC-32 (zlib's) of ``key`` followed by the
    payload, little-endian. The key is covered, so a value copied under another height,
    index or world fails too."""
    return payload + crc32(payload, crc32(key)).to_bytes(SEAL_BYTES, "little")


def opened(keys: WorldKeys, height: int, key: bytes, value: bytes) -> bytes:
    """The payload of ``value``, read at ``key`` (of the entry at ``height``) in a
    checksummed layout; ``DamagedJournalEntry`` if it fails its checksum."""
    if len(value) < SEAL_BYTES or crc32(value, crc32(key)) != _SEALED:
        raise DamagedJournalEntry(str(keys.world), height)
    return value[:-SEAL_BYTES]


def opened_run(
    keys: WorldKeys, first: int, stored: list[bytes], values: list[bytes]
) -> list[bytes]:
    """The payloads of ``values`` (whole entries at heights ``first..``, read at ``stored``
    keys), each checked as :func:`opened` does: one pass in C when all are sound."""
    sums = list(map(crc32, values, map(crc32, stored)))
    if sums.count(_SEALED) != len(sums) or min(map(len, values), default=SEAL_BYTES) < SEAL_BYTES:
        for height, key, value in zip(
            range(first, first + len(values)), stored, values, strict=True
        ):
            opened(keys, height, key, value)
    return list(map(_payload_of, values))
