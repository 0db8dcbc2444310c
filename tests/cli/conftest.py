"""``aosp`` through a real subprocess, and a small demo store shared by the CLI tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def aosp(
    *args: str,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    env: dict[str, str | None] | None = None,
    timeout: float = 300,
) -> Result:
    """Run ``python -m aosp ARGS`` and capture everything (``env``: variables to set, or
    with ``None`` to remove, in the inherited environment; ``timeout``: seconds before the
    run counts as hung)."""
    changes = env or {}
    environment = {k: v for k, v in os.environ.items() if k != "AOSP_DATA_DIR" and k not in changes}
    environment.update({k: v for k, v in changes.items() if v is not None})
    environment["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "aosp", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env=environment,
        cwd=cwd or ROOT,
    )
    return Result(done.returncode, done.stdout, done.stderr.decode())


@dataclass
class Result:
    """Exit code, raw stdout and stderr text of one run."""

    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        """stdout as text."""
        return self.out.decode()

    def json(self) -> Any:
        """stdout parsed as JSON."""
        return json.loads(self.out)

    def one_line_error(self) -> str:
        """stderr, asserted to be a single line."""
        assert self.err.strip().count("\n") == 0, self.err
        return self.err.strip()


@dataclass
class Store:
    """A demo store and one of its worlds."""

    data_dir: Path
    universe: str
    world: str

    def args(self, *more: str) -> list[str]:
        """``--data-dir`` plus ``more``."""
        return ["--data-dir", str(self.data_dir), *more]

    def world_args(self, *more: str) -> list[str]:
        """``--data-dir -u -w`` plus ``more``."""
        return self.args("-u", self.universe, "-w", self.world, *more)


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """One small demo run per test session."""
    return make_demo_store(tmp_path_factory.mktemp("demo") / "data")


def make_demo_store(data: Path) -> Store:
    """A small demo run's store in ``data``, with the first of its worlds."""
    result = aosp(
        "demo",
        "--data-dir",
        str(data),
        "--worlds",
        "3",
        "--writers",
        "2",
        "--items",
        "20",
        "--quiet",
        "--json",
    )
    assert result.code == 0, result.err
    listing = aosp("inspect", "--data-dir", str(data), "--json", "--quiet").json()
    first = listing["worlds"][0]
    return Store(data, first["universe"], first["world"])


@pytest.fixture
def store(demo_template: Store, tmp_path: Path) -> Store:
    """A private copy of the demo store (tests may damage it)."""
    data = tmp_path / "data"
    shutil.copytree(demo_template.data_dir, data)
    return Store(data, demo_template.universe, demo_template.world)
