"""Effects and timers keys (source specification section 2): written by the plane now,
consumed by the effect and timer workers of a later milestone.

Dispatch is idempotent per intent hash: a retried dispatch of the same intent returns the
first sequence. Claiming moves an effect from pending to in-flight atomically.
"""

from __future__ import annotations

from dataclasses import dataclass

from persistence import kv
from persistence.errors import NotFound, Validation
from persistence.ids import Hash, InboxSeq
from persistence.keyspace import UniverseKeys, seq_in_key
from persistence.protocols import calls
from persistence.protocols.calls import Call
from persistence.records import (
    EffectDispatchItem,
    EffectInFlightItem,
    TimerDueItem,
    decode_record,
)

PENDING = "pending"
INFLIGHT = "inflight"


@dataclass(frozen=True, slots=True)
class PendingDispatch:
    """An existing sequence (a repeat) or the future of a new one."""

    existing: InboxSeq | None
    stamp: kv.VersionstampFuture | None

    async def seq(self) -> InboxSeq:
        """The dispatched effect's sequence (await after the commit)."""
        if self.existing is not None:
            return self.existing
        if self.stamp is None:
            raise ValueError("a dispatch is either a repeat or has a versionstamp future")
        return InboxSeq(await self.stamp + b"\x00\x00")


@kv.transactional
async def dispatch(
    tr: kv.Transaction, keys: UniverseKeys, item: EffectDispatchItem
) -> PendingDispatch:
    """Queue an effect under a commit-ordered sequence, once per intent hash."""
    index = keys.effect_by_intent(item.intent_hash)
    existing = await tr.get(index)
    if existing is not None:
        return PendingDispatch(InboxSeq(existing), None)
    tr.set_versionstamped_key(keys.pending_effect_with_versionstamp(), item.to_cbor())
    tr.set_versionstamped_value(index, b"\x00" * 12 + (0).to_bytes(4, "little"))
    return PendingDispatch(None, tr.get_versionstamp())


def _seq(key: bytes, prefix: int) -> InboxSeq:
    return seq_in_key(key, prefix, "effect key")


@kv.transactional
async def list_pending(
    tr: kv.Transaction, keys: UniverseKeys, limit: int
) -> list[tuple[InboxSeq, EffectDispatchItem]]:
    """Pending effects in dispatch order."""
    prefix = keys.effect_prefix_len(PENDING)
    return [
        (_seq(k, prefix), decode_record(EffectDispatchItem, v, "pending effect"))
        for k, v in await tr.get_range(*keys.effect_range(PENDING), limit=limit)
    ]


@kv.transactional
async def list_inflight(
    tr: kv.Transaction, keys: UniverseKeys, limit: int
) -> list[tuple[InboxSeq, EffectInFlightItem]]:
    """Claimed effects in dispatch order."""
    prefix = keys.effect_prefix_len(INFLIGHT)
    return [
        (_seq(k, prefix), decode_record(EffectInFlightItem, v, "in-flight effect"))
        for k, v in await tr.get_range(*keys.effect_range(INFLIGHT), limit=limit)
    ]


@kv.transactional
async def claim(
    tr: kv.Transaction, keys: UniverseKeys, seq: InboxSeq, worker: str, now_ns: int, call: Call
) -> EffectInFlightItem:
    """Move a pending effect to in-flight for ``worker``; repeating the claim is a no-op.

    The pending and in-flight entries are read at snapshot isolation (a dispatch still in
    flight may write a versionstamped key anywhere after its read version: it must not abort
    the claim); the conflict that matters -- two claims, or a claim and a completion, of
    one effect -- is on the effect's intent index entry, which both read and write. A retry
    whose earlier attempt committed returns the item it claimed (its call record)."""
    opening = calls.begin(tr, keys, call)
    pending_read = tr.get(keys.effect(PENDING, seq), snapshot=True)
    inflight_read = tr.get(keys.effect(INFLIGHT, seq), snapshot=True)
    done = await calls.replayed(opening)
    if done is not None and done.value is not None:
        return decode_record(EffectInFlightItem, done.value, "claimed effect")
    raw = await pending_read
    if raw is None:
        current = await inflight_read
        if current is not None:
            item = decode_record(EffectInFlightItem, current, "in-flight effect")
            if item.claimed_by == worker:
                return item
        raise NotFound(f"no pending effect with sequence {seq}")
    pending = decode_record(EffectDispatchItem, raw, "pending effect")
    intent_key = keys.effect_by_intent(pending.intent_hash)
    index = await tr.get(intent_key)
    if index is None or index != seq.raw:
        raise NotFound(f"no pending effect with sequence {seq}")  # completed meanwhile
    inflight = EffectInFlightItem(
        pending.world,
        pending.intent_hash,
        pending.effect_kind,
        pending.payload_cbor,
        worker,
        now_ns,
    )
    tr.set(intent_key, index)  # the claim's write conflict: a second claim of it aborts
    tr.clear(keys.effect(PENDING, seq))
    tr.set(keys.effect(INFLIGHT, seq), inflight.to_cbor())
    calls.record(opening, "claim_effect", value=inflight.to_cbor())
    return inflight


@kv.transactional
async def complete(tr: kv.Transaction, keys: UniverseKeys, seq: InboxSeq, intent: Hash) -> None:
    """Remove a finished effect (pending or in flight) and its intent index entry.

    Repeating it is a no-op. An effect at ``seq`` of another intent is ``Validation`` naming
    ``intent`` (nothing removed): a mismatched pair must not remove one effect and another's
    index entry. The intent index entry goes only if it still names ``seq``."""
    for state in (PENDING, INFLIGHT):
        raw = await tr.get(keys.effect(state, seq))
        if raw is not None:
            effect: EffectDispatchItem | EffectInFlightItem = (
                decode_record(EffectDispatchItem, raw, "pending effect")
                if state == PENDING
                else decode_record(EffectInFlightItem, raw, "in-flight effect")
            )
            found = effect.intent_hash
            if found != intent:
                raise Validation("intent", f"the effect at {seq} has intent {found}, not {intent}")
            tr.clear(keys.effect(state, seq))
    index = keys.effect_by_intent(intent)
    if await tr.get(index) == seq.raw:
        tr.clear(index)


@kv.transactional
async def put_timer(tr: kv.Transaction, keys: UniverseKeys, item: TimerDueItem) -> None:
    """Schedule a timer (idempotent: its key is its due time and intent hash)."""
    tr.set(keys.timer(item.deliver_at_ns, item.intent_hash), item.to_cbor())


@kv.transactional
async def due_timers(
    tr: kv.Transaction, keys: UniverseKeys, until_ns: int, limit: int
) -> list[TimerDueItem]:
    """Timers due strictly before ``until_ns``, earliest first."""
    return [
        decode_record(TimerDueItem, v, "timer")
        for _, v in await tr.get_range(*keys.timer_range(until_ns), limit=limit)
    ]


@kv.transactional
async def remove_timer(
    tr: kv.Transaction, keys: UniverseKeys, deliver_at_ns: int, intent: Hash
) -> None:
    """Remove a fired or cancelled timer."""
    tr.clear(keys.timer(deliver_at_ns, intent))
