"""Plane operations emit OpenTelemetry spans with the operation, ids, sizes, row counts and
error kind; per-operation stats are collected while ``collect_stats`` is active."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import telemetry
from persistence.errors import HeadAdvanced
from persistence.ids import UniverseId, WorldId
from segments import open_plane

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spans() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.telemetry.span_worker"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def named(spans: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in spans["spans"] if s["name"] == name]


def test_append_span_carries_ids_and_sizes(spans: dict[str, Any]) -> None:
    ok, failed = named(spans, "aos.journal.append")
    assert ok["attributes"] == {
        "aos.universe": spans["universe"],
        "aos.world": spans["world"],
        "aos.entries": 3,
        "aos.bytes": 60,
    }
    assert not ok["error"]
    assert failed["error"] and failed["attributes"]["aos.error.kind"] == "conflict"


def test_read_span_counts_rows(spans: dict[str, Any]) -> None:
    (read,) = named(spans, "aos.journal.read_range")
    assert read["attributes"]["aos.rows"] == 3


def test_nested_operations_are_spans_too(spans: dict[str, Any]) -> None:
    names = [s["name"] for s in spans["spans"]]
    assert names.count("aos.cas.put") == 2  # genesis state and manifest
    assert "aos.world.create" in names


def test_stats_count_calls_errors_and_latency() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    with telemetry.collect_stats() as stats:
        plane.append_batch(u, w, 0, [b"x"])
        with pytest.raises(HeadAdvanced):
            plane.append_batch(u, w, 0, [b"y"])
        plane.head(u, w)
    plane.head(u, w)  # after the block: not counted
    report = stats.to_json()
    assert report["journal.append"]["calls"] == 2 and report["journal.append"]["errors"] == 1
    assert report["journal.head"]["calls"] == 1
    assert report["journal.append"]["max_ms"] >= report["journal.append"]["p50_ms"] > 0


def test_a_provider_installed_later_is_followed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.telemetry.span_worker", "late"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout) == ["aos.journal.append"]


def test_no_span_is_started_until_a_provider_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process installs no provider (span tests run in their own): spans would be
    OpenTelemetry's no-ops, so the tracer is never asked for one -- stats still count."""
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a tracer provider is installed in this process")

    class Refusing:
        def start_as_current_span(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("a span was started without a tracer provider")

    monkeypatch.setattr(telemetry, "_tracer", Refusing())
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    with telemetry.collect_stats() as stats:
        plane.append_batch(u, w, 0, [b"x"])
    assert stats.to_json()["journal.append"]["calls"] == 1
