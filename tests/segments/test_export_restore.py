"""Protocol F, stitched reads and restore, on every engine."""

from __future__ import annotations

import pytest

from persistence.errors import Corruption, Validation
from persistence.ids import UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.plane import Plane
from segments.export import ExportConfig, Exporter
from segments.restore import full_replay, restore
from tests.segments.workload import run_workload, snapshot_now


def world_of(plane: Plane) -> tuple[UniverseId, WorldId]:
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    return u, w


@pytest.mark.parametrize("seed", range(4))
def test_restore_equals_full_replay_byte_for_byte(plane: Plane, seed: int) -> None:
    u, w = world_of(plane)
    run_workload(plane, u, w, seed)
    snapshot_now(plane, u, w, promote=True)
    Exporter(plane, ExportConfig(enabled=True, target_entries=5)).export_all(u, w)
    plane.append_batch(u, w, plane.head(u, w), [b"tail 1", b"tail 2"])
    restored = restore(plane, u, w, ReferenceKernel())
    replayed = full_replay(plane, u, w, ReferenceKernel())
    assert restored.state == replayed.state
    assert restored.head == replayed.head == plane.head(u, w)
    assert restored.from_height == plane.active_baseline(u, w).height
    segments = plane.list_segments(u, w)
    assert segments, "the workload exported nothing"
    assert [s.start for s in segments] == [1] + [s.end + 1 for s in segments[:-1]]
    assert segments[-1].end < plane.active_baseline(u, w).height


def test_stitched_reads_cross_segments_and_hot_tail(plane: Plane) -> None:
    u, w = world_of(plane)
    entries = [f"entry {i}".encode() for i in range(1, 41)]
    plane.append_batch(u, w, 0, entries)
    snapshot_now(plane, u, w, promote=True)  # baseline at 40
    exported = Exporter(plane, ExportConfig(enabled=True, target_entries=8, margin=5)).export_all(
        u, w
    )
    assert [(s.start, s.end) for s in exported] == [(1, 8), (9, 16), (17, 24), (25, 32), (33, 34)]
    assert plane.read_hot(u, w, 1, 10) == []  # hot keys of exported ranges are gone
    assert [e for _, e in plane.read_range(u, w, 1, 40)] == entries
    assert plane.read_range(u, w, 7, 4) == [(h, entries[h - 1]) for h in range(7, 11)]
    assert plane.read_range(u, w, 33, 5) == [(h, entries[h - 1]) for h in range(33, 38)]


def test_export_respects_baseline_margin_and_flag(plane: Plane) -> None:
    u, w = world_of(plane)
    plane.append_batch(u, w, 0, [b"x"] * 20)
    with pytest.raises(Validation, match="disabled"):
        Exporter(plane, ExportConfig()).export_all(u, w)
    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=100, margin=3))
    assert exporter.export_all(u, w) == []  # the baseline is still genesis
    snapshot_now(plane, u, w, promote=True)  # baseline at 20
    (segment,) = exporter.export_all(u, w)
    assert (segment.start, segment.end) == (1, 16)  # strictly below 20 - 3
    plane.append_batch(u, w, plane.head(u, w), [b"y"] * 10)
    assert exporter.export_all(u, w) == []  # baseline did not move


def test_byte_target_ends_segments_early(plane: Plane) -> None:
    u, w = world_of(plane)
    plane.append_batch(u, w, 0, [bytes(1000)] * 30)
    snapshot_now(plane, u, w, promote=True)
    config = ExportConfig(enabled=True, target_entries=1000, target_bytes=4500)
    segments = Exporter(plane, config).export_all(u, w)
    assert [s.entry_count for s in segments] == [4] * 7 + [1]  # heights 1..29: below 30


def test_root_completeness_is_checked(plane: Plane) -> None:
    u, w = world_of(plane)
    plane.append_batch(u, w, 0, [b"a"])
    blob = plane.put_verified(u, b"referenced by the snapshot" * 1000)
    state = full_replay(plane, u, w, ReferenceKernel()).state
    plane.snapshot_commit(
        u,
        w,
        state,
        height=1,
        logical_time_ns=1,
        manifest=[blob],
        receipt_horizon_height=1,
        promote_baseline=True,
    )
    assert restore(plane, u, w, ReferenceKernel()).head == 3
    plane.objects.delete(plane.objects.list("cas/").__next__().key)
    with pytest.raises(Corruption):
        restore(plane, u, w, ReferenceKernel())
