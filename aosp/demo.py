"""The main job: a world-host simulation on the embedded default store, verified end to end.

Several writer processes enqueue all five inbox item kinds (some referencing CAS blobs of
mixed sizes) into many worlds; the host process drains every world, commits snapshots of the
reference kernel's state and promotes baselines as it goes, then exports old journal ranges
to segments. At the end every world is checked: the journal is contiguous, every item sent
to it is there exactly once and in each writer's order, restore (baseline + segments + hot
tail) equals a full replay from genesis byte for byte, every blob reads back verified, and
``fsck`` finds no integrity error.

This module is the top of the stack (it drives segments and the reference kernel), so it
imports the ``segments`` package inside functions.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aosp.cli.console import counted, noun
from persistence import cbor
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import (
    ControlIngress,
    DomainEventIngress,
    InboxIngress,
    InboxItem,
    ReceiptIngress,
    TimerFiredIngress,
    decode_inbox_item,
)
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.plane import Plane
from segments import open_plane

BLOB_SIZES = (200, 3_000, 20_000, 70_000)


@dataclass
class DemoConfig:
    """Sizes of the simulation."""

    data_dir: Path
    worlds: int = 32
    writers: int = 4
    items: int = 500
    snapshot_every: int = 40
    segment_entries: int = 25


@dataclass
class DemoReport:
    """What ran and what was verified."""

    universe: str = ""
    """The id of the universe the demo made (every world of the run is in it)."""
    worlds: int = 0
    items: int = 0
    entries: int = 0
    snapshots: int = 0
    segments: int = 0
    restored: int = 0
    blobs: int = 0
    blob_bytes: int = 0
    seconds: float = 0.0
    fsck_errors: int = 0
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def all_verified(self) -> bool:
        """Whether every check passed."""
        return bool(self.checks) and all(self.checks.values())


def open_store(data_dir: Path) -> Plane:
    """The embedded default: SQLite file and object directory under ``data_dir``."""
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.local import LocalObjectStore

    data_dir.mkdir(parents=True, exist_ok=True)
    return open_plane(SqliteEngine(data_dir / "aos.db"), LocalObjectStore(data_dir / "objects"))


def demo_item(writer: int, index: int, blob: Hash) -> InboxItem:
    """The demo's ``index``-th item of ``writer``: the five item kinds in turn, each tagged
    with its writer, index and ``blob`` (read back with :func:`item_payload`)."""
    tag = cbor.encode({"writer": writer, "index": index, "blob": blob.digest})
    kind = index % 5
    if kind == 0:
        return DomainEventIngress("demo/Ordered@1", tag, key=f"w{writer}".encode())
    if kind == 1:
        return ReceiptIngress(blob, "http.request", f"adapter-{writer}", tag, b"signature")
    if kind == 2:
        return InboxIngress("orders", tag, headers={"writer": str(writer)})
    if kind == 3:
        return TimerFiredIngress(f"timer-{writer}-{index}", tag)
    return ControlIngress("noop", tag)


def _writer(data_dir: str, universe: str, worlds: list[str], writer: int, items: int) -> int:
    """One writer process: ``items`` enqueues spread over the worlds; returns blob bytes."""
    plane = open_store(Path(data_dir))
    u = UniverseId.parse(universe)
    blob_bytes = 0
    for index in range(items):
        size = BLOB_SIZES[(writer + index) % len(BLOB_SIZES)]
        body = hashlib.shake_256(f"{writer}/{index}".encode()).digest(size)
        blob = plane.put_verified(u, body)
        blob_bytes += size
        world = WorldId.parse(worlds[(writer + index) % len(worlds)])
        plane.enqueue(
            u, world, demo_item(writer, index, blob), idempotency_key=f"{writer}/{index}".encode()
        )
    plane.engine.close()
    return blob_bytes


def run(
    config: DemoConfig,
    progress: Callable[[str], None],
    tally: Callable[[int, int], None] = lambda done, total: None,
) -> DemoReport:
    """Run the simulation and verify it (``progress``: a line per step; ``tally``: items
    drained of all)."""
    report = DemoReport(worlds=config.worlds, items=config.writers * config.items)
    plane = open_store(config.data_dir)
    universe = UniverseId.new()
    report.universe = str(universe)
    world_ids = [WorldId.new() for _ in range(config.worlds)]
    for number, w in enumerate(world_ids, 1):
        plane.create_world(universe, w, handle=f"demo-{number}")  # unique in the universe
    progress(
        f"{counted(config.writers, 'writer')} x {counted(config.items, 'item')} into "
        f"{counted(config.worlds, 'world')} of universe {universe} in {config.data_dir}"
    )
    start = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    names = [str(w) for w in world_ids]
    jobs = [
        (str(config.data_dir), str(universe), names, n, config.items) for n in range(config.writers)
    ]
    with ctx.Pool(config.writers) as pool:
        pending = pool.starmap_async(_writer, jobs)
        drained = 0
        last_progress = start
        since_snapshot = dict.fromkeys(world_ids, 0)
        while True:
            writers_done = pending.ready()
            moved = 0
            for w in world_ids:
                result = plane.drain_inbox_to_journal(universe, w, max_items=200)
                moved += result.count
                since_snapshot[w] += result.count
                if since_snapshot[w] >= config.snapshot_every:
                    _snapshot(plane, universe, w)
                    report.snapshots += 1
                    since_snapshot[w] = 0
            drained += moved
            tally(drained, report.items)
            if moved and time.perf_counter() - last_progress >= 1.0:
                progress(f"drained {drained}/{report.items} {noun(report.items, 'item')}")
                last_progress = time.perf_counter()
            if writers_done and not moved:
                break
            if not moved:
                time.sleep(0.02)
        report.blob_bytes = sum(pending.get())
    for w in world_ids:
        _snapshot(plane, universe, w)
        report.snapshots += 1
    report.seconds = time.perf_counter() - start
    from segments.export import ExportConfig, Exporter

    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=config.segment_entries))
    for w in world_ids:
        # a little more history after the baseline, so restore replays a hot tail too
        plane.append_batch(universe, w, plane.head(universe, w), [b"host tail entry"])
        report.segments += len(exporter.export_all(universe, w))
    progress(f"exported {counted(report.segments, 'segment')}")
    progress("verifying every world")
    _verify(plane, universe, world_ids, config, report)
    progress("fsck of the universe")
    from aosp.fsck import Fsck

    report.fsck_errors = len(Fsck(plane).run([universe]).errors)
    report.checks["fsck: no integrity errors"] = report.fsck_errors == 0
    plane.engine.close()
    return report


def _snapshot(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    from persistence.kernel import ReferenceKernel
    from segments.restore import full_replay

    state = full_replay(plane, universe, world, ReferenceKernel())
    if any(s.height == state.head for s in plane.list_snapshots(universe, world)):
        return  # nothing new since the last snapshot
    plane.snapshot_commit(
        universe,
        world,
        state.state,
        height=state.head,
        logical_time_ns=time.time_ns(),
        receipt_horizon_height=state.head,
        promote_baseline=True,
    )


def _verify(
    plane: Plane,
    universe: UniverseId,
    worlds: list[WorldId],
    config: DemoConfig,
    report: DemoReport,
) -> None:
    seen: dict[tuple[int, int], int] = {}
    from persistence.kernel import ReferenceKernel
    from segments.restore import full_replay, restore

    contiguous = ordered = restore_equal = blobs_ok = True
    blobs: set[bytes] = set()
    for w in worlds:
        head = plane.head(universe, w)
        rows = plane.read_range(universe, w, 1, head)
        report.entries += len(rows)
        contiguous &= [h for h, _ in rows] == list(range(1, head + 1))
        per_writer: dict[int, list[int]] = {}
        last_seq = None
        for _, entry in rows:
            record = decode_journal_record(entry)
            if isinstance(record, IngressJournalRecord):
                if last_seq is not None and not record.seq > last_seq:
                    ordered = False
                last_seq = record.seq
                tag: dict[str, Any] = cbor.decode(item_payload(decode_inbox_item(record.item)))
                key = (tag["writer"], tag["index"])
                seen[key] = seen.get(key, 0) + 1
                per_writer.setdefault(tag["writer"], []).append(tag["index"])
                blobs.add(tag["blob"])
        ordered &= all(order == sorted(order) for order in per_writer.values())
        restored = restore(plane, universe, w, ReferenceKernel())
        replayed = full_replay(plane, universe, w, ReferenceKernel())
        restore_equal &= restored.state == replayed.state and restored.head == head
        report.restored += 1
    for digest in blobs:
        try:
            plane.get(universe, Hash(digest))
        except Exception:
            blobs_ok = False
    expected = {(w, i) for w in range(config.writers) for i in range(config.items)}
    report.blobs = len(blobs)
    report.checks = {
        "every item in a journal exactly once": set(seen) == expected
        and all(n == 1 for n in seen.values()),
        "journals contiguous": contiguous,
        "inbox order and writer order kept": ordered,
        "restore equals full replay": restore_equal,
        "blobs read back verified": blobs_ok,
    }


def item_payload(item: InboxItem) -> bytes:
    """The CBOR payload of any item kind (a domain event's value)."""
    if isinstance(item, DomainEventIngress):
        return item.value_cbor
    return item.payload_cbor
