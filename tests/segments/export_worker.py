"""An exporting OS process on the embedded store (driven by test_export_sigkill.py).

Usage: python export_worker.py DATA_DIR UNIVERSE WORLD
Exports every safe range in small segments with small delete chunks, printing "ready"
first; the test kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from segments.export import ExportConfig, Exporter

CONFIG = ExportConfig(enabled=True, target_entries=40, delete_chunk_entries=3)


def main() -> None:
    data = Path(sys.argv[1])
    plane = Plane(SqliteEngine(data / "aos.db"), LocalObjectStore(data / "objects"))
    universe, world = UniverseId.parse(sys.argv[2]), WorldId.parse(sys.argv[3])
    print("ready", flush=True)
    Exporter(plane, CONFIG).export_all(universe, world)
    print("done", flush=True)


if __name__ == "__main__":
    main()
