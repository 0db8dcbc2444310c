"""The source specification's section 4-6 guarantees and failure modes, on every engine."""

from __future__ import annotations

import pytest

from backends.objects.memory import MemoryObjectStore
from persistence import cbor, kv
from persistence.errors import (
    BaselineRegression,
    CasBodyHashMismatch,
    CasBodyMissing,
    CorruptRecord,
    CursorAdvanced,
    HeadAdvanced,
    IdempotencyKeyReused,
    MissingJournalEntry,
    NotFound,
    ReceiptHorizonFence,
    SnapshotMismatch,
    StoreFormatError,
    Validation,
    WorldExists,
)
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import ControlIngress, DomainEventIngress, decode_inbox_item
from persistence.journal_records import (
    IngressJournalRecord,
    SnapshotJournalRecord,
    decode_journal_record,
)
from persistence.keyspace import LAYOUT_KEY, WorldKeys
from persistence.kv import Engine
from persistence.plane import Plane
from persistence.protocols.cas_bodies import object_key as cas_object_key
from persistence.records import LayoutRecord
from segments import open_plane

P = cbor.encode({"v": 1})


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", cbor.encode({"n": n}))


# ------------------------------------------------------------------ worlds


def test_world_starts_with_genesis_baseline(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    assert plane.head(universe, world) == 0
    baseline = plane.active_baseline(universe, world)
    assert baseline.height == 0 and baseline.receipt_horizon_height == 0
    assert plane.get(universe, baseline.snapshot_ref) == cbor.encode(None)
    assert plane.list_snapshots(universe, world) == [baseline]
    with pytest.raises(WorldExists):
        plane.create_world(universe, world)


def test_unknown_world_is_not_found(plane: Plane, universe: UniverseId) -> None:
    ghost = WorldId.new()
    with pytest.raises(NotFound):
        plane.head(universe, ghost)
    with pytest.raises(NotFound):
        plane.append_batch(universe, ghost, 0, [b"x"])
    with pytest.raises(NotFound):
        plane.enqueue(universe, ghost, event(1))


def test_universe_isolation(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    other = UniverseId.new()
    h = plane.put_verified(universe, b"secret")
    assert not plane.has(other, h)
    with pytest.raises(NotFound):
        plane.get(other, h)
    with pytest.raises(NotFound):
        plane.head(other, world)


@pytest.mark.parametrize(("version", "says"), [(99, "newer"), (1, "development version")])
def test_another_layout_is_refused(engine: Engine, version: int, says: str) -> None:
    open_plane(engine, MemoryObjectStore())
    kv.run_sync(engine, lambda tr: tr.set(LAYOUT_KEY, LayoutRecord(version).to_cbor()))
    with pytest.raises(StoreFormatError, match=says):
        open_plane(engine, MemoryObjectStore())


# ------------------------------------------------------------------ journal


def test_append_contiguous_and_read(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    assert plane.append_batch(universe, world, 0, [b"a", b"b"]) == 1
    assert plane.append_batch(universe, world, 2, [b"c"]) == 3
    assert plane.head(universe, world) == 3
    assert plane.read_range(universe, world, 1, 10) == [(1, b"a"), (2, b"b"), (3, b"c")]
    assert plane.read_range(universe, world, 2, 1) == [(2, b"b")]
    assert plane.read_range(universe, world, 4, 10) == []


def test_head_conflict_is_typed_and_writes_nothing(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"a"])
    with pytest.raises(HeadAdvanced) as err:
        plane.append_batch(universe, world, 0, [b"x", b"y"])
    assert (err.value.expected, err.value.actual) == (0, 1)
    assert plane.read_range(universe, world, 1, 10) == [(1, b"a")]


def test_bad_batches_are_validation_and_write_nothing(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    limit = plane.config.max_entry_bytes
    with pytest.raises(Validation, match=str(limit)):
        plane.append_batch(universe, world, 0, [b"ok", b"x" * (limit + 1)])
    with pytest.raises(Validation):
        plane.append_batch(universe, world, 0, [])
    with pytest.raises(Validation):
        plane.append_batch(universe, world, -1, [b"a"])
    assert plane.head(universe, world) == 0


def test_one_mebibyte_entries(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB, spans 12 chunks
    plane.append_batch(universe, world, 0, [big, b"", big[:90_000]])
    assert plane.read_range(universe, world, 1, 3) == [(1, big), (2, b""), (3, big[:90_000])]


def test_reads_page_across_transactions(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    entries = [i.to_bytes(4, "big") for i in range(5_000)]
    for start in range(0, 5_000, 1_000):
        plane.append_batch(universe, world, start, entries[start : start + 1_000])
    rows = plane.read_range(universe, world, 1, 10_000)
    assert [h for h, _ in rows] == list(range(1, 5_001))
    assert [e for _, e in rows] == entries


def test_missing_entry_is_corruption(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    plane.append_batch(universe, world, 0, [b"a", b"b", b"c"])
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.clear_range(*keys.entry_prefix(2)))
    with pytest.raises(MissingJournalEntry) as err:
        plane.read_range(universe, world, 1, 10)
    assert err.value.height == 2


def test_missing_chunk_is_corruption(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    plane.append_batch(universe, world, 0, [b"z" * 200_000])
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.entry_chunk(1, 1, 3)))
    with pytest.raises(MissingJournalEntry):
        plane.read_range(universe, world, 1, 1)


# ------------------------------------------------------------------ inbox


def test_enqueue_order_read_after_and_notify(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    seqs = [plane.enqueue(universe, world, event(i)) for i in range(3)]
    seqs += plane.enqueue_batch(universe, world, [event(3), event(4)])
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    items = plane.read_after(universe, world, None, 10)
    assert [s for s, _ in items] == seqs
    assert [cbor.decode(i.value_cbor)["n"] for _, i in items] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    assert [s for s, _ in plane.read_after(universe, world, seqs[1], 2)] == seqs[2:4]
    keys = WorldKeys(universe, world)
    counter = kv.run(plane.engine, lambda tr: tr.get(keys.notify_counter()))
    assert counter == (4).to_bytes(8, "little")  # one bump per enqueue transaction


def test_idempotency_key_returns_first_seq(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    first = plane.enqueue(universe, world, event(1), idempotency_key=b"order-17")
    again = plane.enqueue(universe, world, event(1), idempotency_key=b"order-17")
    assert again == first
    assert len(plane.read_after(universe, world, None, 10)) == 1
    with pytest.raises(Validation):
        plane.enqueue_batch(universe, world, [event(1), event(2)], idempotency_keys=[b"k", b"k"])


def test_a_key_reused_for_another_item_is_refused_naming_it(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """The key stands for one request: another item under it is a typed conflict (the
    batch that carries it stores nothing), not a silent drop of the new item."""
    first = plane.enqueue(universe, world, event(1), idempotency_key=b"order-17")
    with pytest.raises(IdempotencyKeyReused, match="order-17") as refused:
        plane.enqueue(universe, world, event(2), idempotency_key=b"order-17")
    assert refused.value.key == b"order-17" and refused.value.seq == str(first)
    with pytest.raises(IdempotencyKeyReused):
        plane.enqueue_batch(
            universe, world, [event(3), event(4)], idempotency_keys=[b"new", b"order-17"]
        )
    assert [seq for seq, _ in plane.read_after(universe, world, None, 10)] == [first]
    assert plane.enqueue(universe, world, event(1), idempotency_key=b"order-17") == first
    second = plane.enqueue(universe, world, event(3), idempotency_key=b"new")
    assert second != first  # the refused batch took nothing


def test_an_entry_written_before_fingerprints_matches_any_item(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Entries of 12 bytes (the sequence alone, as stores written before fingerprints
    hold) keep answering with their sequence."""
    first = plane.enqueue(universe, world, event(1), idempotency_key=b"old")
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.inbox_idempotency(b"old"), first.raw))
    assert plane.enqueue(universe, world, event(9), idempotency_key=b"old") == first
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.inbox_idempotency(b"old"), b"short"))
    with pytest.raises(CorruptRecord, match="idempotency entry"):
        plane.enqueue(universe, world, event(1), idempotency_key=b"old")


def test_a_stray_key_among_inbox_items_is_corrupt_naming_the_world(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.enqueue(universe, world, event(1))
    keys = WorldKeys(universe, world)
    begin, end = keys.inbox_after(None)
    [(_, stored)] = kv.run(plane.engine, lambda tr: tr.get_range(begin, end))
    stray = begin + b"\x02stray\x00"  # a text element where a versionstamp belongs
    kv.run_sync(plane.engine, lambda tr: tr.set(stray, stored))  # a sound item under it
    with pytest.raises(CorruptRecord, match=f"inbox entry key of world {world}") as err:
        plane.drain_inbox_to_journal(universe, world)
    assert "does not" in err.value.problem
    with pytest.raises(CorruptRecord, match=f"inbox entry key of world {world}"):
        plane.read_after(universe, world, None, 10)
    assert plane.head(universe, world) == 0  # nothing drained


def test_cursor_is_compare_and_swap_and_never_regresses(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    s1, s2, s3 = plane.enqueue_batch(universe, world, [event(1), event(2), event(3)])
    plane.commit_cursor(universe, world, None, s2)
    plane.commit_cursor(universe, world, None, s2)  # the same swap again: recognised
    assert plane.inbox_cursor(universe, world) == s2
    with pytest.raises(Validation):
        plane.commit_cursor(universe, world, s2, s1)  # backwards
    with pytest.raises(CursorAdvanced):
        plane.commit_cursor(universe, world, s1, s3)  # stale expectation
    plane.commit_cursor(universe, world, s2, s3)
    assert plane.inbox_cursor(universe, world) == s3


def test_drain_appends_each_item_once_in_order(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"host entry"])
    seqs = plane.enqueue_batch(universe, world, [event(i) for i in range(7)])
    first = plane.drain_inbox_to_journal(universe, world, max_items=4)
    assert (first.first_height, first.count, first.cursor) == (2, 4, seqs[3])
    second = plane.drain_inbox_to_journal(universe, world, max_items=100)
    assert (second.first_height, second.count, second.cursor) == (6, 3, seqs[6])
    empty = plane.drain_inbox_to_journal(universe, world)
    assert empty.count == 0 and empty.cursor == seqs[6]
    rows = plane.read_range(universe, world, 2, 100)
    records = [decode_journal_record(e) for _, e in rows]
    assert all(isinstance(r, IngressJournalRecord) for r in records)
    assert [r.seq for r in records] == seqs  # type: ignore[union-attr]
    assert [decode_inbox_item(r.item) for r in records] == [event(i) for i in range(7)]  # type: ignore[union-attr]


def test_drain_respects_max_bytes(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    plane.enqueue_batch(
        universe, world, [ControlIngress("c", cbor.encode(b"x" * 1000)) for _ in range(5)]
    )
    result = plane.drain_inbox_to_journal(universe, world, max_bytes=2_500)
    assert result.count == 2
    huge_first = plane.drain_inbox_to_journal(universe, world, max_bytes=10)
    assert huge_first.count == 1  # always progress by at least one item


# ------------------------------------------------------------------ snapshots


def test_snapshot_index_is_immutable(plane: Plane, universe: UniverseId, world: WorldId) -> None:
    plane.append_batch(universe, world, 0, [b"a", b"b"])
    _record, outcome = plane.snapshot_commit(
        universe, world, b"state@2", height=2, logical_time_ns=5
    )
    assert outcome.indexed and not outcome.promoted
    head = plane.head(universe, world)
    assert isinstance(
        decode_journal_record(plane.read_range(universe, world, head, 1)[0][1]),
        SnapshotJournalRecord,
    )
    _, again = plane.snapshot_commit(universe, world, b"state@2", height=2, logical_time_ns=5)
    assert not again.indexed and plane.head(universe, world) == head  # no second journal record
    with pytest.raises(SnapshotMismatch):
        plane.snapshot_commit(universe, world, b"other state", height=2, logical_time_ns=5)
    with pytest.raises(Validation):
        plane.snapshot_commit(universe, world, b"future", height=99, logical_time_ns=5)


def test_promotion_fence_and_baseline_non_regression(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"e"] * 6)
    with pytest.raises(ReceiptHorizonFence):
        plane.snapshot_commit(
            universe, world, b"s4", height=4, logical_time_ns=1, promote_baseline=True
        )
    with pytest.raises(ReceiptHorizonFence):
        plane.snapshot_commit(
            universe,
            world,
            b"s4",
            height=4,
            logical_time_ns=1,
            receipt_horizon_height=3,
            promote_baseline=True,
        )
    r4, o4 = plane.snapshot_commit(
        universe,
        world,
        b"s4",
        height=4,
        logical_time_ns=1,
        receipt_horizon_height=4,
        promote_baseline=True,
    )
    assert o4.indexed and o4.promoted and plane.active_baseline(universe, world) == r4
    r2, _ = plane.snapshot_commit(
        universe, world, b"s2", height=2, logical_time_ns=1, receipt_horizon_height=2
    )
    with pytest.raises(BaselineRegression) as err:
        plane.promote_baseline(universe, world, r2)
    assert (err.value.current, err.value.attempted) == (4, 2)
    assert plane.active_baseline(universe, world) == r4
    assert [s.height for s in plane.list_snapshots(universe, world)] == [0, 2, 4]


# ------------------------------------------------------------------ CAS


def test_cas_inline_and_object_bodies(plane: Plane, universe: UniverseId) -> None:
    small, large = b"s" * 100, b"L" * (plane.config.inline_threshold + 1)
    hs, hl = plane.put_verified(universe, small), plane.put_verified(universe, large)
    assert hs == Hash.of(small) and hl == Hash.of(large)
    assert plane.put_verified(universe, large) == hl  # duplicate put: no-op
    assert plane.get(universe, hs) == small and plane.get(universe, hl) == large
    objects = plane.objects
    assert isinstance(objects, MemoryObjectStore)
    assert [o.key for o in objects.list("cas/")] == [cas_object_key(universe, hl)]


def test_cas_missing_or_tampered_body_is_hard_corruption(
    plane: Plane, universe: UniverseId
) -> None:
    body = b"B" * (plane.config.inline_threshold + 10)
    h = plane.put_verified(universe, body)
    objects = plane.objects
    assert isinstance(objects, MemoryObjectStore)
    key = cas_object_key(universe, h)
    objects.replace_for_test(key, body[:-1] + b"!")
    with pytest.raises(CasBodyHashMismatch):
        plane.get(universe, h)
    objects.delete(key)
    with pytest.raises(CasBodyMissing):
        plane.get(universe, h)
    assert plane.has(universe, h)  # nothing was "healed"
