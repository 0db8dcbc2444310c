"""The benchmark's durable-commit count (``aosp bench eventsourcing``, figures 6-7): an insert
into a new aggregate and one into an existing aggregate each make one commit in SQLite's
write-ahead log, as eventsourcing's own SQLite recorder does."""

from __future__ import annotations

from pathlib import Path

from aosp.benchmarks import eventsourcing as suite


def test_an_insert_is_one_durable_commit_as_in_eventsourcing(tmp_path: Path) -> None:
    figures = suite.commit_figures(tmp_path)
    assert [(f.value, f.baseline_value, f.met) for f in figures] == [(1.0, 1.0, True)] * 2
    assert "new aggregate" in figures[0].name and "existing aggregate" in figures[1].name
