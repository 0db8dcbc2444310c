"""One torture run, its report, and the conformance case."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from conformance.cases import ConformanceFailure, Context, TortureSize
from conformance.torture.checks import check_pending, check_store
from conformance.torture.evidence import read_evidence
from conformance.torture.fleet import Fleet
from conformance.torture.monitor import Monitor
from conformance.torture.workload import TortureConfig, check_shared_urls
from persistence.errors import PersistError
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from persistence.records import (
    IngressJournalRecord,
    decode_journal_record,
)
from segments.export import ExportConfig, Exporter

MAX_LISTED: Final = 25
"""Violations listed in a failure message (all are in the report's ``violations``)."""

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
    progress: Callable[[str], None] = lambda _: None,
) -> TortureReport:
    """Run the torture on the store ``plane`` works on (which ``kv_url``/``objects_url``
    open in other processes), in fresh worlds of a fresh universe; logs go to
    ``directory``. Raises ``CaseSkipped`` if the URLs cannot be shared between processes.
    A ``faults+`` engine URL is opened plain in the workers: their faults are real kills."""
    kv_url = kv_url.removeprefix("faults+")
    check_shared_urls(kv_url, objects_url)
    rng = random.Random(seed)
    universe = UniverseId.new()
    worlds = tuple(WorldId.new() for _ in range(size.worlds))
    for world in worlds:
        plane.create_world(universe, world)
    config = TortureConfig(kv_url, objects_url, universe, worlds, directory, seed)
    fleet = Fleet(config.save(), directory)
    roles = [("writer", i) for i in range(size.writers)]
    roles += [("drainer", i) for i in range(size.drainers)] + [("exporter", 0)]
    for role, ident in roles:
        fleet.start(role, ident)
    monitor = Monitor(plane, universe, worlds)
    monitor.start()
    began = time.monotonic()
    deadline = began + size.seconds
    try:
        while (now := time.monotonic()) < deadline:
            time.sleep(min(rng.expovariate(1 / size.mean_kill_interval), deadline - now))
            fleet.reap()
            fleet.kill(rng.choice(fleet.processes))
        progress(f"torture: {sum(fleet.kills.values())} kills in {size.seconds:.0f}s")
    finally:
        fleet.kill_all()  # the last kill, at whatever moment each process is in
        monitor.stop.set()
        monitor.join()
    run_seconds = time.monotonic() - began
    evidence = read_evidence(directory)
    violations = fleet.failures + monitor.violations + evidence.errors
    violations += check_pending(plane, universe, worlds, evidence)
    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=25))
    for index, world in enumerate(worlds):  # a clean process finishes what the killed left
        try:
            while plane.drain_inbox_to_journal(universe, world).count:
                pass
            exporter.export_all(universe, world)
        except PersistError as exc:
            violations.append(f"repair: world {index}: the final drain and export failed: {exc!r}")
    progress("torture: checking the store")
    violations += check_store(plane, universe, worlds, evidence)
    violations = list(dict.fromkeys(violations))  # a finding before and after the repair: once
    figures: dict[str, Any] = {
        "seed": seed,
        "seconds": round(run_seconds, 1),
        "processes": len(roles),
        "starts": fleet.starts,
        "kills": sum(fleet.kills.values()),
        **{f"kills_{role}": count for role, count in sorted(fleet.kills.items())},
        "final_kills": fleet.final_kills,
        "items_sent": len(evidence.intents),
        "items_acknowledged": len(evidence.acked),
        "writer_calls_interrupted": evidence.interrupted_calls,
        "items_journaled": _items_journaled(plane, universe, worlds),
        "drains_acknowledged": len(evidence.drains),
        "snapshots_acknowledged": len(evidence.snapshots),
        "promotions_acknowledged": sum(s.promoted for s in evidence.snapshots),
        "segments": sum(len(plane.list_segments(universe, w)) for w in worlds),
        "torn_log_lines": evidence.torn_lines,
        "journal_heights": sum(plane.head(universe, w) for w in worlds),
        "monitor_samples": monitor.samples,
        "monitor_entries_compared": monitor.entries_seen,
    }
    return TortureReport(violations, figures, directory)


def _items_journaled(plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...]) -> int | None:
    """How many items the journals hold (``None`` if one cannot be read)."""
    count = 0
    try:
        for world in worlds:
            for _, entry in plane.read_range(universe, world, 1, plane.head(universe, world)):
                count += isinstance(decode_journal_record(entry), IngressJournalRecord)
    except PersistError:
        return None
    return count


def crash_torture(ctx: Context) -> None:
    """Crash 1: SIGKILL torture of writer, drainer and exporter processes on the shared
    store, then every invariant against what they acknowledged (see the module)."""
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
        progress=ctx.progress,
    )
    ctx.notes.update({f"torture_{name}": value for name, value in report.figures.items()})
    if report.violations:
        listed = "\n".join(report.violations[:MAX_LISTED])
        raise ConformanceFailure(
            f"{len(report.violations)} violations (seed {seed}, logs in {directory}):\n{listed}"
        )
    shutil.rmtree(directory, ignore_errors=True)
