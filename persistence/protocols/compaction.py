"""Inbox compaction: consumed items and their idempotency entries are removed once they have
been consumed for at least the retention window (``PlaneConfig.inbox_retention_seconds``).

When an item was consumed is never taken from the compactor's clock alone. Each compaction
transaction reads the cursor (at snapshot isolation) and, if it moved past the newest
*consumed mark* and that mark is at least a sixteenth of the window old, writes
``inbox/consumed/<now>`` holding the cursor. The cursor only moves forward and was set before
it was read, so every item at or below a mark's cursor was consumed at or before the mark's
time. The transaction then takes the newest mark at least the window old -- the boundary --,
removes the marks older than it, and removes the items at or below the boundary's cursor
with their idempotency entries, a bounded page at a time (``more`` says whether some remain).
Marks are a sixteenth of the window apart and one beyond the window is kept: at most 17.
A mark dated more than the window after a pass's own time (a clock far ahead wrote it) is
dropped by that pass: while it stood, no mark was due and none became the boundary.
The hosts' clocks must agree to well within the window: a mark is written by one compactor's
clock and judged by another's, so a clock running late shortens the window by its lag.

Conflicts. Items are read at snapshot isolation: they are immutable, drains read only above
the cursor, and a compaction reads only at or below a mark's cursor, which is at or below the
cursor. The cursor is read at snapshot isolation too (a drain that moves it meanwhile only
makes the mark conservative). What a compaction reads with a conflict is what other writers
of those keys must serialize with: the marks (another compactor of the world) and each
removed item's idempotency entry, which it clears only if the entry still names the item. An
enqueue reads that entry with a conflict too, so an enqueue that found it aborts if the
compaction commits first and, retried, makes a new item; a compaction that read it aborts if
another compaction cleared it and an enqueue wrote it anew meanwhile.

A retry after an applied ``commit_unknown_result`` reports what the first attempt removed
(its call record, ``protocols/calls.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from persistence import fdbtuple, kv
from persistence.errors import CorruptRecord, WorldNotFound
from persistence.futures import drive
from persistence.ids import INBOX_SEQ_LEN, InboxSeq
from persistence.inbox_records import InboxCompactionRecord, InboxConsumedMark, InboxEnvelope
from persistence.keyspace import WorldKeys, seq_in_key
from persistence.protocols import budget, calls
from persistence.protocols.calls import Call
from persistence.protocols.inbox import read_cursor, read_cursor_record
from persistence.records import CallRecord, decode_record
from persistence.sizes import check_int

Clock = Callable[[], int]
"""Wall-clock time in nanoseconds since the epoch (``time.time_ns``; tests inject their own)."""


def never_back(clock: Clock) -> Clock:
    """``clock`` as one call's attempts read it: never earlier than an earlier attempt read.
    A retry must see at least the work its first attempt saw, so that when that attempt may
    have committed (1021) or may still (a late 1031) the retry writes too -- and conflicts
    with it, or finds its call record -- instead of reporting less than was done."""
    latest = 0

    def read() -> int:
        nonlocal latest
        latest = max(latest, check_int(clock(), "now_ns", 0, budget.LATEST_NS))
        return latest

    return read


MARKS_PER_WINDOW: Final = 16
"""A new consumed mark is written at most once per ``retention / MARKS_PER_WINDOW``."""
MAX_MARKS: Final = MARKS_PER_WINDOW + 1
"""The most marks a world keeps: those within the window, and the boundary beyond it."""
READ_PAGE: Final = 64
"""Items read per range read of a compaction."""
OP: Final = "compact_inbox"
"""The call record's ``op``."""


@dataclass(frozen=True, slots=True)
class InboxCompaction:
    """What inbox compaction did: ``items`` removed with ``idempotency_entries`` of their
    entries, consumed marks written and removed, and whether consumed items older than the
    window remain (call again)."""

    items: int = 0
    idempotency_entries: int = 0
    marks_written: int = 0
    marks_removed: int = 0
    more: bool = False

    @property
    def wrote(self) -> bool:
        """Whether anything was written."""
        return bool(
            self.items or self.idempotency_entries or self.marks_written or self.marks_removed
        )

    def __add__(self, later: InboxCompaction) -> InboxCompaction:
        """Both compactions' counts; ``more`` as ``later`` left it."""
        return InboxCompaction(
            self.items + later.items,
            self.idempotency_entries + later.idempotency_entries,
            self.marks_written + later.marks_written,
            self.marks_removed + later.marks_removed,
            later.more,
        )


@dataclass(frozen=True, slots=True)
class CompactionLimits:
    """The window (nanoseconds) and what one transaction may do: remove ``max_items``, read
    about ``max_read_bytes`` of envelopes (at least one), count ``budget`` bytes
    (``protocols/budget.py``)."""

    retention_ns: int
    max_items: int
    max_read_bytes: int
    budget: int


@kv.transactional
async def compact(
    tr: kv.Transaction, keys: WorldKeys, limits: CompactionLimits, now_ns: Clock, call: Call
) -> InboxCompaction:
    """One compaction transaction of ``keys``' inbox (see the module): write a consumed mark if
    one is due, drop the marks older than the boundary, remove a page of the items at or below
    the boundary's cursor with their idempotency entries. ``WorldNotFound`` if there is no
    such world; ``Validation`` naming ``now_ns`` if the clock gives no time."""
    opening = calls.begin(tr, keys, call)
    # One wave: the world's meta (it never changes: a snapshot read, so nothing aborts the
    # compaction on it), the cursor, the marks, the call's own reads.
    meta = tr.get(keys.meta(), snapshot=True)
    cursor_read = tr.get(keys.inbox_cursor(), snapshot=True)
    marks_read = tr.get_range(*keys.inbox_consumed_marks())  # compactions serialize on them
    done = await calls.replayed(opening)
    if done is not None:
        return _recorded(done)
    if await meta is None:
        raise WorldNotFound(keys.universe, keys.world)
    cursor = read_cursor_record(await cursor_read)
    marks = decode_marks(keys, await marks_read)
    # The clock is read after the cursor: that cursor was set before this time.
    now = check_int(now_ns(), "now_ns", 0, budget.LATEST_NS)
    marks, dropped = _drop_marks_ahead(tr, keys, marks, now, limits.retention_ns)
    written = 0
    if cursor is not None and _mark_due(marks, cursor.seq, now, limits.retention_ns):
        tr.set(keys.inbox_consumed_mark(now), InboxConsumedMark(cursor.seq).to_cbor())
        written = 1
    expired = [i for i, (at_ns, _) in enumerate(marks) if at_ns <= now - limits.retention_ns]
    outcome = InboxCompaction(marks_written=written, marks_removed=dropped)
    if expired:
        boundary = expired[-1]
        if boundary:
            begin, _ = keys.inbox_consumed_marks()
            tr.clear_range(begin, keys.inbox_consumed_mark(marks[boundary][0]))
        items, entries, more = await _remove_items(tr, keys, marks[boundary][1], limits)
        outcome = InboxCompaction(items, entries, written, boundary + dropped, more)
    if outcome.wrote:
        record = InboxCompactionRecord(
            outcome.items,
            outcome.idempotency_entries,
            outcome.marks_written,
            outcome.marks_removed,
            outcome.more,
        )
        calls.record(opening, OP, value=record.to_cbor())
    return outcome


@dataclass(frozen=True, slots=True)
class CompactionPreview:
    """What a compaction pass at ``now`` would do, found with snapshot reads only: the
    world's ``marks``, whether it would write one, the boundary mark's time (``None``: no
    mark is older than the window yet) and how many items it would remove (counted up to
    a cap: ``removable_capped``). It removes idempotency entries with their items."""

    marks: int
    mark_due: bool
    boundary_ns: int | None
    removable: int
    removable_capped: bool


PREVIEW_PAGE: Final = 100
"""Items a preview counts per read-only transaction (whole envelopes are read: up to
100,000 bytes each, so a page stays near FoundationDB's comfortable read sizes)."""


@kv.transactional
async def _preview_marks(
    tr: kv.Transaction, keys: WorldKeys, retention_ns: int, now: int
) -> tuple[int, bool, tuple[int, InboxSeq] | None]:
    if await tr.get(keys.meta(), snapshot=True) is None:
        raise WorldNotFound(keys.universe, keys.world)
    cursor = await read_cursor(tr, keys, snapshot=True)
    marks = await read_marks(tr, keys)
    due = cursor is not None and _mark_due(marks, cursor.seq, now, retention_ns)
    expired = [mark for mark in marks if mark[0] <= now - retention_ns]
    return len(marks), due, (expired[-1] if expired else None)


@kv.transactional
async def _count_page(tr: kv.Transaction, begin: bytes, end: bytes) -> list[bytes]:
    return [key for key, _ in await tr.get_range(begin, end, limit=PREVIEW_PAGE, snapshot=True)]


def preview(
    engine: kv.Engine, keys: WorldKeys, retention_ns: int, now: int, cap: int
) -> CompactionPreview:
    """What :func:`compact` would do at ``now`` with the window ``retention_ns``, counting
    removable items up to ``cap`` a page per transaction (nothing is written;
    ``WorldNotFound`` if there is no such world)."""
    marks, due, boundary = drive(_preview_marks(engine, keys, retention_ns, now))
    if boundary is None:
        return CompactionPreview(marks, due, None, 0, False)
    begin, end = keys.inbox_through(boundary[1])
    counted = 0
    while counted <= cap and (page := drive(_count_page(engine, begin, end))):
        counted += len(page)
        begin = page[-1] + b"\x00"
    return CompactionPreview(marks, due, boundary[0], min(counted, cap), counted > cap)


async def read_marks(tr: kv.Transaction, keys: WorldKeys) -> list[tuple[int, InboxSeq]]:
    """The world's consumed marks, oldest first: ``(at_ns, cursor)`` (snapshot reads, for
    inspection)."""
    return decode_marks(keys, await tr.get_range(*keys.inbox_consumed_marks(), snapshot=True))


async def _read_marks(tr: kv.Transaction, keys: WorldKeys) -> list[tuple[int, InboxSeq]]:
    """The marks, read with a conflict: compactions of one world serialize on them."""
    return decode_marks(keys, await tr.get_range(*keys.inbox_consumed_marks()))


def decode_marks(keys: WorldKeys, rows: list[tuple[bytes, bytes]]) -> list[tuple[int, InboxSeq]]:
    """The consumed marks stored as ``rows``: ``(at_ns, cursor)`` each, strictly decoded."""
    prefix = keys.inbox_consumed_prefix_len()
    marks = []
    for key, value in rows:
        try:
            element = fdbtuple.unpack(key, prefix)
        except ValueError:
            element = ()
        if len(element) != 1 or type(element[0]) is not int or element[0] < 0:
            raise CorruptRecord("consumed mark key", f"{key.hex()} does not end with a time")
        marks.append((element[0], decode_record(InboxConsumedMark, value, "consumed mark").seq))
    return marks


def _drop_marks_ahead(
    tr: kv.Transaction,
    keys: WorldKeys,
    marks: list[tuple[int, InboxSeq]],
    now: int,
    retention_ns: int,
) -> tuple[list[tuple[int, InboxSeq]], int]:
    """``marks`` without those dated more than a window after ``now`` (cleared), and how
    many went. Such a mark was written by a clock far ahead of this one: while it is the
    newest, no mark is due (it is never old enough) and none ever becomes the boundary, so
    one bad clock would stop the world's compaction for good. Dropping a mark only ever
    delays removal (what is removed needs a mark at least the window old), so a clock that
    is itself behind loses nothing by it either."""
    ahead = next((i for i, (at_ns, _) in enumerate(marks) if at_ns > now + retention_ns), None)
    if ahead is None:
        return marks, 0
    tr.clear_range(keys.inbox_consumed_mark(marks[ahead][0]), keys.inbox_consumed_marks()[1])
    return marks[:ahead], len(marks) - ahead


def _mark_due(
    marks: list[tuple[int, InboxSeq]], cursor: InboxSeq, now: int, retention_ns: int
) -> bool:
    """Whether to mark ``cursor`` at ``now``: it moved past the newest mark, which is at least
    a sixteenth of the window old (so marks stay at most :data:`MAX_MARKS`)."""
    if not marks:
        return True
    newest_ns, newest = marks[-1]
    return cursor > newest and now - newest_ns >= -(-retention_ns // MARKS_PER_WINDOW)


async def _remove_items(
    tr: kv.Transaction, keys: WorldKeys, through: InboxSeq, limits: CompactionLimits
) -> tuple[int, int, bool]:
    """Remove the oldest items up to ``through`` (within the limits, at least one) and the
    idempotency entries that still name them; return the items and entries removed and
    whether items up to ``through`` remain. A page of items is read one more than it may
    remove (whether items remain needs no read of its own), then the idempotency entries of
    the items it removes, in one request."""
    cost = budget.compaction_fixed_cost(keys)
    read = removed = entries = 0
    begin, end = keys.inbox_through(through)
    last: bytes | None = None
    more = False
    while True:
        page = min(READ_PAGE, limits.max_items - removed)
        rows = await tr.get_range(begin, end, limit=page + 1, snapshot=True)
        named: list[tuple[bytes, bytes]] = []  # (idempotency entry, the item's sequence)
        for key, value in rows[:page]:
            envelope = decode_record(InboxEnvelope, value, "inbox entry")
            cost += budget.compaction_item_cost(keys, envelope.idempotency_key)
            read += len(value)
            if removed and (cost > limits.budget or read > limits.max_read_bytes):
                more = True
                break
            budget.check(cost, limits.budget, "size_limit", "removing one consumed inbox item")
            if envelope.idempotency_key is not None:
                seq = seq_in_key(key, keys.inbox_prefix_len(), f"inbox entry key of {keys.world}")
                named.append((keys.inbox_idempotency(envelope.idempotency_key), seq.raw))
            removed += 1
            last = key
        entries += await _clear_entries(tr, named)
        if more or len(rows) <= page:
            break
        if removed == limits.max_items:  # the row past the page: items remain
            more = True
            break
        begin = rows[page - 1][0] + b"\x00"
    if last is not None:
        # The items below ``last`` are removed here or were earlier: one cheap range clear.
        tr.clear_range(keys.inbox_after(None)[0], last + b"\x00")
    return removed, entries, more


async def _clear_entries(tr: kv.Transaction, named: list[tuple[bytes, bytes]]) -> int:
    """Clear each idempotency entry of ``named`` that still names its item's sequence (read
    with a conflict, all at once: see the module); how many were cleared."""
    if not named:
        return 0
    current = await tr.get_many([entry for entry, _ in named])
    cleared = 0
    for (entry, seq), value in zip(named, current, strict=True):
        if value is not None and value[:INBOX_SEQ_LEN] == seq:  # the sequence, then the
            tr.clear(entry)  # fingerprint (records.IDEMPOTENCY_ENTRY_BYTES)
            cleared += 1
    return cleared


def _recorded(done: CallRecord) -> InboxCompaction:
    """The outcome an earlier attempt of the call recorded."""
    if done.op != OP or done.value is None:
        raise CorruptRecord("call record", f"a {done.op!r} record for an inbox compaction")
    record = decode_record(InboxCompactionRecord, done.value, "inbox compaction record")
    return InboxCompaction(
        record.items,
        record.idempotency_entries,
        record.marks_written,
        record.marks_removed,
        record.more,
    )
