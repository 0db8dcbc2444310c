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
    data = tmp_path / "data"
    result = aosp(
        "demo",
        "--data-dir",
        str(data),
        "--worlds",
        "3",
        "--writers",
        "2",
        "--items",
        "30",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["items"] == 60 and summary["worlds"] == 3
    assert summary["all_verified"] is True and all(summary["checks"].values())
    assert summary["segments"] > 0 and summary["worlds_restored"] == 3
    assert (data / "aos.db").is_file() and (data / "objects" / "segments").is_dir()


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
