"""Restore: active baseline + cold segments + hot tail, replayed through a kernel.

``restore`` is the hosted-mode start-up path; ``full_replay`` replays from the genesis
snapshot and exists to prove restore right (the Spark replay-check job runs both for every
world). Both fail closed: any inconsistency raises ``Corruption`` and returns no state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from persistence import cbor
from persistence.errors import Corruption, NotFound, Validation
from persistence.ids import Hash, UniverseId, WorldId
from persistence.kernel import Kernel
from persistence.plane import Plane
from persistence.records import SnapshotRecord
from persistence.telemetry import traced
from segments.inputs import require, require_callable, require_ids

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
    require(plane, Plane, "plane")
    require(universe, UniverseId, "universe")
    require(record, SnapshotRecord, "record")
    try:
        snapshot = plane.get(universe, record.snapshot_ref)
        manifest_bytes = plane.get(universe, record.manifest_hash)
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
            plane.require_blob(universe, Hash(digest))
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
    _check_inputs(plane, universe, world, kernel, progress)
    require(start, SnapshotRecord, "start")
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


def _check_inputs(
    plane: object, universe: object, world: object, kernel: object, progress: object
) -> None:
    require(plane, Plane, "plane")
    require_ids(universe, world)
    if isinstance(kernel, type):
        raise Validation("kernel", f"a kernel instance, not the class {kernel.__name__}")
    if not isinstance(kernel, Kernel):
        raise Validation("kernel", f"hydrate, apply and snapshot, not {type(kernel).__name__}")
    require_callable(progress, "progress")


@traced("restore")
def restore(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    kernel: Kernel,
    progress: Callable[[str], None] = lambda _: None,
) -> RestoreResult:
    """Active baseline + segments + hot tail."""
    _check_inputs(plane, universe, world, kernel, progress)
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
    _check_inputs(plane, universe, world, kernel, progress)
    snapshots = plane.list_snapshots(universe, world)
    if not snapshots or snapshots[0].height != 0:
        raise Corruption(f"world {world}: no genesis snapshot at height 0")
    return replay(plane, universe, world, kernel, snapshots[0], progress)


REPLAY_CHECK_COLUMNS: Final = (
    ("universe", "string"),
    ("world", "string"),
    ("head", "long"),
    ("full_state_sha256", "string"),
    ("restored_state_sha256", "string"),
    ("equal", "boolean"),
    ("entries_replayed", "long"),
    ("baseline_height", "long"),
    ("error", "string"),
)
"""The row of one world's replay check, as ``aosp restore verify`` and the Spark
replay-check job both report it: name and Spark SQL type of each column."""


def check_replay(
    plane: Plane, universe: UniverseId, world: WorldId, kernel: Callable[[], Kernel]
) -> dict[str, Any]:
    """One world's replay check: full replay from genesis versus restore (baseline +
    segments + tail), each with a new kernel from ``kernel``. Every column of
    :data:`REPLAY_CHECK_COLUMNS` is set; corruption found on the way is ``equal`` false
    with ``error`` naming it (other errors propagate). ``kernel`` makes kernels (a kernel
    class, say): a kernel instance is ``Validation``."""
    require(plane, Plane, "plane")
    require_ids(universe, world)
    if isinstance(kernel, Kernel) and not isinstance(kernel, type):
        raise Validation(
            "kernel",
            f"a function making kernels (such as a kernel class), not "
            f"a {type(kernel).__name__} instance: each replay needs a new one",
        )
    require_callable(kernel, "kernel")
    row: dict[str, Any] = dict.fromkeys(name for name, _ in REPLAY_CHECK_COLUMNS)
    row.update(universe=str(universe), world=str(world), equal=False)
    try:
        full = full_replay(plane, universe, world, kernel())
        restored = restore(plane, universe, world, kernel())
    except Corruption as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    row.update(
        head=full.head,
        full_state_sha256=hashlib.sha256(full.state).hexdigest(),
        restored_state_sha256=hashlib.sha256(restored.state).hexdigest(),
        equal=full.state == restored.state and full.head == restored.head,
        entries_replayed=full.replayed,
        baseline_height=restored.from_height,
    )
    return row
