"""Runs a small workload under an OpenTelemetry SDK meter provider with an in-memory reader
(in its own process, so the global provider does not leak into other tests) and prints
every data point as JSON: ``[{name, unit, attributes, value}]``.

The workload: a world created, an append, one that fails on a moved head, a CAS body put
twice (the second a hit), two items enqueued, a commit failing once with 1020 and retried,
and the status gauges of the world observed."""

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
from persistence.records import DomainEventIngress
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
    plane.put_verified(u, b"body")
    plane.put_verified(u, b"body")
    injector.fail_commit(1, fdb_errors.NOT_COMMITTED)
    plane.enqueue_batch(u, w, [DomainEventIngress("test/Metric@1", cbor.encode(n)) for n in (1, 2)])
    gauges.observe(plane, u, lambda: [w])
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
    print(json.dumps(points))


if __name__ == "__main__":
    main()
