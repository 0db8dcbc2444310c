"""The plane's inbox operations: enqueue (Protocol C), reads, the cursor, the drain into the
journal (Protocol D, one world or several in one transaction) and inbox compaction."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Final

from persistence import futures, kv
from persistence.errors import Contended, Validation
from persistence.ids import InboxSeq, UniverseId, WorldId, check_id
from persistence.inbox_records import InboxCursor, InboxItem, encode_inbox_item, envelope_bytes
from persistence.keyspace import WorldKeys
from persistence.plane.config import OWN_KEY, OWN_KEY_BYTES, OWN_KEY_ENVELOPE_BYTES
from persistence.plane.core import operation, row_limit, universe_keys, world_keys
from persistence.plane.journal import JournalOperations
from persistence.protocols import budget, compaction, drain, inbox, journal
from persistence.protocols.compaction import InboxCompaction
from persistence.protocols.drain import Drained, DrainResult, Normalizer, default_normalizer
from persistence.protocols.inbox import Enqueued
from persistence.sizes import (
    MAX_IDEMPOTENCY_KEY_BYTES,
    KiB,
    MiB,
    check_bytes,
    check_int,
    check_sequence,
)

BUSY_ATTEMPTS: Final = 1
"""Attempts a group drain gives a world it left out as busy, drained alone, before it
leaves it for a later drain (each attempt met a conflict: the world's head kept moving)."""


class _GroupFailed(Exception):
    """A drain run beside a group drain that failed: its attempt is not committed."""


class _Withdrawn(Exception):
    """A group drain whose drain beside failed: its attempt is not committed."""


class InboxOperations(JournalOperations):
    """The inbox: enqueue, reads, cursor, drains, compaction."""

    @operation("inbox.enqueue")
    async def enqueue(
        self,
        universe: UniverseId,
        world: WorldId,
        item: InboxItem,
        *,
        idempotency_key: bytes | None = None,
    ) -> InboxSeq:
        """Enqueue one item (see :meth:`enqueue_batch`)."""
        encoded = encode_inbox_item(item, "item")
        drawn = idempotency_key is None
        if idempotency_key is None:
            idempotency_key = self._own_key()
        else:
            check_bytes(idempotency_key, "idempotency_key", low=1, high=MAX_IDEMPOTENCY_KEY_BYTES)
        keys = world_keys(universe, world)
        return (await self._enqueue(keys, [encoded], [idempotency_key], drawn))[0].seq

    @operation("inbox.enqueue_batch")
    async def enqueue_batch(
        self,
        universe: UniverseId,
        world: WorldId,
        items: Sequence[InboxItem],
        *,
        idempotency_keys: Sequence[bytes] | None = None,
    ) -> list[InboxSeq]:
        """Enqueue ``items`` atomically, in order; return their sequences.

        Items without a caller key get a random one where a commit result may be unknown,
        so a retry never duplicates them (``_own_key``); a caller key makes repeats of the
        same item across calls return the first sequence too, until inbox compaction
        removes the item: at least ``config.inbox_retention_seconds`` after it was drained
        (then a repeat makes a new item). A caller key held for another item is
        ``IdempotencyKeyReused``, and the batch stores nothing."""
        return [
            out.seq for out in await self._enqueue_batch(universe, world, items, idempotency_keys)
        ]

    @operation("inbox.enqueue_outcomes")
    async def enqueue_outcomes(
        self,
        universe: UniverseId,
        world: WorldId,
        items: Sequence[InboxItem],
        *,
        idempotency_keys: Sequence[bytes] | None = None,
    ) -> list[Enqueued]:
        """:meth:`enqueue_batch`, saying of each item whether it was a repeat: its key held
        the item and no attempt of the call wrote it, so nothing was stored for it
        (``protocols.inbox.Enqueued``)."""
        return await self._enqueue_batch(universe, world, items, idempotency_keys)

    async def _enqueue_batch(
        self,
        universe: UniverseId,
        world: WorldId,
        items: Sequence[InboxItem],
        idempotency_keys: Sequence[bytes] | None,
    ) -> list[Enqueued]:
        """:meth:`enqueue_batch`'s checks, then :meth:`_enqueue`."""
        keys = world_keys(universe, world)
        # user versions are two bytes: at most 65,536 items per transaction
        check_sequence(items, "items", 1, min(self.config.max_batch_entries, 65_536))
        encoded = [encode_inbox_item(item, f"items[{i}]") for i, item in enumerate(items)]
        idem: list[bytes | None]
        if idempotency_keys is None:
            idem = [self._own_key() for _ in items]
        else:
            check_sequence(idempotency_keys, "idempotency_keys", len(items), len(items))
            idem = [
                check_bytes(key, f"idempotency_keys[{i}]", low=1, high=MAX_IDEMPOTENCY_KEY_BYTES)
                for i, key in enumerate(idempotency_keys)
            ]
            if len(set(idem)) != len(idem):
                raise Validation("idempotency_keys", "duplicate key within one batch")
        return await self._enqueue(keys, encoded, idem, idempotency_keys is None)

    def _own_key(self) -> bytes | None:
        """The idempotency key of an item enqueued without one: random where a commit's
        result may be unknown (the retry must find the item the first attempt stored);
        none where it never is (SQLite: a failed commit stored nothing), which spares the
        index entry -- a random page of the B-tree per item."""
        return os.urandom(OWN_KEY_BYTES) if self.engine.commit_may_be_unknown else None

    async def _enqueue(
        self, keys: WorldKeys, encoded: list[bytes], idem: list[bytes | None], drawn: bool
    ) -> list[Enqueued]:
        """Protocol C for checked items (their stored bytes) and distinct idempotency keys
        (``None``: no idempotency entry; ``drawn``: the keys are the plane's own). Limits
        are checked as FoundationDB stores the items: a keyless one counts the key it gets
        there (in its envelope and as an
        idempotency entry), so that what one engine accepts every engine accepts."""
        envelopes = [envelope_bytes(i, k) for i, k in zip(encoded, idem, strict=True)]
        if sum(len(item) for item in encoded) > self.config.max_batch_bytes:
            raise Validation("items", f"batch larger than {self.config.max_batch_bytes} bytes")
        counted = [OWN_KEY if k is None else k for k in idem]
        sizes = [
            len(e) + (OWN_KEY_ENVELOPE_BYTES if k is None else 0)
            for e, k in zip(envelopes, idem, strict=True)
        ]
        for index, size in enumerate(sizes):
            if size > kv.MAX_VALUE_SIZE:
                raise Validation(
                    f"items[{index}]",
                    f"the item's inbox envelope, with an idempotency key, is {size:,} bytes > "
                    f"{kv.MAX_VALUE_SIZE:,} "
                    "(FoundationDB's value limit): put large payloads in the CAS and enqueue "
                    "their hash",
                )
        costed = list(zip(counted, sizes, strict=True))
        if budget.enqueue_bound(costed) > self.budget:  # else surely within it
            budget.check(
                budget.enqueue_cost(keys, costed),
                self.budget,
                "items",
                f"enqueueing {len(envelopes):,} items",
            )
        call = self.new_call(recorded=False)  # counts its attempts: own keys are read on retries
        own = frozenset(range(len(idem))) if drawn else frozenset()
        envelopes_ = list(zip(idem, envelopes, strict=True))
        known = keys in self.known_worlds
        wrote: set[int] = set()
        pending = await inbox.enqueue(self.engine, keys, envelopes_, call, own, known, wrote)
        self.known_worlds.add(keys)  # it exists: the enqueue found its meta, or knew it
        self.hooks.reached("inbox.after_enqueue")
        seqs = await pending.seqs(len(envelopes))
        return [Enqueued(seq, index not in wrote) for index, seq in enumerate(seqs)]

    @operation("inbox.read_after")
    async def read_after(
        self, universe: UniverseId, world: WorldId, after_exclusive: InboxSeq | None, limit: int
    ) -> list[tuple[InboxSeq, InboxItem]]:
        """Up to ``limit`` items after ``after_exclusive`` in sequence order (``limit`` 0:
        none -- unlike the engine's ``get_range``, where 0 means no limit)."""
        keys = world_keys(universe, world)
        if after_exclusive is not None:
            check_id(after_exclusive, InboxSeq, "after_exclusive")
        return await inbox.read_after(self.engine, keys, after_exclusive, row_limit(limit))

    @operation("inbox.cursor")
    async def inbox_cursor(self, universe: UniverseId, world: WorldId) -> InboxSeq | None:
        """The drained boundary (``None`` before the first drain; ``WorldNotFound`` if there
        is no such world)."""
        keys = world_keys(universe, world)

        async def read(tr: kv.Transaction) -> InboxCursor | None:
            head = tr.get(keys.head())  # one wave: the head (is there a world?) and the cursor
            cursor = tr.get(keys.inbox_cursor())
            journal.decode_head(keys, await head)
            return inbox.read_cursor_record(await cursor)

        record = await self.transact(read)
        return None if record is None else record.seq

    @operation("inbox.commit_cursor")
    async def commit_cursor(
        self,
        universe: UniverseId,
        world: WorldId,
        old_cursor: InboxSeq | None,
        new_cursor: InboxSeq,
    ) -> None:
        """Compare-and-swap the cursor forward, to an item of the inbox: the items it moves
        over are consumed without being journaled (a skip: ``contracts.WorldInboxStore``)."""
        keys = world_keys(universe, world)
        if old_cursor is not None:
            check_id(old_cursor, InboxSeq, "old_cursor")
        check_id(new_cursor, InboxSeq, "new_cursor")
        await inbox.commit_cursor(self.engine, keys, old_cursor, new_cursor, self.new_call())
        self.hooks.reached("inbox.after_commit_cursor")

    @operation("inbox.drain")
    async def drain_inbox_to_journal(
        self,
        universe: UniverseId,
        world: WorldId,
        max_items: int = 1_000,
        max_bytes: int = MiB,
        normalize: Normalizer = default_normalizer,
    ) -> DrainResult:
        """Protocol D: move up to ``max_items``/``max_bytes`` of items into the journal and
        advance the cursor, atomically; each item lands exactly once. ``normalize`` must
        return bytes; whatever else it returns or raises is ``Validation`` naming it, with
        nothing written."""
        keys = world_keys(universe, world)
        check_int(max_items, "max_items", 1, self.config.max_batch_entries)
        check_int(max_bytes, "max_bytes", 1, self.config.max_batch_bytes)
        _check_normalizer(normalize)
        limits = drain.DrainLimits(max_items, max_bytes, self.config.max_entry_bytes, self.budget)
        result = await drain.drain(
            self.engine,
            keys,
            limits,
            normalize,
            self.new_call(),
            await self.sealing(writing=True),
        )
        self.hooks.reached("inbox.after_drain")
        return result

    @operation("inbox.drain_worlds")
    async def drain_worlds(
        self,
        universe: UniverseId,
        worlds: Sequence[WorldId],
        max_items: int = 100,
        max_bytes: int = 256 * KiB,
        normalize: Normalizer = default_normalizer,
        drained: Drained | None = None,
    ) -> dict[WorldId, DrainResult]:
        """Protocol D for several worlds of ``universe`` in one transaction: one durable
        commit for all. Each world of ``worlds`` (distinct, at most 1,000) is drained as by
        :meth:`drain_inbox_to_journal` with ``max_items``/``max_bytes``, in order; the
        transaction's budget is shared, so a world reached when it is spent drains fewer
        items, possibly none (its result says so). ``len(worlds) * max_items`` and
        ``len(worlds) * max_bytes`` must be within ``max_batch_entries`` and
        ``max_batch_bytes``. A missing world is ``WorldNotFound``, a normalizer that fails
        ``Validation`` naming it: nothing is written (but see busy worlds below). Returns
        each world's result, in the order given; a retry after an applied
        ``commit_unknown_result`` returns its own.

        One busy world does not stall the group: a world whose cursor or head moved under a
        failed attempt is left out of the retries (``protocols/drain.py``), and drained
        alone once the group has committed; a world an earlier call found busy
        (``BusyWorlds``) is left out from the first attempt and, on an engine whose
        transactions do not block, drained alone *beside* the group, its transaction in
        flight with the group's (their round trips overlap). The group and the drains beside
        it commit only once all have built their transactions, so a failure in any of them
        before that leaves all uncommitted; a drain beside may commit while the group's
        commit fails, and stays committed if the group's retry fails. A world drained alone
        after the group (SQLite, or found busy by the retries) is its own transaction: an
        item refused there fails the call after the group committed. Its result says so
        (``contended``); docs/protocols.md has the whole story.

        ``drained`` is told each of the call's transactions once it is known to have
        committed -- the group's results of the worlds in it, each drain alone's of its
        world, in the order they are known -- before the call returns, and also when it
        then raises (not a commit whose outcome stays unknown, or one an interrupt cut
        short). What the callback raises is the call's; what committed stays."""
        keys = universe_keys(universe)
        check_sequence(worlds, "worlds", 1, drain.MAX_DRAIN_WORLDS)
        parts: list[WorldKeys] = []
        seen: set[WorldId] = set()
        for index, world in enumerate(worlds):
            part = keys.world(check_id(world, WorldId, f"worlds[{index}]"))
            if part.world in seen:
                raise Validation(f"worlds[{index}]", f"{world} is listed twice: once per call")
            seen.add(part.world)
            parts.append(part)
        for field, value, limit in (
            ("max_items", max_items, self.config.max_batch_entries),
            ("max_bytes", max_bytes, self.config.max_batch_bytes),
        ):
            check_int(value, field, 1, limit)
            if value * len(parts) > limit:
                raise Validation(
                    field,
                    f"{len(parts):,} worlds x {value:,} > {limit:,} for one transaction "
                    f"(PlaneConfig.max_batch_{'entries' if field == 'max_items' else 'bytes'})",
                )
        _check_normalizer(normalize)
        limits = drain.DrainLimits(max_items, max_bytes, self.config.max_entry_bytes, self.budget)
        known_busy = self.busy_worlds.among(parts)
        # On an engine whose transactions block (SQLite: one writer at a time), a drain
        # beside the group would only wait its turn: busy worlds are drained after it.
        beside = [] if self.engine.blocking else [p for p in parts if p.world in known_busy]
        group_built = futures.Latch()
        beside_built = [futures.Latch() for _ in beside]
        beside_committing = [futures.Latch() for _ in beside]
        sealing = await self.sealing(writing=True)

        async def built() -> None:
            # Every drain beside has built its transaction before any may commit: each opens
            # its latch before it waits for the group's, so there is no cycle.
            for latch in beside_built:
                if not await latch:  # a drain beside failed: its error is the call's
                    group_built.open(False)
                    raise _Withdrawn
            group_built.open(True)
            # The drains beside issue their commits first: the group's, larger, issued
            # first, put theirs in the cluster's next commit batch, which the call then
            # waited for (~7 ms of a 75 ms call of 32 worlds on a real cluster).
            for latch in beside_committing:
                await latch

        async def group() -> list[DrainResult] | None:
            try:
                results = await drain.drain_worlds(
                    self.engine,
                    keys,
                    parts,
                    limits,
                    normalize,
                    self.new_call(),
                    sealing,
                    drain.GroupMemo(busy=set(known_busy), built=built),
                )
            except _Withdrawn:
                return None
            finally:
                group_built.open(False)  # the group failed before it built an attempt
            in_group = {p.world: r for p, r in zip(parts, results, strict=True) if not r.contended}
            if drained is not None and in_group:
                drained(in_group)
            return results

        results, *alone = await futures.concurrently(
            group(),
            *(
                self._drain_alone(part, limits, normalize, drained, found=False, with_group=latches)
                for part, latches in zip(
                    beside,
                    (
                        (group_built, own, committing)
                        for own, committing in zip(beside_built, beside_committing, strict=True)
                    ),
                    strict=True,
                )
            ),
        )
        assert results is not None, "a drain beside failed: concurrently raised its error"
        drained_beside = dict(zip((part.world for part in beside), alone, strict=True))
        out = {}
        for part, result in zip(parts, results, strict=True):
            if part.world in drained_beside:
                done = drained_beside[part.world]
            elif result.contended:  # left out: known busy, or found busy by the retries
                done = await self._drain_alone(
                    part, limits, normalize, drained, found=part.world not in known_busy
                )
            else:
                done = None
            out[part.world] = result if done is None else done
        self.hooks.reached("inbox.after_drain")
        return out

    async def _drain_alone(
        self,
        keys: WorldKeys,
        limits: drain.DrainLimits,
        normalize: Normalizer,
        drained: Drained | None,
        *,
        found: bool,
        with_group: tuple[futures.Latch, futures.Latch, futures.Latch] | None = None,
    ) -> DrainResult | None:
        """Drain alone a world a group drain leaves out as busy, giving up after
        :data:`BUSY_ATTEMPTS` attempts that met a conflict: then ``None``, nothing drained
        (the group's result for it stands, for a later drain). ``found``: the group's own
        retries found the world busy (it is remembered as busy whatever this drain meets).
        Otherwise a drain that commits at its first attempt having taken items is a calm
        one (``BusyWorlds`` forgets a world after enough in a row); one that took nothing
        proves nothing (it read nothing with a conflict). ``drained`` is told the result
        once the drain has committed.

        ``with_group``: run beside the group, with the group's latch and this drain's two.
        Each attempt opens this drain's first once it has built its transaction (or,
        failing, shut), and commits only once the group's is open: a group that fails
        before it built an attempt leaves this drain uncommitted (``None``), and this drain
        failing withdraws the group's. It opens its second as it issues its commit, which
        the group waits for before it issues its own."""
        call = self.new_call()
        group_built, own_built, committing = (
            with_group if with_group is not None else (None, None, None)
        )
        try:
            sealing = await self.sealing(writing=True)

            async def attempt(tr: kv.Transaction) -> DrainResult:
                done = await drain.drain(tr, keys, limits, normalize, call, sealing)
                if own_built is not None:
                    own_built.open(True)
                if group_built is not None and not await group_built:
                    raise _GroupFailed
                if committing is not None:
                    committing.open(True)  # kv.transact issues the commit before it waits
                return done

            try:
                done = await kv.transact(self.engine, attempt, conflicts=BUSY_ATTEMPTS)
            except Contended:
                self.busy_worlds.note(keys, True)
                return None
            except _GroupFailed:
                return None
        finally:
            if own_built is not None and committing is not None:
                own_built.open(False)  # failed before it built an attempt
                committing.open(False)  # or before it committed
        if found or call.attempts > 1:
            self.busy_worlds.note(keys, True)
        elif done.count:
            self.busy_worlds.note(keys, False)
        done = dataclasses.replace(done, contended=True)
        if drained is not None:
            drained({keys.world: done})
        return done

    @operation("inbox.compact")
    async def compact_inbox(
        self,
        universe: UniverseId,
        world: WorldId,
        *,
        max_items: int = 1_000,
        now_ns: Callable[[], int] | None = None,
    ) -> InboxCompaction:
        """One inbox compaction transaction (``protocols/compaction.py``): mark the cursor
        if a mark is due, then remove up to ``max_items`` items consumed at least
        ``config.inbox_retention_seconds`` ago (by the marks) with their idempotency
        entries; call again while the result's ``more``. Never removes an item above the
        cursor. ``now_ns`` is the clock (nanoseconds since the epoch; the plane's by default)."""
        keys = world_keys(universe, world)
        check_int(max_items, "max_items", 1, self.config.max_batch_entries)
        now_ns = self.clock if now_ns is None else now_ns
        if not callable(now_ns):
            raise Validation("now_ns", f"expected a function, got {type(now_ns).__name__}")
        limits = compaction.CompactionLimits(
            self.config.inbox_retention_ns, max_items, self.config.read_page_bytes, self.budget
        )
        result = await compaction.compact(
            self.engine, keys, limits, compaction.never_back(now_ns), self.new_call()
        )
        self.hooks.reached("inbox.after_compact")
        return result


def _check_normalizer(normalize: object) -> None:
    if not callable(normalize):
        raise Validation("normalize", f"expected a function, got {type(normalize).__name__}")
