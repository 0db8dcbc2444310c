"""The plane's journal operations: expected-head appends (Protocol B), group appends of
several worlds in one transaction, sequenced ones that also write the universe log, and the
stitched read -- cold segments and the hot tail, paged across transactions."""

from __future__ import annotations

import operator
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Final

from persistence import kv
from persistence.errors import (
    HeadAdvanced,
    MissingDependency,
    PersistError,
    SegmentIndexCorruption,
    SequencingIncomplete,
    Validation,
)
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId, check_height, check_id
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane.app_data import checked_app_data
from persistence.plane.core import operation, row_limit, universe_keys, world_keys
from persistence.plane.worlds import WorldOperations
from persistence.protocols import budget, journal, log
from persistence.segment_records import SegmentIndexRecord
from persistence.sizes import check_bool, check_bytes, check_int, check_sequence, check_text


@dataclass(frozen=True, slots=True)
class WorldAppend:
    """One world's part of a group append: ``entries`` appended at ``expected_head``
    (:meth:`JournalOperations.append_batches`; a ``(world, expected_head, entries)`` tuple
    is taken as one)."""

    world: WorldId
    expected_head: int
    entries: Sequence[bytes]


Batch = WorldAppend | tuple[WorldId, int, Sequence[bytes]]
"""A group append's part: a :class:`WorldAppend`, or the same as a tuple."""

LOG_BUSY_SECONDS: Final = 1.0
"""How long after the last sign of overlapping sequenced appends of a universe (a retry, or
a settle meeting other appends' records) an adaptive plane keeps queuing its log records
(``PlaneConfig.log_sequencing``)."""
BUSY_UNIVERSES: Final = 4_096
"""Universes noted busy before those no longer busy are forgotten."""


class JournalOperations(WorldOperations):
    """The journal: appends, group appends, the universe log's sequenced appends, reads."""

    def check_entries(self, entries: Sequence[bytes], field: str) -> None:
        """``entries`` of one append: bytes, within the entry and batch limits."""
        check_sequence(entries, field, 1, self.config.max_batch_entries)
        high = self.config.max_entry_bytes
        # exact types by identity (a metaclass cannot make another type equal ``bytes``)
        if not all(map(operator.is_, map(type, entries), repeat(bytes))) or (
            max(map(len, entries)) > high
        ):
            for index, entry in enumerate(entries):  # the first refused, named
                check_bytes(entry, f"{field}[{index}]", high=high)
        total = sum(map(len, entries))
        if total > self.config.max_batch_bytes:
            raise Validation(field, f"batch of {total} bytes > max {self.config.max_batch_bytes}")

    @operation("journal.append")
    async def append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Append at ``expected_head``; return the first new height (``HeadAdvanced`` if moved)."""
        keys = world_keys(universe, world)
        check_height(expected_head, "expected_head")
        self.check_entries(entries, "entries")
        if expected_head > MAX_HEIGHT - len(entries):
            raise Validation(
                "expected_head", f"{expected_head} + {len(entries)} entries passes 2**64-1"
            )
        batch = list(entries)
        if budget.group_append_bound([batch], ()) > self.budget:  # else surely within it
            budget.check(
                budget.append_cost(keys, expected_head + 1, batch),
                self.budget,
                "entries",
                f"appending {len(batch):,} entries ({sum(map(len, batch)):,} bytes)",
            )
        first = await journal.append_batch(
            self.engine,
            keys,
            expected_head,
            batch,
            self.new_call(),
            await self.sealing(writing=True),
        )
        self.hooks.reached("journal.after_append")
        return first

    @operation("journal.append_batches")
    async def append_batches(
        self,
        universe: UniverseId,
        batches: Sequence[Batch],
        *,
        create_missing: bool = False,
        app_data: Mapping[bytes, bytes | None] | None = None,
    ) -> list[int]:
        """Group commit: append each ``(world, expected_head, entries)`` of ``batches`` (one
        per world) in one transaction, all or nothing; return the first new heights, in
        order. ``HeadAdvanced`` names the world whose head moved (``.world``), and nothing is
        written. With ``create_missing``, a world that does not exist and whose batch
        expects head 0 is created in the same transaction (an empty genesis, as
        :meth:`create_world` with its defaults); otherwise it is ``WorldNotFound``.
        ``app_data`` (key to new value, ``None`` to remove it) is written to the
        application's own data of ``universe`` in the same transaction, only if the appends
        are (:meth:`read_app_data`); ``batches`` may then be empty. The limits of one
        append apply to the whole group, its application data included:
        ``max_batch_entries``, ``max_batch_bytes`` and the transaction budget."""
        low = 0 if app_data else 1
        check_sequence(batches, "batches", low, self.config.max_batch_entries)
        done = await self.append_group(universe, batches, create_missing, None, app_data)
        return done.first_heights

    @operation("journal.append_sequenced")
    async def append_sequenced(
        self,
        universe: UniverseId,
        batches: Sequence[Batch],
        tags: Sequence[Sequence[str]],
        *,
        create_missing: bool = False,
        tracking: tuple[str, int] | None = None,
        app_data: Mapping[bytes, bytes | None] | None = None,
    ) -> journal.GroupAppend:
        """:meth:`append_batches`, and every entry also gets the next position of the
        universe log, in batch order, tagged ``tags[batch][entry]`` (non-empty text):
        positions start at 1 and follow commit order without gaps, so a reader of the log
        sees a prefix of what committed -- taken in the append's transaction (inline) or
        by a settle after it (queued: ``PlaneConfig.log_sequencing``; a settle that fails
        after the append committed is ``SequencingIncomplete``, naming the heights
        appended). ``tracking=(name, position)`` records, in the same transaction, that
        consumer ``name`` processed upstream position ``position``: a position at or below
        the one it recorded is ``TrackingConflict`` and nothing is written. ``app_data`` is
        written as :meth:`append_batches` writes it. ``batches`` may be empty if
        ``tracking`` or ``app_data`` is given. Returns the first heights and the first
        position (``None`` if no entry)."""
        low = 0 if tracking is not None or app_data else 1
        check_sequence(batches, "batches", low, self.config.max_batch_entries)
        check_sequence(tags, "tags", len(batches), len(batches))
        if tracking is not None:
            if not isinstance(tracking, tuple) or len(tracking) != 2:
                raise Validation("tracking", "expected a (name, position) pair")
            check_text(tracking[0], "tracking.name")
            check_int(tracking[1], "tracking.position", 1, MAX_HEIGHT)
        return await self.append_group(
            universe, batches, create_missing, (tags, tracking), app_data
        )

    def _parts(self, keys: UniverseKeys, batches: Sequence[Batch]) -> list[journal.WorldAppend]:
        """Each batch of a group append checked, as the protocol's parts."""
        parts: list[journal.WorldAppend] = []
        seen: set[WorldId] = set()
        for index, batch in enumerate(batches):
            field = f"batches[{index}]"
            if isinstance(batch, WorldAppend):
                world, expected_head, entries = batch.world, batch.expected_head, batch.entries
            elif isinstance(batch, (tuple, list)) and len(batch) == 3:
                world, expected_head, entries = batch
            else:
                raise Validation(field, "expected a (world, expected_head, entries) triple")
            world_keys_ = keys.world(check_id(world, WorldId, f"{field}.world"))
            if world_keys_.world in seen:
                raise Validation(f"{field}.world", f"{world} has two batches: one per world")
            seen.add(world_keys_.world)
            check_height(expected_head, f"{field}.expected_head")
            self.check_entries(entries, f"{field}.entries")
            if expected_head > MAX_HEIGHT - len(entries):
                raise Validation(
                    f"{field}.expected_head",
                    f"{expected_head} + {len(entries)} entries passes 2**64-1",
                )
            parts.append(journal.WorldAppend(world_keys_, expected_head, list(entries)))
        return parts

    async def append_group(
        self,
        universe: UniverseId,
        batches: Sequence[Batch],
        create_missing: bool,
        sequenced: tuple[Sequence[Sequence[str]], tuple[str, int] | None] | None,
        app_data: object = None,
    ) -> journal.GroupAppend:
        """Check a group append (``batches`` already checked as a sequence, ``sequenced``'s
        tags as one of their length, its tracking; ``app_data`` not yet) and run it."""
        keys = universe_keys(universe)
        check_bool(create_missing, "create_missing")
        parts = self._parts(keys, batches)
        app = [] if app_data is None else checked_app_data(app_data)
        sequencing = None
        if sequenced is not None:
            tags, tracking = sequenced
            checked: list[list[str]] = []
            valid: set[str] = set()  # tags checked already (an insert's mostly repeat)
            for index, (part, batch_tags) in enumerate(zip(parts, tags, strict=True)):
                field = f"tags[{index}]"
                check_sequence(batch_tags, field, len(part.entries), len(part.entries))
                for i, tag in enumerate(batch_tags):
                    if type(tag) is not str or tag not in valid:
                        valid.add(check_text(tag, f"{field}[{i}]"))
                checked.append(list(batch_tags))
            sequencing = log.Sequencing(checked, tracking)
        count = sum(len(part.entries) for part in parts)
        size = sum(len(entry) for part in parts for entry in part.entries)
        limits = self.config.max_batch_entries, self.config.max_batch_bytes
        if count > limits[0]:
            raise Validation("batches", f"{count:,} entries > max {limits[0]:,}")
        if size > limits[1]:
            raise Validation("batches", f"{size:,} bytes > max {limits[1]:,}")
        if app:
            app_size = sum(len(key) + len(value or b"") for key, value in app)
            if count + len(app) > limits[0]:
                raise Validation(
                    "app_data", f"{len(app):,} keys and {count:,} entries > max {limits[0]:,}"
                )
            if size + app_size > limits[1]:
                raise Validation(
                    "app_data",
                    f"{app_size:,} bytes and {size:,} of entries > max {limits[1]:,}",
                )
        create = await self.creation(universe) if create_missing else None
        tags_ = [] if sequencing is None else sequencing.tags
        bound = budget.group_append_bound([p.entries for p in parts], tags_)
        if bound + budget.app_data_bound(app) > self.budget:
            appends = budget.group_append_cost(
                keys, [(p.keys, p.expected_head + 1, p.entries) for p in parts], create
            ) + (0 if sequencing is None else budget.sequencing_cost(keys, sequencing))
            budget.check(
                appends + budget.app_data_cost(keys, app),
                self.budget,
                "app_data" if app and appends <= self.budget else "batches",
                f"appending {count:,} entries ({size:,} bytes) to {len(parts):,} worlds"
                + (f" and writing {len(app):,} keys of application data" if app else ""),
            )
        call = self.new_call()
        sealing = await self.sealing(writing=True)
        mode = self.config.log_sequencing
        busy = self.log_busy_until.get(universe) if mode == "adaptive" else None
        queue = mode == "queued" or (
            busy is not None and sequencing is not None and busy > time.monotonic()
        )
        attempts = 0

        def attempt(tr: kv.Transaction) -> Awaitable[journal.Appended]:
            nonlocal attempts
            attempts += 1
            # adaptive: a retry queues -- most retries follow a conflict, most likely on the
            # log head or the queue's counter, which queuing reads without one (an inline
            # retry could starve beside planes that queue)
            queues = queue or (attempts > 1 and mode == "adaptive")
            return journal.append_batches(
                tr, keys, parts, create, call, sealing, sequencing, app, queues
            )

        # an inline sequenced append writes the log head: where writers serialize, alone
        done = await self.transact(attempt, alone=sequencing is not None and not queue)
        if sequencing is not None and attempts > 1:
            self.note_busy(universe)
        self.hooks.reached("journal.after_append")
        if done.queued is None:
            return journal.GroupAppend(done.first_heights, done.first_position)
        try:
            position = await self.settle(keys, done.queued)
        except PersistError as exc:
            raise SequencingIncomplete(done.first_heights, done.queued.after, exc) from exc
        return journal.GroupAppend(done.first_heights, position - done.queued.count + 1)

    def note_busy(self, universe: UniverseId) -> None:
        """Note that sequenced appends of ``universe`` overlap now (``log_busy_until``)."""
        busy = self.log_busy_until
        now = time.monotonic()
        with self.log_busy_lock:  # threads share the plane: one of them prunes at a time
            if len(busy) >= BUSY_UNIVERSES:  # forget the universes no longer busy
                for quiet in [u for u, until in list(busy.items()) if until <= now]:
                    busy.pop(quiet, None)
            busy[universe] = now + LOG_BUSY_SECONDS

    async def settle(self, keys: UniverseKeys, queued: log.Queued) -> int:
        """Settle the universe log's queue until ``queued.last`` has a position; return it.
        Each settle moves a page of the queue, every append's records in it (``log.settle``);
        one that met other appends' records marks the universe busy (``log_busy_until``)."""
        while True:
            tries = 0

            def attempt(tr: kv.Transaction) -> Awaitable[log.Settled]:
                nonlocal tries
                tries += 1
                return log.settle(tr, keys, queued, self.budget)

            settled = await self.transact(attempt, alone=True, eager=True)
            if settled.shared or tries > 1:
                self.note_busy(keys.universe)
            self.hooks.reached("log.after_settle")
            if settled.position is not None:
                return settled.position

    @operation("journal.retry_append")
    async def retry_append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Redo an append whose outcome is unknown: append at ``expected_head``, or find
        where the earlier attempt put ``entries`` (``HeadAdvanced`` if it did not land)."""
        try:
            return await self.append_batch(universe, world, expected_head, entries)
        except HeadAdvanced:
            first = expected_head + 1  # the head has moved: the earlier attempt is settled
            stored = await self.read_range(universe, world, first, len(entries))
            if [entry for _, entry in stored] == list(entries):
                return first
            raise

    @operation("journal.read_range")
    async def read_range(
        self, universe: UniverseId, world: WorldId, from_inclusive: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``limit`` contiguous entries from ``from_inclusive``, stitched from cold
        segments and the hot tail, paged across transactions so no read transaction
        outgrows FoundationDB's limits. A missing or damaged segment is ``Corruption``, and
        so is a hot entry that is missing (``MissingJournalEntry``) or fails its checksum
        (``DamagedJournalEntry``)."""
        keys = world_keys(universe, world)
        check_height(from_inclusive, "from_inclusive", allow_zero=False)
        row_limit(limit)
        if limit == 0:  # NotFound if there is no such world
            await journal.read_entries(self.engine, keys, from_inclusive, 0, None)
            return []
        out: list[tuple[int, bytes]] = []
        while len(out) < limit:
            first = from_inclusive + len(out)
            want = min(self.config.read_page_entries, limit - len(out))
            page = await journal.read_entries(
                self.engine,
                keys,
                first,
                want,
                await self.sealing(writing=False),
                self.config.read_page_bytes,
            )
            if page.segment is not None:
                segment = page.segment
                last = min(segment.end, page.head, first + want - 1)
                rows = await self.read_cold(keys, segment, first, last)
                # Every page must move the read forward by exactly the heights it asked
                # for: a source that returns less (or other heights) fails, never loops.
                if len(rows) != last - first + 1 or rows[0][0] != first or rows[-1][0] != last:
                    raise SegmentIndexCorruption(
                        str(world),
                        segment.end,
                        f"segment {segment.start}-{segment.end} ({segment.object_key}) gave "
                        f"{len(rows)} entries for heights {first}-{last}",
                    )
                out.extend(rows)
                continue
            out.extend(page.rows)
            if not page.rows or page.rows[-1][0] >= page.head:
                break
        return out

    @operation("journal.read_last")
    async def read_last(
        self, universe: UniverseId, world: WorldId, limit: int
    ) -> tuple[int, list[tuple[int, bytes]]]:
        """The journal head and its last ``limit`` entries, oldest first: what a reader of
        a world's newest entries needs without reading its head first. Up to
        ``ROWS_PER_READ`` (64) entries hot, whole and sound: one transaction of one wave;
        else the head, then a stitched :meth:`read_range` of them (paged by
        ``read_page_bytes``)."""
        keys = world_keys(universe, world)
        row_limit(limit)
        if limit <= journal.ROWS_PER_READ:
            sealing = await self.sealing(writing=False)
            page = await journal.read_last(self.engine, keys, limit, sealing)
            if page.rows:
                return page.head, page.rows
            head = page.head
        else:  # more than a first read: pages sized by their bytes
            head = (await journal.read_entries(self.engine, keys, 1, 0, None)).head
        first = max(1, head - limit + 1)
        if head < first:
            return head, []
        return head, await self.read_range(universe, world, first, head - first + 1)

    async def read_cold(
        self, keys: WorldKeys, segment: SegmentIndexRecord, first: int, last: int
    ) -> list[tuple[int, bytes]]:
        """Entries ``first..last`` of a cold segment, through the plane's segment reader."""
        source = self.segments
        if source is None:
            raise MissingDependency(
                f"world {keys.world}: heights {segment.start}-{segment.end} are in a cold "
                "segment and this plane has no segment reader (open it with segments.open_plane)"
            )
        return await self.blocking(
            lambda: source.read(keys.universe, keys.world, segment, first, last)
        )

    @operation("journal.read_hot")
    async def read_hot(
        self, universe: UniverseId, world: WorldId, from_inclusive: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Entries still held in the engine, from ``from_inclusive`` (one transaction, at
        most ``read_page_bytes`` of them but at least one; empty where a segment holds that
        height and the page is not read hot: its key is gone, or a height of the page fails
        its check). Used by segment export and fsck."""
        keys = world_keys(universe, world)
        check_height(from_inclusive, "from_inclusive", allow_zero=False)
        row_limit(limit)
        page = await journal.read_entries(
            self.engine,
            keys,
            from_inclusive,
            limit,
            await self.sealing(writing=False),
            self.config.read_page_bytes,
        )
        return page.rows

    @operation("journal.head")
    async def head(self, universe: UniverseId, world: WorldId) -> int:
        """The journal head (0 when empty)."""
        keys = world_keys(universe, world)
        return (await journal.read_entries(self.engine, keys, 1, 0, None)).head  # no entry read
