"""hot_state.measure counts a world's hot keys by family, on every engine."""

from __future__ import annotations

from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.keyspace import CHUNK_SIZE, WorldKeys
from persistence.plane import Plane
from persistence.protocols.hot_state import FAMILIES, measure


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test.v1", cbor.encode({"n": n}))


def test_a_new_world_holds_bookkeeping_and_its_genesis_snapshot(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    state = measure(plane.engine, WorldKeys(universe, world))
    counts = {name: f.count for name, f in state.families.items()}
    assert list(counts) == list(FAMILIES)
    assert counts["journal"] == counts["inbox_pending"] == counts["idempotency"] == 0
    assert counts["segment_index"] == 0
    assert counts["snapshots"] == 2  # the genesis record by height and as active baseline
    assert counts["bookkeeping"] >= 2  # meta and head at least
    assert state.bytes == sum(f.bytes for f in state.families.values()) > 0


def test_entries_items_keys_and_calls_are_counted_where_they_belong(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"small", b"x" * (2 * CHUNK_SIZE + 1)])
    for n in range(5):
        plane.enqueue(universe, world, event(n), idempotency_key=b"key-%d" % n)
    drained = plane.drain_inbox_to_journal(universe, world, max_items=3)
    assert drained.count == 3

    state = measure(plane.engine, WorldKeys(universe, world)).families
    assert state["journal"].count == 2 + 3  # a three-chunk entry counts once
    assert state["journal"].bytes > 2 * CHUNK_SIZE
    assert (state["inbox_consumed"].count, state["inbox_pending"].count) == (3, 2)
    assert state["idempotency"].count == 5
    # the append's and the drain's, where commits may end unknown (not on SQLite)
    recorded = plane.engine.commit_may_be_unknown
    assert state["call_records"].count >= 2 if recorded else state["call_records"].count == 0
