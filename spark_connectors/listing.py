"""Which segments a scan reads: from a plane's segment index (authoritative: exactly the
segments restore would use) or by listing the object store (every segment object, checked
per world for gaps and overlaps). Both give :class:`SegmentRef` values: small, picklable
descriptions that travel to Spark tasks instead of clients or listings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby

from persistence import kv
from persistence.errors import (
    Corruption,
    DamagedJournalEntry,
    MissingJournalEntry,
    Validation,
    WorldNotFound,
)
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.objects import ObjectStore
from persistence.plane import Plane
from persistence.protocols import journal, segment_index
from persistence.protocols.segment_index import audit
from segments.inputs import require

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
    error: str | None = None
    """Why heights ``start..end`` cannot be read (a damaged index record, a gap): reading
    this ref fails, or gives one error row in skip mode."""


@dataclass(frozen=True, slots=True)
class Selection:
    """Which universes and worlds to list (empty: all), a height window (inclusive) and the
    record kinds to produce (empty: all; a listing does not look at kinds)."""

    universes: frozenset[str] = frozenset()
    worlds: frozenset[str] = frozenset()
    min_height: int | None = None
    max_height: int | None = None
    kinds: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("universes", "worlds", "kinds"):
            values = getattr(self, name)
            if not isinstance(values, frozenset) or not all(isinstance(v, str) for v in values):
                raise Validation(f"Selection.{name}", "a frozenset of strings")
        for name in ("min_height", "max_height"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise Validation(f"Selection.{name}", f"None or an integer >= 0, not {value!r}")

    def wants(self, ref: SegmentRef) -> bool:
        """Whether the segment may hold selected rows."""
        return (
            (not self.universes or ref.universe in self.universes)
            and (not self.worlds or ref.world in self.worlds)
            and (self.min_height is None or ref.end >= self.min_height)
            and (self.max_height is None or ref.start <= self.max_height)
        )


def from_index(plane: Plane, selection: Selection) -> list[SegmentRef]:
    """The indexed segments of the selected worlds, in (universe, world, height) order.

    Each world's index is checked to tile heights from 1 to its cold-through height, and the
    hot journal to go on from there: every record that is damaged, overlaps or follows a gap
    (and heights after the last record that neither a segment nor the hot journal holds, up
    to the next height the hot journal does hold) becomes a ref with ``error`` set, so no
    height is ever silently left out of a scan."""
    require(plane, Plane, "plane")
    require(selection, Selection, "selection")
    refs: list[SegmentRef] = []
    for universe, world in selected_worlds(plane, selection):
        refs.extend(_world_refs(plane, universe, world))
    return [r for r in refs if selection.wants(r)]


def selected_worlds(plane: Plane, selection: Selection) -> Iterator[tuple[UniverseId, WorldId]]:
    """The (universe, world) pairs ``selection`` names, or every one the store has; a
    world is named in every selected universe (one that does not have it reads nothing)."""
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
            yield universe, world


def index_refs(plane: Plane, universe: UniverseId, world: WorldId) -> tuple[list[SegmentRef], int]:
    """The refs of one world's segment index, from height 1 -- a good record's segment, or
    for a damaged record, an overlap or a gap, the heights no good record holds with the
    error -- and the height the index covers through (the highest end a record claims)."""
    u, w = str(universe), str(world)
    refs: list[SegmentRef] = []
    covered = 0
    for entry in audit(plane.engine, universe, world):
        record = entry.record
        if record is None or entry.error is not None:
            # The heights no good record holds: from the end of coverage (a gap's start;
            # an overlap's heights below it are read from the record that holds them).
            start = covered + 1
            end = max(start, entry.key_end if record is None else record.end)
            key = "" if record is None else record.object_key
            refs.append(SegmentRef(u, w, start, end, key, 0, error=str(entry.error)))
        else:
            refs.append(
                SegmentRef(
                    u, w, record.start, record.end, record.object_key, record.byte_size,
                    record.checksum,
                )
            )  # fmt: skip
        covered = max(covered, entry.key_end if record is None else record.end)
    return refs, covered


def index_page(
    plane: Plane, universe: UniverseId, world: WorldId, first: int, limit: int
) -> list[tuple[int, int, int]] | None:
    """``(start, end, byte_size)`` of up to ``limit`` of the world's segments ending at or
    after height ``first``, in height order, read strictly (each record checked to continue
    the one before it); ``None`` if one is damaged (:func:`index_refs` then says where)."""
    keys = UniverseKeys(universe)
    try:
        records = kv.run(
            plane.engine, lambda tr: segment_index.read_segments(tr, keys, world, first, limit)
        )
    except Corruption:
        return None
    return [(r.start, r.end, r.byte_size) for r in records]


def _world_refs(plane: Plane, universe: UniverseId, world: WorldId) -> Iterator[SegmentRef]:
    """:func:`index_refs`, then a ref with an error if the hot journal does not go on
    where the index ends (see :func:`from_index`)."""
    refs, covered = index_refs(plane, universe, world)
    yield from refs
    try:
        plane.read_hot(universe, world, covered + 1, 1)
    except WorldNotFound:
        if covered:  # segments indexed for a world that does not exist: fail the listing
            raise
        # a selected world that this universe does not have: nothing to read
    except DamagedJournalEntry:
        pass  # the hot journal goes on where the index ends: not this source's to read
    except MissingJournalEntry as exc:  # the hot journal does not go on where the index ends
        # The unread heights run to the next one the hot journal holds (or the head): one
        # error ref covers them all, so none is left out silently.
        last = hole_end(plane, universe, world, exc.height, plane.head(universe, world))
        problem = f"{exc}, and no segment holds it (the index ends at {covered})"
        u, w = str(universe), str(world)
        yield SegmentRef(u, w, covered + 1, max(last, exc.height), "", 0, error=problem)


def hole_end(plane: Plane, universe: UniverseId, world: WorldId, missing: int, last: int) -> int:
    """The last height of the run of missing hot heights that starts at ``missing``: below
    the next height up to ``last`` the hot journal holds (``last`` if none), found in one
    read (a head damaged to 10**15 is not 10**15 reads)."""
    keys = WorldKeys(universe, world)
    return drive(journal.next_entry_height(plane.engine, keys, missing + 1, last)) - 1


def from_objects(objects: ObjectStore, selection: Selection) -> list[SegmentRef]:
    """Every segment object of the selected worlds, checked per world: heights tile from
    1 without gap or overlap. Raises :class:`SegmentListingError` naming what is wrong."""
    if not isinstance(objects, ObjectStore):
        raise Validation("objects", f"an ObjectStore, not {type(objects).__name__}")
    require(selection, Selection, "selection")
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
