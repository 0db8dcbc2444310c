"""Protocol E: the immutable snapshot index, the active baseline and its promotion fence."""

from __future__ import annotations

from dataclasses import dataclass, replace

from persistence import kv
from persistence.errors import (
    BaselineRegression,
    NotFound,
    ReceiptHorizonFence,
    SnapshotMismatch,
    Validation,
)
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane.journal import append_at, read_head
from persistence.records import (
    BaselineSnapshotJournalRecord,
    SnapshotJournalRecord,
    SnapshotRecord,
    decode_record,
)


@dataclass(frozen=True, slots=True)
class SnapshotOutcome:
    """What a snapshot commit changed (``False`` where an earlier attempt already had)."""

    indexed: bool
    promoted: bool


def read_baseline(tr: kv.Transaction, keys: WorldKeys) -> SnapshotRecord:
    """The active baseline; every world has one from creation."""
    raw = tr.get(keys.baseline())
    if raw is None:
        read_head(tr, keys)  # NotFound for a missing world
        raise NotFound(f"world {keys.world} has no active baseline")
    return decode_record(SnapshotRecord, raw, f"baseline of world {keys.world}")


def read_snapshot(tr: kv.Transaction, keys: WorldKeys, height: int) -> SnapshotRecord | None:
    """The snapshot indexed at ``height``, if any."""
    raw = tr.get(keys.snapshot(height))
    return None if raw is None else decode_record(SnapshotRecord, raw, f"snapshot {height}")


def check_fence(record: SnapshotRecord) -> None:
    """Promotion needs the receipt horizon to reach the snapshot's height exactly."""
    if record.receipt_horizon_height != record.height:
        raise ReceiptHorizonFence(record.height, record.receipt_horizon_height)


@kv.transactional
def commit_snapshot(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, promote: bool, batch_id: bytes
) -> SnapshotOutcome:
    """Protocol E steps 2-6 (the snapshot bytes are already in CAS).

    Index at the height (same record again: no-op; a different one: ``SnapshotMismatch``),
    append a ``snapshot`` journal record, and if ``promote``: check the receipt-horizon
    fence and non-regression, write the baseline and append ``baseline_snapshot``.
    All in one transaction, so index, baseline and journal never disagree.

    ``batch_id`` is unique per call (drawn outside the retry loop) and stored as the
    ``commit_id`` of what the call writes (index entry, baseline). A retry whose earlier
    attempt committed (``commit_unknown_result``) finds it there and reports what that
    attempt did, instead of "nothing changed"."""
    if promote:
        check_fence(record)
    head = read_head(tr, keys)
    existing = read_snapshot(tr, keys, record.height)
    if existing is not None and existing == record and existing.commit_id == batch_id:
        # This call's earlier attempt indexed it and, in the same transaction, promoted it
        # if asked: a baseline is always indexed, so it was not the baseline before.
        return SnapshotOutcome(True, promote)
    if record.height > head.height:
        raise Validation(
            "snapshot.height", f"{record.height} is above the journal head {head.height}"
        )
    universe = UniverseKeys(keys.universe)
    for ref, what in ((record.snapshot_ref, "snapshot"), (record.manifest_hash, "manifest")):
        if tr.get(universe.cas_meta(ref)) is None:
            raise NotFound(f"{what} {ref} is not in the CAS of universe {keys.universe}")
    entries: list[bytes] = []
    indexed = existing is None
    if existing is None:
        tr.set(keys.snapshot(record.height), replace(record, commit_id=batch_id).to_cbor())
        entries.append(SnapshotJournalRecord.of(record).to_cbor())
    elif existing != record:
        raise SnapshotMismatch(record.height, str(existing.snapshot_ref), str(record.snapshot_ref))
    promoted = False
    if promote:
        promoted = _promote(tr, keys, record, entries, batch_id)
    if entries:
        append_at(tr, keys, head, entries, batch_id)
    return SnapshotOutcome(indexed, promoted)


def _promote(
    tr: kv.Transaction,
    keys: WorldKeys,
    record: SnapshotRecord,
    entries: list[bytes],
    batch_id: bytes,
) -> bool:
    """Make ``record`` the baseline; whether this call (``batch_id``) did. A retry after an
    applied commit finds ``record`` already active with its own ``commit_id``: promoted.
    (If another promotion moved the baseline on between the attempts, the retry reports
    ``BaselineRegression``, as a retried append reports ``HeadAdvanced`` once the head has
    moved past its batch.)"""
    baseline = read_baseline(tr, keys)
    if baseline == record:
        return baseline.commit_id == batch_id
    if baseline.height > record.height:
        raise BaselineRegression(baseline.height, record.height)
    if baseline.height == record.height:
        raise SnapshotMismatch(record.height, str(baseline.snapshot_ref), str(record.snapshot_ref))
    tr.set(keys.baseline(), replace(record, commit_id=batch_id).to_cbor())
    entries.append(BaselineSnapshotJournalRecord.of(record).to_cbor())
    return True


@kv.transactional
def promote_baseline(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, batch_id: bytes
) -> bool:
    """Promote an already indexed snapshot; ``False`` if it already was the baseline before
    this call (``batch_id``, recognised on retry as in :func:`commit_snapshot`)."""
    check_fence(record)
    if read_snapshot(tr, keys, record.height) != record:
        raise NotFound(f"snapshot {record.snapshot_ref} is not indexed at height {record.height}")
    entries: list[bytes] = []
    promoted = _promote(tr, keys, record, entries, batch_id)
    if entries:
        append_at(tr, keys, read_head(tr, keys), entries, batch_id)
    return promoted


@kv.transactional
def list_snapshots(tr: kv.Transaction, keys: WorldKeys) -> list[SnapshotRecord]:
    """Every indexed snapshot of the world, by height."""
    read_head(tr, keys)
    return [
        decode_record(SnapshotRecord, value, "snapshot record")
        for _, value in tr.get_range(*keys.snapshots())
    ]
