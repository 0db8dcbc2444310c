"""The universe log: every sequenced entry of a universe at a position, 1, 2, ... in commit
order without gaps (the positions a sequenced group append gives, ``journal.append_batches``),
and the tracking records of its consumers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from persistence import kv
from persistence.errors import CorruptRecord, TrackingConflict
from persistence.ids import WorldId
from persistence.keyspace import UniverseKeys, WorldKeys, height_keys
from persistence.log_records import LOG_HEAD, TRACKING, LogRecord, decode_log_record, log_records
from persistence.protocols import checksums


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
    checksummed: bool,
) -> LogPage:
    """Up to ``limit`` log records from ``first`` to ``last`` (or the head), checked to be
    the positions ``first, first + 1, ...`` with none missing below the head; and, by
    position, the entries of the ``wanted`` ones that are stored whole in hot keys (entries
    never change, so a snapshot read of them is as good as any; cold or chunked ones are
    left to the caller), checked against their checksums with ``checksummed`` (the store's
    layout seals entries: ``checksums.opened``). Two waves of reads: the head with the
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
    worlds: dict[WorldId, WorldKeys] = {}  # an aggregate's events are often near each other
    keys_expected = height_keys(universe.log_entry, universe.log_prefix_len(), first, len(rows))
    for expected, (key, value), key_expected in zip(
        range(first, first + len(rows)), rows, keys_expected, strict=True
    ):
        if key != key_expected:
            break
        record = decode_log_record(value, f"universe log at {expected}")
        records.append((expected, record))
        if wanted(record):
            world = worlds.get(record.world)
            if world is None:
                world = worlds[record.world] = universe.world(record.world)
            asked.append((expected, world, record.height, world.whole_entry_key()(record.height)))
    if len(records) != end - first + 1:
        missing = first + len(records)
        raise CorruptRecord("universe log", f"position {missing} is missing below head {head}")
    # the entries in one wave: one round trip, not one per entry
    found = await tr.get_many([whole for _, _, _, whole in asked], snapshot=True)
    entries: dict[int, bytes] = {}
    for (position, world, height, whole), entry in zip(asked, found, strict=True):
        if entry is not None:
            if checksummed:
                entry = checksums.opened(world, height, whole, entry)
            entries[position] = entry
    return LogPage(records, entries, None if end >= stop else end + 1)


def sequence(
    tr: kv.Transaction,
    universe: UniverseKeys,
    batches: Sequence[tuple[WorldId, int]],
    how: Sequencing,
    tracking_raw: bytes | None,
    log_head_raw: bytes | None,
) -> int | None:
    """Check and store the tracking position (its record read as ``tracking_raw``); give
    the entries of ``batches`` -- ``(world, first height)`` of each, in the order of
    ``how.tags`` -- the next log positions after the head read as ``log_head_raw``. The
    first position, if any entry was appended."""
    if how.tracking is not None:
        name, position = how.tracking
        recorded = tracked_position(tracking_raw)
        if recorded is not None and recorded >= position:
            raise TrackingConflict(name, recorded, position)
        tr.set(universe.tracking(name), TRACKING.encode(position))
    if not batches:
        return None
    head = log_position(log_head_raw)
    records = [
        record
        for (world, first), tags in zip(batches, how.tags, strict=True)
        for record in log_records(world, first, tags)
    ]
    position = head + len(records)
    positions = height_keys(universe.log_entry, universe.log_prefix_len(), head + 1, len(records))
    tr.set_many(zip(positions, records, strict=True))
    tr.set(universe.log_head(), LOG_HEAD.encode(position))
    return head + 1
