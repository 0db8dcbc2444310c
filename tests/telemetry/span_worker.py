"""Runs plane operations under an OpenTelemetry SDK provider (in its own process, so the
global provider does not leak into other tests) and prints the finished spans as JSON.

With the argument ``late`` the provider is installed only after the world is created (no
provider yet: no spans), then one append runs (its span must be recorded)."""

from __future__ import annotations

import contextlib
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence.errors import HeadAdvanced
from persistence.ids import UniverseId, WorldId
from segments import open_plane


def _install() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def late() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    exporter = _install()
    plane.append_batch(u, w, 0, [b"a"])
    print(json.dumps([s.name for s in exporter.get_finished_spans()]))


def main() -> None:
    exporter = _install()
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"a" * 10, b"b" * 20, b"c" * 30])
    plane.read_range(u, w, 1, 10)
    with contextlib.suppress(HeadAdvanced):
        plane.append_batch(u, w, 0, [b"late"])
    print(
        json.dumps(
            {
                "universe": str(u),
                "world": str(w),
                "spans": [
                    {
                        "name": s.name,
                        "attributes": dict(s.attributes or {}),
                        "error": s.status.status_code.name == "ERROR",
                    }
                    for s in exporter.get_finished_spans()
                ],
            }
        )
    )


if __name__ == "__main__":
    late() if sys.argv[1:] == ["late"] else main()
