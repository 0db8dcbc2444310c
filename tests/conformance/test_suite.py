"""The conformance suite: CI runs the quick profile on the embedded backends and S3 servers,
FoundationDB when a cluster is reachable, and the suite catches deliberately broken backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from backends.objects.s3 import S3ObjectStore
from conformance.cases import PROFILES
from conformance.pytest_plugin import ConformanceTests
from conformance.runner import run_suite
from persistence import kv
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.plane import journal as journal_protocol
from persistence.records import InboxCursor
from tests.objects.servers import S3Server

QUICK = PROFILES["quick"]


def assert_all_pass(plane: Plane, name: str) -> None:
    report = run_suite(plane, QUICK, kv_url=name, objects_url=name)
    failed = {r.name: r.message for r in report.results if r.outcome != "passed"}
    assert not failed, failed
    assert report.count("passed") == len(report.results)


def test_quick_profile_memory_memory() -> None:
    assert_all_pass(Plane(MemoryEngine(), MemoryObjectStore()), "memory+memory")


def test_quick_profile_sqlite_local(tmp_path: Path) -> None:
    assert_all_pass(
        Plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects")),
        "sqlite+local",
    )


@pytest.mark.parametrize("server_name", ["moto", "seaweedfs"])
def test_quick_profile_sqlite_s3(
    server_name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server: S3Server = request.getfixturevalue(f"{server_name}_s3")
    client = server.client()
    bucket = server.create_bucket(client)
    try:
        objects = S3ObjectStore(bucket, "aos", client=client, multipart=server_name != "seaweedfs")
        plane = Plane(SqliteEngine(tmp_path / "aos.db"), objects)
        assert_all_pass(plane, f"sqlite+s3-{server_name}")
    finally:
        server.remove_bucket(bucket, client)


def test_quick_profile_foundationdb_when_reachable() -> None:
    cluster = os.environ.get("FDB_CLUSTER_FILE")
    if not cluster or not Path(cluster).is_file():
        pytest.skip("no FoundationDB cluster reachable (FDB_CLUSTER_FILE unset or unreadable)")
    from backends.kv.fdb import FdbEngine

    assert_all_pass(Plane(FdbEngine(cluster), MemoryObjectStore()), "fdb+memory")


class TestThroughThePytestPlugin(ConformanceTests):
    """A third party's use of the plugin, here with the memory backend."""

    @pytest.fixture
    def conformance_plane(self) -> Plane:
        return Plane(MemoryEngine(), MemoryObjectStore())


def aosp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "persistence.cli", *args],
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
    assert summary["passed"] == 2 and summary["ok"] is True
    suite = ET.parse(report_dir / "junit.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "0"


def test_cli_reports_an_unavailable_backend_as_skipped(tmp_path: Path) -> None:
    result = aosp("conformance", "--kv", "fdb:///no/such.cluster", "--report", str(tmp_path))
    assert result.returncode == 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["skipped"] == summary["cases"]
    assert "backend unavailable" in result.stdout


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
        kv.run(self.engine, lambda tr: tr.set(keys.inbox_cursor(), record))


class NonAtomicAppendPlane(Plane):
    """Broken: a batch is appended one entry per transaction, so concurrent batches mix."""

    def append_batch(self, universe: Any, world: Any, expected_head: int, entries: Any) -> int:
        keys = WorldKeys(universe, world)
        journal_protocol.append_batch(
            self.engine, keys, expected_head, [entries[0]], os.urandom(16)
        )
        for entry in entries[1:]:
            head = self.head(universe, world)
            journal_protocol.append_batch(self.engine, keys, head, [entry], os.urandom(16))
        return expected_head + 1


@pytest.mark.parametrize(
    ("make", "must_fail"),
    [
        (lambda: Plane(NoConflictEngine(), MemoryObjectStore()), "case2_journal_append_conflicts"),
        (
            lambda: BackwardsCursorPlane(MemoryEngine(), MemoryObjectStore()),
            "case4_cursor_and_drain_exactly_once",
        ),
        (
            lambda: NonAtomicAppendPlane(MemoryEngine(), MemoryObjectStore()),
            "case2_journal_append_conflicts",
        ),
    ],
    ids=["no-conflict-detection", "cursor-moves-backwards", "non-atomic-append"],
)
def test_the_suite_fails_broken_backends(make: Any, must_fail: str) -> None:
    report = run_suite(make(), QUICK, kv_url="mutant", objects_url="mutant")
    outcomes = {r.name: r.outcome for r in report.results}
    assert not report.ok
    assert outcomes[must_fail] in ("failed", "error"), outcomes
