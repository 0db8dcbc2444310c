"""A separate OS process using the CAS on the embedded store (driven by test_cas_processes.py).

Usage:
  python cas_worker.py same DATA_DIR UNIVERSE       put one shared 1 MiB blob; print its hash
  python cas_worker.py big DATA_DIR UNIVERSE MIB    stream a MIB-sized generated blob in and
                                                    out; print hash, bytes read, RSS growth
  python cas_worker.py killed DATA_DIR UNIVERSE     stream KILLED_BODY in and SIGKILL this
                                                    process once its put has pinned it
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import signal
import sys
from pathlib import Path

from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.hooks import NO_HOOKS
from persistence.ids import UniverseId
from segments import open_plane

KILLED_BODY = hashlib.shake_256(b"killed").digest(100_000)


class KillAfterPin:
    """Hooks that SIGKILL this process when a put has pinned its body."""

    def reached(self, step: str) -> None:
        if step == "cas.after_pin":
            os.kill(os.getpid(), signal.SIGKILL)


class Generated:
    """A readable stream of ``size`` deterministic bytes, never held in memory."""

    def __init__(self, size: int) -> None:
        self.remaining = size
        self.block = hashlib.shake_256(b"block").digest(1 << 20)

    def read(self, n: int = -1) -> bytes:
        n = self.remaining if n < 0 else min(n, self.remaining)
        out = (self.block * (n // len(self.block) + 1))[:n]
        self.remaining -= n
        return out


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    """This process image's peak RSS (VmHWM). Not ``ru_maxrss``: that survives ``exec``
    and so reports the forking parent's size when the parent is bigger (pytest is)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    mode, data_dir, universe = sys.argv[1], Path(sys.argv[2]), UniverseId.parse(sys.argv[3])
    hooks = KillAfterPin() if mode == "killed" else NO_HOOKS
    engine, objects = SqliteEngine(data_dir / "aos.db"), LocalObjectStore(data_dir / "objects")
    plane = open_plane(engine, objects, hooks=hooks)
    if mode == "killed":
        plane.put_stream(universe, io.BytesIO(KILLED_BODY))
    elif mode == "same":
        blob = hashlib.shake_256(b"shared").digest(1 << 20)
        print(plane.put_verified(universe, blob).hex)
    elif mode == "big":
        size = int(sys.argv[4]) << 20
        before = rss_bytes()
        h = plane.put_stream(universe, Generated(size))  # type: ignore[arg-type]
        after_put = peak_rss_bytes()
        read = 0
        with plane.open_blob(universe, h) as stream:
            while chunk := stream.read(1 << 20):
                read += len(chunk)
        peak = peak_rss_bytes()
        print(
            json.dumps(
                {
                    "hash": h.hex,
                    "read": read,
                    "growth": peak - before,
                    "growth_put": after_put - before,
                    "rss_before": before,
                    "rss_end": rss_bytes(),
                }
            )
        )
    plane.engine.close()


if __name__ == "__main__":
    main()
