"""Protocol E: the immutable snapshot index, the active baseline and its promotion fence."""

from __future__ import annotations

from dataclasses import dataclass

from persistence import kv
from persistence.errors import (
    BaselineRegression,
    NotFound,
    ReceiptHorizonFence,
    SnapshotMismatch,
    Validation,
)
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import calls
from persistence.plane.calls import Call
from persistence.plane.journal import append_at, read_head
from persistence.records import (
    BaselineSnapshotJournalRecord,
    CallRecord,
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
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, promote: bool, call: Call
) -> SnapshotOutcome:
    """Protocol E steps 2-6 (the snapshot bytes are already in CAS).

    Index at the height (same record again: no-op; a different one: ``SnapshotMismatch``),
    append a ``snapshot`` journal record, and if ``promote``: check the receipt-horizon
    fence and non-regression, write the baseline and append ``baseline_snapshot``.
    All in one transaction, so index, baseline and journal never disagree. A retry whose
    earlier attempt committed reports what that attempt did (its call record)."""
    if promote:
        check_fence(record)
    done = calls.replayed(tr, keys, call)
    if done is not None:
        return SnapshotOutcome(bool(done.indexed), bool(done.promoted))
    head = read_head(tr, keys)
    existing = read_snapshot(tr, keys, record.height)
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
        tr.set(keys.snapshot(record.height), record.to_cbor())
        entries.append(SnapshotJournalRecord.of(record).to_cbor())
    elif existing != record:
        raise SnapshotMismatch(record.height, str(existing.snapshot_ref), str(record.snapshot_ref))
    promoted = promote and _promote(tr, keys, record, entries)
    if entries:
        append_at(tr, keys, head, entries)
        calls.record(tr, keys, call, CallRecord("snapshot", indexed=indexed, promoted=promoted))
    return SnapshotOutcome(indexed, promoted)


def _promote(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, entries: list[bytes]
) -> bool:
    """Make ``record`` the baseline; ``False`` if it already was."""
    baseline = read_baseline(tr, keys)
    if baseline == record:
        return False
    if baseline.height > record.height:
        raise BaselineRegression(baseline.height, record.height)
    if baseline.height == record.height:
        raise SnapshotMismatch(record.height, str(baseline.snapshot_ref), str(record.snapshot_ref))
    tr.set(keys.baseline(), record.to_cbor())
    entries.append(BaselineSnapshotJournalRecord.of(record).to_cbor())
    return True


@kv.transactional
def promote_baseline(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, call: Call
) -> bool:
    """Promote an already indexed snapshot; ``False`` if it already was the baseline before
    this call. A retry whose earlier attempt committed reports that attempt's promotion,
    even if a newer baseline has been promoted since."""
    check_fence(record)
    done = calls.replayed(tr, keys, call)
    if done is not None:
        return bool(done.promoted)
    if read_snapshot(tr, keys, record.height) != record:
        raise NotFound(f"snapshot {record.snapshot_ref} is not indexed at height {record.height}")
    entries: list[bytes] = []
    promoted = _promote(tr, keys, record, entries)
    if entries:
        append_at(tr, keys, read_head(tr, keys), entries)
        calls.record(tr, keys, call, CallRecord("promote", promoted=True))
    return promoted


@kv.transactional
def list_snapshots(tr: kv.Transaction, keys: WorldKeys) -> list[SnapshotRecord]:
    """Every indexed snapshot of the world, by height."""
    read_head(tr, keys)
    return [
        decode_record(SnapshotRecord, value, "snapshot record")
        for _, value in tr.get_range(*keys.snapshots())
    ]
