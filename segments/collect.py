"""Collection of orphaned segment objects and finished export markers.

A segment object no index record names is an orphan once the index covers its first height:
exports plan from the end of the last indexed segment, and an exporter holding an older
marker cannot index anything (its marker transition finds the marker moved:
``ExportRaced``), so such an object can never become referenced. The index is read before
the objects are listed, so an object indexed in between is seen as referenced or as starting
above the coverage read. An unreferenced object starting above the coverage may be the upload
of an export in flight, or one the next export adopts: it is kept.

A marker in ``delete_finished`` is the end of a finished export, cleared by the next run of
the exporter; the collector clears it too (the same compare-and-swap transition).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols import export
from persistence.sizes import check_bool
from segments.format import segment_key
from segments.inputs import require, require_ids


@dataclass(slots=True)
class SegmentCollection:
    """What a collection pass over worlds' segment objects found and did."""

    listed: int = 0
    referenced: int = 0
    kept: int = 0
    """Unreferenced objects above the index's coverage: an export may still adopt them."""
    collected: int = 0
    collected_bytes: int = 0
    foreign: int = 0
    """Objects under a world's prefix whose key is not a segment key: left alone."""
    markers_cleared: int = 0

    def __iadd__(self, other: SegmentCollection) -> SegmentCollection:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def world_prefix(universe: UniverseId, world: WorldId) -> str:
    """The prefix of every segment object of ``world``."""
    return f"segments/{universe}/{world}/"


def collect_world(
    plane: Plane, universe: UniverseId, world: WorldId, *, dry_run: bool = False
) -> SegmentCollection:
    """Delete ``world``'s orphaned segment objects and clear its finished export marker
    (with ``dry_run``, only count them)."""
    require(plane, Plane, "plane")
    require_ids(universe, world)
    check_bool(dry_run, "dry_run")
    done = SegmentCollection()
    keys = WorldKeys(universe, world)
    marker = drive(export.read_marker(plane.engine, keys))
    if marker is not None and marker.state == "delete_finished":
        if dry_run:
            done.markers_cleared += 1
        else:
            with contextlib.suppress(export.ExportRaced):  # an exporter cleared or replaced it
                drive(export.transition(plane.engine, keys, plane.new_call(), marker, None))
                done.markers_cleared += 1
    indexed = plane.list_segments(universe, world)
    referenced = {record.object_key for record in indexed}
    covered = indexed[-1].end if indexed else 0
    prefix = world_prefix(universe, world)
    for info in plane.objects.list(prefix):
        done.listed += 1
        start = _start_of(universe, world, info.key[len(prefix) :])
        if start is None:
            done.foreign += 1
        elif info.key in referenced:
            done.referenced += 1
        elif start > covered:
            done.kept += 1
        else:
            if not dry_run:
                plane.objects.delete(info.key)
            done.collected += 1
            done.collected_bytes += info.size
    return done


def _start_of(universe: UniverseId, world: WorldId, name: str) -> int | None:
    """The first height of a canonical segment object's ``name``, else ``None``."""
    first, dash, rest = name.partition("-")
    last = rest.removesuffix(".log")
    if not (dash and first.isdigit() and last.isdigit() and first.isascii() and last.isascii()):
        return None
    start, end = int(first), int(last)
    if not 1 <= start <= end or segment_key(universe, world, start, end) != (
        world_prefix(universe, world) + name
    ):
        return None
    return start
