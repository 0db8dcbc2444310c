"""The conformance suite: CI runs the quick profile on the embedded backends and S3 servers,
FoundationDB when a cluster is reachable, and the suite catches deliberately broken backends."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from backends.objects.s3 import S3ObjectStore
from conformance.context import PROFILES, Profile
from conformance.doors import DOORS
from conformance.pytest_plugin import ConformanceTests
from conformance.runner import run_suite
from conformance.torture.fleet import start_fork_server
from persistence import kv
from persistence.futures import drive
from persistence.ids import InboxSeq
from persistence.inbox_records import InboxCursor, InboxEnvelope, encode_inbox_item
from persistence.keyspace import WorldKeys
from persistence.kv import Engine
from persistence.plane import Plane
from persistence.protocols import inbox as inbox_protocol
from persistence.protocols import journal as journal_protocol
from persistence.protocols.calls import Call
from persistence.protocols.inbox import PendingEnqueue
from segments import open_plane
from segments.cold import ObjectStoreSegments
from tests.fdb_cluster import FdbCluster, clear_keyspace
from tests.objects.servers import S3Server

QUICK = PROFILES["quick"]
REACHING_THE_BUCKET = dataclasses.replace(
    QUICK,
    torture=dataclasses.replace(
        QUICK.torture,
        floors=(("attachments_acknowledged", 1), ("orphan_passes", 1)),
        max_seconds=120.0,
    ),
)
"""The quick profile, its torture going on (up to 120 s) until a worker's attachment put to
the object store was acknowledged, however slow the machine -- and an orphan collection
pass: a run past 6 s must have one (``orphan_collection_due``), and under three suites a
compactor was killed four times in 7 s before its first."""


FAULT_CASE = "faults1_commit_faults_and_crash_points"
TORTURE_CASE = "crash1_sigkill_torture"
SERVER_CASE = "crash2_server_kills"
"""Skipped without a way to kill the store's servers (tests/conformance/test_server_kills.py
runs it on a three-process cluster)."""


def assert_all_pass(
    plane: Plane,
    *,
    skipped: set[str],
    kv_url: str | None = None,
    objects_url: str | None = None,
    door: str = "blocking",
    profile: Profile = QUICK,
) -> dict[str, Any]:
    """Every case passes through ``door`` except ``skipped``, which must skip (saying why);
    returns the notes."""
    report = run_suite(
        plane,
        profile,
        kv_url=kv_url or plane.engine.url,
        objects_url=objects_url or plane.objects.url,
        door=door,
    )
    assert report.summary()["door"] == door
    outcomes = {r.name: r.outcome for r in report.results}
    failed = {r.name: r.message for r in report.results if r.outcome in ("failed", "error")}
    assert not failed, failed
    assert {name for name, outcome in outcomes.items() if outcome == "skipped"} == skipped
    assert all(r.message for r in report.results if r.outcome == "skipped")
    return {r.name: r.notes for r in report.results}


PLANE_CLASS = {"blocking": "Plane", "asyncio": "AsyncioDriven"}
"""The class of the planes each door's fault matrix runs (``conformance/doors.py``)."""


@pytest.mark.slow
@pytest.mark.parametrize("door", DOORS)
def test_quick_profile_memory_memory(door: str) -> None:
    notes = assert_all_pass(
        open_plane(MemoryEngine(), MemoryObjectStore()),
        skipped={TORTURE_CASE, SERVER_CASE},
        door=door,
    )
    assert notes[FAULT_CASE]["fault_matrix_runs"] > 200
    assert notes[FAULT_CASE]["fault_matrix_plane_class"] == PLANE_CLASS[door]


@pytest.mark.slow
@pytest.mark.parametrize("door", DOORS)
def test_quick_profile_sqlite_local(door: str, tmp_path: Path) -> None:
    plane = open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    notes = assert_all_pass(plane, skipped={FAULT_CASE, SERVER_CASE}, door=door)
    assert notes[TORTURE_CASE]["torture_kills"] >= 1
    assert notes[TORTURE_CASE]["torture_door"] == door  # the torture's processes used it


@pytest.mark.slow
@pytest.mark.parametrize("server_name", ["moto", "seaweedfs"])
def test_quick_profile_sqlite_s3(
    server_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server: S3Server = request.getfixturevalue(f"{server_name}_s3")
    client = server.client()
    bucket = server.create_bucket(client)
    # The crash torture's processes open the bucket by URL, with credentials from the
    # environment (the standard boto3 chain) as it is when they start: the fork server they
    # come from runs already (as after any earlier torture in this process), without them.
    start_fork_server()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    multipart = server_name != "seaweedfs"
    url = f"s3://{bucket}/aos?endpoint_url={server.endpoint_url}&region={server.region}"
    try:
        objects = S3ObjectStore(bucket, "aos", client=client, multipart=multipart)
        plane = open_plane(SqliteEngine(tmp_path / "aos.db"), objects)
        notes = assert_all_pass(
            plane,
            skipped={FAULT_CASE, SERVER_CASE},
            objects_url=url + ("" if multipart else "&multipart=0"),
            profile=REACHING_THE_BUCKET,
        )
        # The workers reached the bucket: the run went on until the exporter's attachment
        # puts were acknowledged. Without the credentials every put of theirs fails with
        # Backend (465 times in a 4 s run), retried, so the run's checks would still pass.
        assert notes[TORTURE_CASE]["torture_floors_unmet_at_the_cap"] == []
        assert notes[TORTURE_CASE]["torture_attachments_acknowledged"] >= 1
    finally:
        server.remove_bucket(bucket, client)


@pytest.mark.slow
@pytest.mark.parametrize("door", DOORS)
def test_quick_profile_foundationdb_local(
    door: str, fdb_cluster: FdbCluster, tmp_path: Path
) -> None:
    """Every case on a real FoundationDB 7.3 cluster: the fault case through ``faults+``,
    the SIGKILL torture with worker processes on the same cluster and a shared directory;
    through the asyncio door, the bindings' futures are awaited from the event loop."""
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    objects = LocalObjectStore(tmp_path / "objects")
    plane = open_plane(FaultyEngine(engine, FaultInjector()), objects)
    notes = assert_all_pass(
        plane,
        skipped={SERVER_CASE},
        kv_url="faults+" + fdb_cluster.url,
        objects_url=objects.url,
        door=door,
    )
    assert notes[FAULT_CASE]["fault_matrix_runs"] > 200
    assert notes[FAULT_CASE]["fault_matrix_interleaved_runs"] > 0
    assert notes[FAULT_CASE]["fault_matrix_plane_class"] == PLANE_CLASS[door]
    assert notes[TORTURE_CASE]["torture_kills"] >= 1
    assert notes[TORTURE_CASE]["torture_door"] == door


@pytest.mark.slow
def test_the_fault_matrix_runs_on_an_engine_wrapped_for_faults() -> None:
    """A ``FaultyEngine`` under test: the case wraps its inner engine with its own faults."""
    engine = FaultyEngine(MemoryEngine(), FaultInjector(seed=1, commit_fault_rate=0.5))
    report = run_suite(
        open_plane(engine, MemoryObjectStore()),
        QUICK,
        kv_url="memory://",
        objects_url="memory://",
        cases=[FAULT_CASE],
    )
    assert report.results[0].outcome == "passed", report.results[0].message
    assert engine.injector.commits < 10  # the case's runs did not go through this injector


class TestThroughThePytestPlugin(ConformanceTests):
    """A third party's use of the plugin, here with the memory backend."""

    @pytest.fixture
    def conformance_plane(self) -> Plane:
        return open_plane(MemoryEngine(), MemoryObjectStore())


def aosp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aosp", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_writes_junit_and_json(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    result = aosp(
        "conformance",
        "--report",
        str(report_dir),
        "--json",
        "--case",
        "case1_cas_put_get_has",
        "--case",
        "case2_journal_append_conflicts",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((report_dir / "summary.json").read_text())
    assert summary["passed"] == 2 and summary["ok"] is True and summary["door"] == "blocking"
    suite = ET.parse(report_dir / "junit.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "0"


def test_cli_runs_the_cases_through_the_asyncio_door(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    result = aosp(
        "conformance",
        "--door",
        "asyncio",
        "--report",
        str(report_dir),
        "--case",
        "case4_cursor_and_drain_exactly_once",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((report_dir / "summary.json").read_text())
    assert summary["passed"] == 1 and summary["door"] == "asyncio"
    properties = ET.parse(report_dir / "junit.xml").getroot().iter("property")
    assert {p.get("name"): p.get("value") for p in properties}["door"] == "asyncio"
    refused = aosp("conformance", "--door", "threads", "--report", str(report_dir))
    assert refused.returncode == 2 and "--door" in refused.stderr


def test_cli_reports_an_unavailable_backend_as_skipped(tmp_path: Path) -> None:
    result = aosp("conformance", "--kv", "fdb:///no/such.cluster", "--report", str(tmp_path))
    assert result.returncode == 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["skipped"] == summary["cases"]
    assert summary["ok"] is False  # nothing ran: not a pass
    assert "backend unavailable" in result.stdout
    assert "/no/such.cluster does not exist" in result.stdout


# --------------------------------------------------------------------------- mutants


class NoConflictEngine(MemoryEngine):
    """Broken: commits never detect conflicts (lost updates, double appends)."""

    def _commit(self, tr: Any) -> bytes | None:
        tr.read_ranges.clear()
        return super()._commit(tr)


class BackwardsCursorPlane(Plane):
    """Broken: the cursor is written without compare-and-swap, so it can move backwards."""

    def commit_cursor(self, universe: Any, world: Any, old_cursor: Any, new_cursor: Any) -> None:
        keys = WorldKeys(universe, world)
        record = InboxCursor(new_cursor).to_cbor()
        kv.run_sync(self.engine, lambda tr: tr.set(keys.inbox_cursor(), record))


class NonAtomicAppendPlane(Plane):
    """Broken: a batch is appended one entry per transaction, so concurrent batches mix."""

    def append_batch(self, universe: Any, world: Any, expected_head: int, entries: Any) -> int:
        keys = WorldKeys(universe, world)
        drive(
            journal_protocol.append_batch(
                self.engine, keys, expected_head, [entries[0]], Call.new(), self.sealing
            )
        )
        for entry in entries[1:]:
            head = self.head(universe, world)
            drive(
                journal_protocol.append_batch(
                    self.engine, keys, head, [entry], Call.new(), self.sealing
                )
            )
        return expected_head + 1


class RetryBlindEnqueuePlane(Plane):
    """Broken: idempotency keys are drawn inside the retry loop, so an enqueue whose commit
    applied but was reported unknown (1021) stores its items twice."""

    def enqueue_batch(
        self, universe: Any, world: Any, items: Any, *, idempotency_keys: Any = None
    ) -> list[InboxSeq]:
        keys = WorldKeys(universe, world)

        def attempt(tr: kv.Transaction) -> PendingEnqueue:
            envelopes = [InboxEnvelope(encode_inbox_item(i), os.urandom(16)) for i in items]
            stored = [(e.idempotency_key, e.to_cbor()) for e in envelopes]
            return drive(inbox_protocol.enqueue(tr, keys, stored))

        return drive(kv.run_sync(self.engine, attempt).seqs(len(items)))


def mutant(cls: type[Plane], engine: Engine | None = None) -> Plane:
    """A broken plane of class ``cls``, wired as :func:`segments.open_plane` wires one."""
    objects = MemoryObjectStore()
    return cls(engine or MemoryEngine(), objects, None, ObjectStoreSegments(objects))


class ForgetfulAppendPlane(Plane):
    """Broken: each attempt of an append draws a new call id, so a retry after an applied
    commit does not find its record (as a batch id stored in the head, overwritten by the
    next writer, would not)."""

    def append_batch(self, universe: Any, world: Any, expected_head: int, entries: Any) -> int:
        keys = WorldKeys(universe, world)

        def attempt(tr: kv.Transaction) -> int:
            return drive(
                journal_protocol.append_batch(
                    tr, keys, expected_head, list(entries), Call.new(), self.sealing
                )
            )

        return kv.run_sync(self.engine, attempt)


@pytest.mark.slow
def test_the_interleaving_mode_fails_an_append_that_forgets_its_call() -> None:
    report = run_suite(
        mutant(ForgetfulAppendPlane),
        QUICK,
        kv_url="mutant",
        objects_url="mutant",
        cases=[FAULT_CASE],
    )
    result = report.results[0]
    assert result.outcome == "failed", result
    assert "misreported outcome" in result.message and "HeadAdvanced" in result.message


def test_the_fault_matrix_fails_a_retry_blind_enqueue() -> None:
    plane = mutant(RetryBlindEnqueuePlane)
    report = run_suite(plane, QUICK, kv_url="mutant", objects_url="mutant", cases=[FAULT_CASE])
    result = report.results[0]
    assert result.outcome == "failed", result
    # The fault-free run's own re-enqueue of a caller's key inside the window already
    # catches it; otherwise the first 1021 or crash after an enqueue does.
    assert any(
        sign in result.message
        for sign in ("fault-free run", "1021 applied", "crash at inbox.after_enqueue")
    ), result.message


@pytest.mark.parametrize(
    ("make", "must_fail"),
    [
        (
            lambda: mutant(Plane, NoConflictEngine()),
            "case2_journal_append_conflicts",
        ),
        (
            lambda: mutant(BackwardsCursorPlane),
            "case4_cursor_and_drain_exactly_once",
        ),
        (
            lambda: mutant(NonAtomicAppendPlane),
            "case2_journal_append_conflicts",
        ),
    ],
    ids=["no-conflict-detection", "cursor-moves-backwards", "non-atomic-append"],
)
def test_the_suite_fails_broken_backends(make: Any, must_fail: str) -> None:
    report = run_suite(make(), QUICK, kv_url="mutant", objects_url="mutant", cases=[must_fail])
    outcomes = {r.name: r.outcome for r in report.results}
    assert not report.ok
    assert outcomes[must_fail] in ("failed", "error"), outcomes
