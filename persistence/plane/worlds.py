"""World creation and the store's layout version."""

from __future__ import annotations

from persistence import kv
from persistence.errors import Conflict, StoreFormatError
from persistence.keyspace import LAYOUT_KEY, LAYOUT_VERSION, UniverseKeys, WorldKeys
from persistence.records import (
    JournalHead,
    LayoutRecord,
    SnapshotRecord,
    UniverseInfo,
    WorldMeta,
    decode_record,
)


class WorldExists(Conflict):
    """A world with this id already exists (with different metadata)."""


@kv.transactional
def ensure_layout(tr: kv.Transaction) -> int:
    """Record the layout version in a new store; refuse a store with a newer one."""
    raw = tr.get(LAYOUT_KEY)
    if raw is None:
        tr.set(LAYOUT_KEY, LayoutRecord(LAYOUT_VERSION).to_cbor())
        return LAYOUT_VERSION
    version = decode_record(LayoutRecord, raw, "layout record").version
    if version > LAYOUT_VERSION:
        raise StoreFormatError(
            f"store keyspace layout {version} is newer than this software supports "
            f"({LAYOUT_VERSION}); upgrade aos-persistence"
        )
    return version


@kv.transactional
def create_world(
    tr: kv.Transaction, keys: WorldKeys, meta: WorldMeta, genesis: SnapshotRecord
) -> bool:
    """Write meta, an empty journal head, the genesis snapshot and the active baseline
    atomically. ``False`` if this exact world already exists (a retried creation)."""
    existing = tr.get(keys.meta())
    if existing is not None:
        if decode_record(WorldMeta, existing, "world meta") == meta:
            return False
        raise WorldExists(f"world {keys.world} already exists in universe {keys.universe}")
    universe = UniverseKeys(keys.universe)
    if tr.get(universe.info()) is None:
        tr.set(universe.info(), UniverseInfo(meta.created_ns).to_cbor())
    tr.set(keys.meta(), meta.to_cbor())
    tr.set(keys.head(), JournalHead(0).to_cbor())
    tr.set(keys.snapshot(genesis.height), genesis.to_cbor())
    tr.set(keys.baseline(), genesis.to_cbor())
    return True
