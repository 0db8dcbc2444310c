"""The monitor thread: samples every world while the processes run and records anything
that moves back or changes."""

from __future__ import annotations

import hashlib
import random
import threading

from persistence.errors import Backend, PersistError
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.plane import Plane
from persistence.records import SnapshotRecord
from persistence.segment_records import SegmentIndexRecord

# --------------------------------------------------------------------------- the monitor


class Monitor(threading.Thread):
    """Samples every world while the processes run and records what must never happen:
    head, cursor or baseline moving back, an index entry or segment record changing or
    vanishing, a journal entry reading differently from an earlier read."""

    def __init__(
        self,
        plane: Plane,
        universe: UniverseId,
        worlds: tuple[WorldId, ...],
        *,
        tolerate_backend: bool = False,
    ) -> None:
        super().__init__(name="torture-monitor", daemon=True)
        self.tolerate_backend = tolerate_backend
        """Count ``Backend`` failures of its reads instead of reporting them (servers are
        being killed: a read may time out while the cluster recovers)."""
        self.backend_errors = 0
        self.plane = plane
        self.universe = universe
        self.worlds = worlds
        self.stop = threading.Event()
        self._violations: dict[str, None] = {}
        self.samples = 0
        self.entries_seen = 0
        self._rng = random.Random(0)
        self._heads: dict[int, int] = {}
        self._cursors: dict[int, InboxSeq] = {}
        self._baselines: dict[int, SnapshotRecord] = {}
        self._index: dict[tuple[int, int], bytes] = {}
        self._segments: dict[tuple[int, int], SegmentIndexRecord] = {}
        self._entries: dict[tuple[int, int], bytes] = {}

    @property
    def violations(self) -> list[str]:
        """What the monitor saw go wrong (each distinct finding once)."""
        return list(self._violations)

    def _report(self, message: str) -> None:
        self._violations[message] = None

    def run(self) -> None:
        """Sample every world every 20 ms until :attr:`stop` is set."""
        while not self.stop.wait(0.02):
            for index, world in enumerate(self.worlds):
                try:
                    self.sample(index, world)
                except Backend as exc:
                    if not self.tolerate_backend:
                        self._report(f"monitor: world {index}: a read failed: {exc!r}")
                    self.backend_errors += 1
                except PersistError as exc:
                    self._report(f"monitor: world {index}: a read failed: {exc!r}")
            self.samples += 1

    def sample(self, index: int, world: WorldId) -> None:
        """One look at world ``index``."""
        plane, u = self.plane, self.universe
        head = plane.head(u, world)
        if head < self._heads.get(index, 0):
            self._report(f"monitor: world {index}: head moved back to {head}")
        self._heads[index] = head
        cursor = plane.inbox_cursor(u, world)
        seen = self._cursors.get(index)
        if seen is not None and (cursor is None or cursor < seen):
            self._report(f"monitor: world {index}: cursor moved back {seen} -> {cursor}")
        if cursor is not None:
            self._cursors[index] = cursor
        baseline = plane.active_baseline(u, world)
        before = self._baselines.get(index)
        if before is not None and (
            baseline.height < before.height
            or (baseline.height == before.height and baseline != before)
        ):
            self._report(
                f"monitor: world {index}: baseline regressed from height {before.height} "
                f"to {baseline.height}"
            )
        self._baselines[index] = baseline
        index_now = {r.height: r.to_cbor() for r in plane.list_snapshots(u, world)}
        for (i, height), stored in self._index.items():  # with commit ids: bytes never change
            if i == index and index_now.get(height) != stored:
                self._report(
                    f"monitor: world {index}: snapshot index entry at {height} changed or vanished"
                )
        self._index.update(((index, h), stored) for h, stored in index_now.items())
        segments = {s.end: s for s in plane.list_segments(u, world)}
        for (i, end), record in self._segments.items():
            if i == index and segments.get(end) != record:
                self._report(f"monitor: world {index}: segment ending at {end} changed or vanished")
        self._segments.update(((index, end), record) for end, record in segments.items())
        if head:
            first = self._rng.randint(1, head)
            for height, entry in plane.read_range(u, world, first, 64):
                digest = hashlib.sha256(entry).digest()
                if self._entries.setdefault((index, height), digest) != digest:
                    self._report(
                        f"monitor: world {index}: journal entry {height} reads differently "
                        "than before"
                    )
                self.entries_seen += 1
