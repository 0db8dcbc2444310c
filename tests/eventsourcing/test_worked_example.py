"""The worked example of docs/eventsourcing.md, as the doc runs it: the bank and its
statistics process application on SQLite and a local object directory, then the same code on
another store by changing two environment variables; a restart that resumes exactly once;
and the records the plane holds."""

from __future__ import annotations

import os
import re
from pathlib import Path
from unittest import mock
from uuid import UUID, uuid5

import pytest
from eventsourcing.system import SingleThreadedRunner
from eventsourcing.utils import get_topic

from aos_eventsourcing import PlaneApplicationRecorder, PlaneFactory
from aos_eventsourcing.codec import NAMESPACE
from aosp.cli import main as aosp_main
from persistence.ids import UniverseId, WorldId
from segments import open_plane
from tests.eventsourcing import bank
from tests.eventsourcing.bank import Bank, Ledger, Statistics, system
from tests.fdb_cluster import FdbCluster, clear_keyspace
from tests.objects.servers import S3Server

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "eventsourcing.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)
DOC_DIR = "/var/lib/bank"


def test_the_doc_shows_the_examples_code() -> None:
    assert Path(bank.__file__).read_text() in BLOCKS


def run_doc(env: dict[str, str], tmp_path: Path) -> None:
    """Run the doc's usage block with the store its variables name (in ``tmp_path``)."""
    (usage,) = [b for b in BLOCKS if "SingleThreadedRunner" in b and "import os" in b]
    code = usage.replace("from bank import", "from tests.eventsourcing.bank import")
    for name, value in env.items():
        code = re.sub(rf'os.environ\["{name}"\] = ".*"', f'os.environ["{name}"] = "{value}"', code)
    code = code.replace(DOC_DIR, str(tmp_path))
    with mock.patch.dict(os.environ):
        exec(compile(code, "docs/eventsourcing.md", "exec"), {})


def test_the_doc_runs_on_sqlite_then_on_another_store(tmp_path: Path) -> None:
    run_doc({}, tmp_path)
    assert (tmp_path / "aos.db").is_file()
    # the doc's two variables, pointed at another store
    run_doc({"AOSP_KV_URL": "memory://", "AOSP_OBJECTS_URL": "memory://"}, tmp_path)


def test_the_doc_runs_on_foundationdb_and_s3(
    fdb_cluster: FdbCluster, moto_s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The doc's two variables as the doc sets them: a FoundationDB cluster (the test
    session's) and an S3 bucket (moto's server)."""
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    engine.close()
    bucket = moto_s3.create_bucket()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_s3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_s3.secret_key)
    objects = f"s3://{bucket}/bank?endpoint_url={moto_s3.endpoint_url}&region={moto_s3.region}"
    run_doc({"AOSP_KV_URL": fdb_cluster.url, "AOSP_OBJECTS_URL": objects}, tmp_path)
    assert not (tmp_path / "aos.db").exists()


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        "PERSISTENCE_MODULE": "aos_eventsourcing",
        "AOSP_KV_URL": f"sqlite://{tmp_path}/aos.db",
        "AOSP_OBJECTS_URL": f"file://{tmp_path}/objects",
    }


def test_the_system_gives_the_same_results_on_both_stores(tmp_path: Path) -> None:
    sqlite = environment(tmp_path)
    memory = {**sqlite, "AOSP_KV_URL": "memory://", "AOSP_OBJECTS_URL": "memory://"}
    for env in (sqlite, memory):
        with SingleThreadedRunner[UUID](system, env=env) as runner:
            bank_app, statistics = runner.get(Bank), runner.get(Statistics)
            assert get_topic(type(bank_app.factory)) == get_topic(PlaneFactory)
            alice, bob = bank_app.open_account("Alice"), bank_app.open_account("Bob")
            bank_app.deposit(alice, 30)
            bank_app.deposit(bob, 12)
            bank_app.deposit(alice, 5)
            assert (bank_app.balance(alice), bank_app.balance(bob)) == (35, 12)
            assert statistics.ledger() == (47, 3)
            assert bank_app.recorder.max_notification_id() == 5
            assert statistics.recorder.max_tracking_id("Bank") == 5


def test_the_process_application_resumes_exactly_once_after_a_restart(tmp_path: Path) -> None:
    env = environment(tmp_path)
    with SingleThreadedRunner[UUID](system, env=env) as runner:
        alice = runner.get(Bank).open_account("Alice")
        runner.get(Bank).deposit(alice, 10)
        assert runner.get(Statistics).ledger() == (10, 1)
    # the bank goes on alone while the statistics application is down
    alone = Bank(env=env)
    alone.deposit(alice, 20)
    alone.deposit(alice, 30)
    alone.close()
    with SingleThreadedRunner[UUID](system, env=env) as runner:
        assert runner.get(Statistics).ledger() == (10, 1)
        runner.get(Bank).deposit(alice, 40)  # prompts it: it pulls from its tracking position
        assert runner.get(Statistics).ledger() == (100, 4)
    with SingleThreadedRunner[UUID](system, env=env) as runner:  # nothing is done twice
        runner.get(Bank).deposit(alice, 1)
        assert runner.get(Statistics).ledger() == (101, 5)
        assert runner.get(Bank).balance(alice) == 101

    # what the plane holds: a universe per application, a world per aggregate
    plane = open_plane(env["AOSP_KV_URL"], env["AOSP_OBJECTS_URL"], create=False)
    try:
        bank_universe = UniverseId(uuid5(NAMESPACE, "Bank"))
        statistics_universe = UniverseId(uuid5(NAMESPACE, "Statistics"))
        assert list(plane.worlds(bank_universe)) == [WorldId(alice)]
        assert plane.head(bank_universe, WorldId(alice)) == 6  # opened, 5 deposits
        assert plane.log_head(bank_universe) == 6
        assert plane.tracking_position(statistics_universe, "Bank") == 6
        assert list(plane.worlds(statistics_universe)) == [WorldId(Ledger.create_id())]
        assert plane.head(statistics_universe, WorldId(Ledger.create_id())) == 6
    finally:
        plane.engine.close()
        plane.objects.close()


def test_old_events_go_to_segments_and_read_back_through_the_recorder(tmp_path: Path) -> None:
    env = environment(tmp_path)
    with SingleThreadedRunner[UUID](system, env=env) as runner:
        bank_app = runner.get(Bank)
        alice = bank_app.open_account("Alice")
        for amount in (10, 20, 30, 40, 50):
            bank_app.deposit(alice, amount)
        recorder = bank_app.recorder
        assert isinstance(recorder, PlaneApplicationRecorder)
        assert recorder.set_cold_version(alice, 4) == 4  # the doc's step: versions 1-4
    store = ["--kv", env["AOSP_KV_URL"], "--objects", env["AOSP_OBJECTS_URL"]]
    assert aosp_main(["segments", "export", *store, "--target-entries", "2", "--quiet"]) == 0
    bank_universe, world = UniverseId(uuid5(NAMESPACE, "Bank")), WorldId(alice)
    plane = open_plane(env["AOSP_KV_URL"], env["AOSP_OBJECTS_URL"], create=False)
    try:
        assert [(s.start, s.end) for s in plane.list_segments(bank_universe, world)] == [
            (1, 2),
            (3, 4),
        ]
        assert [h for h, _ in plane.read_hot(bank_universe, world, 1, 10)] == []  # cold
        assert [h for h, _ in plane.read_hot(bank_universe, world, 5, 10)] == [5, 6]
    finally:
        plane.engine.close()
        plane.objects.close()
    assert list((tmp_path / "objects" / "segments").rglob("*.log"))
    with SingleThreadedRunner[UUID](system, env=env) as runner:  # reads stitch cold and hot
        bank_app = runner.get(Bank)
        assert bank_app.balance(alice) == 150
        versions = [e.originator_version for e in bank_app.recorder.select_events(alice)]
        assert versions == [1, 2, 3, 4, 5, 6]
        assert [n.id for n in bank_app.recorder.select_notifications(1, 10)] == [1, 2, 3, 4, 5, 6]
        bank_app.deposit(alice, 1)
        assert runner.get(Statistics).ledger() == (151, 6)


def test_snapshots_let_older_events_go_cold(tmp_path: Path) -> None:
    """``AOSP_COLD_AT_SNAPSHOTS``: a snapshot raises its aggregate's cold horizon, export
    moves what it summarizes to segments, and the repository (snapshot + hot events) and
    the recorder (every event, through the segments) read as before."""
    env = {**environment(tmp_path), "IS_SNAPSHOTTING_ENABLED": "y", "AOSP_COLD_AT_SNAPSHOTS": "y"}
    bank_app = Bank(env=env)
    alice = bank_app.open_account("Alice")
    for amount in (10, 20, 30):
        bank_app.deposit(alice, amount)
    bank_app.take_snapshot(alice)  # at version 4
    bank_app.deposit(alice, 40)
    bank_app.close()
    store = ["--kv", env["AOSP_KV_URL"], "--objects", env["AOSP_OBJECTS_URL"]]
    assert aosp_main(["segments", "export", *store, "--quiet"]) == 0
    bank_universe, world = UniverseId(uuid5(NAMESPACE, "Bank")), WorldId(alice)
    plane = open_plane(env["AOSP_KV_URL"], env["AOSP_OBJECTS_URL"], create=False)
    try:
        assert [(s.start, s.end) for s in plane.list_segments(bank_universe, world)] == [(1, 4)]
        assert [h for h, _ in plane.read_hot(bank_universe, world, 1, 10)] == []  # cold
        assert [h for h, _ in plane.read_hot(bank_universe, world, 5, 10)] == [5]
    finally:
        plane.engine.close()
        plane.objects.close()
    bank_app = Bank(env=env)
    try:
        assert bank_app.balance(alice) == 100
        versions = [e.originator_version for e in bank_app.recorder.select_events(alice)]
        assert versions == [1, 2, 3, 4, 5]
        assert bank_app.snapshots is not None
        assert [s.originator_version for s in bank_app.snapshots.recorder.select_events(alice)] == [
            4
        ]
    finally:
        bank_app.close()
    # without the variable, a snapshot lets nothing go cold
    plain = {**environment(tmp_path / "plain"), "IS_SNAPSHOTTING_ENABLED": "y"}
    (tmp_path / "plain").mkdir()
    bank_app = Bank(env=plain)
    bob = bank_app.open_account("Bob")
    bank_app.take_snapshot(bob)
    bank_app.close()
    plane = open_plane(plain["AOSP_KV_URL"], plain["AOSP_OBJECTS_URL"], create=False)
    try:
        assert plane.set_cold_horizon(bank_universe, WorldId(bob), 0) == 0
    finally:
        plane.engine.close()
        plane.objects.close()
