"""The aosp command through a real subprocess: help, the demo, usage and store errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def aosp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "persistence.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_help_lists_commands() -> None:
    result = aosp("--help")
    assert result.returncode == 0
    for command in ("demo", "bench"):
        assert command in result.stdout
    assert "Exit codes" in result.stdout


def test_demo_verifies_its_workload(tmp_path: Path) -> None:
    result = aosp(
        "demo", "--data-dir", str(tmp_path / "data"), "--writers", "3", "--items", "20", "--json"
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["transactions"] == 60
    assert summary["all_verified"] is True
    assert all(summary["checks"].values())


def test_demo_refuses_a_foreign_store_with_one_line_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "aos.db").write_text("not a database")
    result = aosp("demo", "--data-dir", str(data))
    assert result.returncode == 3
    assert result.stderr.strip().count("\n") == 0
    assert "not an SQLite database" in result.stderr
    assert (data / "aos.db").read_text() == "not a database"


def test_usage_error_exit_code() -> None:
    assert aosp("no-such-command").returncode == 2
