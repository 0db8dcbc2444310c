"""Plane fixtures: the same protocol code on every engine."""

from __future__ import annotations

import pytest

from backends.objects.memory import MemoryObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane
from segments import open_plane


@pytest.fixture
def plane(engine: Engine) -> Plane:
    return open_plane(engine, MemoryObjectStore())


@pytest.fixture
def universe() -> UniverseId:
    return UniverseId.new()


@pytest.fixture
def world(plane: Plane, universe: UniverseId) -> WorldId:
    w = WorldId.new()
    plane.create_world(universe, w)
    return w
