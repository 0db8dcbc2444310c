"""fsck sees what a FoundationDB cluster sees (issue #35): the engine's check reads the
cluster's status document; unavailability and missing data are problems, a cluster that is
healing is not, and a document that does not say is never taken as healthy."""

from __future__ import annotations

import time
from typing import Any

import pytest

from aosp.fsck import Fsck
from backends.kv.fdb import status_problems
from backends.objects.memory import MemoryObjectStore
from persistence.ids import UniverseId, WorldId
from segments import open_plane
from tests.fdb_cluster import FdbCluster, clear_keyspace


def _status(available: bool = True, state: dict[str, Any] | None = None) -> dict[str, Any]:
    data = {"state": state or {"healthy": True, "min_replicas_remaining": 1, "name": "healthy"}}
    return {
        "client": {
            "database_status": {"available": available, "healthy": available},
            "messages": []
            if available
            else [
                {
                    "name": "no_cluster_controller",
                    "description": "Unable to locate a cluster controller.",
                }
            ],
        },
        "cluster": {"data": data},
    }


def test_a_healthy_cluster_has_no_problem() -> None:
    assert status_problems(_status()) == []


@pytest.mark.parametrize(
    "name", ["healing", "initializing", "healthy_repartitioning", "optimizing_team_collections"]
)
def test_a_cluster_moving_data_it_still_has_is_not_damaged(name: str) -> None:
    state = {"healthy": False, "min_replicas_remaining": 1, "name": name, "description": name}
    assert status_problems(_status(state=state)) == []


def test_an_unavailable_database_is_a_problem_naming_why() -> None:
    (problem,) = status_problems(_status(available=False)) or [""]
    assert "unavailable" in problem and "cluster controller" in problem


@pytest.mark.parametrize(
    "state",
    [
        {"name": "missing_data", "description": "No replicas remain of some data"},
        {"name": "healing", "min_replicas_remaining": 0, "description": "Only one replica"},
    ],
)
def test_missing_data_is_a_problem(state: dict[str, Any]) -> None:
    (problem,) = status_problems(_status(state=state)) or [""]
    assert "data is missing" in problem and state["description"] in problem


@pytest.mark.parametrize(
    "document",
    [{}, {"client": {}}, {"client": {"database_status": {"available": True}}}],
    ids=["empty", "no-database-status", "no-data-state"],
)
def test_a_document_that_does_not_say_is_not_a_check(document: object) -> None:
    """An incomplete status (a cluster starting) checks nothing: fsck does not count it."""
    assert status_problems(document) is None


def test_a_document_that_is_not_a_status_is_a_problem() -> None:
    assert status_problems([]) == ["the cluster's status document is not an object"]


def test_fsck_checks_a_real_cluster_through_its_status(fdb_cluster: FdbCluster) -> None:
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    deadline = time.monotonic() + 60
    while (problems := engine.integrity_check()) is None:  # until the status is complete
        assert time.monotonic() < deadline, "the cluster's status stayed incomplete for 60 s"
        time.sleep(0.2)
    assert problems == []
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"on a cluster"])
    report = Fsck(plane).run()
    assert report.ok and report.checked["engine storage checks"] == 1
    assert [f for f in report.findings if f.area == "engine"] == []
