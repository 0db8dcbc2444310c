"""eventsourcing applications beyond one machine's file: the module on FoundationDB against
``eventsourcing.postgres``, from several writer processes, in the same run.

Each side is an eventsourcing ``Application`` selected by environment variables, as a user
selects it: ``PERSISTENCE_MODULE=aos_eventsourcing`` with ``AOSP_KV_URL`` naming the
FoundationDB cluster given to ``aosp bench --fdb``; ``PERSISTENCE_MODULE=eventsourcing.postgres``
with a PostgreSQL server this suite starts (:mod:`aos_bench.pg_local`: the distribution's
server, a new cluster, ``fsync=on``, ``synchronous_commit=on``, checked and reported).

Figures, for :data:`WRITERS` processes (1, 4 and 8), each a new interpreter saving
aggregates of its own:

1. inserts/s: each save creates an aggregate with one event (the application's recorder,
   notification ids included), all processes together (target 1.0 at 8 writers);
2. the 99th percentile of a save's latency, ours against theirs (target: no higher at 8
   writers);
3. DCB appends/s (``DCBApplication``'s recorder), each process appending events under a
   boundary of its own (tags disjoint between processes), conditioned on no event of its
   boundary after what it read (target 1.0 at 8 writers).

Rounds alternate the sides (theirs, ours) after a warm-up round of each, ``ROUNDS`` rounds
per figure; every process waits at a barrier, then saves for ``seconds``. A figure is the
median of the per-round ratios, with the lowest and highest.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Final

from aos_bench import Figure, require

WRITERS: Final = (1, 4, 8)
ROUNDS: Final = 3
STATE: Final = b"s" * 100


def _application(env: dict[str, str]) -> Any:
    """An application of this suite on the store ``env`` names (tables created)."""
    from eventsourcing.application import Application

    class ScaleBench(Application[uuid.UUID]):
        pass

    return ScaleBench(env=env)


def _dcb(env: dict[str, str]) -> Any:
    from eventsourcing.dcb.application import DCBApplication

    class ScaleBenchDCB(DCBApplication):
        pass

    return ScaleBenchDCB(env=env)


def _saves(env: dict[str, str], seconds: float, barrier: Barrier, out: Any) -> None:
    """One writer process: save new one-event aggregates until ``seconds`` pass."""
    from eventsourcing.domain import Aggregate

    os.environ.update(env)
    app = _application(env)
    for _ in range(10):  # warm: connections, caches, imports
        app.save(Aggregate())
    latencies: list[float] = []
    barrier.wait(timeout=120)
    deadline = time.perf_counter() + seconds
    while (start := time.perf_counter()) < deadline:
        app.save(Aggregate())
        latencies.append(time.perf_counter() - start)
    out.put(latencies)
    app.close()


def _appends(env: dict[str, str], seconds: float, barrier: Barrier, out: Any) -> None:
    """One writer process: DCB appends under a boundary of its own, each conditioned on no
    event of the boundary after what it read."""
    from eventsourcing.dcb.api import DCBAppendCondition, DCBEvent, DCBQuery, DCBQueryItem

    os.environ.update(env)
    app = _dcb(env)
    tag = f"boundary-{uuid.uuid4()}"
    query = DCBQuery([DCBQueryItem(tags=[tag])])
    recorder = app.recorder

    def append() -> None:
        seen = recorder.read(query).head
        recorder.append([DCBEvent("Booked", STATE, [tag])], DCBAppendCondition(query, seen))

    for _ in range(5):
        append()
    latencies: list[float] = []
    barrier.wait(timeout=120)
    deadline = time.perf_counter() + seconds
    while (start := time.perf_counter()) < deadline:
        append()
        latencies.append(time.perf_counter() - start)
    out.put(latencies)


def _round(
    work: Callable[[dict[str, str], float, Barrier, Any], None],
    env: dict[str, str],
    writers: int,
    seconds: float,
) -> tuple[float, float]:
    """Operations per second of ``writers`` processes together, and the 99th percentile
    latency of one (seconds)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(writers), ctx.Queue()
    # the tables and the universe exist (made by the caller): a writer does not create them
    env = {**env, "CREATE_TABLE": "false"}
    processes = [
        ctx.Process(target=work, args=(env, seconds, barrier, out)) for _ in range(writers)
    ]
    for process in processes:
        process.start()
    latencies: list[float] = []
    reported = 0
    try:
        while reported < writers:
            try:
                latencies.extend(out.get(timeout=1.0))
                reported += 1
            except queue.Empty:
                failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
                if failed:
                    raise RuntimeError(f"a writer process failed (exit code {failed[0]})") from None
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    rate = len(latencies) / seconds
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    return rate, p99


def _compare(
    name: str,
    unit: str,
    work: Callable[[dict[str, str], float, Barrier, Any], None],
    ours: dict[str, str],
    theirs: dict[str, str],
    peer: str,
    seconds: float,
    progress: Callable[[str], None],
) -> list[Figure]:
    figures = []
    for writers in WRITERS:
        progress(f"eventsourcing-scale: {name}, {writers} writer processes")
        _round(work, theirs, writers, min(seconds, 1.0))  # warm-up of each side
        _round(work, ours, writers, min(seconds, 1.0))
        rates, latencies = [], []
        for _ in range(ROUNDS):
            theirs_rate, theirs_p99 = _round(work, theirs, writers, seconds)
            ours_rate, ours_p99 = _round(work, ours, writers, seconds)
            rates.append((ours_rate, theirs_rate))
            latencies.append((ours_p99, theirs_p99))
        last = writers == WRITERS[-1]
        figures.append(
            Figure(
                name=f"eventsourcing-scale: {name}, {writers} writer processes",
                value=round(statistics.median(r[0] for r in rates), 1),
                unit=unit,
                baseline=peer,
                baseline_value=round(statistics.median(r[1] for r in rates), 1),
                target=1.0 if last else None,
                better="higher",
                round_ratios=tuple(o / t for o, t in rates),
            )
        )
        figures.append(
            Figure(
                name=f"eventsourcing-scale: {name}, {writers} writer processes, p99 latency",
                value=round(statistics.median(p[0] for p in latencies) * 1e3, 2),
                unit="ms",
                baseline=peer,
                baseline_value=round(statistics.median(p[1] for p in latencies) * 1e3, 2),
                target=1.0 if last and work is _saves else None,
                better="lower",
                round_ratios=tuple(o / t for o, t in latencies),
            )
        )
    return figures


def run(
    seconds: float = 2.0, fdb_url: str | None = None, progress: Callable[[str], None] = print
) -> list[Figure]:
    """Measure and return the figures (``MissingDependency`` without eventsourcing's
    PostgreSQL module or a PostgreSQL server; ``fdb_url`` is required)."""
    from aos_bench import pg_local

    require("the eventsourcing-scale suite", "bench", "eventsourcing", "psycopg")
    if not fdb_url:
        raise ValueError("the eventsourcing-scale suite needs --fdb URL (a FoundationDB cluster)")
    with tempfile.TemporaryDirectory(prefix="aosp-bench-scale-") as name, pg_local.running() as pg:
        settings = pg.settings()
        if settings["fsync"] != "on" or settings["synchronous_commit"] != "on":
            raise RuntimeError(f"PostgreSQL is not durable as configured: {settings}")
        peer = (
            f"eventsourcing 9.5 eventsourcing.postgres on PostgreSQL {pg.version} (loopback, "
            f"fsync=on, synchronous_commit=on, wal_sync_method={settings['wal_sync_method']})"
        )
        theirs = pg.environ()
        theirs_dcb = {**theirs, "PERSISTENCE_MODULE": "eventsourcing.dcb.postgres_tt"}
        ours = {
            "PERSISTENCE_MODULE": "aos_eventsourcing",
            "AOSP_KV_URL": fdb_url,
            "AOSP_OBJECTS_URL": f"file://{Path(name) / 'objects'}",
        }
        for env in (theirs, ours):  # each store's tables and universe, made once
            _application(env).close()
        for env in (theirs_dcb, ours):
            _dcb(env).close()
        return _compare(
            "saves of new aggregates", "saves/s", _saves, ours, theirs, peer, seconds, progress
        ) + _compare(
            "DCB appends, a boundary per process", "appends/s", _appends, ours, theirs_dcb,
            peer.replace("eventsourcing.postgres", "eventsourcing.dcb.postgres_tt"), seconds,
            progress,
        )  # fmt: skip
