"""A separate OS process using the plane on one shared store (driven by
test_concurrency.py). The world must already exist; the object store is a process-local
memory store (CAS bodies are not exercised).

Usage: python plane_worker.py KV_URL STOP_FILE UNIVERSE WORLD MODE WORKER_ID COUNT [PAUSE [GATE]]
  write  -- enqueue COUNT items whose payloads are ``{"w": WORKER_ID, "i": index}``, in
            index order: runs of single ``enqueue`` calls alternate with ``enqueue_batch``
            calls of 5, sleeping up to PAUSE seconds (default 0) between calls. With GATE,
            once GATE items are enqueued it prints ``gate`` and waits for a line on stdin.
            Prints JSON ``{"seqs": [...]}`` (hex, in index order).
  drain  -- drain in small random batches until STOP_FILE exists and a drain after that
            finds nothing. Prints JSON ``{"drains": [[first, count, cursor], ...],
            "retries": {code: n}}`` (the drains that moved items; the engine errors the
            retry runner retried, by code).
  churn  -- drain in small random batches forever (until killed), one line per drain.

Every mode prints ``ready`` once its store is open; ``write`` and ``drain`` then wait for a
line on stdin before starting, so that all workers start at the same moment.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from backends.kv import open_engine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, kv
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.plane import Plane
from segments import open_plane

SCHEMA = "test/ConcurrentItem@1"
BATCH = 5


def item(worker: int, index: int) -> DomainEventIngress:
    """The inbox item ``index`` of ``worker``: its payload identifies both."""
    return DomainEventIngress(SCHEMA, cbor.encode({"w": worker, "i": index}))


def emit(value: Any) -> None:
    print(json.dumps(value), flush=True)


def write(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    worker: int,
    count: int,
    rng: random.Random,
    pause: float,
    gate: int | None,
) -> None:
    seqs: list[str] = []
    index = 0
    while index < count:
        if index == gate:
            print("gate", flush=True)
            sys.stdin.readline()
        if pause:
            time.sleep(rng.uniform(0, pause))
        if (
            (index // BATCH) % 2 == 1
            and index + BATCH <= count
            and gate not in range(index + 1, index + BATCH)
        ):
            batch = [item(worker, i) for i in range(index, index + BATCH)]
            seqs.extend(str(s) for s in plane.enqueue_batch(universe, world, batch))
            index += BATCH
        else:
            seqs.append(str(plane.enqueue(universe, world, item(worker, index))))
            index += 1
    emit({"seqs": seqs})


def drain(
    plane: Plane, universe: UniverseId, world: WorldId, rng: random.Random, stop: Path
) -> None:
    drains: list[tuple[int, int, str]] = []
    stopping = False
    while True:
        result = plane.drain_inbox_to_journal(universe, world, max_items=rng.randint(1, 8))
        if result.count:
            assert result.cursor is not None
            drains.append((result.first_height, result.count, str(result.cursor)))
        elif stopping:
            break
        else:
            time.sleep(0.002)
        # Writers finish before the stop file appears: a drain that began after seeing it
        # and found nothing proves the inbox is empty.
        stopping = stopping or stop.exists()
    emit({"drains": drains, "retries": kv.RETRY_STATS.snapshot()["retried"]})


def churn(plane: Plane, universe: UniverseId, world: WorldId, rng: random.Random) -> None:
    while True:
        result = plane.drain_inbox_to_journal(universe, world, max_items=rng.randint(1, 8))
        if result.count:
            print(result.first_height, result.count, flush=True)
        else:
            time.sleep(0.002)


def main() -> None:
    url, stop, universe_text, world_text, mode = sys.argv[1:6]
    worker, count = int(sys.argv[6]), int(sys.argv[7])
    pause = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    gate = int(sys.argv[9]) if len(sys.argv) > 9 else None
    universe, world = UniverseId.parse(universe_text), WorldId.parse(world_text)
    plane = open_plane(open_engine(url), MemoryObjectStore())
    rng = random.Random(worker)
    print("ready", flush=True)
    if mode in ("write", "drain"):
        sys.stdin.readline()  # the start signal
    if mode == "write":
        write(plane, universe, world, worker, count, rng, pause, gate)
    elif mode == "drain":
        drain(plane, universe, world, rng, Path(stop))
    elif mode == "churn":
        churn(plane, universe, world, rng)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
