"""OpenTelemetry metrics (``persistence.metrics``, ``persistence.workers.gauges``) read back
through the SDK's in-memory reader, in a process of their own: the names, units and
attributes emitted, and that nothing is measured until a meter provider is installed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import metrics, telemetry
from persistence.errors import HeadAdvanced
from persistence.ids import UniverseId, WorldId
from segments import open_plane

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.telemetry.metric_worker"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture
def points(run: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = run["points"]
    return result


def _named(points: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [p for p in points if p["name"] == name]


def test_the_emitted_metric_names_and_units(points: list[dict[str, Any]]) -> None:
    assert {(p["name"], p["unit"]) for p in points} == {
        ("aos.client.operation.duration", "s"),
        ("aos.client.written", "By"),
        ("aos.transaction.errors", "{error}"),
        ("aos.cas.puts", "{put}"),
        ("aos.inbox.backlog", "{item}"),
        ("aos.journal.hot_entries", "{entry}"),
        ("aos.export.in_flight", "{export}"),
        ("aos.inbox.compaction_marks", "{mark}"),
        ("aos.inbox.ready_worlds", "{world}"),
        ("aos.cas.dooms", "{body}"),
        ("aos.log.queued", "{record}"),
    }  # no oldest-pending age: the memory engine's versions count commits
    assert {p["scope"] for p in points} == {metrics.METER_NAME}


def test_operations_are_timed_with_their_error_kind(points: list[dict[str, Any]]) -> None:
    appends = [
        p
        for p in _named(points, "aos.client.operation.duration")
        if p["attributes"]["aos.operation"] == "aos.journal.append"
    ]
    by_error = {p["attributes"].get("error.type"): p["value"]["count"] for p in appends}
    assert by_error == {None: 1, "conflict": 1}
    assert {tuple(p["value"]["bounds"]) for p in appends} == {metrics.DURATION_BUCKETS}
    written = {
        p["attributes"]["aos.operation"]: p["value"] for p in _named(points, "aos.client.written")
    }
    assert written["aos.journal.append"] == 30  # the refused append stored nothing
    assert written["aos.cas.put"] >= 2 * len(b"body")  # and the genesis state of the world
    assert written["aos.snapshot.commit"] == 50  # its CAS put is part of it, not counted again


def test_retries_cas_hits_and_gauges(run: dict[str, Any], points: list[dict[str, Any]]) -> None:
    (retried,) = _named(points, "aos.transaction.errors")
    assert retried["attributes"] == {"db.response.status_code": "1020", "aos.retried": True}
    assert retried["value"] == 1
    assert run["body_put_twice"] == {"stored": 1, "present": 1}  # the second put: a hit
    backlogs = sorted(p["value"] for p in _named(points, "aos.inbox.backlog"))
    assert backlogs == [1, 2]  # both universes' worlds, observed through one set of gauges
    for p in _named(points, "aos.inbox.backlog"):
        assert set(p["attributes"]) == {"aos.universe", "aos.world"}
    hot = max(p["value"] for p in _named(points, "aos.journal.hot_entries"))
    assert hot >= 2
    ready = _named(points, "aos.inbox.ready_worlds")
    assert [p["value"] for p in ready] == [1, 1] and set(ready[0]["attributes"]) == {"aos.universe"}


def test_nothing_is_measured_without_a_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not metrics.metering()  # this process never installs one
    calls: list[object] = []
    monkeypatch.setattr(metrics, "_instruments", lambda: calls.append(1))
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"a"])
    plane.put_verified(u, b"body")
    assert calls == []


def test_error_types_name_the_plane_kind_a_cancellation_or_internal() -> None:
    assert telemetry._error_type(HeadAdvanced(3, 4)) == "conflict"
    assert telemetry._error_type(asyncio.CancelledError()) == "cancelled"
    assert telemetry._error_type(KeyboardInterrupt()) == "cancelled"
    assert telemetry._error_type(ValueError("bug")) == "internal"
