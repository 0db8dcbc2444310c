"""Protocol B: the world journal -- contiguous heights, expected-head append, strict reads."""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from persistence import fdbtuple, kv
from persistence.errors import (
    CorruptRecord,
    DamagedJournalEntry,
    HeadAdvanced,
    MissingJournalEntry,
    SegmentIndexCorruption,
    WorldNotFound,
)
from persistence.ids import Hash
from persistence.journal_records import JOURNAL_HEAD, JournalHead
from persistence.keyspace import CHUNK_SIZE, UniverseKeys, WorldKeys, height_keys, whole_run
from persistence.protocols import app_data, calls, log, segment_index, worlds
from persistence.protocols.calls import Call
from persistence.protocols.checksums import SEAL_BYTES, Sealing
from persistence.records import CasMeta, SnapshotRecord, WorldMeta, decode_record
from persistence.segment_records import SegmentIndexRecord


async def read_head(tr: kv.Transaction, keys: WorldKeys, *, snapshot: bool = False) -> JournalHead:
    """The world's head record; ``NotFound`` if the world does not exist. A ``snapshot``
    read adds no conflict: for checks that only need a head at least this high."""
    return decode_head(keys, await tr.get(keys.head(), snapshot=snapshot))


def decode_head(keys: WorldKeys, raw: bytes | None) -> JournalHead:
    """The head record stored as ``raw``, strictly decoded (``WorldNotFound`` if absent,
    ``CorruptRecord`` if damaged)."""
    if raw is None:
        raise WorldNotFound(keys.universe, keys.world)
    return decode_record(JournalHead, raw, f"journal head of world {keys.world}")


def _check_head(keys: WorldKeys, raw: bytes | None, expected: int) -> None:
    """``HeadAdvanced`` unless the head read as ``raw`` is ``expected``. Compared as bytes
    with the encoding of ``expected``; anything else is strictly decoded, so an absent head
    is ``WorldNotFound`` and a damaged one ``CorruptRecord``."""
    if raw == JOURNAL_HEAD.encode(expected):
        return
    head = decode_head(keys, raw)
    if head.height != expected:
        raise HeadAdvanced(expected, head.height, keys.world)


_key_of = operator.itemgetter(0)
_value_of = operator.itemgetter(1)


def _as_stored(key: bytes, payload: bytes) -> bytes:
    """The value stored for ``payload`` in a layout without checksums: the payload."""
    del key
    return payload


def write_entries(
    tr: kv.Transaction,
    keys: WorldKeys,
    first: int,
    entries: Sequence[bytes],
    sealing: Sealing | None,
) -> None:
    """Write ``entries`` at heights ``first..``, each split into value-sized chunks (an entry
    that fits one value is stored whole); with ``sealing`` each value is sealed
    (:meth:`Sealing.seal`)."""
    whole = height_keys(keys.whole_entry_key(), keys.entry_prefix_len(), first, len(entries))
    stored: Callable[[bytes, bytes], bytes] = sealing.seal if sealing else _as_stored
    if max(map(len, entries), default=0) <= CHUNK_SIZE:
        if sealing:
            tr.set_many(zip(whole, map(sealing.seal, whole, entries), strict=True))
        else:
            tr.set_many(zip(whole, entries, strict=True))
        return
    for height, key, entry in zip(range(first, first + len(entries)), whole, entries, strict=True):
        if len(entry) <= CHUNK_SIZE:
            tr.set(key, stored(key, entry))
            continue
        count = -(-len(entry) // CHUNK_SIZE)
        for index in range(count):
            chunk = entry[index * CHUNK_SIZE : (index + 1) * CHUNK_SIZE]
            key = keys.entry_chunk(height, index, count)
            tr.set(key, stored(key, chunk))


def append_at(
    tr: kv.Transaction,
    keys: WorldKeys,
    head: JournalHead,
    entries: Sequence[bytes],
    sealing: Sealing | None,
) -> int:
    """Append after ``head`` (already read in ``tr``) and move the head; return the first
    height. ``sealing``: the store's layout seals entries (:func:`write_entries`)."""
    return _append(tr, keys, head.height, entries, sealing)


def _append(
    tr: kv.Transaction,
    keys: WorldKeys,
    height: int,
    entries: Sequence[bytes],
    sealing: Sealing | None,
) -> int:
    """Write ``entries`` after the head ``height`` and move the head; return the first height."""
    write_entries(tr, keys, height + 1, entries, sealing)
    tr.set(keys.head(), JOURNAL_HEAD.encode(height + len(entries)))
    return height + 1


@kv.transactional
async def append_batch(
    tr: kv.Transaction,
    keys: WorldKeys,
    expected_head: int,
    entries: Sequence[bytes],
    call: Call,
    sealing: Sealing | None,
) -> int:
    """Protocol B: append at ``expected_head`` or raise ``HeadAdvanced``; return the first
    height (entries sealed with ``sealing``, as the store's layout says). A retry whose
    earlier attempt committed (its call record is there) returns that attempt's first
    height, ``expected_head + 1`` -- the commit checked the head --, however far the head
    has moved since; the record holds nothing else. One wave of reads: the head, and the call's own
    (``calls.begin``). An attempt that has no record to look for (``Opening.fresh``) issues
    the entries and its record before the head is in -- they depend on no read, and a
    refused head leaves the attempt uncommitted --, so the client sends them while the read
    is in flight; only the head is written once read."""
    opening = calls.begin(tr, keys, call)
    head = tr.get(keys.head())
    first = expected_head + 1
    if opening.fresh:
        _write_batch(opening, keys, first, entries, sealing)
    else:
        if await calls.replayed(opening) is not None:
            return first
    _check_head(keys, await head, expected_head)
    if not opening.fresh:
        _write_batch(opening, keys, first, entries, sealing)
    tr.set(keys.head(), JOURNAL_HEAD.encode(expected_head + len(entries)))
    return first


def _write_batch(
    opening: calls.Opening,
    keys: WorldKeys,
    first: int,
    entries: Sequence[bytes],
    sealing: Sealing | None,
) -> None:
    """An append's writes but its head: ``entries`` from ``first``, and its call record."""
    write_entries(opening.tr, keys, first, entries, sealing)
    calls.record(opening, "append")


@dataclass(frozen=True, slots=True)
class WorldAppend:
    """One world's part of a group append: ``entries`` at ``expected_head``."""

    keys: WorldKeys
    expected_head: int
    entries: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Creation:
    """How a group append creates a world whose journal it finds absent (when the batch
    expects head 0): the world's meta and genesis baseline, and the inline CAS metadata of
    the genesis blobs, written unless present."""

    meta: WorldMeta
    genesis: SnapshotRecord
    blobs: tuple[tuple[Hash, CasMeta], ...]


@dataclass(frozen=True, slots=True)
class GroupAppend:
    """What a group append did: each batch's first height, in order, and the universe log
    position of its first entry (``None`` unless sequenced, or if it appended nothing)."""

    first_heights: list[int]
    first_position: int | None


@dataclass(frozen=True, slots=True)
class Appended:
    """What :func:`append_batches` did: the heights and first position of a
    :class:`GroupAppend` -- or, if it ``queued`` its log records, no position yet (they get
    theirs when settled, ``log.settle``)."""

    first_heights: list[int]
    first_position: int | None
    queued: log.Queued | None = None


_QUEUED_MARK: Final = b"Q"
"""How a group append's call record value begins when it queued its log records (then the
log head it read follows, 8 bytes); else the value is its first position, 8 bytes."""


@kv.transactional
async def append_batches(
    tr: kv.Transaction,
    universe: UniverseKeys,
    batches: Sequence[WorldAppend],
    create: Creation | None,
    call: Call,
    sealing: Sealing | None,
    sequencing: log.Sequencing | None = None,
    app: Sequence[app_data.AppWrite] = (),
    queue: bool = False,
) -> Appended:
    """Group commit: append every batch at its expected head, all or nothing (entries sealed
    with ``sealing``, as the store's layout says). ``HeadAdvanced``
    names the first world whose head moved. With ``create``, a world without a journal whose
    batch expects head 0 is created first, in the same transaction. With ``sequencing``, the
    entries also get the next positions of the universe log: its head and the queue's
    counter are read with a conflict, so inline sequenced appends of a universe serialize
    and positions follow commit order without gaps -- unless the counter shows records
    queued: then they are queued too (``log.sequence``). With ``queue`` they are queued
    without reading either with a conflict (the head is read at snapshot isolation: the
    positions will be above it). The tracking position is checked (``TrackingConflict``)
    and stored.
    ``app`` is written to the application's own data in the same transaction, only if
    everything else is. The call record is kept in the universe's scope: a retry whose
    earlier attempt committed returns the same outcome (heights ``expected_head + 1``, its
    positions or what it queued)."""
    opening = calls.begin(tr, universe, call)
    # Every key this transaction reads with a conflict, read at once, with the call's own:
    # the heads; for a sequenced append the tracking record, and unless it queues the log
    # head and the queue's counter; and where it may create worlds (batches that expect
    # head 0), their metas, the universe's info and the genesis blobs' metadata.
    tracked = None if sequencing is None else sequencing.tracking
    logged = sequencing is not None and bool(batches)
    creatable: list[WorldKeys] = []
    blob_keys: list[bytes] = []
    if create is not None:
        creatable = [b.keys for b in batches if b.expected_head == 0]
        blob_keys = [universe.cas_meta(hash) for hash, _ in create.blobs] if creatable else []
    wanted = [batch.keys.head() for batch in batches]
    if tracked is not None:
        wanted.append(universe.tracking(tracked[0]))
    if logged and not queue:
        wanted.append(universe.log_head())
        wanted.append(universe.log_queued())
    if creatable:
        wanted.extend(keys.meta() for keys in creatable)
        wanted.append(universe.info())
        wanted.extend(blob_keys)
    read = tr.get_many(wanted)
    head_seen = tr.get(universe.log_head(), snapshot=True) if logged and queue else None
    if opening.fresh:  # the entries depend on no read: sent while the reads are in flight
        _write_entries_of(tr, batches, sealing)
    done = await calls.replayed(opening)
    if done is not None:
        if done.count != len(batches):
            raise CorruptRecord("call record", "a group append record of another size")
        heights = [batch.expected_head + 1 for batch in batches]
        if done.value is not None and len(done.value) == len(_QUEUED_MARK) + 8:
            if sequencing is None or not done.value.startswith(_QUEUED_MARK):
                raise CorruptRecord("call record", "a group append record of another kind")
            after = int.from_bytes(done.value[len(_QUEUED_MARK) :], "big")
            starts = [(b.keys.world, b.expected_head + 1) for b in batches]
            return Appended(heights, None, log.queued_records(starts, sequencing, after))
        first_position = None if done.value is None else int.from_bytes(done.value, "big")
        return Appended(heights, first_position)
    values = iter(await read)
    heads = [next(values) for _ in batches]
    recorded = next(values) if tracked is not None else None
    log_head, queued = (next(values), next(values)) if logged and not queue else (None, None)
    if head_seen is not None:
        log_head = await head_seen
    metas = iter([next(values) for _ in creatable])
    shared = list(values)  # the universe's info, then the blobs' metadata
    if not opening.fresh:
        _write_entries_of(tr, batches, sealing)
    firsts: list[int] = []
    for batch, raw in zip(batches, heads, strict=True):
        keys = batch.keys
        meta = next(metas) if create is not None and batch.expected_head == 0 else None
        if raw is None and create is not None and batch.expected_head == 0:
            await _create(tr, keys, create, meta, shared, blob_keys)
            shared = [_WRITTEN] * len(shared)  # by this creation, for the next ones
        elif raw != JOURNAL_HEAD.encode(batch.expected_head):
            height = decode_head(keys, raw).height
            if height != batch.expected_head:
                raise HeadAdvanced(batch.expected_head, height, keys.world)
        tr.set(keys.head(), JOURNAL_HEAD.encode(batch.expected_head + len(batch.entries)))
        firsts.append(batch.expected_head + 1)
    sequenced: int | log.Queued | None = None
    if sequencing is not None:
        sequenced = log.sequence(
            tr,
            universe,
            [(b.keys.world, b.expected_head + 1) for b in batches],
            sequencing,
            recorded,
            log_head,
            queued,
            queue,
        )
    app_data.write(tr, universe, app)
    if isinstance(sequenced, log.Queued):
        value: bytes | None = _QUEUED_MARK + sequenced.after.to_bytes(8, "big")
        calls.record(opening, "append group", count=len(batches), value=value)
        return Appended(firsts, None, sequenced)
    value = None if sequenced is None else sequenced.to_bytes(8, "big")
    calls.record(opening, "append group", count=len(batches), value=value)
    return Appended(firsts, sequenced)


def _write_entries_of(
    tr: kv.Transaction, batches: Sequence[WorldAppend], sealing: Sealing | None
) -> None:
    """The entries of every batch of a group append, each above its expected head."""
    for batch in batches:
        write_entries(tr, batch.keys, batch.expected_head + 1, batch.entries, sealing)


_WRITTEN: Final = b""
"""Stands for a value a creation of this transaction wrote (anything but ``None``)."""


async def _create(
    tr: kv.Transaction,
    keys: WorldKeys,
    create: Creation,
    meta: bytes | None,
    shared: list[bytes | None],
    blob_keys: list[bytes],
) -> None:
    """Create the world ``keys`` names, whose head was read absent, with its ``meta`` and
    ``shared`` (the universe's info, then the genesis blobs' metadata at ``blob_keys``) as
    read with it."""
    if meta is not None:
        raise CorruptRecord(f"world {keys.world}", "its meta is stored without a head")
    info, *present = shared
    for key, (_, blob), there in zip(blob_keys, create.blobs, present, strict=True):
        if there is None:  # as cas.put_meta: a duplicate is a no-op
            tr.set(key, blob.to_cbor())
    await worlds.write_world(tr, keys, create.meta, create.genesis, universe_info=info)


@dataclass(frozen=True, slots=True)
class JournalPage:
    """One transaction's view of a stretch of journal: the head, and either hot entries or
    the cold segment that holds ``first`` (read when ``first``'s hot key is gone)."""

    head: int
    rows: list[tuple[int, bytes]]
    segment: SegmentIndexRecord | None = None


ROWS_PER_READ: Final = 64
"""Rows of a page's first range read of the journal, issued with the head before it is known
whether the page's first height is still hot: most aggregates' whole journals, while a cold
page discards no more than this many. The next reads are sized by the bytes read so far
(:func:`_rows_next`), so that a page stops near its byte budget."""
MAX_ROWS_PER_READ: Final = 4_096
"""The most rows one range read of a page asks for."""


def _rows_next(rows: int, size: int, max_bytes: int, heights_left: int) -> int:
    """Rows to ask for next, having read ``rows`` rows of ``size`` bytes: the heights left
    to read, no more than the byte budget left holds at the average row size so far."""
    want = heights_left
    if max_bytes:
        want = min(want, (max_bytes - size) // max(1, size // rows) + 1)
    return max(1, min(want, MAX_ROWS_PER_READ))


def _holding(keys: WorldKeys, first: int, segment: SegmentIndexRecord) -> SegmentIndexRecord:
    """``segment``, the first one ending at or after ``first``, checked to hold ``first``
    (``read_segments``' checks rule out one that does not: else ``SegmentIndexCorruption``)."""
    if not segment.start <= first <= segment.end:
        raise SegmentIndexCorruption(
            str(keys.world),
            segment.end,
            f"segment {segment.start}-{segment.end} does not hold height {first}",
        )
    return segment


def _stitch(
    keys: WorldKeys,
    rows: list[tuple[bytes, bytes]],
    out: list[tuple[int, bytes]],
    parts: list[bytes],
    expected: int,
    size: int,
    sealing: Sealing | None,
    max_bytes: int,
) -> tuple[int, int, bool]:
    """One range read's ``rows`` taken key by key (a page's slow path: chunked entries, or
    the byte budget reached within the read): an entry stored whole goes to ``out``, a chunk
    to ``parts`` until its entry's last one joins them into ``out``; ``expected`` is the next
    height, ``size`` the payload bytes so far. A key out of place is ``MissingJournalEntry``.
    The next height, the size, and whether the budget (``max_bytes``: 0, none) is reached --
    checked after each whole entry, the page then ending there."""
    prefix = keys.entry_prefix_len()
    whole_key = keys.whole_entry_key()
    for key, value in rows:
        if not parts and key == whole_key(expected):
            if sealing:
                value = sealing.opened(keys, expected, key, value)
            size += len(value)
            out.append((expected, value))  # the next entry, stored whole
            expected += 1
        else:
            try:
                height, index, count = fdbtuple.unpack(key, prefix)
            except (ValueError, TypeError):  # not a key of an entry's chunk
                raise MissingJournalEntry(str(keys.world), expected) from None
            if not (isinstance(height, int) and isinstance(index, int) and isinstance(count, int)):
                raise MissingJournalEntry(str(keys.world), expected)
            if height != expected or index != len(parts):
                raise MissingJournalEntry(str(keys.world), expected)
            if sealing:
                value = sealing.opened(keys, expected, key, value)
            size += len(value)
            parts.append(value)
            if index + 1 < count:
                continue
            out.append((expected, b"".join(parts)))
            parts.clear()
            expected += 1
        if max_bytes and size >= max_bytes:
            return expected, size, True
    return expected, size, False


@kv.transactional
async def read_entries(
    tr: kv.Transaction,
    keys: WorldKeys,
    first: int,
    limit: int,
    sealing: Sealing | None,
    max_bytes: int = 0,
) -> JournalPage:
    """The head and up to ``limit`` entries from ``first`` (and, with ``max_bytes``, no more
    entries than reach that many bytes: at least one), checked to be contiguous and whole --
    or the segment that covers ``first``. With ``sealing`` (the store's layout seals
    entries) every value is checked against its checksum: a changed one is
    ``DamagedJournalEntry`` naming its height. A missing height or chunk below the head is
    ``MissingJournalEntry``.

    One wave of reads: the head with the page's first range of hot keys. The segment index
    is read, in the same transaction, only if the key of ``first`` is not among them, or if
    a hot height of the page is damaged or missing: an export indexes a segment before it
    deletes the segment's hot keys, and deletes them from the lowest height up, so a hot
    ``first`` has every height above it hot too, and a height's bytes are the same hot or
    cold (export copies them; fsck warns of hot keys left below coverage). A hot page that
    fails -- a height damaged or missing, as a hot key left below
    coverage may be -- is read from the segment holding ``first`` if one does; a reader that
    finds neither a sound key of a height nor a segment holding ``first`` has lost it. The
    first segment ending at
    or after ``first`` is checked to continue the one before it
    (``segment_index.read_segments``): the index tiles from height 1, so that segment holds
    ``first`` -- a record that does not (a gap, an overlap, a key that is not its end) is
    ``SegmentIndexCorruption``, never a read of other heights. The entries are read at
    snapshot isolation: a read-only call, never part of a transaction that writes on what it
    read."""
    head_read = tr.get(keys.head())
    if limit <= 0:
        return JournalPage(decode_head(keys, await head_read).height, [])
    begin, end = keys.entries_between(first, first + limit - 1)
    # A snapshot read: this transaction writes nothing, so its conflicts would never be
    # checked (an engine that validates reads at commit keeps no copy of the rows).
    rows_read = tr.get_range(begin, end, limit=ROWS_PER_READ, snapshot=True)
    head = decode_head(keys, await head_read).height
    rows = await rows_read
    if first > head:
        return JournalPage(head, [])
    last = min(head, first + limit - 1)
    asked = ROWS_PER_READ
    if last < first + limit - 1:
        end = keys.entries_between(first, last)[1]  # no entry is stored above the head
        cut = bisect.bisect_left(rows, end, key=_key_of)
        if cut < len(rows):
            del rows[cut:]
            asked = len(rows) + 1  # the range is read to its end
    hot = bool(rows) and rows[0][0].startswith(begin)
    if not hot:  # the key of ``first`` has gone cold
        covering = await _covering(tr, keys, first)
        if covering is not None:
            return JournalPage(head, [], covering)
    try:
        out = await _hot_rows(tr, keys, first, last, rows, asked, end, sealing, max_bytes)
    except (MissingJournalEntry, DamagedJournalEntry):
        covering = await _covering(tr, keys, first) if hot else None
        if covering is None:
            raise
        return JournalPage(head, [], covering)
    return JournalPage(head, out)


async def _covering(tr: kv.Transaction, keys: WorldKeys, first: int) -> SegmentIndexRecord | None:
    """The segment holding ``first``, if one is indexed (checked to tile)."""
    covering = await segment_index.read_segments(
        tr, UniverseKeys(keys.universe), keys.world, first, limit=1
    )
    return _holding(keys, first, covering[0]) if covering else None


async def _hot_rows(
    tr: kv.Transaction,
    keys: WorldKeys,
    first: int,
    last: int,
    rows: list[tuple[bytes, bytes]],
    asked: int,
    end: bytes,
    sealing: Sealing | None,
    max_bytes: int,
) -> list[tuple[int, bytes]]:
    """The hot entries ``first..last`` (fewer where ``max_bytes`` is reached), from ``rows``
    (the first range read, of ``asked`` rows) and the range reads after it up to ``end``,
    checked to be contiguous and whole: ``MissingJournalEntry`` or ``DamagedJournalEntry``
    naming the first height that is not."""
    prefix = keys.entry_prefix_len()
    whole_key = keys.whole_entry_key()
    out: list[tuple[int, bytes]] = []
    expected = first
    parts: list[bytes] = []
    size = 0
    read = 0
    sealed = SEAL_BYTES if sealing else 0
    while True:
        read += len(rows)
        # no list of the values is kept: a sealing may strip those nothing else holds
        run = sum(map(len, map(_value_of, rows))) - sealed * len(rows)
        stored = list(map(_key_of, rows))
        if (
            not parts
            and (not max_bytes or size + run < max_bytes)
            and whole_run(stored, whole_key, prefix, expected)
        ):
            # the usual page: the next entries, each stored whole, within the byte budget
            values = (
                sealing.opened_rows(keys, expected, rows) if sealing else list(map(_value_of, rows))
            )
            out.extend(zip(range(expected, expected + len(rows)), values, strict=True))
            expected += len(rows)
            size += run
        else:
            expected, size, full = _stitch(
                keys, rows, out, parts, expected, size, sealing, max_bytes
            )
            if full:
                return out
        if len(rows) < asked or (expected > last and not parts):  # the range's end
            break
        asked = _rows_next(read, size, max_bytes, last - expected + 1)
        if parts:  # an entry's chunks go on: ask for the rest of them at once
            _, index, count = fdbtuple.unpack(rows[-1][0], prefix)  # _stitch took it
            if isinstance(index, int) and isinstance(count, int):  # as _stitch checked
                asked = max(asked, min(count - index - 1, MAX_ROWS_PER_READ))
        rows = await tr.get_range(rows[-1][0] + b"\x00", end, limit=asked, snapshot=True)
    if parts or expected != last + 1:
        raise MissingJournalEntry(str(keys.world), expected)
    return out


@kv.transactional
async def read_last(
    tr: kv.Transaction, keys: WorldKeys, limit: int, sealing: Sealing | None
) -> JournalPage:
    """The head and the last ``limit`` entries below it (heights ``head - limit + 1`` to
    ``head``, or from 1), in one wave: the head with a reverse range read of the journal's
    last ``limit`` keys. ``rows`` is empty, short of them, where that read does not give
    them all, each stored whole, hot and sound (a chunked entry, a height gone cold, a
    damaged one): the caller reads them as a range, which stitches segments and names
    damage (entries never change, so a later transaction reads the same). ``limit`` is at
    most :data:`ROWS_PER_READ`, a page's first read. Snapshot reads: a read-only call."""
    if not 0 <= limit <= ROWS_PER_READ:
        raise ValueError(f"read_last reads 0 to {ROWS_PER_READ} entries, not {limit}")
    head_read = tr.get(keys.head())
    rows_read = (
        tr.get_range(*keys.entries_from(1), limit=limit, reverse=True, snapshot=True)
        if limit
        else None
    )
    head = decode_head(keys, await head_read).height
    if rows_read is None:
        return JournalPage(head, [])
    rows = await rows_read
    first = max(1, head - limit + 1)
    rows.reverse()
    prefix = keys.entry_prefix_len()
    if len(rows) != head - first + 1 or not whole_run(
        list(map(_key_of, rows)), keys.whole_entry_key(), prefix, first
    ):
        return JournalPage(head, [])
    if sealing:
        try:
            values = sealing.opened_rows(keys, first, rows)
        except DamagedJournalEntry:  # a range read names it, or reads its segment
            return JournalPage(head, [])
    else:
        values = list(map(_value_of, rows))
    return JournalPage(head, list(zip(range(first, head + 1), values, strict=True)))


@kv.transactional
async def next_entry_height(tr: kv.Transaction, keys: WorldKeys, first: int, last: int) -> int:
    """The lowest height from ``first`` to ``last`` with a key of its entry (whole or a
    chunk), ``last + 1`` if none has; ``first`` if the key found does not name a height in
    that range (a reader then reads it, and fails on it, as that height). One snapshot read:
    where a run of missing heights ends, found without reading through it."""
    if first > last:
        return first
    rows = await tr.get_range(*keys.entries_between(first, last), limit=1, snapshot=True)
    if not rows:
        return last + 1
    try:
        height = fdbtuple.unpack(rows[0][0], keys.entry_prefix_len())[0]
    except (ValueError, IndexError):
        return first
    return height if type(height) is int and first <= height <= last else first


@kv.transactional
async def stored_sizes(
    tr: kv.Transaction, keys: WorldKeys, first: int, last: int, limit: int = MAX_ROWS_PER_READ
) -> list[tuple[int, int]]:
    """``(height, bytes)`` for each height from ``first`` to ``last`` whose entry the engine
    holds, in height order, from at most ``limit`` keys: the bytes stored for it (a chunked
    entry's chunks together; with its checksums, where the layout has them). Nothing is
    checked -- what is read later checks itself; this sizes reads before they are made. A
    height whose chunks the read cut off is left out (the caller reads on from it), unless
    it is the only one: then all its chunks are read (the height found, which is above
    ``first`` where ``first`` is missing). Snapshot reads."""
    if first > last:
        return []
    begin, end = keys.entries_between(first, last)
    rows = await tr.get_range(begin, end, limit=limit, snapshot=True)
    prefix = keys.entry_prefix_len()
    if whole_run([key for key, _ in rows], keys.whole_entry_key(), prefix, first):
        return [(first + i, len(value)) for i, (_, value) in enumerate(rows)]
    sizes: dict[int, int] = {}
    for key, value in rows:
        try:
            height = fdbtuple.unpack(key, prefix)[0]
        except (ValueError, IndexError):
            continue  # not an entry's key: the read that meets it reports it
        if type(height) is int:
            sizes[height] = sizes.get(height, 0) + len(value)
    out = sorted(sizes.items())
    if len(rows) == limit and out:  # the last height's chunks may go on past the read
        if len(out) > 1:
            out.pop()
        else:  # the only one: read all its chunks
            height = out[0][0]
            whole = await tr.get_range(*keys.entries_between(height, height), snapshot=True)
            out = [(height, sum(len(value) for _, value in whole))]
    return out
