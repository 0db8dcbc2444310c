"""Which segments a scan reads: from a plane's segment index (authoritative: exactly the
segments restore would use) or by listing the object store (every segment object, checked
per world for gaps and overlaps). Both give :class:`SegmentRef` values: small, picklable
descriptions that travel to Spark tasks instead of clients or listings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby

from persistence.errors import Corruption
from persistence.ids import UniverseId, WorldId
from persistence.objects import ObjectStore
from persistence.plane import Plane

SEGMENT_KEY = re.compile(
    r"segments/(?P<universe>[0-9a-f-]{36})/(?P<world>[0-9a-f-]{36})/"
    r"(?P<start>\d{20})-(?P<end>\d{20})\.log"
)
"""``segments/<universe>/<world>/<start>-<end>.log`` (see ``segments.format.segment_key``)."""


class SegmentListingError(Corruption):
    """The object store's segments of a world do not tile its history (a gap, an overlap,
    or an object under ``segments/`` that is not a segment); the message names them."""


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment object to read, and what the listing says it holds. ``checksum`` is the
    index's (``None`` when listed from the object store: the object's own trailer is then
    the only check)."""

    universe: str
    world: str
    start: int
    end: int
    object_key: str
    byte_size: int
    checksum: bytes | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    """Which universes and worlds to list (empty: all) and a height window (inclusive)."""

    universes: frozenset[str] = frozenset()
    worlds: frozenset[str] = frozenset()
    min_height: int | None = None
    max_height: int | None = None

    def wants(self, ref: SegmentRef) -> bool:
        """Whether the segment may hold selected rows."""
        return (
            (not self.universes or ref.universe in self.universes)
            and (not self.worlds or ref.world in self.worlds)
            and (self.min_height is None or ref.end >= self.min_height)
            and (self.max_height is None or ref.start <= self.max_height)
        )


def from_index(plane: Plane, selection: Selection) -> list[SegmentRef]:
    """The indexed segments of the selected worlds, in (universe, world, height) order."""
    refs: list[SegmentRef] = []
    universes = (
        [UniverseId.parse(u) for u in sorted(selection.universes)]
        if selection.universes
        else list(plane.universes())
    )
    for universe in universes:
        worlds = (
            [WorldId.parse(w) for w in sorted(selection.worlds)]
            if selection.worlds
            else list(plane.worlds(universe))
        )
        for world in worlds:
            refs.extend(
                SegmentRef(
                    str(universe),
                    str(world),
                    record.start,
                    record.end,
                    record.object_key,
                    record.byte_size,
                    record.checksum,
                )
                for record in plane.list_segments(universe, world)
            )
    return [r for r in refs if selection.wants(r)]


def from_objects(objects: ObjectStore, selection: Selection) -> list[SegmentRef]:
    """Every segment object of the selected worlds, checked per world: heights tile from
    1 without gap or overlap. Raises :class:`SegmentListingError` naming what is wrong."""
    prefixes = (
        [f"segments/{u}/" for u in sorted(selection.universes)]
        if selection.universes
        else ["segments/"]
    )
    refs = sorted(
        (ref for prefix in prefixes for ref in _parse_listing(objects.list(prefix))),
        key=lambda r: (r.universe, r.world, r.start),
    )
    for (_, world), group in groupby(refs, key=lambda r: (r.universe, r.world)):
        if selection.worlds and world not in selection.worlds:
            continue
        _check_tiling(world, list(group))
    return [r for r in refs if selection.wants(r)]


def _parse_listing(infos: Iterable[object]) -> Iterator[SegmentRef]:
    for info in infos:
        key, size = info.key, info.size  # type: ignore[attr-defined]
        match = SEGMENT_KEY.fullmatch(key)
        if match is None:
            raise SegmentListingError(f"object {key!r} under segments/ is not a segment")
        yield SegmentRef(
            match["universe"],
            match["world"],
            int(match["start"]),
            int(match["end"]),
            key,
            size,
        )


def _check_tiling(world: str, refs: list[SegmentRef]) -> None:
    covered, previous = 0, None
    for ref in refs:
        if ref.start <= covered:
            raise SegmentListingError(
                f"world {world}: segment {ref.object_key} overlaps {previous} "
                f"(heights {ref.start}-{min(ref.end, covered)} twice)"
            )
        if ref.start != covered + 1:
            raise SegmentListingError(
                f"world {world}: no segment holds heights {covered + 1}-{ref.start - 1} "
                f"(before {ref.object_key})"
            )
        covered, previous = ref.end, ref.object_key
