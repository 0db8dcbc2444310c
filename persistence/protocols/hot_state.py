"""What a world keeps in the KV store (its hot state), counted key family by key family.

Hot state is the expensive tier on FoundationDB and the file every host opens on SQLite, so
operators need to see what grows: journal entries not yet exported, inbox items still
pending or already consumed (kept for the idempotency window, then compacted), idempotency
entries, call records and other bookkeeping. The count scans the world's keys in pages of
snapshot reads, one read-only transaction each: it never conflicts with a writer, and it is
not one consistent snapshot (a busy world moves between pages).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from persistence import kv
from persistence.fdbtuple import Versionstamp, unpack
from persistence.futures import drive
from persistence.ids import InboxSeq
from persistence.inbox_records import InboxCursor
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.records import decode_record

PAGE_ROWS: Final = 1_000
"""Keys read per transaction (well inside FoundationDB's five-second limit)."""

FAMILIES: Final = (
    "journal",
    "inbox_pending",
    "inbox_consumed",
    "idempotency",
    "call_records",
    "snapshots",
    "segment_index",
    "bookkeeping",
)
"""The key families, in report order. ``journal`` counts entries (an entry of several
chunks is one), the others keys; ``bookkeeping`` is the head, cursor, meta, notify counter,
export marker, pins and anything else. ``segment_index`` counts the world's segment index
records, which live among its universe's keys."""


@dataclass(slots=True)
class Family:
    """How many items of one family, and their key + value bytes."""

    count: int = 0
    bytes: int = 0


@dataclass(slots=True)
class HotState:
    """A world's hot keys by family (see :data:`FAMILIES`)."""

    families: dict[str, Family] = field(default_factory=lambda: {f: Family() for f in FAMILIES})

    @property
    def keys(self) -> int:
        """Every family's count (journal entries counted once, whatever their chunks)."""
        return sum(f.count for f in self.families.values())

    @property
    def bytes(self) -> int:
        """Key and value bytes of every hot key of the world."""
        return sum(f.bytes for f in self.families.values())

    def to_json(self) -> dict[str, dict[str, int]]:
        """``{family: {"count": n, "bytes": b}}`` in report order."""
        return {name: {"count": f.count, "bytes": f.bytes} for name, f in self.families.items()}


def _family(path: tuple[object, ...], cursor: InboxSeq | None) -> tuple[str, bool]:
    """The family of a key (by the tuple after the world prefix) and whether it counts
    (a journal entry counts at its first chunk only)."""
    head = path[0] if path else None
    if head == "journal" and len(path) == 5 and path[1] == "e":
        return "journal", path[3] == 0
    if head == "inbox" and len(path) >= 3:
        stamp = path[2]
        if path[1] == "e" and isinstance(stamp, Versionstamp) and stamp.complete:
            consumed = cursor is not None and InboxSeq(stamp.to_bytes()) <= cursor
            return ("inbox_consumed" if consumed else "inbox_pending"), True
        if path[1] == "idem":
            return "idempotency", True
    if head == "calls":
        return "call_records", True
    if head in ("snapshot", "baseline"):
        return "snapshots", True
    return "bookkeeping", True


@kv.transactional
async def _page(tr: kv.Transaction, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    return list(await tr.get_range(begin, end, limit=PAGE_ROWS, snapshot=True))


def _pages(engine: kv.Engine, span: tuple[bytes, bytes]) -> Iterator[list[tuple[bytes, bytes]]]:
    begin, end = span
    while rows := drive(_page(engine, begin, end)):
        yield rows
        if len(rows) < PAGE_ROWS:
            return
        begin = rows[-1][0] + b"\x00"


@kv.transactional
async def _cursor(tr: kv.Transaction, keys: WorldKeys) -> InboxSeq | None:
    raw = await tr.get(keys.inbox_cursor(), snapshot=True)
    return None if raw is None else decode_record(InboxCursor, raw, "inbox cursor").seq


def measure(engine: kv.Engine, keys: WorldKeys) -> HotState:
    """Count the world's hot keys by family (``WorldNotFound`` is the caller's to check)."""
    cursor = drive(_cursor(engine, keys))
    state = HotState()
    prefix = keys.prefix_len()
    segments = state.families["segment_index"]
    for rows in _pages(engine, UniverseKeys(keys.universe).segment_range(keys.world)):
        segments.count += len(rows)
        segments.bytes += sum(len(key) + len(value) for key, value in rows)
    for rows in _pages(engine, keys.all()):
        for key, value in rows:
            try:
                path = unpack(key, prefix)
            except ValueError:  # not a key the plane wrote; fsck reports it
                path = ()
            name, counts = _family(path, cursor)
            family = state.families[name]
            family.count += counts
            family.bytes += len(key) + len(value)
    return state
