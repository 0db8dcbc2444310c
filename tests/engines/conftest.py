"""Engine fixtures: every contract test runs on every engine available here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.kv import Engine
from tests.conftest import ENGINE_KINDS, make_engine


@pytest.fixture(params=ENGINE_KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Engine]:
    """A fresh, empty engine of each kind."""
    eng = make_engine(request.param, tmp_path, monkeypatch)
    yield eng
    eng.close()
