"""The universe log: every sequenced entry of a universe at a position, 1, 2, ... in commit
order without gaps (the positions a sequenced group append gives, ``journal.append_batches``),
and the tracking records of its consumers.

A sequenced append gives its entries positions in one of two ways:

* **inline** (:func:`sequence`): it reads the log head with a conflict and writes its records
  at the next positions, in its own transaction. Two such appends of a universe always
  conflict; one commits, the other retries after a backoff.
* **queued** (:func:`sequence` with ``queue``, then :func:`settle`): it writes its records
  under keys ordered by its commit's versionstamp, reading no log key with a conflict, so
  appends of disjoint worlds never conflict with each other; then a settle transaction
  moves the queue, in versionstamp order (commit order), to the next positions -- every
  queued record it reads, not only the caller's, so one settle serves many appends. A
  settle that meets its records moved already finds their positions in the log above the
  head its append read.

Both keep the log's promise: positions in commit order, without gaps or duplicates. An
inline append reads the queue's counter with a conflict and queues too while anything is
queued (else it would take positions before records that committed earlier), and a settle
takes only records that committed before its read version, all of them below any that
commit later. Only settles and inline appends write the head, and both read it with a
conflict: two of them never both commit on the same head."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from persistence import kv
from persistence.errors import CorruptRecord, TrackingConflict
from persistence.ids import WorldId
from persistence.keyspace import UniverseKeys, WorldKeys, height_keys
from persistence.log_records import LOG_HEAD, TRACKING, LogRecord, decode_log_record, log_records
from persistence.protocols.checksums import Sealing


@dataclass(frozen=True, slots=True)
class Sequencing:
    """What a sequenced group append adds: a position in the universe log for every entry,
    in batch order, each with its tag (``tags[batch][entry]``); and a consumer's tracking
    position, which must be above the one it recorded before."""

    tags: Sequence[Sequence[str]]
    tracking: tuple[str, int] | None


async def read_log_head(
    tr: kv.Transaction, universe: UniverseKeys, *, snapshot: bool = False
) -> int:
    """The universe log's last position (0 if empty)."""
    return log_position(await tr.get(universe.log_head(), snapshot=snapshot))


def log_position(raw: bytes | None) -> int:
    """The position of a stored log head (0: none, the log is empty)."""
    return 0 if raw is None else LOG_HEAD.decode(raw, "universe log head")


async def read_tracking(
    tr: kv.Transaction, universe: UniverseKeys, name: str, *, snapshot: bool = False
) -> int | None:
    """The position consumer ``name`` recorded last (``None`` if none)."""
    return tracked_position(await tr.get(universe.tracking(name), snapshot=snapshot))


def tracked_position(raw: bytes | None) -> int | None:
    """The position of a stored tracking record (``None``: no record)."""
    return None if raw is None else TRACKING.decode(raw, "tracking record")


@dataclass(frozen=True, slots=True)
class LogEntry:
    """A journal entry at its universe log position."""

    position: int
    world: WorldId
    height: int
    tag: str
    entry: bytes


@dataclass(frozen=True, slots=True)
class LogPage:
    """Log records read in one transaction, the entries of those that ``wanted`` and stored
    whole in hot keys, and the position to read from next (``None`` at the end)."""

    records: list[tuple[int, LogRecord]]
    entries: dict[int, bytes]
    next: int | None


@kv.transactional
async def read_log(
    tr: kv.Transaction,
    universe: UniverseKeys,
    first: int,
    limit: int,
    last: int | None,
    wanted: Callable[[LogRecord], bool],
    sealing: Sealing | None,
) -> LogPage:
    """Up to ``limit`` log records from ``first`` to ``last`` (or the head), checked to be
    the positions ``first, first + 1, ...`` with none missing below the head; and, by
    position, the entries of the ``wanted`` ones that are stored whole in hot keys (entries
    never change, so a snapshot read of them is as good as any; cold or chunked ones are
    left to the caller), checked against their checksums with ``sealing`` (the store's
    layout seals entries: ``Sealing.opened``). Two waves of reads: the head with the
    records, then the entries."""
    upto = first + limit - 1 if last is None else min(last, first + limit - 1)
    if first > upto:
        return LogPage([], {}, None)
    # the head and the records in one wave: nothing is logged above the head
    head_read = tr.get(universe.log_head(), snapshot=True)
    rows_read = tr.get_range(*universe.log_range(first, upto), snapshot=True)
    head = log_position(await head_read)
    stop = head if last is None else min(head, last)
    all_rows = await rows_read
    if first > stop:
        return LogPage([], {}, None)
    end = min(stop, upto)
    rows = all_rows[: end - first + 1]
    records: list[tuple[int, LogRecord]] = []
    asked: list[tuple[int, WorldKeys, int, bytes]] = []  # position, world, height, key
    # an aggregate's events are often near each other: each world's keys and entry-key
    # function are made once per page
    worlds: dict[WorldId, tuple[WorldKeys, Callable[[int], bytes]]] = {}
    keys_expected = height_keys(universe.log_entry, universe.log_prefix_len(), first, len(rows))
    for expected, (key, value), key_expected in zip(
        range(first, first + len(rows)), rows, keys_expected, strict=True
    ):
        if key != key_expected:
            break
        record = decode_log_record(value, "universe log at", expected)
        records.append((expected, record))
        if wanted(record):
            known = worlds.get(record.world)
            if known is None:
                keys = universe.world(record.world)
                known = worlds[record.world] = (keys, keys.whole_entry_key())
            asked.append((expected, known[0], record.height, known[1](record.height)))
    if len(records) != end - first + 1:
        missing = first + len(records)
        raise CorruptRecord("universe log", f"position {missing} is missing below head {head}")
    # the entries in one wave: one round trip, not one per entry
    found = await tr.get_many([whole for _, _, _, whole in asked], snapshot=True)
    present = [(ask, entry) for ask, entry in zip(asked, found, strict=True) if entry is not None]
    payloads = _opened(present, sealing) if sealing else [entry for _, entry in present]
    entries = {ask[0]: payload for (ask, _), payload in zip(present, payloads, strict=True)}
    return LogPage(records, entries, None if end >= stop else end + 1)


def _opened(
    present: list[tuple[tuple[int, WorldKeys, int, bytes], bytes]], sealing: Sealing
) -> list[bytes]:
    """The payloads of a log page's entries (each asked as ``(position, world, height,
    key)``), checked against their seals: in one call in C when all are sound, else one by
    one, so that the first damaged one is ``DamagedJournalEntry`` naming its world and
    height."""
    if sealing.open_rows is not None:
        payloads = sealing.open_rows([(ask[3], entry) for ask, entry in present])
        if payloads is not None:
            return payloads
    return [sealing.opened(ask[1], ask[2], ask[3], entry) for ask, entry in present]


@dataclass(frozen=True, slots=True)
class Queued:
    """Log records a sequenced append queued: ``count`` of them, the last stored as ``last``
    (what :func:`settle` looks for), all to take positions above ``after``, a log head the
    append read before they committed."""

    count: int
    after: int
    last: bytes


def queued_count(raw: bytes | None) -> int:
    """The number of queued records, stored as ``raw`` (an atomic counter; absent: 0)."""
    if raw is None:
        return 0
    count = int.from_bytes(raw, "little", signed=True)
    if len(raw) != 8 or count < 0:
        raise CorruptRecord("universe log queue counter", f"{raw.hex()} is not a count")
    return count


def sequence(
    tr: kv.Transaction,
    universe: UniverseKeys,
    batches: Sequence[tuple[WorldId, int]],
    how: Sequencing,
    tracking_raw: bytes | None,
    log_head_raw: bytes | None,
    queued_raw: bytes | None,
    queue: bool,
) -> int | Queued | None:
    """Check and store the tracking position (its record read as ``tracking_raw``); give
    the entries of ``batches`` -- ``(world, first height)`` of each, in the order of
    ``how.tags`` -- the next log positions after the head read as ``log_head_raw``: the
    first position, if any entry was appended. With ``queue``, or if the queue's counter
    read as ``queued_raw`` (with a conflict) shows records queued, the entries' records are
    queued instead (:func:`queue`): their :class:`Queued`."""
    if how.tracking is not None:
        name, position = how.tracking
        recorded = tracked_position(tracking_raw)
        if recorded is not None and recorded >= position:
            raise TrackingConflict(name, recorded, position)
        tr.set(universe.tracking(name), TRACKING.encode(position))
    records = [
        record
        for (world, first), tags in zip(batches, how.tags, strict=True)
        for record in log_records(world, first, tags)
    ]
    if not records:
        return None
    head = log_position(log_head_raw)
    if queue or (queued_raw is not None and queued_count(queued_raw)):
        return _queue(tr, universe, records, head)
    position = head + len(records)
    positions = height_keys(universe.log_entry, universe.log_prefix_len(), head + 1, len(records))
    tr.set_many(zip(positions, records, strict=True))
    tr.set(universe.log_head(), LOG_HEAD.encode(position))
    return head + 1


def queued_records(
    batches: Sequence[tuple[WorldId, int]], how: Sequencing, after: int
) -> Queued | None:
    """What :func:`sequence` queued for ``batches``, having read the head ``after`` (a
    retry's view of its committed attempt, rebuilt from the call)."""
    last = None
    count = 0
    for (world, first), tags in zip(batches, how.tags, strict=True):
        if tags:
            count += len(tags)
            last = log_records(world, first + len(tags) - 1, tags[-1:])[0]
    return None if last is None else Queued(count, after, last)


def _queue(tr: kv.Transaction, universe: UniverseKeys, records: list[bytes], head: int) -> Queued:
    """Write ``records`` to the queue under the commit's versionstamp, in order, and count
    them; a blind write (nothing read with a conflict)."""
    for index, record in enumerate(records):
        tr.set_versionstamped_key(universe.log_queue_with_versionstamp(index), record)
    tr.add(universe.log_queued(), len(records).to_bytes(8, "little"))
    return Queued(len(records), head, records[-1])


@dataclass(frozen=True, slots=True)
class Settled:
    """What one :func:`settle` transaction did: the records it ``moved`` to the log, the
    ``head`` after it, the position of the record it looked for (``None``: still queued
    behind the records it moved, or it looked for none), and whether it met records of
    other appends (queued with the caller's, or the caller's moved by another settle: a
    sign that appends of the universe overlap)."""

    moved: int
    head: int
    position: int | None
    shared: bool


SETTLE_RECORDS: Final = 1_000
"""The most queued records one settle reads and moves."""


async def settle(
    tr: kv.Transaction, universe: UniverseKeys, queued: Queued | None, budget: int
) -> Settled:
    """Move the queue's first records (at most :data:`SETTLE_RECORDS`, and of their keys and
    values at most a quarter of ``budget`` bytes: each is read, written and cleared) to the
    next log positions, in order -- unless ``queued.last`` is no longer queued: then find its
    position in the log above ``queued.after`` and write nothing (a full page without it
    first looks for it in the log's next :data:`SETTLE_RECORDS` positions, so a settle whose
    records another moved does not go on moving a long queue). With ``queued`` ``None``,
    move the first records if any (a queue left by appends that stopped before settling).
    Reads the head with a conflict and the queue at snapshot isolation: only settles and
    inline appends write the head, so two settles never both move a record; queuing
    appends, which write neither the head nor what a settle read, never conflict with
    one. A record that commits after the settle's read version sorts above every key it
    read: the settle neither takes it nor skips it."""
    head_read = tr.get(universe.log_head())
    page_read = tr.get_range(*universe.log_queue(), limit=SETTLE_RECORDS, snapshot=True)
    head = log_position(await head_read)
    page = await page_read
    values = [value for _, value in page]
    index = -1
    if queued is not None and queued.last in values:
        index = values.index(queued.last)
    elif queued is not None and len(page) < SETTLE_RECORDS:  # the whole queue read: moved
        found = await _find(tr, universe, queued, head)
        if found is None:
            raise CorruptRecord(
                "universe log",
                f"a committed append's records are neither queued nor logged from "
                f"{queued.after + 1} to head {head}",
            )
        return Settled(0, head, found, True)
    elif queued is not None:  # behind this page, or moved: look in the log's next page
        found = await _find(tr, universe, queued, min(head, queued.after + SETTLE_RECORDS))
        if found is not None:
            return Settled(0, head, found, True)
    elif not page:
        return Settled(0, head, None, False)
    taken, size = 0, 0
    for key, value in page:
        size += len(key) + len(value)
        if taken and size > budget // 4:
            break
        taken += 1
    page, values = page[:taken], values[:taken]
    if index >= taken:
        index = -1  # behind the records this settle can move
    for position, value in enumerate(values, start=head + 1):
        decode_log_record(value, f"universe log queue record for position {position}")
    keys = height_keys(universe.log_entry, universe.log_prefix_len(), head + 1, len(page))
    tr.set_many(zip(keys, values, strict=True))
    tr.clear_range(page[0][0], page[-1][0] + b"\x00")
    tr.set(universe.log_head(), LOG_HEAD.encode(head + len(page)))
    tr.add(universe.log_queued(), (-len(page)).to_bytes(8, "little", signed=True))
    # the caller's records end at its last one: any record before them is another's
    mine = 0 if queued is None else queued.count if index < 0 else min(queued.count, index + 1)
    found = None if index < 0 else head + 1 + index
    return Settled(len(page), head + len(page), found, len(page) > mine)


async def _find(
    tr: kv.Transaction, universe: UniverseKeys, queued: Queued, upto: int
) -> int | None:
    """The position of ``queued.last`` if another settle moved it to the log above
    ``queued.after``, at most ``upto`` (snapshot reads, a page of records at a time);
    ``None`` if it is not there."""
    first = queued.after + 1
    while first <= upto:
        last = min(upto, first + SETTLE_RECORDS - 1)
        rows = await tr.get_range(*universe.log_range(first, last), snapshot=True)
        for position, (_, value) in enumerate(rows, start=first):
            if value == queued.last:
                return position
        first = last + 1
    return None
