"""CAS with real OS processes on the embedded store: concurrent puts of one blob, and a
1 GiB streaming put and get with bounded memory."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import Hash, UniverseId
from persistence.protocols.cas_bodies import object_key
from segments import open_plane

WORKER = Path(__file__).with_name("cas_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def run_workers(args: list[list[str]]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *a],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for a in args
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        outs.append(out.strip())
    return outs


def test_concurrent_puts_of_the_same_blob_from_processes(tmp_path: Path) -> None:
    universe = UniverseId.new()
    open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    hashes = run_workers([["same", str(tmp_path), str(universe)] for _ in range(6)])
    blob = hashlib.shake_256(b"shared").digest(1 << 20)
    assert set(hashes) == {Hash.of(blob).hex}
    plane = open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    assert plane.get(universe, Hash.of(blob)) == blob
    files = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    assert [p.relative_to(tmp_path / "objects").as_posix() for p in files] == [
        object_key(universe, Hash.of(blob))
    ]  # one body, no temporary leftovers


def test_one_gibibyte_streams_through_with_bounded_memory(tmp_path: Path) -> None:
    universe = UniverseId.new()
    open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    (out,) = run_workers([["big", str(tmp_path), str(universe), "1024"]])
    result = json.loads(out)
    assert result["read"] == 1 << 30
    assert result["growth_put"] < 16 << 20, f"the put grew peak RSS too much: {result}"
    assert result["growth"] < 32 << 20, f"put and get grew peak RSS too much: {result}"
    stored = tmp_path / "objects" / object_key(universe, Hash.parse(result["hash"]))
    assert stored.stat().st_size == 1 << 30
