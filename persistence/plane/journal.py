"""Protocol B: the world journal -- contiguous heights, expected-head append, strict reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from persistence import fdbtuple, kv
from persistence.errors import HeadAdvanced, MissingJournalEntry, WorldNotFound
from persistence.keyspace import CHUNK_SIZE, UniverseKeys, WorldKeys
from persistence.plane import segment_index
from persistence.records import JournalHead, SegmentIndexRecord, decode_record


def read_head(tr: kv.Transaction, keys: WorldKeys) -> JournalHead:
    """The world's head record; ``NotFound`` if the world does not exist."""
    raw = tr.get(keys.head())
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
    tr: kv.Transaction,
    keys: WorldKeys,
    head: JournalHead,
    entries: Sequence[bytes],
    batch_id: bytes,
) -> int:
    """Append after ``head`` (already read in ``tr``) and move the head; return the first height."""
    first = head.height + 1
    write_entries(tr, keys, first, entries)
    tr.set(keys.head(), JournalHead(head.height + len(entries), batch_id, first).to_cbor())
    return first


@kv.transactional
def append_batch(
    tr: kv.Transaction,
    keys: WorldKeys,
    expected_head: int,
    entries: Sequence[bytes],
    batch_id: bytes,
) -> int:
    """Protocol B. ``batch_id`` is unique per call (made outside the retry loop): if the head
    already records this batch at ``expected_head + 1``, an earlier attempt committed and its
    first height is returned instead of a conflict."""
    head = read_head(tr, keys)
    if head.height != expected_head:
        if (
            head.batch_id == batch_id
            and head.batch_first == expected_head + 1
            and head.height == expected_head + len(entries)
        ):
            return expected_head + 1
        raise HeadAdvanced(expected_head, head.height)
    return append_at(tr, keys, head, entries, batch_id)


@dataclass(frozen=True, slots=True)
class JournalPage:
    """One transaction's view of a stretch of journal: the head, and either hot entries or
    the cold segment that holds ``first`` (hot keys of an indexed range may already be gone,
    so the index is authoritative)."""

    head: int
    rows: list[tuple[int, bytes]]
    segment: SegmentIndexRecord | None = None


@kv.transactional
def read_entries(tr: kv.Transaction, keys: WorldKeys, first: int, limit: int) -> JournalPage:
    """The head and up to ``limit`` entries from ``first``, checked to be contiguous and
    whole -- or the segment that covers ``first``. The segment index and the hot keys are
    read in the same transaction: an export indexes a segment before deleting its hot keys,
    so a reader that sees no segment sees every hot key. A missing height or chunk below
    the head is ``MissingJournalEntry``."""
    head = read_head(tr, keys).height
    if first > head or limit <= 0:
        return JournalPage(head, [])
    covering = segment_index.read_segments(
        tr, UniverseKeys(keys.universe), keys.world, first, limit=1
    )
    if covering and covering[0].start <= first:
        return JournalPage(head, [], covering[0])
    last = min(head, first + limit - 1)
    rows = tr.get_range(*keys.entries_between(first, last))
    prefix = keys.entry_prefix_len()
    whole_key = keys.whole_entry_key()
    out: list[tuple[int, bytes]] = []
    expected = first
    parts: list[bytes] = []
    for key, value in rows:
        if not parts and key == whole_key(expected):
            out.append((expected, value))  # fast path: the next entry, stored whole
            expected += 1
            continue
        height, index, count = fdbtuple.unpack(key, prefix)
        if not (isinstance(height, int) and isinstance(index, int) and isinstance(count, int)):
            raise MissingJournalEntry(str(keys.world), expected)
        if height != expected or index != len(parts):
            raise MissingJournalEntry(str(keys.world), expected)
        parts.append(value)
        if index + 1 == count:
            out.append((expected, b"".join(parts)))
            parts = []
            expected += 1
    if parts or expected != last + 1:
        raise MissingJournalEntry(str(keys.world), expected)
    return JournalPage(head, out)
