"""The store as the torture's checks read it, once no process runs: each world's journal
sorted into records, its inbox read in pages, and the worlds marked ready."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from conformance.torture.workload import AppendId, ItemId, append_id, item_id
from persistence import kv
from persistence.errors import CorruptRecord, PersistError
from persistence.fdbtuple import unpack
from persistence.futures import drive
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxEnvelope, idempotency_entry
from persistence.journal_records import (
    BaselineSnapshotJournalRecord,
    IngressJournalRecord,
    SnapshotJournalRecord,
    decode_journal_record,
)
from persistence.keyspace import UniverseKeys, WorldKeys, seq_in_key
from persistence.plane import Plane
from persistence.protocols import inbox as inbox_protocol
from persistence.records import decode_record

PAGE_ROWS: Final = 1_000
"""Rows read per transaction when the checks read an inbox."""


@dataclass
class Journal:
    """One world's journal, read through segments and the hot tail, sorted into records."""

    head: int
    rows: list[tuple[int, bytes]]
    items: list[tuple[int, InboxSeq, ItemId | None]] = field(default_factory=list)
    """(height, sequence, item id) of each drained item, in height order."""
    snapshots: list[tuple[int, SnapshotJournalRecord]] = field(default_factory=list)
    baselines: list[tuple[int, BaselineSnapshotJournalRecord]] = field(default_factory=list)
    appends: list[tuple[int, AppendId]] = field(default_factory=list)
    """(height, id) of each entry an appender wrote, in height order."""


def read_journal(
    plane: Plane, universe: UniverseId, world: WorldId, index: int, violations: list[str]
) -> Journal | None:
    """The world's whole journal, or ``None`` (and a violation) if it cannot be read whole."""
    try:
        head = plane.head(universe, world)
        rows = plane.read_range(universe, world, 1, head)
    except PersistError as exc:
        violations.append(f"journal: world {index}: the stitched read failed: {exc!r}")
        return None
    heights = [h for h, _ in rows]
    if heights != list(range(1, head + 1)):
        missing = sorted(set(range(1, head + 1)) - set(heights))[:10]
        violations.append(
            f"journal: world {index}: heights are not 1..{head} (missing {missing}, "
            f"{len(rows)} entries read)"
        )
        return None
    journal = Journal(head, rows)
    for height, entry in rows:
        try:
            record = decode_journal_record(entry)
            if isinstance(record, IngressJournalRecord):
                journal.items.append((height, record.seq, item_id(record.item)))
            elif isinstance(record, SnapshotJournalRecord):
                journal.snapshots.append((height, record))
            elif isinstance(record, BaselineSnapshotJournalRecord):
                journal.baselines.append((height, record))
            elif record is None and (appended := append_id(entry)) is not None:
                journal.appends.append((height, appended))
            else:
                violations.append(f"journal: world {index}: entry {height} is not a plane record")
        except PersistError as exc:
            violations.append(f"journal: world {index}: entry {height} does not decode: {exc!r}")
    return journal


@dataclass
class Inbox:
    """One world's inbox as stored: the cursor, every item left (compaction removes
    consumed ones) with its idempotency key, and every idempotency entry."""

    cursor: InboxSeq | None
    items: dict[InboxSeq, bytes | None]
    entries: dict[bytes, InboxSeq]

    def pending(self) -> set[InboxSeq]:
        """The items after the cursor."""
        return {seq for seq in self.items if self.cursor is None or seq > self.cursor}


def read_inbox(plane: Plane, universe: UniverseId, world: WorldId) -> Inbox:
    """The world's inbox, read in pages (the store is quiet: no process runs)."""
    keys = WorldKeys(universe, world)
    items: dict[InboxSeq, bytes | None] = {}
    for key, value in read_rows(plane, *keys.inbox_after(None)):
        seq = seq_in_key(key, keys.inbox_prefix_len(), "inbox entry key")
        items[seq] = decode_record(InboxEnvelope, value, "inbox entry").idempotency_key
    entries: dict[bytes, InboxSeq] = {}
    for key, value in read_rows(plane, *keys.inbox_idempotency_entries()):
        try:
            element = unpack(key, keys.prefix_len())[-1]
        except ValueError:
            element = None
        if not isinstance(element, bytes):
            raise CorruptRecord("idempotency entry key", f"{key.hex()} does not end with a key")
        entries[element] = idempotency_entry(value, "idempotency entry")[0]
    return Inbox(plane.inbox_cursor(universe, world), items, entries)


@kv.transactional
async def read_page(tr: kv.Transaction, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    """The first :data:`PAGE_ROWS` rows of ``[begin, end)``, read without conflicts."""
    return list(await tr.get_range(begin, end, limit=PAGE_ROWS, snapshot=True))


def inbox_or_violation(
    plane: Plane, universe: UniverseId, world: WorldId, index: int, violations: list[str]
) -> Inbox | None:
    """The world's inbox, or ``None`` (and a violation) if it cannot be read."""
    try:
        return read_inbox(plane, universe, world)
    except PersistError as exc:
        violations.append(f"inbox: world {index}: the read failed: {exc!r}")
        return None


def read_rows(plane: Plane, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every row of ``[begin, end)``, a page per transaction."""
    while rows := drive(read_page(plane.engine, begin, end)):
        yield from rows
        if len(rows) < PAGE_ROWS:
            return
        begin = rows[-1][0] + b"\x00"


def ready_worlds(plane: Plane, universe: UniverseId) -> set[WorldId]:
    """The worlds of ``universe`` whose ready mark is set (the pending-work index)."""
    keys = UniverseKeys(universe)
    after, end = keys.ready_range()
    found: set[WorldId] = set()
    page: bytes | None = after
    while page is not None:
        worlds, page = drive(inbox_protocol.read_ready(plane.engine, keys, page, end))
        found.update(worlds)
    return found
