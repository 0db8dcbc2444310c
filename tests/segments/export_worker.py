"""An exporting OS process on the embedded store (driven by test_export_sigkill.py).

Usage: python export_worker.py DATA_DIR UNIVERSE WORLD STEP OCCURRENCE

Exports every safe range in small segments with small delete chunks. When it reaches the
protocol step ``STEP`` (a crash point of :mod:`segments.export`) for the ``OCCURRENCE``-th
time it prints ``paused <step>`` and blocks reading stdin, so the test kills it exactly
there instead of racing a sleep against the export. If the export finishes first it
prints ``done``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backends.kv.faults import FaultInjector
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import UniverseId, WorldId
from segments import open_plane
from segments.export import ExportConfig, Exporter

CONFIG = ExportConfig(enabled=True, target_entries=40, delete_chunk_entries=3)


class PausingInjector(FaultInjector):
    """Injects nothing; at the chosen occurrence of ``step`` it announces it and blocks."""

    def __init__(self, step: str, occurrence: int) -> None:
        super().__init__()
        self.step = step
        self.occurrence = occurrence

    def reached(self, point: str) -> None:
        super().reached(point)
        if point == self.step and self.points[point] == self.occurrence:
            print(f"paused {point}", flush=True)
            sys.stdin.readline()  # the test SIGKILLs us here


def main() -> None:
    data, step, occurrence = Path(sys.argv[1]), sys.argv[4], int(sys.argv[5])
    pausing = PausingInjector(step, occurrence)
    plane = open_plane(
        SqliteEngine(data / "aos.db"), LocalObjectStore(data / "objects"), hooks=pausing
    )
    universe, world = UniverseId.parse(sys.argv[2]), WorldId.parse(sys.argv[3])
    Exporter(plane, CONFIG).export_all(universe, world)
    print("done", flush=True)


if __name__ == "__main__":
    main()
