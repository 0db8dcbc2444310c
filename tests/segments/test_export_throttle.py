"""Export's hot-key deletion on an engine whose writers serialize (SQLite): clears of at most
``delete_chunk_bytes``, committed without their own sync, a pause of ``pause_ratio`` times
each clear after it; elsewhere clears of ``delete_chunk_entries`` and no pause."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import segments.export
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.kv.sqlite_transaction import SqliteTransaction
from backends.objects.local import LocalObjectStore
from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane
from persistence.sizes import KiB
from segments import open_plane
from segments.export import ExportConfig, Exporter

ENTRIES = 300
ENTRY = 1 * KiB


class _Clock:
    """``time`` for the export module: each ``monotonic()`` is 1 s after the last; sleeps
    are recorded, not slept."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class _Steps:
    def __init__(self) -> None:
        self.steps: list[str] = []

    def reached(self, step: str) -> None:
        self.steps.append(step)


def _exported(engine: Engine, tmp_path: Path, config: ExportConfig) -> tuple[Plane, list[str]]:
    """A world of ``ENTRIES`` 1 KiB entries with a baseline at its head, exported."""
    hooks = _Steps()
    plane = open_plane(engine, LocalObjectStore(tmp_path / "objects"), hooks=hooks)
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    entries = [b"\xff" + bytes([i % 251]) * (ENTRY - 1) for i in range(ENTRIES)]
    head = plane.append_batch(u, w, 0, entries) + ENTRIES - 1
    plane.snapshot_commit(
        u,
        w,
        cbor.encode({}),
        height=head,
        logical_time_ns=head,
        receipt_horizon_height=head,
        promote_baseline=True,
    )
    Exporter(plane, config).export_all(u, w)
    assert [e for _, e in plane.read_range(u, w, 1, ENTRIES)] == entries
    assert plane.read_hot(u, w, 1, ENTRIES) == []
    return plane, hooks.steps


CONFIG = ExportConfig(enabled=True, target_entries=ENTRIES, delete_chunk_bytes=64 * KiB)


def test_sqlite_clears_at_most_delete_chunk_bytes_per_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    monkeypatch.setattr(segments.export, "time", clock)
    _, steps = _exported(SqliteEngine(tmp_path / "kv.db"), tmp_path, CONFIG)
    clears = steps.count("export.after_delete_chunk")
    # 300 entries of 1 KiB (plus their framing in the segment) by 64 KiB: at most 63 a clear
    assert clears == math.ceil(ENTRIES / 63) == 5
    # after each clear but the last, 4x what it took (2 ticks of the fake clock: 1 s)
    assert clock.slept == [CONFIG.pause_ratio * 1.0] * (clears - 1)


def test_no_pause_with_a_pause_ratio_of_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(segments.export, "time", clock)
    config = ExportConfig(enabled=True, target_entries=ENTRIES, pause_ratio=0)
    _, steps = _exported(SqliteEngine(tmp_path / "kv.db"), tmp_path, config)
    assert steps.count("export.after_delete_chunk") > 1 and clock.slept == []


def test_engines_whose_writers_do_not_serialize_clear_by_entries_without_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    monkeypatch.setattr(segments.export, "time", clock)
    _, steps = _exported(MemoryEngine(), tmp_path, CONFIG)
    assert steps.count("export.after_delete_chunk") == 1  # 300 <= delete_chunk_entries
    assert clock.slept == []


def test_clears_commit_without_their_own_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each clear transaction relaxes its durability (lost in a machine crash, the clear
    is done again from the older marker); the marker transitions around them do not."""
    relaxed: list[bool] = []
    original = SqliteTransaction.relax_durability

    def spy(self: SqliteTransaction) -> None:
        relaxed.append(True)
        original(self)

    monkeypatch.setattr(SqliteTransaction, "relax_durability", spy)
    monkeypatch.setattr(segments.export, "time", _Clock())
    _, steps = _exported(SqliteEngine(tmp_path / "kv.db"), tmp_path, CONFIG)
    assert len(relaxed) == steps.count("export.after_delete_chunk") == 5


def test_writers_serialize_only_on_sqlite(tmp_path: Path) -> None:
    from backends.kv.faults import FaultInjector, FaultyEngine

    sqlite = SqliteEngine(tmp_path / "kv.db")
    flags: dict[str, Any] = {
        "sqlite": sqlite.writers_serialize,
        "memory": MemoryEngine().writers_serialize,
        "faults+sqlite": FaultyEngine(sqlite, FaultInjector(seed=1)).writers_serialize,
    }
    assert flags == {"sqlite": True, "memory": False, "faults+sqlite": True}
