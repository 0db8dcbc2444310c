"""What the torture's checks find of orphan collection: a final clean pass collects what
the killed processes left, and no referenced object (an acknowledged attachment, a body
the CAS metadata names) was deleted meanwhile."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.torture.evidence import Evidence
from conformance.torture.reads import read_page, read_rows
from conformance.torture.workload import attachment
from persistence.errors import PersistError
from persistence.fdbtuple import unpack
from persistence.futures import drive
from persistence.ids import Hash, UniverseId, WorldId
from persistence.keyspace import UniverseKeys
from persistence.plane import Plane, cas_collection
from persistence.plane.cas_collection import CasCollection
from persistence.protocols import cas_bodies
from segments.collect import SegmentCollection, collect_world


@dataclass(frozen=True, slots=True)
class OrphanTally:
    """What the final clean collection pass found: what the killed processes left."""

    cas: CasCollection
    segments: SegmentCollection
    dooms: int
    """Dooms left after it: of collectors killed (or failing) between their decision and
    its end, standing until their lease runs out, and deleted ones kept while they settle
    (``cas_bodies.SETTLE_SECONDS``, if the protocol keeps them)."""


def collect_orphans(
    plane: Plane,
    universe: UniverseId,
    worlds: tuple[WorldId, ...],
    grace: float,
    violations: list[str],
) -> OrphanTally | None:
    """A clean collection pass once every process is dead, on a clock ``grace`` ahead (as
    if it ran that much later: every pin a killed put left has expired), then a dry run:
    nothing may be left collectable -- every orphan is gone but those under another
    collector's doom. ``None`` (and a violation) if a pass fails."""
    grace_ns = round(grace * cas_bodies.NS)

    def later() -> int:
        return plane.clock() + grace_ns

    try:
        cas = cas_collection.collect(plane.engine, plane.objects, universe, later, grace)
        segments = SegmentCollection()
        for world in worlds:
            segments += collect_world(plane, universe, world)
        left = cas_collection.collect(
            plane.engine, plane.objects, universe, later, grace, dry_run=True
        )
        left_segments = SegmentCollection()
        for world in worlds:
            left_segments += collect_world(plane, universe, world, dry_run=True)
        dooms = sum(1 for _ in read_rows(plane, *UniverseKeys(universe).cas_dooms()))
    except PersistError as exc:
        violations.append(f"orphans: the final collection failed: {exc!r}")
        return None
    if left.collected or left_segments.collected or left_segments.markers_cleared:
        violations.append(
            f"orphans: after the final collection {left.collected} CAS bodies, "
            f"{left_segments.collected} segment objects and {left_segments.markers_cleared} "
            "finished export markers are still collectable"
        )
    return OrphanTally(cas, segments, dooms)


def check_attachments(
    plane: Plane, universe: UniverseId, evidence: Evidence, violations: list[str]
) -> None:
    """No referenced object deleted: every acknowledged attachment put returned the hash of
    its bytes, and reads back as exactly those bytes (``get`` verifies the body against the
    hash), whatever the collectors did meanwhile."""
    for (index, height), ack in sorted(evidence.attachments.items()):
        data = attachment(index, height)
        name = f"attachment of world {index} at height {height} ({ack.hash.hex[:16]})"
        if ack.hash != Hash.of(data):
            violations.append(
                f"orphans: the put of the {name} returned a hash that is not its bytes' "
                f"({Hash.of(data).hex[:16]})"
            )
            continue
        try:
            stored = plane.get(universe, ack.hash)
        except PersistError as exc:
            violations.append(f"orphans: the acknowledged {name} is unreadable: {exc!r}")
            continue
        if stored != data:
            violations.append(f"orphans: the acknowledged {name} reads back other bytes")


def check_cas_bodies(plane: Plane, universe: UniverseId, violations: list[str]) -> None:
    """No CAS metadata of the run's universe names a missing body, or one that does not
    hash to its key (``get`` verifies), whatever the collectors deleted."""
    keys = UniverseKeys(universe)
    begin, end = keys.cas_meta_range()
    prefix = len(begin) - 1
    while rows := drive(read_page(plane.engine, begin, end)):
        for key, _ in rows:
            (digest,) = unpack(key, prefix)
            hash = Hash(digest)  # type: ignore[arg-type]
            try:
                plane.get(universe, hash)
            except PersistError as exc:
                violations.append(f"orphans: the CAS body {hash.hex[:16]} is unreadable: {exc!r}")
        begin = rows[-1][0] + b"\x00"
