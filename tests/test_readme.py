"""The README's commands and library example are true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command() -> None:
    lines = README.splitlines()
    (comment,) = [n for n, line in enumerate(lines) if line.startswith("# tests:")]
    assert "the whole suite" in lines[comment]
    test_cmd = lines[comment + 1]
    assert test_cmd.endswith("python -m pytest")  # everything: no -m, no -k, no path
    assert '.venv/bin/python -m pytest -m "not slow"' in README  # and the quick profile
    ci = (ROOT / ".ci" / "run").read_text()
    assert "grep -A1 '^# tests:' README.md" in ci  # CI runs exactly that line


def test_library_example_runs(tmp_path: Path, capsys: object) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", README, re.S)
    code = block.replace("/var/lib/aos", str(tmp_path))
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "aos.db").is_file()
