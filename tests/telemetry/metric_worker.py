"""Runs a small workload under an OpenTelemetry SDK meter provider with an in-memory reader
(in its own process, so the global provider does not leak into other tests) and prints
every data point as JSON (``{"points": [{name, unit, attributes, value}], "body_put_twice":
{outcome: n}}``, the second what the two puts of one body counted).

The workload: a world created, an append, one that fails on a moved head, a CAS body put
twice (the second a hit), two items enqueued, a commit failing once with 1020 and retried,
a snapshot of 50 bytes committed (its CAS put inside it), and the status gauges observed
for that world and for another universe's."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, fdb_errors
from persistence.errors import HeadAdvanced
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.workers import gauges
from segments import open_plane


def main() -> None:
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    injector = FaultInjector()
    plane = open_plane(FaultyEngine(MemoryEngine(), injector), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"a" * 10, b"b" * 20])
    with contextlib.suppress(HeadAdvanced):
        plane.append_batch(u, w, 0, [b"late"])
    before = _cas_puts(reader)
    plane.put_verified(u, b"body")
    plane.put_verified(u, b"body")
    after = _cas_puts(reader)
    injector.fail_commit(1, fdb_errors.NOT_COMMITTED)
    plane.enqueue_batch(u, w, [DomainEventIngress("test/Metric@1", cbor.encode(n)) for n in (1, 2)])
    plane.snapshot_commit(u, w, b"s" * 50, height=2, logical_time_ns=0)  # puts it: nested
    other, w2 = UniverseId.new(), WorldId.new()
    plane.create_world(other, w2)
    plane.enqueue(other, w2, DomainEventIngress("test/Metric@1", cbor.encode(3)))
    gauges.observe(plane, u, lambda: [w])
    gauges.observe(plane, other, lambda: [w2])  # a second universe, through the same gauges
    points: list[dict[str, Any]] = []
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if isinstance(point, NumberDataPoint):
                        value: Any = point.value
                    else:  # the duration histogram's
                        value = {
                            "count": point.count,
                            "sum": point.sum,
                            "bounds": list(getattr(point, "explicit_bounds", [])),
                        }
                    points.append(
                        {
                            "scope": scope.scope.name,
                            "name": metric.name,
                            "unit": metric.unit,
                            "attributes": dict(point.attributes or {}),
                            "value": value,
                        }
                    )
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    print(json.dumps({"points": points, "body_put_twice": delta}))


def _cas_puts(reader: InMemoryMetricReader) -> dict[str, int]:
    """``aos.cas.puts`` so far, by outcome."""
    counts: dict[str, int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "aos.cas.puts":
                    for point in metric.data.data_points:
                        if isinstance(point, NumberDataPoint):
                            outcome = str((point.attributes or {})["aos.cas.outcome"])
                            counts[outcome] = int(point.value)
    return counts


if __name__ == "__main__":
    main()
