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

In the same rounds as the saves, two floors (:func:`_floor_saves`): the same saves with the
``fdb`` bindings alone, on the plane's keys -- each a new aggregate and its stored event
made by eventsourcing's mapper, then one transaction (``fdb_raw.Raw.append_new``): with a
gapless notification id taken in that transaction (the aggregate's head and the universe
log's head read with conflicts, the entry, its log record, both heads; conflicting saves
retry through ``on_error``'s backoff), and without one (the head and the entry only). No
world record, genesis or call record. They show what the bindings do on this machine
taking the id inline and without an id, against ``eventsourcing.postgres``; ours (which
queues its ids and settles them in batches) is also put against the first.

Rounds run the sides (theirs, ours, then the floors for the saves) after a warm-up round
of each, ``ROUNDS`` rounds per figure or one per side if there are more sides (4 for the
saves), each round starting with the next side; every process waits at a barrier, then
saves for ``seconds``. A figure is the median of the
per-round ratios, with the lowest and highest.
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
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Final

from aos_bench import Figure, require
from persistence.ids import UniverseId

WRITERS: Final = (1, 4, 8)
ROUNDS: Final = 3
STATE: Final = b"s" * 100
FLOOR: Final = "AOSP_BENCH_FLOOR"
"""The variable telling a floor writer (:func:`_floor_saves`) whether its saves take
notification ids: ``logged`` or ``unlogged``."""
FLOOR_UNIVERSE: Final = UniverseId(uuid.uuid5(uuid.NAMESPACE_URL, "aosp:bench:scale-floor"))
"""The universe the floor writes in (the plane's keys, its own universe)."""


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


def _timed(operation: Callable[[], object], seconds: float, barrier: Barrier, out: Any) -> None:
    """Warm ``operation`` up (connections, caches, imports), wait at ``barrier`` for the
    other writers, then run it until ``seconds`` pass; put each run's latency on ``out``."""
    for _ in range(10):
        operation()
    latencies: list[float] = []
    barrier.wait(timeout=120)
    deadline = time.perf_counter() + seconds
    while (start := time.perf_counter()) < deadline:
        operation()
        latencies.append(time.perf_counter() - start)
    out.put(latencies)


def _saves(env: dict[str, str], seconds: float, barrier: Barrier, out: Any) -> None:
    """One writer process: save new one-event aggregates until ``seconds`` pass."""
    from eventsourcing.domain import Aggregate

    os.environ.update(env)
    app = _application(env)
    _timed(lambda: app.save(Aggregate()), seconds, barrier, out)
    app.close()


def _floor_saves(env: dict[str, str], seconds: float, barrier: Barrier, out: Any) -> None:
    """One writer process of the raw bindings' floor: each save makes a new one-event
    aggregate and its stored event as an application does (eventsourcing's mapper), then
    appends the module's entry for it with the ``fdb`` bindings alone, on the plane's keys
    (``fdb_raw.Raw.append_new``): with a gapless notification id where ``env``'s
    :data:`FLOOR` is ``logged``, without one where it is ``unlogged``."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate

    from aos_bench.fdb_raw import Raw
    from aos_eventsourcing import codec
    from backends.kv import open_engine
    from backends.kv.fdb import FdbEngine
    from persistence.ids import WorldId
    from persistence.keyspace import UniverseKeys

    engine = open_engine(env["AOSP_KV_URL"])
    if not isinstance(engine, FdbEngine):
        raise TypeError(f"the floor needs a FoundationDB engine, not {type(engine).__name__}")
    raw = Raw(engine)
    mapper = Application[uuid.UUID](env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    universe = UniverseKeys(FLOOR_UNIVERSE)
    logged = env[FLOOR] == "logged"

    def save() -> None:
        aggregate = Aggregate()
        stored = [mapper.to_stored_event(event) for event in aggregate.collect_events()]
        entries = [codec.encode(e.originator_version, e.topic, e.state, None) for e in stored]
        keys = universe.world(WorldId(aggregate.id))
        raw.append_new(universe, keys, entries, [e.topic for e in stored] if logged else None)

    _timed(save, seconds, barrier, out)
    engine.close()


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

    _timed(append, seconds, barrier, out)


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


@dataclass
class Floor:
    """A side measured in the same rounds as ours and theirs, against theirs: what the
    ``fdb`` bindings alone do for the same saves (``label`` says how); ``overhead`` also
    puts ours against it."""

    label: str
    env: dict[str, str]
    overhead: bool


def _compare(
    name: str,
    unit: str,
    work: Callable[[dict[str, str], float, Barrier, Any], None],
    ours: dict[str, str],
    theirs: dict[str, str],
    peer: str,
    seconds: float,
    progress: Callable[[str], None],
    floors: tuple[Floor, ...] = (),
) -> list[Figure]:
    figures = []
    for writers in WRITERS:
        progress(f"eventsourcing-scale: {name}, {writers} writer processes")
        _round(work, theirs, writers, min(seconds, 1.0))  # warm-up of each side
        _round(work, ours, writers, min(seconds, 1.0))
        for floor in floors:
            _round(_floor_saves, floor.env, writers, min(seconds, 1.0))
        sides = [(work, theirs), (work, ours)] + [(_floor_saves, f.env) for f in floors]
        rounds: list[tuple[tuple[float, float], ...]] = []  # (rate, p99): theirs, ours, floors
        for number in range(max(ROUNDS, len(sides))):
            # each round starts with the next side, each side first in one round at least
            measured: dict[int, tuple[float, float]] = {}
            for step in range(len(sides)):
                index = (number + step) % len(sides)
                measured[index] = _round(*sides[index], writers, seconds)
            rounds.append(tuple(measured[index] for index in range(len(sides))))
        last = writers == WRITERS[-1]
        title = f"eventsourcing-scale: {name}, {writers} writer processes"
        figures.append(_figure(title, unit, rounds, 1, 0, peer, 1.0 if last else None))
        p99_target = 1.0 if last and work is _saves else None
        p99_title = f"{title}, p99 latency"
        figures.append(_figure(p99_title, "ms", rounds, 1, 0, peer, p99_target, p99=True))
        for index, floor in enumerate(floors, start=2):
            raw = f"raw bindings, {floor.label}"
            figures.append(_figure(f"{title}: {raw}", unit, rounds, index, 0, peer, None))
            if floor.overhead:
                figures.append(
                    _figure(f"{p99_title}: {raw}", "ms", rounds, index, 0, peer, None, p99=True)
                )
                alone = f"the fdb bindings alone, {floor.label}"
                overhead_title = f"{title}: ours against the {raw}"
                figures.append(_figure(overhead_title, unit, rounds, 1, index, alone, None))
    return figures


def _figure(
    name: str,
    unit: str,
    rounds: list[tuple[tuple[float, float], ...]],
    side: int,
    base: int,
    baseline: str,
    target: float | None,
    *,
    p99: bool = False,
) -> Figure:
    """Side ``side`` of each round (its rate, or with ``p99`` its 99th percentile latency
    in ms) against side ``base``."""
    metric, scale = (1, 1e3) if p99 else (0, 1.0)
    return Figure(
        name=name,
        value=round(statistics.median(r[side][metric] for r in rounds) * scale, 2),
        unit=unit,
        baseline=baseline,
        baseline_value=round(statistics.median(r[base][metric] for r in rounds) * scale, 2),
        target=target,
        better="lower" if p99 else "higher",
        round_ratios=tuple(r[side][metric] / r[base][metric] for r in rounds),
    )


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
        floors = (
            Floor("gapless ids taken inline", {"AOSP_KV_URL": fdb_url, FLOOR: "logged"}, True),
            Floor("no notification ids", {"AOSP_KV_URL": fdb_url, FLOOR: "unlogged"}, False),
        )
        return _compare(
            "saves of new aggregates", "saves/s", _saves, ours, theirs, peer, seconds, progress,
            floors,
        ) + _compare(
            "DCB appends, a boundary per process", "appends/s", _appends, ours, theirs_dcb,
            peer.replace("eventsourcing.postgres", "eventsourcing.dcb.postgres_tt"), seconds,
            progress,
        )  # fmt: skip
