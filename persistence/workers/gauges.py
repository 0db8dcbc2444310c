"""OpenTelemetry observable gauges of what ``aosp status`` shows, for a host or worker to
export beside the plane's other metrics (:mod:`persistence.metrics`).

:func:`observe` registers them for the worlds a host names (its own, typically; call it
once per universe). At each collection the first gauge read reads every world's status (one
snapshot-read transaction per world: :mod:`persistence.protocols.status`, never a write or
a conflict) and the other gauges of that collection reuse it. Per world (``aos.universe``,
``aos.world``):

* ``aos.inbox.backlog`` (``{item}``): items after the cursor, counted up to the cap (1,000 by
  default: the gauge flattens there);
* ``aos.inbox.oldest_pending_age`` (``s``): how long the oldest of them has waited, where
  commit versions keep time (FoundationDB); not observed elsewhere;
* ``aos.journal.hot_entries`` (``{entry}``): journal entries above the last segment;
* ``aos.export.in_flight`` (``{export}``): 1 while an export marker stands, else 0;
* ``aos.inbox.compaction_marks`` (``{mark}``): consumed marks written and not yet acted on.

Per universe (``aos.universe``): ``aos.inbox.ready_worlds`` (``{world}``),
``aos.cas.dooms`` (``{body}``, CAS bodies awaiting deletion) and ``aos.log.queued``
(``{record}``, records of committed sequenced appends waiting for a universe log position:
one that stays names a writer that stopped before settling, ``Plane.settle_log``).

Prometheus, for one: install the SDK's ``MeterProvider`` with
``opentelemetry.exporter.prometheus.PrometheusMetricReader`` and serve
``prometheus_client``'s endpoint (docs/operations.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.metrics import METER_NAME
from persistence.plane import Plane
from persistence.protocols.status import UniverseStatus, WorldStatus, universe_status, world_status

REUSE_SECONDS: Final = 1.0
"""How long one reading of the store serves the gauges of a collection."""

WORLD_GAUGES: Final = {
    "aos.inbox.backlog": ("{item}", "Inbox items after the cursor (counted up to the cap)"),
    "aos.inbox.oldest_pending_age": ("s", "Age of the oldest pending inbox item"),
    "aos.journal.hot_entries": ("{entry}", "Journal entries above the last segment"),
    "aos.export.in_flight": ("{export}", "1 while a segment export is in flight"),
    "aos.inbox.compaction_marks": ("{mark}", "Consumed marks not yet acted on"),
}
UNIVERSE_GAUGES: Final = {
    "aos.inbox.ready_worlds": ("{world}", "Worlds with a ready mark"),
    "aos.cas.dooms": ("{body}", "CAS bodies awaiting deletion"),
    "aos.log.queued": ("{record}", "Log records waiting for a position (up to the cap)"),
}


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading of the watched worlds and their universe."""

    at: float
    worlds: dict[WorldId, WorldStatus]
    universe: UniverseStatus


class Gauges:
    """The watched worlds of one universe, read for the gauges."""

    def __init__(
        self,
        plane: Plane,
        universe: UniverseId,
        worlds: Callable[[], Iterable[WorldId]],
        cap: int,
    ) -> None:
        self.plane, self.universe, self.worlds, self.cap = plane, universe, worlds, cap
        self._lock = threading.Lock()
        self._reading: Reading | None = None
        self._failure: tuple[float, Exception] | None = None

    def reading(self) -> Reading:
        """The store's figures: read again once the last reading (or failure to read) is
        older than :data:`REUSE_SECONDS`, so that the gauges of one collection share one
        reading however long it takes; a failure is raised to each of them."""
        with self._lock:
            now = time.monotonic()
            if self._failure is not None and now - self._failure[0] <= REUSE_SECONDS:
                raise self._failure[1]
            if self._reading is not None and now - self._reading.at <= REUSE_SECONDS:
                return self._reading
            engine = self.plane.engine
            try:
                statuses = {
                    w: drive(world_status(engine, WorldKeys(self.universe, w), self.cap))
                    for w in self.worlds()
                }
                totals = drive(universe_status(engine, UniverseKeys(self.universe), self.cap))
            except Exception as exc:
                self._failure = (time.monotonic(), exc)
                raise
            self._failure = None
            self._reading = Reading(time.monotonic(), statuses, totals)
            return self._reading

    def world_values(self, name: str) -> Iterator[tuple[float, dict[str, str]]]:
        """The values of world gauge ``name``, with their attributes."""
        per_second = self.plane.engine.versions_per_second
        for world, status in self.reading().worlds.items():
            attributes = {"aos.universe": str(self.universe), "aos.world": str(world)}
            if name == "aos.inbox.backlog":
                yield status.pending.value, attributes
            elif name == "aos.inbox.oldest_pending_age":
                versions = status.pending_age_versions()
                if versions is not None and per_second is not None:
                    yield versions / per_second, attributes
            elif name == "aos.journal.hot_entries":
                yield status.hot_entries, attributes
            elif name == "aos.export.in_flight":
                yield int(status.export is not None), attributes
            elif name == "aos.inbox.compaction_marks":
                yield status.consumed_marks.value, attributes

    def universe_values(self, name: str) -> Iterator[tuple[float, dict[str, str]]]:
        """The value of universe gauge ``name``, with its attribute."""
        totals = self.reading().universe
        count = {
            "aos.inbox.ready_worlds": totals.ready_worlds,
            "aos.cas.dooms": totals.dooms,
            "aos.log.queued": totals.log_queued,
        }[name]
        yield count.value, {"aos.universe": str(self.universe)}


_watched: dict[int, list[Gauges]] = {}
"""The watched universes of each meter provider (by ``id``): its gauges are registered
once, and each observes every universe watched through it."""
_watched_lock = threading.Lock()


def observe(
    plane: Plane,
    universe: UniverseId,
    worlds: Callable[[], Iterable[WorldId]],
    *,
    cap: int = 1_000,
    meter_provider: Any = None,
) -> Gauges:
    """Watch ``universe`` and the worlds ``worlds()`` names at each collection, through
    ``meter_provider`` (the global one by default): the first call for a provider registers
    the gauges, later calls add their universe to them. Counts stop at ``cap`` (pending
    items are read to be counted: the cap bounds a collection's cost). Needs
    ``opentelemetry-api`` (the ``otel`` extra)."""
    from opentelemetry import metrics
    from opentelemetry.metrics import CallbackOptions, Observation

    chosen = meter_provider or metrics.get_meter_provider()
    gauges = Gauges(plane, universe, worlds, cap)
    with _watched_lock:
        watched = _watched.get(id(chosen))
        if watched is not None:
            watched.append(gauges)
            return gauges
        watched = _watched[id(chosen)] = [gauges]
    meter = chosen.get_meter(METER_NAME)

    def callback(
        values: Callable[[Gauges, str], Iterator[tuple[float, dict[str, str]]]], name: str
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe_all(options: CallbackOptions) -> Iterable[Observation]:
            del options
            with _watched_lock:
                every = list(watched)
            return [Observation(v, a) for g in every for v, a in values(g, name)]

        return observe_all

    for name, (unit, description) in WORLD_GAUGES.items():
        meter.create_observable_gauge(
            name, [callback(Gauges.world_values, name)], unit=unit, description=description
        )
    for name, (unit, description) in UNIVERSE_GAUGES.items():
        meter.create_observable_gauge(
            name, [callback(Gauges.universe_values, name)], unit=unit, description=description
        )
    return gauges
