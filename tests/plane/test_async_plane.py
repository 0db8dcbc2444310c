"""The asyncio plane: the same operations and outcomes as the blocking plane, many of them in
flight on one event loop, on every engine (a real FoundationDB cluster included)."""

from __future__ import annotations

import asyncio
import io
import os
import threading

import pytest

from backends.objects.memory import MemoryObjectStore
from persistence.errors import HeadAdvanced, Validation, WorldExists
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.kv import Engine, Transaction
from persistence.plane import AppTransaction, AsyncPlane, Plane
from segments import open_plane


def event(n: int) -> DomainEventIngress:
    return DomainEventIngress("test/Event@1", bytes([0xA1, 0x61, 0x6E, n % 24]))


def test_many_appenders_on_one_loop_each_get_their_own_outcome(engine: Engine) -> None:
    """64 tasks append to 8 worlds at the head each read: every task ends with its entry
    appended or ``HeadAdvanced``, and each world's journal is exactly the appends that
    succeeded, in height order."""
    plane = open_plane(engine, MemoryObjectStore()).asyncio()
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(8)]

    async def main() -> dict[WorldId, list[bytes]]:
        for world in worlds:
            await plane.create_world(universe, world)
        appended: dict[WorldId, list[tuple[int, bytes]]] = {w: [] for w in worlds}

        async def appender(n: int) -> None:
            world = worlds[n % len(worlds)]
            for attempt in range(50):
                head = await plane.head(universe, world)
                entry = b"task %d attempt %d" % (n, attempt)
                try:
                    first = await plane.append_batch(universe, world, head, [entry])
                except HeadAdvanced:
                    continue
                appended[world].append((first, entry))
                return
            raise AssertionError(f"task {n} never appended")

        await asyncio.gather(*(appender(n) for n in range(64)))
        return {w: [e for _, e in sorted(rows)] for w, rows in appended.items()}

    expected = asyncio.run(main())
    blocking = Plane(engine, MemoryObjectStore(), create=False)
    for world in worlds:
        journal = [e for _, e in blocking.read_range(universe, world, 1, 100)]
        assert journal == expected[world] and len(journal) == 8


def test_inbox_snapshots_and_cas_through_the_asyncio_plane(engine: Engine) -> None:
    """Enqueue, drain, a group drain, a snapshot with a promoted baseline and CAS bodies on
    both sides of the inline threshold: what the blocking plane does, awaited."""
    objects = MemoryObjectStore()
    plane = AsyncPlane(engine, objects)
    universe, world, other = UniverseId.new(), WorldId.new(), WorldId.new()
    big = os.urandom(plane.config.inline_threshold + 1000)

    async def main() -> None:
        await plane.create_world(universe, world)
        await plane.create_world(universe, other)
        with pytest.raises(WorldExists):
            await plane.create_world(universe, world)
        seqs = await asyncio.gather(*(plane.enqueue(universe, world, event(n)) for n in range(10)))
        assert len(set(seqs)) == 10
        await plane.enqueue_batch(universe, other, [event(n) for n in range(3)])
        drained = await plane.drain_inbox_to_journal(universe, world, max_items=4)
        assert drained.count == 4 and drained.more
        group = await plane.drain_worlds(universe, [world, other], max_items=100)
        assert group[world].count == 6 and group[other].count == 3
        assert await plane.inbox_cursor(universe, world) == max(seqs)
        small_hash = await plane.put_verified(universe, b"small")
        big_hash = await plane.put_stream(universe, io.BytesIO(big))
        assert await plane.get(universe, big_hash) == big
        assert (await plane.blob_meta(universe, big_hash)).object_key is not None
        await plane.require_blob(universe, small_hash)
        head = await plane.head(universe, world)
        record, outcome = await plane.snapshot_commit(
            universe,
            world,
            b"state",
            height=head,
            logical_time_ns=1,
            manifest=[small_hash, big_hash],
            receipt_horizon_height=head,
            promote_baseline=True,
        )
        assert outcome.indexed and outcome.promoted
        assert await plane.active_baseline(universe, world) == record
        assert [w async for w in plane.worlds(universe)] == sorted([world, other], key=str)
        with pytest.raises(Validation):
            await plane.append_batch(universe, world, head, [])

    asyncio.run(main())
    blocking = Plane(engine, objects, create=False)
    assert blocking.head(universe, world) == 10 + 2  # 10 ingress, snapshot, baseline
    assert blocking.get(universe, Hash.of(big)) == big


def test_the_blocking_plane_opens_its_asyncio_door_on_the_same_store(engine: Engine) -> None:
    plane = Plane(engine, MemoryObjectStore())
    universe, world = UniverseId.new(), WorldId.new()
    plane.create_world(universe, world)
    door = plane.asyncio()
    assert asyncio.run(door.append_batch(universe, world, 0, [b"a"])) == 1
    assert plane.read_range(universe, world, 1, 5) == [(1, b"a")]
    # the class attribute is the operation, callable with a plane as a method is
    assert Plane.head(plane, universe, world) == 1
    assert asyncio.run(AsyncPlane.head(door, universe, world)) == 1


def test_a_blocking_engine_runs_its_transactions_off_the_loop(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an engine whose calls block (SQLite), a transaction runs in the executor, never
    on the event loop's thread; elsewhere on the loop's thread, with no thread per call."""
    loop_thread: list[int] = []
    threads: set[int] = set()
    plane = AsyncPlane(engine, MemoryObjectStore())
    original = engine.create_transaction

    def watched() -> Transaction:
        threads.add(threading.get_ident())
        return original()

    universe, world = UniverseId.new(), WorldId.new()

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        monkeypatch.setattr(engine, "create_transaction", watched)
        await plane.create_world(universe, world)
        await asyncio.gather(*(plane.head(universe, world) for _ in range(8)))

    asyncio.run(main())
    if engine.blocking:
        assert loop_thread[0] not in threads
    else:
        assert threads == {loop_thread[0]}


def test_an_applications_transactions_through_the_asyncio_plane(engine: Engine) -> None:
    """32 tasks on one loop each add to a counter key in the application's data (a read
    with a conflict, then a write) and write a versionstamped key: every increment counts
    once, and the versionstamps each task was given are the keys' stamps, in commit order."""
    plane = open_plane(engine, MemoryObjectStore()).asyncio()
    universe = UniverseId.new()

    async def increment(tr: AppTransaction) -> int:
        count = int(await tr.get(b"count") or b"0") + 1
        tr.set(b"count", b"%d" % count)
        tr.set_versionstamped_key(b"s" + bytes(10), 1, b"%d" % count)
        return count

    async def main() -> list[tuple[int, bytes | None]]:
        return await asyncio.gather(
            *(plane.transact_app_stamped(universe, increment) for _ in range(32))
        )

    done = asyncio.run(main())
    assert sorted(count for count, _ in done) == list(range(1, 33))
    blocking = Plane(engine, MemoryObjectStore(), create=False)
    assert blocking.read_app_data(universe, b"count") == b"32"
    given = {count: stamp for count, stamp in done if stamp is not None}
    assert len(given) == 32
    stamps = blocking.read_app_range(universe, b"s", b"t")
    assert stamps == [(b"s" + given[count], b"%d" % count) for count in sorted(given)]
