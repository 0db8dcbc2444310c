"""What the torture's checks find of what a restore stands on: each world's snapshots and
baselines (against the journal, the index and the acknowledgements, each body against a
replay), its segments, and restore against full replay."""

from __future__ import annotations

from collections import Counter

from conformance.torture.evidence import Evidence
from conformance.torture.reads import Journal
from persistence.errors import PersistError
from persistence.ids import UniverseId, WorldId
from persistence.journal_records import BaselineSnapshotJournalRecord, SnapshotJournalRecord
from persistence.kernel import ReferenceKernel
from persistence.plane import Plane
from persistence.records import SnapshotRecord
from segments.restore import full_replay, load_root, restore


def check_snapshots(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    journal: Journal,
    index: int,
    evidence: Evidence,
    violations: list[str],
) -> None:
    """The world's snapshot index, announcements and baselines against each other and
    against what the exporter acknowledged; then each body (:func:`_check_snapshot_bodies`)."""
    indexed = {record.height: record for record in plane.list_snapshots(universe, world)}
    for ack in evidence.snapshots:
        if ack.world != index:
            continue
        record = indexed.get(ack.height)
        if record is None or record.snapshot_ref != ack.ref:
            held = None if record is None else record.snapshot_ref
            violations.append(
                f"snapshot: world {index}: height {ack.height} was acknowledged as {ack.ref}, "
                f"the index holds {held}"
            )
    announced = Counter(record.height for _, record in journal.snapshots)
    for height, record in indexed.items():
        if height and announced[height] != 1:
            violations.append(
                f"snapshot: world {index}: indexed height {height} is announced "
                f"{announced[height]} times in the journal"
            )
        if record.height > journal.head:
            violations.append(f"snapshot: world {index}: indexed height {height} > head")
    for at, announcement in journal.snapshots:
        if indexed.get(announcement.height) != _as_record(announcement):
            violations.append(
                f"snapshot: world {index}: the announcement at {at} of height "
                f"{announcement.height} does not match the index"
            )
    previous = 0
    for at, promotion in journal.baselines:
        if promotion.height <= previous:
            violations.append(
                f"baseline: world {index}: promoted to {promotion.height} at journal height "
                f"{at}, after {previous}"
            )
        previous = max(previous, promotion.height)
    active = plane.active_baseline(universe, world)
    last = _as_record(journal.baselines[-1][1]) if journal.baselines else indexed.get(0)
    if active != last:
        violations.append(
            f"baseline: world {index}: active baseline at {active.height} is not the last "
            f"promoted one ({None if last is None else last.height})"
        )
    promotions = Counter(record.height for _, record in journal.baselines)
    reported_indexed: Counter[int] = Counter()
    reported_promoted: Counter[int] = Counter()
    for ack in evidence.snapshots:
        if ack.world != index:
            continue
        reported_indexed[ack.height] += ack.indexed
        reported_promoted[ack.height] += ack.promoted
        if ack.promoted and ack.height > active.height:
            violations.append(
                f"baseline: world {index}: promotion to {ack.height} was acknowledged, the "
                f"active baseline is at {active.height}"
            )
    for height, count in sorted(reported_indexed.items()):
        if count > 1:
            violations.append(
                f"snapshot: world {index}: {count} calls reported indexing height {height}"
            )
    for height, count in sorted(reported_promoted.items()):
        if count > promotions[height]:
            violations.append(
                f"baseline: world {index}: {count} calls reported promoting height {height}, "
                f"the journal records {promotions[height]} promotions to it"
            )
    _check_snapshot_bodies(plane, universe, journal, indexed, index, violations)


def _as_record(
    announcement: SnapshotJournalRecord | BaselineSnapshotJournalRecord,
) -> SnapshotRecord:
    return SnapshotRecord(
        announcement.snapshot_ref,
        announcement.height,
        announcement.logical_time_ns,
        announcement.manifest_hash,
        announcement.receipt_horizon_height,
    )


def _check_snapshot_bodies(
    plane: Plane,
    universe: UniverseId,
    journal: Journal,
    indexed: dict[int, SnapshotRecord],
    index: int,
    violations: list[str],
) -> None:
    """Each snapshot body is the reference kernel's state after the journal up to its
    height, replayed now from genesis: neither the snapshot nor the journal prefix it was
    taken from (since exported) has changed."""
    genesis = indexed.get(0)
    if genesis is None:
        violations.append(f"snapshot: world {index}: no genesis snapshot")
        return
    kernel = ReferenceKernel()
    try:
        kernel.hydrate(load_root(plane, universe, genesis))
        for height, entry in journal.rows:
            kernel.apply(height, entry)
            record = indexed.get(height)
            if record is not None and plane.get(universe, record.snapshot_ref) != kernel.snapshot():
                violations.append(
                    f"snapshot: world {index}: the body at height {height} differs from the "
                    "replay of the journal to that height"
                )
    except PersistError as exc:
        violations.append(f"snapshot: world {index}: replay failed: {exc!r}")


def check_segments(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    index: int,
    evidence: Evidence,
    violations: list[str],
) -> None:
    """The world's segments are contiguous from height 1, below the baseline, and indexed
    as the exporter acknowledged them."""
    segments = plane.list_segments(universe, world)
    baseline = plane.active_baseline(universe, world).height
    expected_start = 1
    for segment in segments:
        if segment.start != expected_start:
            violations.append(
                f"segments: world {index}: segment {segment.start}-{segment.end} follows "
                f"{expected_start - 1}"
            )
        if segment.end >= baseline:
            violations.append(
                f"segments: world {index}: segment {segment.start}-{segment.end} is not below "
                f"the baseline at {baseline}"
            )
        expected_start = segment.end + 1
    by_range = {(s.start, s.end): s.checksum for s in segments}
    for ack in evidence.segments:
        if ack.world == index and by_range.get((ack.start, ack.end)) != ack.checksum:
            violations.append(
                f"segments: world {index}: exported segment {ack.start}-{ack.end} is not "
                "indexed as acknowledged"
            )


def check_restore(
    plane: Plane, universe: UniverseId, world: WorldId, index: int, violations: list[str]
) -> None:
    """A restore of the world (baseline, segments, hot tail) equals its full replay."""
    try:
        restored = restore(plane, universe, world, ReferenceKernel())
        replayed = full_replay(plane, universe, world, ReferenceKernel())
    except PersistError as exc:
        violations.append(f"restore: world {index}: {exc!r}")
        return
    if restored.state != replayed.state:
        violations.append(
            f"restore: world {index}: restore from height {restored.from_height} differs from "
            "full replay"
        )
