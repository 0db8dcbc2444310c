"""Plane fixtures: the same protocol code on every engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.memory import MemoryObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane


@pytest.fixture(params=["memory", "sqlite", "faulty-memory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    eng: Engine
    if request.param == "memory":
        eng = MemoryEngine()
    elif request.param == "sqlite":
        eng = SqliteEngine(tmp_path / "kv.db")
    else:
        eng = FaultyEngine(MemoryEngine(), FaultInjector(seed=3))
    yield eng
    eng.close()


@pytest.fixture
def plane(engine: Engine) -> Plane:
    return Plane(engine, MemoryObjectStore())


@pytest.fixture
def universe() -> UniverseId:
    return UniverseId.new()


@pytest.fixture
def world(plane: Plane, universe: UniverseId) -> WorldId:
    w = WorldId.new()
    plane.create_world(universe, w)
    return w
