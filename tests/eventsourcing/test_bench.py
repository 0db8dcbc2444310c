"""The benchmark's write-ahead-log counts (``aosp bench eventsourcing``, figures 6-7 and the
log bytes per insert): an insert into a new aggregate and one into an existing aggregate each
make one commit in SQLite's write-ahead log, as eventsourcing's own SQLite recorder does, and
the bytes are whole frames of the log counted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from aosp.benchmarks import eventsourcing as suite


def test_an_insert_is_one_durable_commit_as_in_eventsourcing(tmp_path: Path) -> None:
    figures = suite.commit_figures(tmp_path)
    commits = figures[0::2]
    assert [(f.value, f.baseline_value, f.met) for f in commits] == [(1.0, 1.0, True)] * 2
    assert "new aggregate" in commits[0].name and "existing aggregate" in commits[1].name
    for figure, (ours_db, theirs_db) in zip(
        figures[1::2], [("ours-count.db", "theirs-count.db")] * 2, strict=True
    ):
        assert "WAL bytes per insert" in figure.name and figure.target is None
        # every commit writes at least one page, and bytes are counted in whole frames
        ours_frame = 24 + _page_size(tmp_path / ours_db)
        theirs_frame = 24 + _page_size(tmp_path / theirs_db)
        assert figure.value >= ours_frame and figure.baseline_value >= theirs_frame
        assert round(figure.value * suite.COUNTED) % ours_frame == 0
        assert round(figure.baseline_value * suite.COUNTED) % theirs_frame == 0


def _page_size(database: Path) -> int:
    """The page size in ``database``'s header (the log is gone once the stores close)."""
    return int.from_bytes(database.read_bytes()[16:18], "big")


def test_the_log_count_reads_frames_and_commits_of_the_current_log(tmp_path: Path) -> None:
    database = tmp_path / "count.db"
    conn = sqlite3.connect(database, isolation_level=None)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (x BLOB)")
    before = suite.wal_count(database)
    for _ in range(3):  # each changes the table's one leaf: one frame, one commit
        conn.execute("INSERT INTO t VALUES (x'00')")
    after = suite.wal_count(database)
    assert after.salt == before.salt and after.frame_bytes == 24 + 4096
    assert (after.commits - before.commits, after.frames - before.frames) == (3, 3)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert suite.wal_count(database) == suite.WalCount(b"", 0, 0, 0)  # an empty log
    conn.close()
