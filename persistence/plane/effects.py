"""The plane's effect and timer operations (source specification section 2): effects queued
once per intent and claimed by workers, timers due by time -- written by the plane,
consumed by the effect and timer workers of a later milestone."""

from __future__ import annotations

from persistence import kv
from persistence.ids import MAX_HEIGHT, Hash, InboxSeq, UniverseId, check_id
from persistence.plane.config import CLAIM_RESERVE
from persistence.plane.core import Core, encoded, operation, row_limit, universe_keys, value_fits
from persistence.protocols import effects
from persistence.records import EffectDispatchItem, EffectInFlightItem, TimerDueItem
from persistence.sizes import check_int, check_text


class EffectOperations(Core):
    """Effects and timers."""

    @operation("effects.dispatch")
    async def dispatch_effect(self, universe: UniverseId, item: EffectDispatchItem) -> InboxSeq:
        """Queue an effect for the effect workers; once per intent hash."""
        keys = universe_keys(universe)
        stored = encoded(item, (EffectDispatchItem,), "item")
        value_fits(stored, "item", kv.MAX_VALUE_SIZE - CLAIM_RESERVE)
        pending = await effects.dispatch(self.engine, keys, item)
        self.hooks.reached("effects.after_dispatch")
        return await pending.seq()

    @operation("effects.pending")
    async def pending_effects(
        self, universe: UniverseId, limit: int = 1_000
    ) -> list[tuple[InboxSeq, EffectDispatchItem]]:
        """Pending effects in dispatch order."""
        return await effects.list_pending(self.engine, universe_keys(universe), row_limit(limit))

    @operation("effects.inflight")
    async def inflight_effects(
        self, universe: UniverseId, limit: int = 1_000
    ) -> list[tuple[InboxSeq, EffectInFlightItem]]:
        """Claimed effects in dispatch order."""
        return await effects.list_inflight(self.engine, universe_keys(universe), row_limit(limit))

    @operation("effects.claim")
    async def claim_effect(
        self, universe: UniverseId, seq: InboxSeq, worker: str
    ) -> EffectInFlightItem:
        """Move a pending effect to in-flight for ``worker`` (repeatable by the same worker)."""
        keys = universe_keys(universe)
        check_id(seq, InboxSeq, "seq")
        check_text(worker, "worker")
        return await effects.claim(self.engine, keys, seq, worker, self.now(), self.new_call())

    @operation("effects.complete")
    async def complete_effect(self, universe: UniverseId, seq: InboxSeq, intent: Hash) -> None:
        """Forget a finished effect (``Validation`` if the effect at ``seq`` has another
        intent)."""
        keys = universe_keys(universe)
        check_id(seq, InboxSeq, "seq")
        check_id(intent, Hash, "intent")
        await effects.complete(self.engine, keys, seq, intent)

    @operation("timers.schedule")
    async def schedule_timer(self, universe: UniverseId, item: TimerDueItem) -> None:
        """Schedule a timer (idempotent)."""
        keys = universe_keys(universe)
        value_fits(encoded(item, (TimerDueItem,), "item"), "item")
        await effects.put_timer(self.engine, keys, item)

    @operation("timers.due")
    async def due_timers(
        self, universe: UniverseId, until_ns: int, limit: int = 1_000
    ) -> list[TimerDueItem]:
        """Timers due before ``until_ns``, earliest first."""
        keys = universe_keys(universe)
        check_int(until_ns, "until_ns", 0, MAX_HEIGHT)
        return await effects.due_timers(self.engine, keys, until_ns, row_limit(limit))

    @operation("timers.remove")
    async def remove_timer(self, universe: UniverseId, item: TimerDueItem) -> None:
        """Remove a fired or cancelled timer."""
        keys = universe_keys(universe)
        encoded(item, (TimerDueItem,), "item")
        await effects.remove_timer(self.engine, keys, item.deliver_at_ns, item.intent_hash)
