"""The plane's universe-log operations: the log head, reads of the log (with the entries its
records name, through cold segments), consumers' tracking positions, and waits for either
to move."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection
from typing import TypeVar

from persistence.errors import CorruptRecord, Validation
from persistence.ids import UniverseId, WorldId, check_height
from persistence.log_records import LogRecord
from persistence.plane.config import INTERRUPT_SECONDS, MAX_WAIT_SECONDS
from persistence.plane.core import operation, row_limit, universe_keys
from persistence.plane.journal import JournalOperations
from persistence.protocols import log
from persistence.sizes import check_number, check_text

T = TypeVar("T")


class LogOperations(JournalOperations):
    """The universe log: head, reads, tracking, waits."""

    @operation("log.head")
    async def log_head(self, universe: UniverseId) -> int:
        """The universe log's last position (0 if nothing was sequenced)."""
        keys = universe_keys(universe)
        return await self.transact(lambda tr: log.read_log_head(tr, keys, snapshot=True))

    @operation("log.settle")
    async def settle_log(self, universe: UniverseId) -> int:
        """Give log positions to the records queued in ``universe`` when this call began
        (an append that queued its records settles them itself; this is for those of a
        writer that stopped before it did: ``PlaneConfig.log_sequencing``), and to any
        queued before them; return the head. It moves at most as many records as the
        queue's counter showed at the start, so appends that keep queuing do not keep it
        running."""
        keys = universe_keys(universe)
        counted = await self.transact(lambda tr: tr.get(keys.log_queued(), snapshot=True))
        left = log.queued_count(counted)
        while True:
            settled = await self.transact(
                lambda tr: log.settle(tr, keys, None, self.budget), alone=True, eager=True
            )
            self.hooks.reached("log.after_settle")
            left -= settled.moved
            if not settled.moved or left <= 0:
                return settled.head

    async def wait_log(
        self,
        universe: UniverseId,
        after: int,
        timeout: float,
        *,
        interrupt: threading.Event | None = None,
    ) -> int:
        """Wait until the universe log's head is above ``after``, ``timeout`` seconds pass
        or ``interrupt`` is set; return the head (at most ``after`` unless it moved). Uses
        the engine's change notification (``Engine.wait_changed``): no busy loop; with
        ``interrupt``, in slices of at most :data:`INTERRUPT_SECONDS`."""
        check_height(after, "after")
        key = universe_keys(universe).log_head()
        return await self._wait(
            key, log.log_position, lambda position: position > after, timeout, interrupt
        )

    async def wait_tracking(
        self,
        universe: UniverseId,
        name: str,
        at_least: int,
        timeout: float,
        *,
        interrupt: threading.Event | None = None,
    ) -> int | None:
        """Wait until consumer ``name`` has recorded a position of at least ``at_least``,
        ``timeout`` seconds pass or ``interrupt`` is set; return its position (``None`` if
        it recorded none). Waits as :meth:`wait_log` does, on the tracking record."""
        check_text(name, "name")
        check_height(at_least, "at_least")
        key = universe_keys(universe).tracking(name)
        return await self._wait(
            key,
            log.tracked_position,
            lambda position: position is not None and position >= at_least,
            timeout,
            interrupt,
        )

    async def _wait(
        self,
        key: bytes,
        decode: Callable[[bytes | None], T],
        reached: Callable[[T], bool],
        timeout: float,
        interrupt: threading.Event | None,
    ) -> T:
        """Read ``key`` until ``reached`` by its decoded value, ``timeout`` seconds pass or
        ``interrupt`` is set, waiting for it to change between reads; the last value."""
        check_number(timeout, "timeout", 0, MAX_WAIT_SECONDS)
        if interrupt is not None and not isinstance(interrupt, threading.Event):
            raise Validation("interrupt", f"a threading.Event, not {type(interrupt).__name__}")
        deadline = time.monotonic() + timeout
        while True:
            seen = await self.transact(lambda tr: tr.get(key, snapshot=True))
            value = decode(seen)
            left = deadline - time.monotonic()
            if reached(value) or left <= 0 or (interrupt is not None and interrupt.is_set()):
                return value
            if interrupt is not None:
                left = min(left, INTERRUPT_SECONDS)
            await self.blocking(functools.partial(self.engine.wait_changed, key, seen, left))

    @operation("log.tracking")
    async def tracking_position(self, universe: UniverseId, name: str) -> int | None:
        """The upstream position consumer ``name`` recorded last (``None`` if none)."""
        keys = universe_keys(universe)
        check_text(name, "name")
        return await self.transact(lambda tr: log.read_tracking(tr, keys, name, snapshot=True))

    @operation("log.read")
    async def read_log(
        self,
        universe: UniverseId,
        first: int,
        limit: int,
        *,
        last: int | None = None,
        tags: Collection[str] | None = None,
    ) -> list[log.LogEntry]:
        """Up to ``limit`` entries of the universe log from position ``first`` (to ``last``,
        or the head), in position order, each with its world, height, tag and journal entry
        (read through cold segments like :meth:`read_range`); with ``tags``, only entries
        with one of those tags. Reads a page of ``read_page_entries`` records per
        transaction, so a filter that matches nothing still ends."""
        keys = universe_keys(universe)
        check_height(first, "first", allow_zero=False)
        row_limit(limit)
        if last is not None:
            check_height(last, "last")
        wanted = None
        if tags is not None:
            if isinstance(tags, (str, bytes)) or not isinstance(tags, Collection):
                raise Validation(
                    "tags", f"expected a collection of text, got {type(tags).__name__}"
                )
            wanted = {check_text(tag, "tags") for tag in tags}

        def matches(record: LogRecord) -> bool:
            return wanted is None or record.tag in wanted

        found: list[tuple[int, LogRecord]] = []
        entries: dict[int, bytes] = {}
        while len(found) < limit:
            # without a filter, a page need not be longer than what is still wanted
            page_size = self.config.read_page_entries
            if wanted is None:
                page_size = min(page_size, limit - len(found))
            page = await log.read_log(
                self.engine,
                keys,
                first,
                page_size,
                last,
                matches,
                await self.sealing(writing=False),
            )
            found.extend(
                page.records if wanted is None else (r for r in page.records if matches(r[1]))
            )
            entries.update(page.entries)
            if page.next is None:
                break
            first = page.next
        found = found[:limit]
        by_world: dict[WorldId, list[int]] = {}
        for position, record in found:
            if position not in entries:  # cold, or stored in chunks
                by_world.setdefault(record.world, []).append(record.height)
        read: dict[tuple[WorldId, int], bytes] = {}
        for world, heights in by_world.items():
            low, high = min(heights), max(heights)
            # one stitched read of the span, unless it is mostly other entries
            spans = [(low, high)] if high - low < 4 * len(heights) else [(h, h) for h in heights]
            wanted_heights = set(heights)
            for start, stop in spans:
                for height, entry in await self.read_range(
                    universe, world, start, stop - start + 1
                ):
                    if height in wanted_heights:
                        read[(world, height)] = entry
        out = []
        for position, record in found:
            stored = entries.get(position)
            if stored is None:
                stored = read.get((record.world, record.height))
            if stored is None:
                raise CorruptRecord(
                    f"universe log at {position}",
                    f"names height {record.height} of world {record.world}, above its head",
                )
            out.append(log.LogEntry(position, record.world, record.height, record.tag, stored))
        return out
