"""Shared fixtures: the engines every contract test runs on."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from backends.kv import fdb as fdb_backend
from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.fdb import FdbEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from persistence.kv import Engine
from tests.engines.fake_fdb import make_fake_fdb
from tests.fdb_cluster import FdbCluster, clear_keyspace, fdb_cluster
from tests.objects.conftest import moto_s3, seaweedfs_s3

# Property tests draw the same examples on every run (a deterministic suite), with no time
# limit per example (Hypothesis's 200 ms deadline fails a test whose example a busy machine
# happened to slow); set HYPOTHESIS_PROFILE=search to explore new ones.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("search")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

# session-scoped servers, for every test package
__all__ = ["fdb_cluster", "moto_s3", "seaweedfs_s3"]

ENGINE_KINDS = ["memory", "sqlite", "faulty-memory", "fdb-adapter", "fdb"]
"""``faulty-memory`` injects no faults unless a test asks: it checks the wrapper is transparent.
``fdb-adapter`` is the FoundationDB engine over a fake ``fdb`` module built on the memory
engine: it catches misuse of the binding's API. ``fdb`` is a real FoundationDB 7.3 cluster
(:mod:`tests.fdb_cluster`), its keyspace emptied for each test."""


def make_engine(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    """A fresh, empty engine of ``kind``."""
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    if kind == "fdb":
        cluster: FdbCluster = request.getfixturevalue("fdb_cluster")
        engine = cluster.engine()
        clear_keyspace(engine)
        return engine
    if kind == "memory":
        return MemoryEngine()
    if kind == "sqlite":
        return SqliteEngine(tmp_path / "kv.db")
    if kind == "faulty-memory":
        return FaultyEngine(MemoryEngine(), FaultInjector(seed=1))
    if kind == "fdb-adapter":
        monkeypatch.setattr(fdb_backend, "_fdb", None)
        monkeypatch.setitem(sys.modules, "fdb", make_fake_fdb(MemoryEngine()))
        monkeypatch.delenv("FDB_CLUSTER_FILE", raising=False)
        return FdbEngine()
    raise ValueError(kind)


@pytest.fixture(params=ENGINE_KINDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A fresh, empty engine of each kind: every test that asks runs on all of them."""
    eng = make_engine(request.param, request, tmp_path)
    yield eng
    eng.close()


# ------------------------------------------------ the quick profile: -m "not slow"

SLOW_PATHS = (
    "tests/spark/",  # every test drives a SparkSession (~6 s to start, then jobs)
    "tests/packaging/",  # builds the wheel and installs it into fresh environments
    "tests/conformance/test_torture.py",  # 24 s SIGKILL tortures
    "tests/conformance/test_server_kills.py",  # kills and restarts fdbserver processes
)
"""Files and folders whose every test is ``slow``; single slow tests carry the mark."""

SLOW_UNMARKED_SECONDS = 15.0
"""A test not marked ``slow`` whose call takes longer is named in the summary: the quick
profile stays quick only if such tests are marked. (Setup is not counted: the first test on
a session's FoundationDB cluster pays for starting it.)"""

_slow_unmarked: dict[str, float] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix().startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "slow" not in report.keywords:
        _slow_unmarked[report.nodeid] = _slow_unmarked.get(report.nodeid, 0.0) + report.duration


# ------------------------------------------------ how many tests ran on a real FoundationDB

CLUSTER_FIXTURES = frozenset({"fdb_cluster", "cluster3"})
"""Fixtures that start a real FoundationDB cluster (``tests.fdb_cluster``)."""

_on_a_cluster: dict[str, str] = {}
"""Outcome of each test that used a real cluster (the first phase that did not pass, else
``passed``)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    request = getattr(item, "_request", None)  # fixtures asked for with getfixturevalue too
    used = set(getattr(item, "fixturenames", ())) | set(getattr(request, "_fixture_defs", ()))
    decisive = report.when == "call" or report.outcome != "passed"
    so_far = _on_a_cluster.get(item.nodeid, "passed")
    if decisive and so_far == "passed" and used & CLUSTER_FIXTURES:
        _on_a_cluster[item.nodeid] = report.outcome
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many tests ran on a real FoundationDB cluster, and how they ended; and the tests
    that took long without the ``slow`` mark."""
    for nodeid, seconds in sorted(_slow_unmarked.items(), key=lambda kv: -kv[1]):
        if seconds > SLOW_UNMARKED_SECONDS:
            terminalreporter.write_line(f"not marked slow but took {seconds:.1f} s: {nodeid}")
    if _on_a_cluster:
        counts = Counter(_on_a_cluster.values())
        terminalreporter.write_line(
            f"on a real FoundationDB cluster: {counts['passed']} passed, "
            f"{counts['failed']} failed, {counts['skipped']} skipped"
        )
