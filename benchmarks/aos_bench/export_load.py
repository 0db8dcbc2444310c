"""Foreground appends while an exporter runs (issue #16): what segment export costs the writers.

One store on the embedded default (SQLite, ``synchronous="FULL"``, and a local object
directory, in a temporary directory) holds one *foreground* world and ``ROUNDS`` *export*
worlds of ``count`` 1 KiB entries each (``25,000 x seconds``: 50,000 at the default 2 s,
built with ``synchronous="OFF"``, each with a baseline promoted at its head, so all but the
last entries are exportable). An exporter process -- spawned, as an operator's ``aosp
segments export`` is its own process -- opens the store and waits.

The benchmark's process appends single entries to the foreground world in a loop, timing each
``append_batch`` call. A *with* window starts when the exporter reports it has begun
:meth:`Exporter.export_all` of the next export world (an event, not a sleep) and ends when it
reports the export done; a *without* window, the exporter idle, lasts as long as the *with*
window before it (or ``count / 100,000`` s for the first). A window makes at least
``min_appends`` appends (100: enough for a p99) whatever its end says; a *with* window that
had to outlast its export to get them is counted and named in the figures (raise
``--seconds``), never an error, so a busy machine gets figures that say so. Rounds are
pairs of windows in ABBA order (without, with; with, without; ...), after an untimed
warm-up pair. Per round: the p99 append latency with / without and the appends per second
with / without.

Figures (median of the per-round ratios, with the lowest and highest): p99 latency with an
exporter running against without (target <= 1.5x), and throughput (target >= 0.85x). Both
are checked first: every export moved exactly its world's exportable heights, and the
foreground journal holds exactly the appended entries, in order.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, Final

from aos_bench import Figure
from aos_bench.segments import EXPORT_CONFIG, promote_at
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from persistence.sizes import MiB
from segments import open_plane
from segments.export import Exporter

ENTRY_SIZE: Final = 1024
ROUNDS: Final = 5
ENTRIES_PER_SECOND_OF_BUDGET: Final = 25_000
MIN_ENTRIES: Final = 10_000
BUILD_BATCH: Final = 2_000
FIRST_WINDOW_ENTRIES_PER_SECOND: Final = 100_000
EXPORTER_TIMEOUT: Final = 600.0
MIN_WINDOW_APPENDS: Final = 100
"""Appends a window makes at least: enough for a p99."""


def _entry(height: int) -> bytes:
    """A distinct, checkable 1 KiB opaque entry (``0xff``, filler, 8-byte height)."""
    return b"\xff" + bytes(ENTRY_SIZE - 9) + height.to_bytes(8, "big")


def _open(root: Path, synchronous: str) -> Plane:
    return open_plane(
        SqliteEngine(root / "aos.db", synchronous=synchronous), LocalObjectStore(root / "objects")
    )


def _build(root: Path, worlds: int, count: int) -> list[tuple[UniverseId, WorldId]]:
    """The foreground world (first) and ``worlds`` export worlds of ``count`` entries, each
    with a baseline at its head; the WAL checkpointed and truncated afterwards."""
    plane = _open(root, "OFF")
    universe = UniverseId.new()
    made: list[tuple[UniverseId, WorldId]] = []
    try:
        for index in range(worlds + 1):
            world = WorldId.new()
            plane.create_world(universe, world)
            made.append((universe, world))
            if index == 0:
                continue
            head = plane.head(universe, world)
            while head < count:
                size = min(BUILD_BATCH, count - head)
                rows = [_entry(h) for h in range(head + 1, head + 1 + size)]
                head = plane.append_batch(universe, world, head, rows) + size - 1
            promote_at(plane, universe, world, head)
    finally:
        plane.engine.close()
    conn = sqlite3.connect(root / "aos.db")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return made


def _exporter(
    root: Path,
    worlds: list[tuple[UniverseId, WorldId]],
    commands: multiprocessing.SimpleQueue[int | None],
    replies: multiprocessing.SimpleQueue[tuple[str, Any]],
    started: Event,
    done: Event,
) -> None:
    """Exporter process: for each index received, export that world, between ``started``
    and ``done``; reply with the entries moved and the seconds taken (or the error)."""
    try:
        plane = _open(root, "FULL")
        exporter = Exporter(plane, EXPORT_CONFIG)
        replies.put(("ready", None))
        while (index := commands.get()) is not None:
            universe, world = worlds[index]
            started.set()
            start = time.perf_counter()
            exported = exporter.export_all(universe, world)
            seconds = time.perf_counter() - start
            done.set()
            replies.put(("exported", (sum(s.entry_count for s in exported), seconds)))
        plane.engine.close()
    except BaseException as exc:  # reported to the parent, which raises it
        done.set()
        replies.put(("error", repr(exc)))


@dataclass(slots=True)
class _Foreground:
    """The foreground world and its appender: each call's latency, by window."""

    plane: Plane
    universe: UniverseId
    world: WorldId
    head: int

    def window(self, until: Callable[[], bool], at_least: int) -> tuple[list[float], float, bool]:
        """Append single entries until ``until()``, and at least ``at_least`` of them; return
        the latencies, the seconds and whether ``until()`` held before the last ``at_least``."""
        latencies: list[float] = []
        overran = False
        begin = time.perf_counter()
        while True:
            if until():
                if len(latencies) >= at_least:
                    break
                overran = True
            entry = _entry(self.head + 1)
            start = time.perf_counter()
            self.plane.append_batch(self.universe, self.world, self.head, [entry])
            latencies.append(time.perf_counter() - start)
            self.head += 1
        return latencies, time.perf_counter() - begin, overran

    def check(self, first: int) -> None:
        """The journal holds exactly the entries appended since height ``first``, in order."""
        head = self.plane.head(self.universe, self.world)
        if head != self.head:
            raise AssertionError(f"foreground head {head}, expected {self.head}")
        height = first + 1
        while height <= head:
            rows = self.plane.read_range(self.universe, self.world, height, 10_000)
            if not rows or any(e != _entry(h) for h, e in rows) or rows[0][0] != height:
                raise AssertionError(f"the foreground journal from {height} is not as appended")
            height += len(rows)


def _p99(latencies: list[float]) -> float:
    if len(latencies) < 2:  # a test's smallest windows
        return max(latencies)
    return statistics.quantiles(latencies, n=100, method="inclusive")[98]


@dataclass(frozen=True, slots=True)
class _Pair:
    p99_with: float
    p99_without: float
    rate_with: float
    rate_without: float
    export_seconds: float

    def line(self, index: int, exportable: int) -> str:
        """The progress line of round ``index`` (0: the warm-up)."""
        return (
            f"export-load: round {index}{' (warm-up)' if index == 0 else ''}: "
            f"p99 {self.p99_with * 1e3:.2f} vs {self.p99_without * 1e3:.2f} ms, "
            f"{self.rate_with:,.0f} vs {self.rate_without:,.0f} appends/s, export "
            f"{exportable * ENTRY_SIZE / MiB / self.export_seconds:.0f} MiB/s"
        )


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    *,
    min_appends: int = MIN_WINDOW_APPENDS,
) -> list[Figure]:
    """Measure and return the export-under-appends figures; every window makes at least
    ``min_appends`` appends (see the module)."""
    count = max(MIN_ENTRIES, round(ENTRIES_PER_SECOND_OF_BUDGET * seconds / 1000) * 1000)
    exportable = count - 1  # the baseline's height stays hot
    context = multiprocessing.get_context("spawn")
    pairs: list[_Pair] = []
    outlasted = 0
    with tempfile.TemporaryDirectory(prefix="aosp-bench-export-load-") as tmp:
        root = Path(tmp)
        progress(f"export-load: building {ROUNDS + 1} export worlds of {count:,} entries")
        worlds = _build(root, ROUNDS + 1, count)
        commands: multiprocessing.SimpleQueue[int | None] = context.SimpleQueue()
        replies: multiprocessing.SimpleQueue[tuple[str, Any]] = context.SimpleQueue()
        started, done = context.Event(), context.Event()
        proc = context.Process(
            target=_exporter,
            args=(root, worlds[1:], commands, replies, started, done),
            daemon=True,
        )
        proc.start()
        plane = _open(root, "FULL")
        try:
            kind, payload = replies.get()
            if kind != "ready":
                raise RuntimeError(f"the exporter process failed: {payload}")
            universe, world = worlds[0]
            fg = _Foreground(plane, universe, world, plane.head(universe, world))
            created = fg.head

            def with_window(index: int) -> tuple[list[float], float, float, bool]:
                started.clear()
                done.clear()
                commands.put(index)
                if not started.wait(EXPORTER_TIMEOUT):
                    raise RuntimeError("the exporter process did not start its export")
                latencies, elapsed, overran = fg.window(done.is_set, min_appends)
                kind, payload = replies.get()
                if kind != "exported":
                    raise RuntimeError(f"the exporter process failed: {payload}")
                moved, export_seconds = payload
                if moved != exportable:
                    raise AssertionError(f"export moved {moved} entries, not {exportable}")
                return latencies, elapsed, export_seconds, overran

            def without_window(length: float) -> tuple[list[float], float]:
                deadline = time.perf_counter() + length
                latencies, elapsed, _ = fg.window(
                    lambda: time.perf_counter() >= deadline, min_appends
                )
                return latencies, elapsed

            length = count / FIRST_WINDOW_ENTRIES_PER_SECOND
            for index in range(ROUNDS + 1):  # round 0 is the warm-up
                if index % 2 == 0:
                    off, off_s = without_window(length)
                    on, on_s, export_s, overran = with_window(index)
                else:
                    on, on_s, export_s, overran = with_window(index)
                    off, off_s = without_window(on_s)
                length = on_s
                outlasted += bool(index and overran)
                pair = _Pair(_p99(on), _p99(off), len(on) / on_s, len(off) / off_s, export_s)
                progress(pair.line(index, exportable))
                if index:
                    pairs.append(pair)
            commands.put(None)
            fg.check(created)
        finally:
            plane.engine.close()
            proc.join(timeout=60)
            if proc.is_alive():
                proc.terminate()
                proc.join()

    return _figures(pairs, exportable, outlasted, min_appends)


def _figures(pairs: list[_Pair], exportable: int, outlasted: int, min_appends: int) -> list[Figure]:
    """The two figures of the measured rounds: the appends' p99 and their rate, each with
    the exporter running against alternate windows with it idle."""
    mib_s = statistics.median(exportable * ENTRY_SIZE / MiB / p.export_seconds for p in pairs)
    setup = f"sqlite FULL + local directory; exporting {exportable:,} x 1 KiB entries"
    if outlasted:
        setup += (
            f"; {outlasted} of {ROUNDS} with-windows outlasted their export to make "
            f"{min_appends} appends: raise --seconds"
        )
    return [
        Figure(
            name=(
                f"export under load: p99 of single-entry appends while an exporter process "
                f"runs ({setup} at {mib_s:.0f} MiB/s)"
            ),
            value=round(statistics.median(p.p99_with for p in pairs) * 1e3, 3),
            unit="ms",
            baseline="p99 of the same appends with the exporter idle, alternate windows",
            baseline_value=round(statistics.median(p.p99_without for p in pairs) * 1e3, 3),
            target=1.5,
            better="lower",
            round_ratios=tuple(p.p99_with / p.p99_without for p in pairs),
        ),
        Figure(
            name=f"export under load: single-entry appends/s while an exporter runs ({setup})",
            value=round(statistics.median(p.rate_with for p in pairs), 1),
            unit="appends/s",
            baseline="appends/s with the exporter idle, alternate windows",
            baseline_value=round(statistics.median(p.rate_without for p in pairs), 1),
            target=0.85,
            better="higher",
            round_ratios=tuple(p.rate_with / p.rate_without for p in pairs),
        ),
    ]
