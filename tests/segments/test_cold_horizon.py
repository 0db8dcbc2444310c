"""The cold horizon: a world's owner lets export move old entries to segments without a
baseline (an event-sourced application replays its events through ``read_range``, which
stitches cold segments and the hot tail)."""

from __future__ import annotations

import pytest

from persistence.errors import Validation, WorldNotFound
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from segments.export import ExportConfig, Exporter

EXPORT = ExportConfig(enabled=True, target_entries=3, delete_chunk_entries=2)


def test_export_goes_to_the_horizon_without_a_baseline(plane: Plane) -> None:
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    entries = [b"event %d" % i for i in range(1, 11)]
    plane.append_batch(u, w, 0, entries)
    exporter = Exporter(plane, EXPORT)
    exporter.export_all(u, w)
    assert plane.list_segments(u, w) == []  # baseline 0, no horizon: all stays hot
    assert plane.set_cold_horizon(u, w, 7) == 7
    exporter.export_all(u, w)
    segments = [(s.start, s.end) for s in plane.list_segments(u, w)]
    assert segments == [(1, 3), (4, 6), (7, 7)]  # segments of at most 3, to the horizon
    assert plane.read_hot(u, w, 1, 10) == []  # heights 1-7 are cold now
    assert [h for h, _ in plane.read_hot(u, w, 8, 10)] == [8, 9, 10]
    assert [e for _, e in plane.read_range(u, w, 1, 10)] == entries
    assert plane.set_cold_horizon(u, w, 9) == 9
    exporter.export_all(u, w)
    assert [(s.start, s.end) for s in plane.list_segments(u, w)][-1] == (8, 9)
    assert [e for _, e in plane.read_range(u, w, 1, 10)] == entries


def test_the_horizon_only_rises_and_stays_below_the_head(plane: Plane) -> None:
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"a", b"b", b"c"])
    assert plane.set_cold_horizon(u, w, 2) == 2
    assert plane.set_cold_horizon(u, w, 1) == 2  # a lower height leaves it
    assert plane.set_cold_horizon(u, w, 0) == 2
    with pytest.raises(Validation) as refused:
        plane.set_cold_horizon(u, w, 4)
    assert refused.value.field == "height" and "head 3" in str(refused.value)
    with pytest.raises(WorldNotFound):
        plane.set_cold_horizon(u, WorldId.new(), 0)
