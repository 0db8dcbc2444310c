"""The built distribution: a wheel and an sdist made with ``python -m build``, and fresh
virtual environments that install the wheel (not editable, no checkout on ``sys.path``)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
CONSTRAINTS: Final = ROOT / "constraints.txt"


@dataclass(frozen=True)
class Env:
    """A virtual environment, run from a directory outside the checkout."""

    path: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def run(
        self, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``bin/<args[0]>`` with ``args[1:]`` in the work directory."""
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return subprocess.run(
            [str(self.path / "bin" / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
            env={**clean, **(env or {})},
        )


def make_env(path: Path, *requirements: str) -> Env:
    """A new virtual environment with ``requirements`` installed under the constraints."""
    venv.create(path, with_pip=True)
    workdir = path / "work"
    workdir.mkdir()
    env = Env(path, workdir)
    if requirements:
        done = env.run(
            "pip", "install", "-q", "--disable-pip-version-check", "-c", str(CONSTRAINTS),
            *requirements,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pip install {requirements} failed:\n{done.stderr[-3000:]}")
    return env


@dataclass(frozen=True)
class Dist:
    """The wheel and sdist built from the checkout."""

    wheel: Path
    sdist: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """``python -m build`` of the checkout (wheel and sdist)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("aos_persistence-*.whl")
    (sdist,) = out.glob("aos_persistence-*.tar.gz")
    return Dist(wheel, sdist)


@pytest.fixture(scope="session")
def core_env(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """A fresh environment with the wheel and no extras: what ``pip install
    aos-persistence`` gives."""
    yield make_env(tmp_path_factory.mktemp("core-env"), str(dist.wheel))
