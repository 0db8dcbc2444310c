"""Plane fixtures: the same protocol code on every engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.objects.memory import MemoryObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.kv import Engine
from persistence.plane import Plane
from tests.conftest import ENGINE_KINDS, make_engine


@pytest.fixture(params=ENGINE_KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Engine]:
    eng = make_engine(request.param, tmp_path, monkeypatch)
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
