"""Output on a terminal: tables fit its width (``rich``), long work draws a live bar; off a
terminal the same commands print whole cells and plain lines, for scripts."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aosp.cli.console import SHORT_CELL, Progress, fitted, print_table
from tests.cli.conftest import ROOT, aosp

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


COLUMNS = ["world", "handle", "snapshot_ref", "pending"]
CELLS = [["3eafe64d", "demo-1", "ab" * 32, "0"], ["c85b57dc", "demo-2", "cd" * 32, "12"]]


def test_fitted_cuts_long_cells_first_then_headers_never_short_cells() -> None:
    natural = [8, 6, 64, 7]
    assert fitted(COLUMNS, CELLS, 200) == natural  # room: nothing cut
    narrow = fitted(COLUMNS, CELLS, 50)
    assert sum(narrow) + 2 * 3 == 50
    assert narrow[:2] == [8, 6] and narrow[3] == 7  # ids and counts whole; the ref gave way
    tight = fitted(COLUMNS, CELLS, 8 + 6 + SHORT_CELL + 2 + 6)
    assert tight == [8, 6, SHORT_CELL, 2]  # then the header wider than its cells


def test_a_table_on_a_terminal_fits_its_width_and_says_what_it_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    out = Terminal()
    print_table([dict(zip(COLUMNS, line, strict=True)) for line in CELLS], COLUMNS, out=out)
    lines = ANSI.sub("", out.getvalue()).splitlines()
    assert len(lines) == 3 and all(len(line.rstrip()) <= 50 for line in lines)
    assert lines[1].startswith("3eafe64d  demo-1  abab") and "…" in lines[1]
    plain = io.StringIO()  # not a terminal: every cell whole
    print_table([dict(zip(COLUMNS, line, strict=True)) for line in CELLS], COLUMNS, out=plain)
    assert "ab" * 32 in plain.getvalue() and "…" not in plain.getvalue()


def test_progress_on_a_terminal_is_a_bar_with_messages_above_it() -> None:
    out = Terminal()
    with Progress("demo", enabled=True, unit="item", stream=out, summary=False) as progress:
        progress.message("starting")
        progress.count(3, 4)
        progress.count(4, 4)
    text = ANSI.sub("", out.getvalue())
    assert "... starting" in text and "demo" in text and "4/4" in text and "items" in text
    plain = io.StringIO()  # off a terminal, summary=False: the work's own lines only
    with Progress("demo", enabled=True, unit="item", stream=plain, summary=False) as progress:
        progress.message("starting")
        progress.count(4, 4)
    assert plain.getvalue() == "... starting\n"


def read_until_exit(command: list[str], columns: int, cwd: Path) -> str:
    """Run ``command`` on a pseudo-terminal ``columns`` wide; what it printed there."""
    leader, follower = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k != "AOSP_DATA_DIR"}
    environment.update(PYTHONPATH=str(ROOT), COLUMNS=str(columns), TERM="xterm")
    process = subprocess.Popen(command, stdout=follower, stderr=follower, env=environment, cwd=cwd)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 300
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no output for the whole deadline: {seen[-500:]!r}"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other side closed: the command ended
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(timeout=60) == 0, seen[-2000:]
    finally:
        process.kill()
        process.wait()
        os.close(leader)
    return ANSI.sub("", seen.decode(errors="replace")).replace("\r\n", "\n")


def test_the_demo_and_inspect_on_a_narrow_terminal(tmp_path: Path) -> None:
    """The demo draws its bar of drained items; ``inspect`` fits 60 columns (its cells
    whole off a terminal, as every other test of it reads them)."""
    demo = [sys.executable, "-m", "aosp", "demo", "--data-dir", "store", "--items", "40"]
    shown = read_until_exit([*demo, "--worlds", "1", "--writers", "1"], 80, tmp_path)
    assert "40/40" in shown and "items" in shown and "1 world verified" in shown
    inspect = [sys.executable, "-m", "aosp", "inspect", "--data-dir", "store", "--quiet"]
    table = [line for line in read_until_exit(inspect, 60, tmp_path).splitlines() if line]
    assert table[1].startswith("world") and len(table) == 3
    assert all(len(line.rstrip()) <= 60 for line in table), table
    whole = aosp("inspect", "--data-dir", "store", "--quiet", cwd=tmp_path)
    assert max(len(line) for line in whole.text.splitlines()) > 60  # a pipe gets it all
