"""A randomized world-host workload for segment tests, with a model of the journal."""

from __future__ import annotations

import random

from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, TimerFiredIngress
from persistence.kernel import ReferenceKernel
from persistence.plane import Plane
from segments.export import ExportConfig, Exporter
from segments.restore import full_replay


def snapshot_now(plane: Plane, universe: UniverseId, world: WorldId, promote: bool) -> None:
    """Snapshot the reference kernel's state at the head (and maybe promote it). The index
    is immutable, so a head that already has a snapshot keeps it."""
    state = full_replay(plane, universe, world, ReferenceKernel())
    existing = [s for s in plane.list_snapshots(universe, world) if s.height == state.head]
    if existing:
        promotable = promote and existing[0].receipt_horizon_height == state.head
        if promotable and plane.active_baseline(universe, world).height < state.head:
            plane.promote_baseline(universe, world, existing[0])
        return
    plane.snapshot_commit(
        universe,
        world,
        state.state,
        height=state.head,
        logical_time_ns=state.head,
        receipt_horizon_height=state.head if promote else None,
        promote_baseline=promote,
    )


def run_workload(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    seed: int,
    steps: int = 40,
    export: ExportConfig | None = None,
) -> list[bytes]:
    """Random appends, enqueues and drains, snapshots, promotions and exports; returns the
    journal as the model expects it (every entry, in height order)."""
    rng = random.Random(seed)
    exporter = Exporter(plane, export or ExportConfig(enabled=True, target_entries=7))
    model: list[bytes] = []
    for step in range(steps):
        action = rng.choice(["append", "append", "ingress", "snapshot", "promote", "export"])
        if action == "append":
            batch = [rng.randbytes(rng.randint(0, 300)) for _ in range(rng.randint(1, 6))]
            plane.append_batch(universe, world, len(model), batch)
        elif action == "ingress":
            items = [
                DomainEventIngress("w/Event@1", cbor.encode([seed, step, i]))
                if i % 2
                else TimerFiredIngress(f"t{step}-{i}", cbor.encode(i))
                for i in range(rng.randint(1, 5))
            ]
            plane.enqueue_batch(universe, world, items)
            plane.drain_inbox_to_journal(universe, world, max_items=rng.randint(1, 5))
        elif action in ("snapshot", "promote"):
            snapshot_now(plane, universe, world, promote=action == "promote")
        else:
            exporter.export_all(universe, world)
        model = (
            [e for _, e in plane.read_range(universe, world, 1, 10**6)] if step % 5 == 0 else model
        )
        head = plane.head(universe, world)
        if len(model) != head:
            model = [e for _, e in plane.read_range(universe, world, 1, head)]
    return model
