"""CAS put and get of 1 MiB blobs on the embedded default (SQLite + local directory).

Baselines, measured in the same run on the same disk, are the raw limits of what a put and
a get must do at least: for a put, sha256 of the bytes plus writing them to a new file and
fsyncing it; for a get, reading the file plus sha256. Targets: both ratios >= 0.6.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aosp.benchmarks import Figure
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import UniverseId
from segments import open_plane

BLOB = 1 << 20
ROUNDS = 5


def _rate(fn: Callable[[int], None], seconds: float, start_index: int) -> tuple[float, int]:
    start = time.perf_counter()
    index = start_index
    while index - start_index < 5 or time.perf_counter() - start < seconds:
        fn(index)
        index += 1
    return (index - start_index) / (time.perf_counter() - start), index


def run(seconds: float = 2.0, progress: Callable[[str], None] = lambda _: None) -> list[Figure]:
    """Measure and return the CAS figures."""
    with tempfile.TemporaryDirectory(prefix="aosp-bench-cas-") as tmp:
        root = Path(tmp)
        plane = open_plane(SqliteEngine(root / "aos.db"), LocalObjectStore(root / "objects"))
        universe = UniverseId.new()
        raw_dir = root / "raw"
        raw_dir.mkdir()
        seed = os.urandom(32)

        def blob(i: int) -> bytes:
            return hashlib.shake_256(seed + i.to_bytes(8, "big")).digest(BLOB)

        blobs = [blob(i) for i in range(64)]  # generated outside the timed loops
        hashes: list[object] = []

        def ours_put(i: int) -> None:
            data = blobs[i % 64][:-8] + i.to_bytes(8, "big")
            hashes.append(plane.put_verified(universe, data))

        def raw_put(i: int) -> None:
            data = blobs[i % 64][:-8] + i.to_bytes(8, "big")
            name = hashlib.sha256(data).hexdigest()
            fd = os.open(raw_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

        progress("cas: 1 MiB puts")
        ours_rates, raw_rates = [], []
        index_ours, index_raw = 0, 0
        for _ in range(ROUNDS):
            rate, index_raw = _rate(raw_put, seconds / ROUNDS, index_raw)
            raw_rates.append(rate)
            rate, index_ours = _rate(ours_put, seconds / ROUNDS, index_ours)
            ours_rates.append(rate)
        put_ours, put_raw = statistics.median(ours_rates), statistics.median(raw_rates)

        raw_files = sorted(raw_dir.iterdir())

        def ours_get(i: int) -> None:
            plane.get(universe, hashes[i % len(hashes)])  # type: ignore[arg-type]

        def raw_get(i: int) -> None:
            hashlib.sha256(raw_files[i % len(raw_files)].read_bytes()).digest()

        progress("cas: 1 MiB gets")
        ours_rates, raw_rates = [], []
        for _ in range(ROUNDS):
            raw_rates.append(_rate(raw_get, seconds / ROUNDS, 0)[0])
            ours_rates.append(_rate(ours_get, seconds / ROUNDS, 0)[0])
        get_ours, get_raw = statistics.median(ours_rates), statistics.median(raw_rates)
        plane.engine.close()

    mib = BLOB / (1 << 20)
    return [
        Figure(
            name="cas put, 1 MiB blobs, sqlite + local directory",
            value=round(put_ours * mib, 1),
            unit="MiB/s",
            baseline="raw limit: sha256 + write + fsync of the same bytes",
            baseline_value=round(put_raw * mib, 1),
            target=0.6,
            better="higher",
        ),
        Figure(
            name="cas get (verified), 1 MiB blobs, sqlite + local directory",
            value=round(get_ours * mib, 1),
            unit="MiB/s",
            baseline="raw limit: read + sha256 of the same bytes",
            baseline_value=round(get_raw * mib, 1),
            target=0.6,
            better="higher",
        ),
    ]
