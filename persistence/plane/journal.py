"""Protocol B: the world journal -- contiguous heights, expected-head append, strict reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from persistence import fdbtuple, kv
from persistence.errors import (
    CorruptRecord,
    HeadAdvanced,
    MissingJournalEntry,
    SegmentIndexCorruption,
    WorldNotFound,
)
from persistence.keyspace import CHUNK_SIZE, UniverseKeys, WorldKeys
from persistence.plane import calls, segment_index
from persistence.plane.calls import Call
from persistence.records import CallRecord, JournalHead, SegmentIndexRecord, decode_record


def read_head(tr: kv.Transaction, keys: WorldKeys, *, snapshot: bool = False) -> JournalHead:
    """The world's head record; ``NotFound`` if the world does not exist. A ``snapshot``
    read adds no conflict: for checks that only need a head at least this high."""
    raw = tr.get(keys.head(), snapshot=snapshot)
    if raw is None:
        raise WorldNotFound(keys.universe, keys.world)
    return decode_record(JournalHead, raw, f"journal head of world {keys.world}")


def write_entries(
    tr: kv.Transaction, keys: WorldKeys, first: int, entries: Sequence[bytes]
) -> None:
    """Write ``entries`` at heights ``first..``, each split into value-sized chunks."""
    for offset, entry in enumerate(entries):
        height = first + offset
        count = max(1, -(-len(entry) // CHUNK_SIZE))
        for index in range(count):
            chunk = entry if count == 1 else entry[index * CHUNK_SIZE : (index + 1) * CHUNK_SIZE]
            tr.set(keys.entry_chunk(height, index, count), chunk)


def append_at(
    tr: kv.Transaction, keys: WorldKeys, head: JournalHead, entries: Sequence[bytes]
) -> int:
    """Append after ``head`` (already read in ``tr``) and move the head; return the first height."""
    first = head.height + 1
    write_entries(tr, keys, first, entries)
    tr.set(keys.head(), JournalHead(head.height + len(entries)).to_cbor())
    return first


@kv.transactional
def append_batch(
    tr: kv.Transaction,
    keys: WorldKeys,
    expected_head: int,
    entries: Sequence[bytes],
    call: Call,
) -> int:
    """Protocol B: append at ``expected_head`` or raise ``HeadAdvanced``; return the first
    height. A retry whose earlier attempt committed returns that attempt's first height
    (from the call record), however far the head has moved since."""
    done = calls.replayed(tr, keys, call)
    if done is not None:
        return _required(done.first_height, "append")
    head = read_head(tr, keys)
    if head.height != expected_head:
        raise HeadAdvanced(expected_head, head.height)
    first = append_at(tr, keys, head, entries)
    calls.record(tr, keys, call, CallRecord("append", first_height=first, count=len(entries)))
    return first


def _required(value: int | None, op: str) -> int:
    if value is None:
        raise CorruptRecord("call record", f"an {op} record without its first height")
    return value


@dataclass(frozen=True, slots=True)
class JournalPage:
    """One transaction's view of a stretch of journal: the head, and either hot entries or
    the cold segment that holds ``first`` (hot keys of an indexed range may already be gone,
    so the index is authoritative)."""

    head: int
    rows: list[tuple[int, bytes]]
    segment: SegmentIndexRecord | None = None


ROWS_PER_READ: Final = 256
"""Rows fetched per range read of the journal, so a read stops near its byte budget."""


@kv.transactional
def read_entries(
    tr: kv.Transaction, keys: WorldKeys, first: int, limit: int, max_bytes: int = 0
) -> JournalPage:
    """The head and up to ``limit`` entries from ``first`` (and, with ``max_bytes``, no more
    entries than reach that many bytes: at least one), checked to be contiguous and whole --
    or the segment that covers ``first``. The segment index and the hot keys are read in the
    same transaction: an export indexes a segment before deleting its hot keys, so a reader
    that sees no segment sees every hot key. A missing height or chunk below the head is
    ``MissingJournalEntry``. The first segment ending at or after ``first`` is checked to
    continue the one before it (``segment_index.read_segments``): the index tiles from
    height 1, so that segment holds ``first`` -- a record that does not (a gap, an overlap,
    a key that is not its end) is ``SegmentIndexCorruption``, never a read of other heights."""
    head = read_head(tr, keys).height
    if first > head or limit <= 0:
        return JournalPage(head, [])
    last = min(head, first + limit - 1)
    covering = segment_index.read_segments(
        tr, UniverseKeys(keys.universe), keys.world, first, limit=1
    )
    if covering:
        segment = covering[0]
        if not segment.start <= first <= segment.end:  # read_segments' checks rule it out
            raise SegmentIndexCorruption(
                str(keys.world),
                segment.end,
                f"segment {segment.start}-{segment.end} does not hold height {first}",
            )
        return JournalPage(head, [], segment)
    prefix = keys.entry_prefix_len()
    whole_key = keys.whole_entry_key()
    out: list[tuple[int, bytes]] = []
    expected = first
    parts: list[bytes] = []
    size = 0
    begin, end = keys.entries_between(first, last)
    while True:
        rows = tr.get_range(begin, end, limit=ROWS_PER_READ)
        for key, value in rows:
            size += len(value)
            if not parts and key == whole_key(expected):
                out.append((expected, value))  # fast path: the next entry, stored whole
                expected += 1
            else:
                height, index, count = fdbtuple.unpack(key, prefix)
                if not (
                    isinstance(height, int) and isinstance(index, int) and isinstance(count, int)
                ):
                    raise MissingJournalEntry(str(keys.world), expected)
                if height != expected or index != len(parts):
                    raise MissingJournalEntry(str(keys.world), expected)
                parts.append(value)
                if index + 1 < count:
                    continue
                out.append((expected, b"".join(parts)))
                parts = []
                expected += 1
            if max_bytes and size >= max_bytes:
                return JournalPage(head, out)
        if len(rows) < ROWS_PER_READ:
            break
        begin = rows[-1][0] + b"\x00"
    if parts or expected != last + 1:
        raise MissingJournalEntry(str(keys.world), expected)
    return JournalPage(head, out)
