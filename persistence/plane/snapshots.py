"""The plane's snapshot operations (Protocol E): committing a snapshot (its blobs in CAS,
indexed, journaled, optionally promoted), promotion of an indexed one behind the
receipt-horizon fence and root completeness, the active baseline and the index."""

from __future__ import annotations

from collections.abc import Sequence

from persistence import cbor
from persistence.errors import NotFound, RootIncomplete, Validation
from persistence.ids import MAX_HEIGHT, Hash, UniverseId, WorldId, check_height, check_id
from persistence.plane.core import encoded, operation, world_keys
from persistence.plane.journal import JournalOperations
from persistence.protocols import snapshots
from persistence.protocols.snapshots import SnapshotOutcome
from persistence.records import SnapshotRecord
from persistence.sizes import MAX_ROW_LIMIT, check_bool, check_bytes, check_int, check_sequence


class SnapshotOperations(JournalOperations):
    """Snapshots and baselines."""

    @operation("snapshot.commit")
    async def snapshot_commit(
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
        """Protocol E: CAS-put the snapshot and its manifest, index, journal, and
        optionally promote (gated by the receipt-horizon fence and root completeness: every
        blob of ``manifest`` must be in the universe's CAS, else ``RootIncomplete``).

        Everything that can refuse the commit is checked before the blobs are put, so a
        refused commit stores nothing."""
        keys = world_keys(universe, world)
        check_bytes(snapshot_bytes, "snapshot_bytes")
        check_height(height, "height")
        check_int(logical_time_ns, "logical_time_ns", 0, MAX_HEIGHT)
        check_sequence(manifest, "manifest", 0, MAX_ROW_LIMIT)
        listed = [check_id(h, Hash, f"manifest[{i}]") for i, h in enumerate(manifest)]
        if receipt_horizon_height is not None:
            check_height(receipt_horizon_height, "receipt_horizon_height")
        check_bool(promote_baseline, "promote_baseline")
        manifest_bytes = cbor.encode([h.digest for h in listed])
        record = SnapshotRecord(
            Hash.of(snapshot_bytes),
            height,
            logical_time_ns,
            Hash.of(manifest_bytes),
            receipt_horizon_height,
        )
        await snapshots.check_commit(self.engine, keys, record, promote_baseline)
        if promote_baseline:
            await self.check_root(keys.universe, record, listed)
        await self.put_verified(universe, snapshot_bytes)
        await self.put_verified(universe, manifest_bytes)
        self.hooks.reached("snapshot.after_cas")
        outcome = await snapshots.commit_snapshot(
            self.engine,
            keys,
            record,
            promote_baseline,
            self.new_call(),
            await self.sealing(writing=True),
        )
        self.hooks.reached("snapshot.after_commit")
        return record, outcome

    @operation("snapshot.index")
    async def index_snapshot(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Index an already stored snapshot (no promotion)."""
        keys = world_keys(universe, world)
        encoded(record, (SnapshotRecord,), "record")
        await snapshots.commit_snapshot(
            self.engine, keys, record, False, self.new_call(), await self.sealing(writing=True)
        )

    @operation("baseline.read")
    async def active_baseline(self, universe: UniverseId, world: WorldId) -> SnapshotRecord:
        """The active baseline."""
        keys = world_keys(universe, world)
        return await self.transact(lambda tr: snapshots.read_baseline(tr, keys))

    @operation("baseline.promote")
    async def promote_baseline(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Promote an indexed snapshot: the receipt-horizon fence, non-regression and root
        completeness (its snapshot, manifest and every blob the manifest names are in the
        universe's CAS, else ``RootIncomplete`` naming the missing blob) are checked."""
        keys = world_keys(universe, world)
        encoded(record, (SnapshotRecord,), "record")
        snapshots.check_fence(record)
        await self.check_root(keys.universe, record, None)
        await snapshots.promote_baseline(
            self.engine, keys, record, self.new_call(), await self.sealing(writing=True)
        )

    @operation("snapshot.list")
    async def list_snapshots(self, universe: UniverseId, world: WorldId) -> list[SnapshotRecord]:
        """Every indexed snapshot of the world."""
        return await snapshots.list_snapshots(self.engine, world_keys(universe, world))

    async def read_manifest(self, universe: UniverseId, record: SnapshotRecord) -> list[Hash]:
        """The blobs the manifest of ``record`` names: its body must be canonical CBOR, a
        list of sha256 digests (what ``segments/restore.py::load_root`` reads).
        ``RootIncomplete`` if the manifest itself is not in the universe's CAS,
        ``Validation`` if it is no manifest."""
        try:
            body = await self.get(universe, record.manifest_hash)
        except NotFound:
            raise RootIncomplete(
                record.height, "manifest_hash", record.manifest_hash.hex, universe
            ) from None
        try:
            digests = cbor.decode(body)
        except cbor.NotCanonical as exc:
            raise Validation(
                "record.manifest_hash", f"the manifest is not canonical CBOR: {exc}"
            ) from None
        if not isinstance(digests, list) or not all(
            isinstance(d, bytes) and len(d) == 32 for d in digests
        ):
            raise Validation("record.manifest_hash", "the manifest is not a list of sha256 digests")
        return [Hash(d) for d in digests]

    async def check_root(
        self, universe: UniverseId, record: SnapshotRecord, manifest: Sequence[Hash] | None
    ) -> None:
        """Root completeness (the source specification's restore contract, step 3): the
        snapshot blob, its manifest and every blob the manifest names are in ``universe``'s
        CAS, bodies included. ``manifest`` is the caller's list when the snapshot and
        manifest blobs are about to be put (then only the listed blobs are checked);
        ``None`` reads it from CAS.

        Raises ``RootIncomplete`` naming the first missing blob (``CasBodyMissing`` if its
        metadata is there without its body). Checked outside the promoting transaction: CAS
        entries are never removed (orphan collection deletes only bodies no entry names), so
        a blob present now is present at commit."""
        if manifest is None:
            await self._require(universe, record, record.snapshot_ref, "snapshot_ref")
            manifest = await self.read_manifest(universe, record)
        for index, blob in enumerate(manifest):
            await self._require(universe, record, blob, f"manifest[{index}]")

    async def _require(
        self, universe: UniverseId, record: SnapshotRecord, blob: Hash, named_by: str
    ) -> None:
        try:
            await self.require_blob(universe, blob)
        except NotFound:
            raise RootIncomplete(record.height, named_by, blob.hex, universe) from None
