"""Root completeness (the source specification's restore contract, step 3): a snapshot's
blob, its manifest and every blob the manifest names are in its universe's CAS, bodies
included; checked before a baseline is promoted."""

from __future__ import annotations

from collections.abc import Sequence

from persistence import cbor
from persistence.errors import NotFound, RootIncomplete, Validation
from persistence.ids import Hash, UniverseId
from persistence.plane.cas import Cas
from persistence.records import SnapshotRecord


def read_manifest(cas: Cas, universe: UniverseId, record: SnapshotRecord) -> list[Hash]:
    """The blobs the manifest of ``record`` names: its body must be canonical CBOR, a list of
    sha256 digests (what ``segments/restore.py::load_root`` reads). ``RootIncomplete`` if
    the manifest itself is not in the universe's CAS, ``Validation`` if it is no manifest."""
    try:
        body = cas.get(universe, record.manifest_hash)
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


def check_root(
    cas: Cas, universe: UniverseId, record: SnapshotRecord, manifest: Sequence[Hash] | None
) -> None:
    """Root completeness (the source specification's restore contract, step 3): the snapshot
    blob, its manifest and every blob the manifest names are in ``universe``'s CAS, bodies
    included. ``manifest`` is the caller's list when the snapshot and manifest blobs are
    about to be put (then only the listed blobs are checked); ``None`` reads it from CAS.

    Raises ``RootIncomplete`` naming the first missing blob (``CasBodyMissing`` if its
    metadata is there without its body). Checked outside the promoting transaction: CAS
    entries are never removed (orphan collection deletes only bodies no entry names), so
    a blob present now is present at commit."""
    if manifest is None:
        _require(cas, universe, record, record.snapshot_ref, "snapshot_ref")
        manifest = read_manifest(cas, universe, record)
    for index, blob in enumerate(manifest):
        _require(cas, universe, record, blob, f"manifest[{index}]")


def _require(
    cas: Cas, universe: UniverseId, record: SnapshotRecord, blob: Hash, named_by: str
) -> None:
    try:
        cas.require(universe, blob)
    except NotFound:
        raise RootIncomplete(record.height, named_by, blob.hex, universe) from None
