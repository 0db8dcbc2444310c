"""The oracle's snapshots (Protocol E): commits, indexing and promotion, with their checks
in the plane's order, and the active baseline."""

from __future__ import annotations

from collections.abc import Sequence

from conformance.model_core import ModelCore
from conformance.model_values import BaselineEntry, ModelWorld, SnapshotEntry
from persistence import cbor
from persistence.errors import (
    BaselineRegression,
    NotFound,
    ReceiptHorizonFence,
    RootIncomplete,
    SnapshotMismatch,
    Validation,
)
from persistence.ids import Hash, UniverseId, WorldId
from persistence.plane import SnapshotOutcome
from persistence.records import SnapshotRecord


class SnapshotModel(ModelCore):
    """Each world's snapshot index and active baseline, as the plane's contracts state them."""

    def snapshot_commit(
        self,
        universe: UniverseId,
        world: WorldId,
        snapshot_bytes: bytes,
        *,
        height: int,
        logical_time_ns: int,
        manifest: Sequence[Hash] = (),
        receipt_horizon_height: int | None = None,
        promote_baseline: bool = False,
    ) -> tuple[SnapshotRecord, SnapshotOutcome]:
        """Protocol E. Every check runs before the snapshot and its manifest go to CAS, so a
        refused commit stores nothing: when promoting the fence first, then (see
        :meth:`_plan`) world, height, index and non-regression, then, when promoting, root
        completeness of the listed manifest blobs (``RootIncomplete``). Then the blobs are
        put and, all or nothing, the index + ``snapshot`` record and, when promoting, the
        baseline + ``baseline_snapshot`` record are written."""
        self._check_height(height, "height")
        manifest_bytes = cbor.encode([h.digest for h in manifest])
        record = SnapshotRecord(
            Hash.of(snapshot_bytes),
            height,
            logical_time_ns,
            Hash.of(manifest_bytes),
            receipt_horizon_height,
        )
        if promote_baseline:
            self._check_fence(record)
        state = self._world(universe, world)
        indexed, promoted = self._plan(universe, state, record, promote_baseline, refs_in_cas=False)
        if promote_baseline:
            # The snapshot and manifest blobs are put next: only the listed blobs must exist.
            self._check_root(universe, record, manifest)
        self.put_verified(universe, snapshot_bytes)
        self.put_verified(universe, manifest_bytes)
        self._apply(state, record, indexed, promoted)
        return record, SnapshotOutcome(indexed, promoted)

    def index_snapshot(self, universe: UniverseId, world: WorldId, record: SnapshotRecord) -> None:
        """Index an already stored snapshot (no promotion; ``NotFound`` unless its snapshot
        and manifest blobs are in the universe's CAS)."""
        state = self._world(universe, world)
        indexed, _ = self._plan(universe, state, record, False, refs_in_cas=True)
        self._apply(state, record, indexed, False)

    def _plan(
        self,
        universe: UniverseId,
        state: ModelWorld,
        record: SnapshotRecord,
        promote: bool,
        *,
        refs_in_cas: bool,
    ) -> tuple[bool, bool]:
        """Protocol E's checks on an existing world, in the plane's order: ``record`` at or
        below the head, (with ``refs_in_cas``) its snapshot and manifest in CAS, no other
        record indexed at its height and, if ``promote``, no regression. Returns whether
        ``record`` must be indexed and promoted (``False`` where it already is)."""
        if record.height > state.head:
            raise Validation(
                "snapshot.height", f"{record.height} is above the journal head {state.head}"
            )
        if refs_in_cas:
            for ref, what in (
                (record.snapshot_ref, "snapshot"),
                (record.manifest_hash, "manifest"),
            ):
                if not self.has(universe, ref):
                    raise NotFound(f"{what} {ref} is not in the CAS of universe {universe}")
        existing = state.snapshots.get(record.height)
        if existing is not None and existing != record:
            raise SnapshotMismatch(
                record.height, str(existing.snapshot_ref), str(record.snapshot_ref)
            )
        return existing is None, promote and self._check_promotion(state, record)

    @staticmethod
    def _apply(state: ModelWorld, record: SnapshotRecord, indexed: bool, promoted: bool) -> None:
        """Write what :meth:`_plan` decided, as one transaction: index, baseline, journal."""
        if indexed:
            state.snapshots[record.height] = record
            state.journal.append(SnapshotEntry(record))
        if promoted:
            state.baseline = record
            state.journal.append(BaselineEntry(record))

    @staticmethod
    def _check_fence(record: SnapshotRecord) -> None:
        if record.receipt_horizon_height != record.height:
            raise ReceiptHorizonFence(record.height, record.receipt_horizon_height)

    def _check_root(
        self, universe: UniverseId, record: SnapshotRecord, manifest: Sequence[Hash] | None
    ) -> None:
        """Root completeness: ``RootIncomplete`` naming the first blob of ``record`` that
        ``universe`` lacks. With the caller's ``manifest`` (its blobs are about to be put)
        only the listed blobs count; with ``None`` the snapshot blob, then the manifest blob,
        then each blob the stored manifest lists."""
        if manifest is None:
            self._require(universe, record, record.snapshot_ref, "snapshot_ref")
            manifest = self._read_manifest(universe, record)
        for index, blob in enumerate(manifest):
            self._require(universe, record, blob, f"manifest[{index}]")

    def _require(
        self, universe: UniverseId, record: SnapshotRecord, blob: Hash, named_by: str
    ) -> None:
        if not self.has(universe, blob):
            raise RootIncomplete(record.height, named_by, blob.hex, universe)

    def _read_manifest(self, universe: UniverseId, record: SnapshotRecord) -> list[Hash]:
        """The blobs the stored manifest of ``record`` lists (``RootIncomplete`` if it is
        not stored, ``Validation`` if it is not canonical CBOR of a list of sha256 digests)."""
        self._require(universe, record, record.manifest_hash, "manifest_hash")
        try:
            digests = cbor.decode(self.get(universe, record.manifest_hash))
        except cbor.NotCanonical as exc:
            raise Validation("record.manifest_hash", f"not canonical CBOR: {exc}") from None
        if not isinstance(digests, list) or not all(
            isinstance(d, bytes) and len(d) == 32 for d in digests
        ):
            raise Validation("record.manifest_hash", "not a list of sha256 digests")
        return [Hash(d) for d in digests]

    @staticmethod
    def _check_promotion(state: ModelWorld, record: SnapshotRecord) -> bool:
        """Whether promoting ``record`` changes the baseline (raises if it may not)."""
        baseline = state.active()
        if baseline == record:
            return False
        if baseline.height > record.height:
            raise BaselineRegression(baseline.height, record.height)
        if baseline.height == record.height:
            raise SnapshotMismatch(
                record.height, str(baseline.snapshot_ref), str(record.snapshot_ref)
            )
        return True

    def active_baseline(self, universe: UniverseId, world: WorldId) -> SnapshotRecord:
        """The active baseline."""
        return self._world(universe, world).active()

    def promote_baseline(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Promote the indexed ``record`` (a no-op if it already is the baseline).

        Fence first (``ReceiptHorizonFence``), then root completeness in the universe's CAS
        (``RootIncomplete``, also for a missing world), then ``NotFound`` unless ``record``
        is the record indexed at its height (also for a missing world), then
        non-regression."""
        self._check_fence(record)
        self._check_root(universe, record, None)
        state = self.worlds.get((universe, world))
        if state is None or state.snapshots.get(record.height) != record:
            raise NotFound(f"snapshot {record.snapshot_ref} is not indexed at {record.height}")
        _, promoted = self._plan(universe, state, record, True, refs_in_cas=False)
        self._apply(state, record, False, promoted)

    def list_snapshots(self, universe: UniverseId, world: WorldId) -> list[SnapshotRecord]:
        """Every indexed snapshot, by height."""
        state = self._world(universe, world)
        return [state.snapshots[height] for height in sorted(state.snapshots)]
