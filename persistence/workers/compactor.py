"""The inbox compactor: compaction passes over every world of a store (``protocols/compaction.py``).

A pass over a world runs :meth:`Plane.compact_inbox` until nothing older than the window
remains. Its first transaction marks the cursor (when a mark is due): run passes at least
every ``inbox_retention_seconds / 16`` so that items are removed soon after their window --
they are removed one window after the first pass that marks them consumed, so a store's
first pass removes nothing. Passes are safe to run concurrently with everything, including
other compactors, and to stop anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from persistence.errors import Corruption
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from persistence.protocols.compaction import Clock, InboxCompaction
from persistence.sizes import check_int

Progress = Callable[[UniverseId, WorldId, InboxCompaction], None]
"""Told what a pass did to each world, after the pass."""


@dataclass(frozen=True, slots=True)
class CompactionTotals:
    """What a compactor run did: worlds passed over, transactions, what they removed and
    wrote, how long it took, and the worlds it could not compact (corrupt records: fsck
    says more) with the error."""

    worlds: int
    transactions: int
    compaction: InboxCompaction
    seconds: float
    failures: tuple[tuple[UniverseId, WorldId, str], ...]


class Compactor:
    """Runs inbox compaction passes with ``plane`` (its config's window), removing at most
    ``max_items`` items per transaction, reading time from ``now_ns`` (the plane's clock by
    default)."""

    def __init__(
        self,
        plane: Plane,
        *,
        max_items: int = 1_000,
        now_ns: Clock | None = None,
        progress: Progress | None = None,
    ) -> None:
        check_int(max_items, "max_items", 1, plane.config.max_batch_entries)
        self.plane = plane
        self.max_items = max_items
        self.now_ns = plane.clock if now_ns is None else now_ns
        self.progress = progress

    def compact_world(self, universe: UniverseId, world: WorldId) -> tuple[InboxCompaction, int]:
        """One pass over ``world``: what it did in total, and its transactions."""
        total = InboxCompaction()
        transactions = 0
        while True:
            step = self.plane.compact_inbox(
                universe, world, max_items=self.max_items, now_ns=self.now_ns
            )
            total += step
            transactions += 1
            # Each transaction that reports ``more`` removed at least one item, so the pass
            # ends once it catches up with the marks (while items expire faster than it
            # removes them -- the boundary moves with the clock -- it keeps going).
            if not step.more:
                return total, transactions

    def run(self, universes: Iterable[UniverseId] | None = None) -> CompactionTotals:
        """One pass over every world of ``universes`` (default: every universe)."""
        started = time.monotonic()
        total = InboxCompaction()
        worlds = transactions = 0
        failures: list[tuple[UniverseId, WorldId, str]] = []
        for universe in self.plane.universes() if universes is None else universes:
            for world in self.plane.worlds(universe):
                worlds += 1
                try:
                    done, count = self.compact_world(universe, world)
                except Corruption as exc:  # one damaged world must not stop the others
                    failures.append((universe, world, str(exc)))
                    continue
                total += done
                transactions += count
                if self.progress is not None:
                    self.progress(universe, world, done)
        return CompactionTotals(
            worlds, transactions, total, time.monotonic() - started, tuple(failures)
        )
