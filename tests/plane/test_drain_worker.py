"""The pending-work index, the multi-world drain and the drain worker.

* Ready marks: every enqueue that stores items marks its world, a drain that leaves the
  inbox empty clears the mark, and -- checked after every commit of randomly interleaved
  enqueues and drains -- no world ever has items after its cursor without its mark.
* ``Plane.drain_worlds``: Protocol D for several worlds in one transaction, budgeted as one,
  exactly once on every engine, also when its commit applied, reported 1021, and another
  client enqueued, drained or appended before the retry.
* ``DrainWorker``: finds every ready world, shards split them, a world whose item cannot be
  drained is isolated, the lag it reports is a true bound.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, fdb_errors, kv
from persistence.errors import EngineError, Validation, WorldNotFound
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import (
    ControlIngress,
    DomainEventIngress,
    InboxEnvelope,
    InboxIngress,
    InboxItem,
    ReceiptIngress,
    TimerFiredIngress,
    encode_inbox_item,
)
from persistence.keyspace import READY_BUCKETS, UniverseKeys, WorldKeys, ready_bucket
from persistence.kv import Engine
from persistence.plane import Plane, PlaneConfig, default_normalizer
from persistence.protocols import drain, inbox
from persistence.protocols.calls import REPLAYS, Call
from persistence.protocols.drain import DrainResult
from persistence.workers.drain_worker import Drained, DrainWorker, Shard
from segments import open_plane


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", cbor.encode({"n": n}))


def made(plane: Plane, u: UniverseId, count: int) -> list[WorldId]:
    worlds = [WorldId.new() for _ in range(count)]
    for w in worlds:
        plane.create_world(u, w)
    return worlds


def marked(plane: Plane, u: UniverseId) -> set[WorldId]:
    """The worlds of ``u`` whose ready mark is set."""
    keys = UniverseKeys(u)
    begin, end = keys.ready_range()
    worlds, more = drive(inbox.read_ready(plane.engine, keys, begin, end))
    assert more is None
    return set(worlds)


def pending(plane: Plane, u: UniverseId, w: WorldId) -> int:
    return len(plane.read_after(u, w, plane.inbox_cursor(u, w), 1_000))


def journal(plane: Plane, u: UniverseId, w: WorldId) -> list[bytes]:
    return [entry for _, entry in plane.read_range(u, w, 1, plane.head(u, w))]


# ------------------------------------------------------------------ the pending-work index


def test_enqueue_marks_and_an_emptying_drain_clears(plane: Plane, universe: UniverseId) -> None:
    a, b = made(plane, universe, 2)
    assert marked(plane, universe) == set()
    plane.enqueue_batch(universe, a, [event(1), event(2)])
    plane.enqueue(universe, b, event(3), idempotency_key=b"k3")
    assert marked(plane, universe) == {a, b}
    partial = plane.drain_inbox_to_journal(universe, a, max_items=1)
    assert (partial.count, partial.more) == (1, True)
    assert marked(plane, universe) == {a, b}  # an item is left: the mark stays
    rest = plane.drain_inbox_to_journal(universe, a)
    assert (rest.count, rest.more) == (1, False)
    assert marked(plane, universe) == {b}
    plane.drain_inbox_to_journal(universe, b)
    plane.enqueue(universe, b, event(3), idempotency_key=b"k3")  # a repeat: stores nothing
    assert marked(plane, universe) == set()


def test_a_skipped_inbox_keeps_its_mark_until_a_drain_finds_it_empty(
    plane: Plane, universe: UniverseId
) -> None:
    (a,) = made(plane, universe, 1)
    seq = plane.enqueue(universe, a, event(1))
    plane.commit_cursor(universe, a, None, seq)  # moved past it without draining
    assert marked(plane, universe) == {a} and pending(plane, universe, a) == 0
    empty = plane.drain_inbox_to_journal(universe, a)
    assert (empty.count, empty.cursor, empty.more) == (0, seq, False)
    assert marked(plane, universe) == set()


def test_compaction_leaves_the_marks_alone(plane: Plane, universe: UniverseId) -> None:
    a, b = made(plane, universe, 2)
    plane.enqueue_batch(universe, a, [event(1), event(2)])
    plane.enqueue(universe, b, event(3))
    plane.drain_inbox_to_journal(universe, a, max_items=1)
    window = plane.config.inbox_retention_ns
    for at in (0, window):  # mark the cursor, then remove what it consumed
        plane.compact_inbox(universe, a, now_ns=lambda at=at: 10**18 + at)  # type: ignore[misc]
    assert len(plane.read_after(universe, a, None, 10)) == 1  # the consumed item is gone
    assert marked(plane, universe) == {a, b}


def _draining(engine: Engine, keys: WorldKeys, plane: Plane, call: Call) -> kv.Transaction:
    """A drain of ``keys`` run in an open transaction (not committed)."""
    tr = engine.create_transaction()
    limits = drain.DrainLimits(10, 1 << 20, plane.config.max_entry_bytes, plane.budget)
    drive(drain.drain(tr, keys, limits, default_normalizer, call, plane.sealing))
    return tr


def test_an_enqueue_between_an_emptying_drain_and_its_commit_keeps_the_mark(
    plane: Plane, universe: UniverseId
) -> None:
    """On every engine: the drain commits (its compare_and_clear reads nothing) and leaves
    the mark, which the enqueue rewrote with its own versionstamp."""
    (a,) = made(plane, universe, 1)
    plane.enqueue(universe, a, event(1))
    draining = _draining(plane.engine, WorldKeys(universe, a), plane, Call.new())
    plane.enqueue(universe, a, event(2))  # commits after the drain's read version
    draining.commit().wait()
    assert marked(plane, universe) == {a} and pending(plane, universe, a) == 1
    done = plane.drain_inbox_to_journal(universe, a)
    assert done.count == 1 and marked(plane, universe) == set()


def test_a_drain_that_leaves_items_does_not_conflict_with_enqueues(
    plane: Plane, universe: UniverseId
) -> None:
    (a,) = made(plane, universe, 1)
    plane.enqueue_batch(universe, a, [event(1), event(2)])
    tr = plane.engine.create_transaction()
    limits = drain.DrainLimits(1, 1 << 20, plane.config.max_entry_bytes, plane.budget)
    drive(
        drain.drain(
            tr, WorldKeys(universe, a), limits, default_normalizer, Call.new(), plane.sealing
        )
    )
    plane.enqueue(universe, a, event(3))
    tr.commit().wait()  # it read no mark
    assert pending(plane, universe, a) == 2 and marked(plane, universe) == {a}


def test_a_retry_clears_the_mark_too() -> None:
    """Clearing costs no conflict, so every attempt of a drain that empties the inbox
    clears the mark, a retry's as a first attempt's."""
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    u = UniverseId.new()
    (a,) = made(plane, u, 1)
    plane.enqueue(u, a, event(1))
    retry = Call.new()
    retry.attempts = 1  # an earlier attempt ran
    _draining(plane.engine, WorldKeys(u, a), plane, retry).commit().wait()
    assert pending(plane, u, a) == 0 and marked(plane, u) == set()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("seed", range(6))
def test_no_world_ever_has_pending_items_without_its_mark(
    kind: str, seed: int, tmp_path: Path
) -> None:
    """Enqueues, single and multi-world drains and cursor skips of two worlds, each in its
    own transaction, opened and committed in a random interleaving (many in flight at
    once); after every commit that lands, every world with items after its cursor has its
    mark. At the end a drain of each world clears every mark."""
    engine: Engine = MemoryEngine() if kind == "memory" else SqliteEngine(tmp_path / "kv.db")
    plane = open_plane(engine, MemoryObjectStore())
    u = UniverseId.new()
    worlds = made(plane, u, 2)
    keys = [WorldKeys(u, w) for w in worlds]
    limits = drain.DrainLimits(2, 1 << 20, plane.config.max_entry_bytes, plane.budget)
    rng = random.Random(seed)
    open_: list[kv.Transaction] = []
    landed = aborted = 0
    for step in range(300):
        if open_ and (len(open_) > 4 or rng.random() < 0.45):
            tr = open_.pop(rng.randrange(len(open_)))
            try:
                tr.commit().wait()
                landed += 1
            except EngineError as exc:
                assert exc.code == fdb_errors.NOT_COMMITTED
                aborted += 1
            for w in worlds:
                assert pending(plane, u, w) == 0 or w in marked(plane, u), f"step {step}"
            continue
        tr = engine.create_transaction()
        which = rng.randrange(len(worlds))
        call = Call.new()
        call.attempts = rng.choice([0, 0, 1])  # some are retries (they clear marks too)
        roll = rng.random()
        if roll < 0.45:
            envelope = InboxEnvelope(encode_inbox_item(event(step)), b"k%d" % step)
            drive(inbox.enqueue(tr, keys[which], [(envelope.idempotency_key, envelope.to_cbor())]))
        elif roll < 0.75:
            drive(drain.drain(tr, keys[which], limits, default_normalizer, call, plane.sealing))
        elif roll < 0.9:
            drive(
                drain.drain_worlds(
                    tr, UniverseKeys(u), keys, limits, default_normalizer, call, plane.sealing
                )
            )
        else:
            cursor = drive(inbox.read_cursor(tr, keys[which]))
            after = None if cursor is None else cursor.seq
            items = drive(inbox.read_after(tr, keys[which], after, 1))
            if items:
                drive(inbox.commit_cursor(tr, keys[which], after, items[-1][0], call))
        open_.append(tr)
    assert landed > 100 and aborted > 5
    for w in worlds:
        while plane.drain_inbox_to_journal(u, w).more:
            pass
    assert marked(plane, u) == set()
    engine.close()


# ------------------------------------------------------------------ drain_worlds


def test_drain_worlds_drains_each_world_in_one_commit(plane: Plane, universe: UniverseId) -> None:
    a, b, c = made(plane, universe, 3)
    plane.append_batch(universe, b, 0, [b"b1"])
    seqs_a = plane.enqueue_batch(universe, a, [event(1), event(2), event(3)])
    seqs_b = plane.enqueue_batch(universe, b, [event(4)])
    commits = getattr(plane.engine, "commit_count", None)
    results = plane.drain_worlds(universe, [b, c, a], max_items=2)
    assert list(results) == [b, c, a]
    assert (results[b].first_height, results[b].count, results[b].cursor) == (2, 1, seqs_b[0])
    assert (results[c].first_height, results[c].count, results[c].cursor) == (1, 0, None)
    assert (results[a].first_height, results[a].count, results[a].cursor) == (1, 2, seqs_a[1])
    assert [results[w].more for w in (b, c, a)] == [False, False, True]
    if commits is not None:  # the memory engine counts them
        assert plane.engine.commit_count == commits + 1  # type: ignore[attr-defined]
    assert marked(plane, universe) == {a}
    assert journal(plane, universe, b)[0] == b"b1" and len(journal(plane, universe, b)) == 2
    again = plane.drain_worlds(universe, [a, b])
    assert (again[a].count, again[a].more, again[b].count) == (1, False, 0)
    assert [plane.head(universe, w) for w in (a, b, c)] == [3, 2, 0]
    assert marked(plane, universe) == set()


def test_a_world_that_drains_nothing_adds_no_conflict(plane: Plane, universe: UniverseId) -> None:
    """An append to, and a drain of, a world of a multi-world drain that takes nothing from
    it commit meanwhile without aborting it; an append to a world it drains does."""
    a, b = made(plane, universe, 2)
    plane.enqueue(universe, a, event(1))
    limits = drain.DrainLimits(10, 1 << 20, plane.config.max_entry_bytes, plane.budget)
    keys = UniverseKeys(universe)

    def draining() -> kv.Transaction:
        tr = plane.engine.create_transaction()
        worlds = [keys.world(a), keys.world(b)]
        drive(
            drain.drain_worlds(
                tr, keys, worlds, limits, default_normalizer, Call.new(), plane.sealing
            )
        )
        return tr

    tr = draining()
    plane.append_batch(universe, b, plane.head(universe, b), [b"b moved"])
    plane.drain_inbox_to_journal(universe, b)
    tr.commit().wait()
    assert plane.head(universe, a) == 1 and marked(plane, universe) == set()
    plane.enqueue(universe, a, event(2))
    tr = draining()
    plane.append_batch(universe, a, plane.head(universe, a), [b"a moved"])
    with pytest.raises(EngineError) as aborted:
        tr.commit().wait()
    assert aborted.value.code == fdb_errors.NOT_COMMITTED


def test_a_missing_world_refuses_the_whole_drain(plane: Plane, universe: UniverseId) -> None:
    (a,) = made(plane, universe, 1)
    plane.enqueue(universe, a, event(1))
    with pytest.raises(WorldNotFound):
        plane.drain_worlds(universe, [a, WorldId.new()])
    assert plane.head(universe, a) == 0 and marked(plane, universe) == {a}


def test_a_failing_normalizer_refuses_the_whole_drain(plane: Plane, universe: UniverseId) -> None:
    a, b = made(plane, universe, 2)
    plane.enqueue(universe, a, event(1))
    plane.enqueue(universe, b, event(2))

    def only_a(seq: InboxSeq, item: InboxItem) -> bytes:
        if b"\x02" in encode_inbox_item(item):
            raise ValueError("cannot normalize item 2")
        return default_normalizer(seq, item)

    with pytest.raises(Validation) as refused:
        plane.drain_worlds(universe, [a, b], normalize=only_a)
    assert refused.value.field == "normalize"
    assert plane.head(universe, a) == plane.head(universe, b) == 0


def test_the_default_normalizer_s_entries_are_built_from_the_stored_items(
    plane: Plane, universe: UniverseId
) -> None:
    """A drain with the default normalizer builds each entry from the item's stored bytes
    instead of calling it; the journal is what calling it gives, for items of every kind,
    with and without idempotency keys, alone and in a group drain."""
    a, b = made(plane, universe, 2)
    items: list[InboxItem] = [
        event(1),
        DomainEventIngress("test/Keyed@1", cbor.encode({"é": [1, 2]}), key=b"k"),
        ReceiptIngress(Hash.of(b"r"), "http.request", "adapter", cbor.encode(None), b"sig"),
        InboxIngress("orders", cbor.encode(3), headers={"b": "2", "a": "1"}),
        TimerFiredIngress("t-1", cbor.encode(b"x" * 300)),
        ControlIngress("pause", cbor.encode({})),
    ]
    for n, item in enumerate(items):
        plane.enqueue(universe, a, item)
        plane.enqueue(universe, b, item, idempotency_key=b"key-%d" % n)
    called: list[InboxSeq] = []

    def calling(seq: InboxSeq, item: InboxItem) -> bytes:
        called.append(seq)
        return default_normalizer(seq, item)

    expected = [
        default_normalizer(seq, item) for seq, item in plane.read_after(universe, a, None, 100)
    ]
    plane.drain_inbox_to_journal(universe, a, max_items=100)
    assert journal(plane, universe, a) == expected
    group = [
        default_normalizer(seq, item) for seq, item in plane.read_after(universe, b, None, 100)
    ]
    plane.drain_worlds(universe, [b], normalize=calling)  # a normalizer of the caller's: called
    assert journal(plane, universe, b) == group and len(called) == len(items)


def test_the_budget_is_shared_by_the_worlds(engine: Engine) -> None:
    """Three worlds of 30 entries of 90 KB: 8.1 MB of entries against the 9 MB budget. The
    first two worlds drain all theirs, the third what is left; an entry that does not fit
    when nothing else was drained is refused naming the normalizer."""
    config = PlaneConfig(max_batch_bytes=16 * 2**20)
    plane = open_plane(engine, MemoryObjectStore(), config)
    u = UniverseId.new()
    worlds = made(plane, u, 3)
    for w in worlds:
        plane.enqueue_batch(u, w, [event(n) for n in range(40)])

    def big(seq: InboxSeq, item: InboxItem) -> bytes:
        return b"x" * 90_000

    results = plane.drain_worlds(u, worlds, max_items=40, max_bytes=2**20, normalize=big)
    counts = [results[w].count for w in worlds]
    assert counts[:2] == [40, 40] and 0 < counts[2] < 40 and results[worlds[2]].more
    assert sum(counts) < 100  # 8.1 MB of the 9 MB budget at most

    def huge(seq: InboxSeq, item: InboxItem) -> bytes:
        return b"y" * 4 * 2**20

    tight = open_plane(
        MemoryEngine(size_limit=4 * 2**20), MemoryObjectStore(), config
    )  # a budget below one entry
    tight.create_world(u, worlds[0])
    tight.enqueue(u, worlds[0], event(1))
    with pytest.raises(Validation) as refused:
        tight.drain_worlds(u, [worlds[0]], normalize=huge)
    assert refused.value.field == "normalize"


def test_bad_drain_worlds_arguments_name_the_field(plane: Plane, universe: UniverseId) -> None:
    a, b = made(plane, universe, 2)
    config = plane.config
    for worlds, kwargs, field in [
        ([], {}, "worlds"),
        ([a, "b"], {}, "worlds[1]"),
        ([a, b, a], {}, "worlds[2]"),
        ([a], {"max_items": 0}, "max_items"),
        ([a, b], {"max_items": config.max_batch_entries // 2 + 1}, "max_items"),
        ([a, b], {"max_bytes": config.max_batch_bytes // 2 + 1}, "max_bytes"),
        ([a], {"normalize": None}, "normalize"),
    ]:
        with pytest.raises(Validation) as refused:
            plane.drain_worlds(universe, worlds, **kwargs)  # type: ignore[arg-type]
        assert refused.value.field == field


# ------------------------------------------------------------------ exactly once under faults


def _faulty(engine: Engine) -> tuple[FaultInjector, Plane, Plane]:
    injector = FaultInjector()
    objects = MemoryObjectStore()
    return (
        injector,
        open_plane(FaultyEngine(engine, injector), objects, hooks=injector),
        open_plane(engine, objects),
    )


COMPETITORS: dict[str, Callable[[Plane, UniverseId, list[WorldId]], object]] = {
    "enqueue": lambda other, u, ws: other.enqueue(u, ws[1], event(99)),
    "drain": lambda other, u, ws: other.drain_inbox_to_journal(u, ws[0]),
    "multi-world drain": lambda other, u, ws: other.drain_worlds(u, ws),
    "append": lambda other, u, ws: other.append_batch(u, ws[0], other.head(u, ws[0]), [b"x"]),
}


@pytest.mark.parametrize("kind", list(COMPETITORS))
def test_a_retry_after_an_applied_1021_reports_its_own_drains(engine: Engine, kind: str) -> None:
    """The commit applies, reports 1021, another client commits (an enqueue into a drained
    world, a drain of it, a multi-world drain, an append), then the retry: it returns what
    its first attempt drained, and every item is journaled exactly once."""
    injector, plane, other = _faulty(engine)
    u = UniverseId.new()
    a, b = made(other, u, 2)
    seqs_a = other.enqueue_batch(u, a, [event(1), event(2), event(3)])
    seqs_b = other.enqueue_batch(u, b, [event(4)])
    other.enqueue(u, a, event(5))  # a fourth item the first attempt leaves (max_items=3)
    competitor = COMPETITORS[kind]
    injector.fail_commit(
        1,
        fdb_errors.COMMIT_UNKNOWN_RESULT,
        applied=True,
        interleave=lambda: competitor(other, u, [a, b]),
    )
    replays = REPLAYS[drain.GROUP_OP]
    results = plane.drain_worlds(u, [a, b], max_items=3)
    assert REPLAYS[drain.GROUP_OP] == replays + 1
    assert (results[a].first_height, results[a].count, results[a].cursor) == (1, 3, seqs_a[2])
    assert (results[b].first_height, results[b].count, results[b].cursor) == (1, 1, seqs_b[0])
    assert (results[a].more, results[b].more) == (True, False)
    for w in (a, b):  # drain what is left; every item once
        while other.drain_inbox_to_journal(u, w).more:
            pass
    items = [e for w in (a, b) for e in journal(other, u, w) if e != b"x"]
    assert len(items) == len(set(items)) == 5 + (kind == "enqueue")
    assert marked(other, u) == set()


@pytest.mark.parametrize("applied", [False, "late"])
def test_a_drain_that_did_not_apply_drains_once(engine: Engine, applied: bool | str) -> None:
    """1021 not applied: the retry drains. A timed-out commit that lands late: the caller
    drains again and finds only what the late commit left."""
    injector, plane, other = _faulty(engine)
    u = UniverseId.new()
    a, b = made(other, u, 2)
    other.enqueue_batch(u, a, [event(1), event(2)])
    other.enqueue(u, b, event(3))
    if applied == "late":
        injector.fail_commit(1, fdb_errors.TRANSACTION_TIMED_OUT, late=True)
        with pytest.raises(EngineError):
            plane.drain_worlds(u, [a, b])
    else:
        injector.fail_commit(1, fdb_errors.COMMIT_UNKNOWN_RESULT)
    results = plane.drain_worlds(u, [a, b])
    moved = sum(r.count for r in results.values())
    assert moved == (0 if applied == "late" else 3)
    assert [len(journal(other, u, w)) for w in (a, b)] == [2, 1]
    assert marked(other, u) == set()


# ------------------------------------------------------------------ the drain worker


def filled(plane: Plane, u: UniverseId, worlds: int, items: int) -> list[WorldId]:
    """``worlds`` worlds with ``items`` items each."""
    made_ = made(plane, u, worlds)
    for w in made_:
        plane.enqueue_batch(u, w, [event(n) for n in range(items)])
    return made_


def test_the_worker_drains_every_ready_world(plane: Plane, universe: UniverseId) -> None:
    worlds = filled(plane, universe, 7, 5)
    seen: list[dict[WorldId, object]] = []
    worker = DrainWorker(
        plane,
        universes=[universe],
        quantum=2,
        worlds_per_transaction=3,
        drained=lambda u, results: seen.append(dict(results)),
    )
    first = worker.run_pass()
    assert (first.ready, first.turns, first.items, first.transactions) == (7, 7, 14, 3)
    assert [len(batch) for batch in seen] == [3, 3, 1]
    while worker.run_pass().items:
        pass
    assert [plane.head(universe, w) for w in worlds] == [5] * 7
    assert marked(plane, universe) == set()
    lag = worker.lag()
    assert (lag.ready_worlds, lag.items, lag.passes, lag.failures) == (0, 35, 4, ())


def test_a_pass_starts_after_the_world_served_last(plane: Plane, universe: UniverseId) -> None:
    worlds = filled(plane, universe, 4, 3)
    order: list[WorldId] = []
    worker = DrainWorker(
        plane, universes=[universe], quantum=1, drained=lambda u, r: order.extend(r)
    )
    worker.run_pass()
    first_pass, order[:] = list(order), []
    worker.run_pass()
    assert sorted(first_pass) == sorted(worlds) and order == first_pass  # a full rotation
    plane.enqueue(universe, first_pass[-1], event(9))
    order.clear()
    worker.run_pass()
    assert order == first_pass  # the next pass starts after the one served last


def test_shards_split_the_worlds_and_the_index(plane: Plane, universe: UniverseId) -> None:
    worlds = filled(plane, universe, 24, 2)
    shards = [Shard(i, 3) for i in range(3)]
    assert [s.buckets for s in shards] == [(0, 85), (85, 170), (170, 256)]
    drained: list[set[WorldId]] = []
    for shard in shards:
        mine: set[WorldId] = set()

        def note(
            u: UniverseId, results: dict[WorldId, DrainResult], m: set[WorldId] = mine
        ) -> None:
            m.update(results)

        DrainWorker(plane, universes=[universe], shard=shard, drained=note).run_pass()
        first, end = shard.buckets
        assert mine == {w for w in worlds if first <= ready_bucket(w) < end}
        drained.append(mine)
    assert set().union(*drained) == set(worlds) and sum(map(len, drained)) == len(worlds)
    assert marked(plane, universe) == set()


def test_shard_parsing() -> None:
    assert Shard.parse("2/5") == Shard(2, 5) and str(Shard(2, 5)) == "2/5"
    for text, field in [("5/5", "shard.index"), ("1/0", "shard.count"), ("x", "shard")]:
        with pytest.raises(Validation) as refused:
            Shard.parse(text)
        assert refused.value.field == field
    with pytest.raises(Validation):
        Shard(0, READY_BUCKETS + 1)


def test_concurrent_workers_of_every_shard_drain_each_item_once(engine: Engine) -> None:
    """Three workers in threads, one per shard, while a writer enqueues; each world is
    drained by its shard's worker only, and every item lands once."""
    plane = open_plane(engine, MemoryObjectStore())
    u = UniverseId.new()
    worlds = made(plane, u, 12)
    stop = threading.Event()
    owners: dict[WorldId, set[int]] = {w: set() for w in worlds}
    lock = threading.Lock()

    def record(shard: int) -> Drained:
        def drained(universe: UniverseId, results: dict[WorldId, DrainResult]) -> None:
            with lock:
                for w in results:
                    owners[w].add(shard)

        return drained

    workers = [
        DrainWorker(plane, universes=[u], shard=Shard(i, 3), quantum=2, drained=record(i))
        for i in range(3)
    ]
    threads = [
        threading.Thread(target=w.run, args=(stop,), kwargs={"idle_seconds": 0.001})
        for w in workers
    ]
    for t in threads:
        t.start()
    try:
        for n in range(120):
            plane.enqueue(u, worlds[n % len(worlds)], event(n))
    finally:
        stop.set()
        for t in threads:
            t.join()
    for worker in workers:
        while worker.run_pass().items:
            pass
    assert all(len(shards) <= 1 for shards in owners.values())
    items = [e for w in worlds for e in journal(plane, u, w)]
    assert len(items) == len(set(items)) == 120
    assert marked(plane, u) == set()


def test_a_world_that_cannot_be_drained_is_isolated(plane: Plane, universe: UniverseId) -> None:
    worlds = filled(plane, universe, 4, 2)
    poison = worlds[2]
    plane.enqueue(universe, poison, DomainEventIngress("test/Poison@1", cbor.encode(0)))

    def normalize(seq: InboxSeq, item: InboxItem) -> bytes:
        if isinstance(item, DomainEventIngress) and item.schema == "test/Poison@1":
            raise ValueError("no journal entry for this one")
        return default_normalizer(seq, item)

    worker = DrainWorker(plane, universes=[universe], normalize=normalize)
    report = worker.run_pass()
    assert [(w, why.split(":")[0]) for _, w, why in report.failures] == [(poison, "Validation")]
    # the group, each world alone, then the failing world's items one at a time
    assert report.transactions == 1 + 4 + 3
    assert [plane.head(universe, w) for w in worlds] == [2, 2, 2, 2]  # its two good items too
    assert worker.run_pass().ready == 0  # left out of later passes
    assert worker.lag().failures == report.failures
    assert marked(plane, universe) == {poison}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_lag_bounds_the_oldest_wait(plane: Plane, universe: UniverseId) -> None:
    """Ready since the start: unknown. Enqueued after a scan that did not find it: at most
    the time since that scan began. After a drain found it empty: since that drain."""
    clock = Clock()
    old, new = made(plane, universe, 2)
    plane.enqueue_batch(universe, old, [event(n) for n in range(5)])
    worker = DrainWorker(plane, universes=[universe], quantum=2, clock=clock)
    worker.run_pass()
    assert (worker.lag().ready_since_start, worker.lag().oldest_wait_at_most) == (1, None)
    clock.now = 110.0
    plane.enqueue(universe, new, event(9))  # after the scan that began at 100
    clock.now = 120.0
    worker.run_pass()  # scan at 120: old still behind since the start, new since 100
    lag = worker.lag()
    assert (lag.ready_worlds, lag.ready_since_start, lag.oldest_wait_at_most) == (2, 1, None)
    clock.now = 130.0
    worker.run_pass()  # old drained empty at 130 (its last item), new drained at 120
    clock.now = 140.0
    plane.enqueue(universe, old, event(10))
    clock.now = 150.0
    worker.run_pass()  # scan at 150 finds old again: pending since its empty drain at 130
    lag = worker.lag()
    assert (lag.ready_worlds, lag.ready_since_start, lag.oldest_wait_at_most) == (1, 0, 20.0)


def test_backfill_marks_inboxes_filled_before_the_index(plane: Plane, universe: UniverseId) -> None:
    """A store written before the index: pending items, no marks. A scan cannot find them;
    a backfill marks exactly the worlds with items after their cursor, then they drain."""
    worlds = filled(plane, universe, 4, 2)
    plane.drain_inbox_to_journal(universe, worlds[3])  # drained: nothing to mark
    last = plane.read_after(universe, worlds[2], None, 10)[-1][0]
    plane.commit_cursor(universe, worlds[2], None, last)  # skipped: nothing to mark either

    def unmark(tr: kv.Transaction) -> None:
        tr.clear_range(*UniverseKeys(universe).ready_range())

    kv.run_sync(plane.engine, unmark)
    worker = DrainWorker(plane, universes=[universe])
    assert worker.run_pass().ready == 0  # invisible
    assert worker.backfill() == 2 and marked(plane, universe) == set(worlds[:2])
    assert worker.backfill() == 0  # marked already
    assert worker.run_pass().items == 4 and marked(plane, universe) == set()


def test_run_stops_when_told(plane: Plane, universe: UniverseId) -> None:
    worlds = filled(plane, universe, 3, 4)
    stop = threading.Event()
    reports = []

    def on_pass(report: object) -> None:
        reports.append(report)
        if not marked(plane, universe):
            stop.set()

    lag = DrainWorker(plane, universes=[universe], quantum=1).run(stop, on_pass=on_pass)
    assert [plane.head(universe, w) for w in worlds] == [4, 4, 4]
    assert lag.items == 12 and lag.passes == len(reports) == 4


def test_worker_arguments_are_checked(plane: Plane) -> None:
    limits = plane.config.max_batch_entries
    for kwargs, field in [
        ({"quantum": 0}, "quantum"),
        ({"worlds_per_transaction": 0}, "worlds_per_transaction"),
        ({"quantum": limits, "worlds_per_transaction": 2}, "quantum"),
        ({"max_bytes": plane.config.max_batch_bytes}, "max_bytes"),
        ({"shard": "0/1"}, "shard"),
    ]:
        with pytest.raises(Validation) as refused:
            DrainWorker(plane, **kwargs)  # type: ignore[arg-type]
        assert refused.value.field == field


def test_the_worker_drains_each_item_once_under_random_faults() -> None:
    """Seeded commit faults (1020, 1021 applied and not, 1007) on a third of the commits,
    and read faults: every item is journaled exactly once and every mark ends cleared."""
    for seed in range(4):
        injector = FaultInjector(seed=seed, commit_fault_rate=0.33, read_fault_rate=0.05)
        engine = FaultyEngine(MemoryEngine(), injector)
        plane = open_plane(engine, MemoryObjectStore())
        u = UniverseId.new()
        other = open_plane(engine.inner, plane.objects)
        worlds = filled(other, u, 6, 7)
        worker = DrainWorker(plane, universes=[u], quantum=3, worlds_per_transaction=4)
        for _ in range(20):
            worker.run_pass()
        items = [e for w in worlds for e in journal(other, u, w)]
        assert len(items) == len(set(items)) == 42, seed
        assert marked(other, u) == set() and not worker.failures
        assert any(entry[0] == "commit" for entry in injector.log)
