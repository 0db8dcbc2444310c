"""Effects and timers keys: write, list, claim and remove, on every engine."""

from __future__ import annotations

import pytest

from persistence import cbor
from persistence.errors import NotFound
from persistence.ids import Hash, UniverseId, WorldId
from persistence.plane import Plane
from persistence.records import EffectDispatchItem, TimerDueItem


def test_effects_dispatch_once_per_intent_claim_and_complete(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    items = [
        EffectDispatchItem(world, Hash.of(bytes([i])), "http", cbor.encode(i)) for i in range(3)
    ]
    seqs = [plane.dispatch_effect(universe, item) for item in items]
    assert seqs == sorted(seqs)
    assert plane.dispatch_effect(universe, items[1]) == seqs[1]  # same intent: same effect
    assert [s for s, _ in plane.pending_effects(universe)] == seqs
    claimed = plane.claim_effect(universe, seqs[0], "worker-a")
    assert claimed.claimed_by == "worker-a" and claimed.intent_hash == items[0].intent_hash
    assert plane.claim_effect(universe, seqs[0], "worker-a") == claimed  # repeat: no-op
    with pytest.raises(NotFound):
        plane.claim_effect(universe, seqs[0], "worker-b")
    assert [s for s, _ in plane.pending_effects(universe)] == seqs[1:]
    assert [s for s, _ in plane.inflight_effects(universe)] == seqs[:1]
    plane.complete_effect(universe, seqs[0], items[0].intent_hash)
    assert plane.inflight_effects(universe) == []
    assert plane.pending_effects(UniverseId.new()) == []  # universe isolation


def test_timers_by_due_time(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    timers = [
        TimerDueItem(world, Hash.of(bytes([i])), due, cbor.encode(i))
        for i, due in enumerate([300, 100, 200])
    ]
    for timer in timers:
        plane.schedule_timer(universe, timer)
    plane.schedule_timer(universe, timers[0])  # idempotent
    assert [t.deliver_at_ns for t in plane.due_timers(universe, 250)] == [100, 200]
    assert [t.deliver_at_ns for t in plane.due_timers(universe, 10**9, limit=1)] == [100]
    plane.remove_timer(universe, timers[1])
    assert [t.deliver_at_ns for t in plane.due_timers(universe, 10**9)] == [200, 300]
