"""Segment export, stitched reads and restore on the embedded default (SQLite + local directory).

Every store here is a :class:`~backends.kv.sqlite.SqliteEngine` with ``synchronous="FULL"``
(WAL, every commit fsyncs) and a :class:`~backends.objects.local.LocalObjectStore` (create-only
files, fsynced with their directory), both in one temporary directory. Entries are 1 KiB
(1,024 bytes), opaque to the plane: each starts with ``0xff`` (not CBOR, so the reference kernel
counts it as ``opaque``) and ends with its height, so every entry is distinct and checkable.
Export uses ``ExportConfig(enabled=True, target_entries=10_000, target_bytes=64 MiB)``.

Figures:

1. **Export throughput**: MiB/s of entry bytes moved from hot keys into segments by
   :meth:`Exporter.export_all` -- read, segment write, upload, index, and deletion of the hot
   keys, all included -- for a history of ``100,000 x seconds`` entries (200,000 at the
   default 2 s) appended in batches of 1,000, with a baseline promoted one height above the
   last entry to export (snapshot bytes: a small constant CBOR value; restore is not part of
   this figure). Baseline, measured in the same run on the same disk: the raw limit, a
   sequential write of the same number of bytes (1 MiB buffers of entry bytes) to a new file
   with one ``fsync`` at the end. Each of ``ROUNDS`` rounds builds a fresh store, then times
   the raw write and the export; the median of each is kept. Target ratio 0.5. The same
   export against its *fair floor* (one raw ``SELECT`` of the same rows, written to one new
   file, fsynced with its directory), per round; and, of a second world of the same store,
   the export *unthrottled* (:data:`UNTHROTTLED`: hot-key clears of ``delete_chunk_entries``,
   no pauses between them -- what an operator gets with ``pause_ratio=0`` in a quiet
   period) against the same floor. The defaults bound what export costs foreground writers
   (:mod:`aos_bench.export_load`); the unthrottled figure is export's own speed.
2. **Peak RSS growth during export of a 1 GiB history** (1,048,576 entries of 1 KiB), in
   processes started with the ``spawn`` method, so the parent's memory never counts. One
   process builds the history in batches of 2,000 entries with ``synchronous="OFF"`` (the
   build phase only, to keep it fast; it is not measured) and exits; a fresh one opens the
   store with ``synchronous="FULL"`` and exports it, so memory the build left behind neither
   inflates the starting point nor hides the export's own growth. Right before the export
   that process resets its peak-RSS counter (``5`` written to ``/proc/self/clear_refs``) and
   reads ``VmRSS`` from ``/proc/self/status``; after it, ``VmHWM``. The figure is
   ``VmHWM - VmRSS`` in MiB against the 128 MiB limit (lower is better, ratio <= 1).
   ``ru_maxrss`` is not used: it survives ``exec`` and would report the parent's size. Where
   the counter cannot be reset the figure is an upper bound (the peak then includes the
   process's start-up). Optional: pass ``include_1gib=False`` or set :data:`INCLUDE_1GIB` to
   skip it (figure 4 then uses a 1,048,576-entry history of 64-byte entries).
3. **Stitched read_range throughput**: entries/s of :meth:`Plane.read_range` reading the whole
   exported history of figure 1 (segments, then the hot tail) in pages of 10,000 entries,
   every entry checked (checks are not timed); median over the rounds. Requirement:
   >= 100,000 entries/s (figure: value / required rate, target 1.0).
4. **Restore time flat in history length**: :func:`segments.restore.restore` with the
   :class:`~persistence.kernel.ReferenceKernel` of a world whose history of 1,048,576 entries
   (figure 2's, when it runs) is exported to segments, with the active baseline 100 entries
   below the head (the promoted snapshot bytes are the kernel's state at that height, computed
   incrementally while appending), against the same for a 10,000-entry history in the same
   store. Both restores are checked to return the kernel's state at the head; they alternate
   over ``RESTORE_ROUNDS`` rounds and the medians are compared. Target ratio <= 1.2.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue as queue_module
import sqlite3
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any, Final

from aos_bench import Figure
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore, fsync_dir
from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.sizes import MiB
from segments import open_plane
from segments.export import ExportConfig, Exporter
from segments.restore import restore

ENTRY_SIZE: Final = 1024
ROUNDS: Final = 3
ENTRIES_PER_SECOND_OF_BUDGET: Final = 100_000
MIN_ENTRIES: Final = 10_000
APPEND_BATCH: Final = 1_000
READ_PAGE: Final = 10_000
REQUIRED_READ_RATE: Final = 100_000.0
GIB_ENTRIES: Final = 1 << 20
GIB_APPEND_BATCH: Final = 2_000
SMALL_ENTRY_SIZE: Final = 64
RSS_LIMIT_MIB: Final = 128.0
SMALL_HISTORY: Final = 10_000
RESTORE_TAIL: Final = 100
RESTORE_ROUNDS: Final = 9
WORKER_TIMEOUT: Final = 1800.0
EXPORT_CONFIG: Final = ExportConfig(enabled=True, target_entries=10_000, target_bytes=64 * MiB)
UNTHROTTLED: Final = replace(EXPORT_CONFIG, delete_chunk_bytes=2**62, pause_ratio=0.0)
"""Export with hot-key clears of ``delete_chunk_entries`` and no pauses between them."""
MARKER_STATE: Final = cbor.encode({"bench": "segments"})
"""Snapshot bytes promoted for figure 1 (its baseline only gates export)."""

INCLUDE_1GIB: bool = True
"""Default of ``run(include_1gib=...)``: whether to run the 1 GiB peak-RSS figure."""


class _Entries:
    """Deterministic distinct entries of ``size`` bytes: ``0xff``, filler, 8-byte height."""

    def __init__(self, size: int) -> None:
        if size < 9:
            raise ValueError("entries need at least 9 bytes")
        self.size = size
        filler = size - 9
        self._pool = [b"\xff" + os.urandom(filler) for _ in range(251)]

    def batch(self, first: int, count: int) -> list[bytes]:
        """The entries at heights ``first .. first + count - 1``."""
        pool = self._pool
        return [pool[h % 251] + h.to_bytes(8, "big") for h in range(first, first + count)]


def promote_at(
    plane: Plane, universe: UniverseId, world: WorldId, height: int, state: bytes = MARKER_STATE
) -> None:
    """Promote ``state`` as the world's baseline at ``height``: the heights below it become
    exportable."""
    plane.snapshot_commit(
        universe,
        world,
        state,
        height=height,
        logical_time_ns=height,
        receipt_horizon_height=height,
        promote_baseline=True,
    )


def _world(plane: Plane) -> tuple[UniverseId, WorldId]:
    universe, world = UniverseId.new(), WorldId.new()
    plane.create_world(universe, world)
    return universe, world


def _append(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    entries: _Entries,
    count: int,
    batch: int,
    kernel: ReferenceKernel | None = None,
) -> int:
    """Append ``count`` entries after the head in batches of ``batch`` (applying each to
    ``kernel`` if given); return the new head."""
    head = plane.head(universe, world)
    end = head + count
    while head < end:
        rows = entries.batch(head + 1, min(batch, end - head))
        first = plane.append_batch(universe, world, head, rows)
        if kernel is not None:
            for offset, entry in enumerate(rows):
                kernel.apply(first + offset, entry)
        head = first + len(rows) - 1
    return head


# --------------------------------------------------------------------------- figures 1 and 3


def _raw_write(path: Path, total: int, chunk: bytes) -> float:
    """Seconds to write ``total`` bytes sequentially to a new file, then fsync it once."""
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        written = 0
        view = memoryview(chunk)
        while written < total:
            written += os.write(fd, view[: min(len(view), total - written)])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def _read_all(
    plane: Plane, universe: UniverseId, world: WorldId, entries: _Entries, synthetic: int
) -> float:
    """Entries/s of reading the whole journal with ``read_range`` in pages of ``READ_PAGE``;
    every page is checked (heights contiguous, synthetic entries byte for byte), untimed."""
    head = plane.head(universe, world)
    elapsed = 0.0
    height = 1
    while height <= head:
        start = time.perf_counter()
        rows = plane.read_range(universe, world, height, READ_PAGE)
        elapsed += time.perf_counter() - start
        if not rows or [h for h, _ in rows] != list(range(height, height + len(rows))):
            raise AssertionError(f"read_range from {height} returned the wrong heights")
        mine = min(len(rows), max(0, synthetic - height + 1))
        if [e for _, e in rows[:mine]] != entries.batch(height, mine):
            raise AssertionError(f"read_range from {height} returned the wrong entries")
        height += len(rows)
    return head / elapsed


def _fair_floor(db: Path, keys: WorldKeys, count: int, path: Path) -> float:
    """Seconds of export's fair floor: read the same rows (heights ``1..count``) with one
    raw ``SELECT`` on the store's own table, write their values to a new file in 1 MiB
    writes, fsync the file and its directory -- what an export cannot do without."""
    begin, end = keys.entries_between(1, count)
    conn = sqlite3.connect(db)
    try:
        conn.execute("SELECT count(*) FROM kv WHERE key >= ? AND key < ?", (begin, end))
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            pending: list[bytes] = []
            size = 0
            rows = conn.execute(
                "SELECT value FROM kv WHERE key >= ? AND key < ? ORDER BY key", (begin, end)
            )
            for (value,) in rows:
                pending.append(value)
                size += len(value)
                if size >= MiB:
                    os.write(fd, b"".join(pending))
                    pending, size = [], 0
            os.write(fd, b"".join(pending))
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(path.parent)
        return time.perf_counter() - start
    finally:
        conn.close()


@dataclass(frozen=True, slots=True)
class _Round:
    export_seconds: float
    unthrottled_seconds: float
    raw_seconds: float
    floor_seconds: float
    read_rate: float


def _timed_export(
    plane: Plane, universe: UniverseId, world: WorldId, config: ExportConfig, count: int
) -> float:
    """Seconds to export heights 1..``count`` of the world (checked)."""
    start = time.perf_counter()
    exported = Exporter(plane, config).export_all(universe, world)
    seconds = time.perf_counter() - start
    if (
        sum(s.entry_count for s in exported) != count
        or exported[0].start != 1
        or exported[-1].end != count
        or plane.read_hot(universe, world, 1, 1)
    ):
        raise AssertionError("export did not move exactly heights 1..count into segments")
    return seconds


def _export_round(root: Path, count: int, entries: _Entries) -> _Round:
    """Build a fresh store with two worlds of ``count + 1`` entries and a baseline at
    ``count + 1``; time the raw write of ``count`` entries' bytes, the fair floor, then the
    export of heights 1..count of one world with the default config and of the other
    unthrottled, then the stitched read of the first world's journal."""
    root.mkdir()
    plane = open_plane(
        SqliteEngine(root / "aos.db", synchronous="FULL"), LocalObjectStore(root / "objects")
    )
    try:
        worlds = [_world(plane), _world(plane)]
        for universe, world in worlds:
            promote_at(
                plane,
                universe,
                world,
                _append(plane, universe, world, entries, count + 1, APPEND_BATCH),
            )
        chunk = b"".join(entries.batch(1, MiB // entries.size))
        raw_seconds = _raw_write(root / "raw.bin", count * entries.size, chunk)
        (root / "raw.bin").unlink()
        keys = WorldKeys(*worlds[0])
        _fair_floor(root / "aos.db", keys, count, root / "warm.bin")  # warms the page cache
        (root / "warm.bin").unlink()
        floor_seconds = _fair_floor(root / "aos.db", keys, count, root / "floor.bin")
        (root / "floor.bin").unlink()
        export_seconds = _timed_export(plane, *worlds[0], EXPORT_CONFIG, count)
        unthrottled_seconds = _timed_export(plane, *worlds[1], UNTHROTTLED, count)
        read_rate = _read_all(plane, *worlds[0], entries, count + 1)
    finally:
        plane.engine.close()
    return _Round(export_seconds, unthrottled_seconds, raw_seconds, floor_seconds, read_rate)


# --------------------------------------------------------------------------- figures 2 and 4


def _status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0); ``False`` if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _World:
    """A built world: ids, its reference kernel (following the head) and baseline height."""

    universe: UniverseId
    world: WorldId
    kernel: ReferenceKernel
    baseline: int


def _build_world(
    plane: Plane, entries: _Entries, count: int, progress: Callable[[str], None]
) -> _World:
    """A world of ``count`` entries (batches of ``GIB_APPEND_BATCH``) with the reference
    kernel's state promoted as the baseline at ``count``; the kernel follows the head."""
    universe, world = _world(plane)
    kernel = ReferenceKernel()
    done = 0
    step = max(count // 8, 1)
    while done < count:
        part = min(step, count - done)
        done = _append(plane, universe, world, entries, part, GIB_APPEND_BATCH, kernel)
        progress(f"segments: built {done:,}/{count:,} entries of {entries.size} bytes")
    promote_at(plane, universe, world, count, kernel.snapshot())
    head = plane.head(universe, world)
    for height, entry in plane.read_range(universe, world, count + 1, head - count):
        kernel.apply(height, entry)  # the snapshot and baseline_snapshot records
    return _World(universe, world, kernel, count)


def _build_histories(
    progress: Callable[[str], None], root: Path, count: int, entry_size: int
) -> list[_World]:
    """Worker phase 1: the 10,000-entry and the ``count``-entry world, built with
    ``synchronous="OFF"`` (not measured)."""
    entries = _Entries(entry_size)
    plane = open_plane(
        SqliteEngine(root / "aos.db", synchronous="OFF"), LocalObjectStore(root / "objects")
    )
    try:
        small = _build_world(plane, entries, SMALL_HISTORY, lambda _: None)
        big = _build_world(plane, entries, count, progress)
    finally:
        plane.engine.close()
    return [small, big]


def _measure_histories(
    progress: Callable[[str], None],
    root: Path,
    worlds: list[_World],
    entry_size: int,
    measure_rss: bool,
) -> dict[str, Any]:
    """Worker phase 2, in a fresh process: export both worlds with ``synchronous="FULL"``
    (the big one first, its peak RSS growth measured before anything else warmed the
    allocator), add the tails, time the restores."""
    small, big = worlds
    entries = _Entries(entry_size)
    plane = open_plane(
        SqliteEngine(root / "aos.db", synchronous="FULL"), LocalObjectStore(root / "objects")
    )
    try:
        exporter = Exporter(plane, EXPORT_CONFIG)
        count = big.baseline
        progress(f"segments: exporting {count:,} entries of {entry_size} bytes")
        gc.collect()
        reset = _reset_peak_rss() if measure_rss else False
        rss_before = _status_kib("VmRSS")
        start = time.perf_counter()
        exported = exporter.export_all(big.universe, big.world)
        export_seconds = time.perf_counter() - start
        peak = _status_kib("VmHWM")
        if sum(s.entry_count for s in exported) != count - 1:
            raise AssertionError(f"exported {sum(s.entry_count for s in exported)} entries")
        progress(
            f"segments: exported {count - 1:,} entries in {export_seconds:.1f} s "
            f"({(count - 1) * entry_size / MiB / export_seconds:.1f} MiB/s); "
            f"RSS {rss_before / 1024:.1f} MiB before, peak {peak / 1024:.1f} MiB"
        )
        exporter.export_all(small.universe, small.world)  # after: no warm-up before the peak

        for w in worlds:
            _append(plane, w.universe, w.world, entries, RESTORE_TAIL, RESTORE_TAIL, w.kernel)
        progress(f"segments: restore, {SMALL_HISTORY:,} vs {count:,}-entry history")
        times: dict[int, list[float]] = {small.baseline: [], big.baseline: []}
        for _ in range(RESTORE_ROUNDS):
            for w in worlds:
                start = time.perf_counter()
                result = restore(plane, w.universe, w.world, ReferenceKernel())
                times[w.baseline].append(time.perf_counter() - start)
                if result.state != w.kernel.snapshot() or result.from_height != w.baseline:
                    raise AssertionError(f"restore of the {w.baseline}-entry history is wrong")
    finally:
        plane.engine.close()
    return {
        "rss_before_mib": rss_before / 1024,
        "rss_growth_mib": (peak - rss_before) / 1024,
        "peak_reset": reset,
        "export_mib_s": (count - 1) * entry_size / MiB / export_seconds,
        "restore_small_s": statistics.median(times[small.baseline]),
        "restore_big_s": statistics.median(times[big.baseline]),
    }


def _worker(messages: Queue[tuple[str, Any]], phase: str, args: tuple[Any, ...]) -> None:
    """Entry point of a spawned process: run ``phase`` (``"build"`` or ``"measure"``) with
    ``args``, reporting progress, then the result or the error."""

    def progress(message: str) -> None:
        messages.put(("progress", message))

    try:
        if phase == "build":
            result: Any = _build_histories(progress, *args)
        else:
            result = _measure_histories(progress, *args)
        messages.put(("result", result))
    except BaseException:
        messages.put(("error", traceback.format_exc()))


def _in_worker(phase: str, args: tuple[Any, ...], progress: Callable[[str], None]) -> Any:
    """Run worker ``phase`` in a spawned process, relaying its progress; return its result."""
    ctx = multiprocessing.get_context("spawn")
    messages: Queue[tuple[str, Any]] = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(messages, phase, args), daemon=True)
    proc.start()
    deadline = time.monotonic() + WORKER_TIMEOUT
    try:
        while True:
            try:
                kind, payload = messages.get(timeout=1.0)
            except queue_module.Empty:
                if proc.is_alive() and time.monotonic() < deadline:
                    continue
                try:  # the last message may still be in the pipe
                    kind, payload = messages.get(timeout=5.0)
                except queue_module.Empty:
                    raise RuntimeError(
                        f"segments benchmark worker gave no result (exit code {proc.exitcode})"
                    ) from None
            if kind == "progress":
                progress(payload)
            elif kind == "result":
                return payload
            else:
                raise RuntimeError(f"segments benchmark worker failed:\n{payload}")
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
            proc.join()


# --------------------------------------------------------------------------- run


def run(
    seconds: float = 2.0,
    progress: Callable[[str], None] = lambda _: None,
    include_1gib: bool | None = None,
) -> list[Figure]:
    """Measure and return the segment figures (``include_1gib`` defaults to
    :data:`INCLUDE_1GIB`)."""
    with_gib = INCLUDE_1GIB if include_1gib is None else include_1gib
    count = max(MIN_ENTRIES, round(ENTRIES_PER_SECOND_OF_BUDGET * seconds / 1000) * 1000)
    entries = _Entries(ENTRY_SIZE)
    rounds: list[_Round] = []
    with tempfile.TemporaryDirectory(prefix="aosp-bench-segments-") as tmp:
        for index in range(ROUNDS):
            progress(f"segments: export of {count:,} entries, round {index + 1}/{ROUNDS}")
            rounds.append(_export_round(Path(tmp) / f"round{index}", count, entries))
        big_size = ENTRY_SIZE if with_gib else SMALL_ENTRY_SIZE
        worker_root = Path(tmp) / "history"
        worker_root.mkdir()
        worlds = _in_worker("build", (worker_root, GIB_ENTRIES, big_size), progress)
        history = _in_worker("measure", (worker_root, worlds, big_size, with_gib), progress)

    return [
        *_export_figures(count, rounds),
        *_history_figures(count, rounds, history, big_size, with_gib),
    ]


def _export_figures(count: int, rounds: list[_Round]) -> list[Figure]:
    """An export's throughput against the raw write limit and against its fair floor,
    throttled and not."""
    mib = count * ENTRY_SIZE / MiB
    floor = [r.floor_seconds for r in rounds]

    def against_floor(what: str, seconds: list[float], baseline: str) -> Figure:
        """An export's throughput against the fair floor, with each round's ratio."""
        return Figure(
            name=(
                f"segment export: {count:,} x 1 KiB entries, {what} (sqlite FULL + local directory)"
            ),
            value=round(mib / statistics.median(seconds), 1),
            unit="MiB/s",
            baseline=baseline,
            baseline_value=round(mib / statistics.median(floor), 1),
            target=0.5,
            better="higher",
            round_ratios=tuple(f / s for f, s in zip(floor, seconds, strict=True)),
        )

    return [
        Figure(
            name=(
                f"segment export: {count:,} x 1 KiB entries into 10,000-entry segments, "
                "hot-key deletion included (sqlite FULL + local directory)"
            ),
            value=round(mib / statistics.median(r.export_seconds for r in rounds), 1),
            unit="MiB/s",
            baseline="raw limit: sequential write of the same bytes + one fsync, same disk",
            baseline_value=round(mib / statistics.median(r.raw_seconds for r in rounds), 1),
            target=0.5,
            better="higher",
        ),
        against_floor(
            "against its fair floor",
            [r.export_seconds for r in rounds],
            "fair floor: one raw SELECT of the same rows from the store's table (page cache "
            "warm), written to one new file in 1 MiB writes, fsync file and directory",
        ),
        against_floor(
            f"unthrottled (clears of {EXPORT_CONFIG.delete_chunk_entries:,} entries, no "
            "pauses), against its fair floor",
            [r.unthrottled_seconds for r in rounds],
            "the same fair floor",
        ),
    ]


def _history_figures(
    count: int, rounds: list[_Round], history: dict[str, Any], big_size: int, with_gib: bool
) -> list[Figure]:
    """The 1 GiB history's peak RSS (with ``with_gib``), the stitched read's rate and the
    restore of a long history against a short one."""
    figures = []
    if with_gib:
        upper = "" if history["peak_reset"] else " (upper bound: peak RSS could not be reset)"
        figures.append(
            Figure(
                name=(
                    f"segment export of a 1 GiB history ({GIB_ENTRIES:,} x 1 KiB entries): "
                    f"peak RSS growth in a spawned process{upper}"
                ),
                value=round(history["rss_growth_mib"], 1),
                unit="MiB",
                baseline="limit",
                baseline_value=RSS_LIMIT_MIB,
                target=1.0,
                better="lower",
            )
        )
    figures.append(
        Figure(
            name=(
                f"stitched read_range over segments + hot tail, pages of {READ_PAGE:,} "
                f"({count:,} x 1 KiB entries)"
            ),
            value=round(statistics.median(r.read_rate for r in rounds), 1),
            unit="entries/s",
            baseline="required rate",
            baseline_value=REQUIRED_READ_RATE,
            target=1.0,
            better="higher",
        )
    )
    figures.append(
        Figure(
            name=(
                f"restore, baseline {RESTORE_TAIL} entries below head: {GIB_ENTRIES:,}-entry "
                f"history ({big_size}-byte entries) exported to segments"
            ),
            value=round(history["restore_big_s"] * 1000, 3),
            unit="ms",
            baseline=f"restore of a {SMALL_HISTORY:,}-entry history, same store",
            baseline_value=round(history["restore_small_s"] * 1000, 3),
            target=1.2,
            better="lower",
        )
    )
    return figures
