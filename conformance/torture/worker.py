"""One process of the SIGKILL crash torture (:mod:`conformance.torture`).

Usage: ``python -m conformance.torture.worker CONFIG ROLE ID INCARNATION``

``CONFIG`` is the run's ``config.json``; ``ROLE`` is ``writer``, ``drainer`` or
``exporter``. The process opens the shared store, then works until it is killed, appending
what each call durably did to ``<ROLE>-<ID>.<INCARNATION>.jsonl`` in the run's directory
(fsynced after the call returned). An unexpected error is logged as ``{"error": ...}`` and
ends the process with status 1: the torture reports it.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
from pathlib import Path

from backends.kv import open_engine
from backends.objects import open_object_store
from conformance.torture.evidence import Log, log_name, resume_point, state_at
from conformance.torture.workload import (
    TortureConfig,
    call_size,
    call_world,
    idempotency_key,
    item,
)
from persistence.plane import Plane
from segments import open_plane
from segments.export import ExportConfig, Exporter


def write(plane: Plane, config: TortureConfig, writer: int, log: Log) -> None:
    """Enqueue items forever, from the first call without an acknowledgement."""
    n = resume_point(config.directory, writer)
    while True:
        size = call_size(n)
        target = call_world(writer, n, len(config.worlds))
        numbers = list(range(n, n + size))
        log.append({"writer": writer, "world": target, "intent": numbers})
        items = [item(writer, i) for i in numbers]
        keys = [idempotency_key(writer, i) for i in numbers]
        world = config.worlds[target]
        if size == 1:
            seqs = [plane.enqueue(config.universe, world, items[0], idempotency_key=keys[0])]
        else:
            seqs = plane.enqueue_batch(config.universe, world, items, idempotency_keys=keys)
        log.append(
            {
                "writer": writer,
                "world": target,
                "ack": [[i, str(seq)] for i, seq in zip(numbers, seqs, strict=True)],
            }
        )
        n += size
        time.sleep(config.writer_pause)


def drain(plane: Plane, config: TortureConfig, drainer: int, log: Log) -> None:
    """Drain every world in small random batches forever."""
    rng = random.Random(config.seed * 1_000 + drainer)
    order = list(enumerate(config.worlds))
    while True:
        rng.shuffle(order)
        moved = 0
        for index, world in order:
            result = plane.drain_inbox_to_journal(
                config.universe, world, max_items=rng.randint(1, 8)
            )
            if result.count:
                assert result.cursor is not None
                log.append(
                    {
                        "drain": index,
                        "first": result.first_height,
                        "count": result.count,
                        "cursor": str(result.cursor),
                    }
                )
                moved += result.count
        if not moved:
            time.sleep(0.005)


def export(plane: Plane, config: TortureConfig, log: Log) -> None:
    """Snapshot (promoting two times in three) and export every world, round after round."""
    exporter = Exporter(
        plane,
        ExportConfig(
            enabled=True,
            target_entries=config.export_target_entries,
            delete_chunk_entries=config.export_delete_chunk,
        ),
    )
    rounds = 0
    while True:
        for index, world in enumerate(config.worlds):
            height = plane.head(config.universe, world)
            if height:
                state = state_at(plane, config.universe, world, height)
                promote = rounds % 3 != 2
                record, _ = plane.snapshot_commit(
                    config.universe,
                    world,
                    state,
                    height=height,
                    logical_time_ns=height,
                    receipt_horizon_height=height,
                    promote_baseline=promote,
                )
                log.append(
                    {
                        "snapshot": index,
                        "height": height,
                        "ref": record.snapshot_ref.hex,
                        "promoted": promote,
                    }
                )
            while (segment := exporter.export_once(config.universe, world)) is not None:
                log.append(
                    {
                        "segment": index,
                        "start": segment.start,
                        "end": segment.end,
                        "checksum": segment.checksum.hex(),
                    }
                )
        rounds += 1
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    """Run one torture process (see the module documentation)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    config = TortureConfig.load(Path(args[0]))
    role, ident, incarnation = args[1], int(args[2]), int(args[3])
    log = Log(config.directory / log_name(role, ident, incarnation))
    plane = open_plane(open_engine(config.kv_url), open_object_store(config.objects_url))
    try:
        if role == "writer":
            write(plane, config, ident, log)
        elif role == "drainer":
            drain(plane, config, ident, log)
        elif role == "exporter":
            export(plane, config, log)
        else:
            raise ValueError(f"unknown role {role!r}")
    except Exception as exc:
        log.append({"error": f"{type(exc).__name__}: {exc}"})
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
