"""What every area of the oracle shares: its state (the CAS of each universe, the
worlds), looking a world up, height checks, the CAS itself (Protocol A) and world
creation."""

from __future__ import annotations

from conformance.model_values import OWN_KEY, ModelWorld, SeqRef
from persistence import cbor
from persistence.errors import NotFound, Validation, WorldExists, WorldNotFound
from persistence.ids import MAX_HEIGHT, Hash, UniverseId, WorldId
from persistence.kv import MAX_TRANSACTION_SIZE
from persistence.plane import GENESIS_STATE, PlaneConfig
from persistence.protocols import budget
from persistence.records import SnapshotRecord


class ModelCore:
    """The oracle's state and what each of its areas uses (see :mod:`conformance.model`)."""

    def __init__(
        self,
        config: PlaneConfig | None = None,
        size_limit: int = MAX_TRANSACTION_SIZE,
        *,
        commit_may_be_unknown: bool = True,
    ) -> None:
        """``commit_may_be_unknown``: the engine's (the plane then gives every item
        enqueued without a key a random one, stored in its envelope)."""
        self.config = config or PlaneConfig()
        self.own_key: bytes | None = OWN_KEY if commit_may_be_unknown else None
        self.budget = size_limit * (100 - budget.RESERVE) // 100
        self.blobs: dict[UniverseId, dict[Hash, bytes]] = {}
        self.worlds: dict[tuple[UniverseId, WorldId], ModelWorld] = {}

    def _world(self, universe: UniverseId, world: WorldId) -> ModelWorld:
        state = self.worlds.get((universe, world))
        if state is None:
            raise WorldNotFound(universe, world)
        return state

    def world_exists(self, universe: UniverseId, world: WorldId) -> bool:
        """Whether the world was created."""
        return (universe, world) in self.worlds

    @staticmethod
    def _check_height(value: int, name: str, *, allow_zero: bool = True) -> None:
        low = 0 if allow_zero else 1
        if not low <= value <= MAX_HEIGHT:
            raise Validation(name, f"height {value} outside [{low}, 2**64-1]")

    @staticmethod
    def _ref(index: int | None) -> SeqRef | None:
        return None if index is None else SeqRef(index)

    def put_verified(self, universe: UniverseId, data: bytes) -> Hash:
        """Store ``data`` in ``universe``; return its sha256 (duplicates are no-ops)."""
        if not isinstance(data, bytes):
            raise Validation("data", f"expected bytes, got {type(data).__name__}")
        digest = Hash.of(data)
        self.blobs.setdefault(universe, {}).setdefault(digest, data)
        return digest

    def get(self, universe: UniverseId, hash: Hash) -> bytes:
        """The body of ``hash`` in ``universe``; ``NotFound`` if that universe lacks it."""
        body = self.blobs.get(universe, {}).get(hash)
        if body is None:
            raise NotFound(f"cas {hash} not found in universe {universe}")
        return body

    def has(self, universe: UniverseId, hash: Hash) -> bool:
        """Whether ``universe`` holds ``hash``."""
        return hash in self.blobs.get(universe, {})

    def create_world(
        self, universe: UniverseId, world: WorldId, *, genesis_state: bytes = GENESIS_STATE
    ) -> SnapshotRecord:
        """Create a world whose genesis snapshot (height 0) is indexed and active.

        A world that exists is ``WorldExists`` before anything is stored (a second creation
        from another call has other metadata, its creation time); otherwise the genesis
        blobs go to CAS, then the world is created."""
        if (universe, world) in self.worlds:
            raise WorldExists(f"world {world} already exists in universe {universe}")
        snapshot_ref = self.put_verified(universe, genesis_state)
        manifest_hash = self.put_verified(universe, cbor.encode([]))
        genesis = SnapshotRecord(snapshot_ref, 0, 0, manifest_hash, receipt_horizon_height=0)
        state = ModelWorld(genesis=genesis)
        state.snapshots[0] = genesis
        state.baseline = genesis
        self.worlds[(universe, world)] = state
        return genesis
