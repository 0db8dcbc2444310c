"""The benchmark's write-ahead-log counts (``aosp bench eventsourcing``, figures 6-7 and the
log bytes per insert): an insert into a new aggregate and one into an existing aggregate each
make one commit in SQLite's write-ahead log, as eventsourcing's own SQLite recorder does, and
the bytes are whole frames of the log counted. And its SQL replays (figures 8-9): a traced
statement bound again value for value, a replay writing what the inserts it replays wrote."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import StoredEvent

from aos_bench import eventsourcing as suite
from aos_bench import eventsourcing_app, plane
from aos_eventsourcing.recorders import PlaneApplicationRecorder
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys
from persistence.protocols.checksums import CRC32C


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


def test_a_traced_statement_is_bound_again_value_for_value() -> None:
    statement = "INSERT INTO t (a1, b) VALUES (x'00fF', 'it''s 7', 51, -3, x'')"
    assert suite.bound(statement) == (
        "INSERT INTO t (a1, b) VALUES (?, ?, ?, ?, ?)",
        (b"\x00\xff", "it's 7", 51, -3, b""),
    )


@pytest.mark.parametrize("kind", ["new", "next"])
def test_a_replay_writes_what_the_inserts_it_replays_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The replay figures' cost model is the inserts' own statements: replayed on the copy,
    they leave it holding exactly the rows the inserts left in their own store, on both
    sides."""
    monkeypatch.setattr(suite, "REPLAY_WARM_INSERTS", 3)
    traced: list[str] = []
    factory, recorder = suite._ours(
        f"sqlite://{tmp_path}/ours.db?synchronous=OFF", f"file://{tmp_path}/objects", traced.append
    )
    ours = suite._Side(recorder)
    theirs_traced: list[str] = []
    theirs_recorder = plane._their_recorder(
        str(tmp_path / "theirs.db"), create=True, trace=theirs_traced.append
    )
    theirs = suite._Side(theirs_recorder)
    for side, database, log, table in (
        (ours, "ours.db", traced, "kv"),
        (theirs, "theirs.db", theirs_traced, "stored_events"),
    ):
        replay = suite._Replay(tmp_path / database, getattr(side, kind), log, 7)
        for _ in range(7):
            replay()
        with pytest.raises(RuntimeError, match="every captured insert was replayed"):
            replay()
        replay.close()
        assert _rows(tmp_path / database, table) == _rows(
            tmp_path / database.replace(".db", "-replayed.db"), table
        )
        assert len(_rows(tmp_path / database, table)) > 10
    factory.close()
    theirs_recorder.datastore.close()


def _rows(database: Path, table: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(database)
    rows = conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    conn.close()
    return rows


def test_the_replay_figures_compare_each_kind_of_insert_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(suite, "REPLAY_WARM_INSERTS", 3)
    recorder = plane._their_recorder(str(tmp_path / "theirs.db"), create=True)
    figures = suite.replay_figures(tmp_path, 0.01, suite._Side(recorder))
    assert [f.name.split(", the module's SQL replayed")[0] for f in figures] == [
        "eventsourcing: insert_events into a new aggregate",
        "eventsourcing: insert_events into a new aggregate",
        "eventsourcing: insert_events into an existing aggregate",
        "eventsourcing: insert_events into an existing aggregate",
    ]
    assert ["against eventsourcing's SQL" in f.name for f in figures] == [False, True] * 2
    for figure in figures:
        assert figure.value > 0 and figure.baseline_value > 0 and figure.target is None
        assert len(figure.round_ratios) == plane.ROUNDS
    recorder.datastore.close()


@pytest.mark.slow
def test_the_read_and_checksum_figures_run_and_report_their_fields(tmp_path: Path) -> None:
    """Figures 3-4 and 6 of ``aosp bench plane`` on a very short clock (6: the current
    layout's checksums, and layout 3's read, against layout 2): each checks the rows
    it reads (the raw SELECT's rows carry their checksums) and reports both sides and its
    round ratios; what they measure is the benchmark's to say, not this test's."""
    figures = plane._reads(tmp_path, 0.05, lambda _: None)
    figures += plane._checksums(tmp_path, 0.05, lambda _: None)
    assert [f.name.split(" (")[0] for f in figures] == [
        "plane: read_range of 20,000 entries",
        "plane: read_range of 20,000 entries",
        "plane: journal checksums, 1-entry append_batch",
        "plane: journal checksums, 100-entry append_batch",
        "plane: journal checksums, read_range of 20,000 entries",
        "plane: journal checksums, read_range of 20,000 entries",
    ]
    for figure in figures:
        assert figure.value > 0 and figure.baseline_value > 0, figure
        assert len(figure.round_ratios) == plane.ROUNDS
    assert [f.target is not None for f in figures] == [True] * 5 + [False]  # layout 3's: reported
    assert figures[-1].name.endswith("layout 3 (CRC-32)")
    assert "layout-2 store" in figures[-1].baseline


@pytest.mark.parametrize("side", ["ours", "theirs"])
def test_the_application_workload_saves_gets_and_reads_every_aggregate(side: str) -> None:
    """Figures 13-16: each side, in a fresh interpreter, saves the aggregates, gets each back
    with its tricks and reads every notification, twice (the process checks them all); our
    process also times the floor and its statements (figures 17-19)."""
    times = eventsourcing_app.run_side(side, aggregates=20)
    floor = {"floor"} if side == "ours" else set()  # each side times its statements alone
    phases = {"save", "get", "read", "reread", "statements"} | floor
    assert set(times) == phases and all(t > 0 for t in times.values())


def test_end_to_end_is_timed_by_its_three_phases_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second reads and the floor are figures of their own, not part of the whole."""
    ours = {"save": 1.0, "get": 0.5, "read": 0.5, "reread": 0.4, "floor": 0.2, "statements": 0.1}
    theirs = {"save": 0.5, "get": 0.25, "read": 0.25, "reread": 0.1, "statements": 0.2}
    monkeypatch.setattr(
        eventsourcing_app, "run_side", lambda side, _: dict(ours if side == "ours" else theirs)
    )
    figures = eventsourcing_app.run(rounds=2, aggregates=10)
    assert [(f.value, f.baseline_value, f.ratio) for f in figures] == [
        (5.0, 10.0, 0.5),  # 10 aggregates in 2 s against 1 s
        (10.0, 20.0, 0.5),
        (20.0, 40.0, 0.5),
        (100.0, 200.0, 0.5),  # 50 notifications in 0.5 s against 0.25 s
        (250.0, 500.0, 0.5),  # the floor against their second read
        (500.0, 250.0, 2.0),  # its statements alone against theirs
        (125.0, 250.0, 0.5),  # our second read against the floor
    ]


def _saved(tmp_path: Path, aggregates: int) -> tuple[UniverseId, list[UUID], list[Any]]:
    """A store of ``aggregates`` aggregates of 3 events and one event of an aggregate with
    a text id: its universe, the aggregates' ids and every notification as the recorder
    reads them."""
    app = Application[UUID](env=eventsourcing_app.environ("ours", tmp_path))
    saved = []
    for _ in range(aggregates):
        item = Aggregate()
        for _ in range(2):
            item.trigger_event(Aggregate.Event)
        app.save(item)
        saved.append(item.id)
    app.recorder.insert_events([StoredEvent("order-17", 1, "Ordered", b"{}")])
    assert isinstance(app.recorder, PlaneApplicationRecorder)
    universe = app.recorder.universe
    expected = app.recorder.select_notifications(1, 100)
    app.close()
    return universe, saved, expected


def _floor(tmp_path: Path, universe: UniverseId, section: int) -> eventsourcing_app.ReadFloor:
    return eventsourcing_app.ReadFloor(tmp_path / "ours.db", universe, section, 16)


@pytest.mark.parametrize("in_c", [True, False], ids=["C", "Python"])
def test_the_floor_of_the_reads_gives_the_applications_notifications(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_c: bool
) -> None:
    """Figures 17-19: ``sqlite3`` alone on the module's keys reads what the recorder reads
    (a text id too), page by page, its checksums checked in C or, where the extension is
    not built, in Python; and its statements alone fetch each page's records and entries."""
    universe, _, expected = _saved(tmp_path, 6)
    assert len(expected) == 19 and expected[-1].originator_id == "order-17"
    if not in_c:
        python = dataclasses.replace(CRC32C, open_rows=None)
        monkeypatch.setattr(eventsourcing_app, "CRC32C", python)
    for section in (1, 7, 19, 100):  # pages of one, partial last pages, one page
        floor = _floor(tmp_path, universe, section)
        try:
            assert floor.notifications() == expected
            assert floor.count() == 19
            pages = floor.pages()
            assert len(pages) == -(-19 // section)
            assert floor.statements(pages) == 2 * 19
        finally:
            floor.close()


@pytest.mark.parametrize("in_c", [True, False], ids=["C", "Python"])
def test_the_floor_refuses_damaged_or_missing_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_c: bool
) -> None:
    """A damaged entry, a log record missing, an entry missing: each is an error, never a
    notification less."""
    if not in_c:
        python = dataclasses.replace(CRC32C, open_rows=None)
        monkeypatch.setattr(eventsourcing_app, "CRC32C", python)
    universe, saved, _ = _saved(tmp_path, 3)
    keys = UniverseKeys(universe)
    entry = keys.world(WorldId(saved[1])).whole_entry_key()(2)
    conn = sqlite3.connect(tmp_path / "ours.db")
    (value,) = conn.execute("SELECT value FROM kv WHERE key = ?", (entry,)).fetchone()

    def stored(key: bytes, new: bytes | None) -> None:
        if new is None:
            conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        else:
            conn.execute("UPDATE kv SET value = ? WHERE key = ?", (new, key))
        conn.commit()

    floor = _floor(tmp_path, universe, 100)
    try:
        for damaged in (value[:-1] + bytes([value[-1] ^ 1]), value[:2]):
            stored(entry, damaged)
            with pytest.raises(ValueError, match="checksum does not match"):
                floor.count()
        stored(entry, None)
        with pytest.raises(ValueError, match="names an entry that is not stored"):
            floor.count()
        conn.execute("INSERT INTO kv VALUES (?, ?)", (entry, value))
        stored(keys.log_entry(4), None)
        with pytest.raises(ValueError, match="misses a position from 1 to 10"):
            floor.count()
    finally:
        floor.close()
        conn.close()


def test_the_application_workload_refuses_a_store_less_durable_than_full(
    tmp_path: Path,
) -> None:
    env = eventsourcing_app.environ("ours", tmp_path)
    env["AOSP_KV_URL"] += "?synchronous=NORMAL"
    with pytest.raises(RuntimeError, match="synchronous=NORMAL"):
        eventsourcing_app._workload(env, 1)
