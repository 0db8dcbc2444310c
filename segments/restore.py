"""Restore: active baseline + cold segments + hot tail, replayed through a kernel.

``restore`` is the hosted-mode start-up path; ``full_replay`` replays from the genesis
snapshot and exists to prove restore right (the Spark replay-check job runs both for every
world). Both fail closed: any inconsistency raises ``Corruption`` and returns no state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from persistence import cbor
from persistence.errors import Corruption, NotFound
from persistence.ids import Hash, UniverseId, WorldId
from persistence.kernel import Kernel
from persistence.plane import Plane
from persistence.records import SnapshotRecord
from persistence.telemetry import traced

REPLAY_PAGE: Final = 10_000


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """A replayed world: its state bytes at ``head``, from a snapshot at ``from_height``."""

    head: int
    from_height: int
    replayed: int
    state: bytes


def load_root(plane: Plane, universe: UniverseId, record: SnapshotRecord) -> bytes:
    """The snapshot bytes of ``record``, after checking root completeness: the snapshot and
    its manifest are in CAS and hash right, and every object the manifest lists is present."""
    try:
        snapshot = plane.cas.get(universe, record.snapshot_ref)
        manifest_bytes = plane.cas.get(universe, record.manifest_hash)
    except NotFound as exc:
        raise Corruption(f"snapshot at height {record.height} is incomplete: {exc}") from None
    if Hash.of(snapshot) != record.snapshot_ref:  # whatever the CAS verify mode
        raise Corruption(f"snapshot {record.snapshot_ref} does not hash to its reference")
    try:
        manifest = cbor.decode(manifest_bytes)
    except cbor.NotCanonical as exc:
        raise Corruption(f"manifest {record.manifest_hash} is not canonical CBOR: {exc}") from None
    if not isinstance(manifest, list) or not all(
        isinstance(d, bytes) and len(d) == 32 for d in manifest
    ):
        raise Corruption(f"manifest {record.manifest_hash} is not a list of sha256 digests")
    for digest in manifest:
        try:
            plane.cas.require(universe, Hash(digest))
        except NotFound:
            raise Corruption(
                f"snapshot at height {record.height}: manifest names {digest.hex()}, "
                "which is not in CAS"
            ) from None
    return snapshot


def replay(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    kernel: Kernel,
    start: SnapshotRecord,
    progress: Callable[[str], None] = lambda _: None,
) -> RestoreResult:
    """Hydrate ``kernel`` from ``start`` and apply every entry after it up to the head."""
    kernel.hydrate(load_root(plane, universe, start))
    head = plane.head(universe, world)
    height = start.height
    while height < head:
        rows = plane.read_range(universe, world, height + 1, min(REPLAY_PAGE, head - height))
        if not rows:
            raise Corruption(f"world {world}: journal ends at {height}, head is {head}")
        for h, entry in rows:
            if h != height + 1:
                raise Corruption(f"world {world}: replay expected height {height + 1}, got {h}")
            kernel.apply(h, entry)
            height = h
        progress(f"world {world}: replayed to {height}/{head}")
    return RestoreResult(head, start.height, head - start.height, kernel.snapshot())


@traced("restore")
def restore(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    kernel: Kernel,
    progress: Callable[[str], None] = lambda _: None,
) -> RestoreResult:
    """Active baseline + segments + hot tail."""
    return replay(plane, universe, world, kernel, plane.active_baseline(universe, world), progress)


@traced("restore.full_replay")
def full_replay(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    kernel: Kernel,
    progress: Callable[[str], None] = lambda _: None,
) -> RestoreResult:
    """Genesis snapshot (height 0) + every entry from height 1."""
    snapshots = plane.list_snapshots(universe, world)
    if not snapshots or snapshots[0].height != 0:
        raise Corruption(f"world {world}: no genesis snapshot at height 0")
    return replay(plane, universe, world, kernel, snapshots[0], progress)
