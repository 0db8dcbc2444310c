"""``max_bytes_per_batch``: a micro-batch of ``aos_journal``'s stream admits at most that
many bytes, shared fairly between worlds, no world starved by another's backlog or by an
entry larger than its share; hot entries sized by what the engine holds, history in
segments by the segment objects a batch fetches (a real local SparkSession for the stream
itself)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from persistence import kv
from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import LAYOUT_KEY, WorldKeys
from persistence.plane import Plane
from persistence.protocols import journal
from persistence.records import LayoutRecord
from segments import open_plane
from segments.export import ExportConfig, Exporter
from spark_connectors.journal import HOT_ENTRY_ESTIMATE
from spark_connectors.log import LogStream
from spark_connectors.stream import (
    JournalStream,
    WorldSizes,
    admit_bytes,
    heights_of,
    stable_turn,
)
from tests.segments.workload import snapshot_now

SEGMENT_ENTRIES = 20


class ListSizes:
    """:class:`EntrySizes` over a list: the test's side of the admission's contract."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def fit(self, taken: int, room: int, most: int) -> tuple[int, int]:
        count = used = 0
        for size in self.sizes[taken : taken + most]:
            if used + size > room:
                break
            count, used = count + 1, used + size
        return count, used

    def next_cost(self, taken: int) -> int:
        return self.sizes[taken]


def admitted(sizes: dict[str, list[int]], budget: int, turn: int = 0) -> dict[str, int]:
    waiting = {key: len(values) for key, values in sizes.items()}
    lists = {key: ListSizes(values) for key, values in sizes.items()}
    return admit_bytes(waiting, lists, budget, turn)


def test_bytes_are_shared_fairly_and_never_exceeded() -> None:
    assert admitted({"a": [10] * 1000, "b": [10] * 3, "c": [10] * 1000}, 1000) == {
        "a": 49,
        "b": 3,
        "c": 48,
    }
    assert admitted({"a": [5] * 5, "b": [5] * 5}, 1000) == {"a": 5, "b": 5}
    rng = random.Random(7)
    for _ in range(500):
        sizes = {str(k): [rng.randint(0, 300) for _ in range(rng.randint(0, 40))] for k in "abcd"}
        budget = rng.randint(1, 3000)
        granted = admitted(sizes, budget, turn=rng.randint(0, 9))
        assert all(0 <= n <= len(sizes[k]) for k, n in granted.items())
        used = sum(sum(sizes[k][:n]) for k, n in granted.items())
        if used > budget:  # only an entry larger than the budget, alone
            assert sorted(granted.values())[-2:] == [0, 1] and used == max(
                sizes[k][0] for k, n in granted.items() if n
            )
            continue
        # nothing that would still fit is left out
        assert all(n == len(sizes[k]) or used + sizes[k][n] > budget for k, n in granted.items())


def test_an_entry_larger_than_its_share_goes_first_when_its_world_leads() -> None:
    for turn in range(0, 8, 2):  # "a" leads
        assert admitted({"a": [60], "b": [10] * 100}, 100, turn) == {"a": 1, "b": 4}
        assert admitted({"a": [55] * 9, "b": [50] * 9}, 100, turn) == {"a": 1, "b": 0}
    for turn in range(1, 8, 2):  # "b" leads, its backlog takes what is left
        assert admitted({"a": [60], "b": [10] * 100}, 100, turn) == {"a": 0, "b": 10}
        assert admitted({"a": [55] * 9, "b": [50] * 9}, 100, turn) == {"a": 0, "b": 2}
    # larger than the whole budget: alone when its key leads, left for later otherwise
    assert admitted({"a": [5000], "b": [6000]}, 100) == {"a": 1, "b": 0}
    assert admitted({"a": [5000], "b": [6000]}, 100, turn=1) == {"a": 0, "b": 1}
    assert admitted({"a": [5000], "b": [60, 30, 30]}, 100, turn=0) == {"a": 1, "b": 0}
    assert admitted({"a": [5000], "b": [60, 30, 30]}, 100, turn=1) == {"a": 0, "b": 2}
    assert admitted({"a": [0, 0, 0], "b": []}, 1) == {"a": 3, "b": 0}


def test_the_turn_is_the_offsets_own_and_moves_with_it() -> None:
    counts = {"u/a": 10, "u/b": 7}
    assert stable_turn(counts) == stable_turn(dict(reversed(counts.items())))
    assert len({stable_turn({"u/a": n, "u/b": 7}) % 2 for n in range(10, 30)}) == 2


def _ids(seed: int) -> Callable[[], uuid.UUID]:
    rng = random.Random(seed)
    return lambda: uuid.UUID(int=rng.getrandbits(128), version=4)


def _world(
    plane: Plane,
    universe: UniverseId,
    cold: list[bytes],
    hot: list[bytes],
    wid: uuid.UUID | None = None,
) -> WorldId:
    """A world with ``cold`` exported to segments of :data:`SEGMENT_ENTRIES`, then ``hot``."""
    world = WorldId.new() if wid is None else WorldId(wid)
    plane.create_world(universe, world)
    if cold:
        plane.append_batch(universe, world, 0, cold)
        snapshot_now(plane, universe, world, promote=True)
        config = ExportConfig(enabled=True, target_entries=SEGMENT_ENTRIES)
        Exporter(plane, config).export_all(universe, world)
    if hot:
        plane.append_batch(universe, world, plane.head(universe, world), hot)
    return world


def _costs(plane: Plane, universe: UniverseId, world: WorldId, after: int) -> list[int]:
    """What each height above ``after`` costs admission, built from the index and the
    entries: a segment's size for the first height taken from it, nothing for its others;
    a hot entry its stored bytes (at least 1)."""
    out: list[int] = []
    covered = after
    for record in plane.list_segments(universe, world):
        if record.end <= after:
            continue
        count = record.end - max(record.start, after + 1) + 1
        out.extend([max(1, record.byte_size)] + [0] * (count - 1))
        covered = record.end
    seal = 4 if plane.checksummed else 0
    rows = plane.read_range(universe, world, covered + 1, 10**6)
    return out + [max(1, len(entry) + seal) for _, entry in rows]


def _reference_fit(costs: list[int], taken: int, room: int, most: int) -> tuple[int, int]:
    count = used = 0
    while count < most and taken + count < len(costs) and used + costs[taken + count] <= room:
        used += costs[taken + count]
        count += 1
    return count, used


def _store(tmp_path: Path) -> tuple[Plane, str, str]:
    kv_url, objects = f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}"
    return open_plane(kv_url, objects), kv_url, objects


def test_world_sizes_agree_with_the_index_and_the_entries(tmp_path: Path) -> None:
    plane, _, _ = _store(tmp_path)
    universe, rng = UniverseId.new(), random.Random(3)
    cold = [rng.randbytes(rng.randint(0, 900)) for _ in range(130)]
    hot = [rng.randbytes(rng.randint(0, 3000)) for _ in range(300)]
    world = _world(plane, universe, cold, hot)
    head = plane.head(universe, world)
    for after in (0, 1, SEGMENT_ENTRIES - 1, SEGMENT_ENTRIES, 77, head - 200, head - 1):
        costs = _costs(plane, universe, world, after)
        assert len(costs) == head - after
        sizes = WorldSizes(plane, universe, world, after)
        assert sizes.fit(0, 10**12, len(costs)) == (len(costs), sum(costs))
        for taken, room, most in [(0, 0, 10), (0, 5_000, 50), (3, 20_000, 400), (90, 2_999, 5)]:
            if taken < len(costs):
                fresh = WorldSizes(plane, universe, world, after)
                want = min(most, len(costs) - taken)
                assert fresh.fit(taken, room, want) == _reference_fit(costs, taken, room, want)
                assert fresh.next_cost(taken) == costs[taken]


def test_world_sizes_follow_an_export_and_size_a_hole(tmp_path: Path) -> None:
    plane, _, _ = _store(tmp_path)
    universe = UniverseId.new()
    world = _world(plane, universe, [], [b"h" * 700] * 200)
    sizes = WorldSizes(plane, universe, world, 0)  # the index read: nothing exported yet
    snapshot_now(plane, universe, world, promote=True)
    config = ExportConfig(enabled=True, target_entries=SEGMENT_ENTRIES)
    Exporter(plane, config).export_all(universe, world)
    assert plane.list_segments(universe, world)  # the hot keys are gone
    costs = _costs(plane, universe, world, 0)  # the snapshot's records included
    assert sizes.fit(0, 10**12, len(costs)) == (len(costs), sum(costs))
    hole = _world(plane, universe, [], [b"h" * 700] * 10)
    keys = WorldKeys(universe, hole)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.whole_entry_key()(4)))
    seal = 4 if plane.checksummed else 0
    assert WorldSizes(plane, universe, hole, 0).fit(0, 10**12, 10) == (
        10,
        9 * (700 + seal) + HOT_ENTRY_ESTIMATE,
    )


def test_a_chunked_entry_after_a_hole_costs_what_it_holds(tmp_path: Path) -> None:
    """A missing hot height followed by an entry of more chunks than a size read asks for:
    the entry costs its chunks, not a hole's estimate (it was once priced as part of the
    hole, and a micro-batch capped at 10,000 bytes admitted 400,000)."""
    plane, kv_url, objects = _store(tmp_path)
    universe = UniverseId.new()
    world = _world(plane, universe, [], [b"a", b"b", b"X" * 400_000, b"d", b"e", b"f"])
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.whole_entry_key()(2)))
    big = sum(
        len(value)
        for _, value in kv.run(plane.engine, lambda tr: tr.get_range(*keys.entries_between(3, 3)))
    )
    assert big > 400_000
    sizes = WorldSizes(plane, universe, world, 1)
    assert sizes.next_cost(0) == HOT_ENTRY_ESTIMATE and sizes.next_cost(1) == big
    reader = JournalStream(
        {"kv": kv_url, "objects": objects, "on_corrupt": "skip", "max_bytes_per_batch": "10000"}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxBytes(10_000))
    assert heights_of(end) == {f"{universe}/{world}": 2}  # the entry waits to go alone


def test_the_driver_reads_about_what_it_admits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, kv_url, objects = _store(tmp_path)
    universe = UniverseId.new()
    for _ in range(3):
        _world(plane, universe, [], [b"e" * 1000] * 3000)
    read: list[int] = []
    real = journal.stored_sizes

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = yield from real(*args, **kwargs).__await__()
        read.append(len(rows))
        return rows

    class Counted:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args, self.kwargs = args, kwargs

        def __await__(self) -> Any:
            return counted(*self.args, **self.kwargs)

    monkeypatch.setattr(journal, "stored_sizes", Counted)
    reader = JournalStream({"kv": kv_url, "objects": objects, "max_bytes_per_batch": "10000"})
    end = heights_of(reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit()))
    assert sum(end.values()) == 9  # 3 entries of 1,004 bytes a world
    assert read and sum(read) <= 2 * sum(end.values())  # not each backlog of 3,000


def test_empty_entries_still_count_so_a_cap_bounds_the_rows(tmp_path: Path) -> None:
    kv_url, objects = f"sqlite://{tmp_path / 'aos.db'}", f"file://{tmp_path / 'objects'}"
    engine_plane = open_plane(kv_url, objects)
    kv.run_sync(engine_plane.engine, lambda tr: tr.set(LAYOUT_KEY, LayoutRecord(2).to_cbor()))
    engine_plane.engine.close()
    plane = open_plane(kv_url, objects)
    assert not plane.checksummed  # entries stored as they are: an empty one is 0 bytes
    universe = UniverseId.new()
    _world(plane, universe, [], [b""] * 5_000)
    reader = JournalStream({"kv": kv_url, "objects": objects, "max_bytes_per_batch": "1000"})
    end = heights_of(reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit()))
    assert sum(end.values()) == 1000


def _batches(reader: JournalStream, count: int) -> list[dict[str, tuple[int, int]]]:
    """The ranges of ``count`` successive micro-batches, by world."""
    out = []
    start = reader.initialOffset()
    for _ in range(count):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        before, after = heights_of(start), heights_of(end)
        out.append({k: (before.get(k, 0) + 1, h) for k, h in after.items() if h > before.get(k, 0)})
        start = end
    return out


def test_an_entry_larger_than_the_cap_is_read_while_another_world_is_busy(tmp_path: Path) -> None:
    """A world whose one entry is larger than the cap, beside one with a long backlog of
    small entries: the large entry comes alone, within a few batches (the ids are fixed,
    so the turns are too)."""
    plane, kv_url, objects = _store(tmp_path)
    new_id = _ids(5)
    universe = UniverseId(new_id())
    big = _world(plane, universe, [], [b"B" * 5_000], new_id())
    busy = _world(plane, universe, [], [b"s" * 6] * 400, new_id())
    reader = JournalStream({"kv": kv_url, "objects": objects, "max_bytes_per_batch": "100"})
    batches = _batches(reader, 12)
    big_key, busy_key = f"{universe}/{big}", f"{universe}/{busy}"
    alone = [b for b in batches if big_key in b]
    assert alone == [{big_key: (1, 1)}]
    assert all(b[busy_key][1] - b[busy_key][0] + 1 == 10 for b in batches if b is not alone[0])


def test_worlds_of_entries_near_the_cap_take_turns(tmp_path: Path) -> None:
    """Entries of 5,400 and 4,900 bytes, a cap of 10,000: no two fit together, and each
    world's entries still come, in the batches it leads (the ids are fixed)."""
    plane, kv_url, objects = _store(tmp_path)
    new_id = _ids(9)
    universe = UniverseId(new_id())
    first = _world(plane, universe, [], [b"a" * 5_400] * 40, new_id())
    second = _world(plane, universe, [], [b"b" * 4_900] * 40, new_id())
    reader = JournalStream({"kv": kv_url, "objects": objects, "max_bytes_per_batch": "10000"})
    batches = _batches(reader, 30)
    served = {
        key: sum(last - start + 1 for start, last in (b[key] for b in batches if key in b))
        for key in (f"{universe}/{first}", f"{universe}/{second}")
    }
    assert all(count >= 8 for count in served.values()), served
    assert all(len(b) == 1 and sum(e - s + 1 for s, e in b.values()) <= 2 for b in batches)


def test_history_in_segments_counts_the_objects_a_batch_fetches(tmp_path: Path) -> None:
    """A segment holding one entry of 80,000 bytes among small ones, a cap of 20,000: no
    batch holds more bytes than the cap, but a batch of one segment larger than it."""
    plane, kv_url, objects = _store(tmp_path)
    universe = UniverseId.new()
    cold = [b"c" * 10] * 30 + [b"L" * 80_000] + [b"c" * 10] * 29
    world = _world(plane, universe, cold, [b"h" * 3_000] * 20)
    records = plane.list_segments(universe, world)
    sizes = {(r.start, r.end): r.byte_size for r in records}
    reader = JournalStream({"kv": kv_url, "objects": objects, "max_bytes_per_batch": "20000"})
    key = f"{universe}/{world}"
    seen = 0
    for batch in _batches(reader, 40):
        if key not in batch:
            break
        first, last = batch[key]
        assert first == seen + 1
        seen = last
        rows = plane.read_range(universe, world, first, last - first + 1)
        fetched = sum(size for (s, e), size in sizes.items() if s <= last and e >= first)
        hot = sum(len(entry) for h, entry in rows if not any(s <= h <= e for s, e in sizes))
        if fetched + hot > 20_000:  # one segment larger than the cap: alone
            assert [(s, e) for s, e in sizes if s <= last and e >= first] == [
                (s, e) for s, e in sizes if s <= first <= e
            ] and hot == 0
    assert seen == plane.head(universe, world)


def test_the_byte_option_is_checked_and_both_caps_hold(tmp_path: Path) -> None:
    plane, kv_url, objects = _store(tmp_path)
    universe = UniverseId.new()
    worlds = [_world(plane, universe, [], [b"e" * 96] * 50) for _ in range(2)]
    store = {"kv": kv_url, "objects": objects}
    for bad in ("0", "-1", "1e3", "\u00b2", str(2**63)):
        with pytest.raises(Validation, match=r"aos_journal\.max_bytes_per_batch"):
            JournalStream({**store, "max_bytes_per_batch": bad})
    with pytest.raises(Validation, match=r"aos_log\.max_bytes_per_batch"):
        LogStream({**store, "max_bytes_per_batch": "1000"})
    per_entry = 96 + (4 if plane.checksummed else 0)
    by_bytes = JournalStream({**store, "max_bytes_per_batch": str(10 * per_entry)})
    assert by_bytes.getDefaultReadLimit() == ReadMaxBytes(10 * per_entry)
    start = by_bytes.initialOffset()
    end = heights_of(by_bytes.latestOffset(start, by_bytes.getDefaultReadLimit()))
    assert sorted(end.values()) == [5, 5]
    assert heights_of(by_bytes.latestOffset(start, by_bytes.getDefaultReadLimit())) == end
    everything = heights_of(by_bytes.latestOffset(start, ReadAllAvailable()))
    assert sorted(everything.values()) == [50, 50]
    both = JournalStream(
        {**store, "max_bytes_per_batch": str(10 * per_entry), "max_entries_per_batch": "4"}
    )
    assert both.getDefaultReadLimit() == ReadMaxRows(4)
    assert sum(heights_of(both.latestOffset(start, ReadMaxRows(4))).values()) == 4
    assert sum(heights_of(both.latestOffset(start, ReadMaxRows(40))).values()) == 10
    assert sum(heights_of(both.latestOffset(start, ReadMaxBytes(3 * per_entry))).values()) == 3
    assert {key.partition("/")[2] for key in end} == {str(w) for w in worlds}


def test_micro_batches_stay_within_the_byte_cap(spark: Any, tmp_path: Path) -> None:
    """Worlds with history in segments, hot entries of random sizes and one entry larger
    than the cap: every micro-batch holds at most the cap's entry bytes (or one entry),
    every height arrives once."""
    from pyspark.sql import functions as F

    plane, kv_url, objects = _store(tmp_path)
    universe, rng = UniverseId.new(), random.Random(11)

    def hot(n: int) -> list[bytes]:
        return [rng.randbytes(rng.randint(0, 2_500)) for _ in range(n)]

    worlds = [
        _world(plane, universe, [b"c" * 500] * 160, hot(60)),
        _world(plane, universe, [], hot(150)),
        _world(plane, universe, [], [*hot(5), b"L" * 50_000, *hot(5)]),
    ]
    expected = sorted(
        (str(w), h, entry) for w in worlds for h, entry in plane.read_range(universe, w, 1, 10**6)
    )
    cap = 20_000
    batches: list[tuple[int, int, int]] = []
    rows: list[tuple[str, int, bytes]] = []

    def record(batch: Any, batch_id: int) -> None:
        got = batch.collect()
        rows.extend((r.world, r.height, bytes(r.entry)) for r in got)
        total = batch.agg(F.sum(F.length("entry")).alias("b")).collect()[0].b or 0
        batches.append((batch_id, len(got), total))

    query = (
        spark.readStream.format("aos_journal")
        .options(kv=kv_url, objects=objects, max_bytes_per_batch=str(cap))
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(rows) == expected  # every height once
    assert all(size <= cap or count == 1 for _, count, size in batches), batches
    assert any(count == 1 and size == 50_000 for _, count, size in batches)
    assert len(batches) >= sum(len(entry) for *_, entry in expected) // cap
