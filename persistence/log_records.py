"""The universe log's stored records: its head, the record at each position (the world,
height and tag of a journal entry) with its fast encoder and decoder, and each consumer's
tracking position."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from persistence import cbor
from persistence.errors import Validation
from persistence.ids import WorldId
from persistence.records import (
    TEXT,
    U64,
    WORLD,
    CounterCodec,
    Record,
    decode_record,
    required,
    unsigned_at,
)


@dataclass(frozen=True, slots=True)
class LogHead(Record):
    """``log/head``: the last position of the universe log (see ``protocols/journal.py``)."""

    position: int = required(U64)


@dataclass(frozen=True, slots=True)
class LogRecord(Record):
    """``log/<position>``: the journal entry at a universe log position, and the tag the
    appender gave it (readers filter by tag)."""

    world: WorldId = required(WORLD)
    height: int = required(U64)
    tag: str = required(TEXT)


def log_records(world: WorldId, first_height: int, tags: Sequence[str]) -> list[bytes]:
    """``[LogRecord(world, first_height + i, tag).to_cbor() for i, tag in enumerate(tags)]``,
    each distinct tag's record built and validated once: canonical CBOR orders map keys by
    length, so the height (``"height"``, the longest key) is encoded last, and the records
    of one world and tag differ only in its bytes."""
    heads: dict[str, bytes] = {}
    out: list[bytes] = []
    for height, tag in enumerate(tags, start=first_height):
        head = heads.get(tag)
        if head is None:
            head = heads[tag] = _log_record_head(world, tag)
        out.append(head + cbor.unsigned(height))
    return out


def _log_record_head(world: WorldId, tag: str) -> bytes:
    """The bytes of ``LogRecord(world, height, tag)`` before the height's: the tag's part
    (kept per tag), then the world's, in canonical CBOR's order of the keys (by length:
    ``tag``, ``world``, ``height``). Built for every new world an append or a read meets,
    so without constructing and encoding a record each time."""
    if type(world) is not WorldId:  # refused (Validation) as a record refuses it
        return LogRecord(world, 0, tag).to_cbor()[:-1]
    return _tag_part(tag) + _LOG_WORLD + world.uuid.bytes + _LOG_HEIGHT


@functools.lru_cache(maxsize=4096)
def _tag_part(tag: str) -> bytes:
    """The bytes of a log record tagged ``tag`` before its world's, kept for recent tags
    (an application's few event topics): cut from a record's own encoding, which checks
    the tag (``Validation`` for one the record refuses), after checking that the world's
    and the height's bytes end it as :func:`_log_record_head` writes them."""
    world = WorldId(uuid.UUID(int=0))
    encoded = LogRecord(world, 0, tag).to_cbor()
    rest = _LOG_WORLD + world.uuid.bytes + _LOG_HEIGHT + cbor.unsigned(0)
    if not encoded.endswith(rest):
        raise RuntimeError(f"a log record is not encoded in the order expected: {encoded.hex()}")
    return encoded[: -len(rest)]


_LOG_TAG: Final = b"\xa3\x63tag"
"""How a stored log record begins: a map of three, its first key ``tag`` (canonical CBOR
orders keys by length)."""
_LOG_WORLD: Final = b"\x65world\x50"
_LOG_HEIGHT: Final = b"\x66height"
_TEXT_WIDTHS: Final = {0x78: 1, 0x79: 2}
"""CBOR heads of text strings of 24 bytes and more (a tag is at most 65,535), by the bytes
of their length."""


def decode_log_record(raw: bytes, *what: object) -> LogRecord:
    """A stored :class:`LogRecord`, read at its fields' places where ``raw`` is exactly
    what :func:`log_records` writes -- checked by encoding the record again from the fields
    read and comparing, so that nothing else passes -- else by the strict decoder (whose
    ``CorruptRecord`` names what is wrong, and where: ``what``'s parts, joined only then).
    The universe log is read a record per notification: the strict decoder's generic
    checks were most of its cost."""
    record = _log_record_at_places(raw)
    if record is not None:
        return record
    return decode_record(LogRecord, raw, " ".join(map(str, what)))


def _log_record_at_places(raw: bytes) -> LogRecord | None:
    if not raw.startswith(_LOG_TAG) or len(raw) < 7:
        return None
    lead, at = raw[5], 6
    if 0x60 <= lead < 0x78:
        size = lead - 0x60
    elif lead in _TEXT_WIDTHS:
        at += _TEXT_WIDTHS[lead]
        size = int.from_bytes(raw[6:at], "big")
    else:
        return None
    height_at = at + size + _WORLD_AND_HEIGHT_BYTES
    head = raw[:height_at]
    known = _HEADS.get(head)
    if known is None:
        known = _head_at_places(head, at, size)
        if known is None:
            return None
        if len(_HEADS) >= _HEADS_KEPT:
            _HEADS.clear()
        _HEADS[head] = known
    height = unsigned_at(raw, height_at)
    # canonical: the shortest encoding of the height, as the encoder writes it
    if height < 0 or len(raw) - height_at != _unsigned_width(height):
        return None
    return _proven(known[0], height, known[1])


def _proven(world: WorldId, height: int, tag: str) -> LogRecord:
    """``LogRecord(world, height, tag)`` without construction's checks: only for fields read
    from bytes equal to a valid record's encoding (a third of the constructor's cost, once
    per record a reader reads)."""
    record = _new(LogRecord)
    _set(record, "world", world)
    _set(record, "height", height)
    _set(record, "tag", tag)
    return record


_new: Final = object.__new__
_set: Final = object.__setattr__
_WORLD_AND_HEIGHT_BYTES: Final = len(_LOG_WORLD) + 16 + len(_LOG_HEIGHT)
_HEADS: Final[dict[bytes, tuple[WorldId, str]]] = {}
"""Record heads (every byte before the height's) already proven, with their world and tag:
an aggregate's events share one, so most records are decoded by one lookup."""
_HEADS_KEPT: Final = 4096


def _head_at_places(head: bytes, at: int, size: int) -> tuple[WorldId, str] | None:
    """The world and tag of ``head`` (a record's bytes before its height; its tag ``size``
    bytes from ``at``) if it is exactly what :func:`log_records` writes for them."""
    world_at = at + size + len(_LOG_WORLD)
    if head[at + size : world_at] != _LOG_WORLD or head[world_at + 16 :] != _LOG_HEIGHT:
        return None
    try:
        tag = head[at : at + size].decode("utf-8")
        world = _world_of(head[world_at : world_at + 16])
        # the world is one (any 16 bytes are), the tag is checked by the record its part of
        # the expected head is cut from; bytes equal to a valid record's encoding are that
        # record: nothing to check again
        expected = _log_record_head(world, tag)
    except (UnicodeDecodeError, Validation, cbor.NotCanonical):
        return None
    return (world, tag) if expected == head else None


def _unsigned_width(value: int) -> int:
    """The bytes of ``value``'s shortest CBOR encoding (an unsigned integer)."""
    if value < 24:
        return 1
    if value < 0x100:
        return 2
    if value < 0x10000:
        return 3
    return 5 if value < 0x100000000 else 9


@functools.lru_cache(maxsize=4096)
def _world_of(raw: bytes) -> WorldId:
    """The world whose id's 16 bytes are ``raw``, kept for recent ones."""
    world: WorldId = WORLD.load(raw)
    return world


@dataclass(frozen=True, slots=True)
class TrackingRecord(Record):
    """``tracking/<name>``: the highest upstream position consumer ``name`` recorded with
    an append."""

    position: int = required(U64)


LOG_HEAD: Final = CounterCodec(LogHead)
"""The bytes of ``log/head`` records (:class:`LogHead`)."""
TRACKING: Final = CounterCodec(TrackingRecord)
"""The bytes of ``tracking/<name>`` records (:class:`TrackingRecord`)."""
