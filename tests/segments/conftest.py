"""Plane fixtures for segment tests: every engine, memory or local objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.objects.local import LocalObjectStore
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
def plane(engine: Engine, tmp_path: Path) -> Plane:
    return Plane(engine, LocalObjectStore(tmp_path / "objects"))
