"""SIGKILL an exporting process at random protocol steps; the next exporter converges.

The worker pauses at the step the test names (its n-th crash point) and announces it; the
test kills it there. No sleep races the export, so every run kills exactly where it chose.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from segments import open_plane
from segments.export import Exporter
from segments.restore import full_replay, restore
from tests.segments.export_worker import CONFIG
from tests.segments.workload import snapshot_now

WORKER = Path(__file__).with_name("export_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def test_sigkilled_exporter_resumes_and_converges(tmp_path: Path) -> None:
    plane = open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    entries = [os.urandom(random.randint(10, 2000)) for _ in range(2000)]
    for start in range(0, 2000, 500):
        plane.append_batch(u, w, start, entries[start : start + 500])
    snapshot_now(plane, u, w, promote=True)
    before = full_replay(plane, u, w, ReferenceKernel()).state
    # Each incarnation is killed at a chosen step of the export it resumes: every stage of
    # Protocol F (marker written, object uploaded, index committed, mid-delete, deleted),
    # some more than once, and some a few segments in.
    kills = [
        ("export.after_copy_started", 1),
        ("export.after_upload", 1),
        ("export.after_index", 2),
        ("export.after_delete_chunk", 5),
        ("export.after_delete", 3),
        ("export.after_delete_chunk", 20),
        ("export.after_upload", 4),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for step, occurrence in kills:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path), str(u), str(w), step, str(occurrence)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().strip()
        assert line == f"paused {step}", (line, proc.stderr.read())
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        # whatever step it died at, the journal reads whole
        assert [e for _, e in plane.read_range(u, w, 1, 2000)] == entries
    Exporter(plane, CONFIG).export_all(u, w)  # a last, undisturbed run finishes the job
    segments = plane.list_segments(u, w)
    assert [(s.start, s.end) for s in segments] == [
        (s, min(s + 39, 1999))
        for s in range(1, 2000, 40)  # strictly below the baseline
    ]
    assert plane.read_hot(u, w, 1, 10) == []
    assert sorted(o.key for o in plane.objects.list("segments/")) == [
        s.object_key for s in segments
    ]
    assert (
        restore(plane, u, w, ReferenceKernel()).state
        == before
        == (full_replay(plane, u, w, ReferenceKernel()).state)
    )
