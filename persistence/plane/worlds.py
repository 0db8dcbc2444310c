"""The plane's world operations: creating a world with its genesis snapshot as the active
baseline, its metadata, and the listings of universes and worlds."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

from persistence.errors import HandleTaken, Validation, WorldExists
from persistence.ids import Hash, UniverseId, WorldId
from persistence.plane.cas import CasOperations
from persistence.plane.config import EMPTY_MANIFEST, GENESIS_STATE
from persistence.plane.core import operation, row_limit, universe_keys, world_keys
from persistence.protocols import journal, worlds
from persistence.records import CasMeta, SnapshotRecord, WorldMeta
from persistence.sizes import check_bytes, check_text


@dataclass(frozen=True, slots=True)
class Genesis:
    """The default genesis snapshot record, and its blobs: those kept inline as their CAS
    metadata, the others as bodies to store."""

    record: SnapshotRecord
    inline: tuple[tuple[Hash, CasMeta], ...]
    external: tuple[bytes, ...]

    @classmethod
    def of(cls, inline_threshold: int) -> Genesis:
        """The default genesis as a configuration with ``inline_threshold`` stores it."""
        bodies = (GENESIS_STATE, EMPTY_MANIFEST)
        record = SnapshotRecord(
            Hash.of(GENESIS_STATE), 0, 0, Hash.of(EMPTY_MANIFEST), receipt_horizon_height=0
        )
        inline = tuple(
            (Hash.of(body), CasMeta(size=len(body), inline_bytes=body))
            for body in bodies
            if len(body) <= inline_threshold
        )
        return cls(record, inline, tuple(b for b in bodies if len(b) > inline_threshold))


class WorldOperations(CasOperations):
    """Worlds: creation, metadata, listings."""

    @functools.cached_property
    def genesis(self) -> Genesis:
        """The default genesis, built once: group appends create worlds with it."""
        return Genesis.of(self.config.inline_threshold)

    async def creation(self, universe: UniverseId) -> journal.Creation:
        """How a group append creates a world: :meth:`create_world`'s defaults. Genesis
        blobs the configuration keeps inline are written in the append's transaction;
        others are stored first."""
        genesis = self.genesis
        for body in genesis.external:
            await self.put_verified(universe, body)
        return journal.Creation(WorldMeta(created_ns=self.now()), genesis.record, genesis.inline)

    @operation("world.create")
    async def create_world(
        self,
        universe: UniverseId,
        world: WorldId,
        *,
        genesis_state: bytes = GENESIS_STATE,
        handle: str | None = None,
    ) -> SnapshotRecord:
        """Create a world with its genesis snapshot as active baseline (height 0).

        Returns the genesis record. A retried creation transaction is a no-op; a world that
        exists already is ``WorldExists``, and a ``handle`` another world of the universe
        has is ``HandleTaken`` naming that world (both checked before the genesis blobs are
        stored, and again in the creating transaction). A handle is printable text that is
        not an id (it would shadow the world that id names)."""
        keys = world_keys(universe, world)
        check_bytes(genesis_state, "genesis_state")
        meta = WorldMeta(created_ns=self.now(), handle=None if handle is None else _handle(handle))
        if await worlds.world_exists(self.engine, keys):
            raise WorldExists(f"world {world} already exists in universe {universe}")
        if meta.handle is not None:
            holder = await worlds.world_of_handle(self.engine, universe, meta.handle)
            if holder is not None:
                raise HandleTaken(meta.handle, str(holder), str(universe))
        snapshot_ref = await self.put_verified(universe, genesis_state)
        manifest_hash = await self.put_verified(universe, EMPTY_MANIFEST)
        genesis = SnapshotRecord(snapshot_ref, 0, 0, manifest_hash, receipt_horizon_height=0)
        await worlds.create_world(self.engine, keys, meta, genesis)
        self.known_worlds.add(keys)
        self.hooks.reached("world.after_create")
        return genesis

    @operation("world.by_handle")
    async def world_of_handle(self, universe: UniverseId, handle: str) -> WorldId | None:
        """The world of ``universe`` created with ``handle`` (handles are unique in a
        universe); ``None`` if none was (worlds created before handles were indexed are
        not found this way: their meta still holds the handle)."""
        universe = universe_keys(universe).universe
        return await worlds.world_of_handle(self.engine, universe, check_text(handle, "handle"))

    async def handles_page(
        self, universe: UniverseId, prefix: str, after: str | None, page: int
    ) -> list[tuple[str, WorldId]]:
        """Up to ``page`` handles of ``universe`` that start with ``prefix``, after
        ``after``, with their worlds, in handle order (one transaction)."""
        universe = universe_keys(universe).universe
        return await worlds.handles_from(self.engine, universe, prefix, after, page)

    @operation("world.meta")
    async def world_meta(self, universe: UniverseId, world: WorldId) -> WorldMeta:
        """Creation time and handle of a world (``NotFound`` if it does not exist)."""
        return await worlds.read_meta(self.engine, world_keys(universe, world))

    async def universes_page(self, after: UniverseId | None, page: int) -> list[UniverseId]:
        """Up to ``page`` universes after ``after``, in id byte order (one transaction)."""
        return await worlds.list_universes(self.engine, after, page)

    async def worlds_page(
        self, universe: UniverseId, after: WorldId | None, page: int
    ) -> list[WorldId]:
        """Up to ``page`` worlds of ``universe`` after ``after`` (one transaction)."""
        return await worlds.list_worlds(self.engine, universe_keys(universe), after, page)

    @staticmethod
    def listing_page(page: object) -> int:
        """A listing's page size, checked."""
        return row_limit(page, "page", 1)


def _handle(handle: object) -> str:
    """A world's handle, checked: printable text, not an id."""
    text = check_text(handle, "handle")
    if not text.isprintable():
        raise Validation("handle", "holds a character that is not printable")
    try:
        uuid.UUID(text)
    except ValueError:
        return text
    raise Validation("handle", f"{text!r} is an id: a handle that is one would shadow a world's")
