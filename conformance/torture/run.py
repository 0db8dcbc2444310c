"""One torture run, its report, and the conformance case."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from conformance.context import CaseSkipped, ConformanceFailure, Context, TortureSize
from conformance.doors import plane_class
from conformance.torture.checks import InboxTally, check_pending, check_store, inbox_tally
from conformance.torture.evidence import Evidence, read_evidence
from conformance.torture.figures import (
    compaction_due,
    compaction_figures,
    evidence_figures,
    kill_figures,
    orphan_collection_due,
    orphan_figures,
    server_figures,
    store_figures,
)
from conformance.torture.fleet import Fleet
from conformance.torture.killer import Killer
from conformance.torture.monitor import Monitor
from conformance.torture.orphan_checks import collect_orphans
from conformance.torture.servers import ServerFaultError, ServerFaults
from conformance.torture.workload import (
    DRAIN_WORKERS,
    ORPHAN_GRACE_SECONDS,
    TortureConfig,
    check_shared_urls,
)
from persistence import kv
from persistence.errors import Backend, PersistError, Validation
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane
from persistence.workers.drain_worker import Shard
from segments.export import ExportConfig, Exporter

MAX_LISTED: Final = 25
"""Violations listed in a failure message (all are in the report's ``violations``)."""
FLOOR_LOOK_SECONDS: Final = 1.0
"""Past its planned length, how often a run with floors reads its logs to see if they are
reached."""
STARTED_WITHIN_SECONDS: Final = 300.0
"""The longest the workers may take to start (the fork server's imports on a loaded machine):
the run's time and kills count from then (``Fleet.await_started``)."""
AVAILABLE_WITHIN_SECONDS: Final = 60.0
"""How soon the store must answer again after the last server restart."""

# --------------------------------------------------------------------------- the run


@dataclass
class TortureReport:
    """The verdict and the figures of one torture run."""

    violations: list[str]
    figures: dict[str, Any]
    directory: Path


def run_torture(
    plane: Plane,
    kv_url: str,
    objects_url: str,
    size: TortureSize,
    *,
    seed: int,
    directory: Path,
    servers: ServerFaults | None = None,
    progress: Callable[[str], None] = lambda _: None,
    orphan_grace_seconds: float = ORPHAN_GRACE_SECONDS,
    door: str = "blocking",
) -> TortureReport:
    """Run the torture on the store ``plane`` works on (which ``kv_url``/``objects_url``
    open in other processes), in fresh worlds of a fresh universe; logs go to
    ``directory``. Raises ``CaseSkipped`` if the URLs cannot be shared between processes.
    A ``faults+`` engine URL is opened plain in the workers: their faults are real kills.
    With ``servers``, the store's server processes are killed and restarted too (one down at
    a time), and calls that fail while the cluster recovers are part of the run. The
    compactors collect orphans with ``orphan_grace_seconds`` of grace. Every plane of the
    run calls through ``door`` (:mod:`conformance.doors`): the workers', the monitor's and the
    checks'."""
    kv_url = kv_url.removeprefix("faults+")
    check_shared_urls(kv_url, objects_url)
    window = size.retention_seconds(servers is not None)
    plane = _with_window(plane, door, window)
    rng = random.Random(seed)
    universe, worlds = _new_worlds(plane, size.worlds)
    config = TortureConfig(
        kv_url,
        objects_url,
        universe,
        worlds,
        directory,
        seed,
        window,
        orphan_grace_seconds=orphan_grace_seconds,
        door=door,
    )
    fleet = Fleet(config.save(), directory)
    roles = _roles(size, config.drain_workers)
    _check_floors(size, roles)
    failures, monitor = _start(fleet, roles, plane, universe, worlds, servers)
    began, began_wall = time.monotonic(), time.time()
    killer = Killer(fleet, servers, size, rng, began)
    run = _Running(size, directory, orphan_grace_seconds, fleet, killer, monitor, began)
    failures += run.torture(progress)
    run_seconds = time.monotonic() - began
    failures += _settle(plane, universe, worlds[0], servers)
    evidence = read_evidence(directory)
    violations = failures + fleet.failures + monitor.violations + evidence.errors
    violations += check_pending(plane, universe, worlds, evidence)
    violations += _repair(plane, universe, worlds)  # a clean process finishes what the killed left
    # ... and a clean collector what they left orphaned, once their pins' grace is over.
    orphans = collect_orphans(plane, universe, worlds, orphan_grace_seconds, violations)
    progress("torture: checking the store")
    violations += check_store(plane, universe, worlds, evidence)
    tally = inbox_tally(plane, universe, worlds)
    due = compaction_due(run_seconds, window)
    violations += _overdue(run_seconds, window, due, tally, orphan_grace_seconds, evidence)
    violations = list(dict.fromkeys(violations))  # a finding before and after the repair: once
    figures: dict[str, Any] = {
        "seed": seed,
        "door": door,
        "seconds": round(run_seconds, 1),
        "processes": len(roles),
        **run.process_figures(),
        **evidence_figures(evidence),
        **compaction_figures(tally, window, due),
        **orphan_figures(evidence, orphans, run_seconds, orphan_grace_seconds),
        **store_figures(plane, universe, worlds),
        **run.monitor_figures(),
    }
    if size.floors:
        figures["floors_unmet_at_the_cap"] = run.unmet()
    if servers is not None:
        figures.update(server_figures(servers, killer, began_wall))
    return TortureReport(violations, figures, directory)


def _with_window(plane: Plane, door: str, window: float) -> Plane:
    """A plane on ``plane``'s store, through ``door``, with the run's compaction window:
    every plane of the run (the workers', the monitor's, the checks') has it."""
    return plane_class(door)(
        plane.engine,
        plane.objects,
        dataclasses.replace(plane.config, inbox_retention_seconds=window),
        plane.segments,
        hooks=plane.hooks,
    )


def _new_worlds(plane: Plane, count: int) -> tuple[UniverseId, tuple[WorldId, ...]]:
    """A fresh universe and ``count`` worlds created in it, spread over the drain workers'
    shards (:func:`spread_worlds`)."""
    universe = UniverseId.new()
    worlds = spread_worlds(count, DRAIN_WORKERS)
    for world in worlds:
        plane.create_world(universe, world)
    return universe, worlds


def _roles(size: TortureSize, drain_workers: int) -> list[tuple[str, int]]:
    """The run's processes, as (role, ident), in the order they start."""
    roles = [("writer", i) for i in range(size.writers)]
    roles += [("appender", i) for i in range(size.appenders)]
    roles += [("drainer", i) for i in range(size.drainers)] + [("exporter", 0)]
    roles += [("drainworker", i) for i in range(drain_workers)]
    roles += [("compactor", i) for i in range(size.compactors)]
    return roles


def _check_floors(size: TortureSize, roles: list[tuple[str, int]]) -> None:
    """``Validation`` unless every floor of ``size`` names a figure known during a run."""
    live = {"kills", "server_kills", "monitor_samples", *(f"kills_{role}" for role, _ in roles)}
    live |= {*evidence_figures(Evidence()), *orphan_figures(Evidence(), None, 0.0, 0.0)}
    if unknown := [name for name, _ in size.floors if name not in live]:
        raise Validation("TortureSize.floors", f"{unknown} are not figures known during a run")


def _start(
    fleet: Fleet,
    roles: list[tuple[str, int]],
    plane: Plane,
    universe: UniverseId,
    worlds: tuple[WorldId, ...],
    servers: ServerFaults | None,
) -> tuple[list[str], Monitor]:
    """Start every process and wait until each has (a failure names those that did not),
    then the monitor; a run that cannot begin kills what it started."""
    try:
        for role, ident in roles:
            fleet.start(role, ident)
        failures = fleet.await_started(STARTED_WITHIN_SECONDS)  # the run counts from here
        monitor = Monitor(plane, universe, worlds, tolerate_backend=servers is not None)
        monitor.start()
    except BaseException:
        fleet.kill_all()  # no process outlives a run that could not begin
        raise
    return failures, monitor


@dataclass
class _Running:
    """A run under way: its processes, what kills them and what watches them, and when it
    began (its time, its kills and its floors count from then)."""

    size: TortureSize
    directory: Path
    orphan_grace_seconds: float
    fleet: Fleet
    killer: Killer
    monitor: Monitor
    began: float

    def torture(self, progress: Callable[[str], None]) -> list[str]:
        """Kill (and restart) until the run's length is over and its floors are reached,
        or its cap; then the last kill of every process, the monitor stopped and the
        servers restarted. A failure if the servers could not be killed or restarted."""
        size, fleet, killer = self.size, self.fleet, self.killer
        failures: list[str] = []
        try:
            end, cap = self.began + size.seconds, self.began + max(size.seconds, size.max_seconds)
            next_look = end
            while (now := time.monotonic()) < cap:
                if now >= next_look:
                    if not self.unmet():
                        break
                    next_look = now + FLOOR_LOOK_SECONDS
                time.sleep(max(0.0, min(killer.next_event(), next_look, cap) - now))
                killer.act(time.monotonic())
            progress(
                f"torture: {sum(fleet.kills.values())} process kills, {killer.server_kills} "
                f"server kills in {time.monotonic() - self.began:.0f}s"
            )
        except ServerFaultError as exc:
            failures.append(f"servers: {exc}")
        finally:
            fleet.kill_all()  # the last kill, at whatever moment each process is in
            self.monitor.stop.set()
            self.monitor.join()
            if killer.servers is not None:
                killer.servers.restart()
        return failures

    def unmet(self) -> list[str]:
        """The floors the run has not reached yet (figures it knows while running)."""
        if not self.size.floors:
            return []
        so_far = read_evidence(self.directory)
        grace = self.orphan_grace_seconds
        live = {
            **kill_figures(self.fleet, self.killer),
            **evidence_figures(so_far),
            **orphan_figures(so_far, None, time.monotonic() - self.began, grace),
            "monitor_samples": self.monitor.samples,
        }
        floors = self.size.floors
        counts = [(name, low, live.get(name, 0)) for name, low in floors]  # 0: no kill yet
        return [f"{name} {count} < {low}" for name, low, count in counts if count < low]

    def process_figures(self) -> dict[str, int]:
        """Processes started, killed (by role, and at the end), and kills skipped."""
        return {
            "starts": self.fleet.starts,
            **kill_figures(self.fleet, self.killer),
            "final_kills": self.fleet.final_kills,
            "kills_skipped_starting": self.killer.process_kills_skipped,
        }

    def monitor_figures(self) -> dict[str, int]:
        """What the monitor read while the run went on."""
        return {
            "monitor_samples": self.monitor.samples,
            "monitor_entries_compared": self.monitor.entries_seen,
            "monitor_reads_failed": self.monitor.backend_errors,
        }


def _settle(
    plane: Plane, universe: UniverseId, world: WorldId, servers: ServerFaults | None
) -> list[str]:
    """After the last kill: wait until the store answers again (with server kills) and
    until no commit of a killed process can land."""
    failures = _wait_available(plane, universe, world) if servers is not None else []
    return failures + _await_commits_in_flight(plane.engine)


def _repair(plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...]) -> list[str]:
    """A clean process finishes what the killed left: each world drained and exported; a
    violation for each world where that fails."""
    violations: list[str] = []
    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=25))
    for index, world in enumerate(worlds):
        try:
            while plane.drain_inbox_to_journal(universe, world).count:
                pass
            exporter.export_all(universe, world)
        except PersistError as exc:
            violations.append(f"repair: world {index}: the final drain and export failed: {exc!r}")
    return violations


def _overdue(
    run_seconds: float,
    window: float,
    due: bool,
    tally: InboxTally | None,
    orphan_grace_seconds: float,
    evidence: Evidence,
) -> list[str]:
    """What a run long enough for it must have done and did not: compaction removing items
    and idempotency entries (``due``), an orphan collection pass acknowledged."""
    violations: list[str] = []
    if due and tally is not None and not (tally.items_removed and tally.entries_removed):
        violations.append(
            f"compaction: a {run_seconds:.0f} s run with a {window:g} s window removed "
            f"{tally.items_removed} items and {tally.entries_removed} idempotency entries"
        )
    if orphan_collection_due(run_seconds, orphan_grace_seconds) and not evidence.orphan_passes:
        violations.append(
            f"orphans: a {run_seconds:.0f} s run acknowledged no orphan collection pass"
        )
    return violations


def _wait_available(plane: Plane, universe: UniverseId, world: WorldId) -> list[str]:
    """Wait until the store answers again after the last restart; a violation if it does
    not within :data:`AVAILABLE_WITHIN_SECONDS`."""
    deadline = time.monotonic() + AVAILABLE_WITHIN_SECONDS
    while True:
        try:
            plane.head(universe, world)
            return []
        except Backend as exc:
            if time.monotonic() > deadline:
                return [
                    f"servers: the store did not answer {AVAILABLE_WITHIN_SECONDS} s after the "
                    f"last server restart: {exc!r}"
                ]


@kv.transactional
async def _read_version(tr: kv.Transaction) -> int:
    return await tr.get_read_version()


def _await_commits_in_flight(engine: Engine) -> list[str]:
    """Wait until no commit of a killed process can still land; a violation if the store's
    version does not get there within :data:`AVAILABLE_WITHIN_SECONDS`.

    A process killed right after it sent a commit dies before the answer, and the cluster
    may apply the commit later (FoundationDB: after a recovery of a second, say). The
    checks read the journal and the inbox in separate transactions, so such a commit
    landing between them (a drain: entries and cursor) would look like an item gone from
    both. Its read version is older than the last kill, and FoundationDB's resolvers
    refuse a commit with read conflicts whose read version is more than
    :data:`kv.MAX_TRANSACTION_SECONDS` of versions (its default
    ``MAX_WRITE_TRANSACTION_LIFE_VERSIONS``) behind (``transaction_too_old``): once the
    store's version is that far past the kill, none of those lands. A blind write (no
    read conflict) is never too old; every write of the torture reads with a conflict
    (writers enqueue under their own keys, drains, appends and compaction read what they
    change). An engine whose versions do not keep time commits in the process that asks
    (SQLite; nothing is in flight after a kill)."""
    per_second = engine.versions_per_second
    if per_second is None or not engine.commit_may_be_unknown:
        return []
    window = math.ceil(kv.MAX_TRANSACTION_SECONDS * per_second)
    deadline = time.monotonic() + AVAILABLE_WITHIN_SECONDS
    try:
        settled = drive(_read_version(engine)) + window
        while (now := drive(_read_version(engine))) <= settled:
            if time.monotonic() > deadline:
                return [
                    f"servers: the store's version stood at {now} for "
                    f"{AVAILABLE_WITHIN_SECONDS} s, short of {settled}: commits of killed "
                    "processes may still land"
                ]
            time.sleep(0.1)  # a poll of the store's version, not a guess at how long it takes
    except PersistError as exc:
        return [f"servers: the store's version could not be read after the last kill: {exc!r}"]
    return []


def spread_worlds(count: int, shards: int) -> tuple[WorldId, ...]:
    """``count`` new worlds, at least one in each of the drain workers' ``shards`` (if there
    are as many worlds), so that every drain worker has work."""
    worlds: list[WorldId] = []
    while len(worlds) < count:
        world = WorldId.new()
        missing = [s for s in range(shards) if not any(Shard(s, shards).holds(w) for w in worlds)]
        lands = [s for s in missing if Shard(s, shards).holds(world)]
        if lands or count - len(worlds) > len(missing):
            worlds.append(world)
    return tuple(worlds)


def crash_torture(ctx: Context, servers: ServerFaults | None = None) -> None:
    """Crash 1 (and 2, with ``servers``): SIGKILL torture of writer, appender, drainer,
    drain worker, exporter and compactor (and orphan collector) processes on the shared
    store (and of its server processes), then every invariant against what they
    acknowledged (see the module)."""
    kv_url, objects_url = ctx.store_urls()
    kv_url = kv_url.removeprefix("faults+")  # workers open the plain engine
    check_shared_urls(kv_url, objects_url)
    seed = int.from_bytes(os.urandom(4), "big")
    directory = Path(tempfile.mkdtemp(prefix="aosp-torture-"))
    report = run_torture(
        ctx.plane,
        kv_url,
        objects_url,
        ctx.profile.torture,
        seed=seed,
        directory=directory,
        servers=servers,
        progress=ctx.progress,
        door=ctx.door,
    )
    ctx.notes.update({f"torture_{name}": value for name, value in report.figures.items()})
    if report.violations:
        listed = "\n".join(report.violations[:MAX_LISTED])
        raise ConformanceFailure(
            f"{len(report.violations)} violations (seed {seed}, logs in {directory}):\n{listed}"
        )
    shutil.rmtree(directory, ignore_errors=True)


def server_kills(ctx: Context) -> None:
    """Crash 2: the crash torture while the store's own server processes (FoundationDB's
    ``fdbserver``) are SIGKILLed and restarted too, so calls meet real recoveries; needs
    ``Context.servers`` (``aosp conformance --fdb-local DIR`` or the kill and restart
    commands)."""
    if ctx.servers is None:
        raise CaseSkipped(
            "server kills need a way to kill the store's server processes: "
            "--fdb-local DIR, or --server-kill-command and --server-restart-command"
        )
    crash_torture(ctx, servers=ctx.servers)
