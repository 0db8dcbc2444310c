"""The round-trip budget of each hot protocol (docs/protocols.md): counted from how the
protocol issues and waits for its reads (``backends/kv/roundtrips.py``), on every engine
kind, a real FoundationDB cluster included. A protocol that gains a round trip fails here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from backends.kv.roundtrips import CountingEngine
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from persistence import kv
from persistence.errors import WorldNotFound
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.keyspace import CHUNK_SIZE, UniverseKeys, WorldKeys
from persistence.kv import Engine
from persistence.log_records import log_records
from persistence.plane import Plane, PlaneConfig
from persistence.protocols import journal, log
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.segments.workload import snapshot_now

ITEM = DomainEventIngress("test/Event@1", b"\xa0")


@pytest.fixture
def counted(engine: Engine) -> tuple[Plane, CountingEngine]:
    counting = CountingEngine(engine)
    return Plane(counting, MemoryObjectStore()), counting


def rounds(counting: CountingEngine) -> int:
    tally = counting.tally.take()
    assert tally.transactions == 1, f"{tally.transactions} transactions (a retry?)"
    return tally.round_trips


def test_appends_take_three_round_trips(counted: tuple[Plane, CountingEngine]) -> None:
    """Read version, one wave (the head and the call's own reads), commit."""
    plane, counting = counted
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    counting.tally.take()
    plane.append_batch(u, w, 0, [b"one"])
    assert rounds(counting) == 3
    plane.append_batch(u, w, 1, [b"x"] * 100)
    assert rounds(counting) == 3
    plane.append_batches(u, [(w, 101, [b"y"])])
    assert rounds(counting) == 3


def test_an_enqueue_takes_two_round_trips_or_three_with_keys_or_a_new_world(
    counted: tuple[Plane, CountingEngine],
) -> None:
    """Read version, one wave (the world's meta, unless the plane has seen the world exist,
    and the caller's idempotency keys' entries), commit: a keyless enqueue to a known world
    reads nothing, as a blind write."""
    plane, counting = counted
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    counting.tally.take()
    plane.enqueue(u, w, ITEM)
    assert rounds(counting) == 2
    plane.enqueue(u, w, ITEM, idempotency_key=b"k")
    assert rounds(counting) == 3
    plane.enqueue_batch(u, w, [ITEM] * 10, idempotency_keys=[b"%d" % n for n in range(10)])
    assert rounds(counting) == 3
    other = Plane(counting, MemoryObjectStore())  # another process: it has not seen w
    counting.tally.take()
    other.enqueue(u, w, ITEM)
    assert rounds(counting) == 3  # its meta read once
    other.enqueue(u, w, ITEM)
    assert rounds(counting) == 2


def test_drains_take_four_round_trips(counted: tuple[Plane, CountingEngine]) -> None:
    """Read version; cursor, head, ready mark and the call's own reads; the items after the
    cursor (one more than taken: no separate "more?" read); commit -- for one item, a
    hundred, and a group of worlds."""
    plane, counting = counted
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(8)]
    for world in worlds:
        plane.create_world(u, world)
    plane.enqueue_batch(u, worlds[0], [ITEM] * 102)
    for world in worlds[1:]:
        plane.enqueue_batch(u, world, [ITEM] * 3)
    counting.tally.take()
    one = plane.drain_inbox_to_journal(u, worlds[0], max_items=1)
    assert (one.count, one.more) == (1, True) and rounds(counting) == 4
    hundred = plane.drain_inbox_to_journal(u, worlds[0], max_items=100)
    assert (hundred.count, hundred.more) == (100, True) and rounds(counting) == 4
    last = plane.drain_inbox_to_journal(u, worlds[0], max_items=100)
    assert (last.count, last.more) == (1, False) and rounds(counting) == 4
    group = plane.drain_worlds(u, worlds, max_items=100)
    assert [r.count for r in group.values()] == [0] + [3] * 7 and rounds(counting) == 4


def test_the_count_of_a_blind_write_and_of_an_empty_read(engine: Engine) -> None:
    """A transaction that writes without reading still fetches a read version at its commit
    (2 round trips); reading no keys asks the cluster nothing."""
    counting = CountingEngine(engine)

    key = b"\x02round-trips-blind"

    async def blind(tr: kv.Transaction) -> None:
        assert await tr.get_many([]) == []
        tr.set(key, b"x")

    kv.run(counting, blind)
    assert rounds(counting) == 2

    async def clear(tr: kv.Transaction) -> None:
        tr.clear(key)

    kv.run(counting, clear)  # leaves the shared cluster as it was
    assert rounds(counting) == 2
    kv.run(counting, lambda tr: tr.get_many([]))
    assert rounds(counting) == 0


def test_a_page_of_the_universe_log_takes_three_round_trips(
    counted: tuple[Plane, CountingEngine],
) -> None:
    """Read version; the log head with the page of records; the entries of the page in one
    wave -- however many entries the page holds (they were read one by one: a round trip
    each on FoundationDB)."""
    plane, counting = counted
    u = UniverseId.new()
    worlds = [WorldId.new() for _ in range(3)]
    for world in worlds:
        plane.create_world(u, world)
    batches = [(world, 0, [b"e%d" % n for n in range(20)]) for world in worlds]
    plane.append_sequenced(u, batches, [["t"] * 20] * 3)
    counting.tally.take()
    page = plane.read_log(u, 1, 60)
    assert [e.entry for e in page[:2]] == [b"e0", b"e1"] and len(page) == 60
    assert rounds(counting) == 3
    assert plane.read_log(u, 61, 10) == [] and rounds(counting) == 2  # past the head


def test_a_hot_read_takes_two_round_trips_and_a_cold_one_three(
    counted: tuple[Plane, CountingEngine], tmp_path: Path
) -> None:
    """Read version; the head with the page's first range of hot keys (``ROWS_PER_READ``
    rows: a longer page reads on) -- the segment index is read only when the first height
    asked for is no longer hot (a third round trip)."""
    plane, counting = counted
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"e%d" % n for n in range(1, 51)])
    snapshot_now(plane, u, w, promote=True)  # a baseline at 50: below it may go cold
    plane.append_batch(u, w, plane.head(u, w), [b"e%d" % n for n in range(51, 101)])
    head = plane.head(u, w)
    counting.tally.take()
    assert plane.read_range(u, w, 1, 1) == [(1, b"e1")] and rounds(counting) == 2
    first_read = journal.ROWS_PER_READ
    assert len(plane.read_range(u, w, 1, first_read)) == first_read and rounds(counting) == 2
    # past the first range read's rows, one more read for the rest of the page
    assert len(plane.read_range(u, w, 1, 1_000)) == head > first_read and rounds(counting) == 3
    assert plane.read_range(u, w, head + 1, 10) == [] and rounds(counting) == 2  # past it
    cold = open_plane(counting, LocalObjectStore(tmp_path))
    Exporter(cold, ExportConfig(enabled=True, target_entries=25)).export_all(u, w)
    assert [s.start for s in plane.list_segments(u, w)] == [1, 26]
    keys = WorldKeys(u, w)
    counting.tally.take()
    page = drive(journal.read_entries(counting, keys, 10, 100, None))
    assert page.segment is not None and page.segment.start == 1 and page.rows == []
    assert rounds(counting) == 3
    page = drive(journal.read_entries(counting, keys, 51, 100, None))
    assert page.segment is None and len(page.rows) == head - 50 and rounds(counting) == 2


def test_an_entry_in_chunks_past_a_pages_first_read_takes_one_more_read(
    counted: tuple[Plane, CountingEngine],
) -> None:
    """Its chunks are asked for together, not one range read (a round trip) each."""
    plane, counting = counted
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    big = bytes(range(256)) * (20 * CHUNK_SIZE // 256)  # 20 chunks
    small = [b"s"] * (journal.ROWS_PER_READ - 1)
    plane.append_batch(u, w, 0, [*small, big])
    counting.tally.take()
    assert plane.read_range(u, w, 1, 1_000)[-1] == (len(small) + 1, big)
    assert rounds(counting) == 3  # read version, the first wave, the rest of the chunks


def test_a_read_of_one_world_record_or_range_takes_two_round_trips(
    counted: tuple[Plane, CountingEngine],
) -> None:
    """Read version, one wave: the world's head (``WorldNotFound`` without it) is read with
    the record or range asked for, not before it."""
    plane, counting = counted
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"e"] * 3)
    plane.enqueue_batch(u, w, [ITEM] * 3)
    reads: dict[str, Callable[[], object]] = {
        "head": lambda: plane.head(u, w),
        "read_last": lambda: plane.read_last(u, w, 2),
        "world_meta": lambda: plane.world_meta(u, w),
        "read_after": lambda: plane.read_after(u, w, None, 10),
        "inbox_cursor": lambda: plane.inbox_cursor(u, w),
        "list_snapshots": lambda: plane.list_snapshots(u, w),
        "active_baseline": lambda: plane.active_baseline(u, w),
        "list_segments": lambda: plane.list_segments(u, w),
        "log_head": lambda: plane.log_head(u),
        "tracking_position": lambda: plane.tracking_position(u, "consumer"),
    }
    counting.tally.take()
    for name, read in reads.items():
        read()
        assert (name, rounds(counting)) == (name, 2)
    with pytest.raises(WorldNotFound):
        plane.read_after(u, WorldId.new(), None, 10)
    with pytest.raises(WorldNotFound):
        plane.inbox_cursor(u, WorldId.new())
    with pytest.raises(WorldNotFound):
        plane.list_snapshots(u, WorldId.new())


def test_a_queued_sequenced_append_takes_three_round_trips_and_a_settle_three(
    engine: Engine,
) -> None:
    """The append: read version, one wave (heads, the call's own reads and the log head at
    snapshot isolation), commit; the settle: read version, the head with the queue's page,
    commit. A settle that finds its records moved by another reads the log above the head
    its append read instead of committing: read version and two waves."""
    counting = CountingEngine(engine)
    plane = Plane(counting, MemoryObjectStore(), PlaneConfig(log_sequencing="queued"))
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    counting.tally.take()
    plane.append_sequenced(u, [(w, 0, [b"one"])], [["t"]])
    tally = counting.tally.take()
    assert (tally.transactions, tally.round_trips) == (2, 6)
    keys = UniverseKeys(u)
    queued = log.Queued(1, 0, log_records(w, 1, ["t"])[0])  # moved already, to position 1
    counting.tally.take()
    assert kv.run(counting, lambda tr: log.settle(tr, keys, queued, 1 << 20)).position == 1
    assert rounds(counting) == 3
