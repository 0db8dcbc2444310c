"""Engine fixtures: every contract test runs on every engine available here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from persistence.kv import Engine

ENGINES = ["memory", "sqlite", "faulty-memory"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A fresh, empty engine of each kind (``faulty-memory`` injects no faults by default:
    it checks that the wrapper is transparent)."""
    kind = request.param
    eng: Engine
    if kind == "memory":
        eng = MemoryEngine()
    elif kind == "sqlite":
        eng = SqliteEngine(tmp_path / "kv.db")
    else:
        eng = FaultyEngine(MemoryEngine(), FaultInjector(seed=1))
    yield eng
    eng.close()
