"""An exporter that planned, then stalled while another ran whole exports, must not install
a marker behind the index (the marker went from absent back to absent meanwhile: ABA); a
marker an older version installed that way is dropped, and export goes on."""

from __future__ import annotations

import uuid

from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols.export import ExportPlan, read_marker
from persistence.segment_records import ExportMarker
from segments import open_plane
from segments.export import ExportConfig, Exporter, segment_prefix

U = UniverseId(uuid.UUID(int=0x61))
W = WorldId(uuid.UUID(int=0x62))
CONFIG = ExportConfig(enabled=True, target_entries=4)


def world(plane: Plane, baseline: int) -> None:
    plane.create_world(U, W)
    plane.append_batch(U, W, 0, [cbor.encode(n) for n in range(10)])
    promote(plane, baseline)


def promote(plane: Plane, height: int) -> None:
    plane.snapshot_commit(
        U,
        W,
        f"state{height}".encode(),
        height=height,
        logical_time_ns=0,
        receipt_horizon_height=height,
        promote_baseline=True,
    )


class StalledAfterPlanning(Exporter):
    """Plans, then lets ``competitor`` export everything before going on."""

    competitor: Exporter | None = None
    plans: list[ExportPlan | None]

    def plan(self, universe: UniverseId, world: WorldId) -> ExportPlan | None:
        plan = super().plan(universe, world)
        self.plans.append(plan)
        if self.competitor is not None:
            competitor, self.competitor = self.competitor, None
            promote(self.plane, 10)  # the baseline moves on meanwhile
            competitor.export_all(U, W)
        return plan


def test_a_stale_plan_plans_again() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    world(plane, 4)
    stalled = StalledAfterPlanning(plane, CONFIG)
    stalled.plans = []
    stalled.competitor = Exporter(plane, CONFIG)
    assert stalled.export_once(U, W) is None  # raced, planned again: nothing left
    assert [(p.start, p.end) if p else None for p in stalled.plans] == [(1, 3), None]
    assert drive(read_marker(plane.engine, WorldKeys(U, W))) is None
    assert [(s.start, s.end) for s in plane.list_segments(U, W)] == [(1, 4), (5, 8), (9, 9)]


def test_a_marker_behind_the_index_is_dropped() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    world(plane, 10)
    exporter = Exporter(plane, CONFIG)
    exporter.export_once(U, W)  # 1-4
    behind = ExportMarker("copy_started", 1, 3, segment_prefix(U, W, 1))
    keys = WorldKeys(U, W)
    tr = plane.engine.create_transaction()  # what an older version's stale plan left
    tr.set(keys.export_marker(), behind.to_cbor())
    tr.commit().wait()
    assert [(s.start, s.end) for s in exporter.export_all(U, W)] == [(5, 8), (9, 9)]
    assert drive(read_marker(plane.engine, keys)) is None
