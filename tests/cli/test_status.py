"""``aosp status`` through real subprocesses: the figures it shows are the store's (backlog,
ready worlds, hot entries, exports in flight, compaction marks, CAS dooms, the universe
log's head and queue), busiest worlds
first, counts stopping at ``--cap`` say so, it never writes and never creates a store, and on
a real FoundationDB cluster the oldest pending item has an age."""

from __future__ import annotations

import hashlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aosp.cli.status import CLEAR_SCREEN
from backends.kv.faults import FaultInjector, SimulatedCrash
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import cbor, kv
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, InboxConsumedMark
from persistence.keyspace import LAYOUT_VERSION, UniverseKeys, WorldKeys
from persistence.plane import PlaneConfig
from persistence.records import CasDoom
from persistence.segment_records import ExportMarker
from segments import open_plane
from tests.cli.conftest import ROOT, Store, aosp
from tests.fdb_cluster import FdbCluster, clear_keyspace


def _enqueue(store: Store, world: WorldId, count: int) -> None:
    plane = open_plane(
        SqliteEngine(store.data_dir / "aos.db", create=False),
        LocalObjectStore(store.data_dir / "objects", create=False),
    )
    try:
        items = [DomainEventIngress("test/Cli@1", cbor.encode(n)) for n in range(count)]
        plane.enqueue_batch(UniverseId.parse(store.universe), world, items)
    finally:
        plane.engine.close()


def _files(data_dir: Path) -> dict[str, str]:
    """Every file of the store and a hash of its bytes."""
    return {
        str(p.relative_to(data_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data_dir.rglob("*"))
        if p.is_file()
    }


def test_status_shows_the_backlog_busiest_world_first(store: Store) -> None:
    world = WorldId.parse(store.world)
    _enqueue(store, world, 3)
    view = aosp("status", *store.args("--json")).json()
    assert view["ok"] is True and view["layout"] == LAYOUT_VERSION
    (universe,) = view["universes"]
    assert universe["universe"] == store.universe and universe["worlds"] == 3
    assert (universe["ready_worlds"], universe["pending"], universe["pending_more"]) == (
        1,
        3,
        False,
    )
    busiest = universe["busiest"][0]
    assert busiest["world"] == store.world
    assert (busiest["pending"], busiest["ready"]) == (3, True)
    assert busiest["oldest_pending"] is not None
    assert busiest["oldest_pending_age_seconds"] is None  # SQLite's versions count commits
    for row in universe["busiest"]:
        assert row["hot_entries"] == row["head"] - row["cold_through"]
        assert row["head"] > 0 and row["baseline"] > 0
    assert universe["hot_entries"] == sum(r["hot_entries"] for r in universe["busiest"])
    assert [r["pending"] for r in universe["busiest"]] == [3, 0, 0]

    text = aosp("status", *store.args("--top", "1"))
    assert text.code == 0, text.err
    assert f"universe {store.universe[:8]}" in text.text and "pending 3" in text.text
    assert store.world[:8] in text.text
    assert "(2 quieter worlds not shown: --top 3 shows them)" in text.text


def test_a_count_at_the_cap_says_there_may_be_more(store: Store) -> None:
    _enqueue(store, WorldId.parse(store.world), 5)
    view = aosp("status", *store.world_args("--json", "--cap", "2")).json()
    (universe,) = view["universes"]
    (row,) = universe["busiest"]
    assert (row["pending"], row["pending_more"]) == (2, True)
    text = aosp("status", *store.world_args("--cap", "2")).text
    assert "pending 2+" in text
    exact = aosp("status", *store.world_args("--json", "--cap", "5")).json()
    (row,) = exact["universes"][0]["busiest"]
    assert (row["pending"], row["pending_more"]) == (5, False)  # all of them: no "+"


def test_a_world_with_pending_work_is_shown_beyond_the_limit(store: Store) -> None:
    """With more worlds than --limit, the worlds with pending work (the ready index) are
    read first, wherever their ids fall; the universe line says its figures are partial."""
    universe = UniverseId.parse(store.universe)
    plane = open_plane(
        SqliteEngine(store.data_dir / "aos.db", create=False),
        LocalObjectStore(store.data_dir / "objects", create=False),
    )
    try:
        last = list(plane.worlds(universe))[-1]  # the highest id: beyond --limit 1
    finally:
        plane.engine.close()
    _enqueue(store, last, 2)
    view = aosp("status", *store.args("--json", "--limit", "1")).json()
    (u,) = view["universes"]
    assert (u["worlds"], u["worlds_more"]) == (1, True)
    assert [r["world"] for r in u["busiest"]] == [str(last)]
    assert u["busiest"][0]["pending"] == 2
    text = aosp("status", *store.args("--limit", "1")).text
    assert "(figures of 1 worlds: those with pending work, then the first by id" in text


def test_status_shows_exports_marks_and_dooms(store: Store) -> None:
    universe, world = UniverseId.parse(store.universe), WorldId.parse(store.world)
    keys = WorldKeys(universe, world)
    plane = open_plane(
        SqliteEngine(store.data_dir / "aos.db", create=False),
        LocalObjectStore(store.data_dir / "objects", create=False),
    )
    try:
        cursor = plane.inbox_cursor(universe, world)
        assert cursor is not None  # the demo drained every world
        marker = ExportMarker("copy_started", 1, 4, "objects/key")
        mark = InboxConsumedMark(cursor)
        doom = CasDoom(5, b"token")

        def plant(tr: kv.Transaction) -> None:
            tr.set(keys.export_marker(), marker.to_cbor())
            tr.set(keys.inbox_consumed_mark(123 * 10**9), mark.to_cbor())
            tr.set(UniverseKeys(universe).cas_doom(Hash.of(b"gone")), doom.to_cbor())

        kv.run_sync(plane.engine, plant)
    finally:
        plane.engine.close()
    (u,) = aosp("status", *store.world_args("--json")).json()["universes"]
    (row,) = u["busiest"]
    assert row["export"] == "copy_started" and u["exports_in_flight"] == 1
    assert row["compaction_marks"] >= 1 and u["compaction_marks"] == row["compaction_marks"]
    assert row["oldest_mark"] == "1970-01-01T00:02:03Z"
    assert u["cas_dooms"] == 1


def test_status_shows_the_universe_log_and_its_queue(store: Store) -> None:
    """The log head, and the records of a sequenced append whose writer stopped before it
    settled them (queued until ``settle_log``)."""
    universe, world = UniverseId.parse(store.universe), WorldId.new()
    engine = SqliteEngine(store.data_dir / "aos.db", create=False)
    objects = LocalObjectStore(store.data_dir / "objects", create=False)
    injector = FaultInjector()
    queuing = open_plane(engine, objects, PlaneConfig(log_sequencing="queued"), hooks=injector)
    try:
        queuing.append_sequenced(universe, [(world, 0, [b"a"])], [["t"]], create_missing=True)
        injector.crash_at("journal.after_append")
        with pytest.raises(SimulatedCrash):
            queuing.append_sequenced(universe, [(world, 1, [b"b", b"c"])], [["t", "t"]])
        (u,) = aosp("status", *store.args("--json", "-u", store.universe)).json()["universes"]
        assert (u["log_head"], u["log_queued"], u["log_queued_more"]) == (1, 2, False)
        assert (
            "log 1  queued 2"
            in aosp("status", *store.args("--once", "-u", store.universe)).out.decode()
        )
        assert queuing.settle_log(universe) == 3
    finally:
        engine.close()
    (u,) = aosp("status", *store.args("--json", "-u", store.universe)).json()["universes"]
    assert (u["log_head"], u["log_queued"]) == (3, 0)


def test_status_never_writes(store: Store) -> None:
    _enqueue(store, WorldId.parse(store.world), 2)
    before = _files(store.data_dir)
    for args in (["--json"], ["--once"], []):
        assert aosp("status", *store.args(*args)).code == 0
    assert _files(store.data_dir) == before


def test_status_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = aosp("status", "--data-dir", str(missing), "--json")
    assert result.code == 3, result.err
    assert "--data-dir" in result.one_line_error()
    assert not missing.exists()


def test_a_world_without_its_universe_is_a_usage_error(store: Store) -> None:
    result = aosp("status", *store.args("-w", store.world))
    assert result.code == 2 and "--world needs --universe" in result.one_line_error()


def test_status_on_a_real_cluster_ages_the_oldest_pending_item(
    fdb_cluster: FdbCluster, tmp_path: Path
) -> None:
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    plane = open_plane(engine, LocalObjectStore(tmp_path / "objects"))
    universe = UniverseId.new()
    world, quiet = WorldId.new(), WorldId.new()
    plane.create_world(universe, world, handle="busy")
    plane.enqueue(universe, world, DomainEventIngress("test/Cli@1", cbor.encode(1)))
    plane.create_world(universe, quiet)
    view = aosp(
        "status",
        "--kv",
        fdb_cluster.url,
        "--objects",
        plane.objects.url,
        "-u",
        str(universe),
        "--json",
    ).json()
    (u,) = view["universes"]
    assert [r["world"] for r in u["busiest"]] == [str(world), str(quiet)]
    busy = u["busiest"][0]
    assert (busy["handle"], busy["pending"], busy["ready"]) == ("busy", 1, True)
    age = busy["oldest_pending_age_seconds"]
    assert isinstance(age, float) and 0 <= age < 300
    assert u["oldest_pending_age_seconds"] == age
    assert u["busiest"][1]["oldest_pending_age_seconds"] is None


def test_an_interval_without_the_live_view_is_a_usage_error(store: Store) -> None:
    for mode in ("--once", "--json"):
        result = aosp("status", *store.args(mode, "--interval", "5"))
        assert result.code == 2, result.err
        assert "--interval paces the live view" in result.one_line_error()


def test_on_a_terminal_the_view_refreshes_until_interrupted(store: Store, tmp_path: Path) -> None:
    """Through a pseudo-terminal: the screen is redrawn with each reading (synchronised on
    the output, never on a sleep), and Ctrl-C (SIGINT) ends it with exit 0 -- also when
    the view was started with SIGINT ignored, as a non-interactive shell starts its
    background jobs (Python then installs no handler of its own: three suites run that way
    waited on a view Ctrl-C did not stop)."""
    leader, follower = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k != "AOSP_DATA_DIR"}
    environment["PYTHONPATH"] = str(ROOT)
    errors = tmp_path / "stderr"
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the child inherits
    try:
        with open(errors, "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "aosp", "status", *store.args("--interval", "0.05")],
                stdout=follower,
                stderr=stderr,
                env=environment,
            )
    finally:
        signal.signal(signal.SIGINT, ignored)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while seen.count(CLEAR_SCREEN.encode()) < 3:
            ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
            try:
                chunk = os.read(leader, 65536) if ready else b""
            except OSError:  # the terminal's other side closed: the view ended
                chunk = b""
            assert chunk, f"the view ended early: {seen[-500:]!r} {errors.read_text()!r}"
            seen += chunk
        process.send_signal(signal.SIGINT)
        # A terminal keeps reading: the view's last output (and its exit's flush) must not
        # block on a full pseudo-terminal.
        while time.monotonic() < deadline + 120:
            ready, _, _ = select.select([leader], [], [], 1.0)
            try:
                chunk = os.read(leader, 65536) if ready else b""
            except OSError:  # closed: the view ended
                break
            seen += chunk
            if not chunk and process.poll() is not None:
                break
        code = process.wait(timeout=120)
        assert code == 0, f"exit {code}: {errors.read_text()!r}"
    finally:
        process.kill()
        process.wait()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert f"universe {store.universe[:8]}" in text and "Ctrl-C to stop" in text
