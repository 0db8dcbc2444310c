"""Plane fixtures for segment tests: every engine, memory or local objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.objects.local import LocalObjectStore
from persistence.kv import Engine
from persistence.plane import Plane
from segments import open_plane


@pytest.fixture
def plane(engine: Engine, tmp_path: Path) -> Plane:
    return open_plane(engine, LocalObjectStore(tmp_path / "objects"))
