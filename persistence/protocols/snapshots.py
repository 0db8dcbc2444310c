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
from persistence.futures import Future
from persistence.journal_records import (
    BaselineSnapshotJournalRecord,
    JournalHead,
    SnapshotJournalRecord,
)
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.protocols import calls
from persistence.protocols.calls import Call
from persistence.protocols.checksums import Sealing
from persistence.protocols.journal import append_at, decode_head, read_head
from persistence.records import SnapshotRecord, decode_record


@dataclass(frozen=True, slots=True)
class SnapshotOutcome:
    """What a snapshot commit changed (``False`` where an earlier attempt already had)."""

    indexed: bool
    promoted: bool


async def read_baseline(tr: kv.Transaction, keys: WorldKeys) -> SnapshotRecord:
    """The active baseline; every world has one from creation."""
    raw = await tr.get(keys.baseline())
    if raw is None:
        await read_head(tr, keys)  # NotFound for a missing world
        raise NotFound(f"world {keys.world} has no active baseline")
    return decode_record(SnapshotRecord, raw, f"baseline of world {keys.world}")


async def read_snapshot(tr: kv.Transaction, keys: WorldKeys, height: int) -> SnapshotRecord | None:
    """The snapshot indexed at ``height``, if any."""
    return _snapshot(await tr.get(keys.snapshot(height)), height)


def _snapshot(raw: bytes | None, height: int) -> SnapshotRecord | None:
    return None if raw is None else decode_record(SnapshotRecord, raw, f"snapshot {height}")


def check_fence(record: SnapshotRecord) -> None:
    """Promotion needs the receipt horizon to reach the snapshot's height exactly."""
    if record.receipt_horizon_height != record.height:
        raise ReceiptHorizonFence(record.height, record.receipt_horizon_height)


def _plan_reads(
    tr: kv.Transaction,
    keys: WorldKeys,
    record: SnapshotRecord,
    promote: bool,
    *,
    refs_in_cas: bool,
) -> Future[list[bytes | None]]:
    """Issue every read :func:`_planned` checks, at once: the head, the snapshot indexed at
    ``record``'s height, (to ``promote``) the active baseline and (with ``refs_in_cas``)
    the metadata of ``record``'s snapshot and manifest blobs."""
    wanted = [keys.head(), keys.snapshot(record.height)]
    if promote:
        wanted.append(keys.baseline())
    if refs_in_cas:
        universe = UniverseKeys(keys.universe)
        wanted.extend(universe.cas_meta(ref) for ref in (record.snapshot_ref, record.manifest_hash))
    return tr.get_many(wanted)


def _planned(
    keys: WorldKeys,
    record: SnapshotRecord,
    promote: bool,
    values: list[bytes | None],
    *,
    refs_in_cas: bool,
) -> tuple[JournalHead, bool, bool]:
    """Protocol E's checks on what :func:`_plan_reads` read: the world exists, ``record``
    is at or below the head, (with ``refs_in_cas``) its snapshot and manifest are in the
    universe's CAS, no other record is indexed at its height and, if ``promote``, the
    baseline would not regress. Returns the head and whether ``record`` must be indexed and
    promoted (``False`` where it already is)."""
    head = decode_head(keys, values[0])
    if record.height > head.height:
        raise Validation(
            "snapshot.height", f"{record.height} is above the journal head {head.height}"
        )
    if refs_in_cas:
        refs = ((record.snapshot_ref, "snapshot"), (record.manifest_hash, "manifest"))
        for (ref, what), meta in zip(refs, values[-2:], strict=True):
            if meta is None:
                raise NotFound(f"{what} {ref} is not in the CAS of universe {keys.universe}")
    existing = _snapshot(values[1], record.height)
    if existing is not None and existing != record:
        raise SnapshotMismatch(record.height, str(existing.snapshot_ref), str(record.snapshot_ref))
    if not promote:
        return head, existing is None, False
    if values[2] is None:
        raise NotFound(f"world {keys.world} has no active baseline")
    baseline = decode_record(SnapshotRecord, values[2], f"baseline of world {keys.world}")
    if baseline == record:
        return head, existing is None, False
    if baseline.height > record.height:
        raise BaselineRegression(baseline.height, record.height)
    if baseline.height == record.height:
        raise SnapshotMismatch(record.height, str(baseline.snapshot_ref), str(record.snapshot_ref))
    return head, existing is None, True


@kv.transactional
async def check_commit(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, promote: bool
) -> None:
    """Protocol E's checks alone, read-only: the plane runs them before it puts the
    snapshot's blobs in CAS, so a commit that will be refused stores nothing. The commit
    runs them again in its own transaction (the store may move in between)."""
    if promote:
        check_fence(record)
    values = await _plan_reads(tr, keys, record, promote, refs_in_cas=False)  # blobs come after
    _planned(keys, record, promote, values, refs_in_cas=False)


@kv.transactional
async def commit_snapshot(
    tr: kv.Transaction,
    keys: WorldKeys,
    record: SnapshotRecord,
    promote: bool,
    call: Call,
    sealing: Sealing | None,
) -> SnapshotOutcome:
    """Protocol E steps 2-6 (the snapshot bytes are already in CAS).

    Index at the height (same record again: no-op; a different one: ``SnapshotMismatch``),
    append a ``snapshot`` journal record, and if ``promote``: check the receipt-horizon
    fence and non-regression, write the baseline and append ``baseline_snapshot``.
    All in one transaction, so index, baseline and journal never disagree (journal records
    sealed with ``sealing``, as the store's layout says). A retry whose earlier attempt
    committed reports what that attempt did (its call record)."""
    if promote:
        check_fence(record)
    opening = calls.begin(tr, keys, call)
    reads = _plan_reads(tr, keys, record, promote, refs_in_cas=True)  # a wave, with the call's
    done = await calls.replayed(opening)
    if done is not None:
        return SnapshotOutcome(bool(done.indexed), bool(done.promoted))
    head, indexed, promoted = _planned(keys, record, promote, await reads, refs_in_cas=True)
    entries: list[bytes] = []
    if indexed:
        tr.set(keys.snapshot(record.height), record.to_cbor())
        entries.append(SnapshotJournalRecord.of(record).to_cbor())
    if promoted:
        _promote(tr, keys, record, entries)
    if entries:
        append_at(tr, keys, head, entries, sealing)
        calls.record(opening, "snapshot", indexed=indexed, promoted=promoted)
    return SnapshotOutcome(indexed, promoted)


def _promote(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, entries: list[bytes]
) -> None:
    """Make ``record`` the baseline (checked by :func:`_plan`)."""
    tr.set(keys.baseline(), record.to_cbor())
    entries.append(BaselineSnapshotJournalRecord.of(record).to_cbor())


@kv.transactional
async def promote_baseline(
    tr: kv.Transaction, keys: WorldKeys, record: SnapshotRecord, call: Call, sealing: Sealing | None
) -> bool:
    """Promote an already indexed snapshot (its journal record sealed with ``sealing``);
    ``False`` if it already was the baseline before this call. A retry whose earlier
    attempt committed reports that attempt's promotion, even if a newer baseline has been
    promoted since."""
    check_fence(record)
    opening = calls.begin(tr, keys, call)
    reads = _plan_reads(tr, keys, record, True, refs_in_cas=False)  # a wave, with the call's
    done = await calls.replayed(opening)
    if done is not None:
        return bool(done.promoted)
    values = await reads
    if _snapshot(values[1], record.height) != record:
        raise NotFound(f"snapshot {record.snapshot_ref} is not indexed at height {record.height}")
    head, _, promoted = _planned(keys, record, True, values, refs_in_cas=False)
    if promoted:
        entries: list[bytes] = []
        _promote(tr, keys, record, entries)
        append_at(tr, keys, head, entries, sealing)
        calls.record(opening, "promote", promoted=True)
    return promoted


@kv.transactional
async def list_snapshots(tr: kv.Transaction, keys: WorldKeys) -> list[SnapshotRecord]:
    """Every indexed snapshot of the world, by height (``WorldNotFound`` if the world does
    not exist). One wave: the head with the index."""
    head = tr.get(keys.head())
    rows = tr.get_range(*keys.snapshots())
    decode_head(keys, await head)
    return [decode_record(SnapshotRecord, value, "snapshot record") for _, value in await rows]
