"""eventsourcing's DCB (dynamic consistency boundary) on the plane: its shipped recorder test
cases on the memory engine, SQLite files and FoundationDB; a ``DCBApplication`` selecting the
module; conditions checked against every append that commits first; bad input refused."""

from __future__ import annotations

import contextlib
import random
import threading
import uuid
from typing import Any

import pytest
from eventsourcing.dcb.api import DCBAppendCondition, DCBEvent, DCBQuery, DCBQueryItem
from eventsourcing.dcb.application import DCBApplication
from eventsourcing.dcb.popo import InMemoryDCBRecorder
from eventsourcing.dcb.tests import DCBRecorderTestCase
from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InternalError,
    OperationalError,
    ProgrammingError,
)

from aos_eventsourcing import dcb
from aos_eventsourcing.dcb import MAX_TAG_BYTES, PlaneDCBRecorder
from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors
from persistence.ids import UniverseId, WorldId
from persistence.plane import AppTransaction, PlaneConfig
from segments import open_plane
from tests.eventsourcing import stores
from tests.eventsourcing.dcb_checks import placed


class ShippedCases(DCBRecorderTestCase, stores.Store):
    def test_append_read(self) -> None:
        self._test_append_read(self.recorder(PlaneDCBRecorder))

    def test_append_subscribe(self) -> None:
        self._test_append_subscribe(self.recorder(PlaneDCBRecorder))

    def test_a_dcb_application_selects_the_module(self) -> None:
        self.set_environ()
        app = DCBApplication()
        try:
            assert isinstance(app.recorder, PlaneDCBRecorder)
            self._test_append_read(app.recorder)
        finally:
            app.close()


class TestShippedCasesMemory(stores.Memory, ShippedCases):
    pass


class TestShippedCasesSqlite(stores.Sqlite, ShippedCases):
    pass


class TestShippedCasesFdb(stores.Fdb, ShippedCases):
    pass


del ShippedCases


def _book_from_threads(recorders: list[PlaneDCBRecorder]) -> None:
    """Writers append to one boundary (tag ``seat``) from threads, each conditioned on no
    ``seat`` event after what it read: exactly one append per read position wins, so the
    boundary's events follow each other without two reading the same state."""
    seat = DCBQuery([DCBQueryItem(tags=["seat"])])
    won: list[tuple[int, int]] = []
    lock = threading.Lock()

    def book(recorder: PlaneDCBRecorder, n: int) -> None:
        for _ in range(n):
            while True:
                read = recorder.read(seat)
                seen = read.head or 0
                event = DCBEvent("Booked", str(seen).encode(), ["seat"])
                try:
                    position = recorder.append([event], DCBAppendCondition(seat, after=seen))
                except IntegrityError:
                    continue
                with lock:
                    won.append((seen, position))
                break

    threads = [threading.Thread(target=book, args=(r, 15)) for r in recorders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = list(recorders[0].read(seat))
    assert [e.position for e in events] == list(range(1, 61))
    # each append was conditioned on the state just before it: its data says so
    assert [int(e.event.data) for e in events] == list(range(0, 60))
    assert sorted(won) == [(p - 1, p) for p in range(1, 61)]


def test_a_condition_sees_every_append_that_commits_before_it_on_memory() -> None:
    plane, universe = stores.open_memory_plane(), UniverseId.new()
    _book_from_threads([PlaneDCBRecorder(plane, universe) for _ in range(4)])


class TestConditions(stores.Sqlite):
    def test_a_condition_sees_every_append_that_commits_before_it(self) -> None:
        """:func:`_book_from_threads`, on SQLite."""
        plane = self.open_plane()
        universe = UniverseId.new()
        _book_from_threads([PlaneDCBRecorder(plane, universe) for _ in range(4)])

    def test_disjoint_boundaries_do_not_refuse_each_other(self) -> None:
        recorder = self.recorder(PlaneDCBRecorder)
        a, b = (DCBQuery([DCBQueryItem(tags=[tag])]) for tag in ("a", "b"))
        recorder.append([DCBEvent("E", b"1", ["a"])])
        seen_b = recorder.read(b).head or 0
        recorder.append([DCBEvent("E", b"2", ["a"])])
        assert recorder.append([DCBEvent("E", b"3", ["b"])], DCBAppendCondition(b, seen_b)) == 3
        with pytest.raises(IntegrityError):
            recorder.append([DCBEvent("E", b"4", ["a"])], DCBAppendCondition(a, seen_b))
        # a type-and-tags item matches only events with the type and every tag
        both = DCBQuery([DCBQueryItem(types=["E"], tags=["a", "b"])])
        assert list(recorder.read(both)) == []
        recorder.append([DCBEvent("E", b"5", ["a", "b"]), DCBEvent("F", b"6", ["a", "b"])])
        assert [e.event.data for e in recorder.read(both)] == [b"5"]
        assert [e.position for e in recorder.read(both, after=3)] == [4]
        assert list(recorder.read(both, after=4)) == []
        assert recorder.read(both, limit=0).head is None

    def test_bad_input_is_refused_before_anything_is_written(self) -> None:
        recorder = self.recorder(PlaneDCBRecorder)
        bad_events = [
            DCBEvent("", b"x"),
            DCBEvent(5, b"x"),  # type: ignore[arg-type]
            DCBEvent("E", "text"),  # type: ignore[arg-type]
            DCBEvent("E", b"x", ["ok", 7]),  # type: ignore[list-item]
            DCBEvent("E", b"x", ["t" * (MAX_TAG_BYTES + 1)]),
            DCBEvent("E", b"x", ["\ud800"]),
        ]
        for event in bad_events:
            with pytest.raises(DataError):
                recorder.append([DCBEvent("E", b"ok"), event])
        with pytest.raises(ProgrammingError):
            recorder.append([])
        with pytest.raises(DataError):
            recorder.append([DCBEvent("E", b"x")], DCBAppendCondition(after=-1))
        for args in ({"after": "1"}, {"limit": -1}, {"limit": True}):
            with pytest.raises(DataError):
                recorder.read(**args)
        assert list(recorder.read()) == [] and recorder.read().head is None


def _query(rng: random.Random, names: list[str]) -> DCBQuery:
    def item() -> DCBQueryItem:
        return DCBQueryItem(
            types=rng.sample(names[:3], rng.randint(0, 2)),
            tags=rng.sample(names, rng.randint(0, 2)),
        )

    return DCBQuery([item() for _ in range(rng.randint(0, 3))])


@pytest.mark.parametrize("seed", range(6))
def test_reads_and_conditions_agree_with_eventsourcings_in_memory_recorder(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random appends, conditions and reads (types, tags, both, neither; after and limit
    anywhere), with the index read in windows of 5 positions, 2 a transaction, and spans
    of 3: the same positions, events, heads and refusals as ``InMemoryDCBRecorder``."""
    monkeypatch.setattr(dcb, "WINDOW", 5)
    monkeypatch.setattr(dcb, "WINDOWS", 2)
    monkeypatch.setattr(dcb, "GAP", 2)
    rng = random.Random(seed)
    names = ["a", "b", "c", "d", "\x00", "a\x00"]
    ours = PlaneDCBRecorder(stores.open_memory_plane(), UniverseId.new())
    theirs = InMemoryDCBRecorder()
    for _ in range(120):
        if rng.random() < 0.5:
            events = [
                DCBEvent(
                    rng.choice(names[:3]), rng.randbytes(3), rng.sample(names, rng.randint(0, 3))
                )
                for _ in range(rng.randint(1, 3))
            ]
            condition = None
            if rng.random() < 0.6:
                condition = DCBAppendCondition(_query(rng, names), rng.choice([None, *range(8)]))
            outcomes: list[int | str] = []
            for recorder in (ours, theirs):
                try:
                    outcomes.append(recorder.append(events, condition))
                except IntegrityError:
                    outcomes.append("refused")
            assert outcomes[0] == outcomes[1]
        else:
            query = _query(rng, names)
            after = rng.choice([None, *range(0, 60, 3)])
            limit = rng.choice([None, 0, 1, 2, 7])
            mine, yours = (
                ours.read(query, after=after, limit=limit),
                theirs.read(query, after=after, limit=limit),
            )
            assert [(e.position, e.event) for e in mine] == [(e.position, e.event) for e in yours]
            assert mine.head == yours.head


@pytest.mark.parametrize(("tag", "runs"), [("y", 1), ("z", 2)], ids=["disjoint", "same"])
def test_an_append_between_a_check_and_its_commit_conflicts_only_under_its_boundary(
    tag: str, runs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends (both steps) between an append's condition check and its
    commit: under another boundary (tag ``y``) the append commits as it was checked; under
    the same one (``z``), its enqueue conflicts, runs again and is refused."""
    plane = stores.open_memory_plane()
    universe = UniverseId.new()
    mine, other = PlaneDCBRecorder(plane, universe), PlaneDCBRecorder(plane, universe)
    for n in range(5):
        mine.append([DCBEvent("E", b"%d" % n, ["x"])])
    checks: list[int] = []
    real_matched = dcb._matched

    async def matched(
        tr: AppTransaction, items: list[DCBQueryItem], after: int
    ) -> tuple[bool, bool, bool]:
        outcome = await real_matched(tr, items, after)
        checks.append(after)
        if len(checks) == 1:
            assert other.append([DCBEvent("E", b"other", [tag])]) == 6
        return outcome

    monkeypatch.setattr(dcb, "_matched", matched)
    condition = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=["z"])]), 5)
    if tag == "z":
        with pytest.raises(IntegrityError):
            mine.append([DCBEvent("E", b"mine", ["z"])], condition)
    else:
        assert mine.append([DCBEvent("E", b"mine", ["z"])], condition) == 7
    assert checks == [5] * runs
    assert [e.event.data for e in mine.read(after=5)] == [b"other"] + [b"mine"] * (tag == "y")


def test_positions_are_the_stores_own_in_a_universe_with_other_entries() -> None:
    plane = stores.open_memory_plane()
    universe = UniverseId.new()
    plane.append_sequenced(universe, [(WorldId.new(), 0, [b"x"])], [["t"]], create_missing=True)
    recorder = PlaneDCBRecorder(plane, universe)
    assert recorder.append([DCBEvent("E", b"1")]) == 1
    assert recorder.append([DCBEvent("E", b"2"), DCBEvent("E", b"3")]) == 3
    assert [e.position for e in recorder.read()] == [1, 2, 3]


def test_a_query_name_no_event_can_have_matches_nothing() -> None:
    recorder = PlaneDCBRecorder(stores.open_memory_plane(), UniverseId.new())
    recorder.append([DCBEvent("E", b"1", ["t"])])
    for position, name in enumerate(("", "t" * (MAX_TAG_BYTES + 1), "\ud800"), start=2):
        assert list(recorder.read(DCBQuery([DCBQueryItem(tags=[name])]))) == []
        assert list(recorder.read(DCBQuery([DCBQueryItem(types=[name])]))) == []
        condition = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=[name])]))
        assert recorder.append([DCBEvent("E", b"2")], condition) == position


@pytest.mark.parametrize("seed", range(8))
def test_faults_and_a_competing_writer_never_duplicate_lose_or_break_a_condition(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random appends (random tags, conditioned on what was read) through an engine that
    fails commits (conflicts, unknown results applied or not, too old) and reads, with
    another writer after every failed commit -- appending, or queueing a call and stopping
    (odd seeds: queue pages of 3 records, records of 7 bytes, so calls span both): each
    returned position holds the call's events; no call's events are stored twice; a
    refused call's never; a stopped writer's once; each condition held over the final
    store; after a settle the queue and the pending index are empty, ``h`` is the head and
    every event is indexed at its position, nothing else."""
    if seed % 2:
        monkeypatch.setattr(dcb, "QUEUE_PAGE", 3)
        monkeypatch.setattr(dcb, "CHUNK_BYTES", 7)
    rng = random.Random(seed)
    engine = MemoryEngine()
    clean = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe := UniverseId.new())
    stopping = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)
    tags = ["a", "b", "c"]
    stopped: list[bytes] = []

    def compete() -> None:
        tag = rng.choice(tags)
        if rng.random() < 0.3:  # a writer that stops between its two steps
            event = DCBEvent("Stopped", uuid.uuid4().bytes, [tag])
            stopping._enqueue(
                dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(event)]), None, 0, None
            )
            stopped.append(event.data)
            return
        query = DCBQuery([DCBQueryItem(tags=[tag])])
        with contextlib.suppress(IntegrityError):
            clean.append(
                [DCBEvent("Other", uuid.uuid4().bytes, [tag])],
                DCBAppendCondition(query, clean.read(query).head),
            )

    injector = FaultInjector(
        seed=seed, commit_fault_rate=0.25, read_fault_rate=0.05, interleave=compete
    )
    faulty = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore()), universe
    )
    returned: dict[bytes, tuple[int, int]] = {}  # data -> (last position, events)
    refused: set[bytes] = set()
    conditions: list[tuple[str, int, bytes]] = []  # tag, after, data
    for _ in range(60):
        tag = rng.choice(tags)
        query = DCBQuery([DCBQueryItem(tags=[tag])])
        count = rng.randint(1, 3)
        data = uuid.uuid4().bytes
        events = [DCBEvent("Mine", data, [tag, rng.choice(tags)]) for _ in range(count)]
        try:
            seen = clean.read(query).head or 0
            condition = DCBAppendCondition(query, seen) if rng.random() < 0.7 else None
            position = faulty.append(events, condition)
        except IntegrityError:
            refused.add(data)
            continue
        except (OperationalError, InternalError):
            continue  # the outcome is not known: stored once or not at all
        returned[data] = (position, count)
        if condition is not None:
            conditions.append((tag, seen, data))
    assert returned, "no append succeeded: the test proves nothing"
    stored, where = placed(clean, returned)
    assert not refused & where.keys()
    assert all(len(where[data]) == 1 for data in stopped)
    for positions in where.values():  # one call's events, stored once, side by side
        assert positions == list(range(positions[0], positions[0] + len(positions)))
    for tag, seen, data in conditions:
        first = where[data][0]
        assert not [e for e in stored if seen < e.position < first and tag in e.event.tags]
    plane = clean.plane
    assert plane.read_app_range(universe, b"q", b"r") == []
    assert plane.read_app_range(universe, b"p", b"q") == []
    assert plane.read_app_data(universe, b"h") == len(stored).to_bytes(8, "big")
    index = {key for key, _ in plane.read_app_range(universe, b"t", b"u", limit=100_000)}
    index |= {key for key, _ in plane.read_app_range(universe, b"y", b"z", limit=100_000)}
    assert index == {
        key
        for e in stored
        for key in [dcb._index_key(b"y", e.event.type, e.position)]
        + [dcb._index_key(b"t", tag, e.position) for tag in e.event.tags]
    }


def _beside(injector: FaultInjector) -> tuple[PlaneDCBRecorder, PlaneDCBRecorder]:
    """Two recorders of one store, the second's engine faulty (``injector``)."""
    engine, universe = MemoryEngine(), UniverseId.new()
    clean = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)
    faulty = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore()), universe
    )
    return clean, faulty


def test_an_append_queued_first_is_placed_first() -> None:
    """C (conditioned on no ``y`` event after 1) is queued between O's enqueue reads and
    O's commit, and C's settle is slow (it waits inside its settle's append until O's append
    has returned): both appends succeed, and C is placed before O -- the ``y`` event O
    appended is after C, as C's condition requires."""
    injector = FaultInjector()
    c_rec, o_rec = _beside(injector)
    c_rec.append([DCBEvent("Seed", b"0", ["seed"])])
    entered, release = threading.Event(), threading.Event()
    real = c_rec.plane.append_sequenced

    def slow(*args: Any, **kwargs: Any) -> Any:  # C's settle, after its enqueue committed
        entered.set()
        assert release.wait(30)
        return real(*args, **kwargs)

    c_rec.plane.append_sequenced = slow
    condition = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=["y"])]), 1)
    result: dict[str, int] = {}
    thread = threading.Thread(
        target=lambda: result.update(c=c_rec.append([DCBEvent("C", b"c", ["x"])], condition))
    )

    def start_c_once() -> None:  # between O's enqueue reads and its commit
        if not thread.is_alive() and not entered.is_set():
            thread.start()
            assert entered.wait(30)

    injector.before_every_commit = start_c_once
    o_position = o_rec.append([DCBEvent("O", b"o", ["y"])])
    injector.before_every_commit = None
    release.set()
    thread.join(30)
    assert (result["c"], o_position) == (2, 3)
    assert [e.event.type for e in c_rec.read()] == ["Seed", "C", "O"]


def test_an_append_up_to_the_settles_limit_is_placed_and_one_over_is_refused() -> None:
    """One event with 4,997 tags makes a settle of exactly ``max_batch_entries`` keys (its
    entry, its index keys set and cleared, its queue record, its ``c``, the head): placed.
    One tag more is ``DataError`` before anything is written, and the store goes on."""
    recorder = PlaneDCBRecorder(stores.open_memory_plane(), UniverseId.new())
    assert recorder.plane.config.max_batch_entries == 10_000
    recorder.append([DCBEvent("Seed", b"0")])
    tags = [f"t{i:04}" for i in range(4998)]
    assert recorder.append([DCBEvent("E", b"1", tags[:-1])]) == 2
    with pytest.raises(DataError, match="more than a settle may move"):
        recorder.append([DCBEvent("E", b"2", tags)])
    assert recorder.plane.read_app_range(recorder.universe, b"q", b"r") == []
    assert recorder.append([DCBEvent("Next", b"3")]) == 3


def test_an_event_over_the_planes_entry_limit_is_refused_before_anything_is_written() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore(), PlaneConfig(max_entry_bytes=1_000))
    recorder = PlaneDCBRecorder(plane, UniverseId.new())
    with pytest.raises(DataError, match="max 1,000"):
        recorder.append([DCBEvent("E", b"x" * 2_000)])
    assert plane.read_app_range(recorder.universe) == []
    assert recorder.append([DCBEvent("E", b"x" * 900)]) == 1


def test_settle_places_everything_stopped_writers_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten writers stopped after their enqueue; pages of 4 queue records: one ``settle``
    places all ten."""
    monkeypatch.setattr(dcb, "QUEUE_PAGE", 4)
    plane = stores.open_memory_plane()
    recorder = PlaneDCBRecorder(plane, UniverseId.new())
    for n in range(10):
        call = dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(DCBEvent("E", b"%d" % n))])
        recorder._enqueue(call, None, 0, None)
    assert list(recorder.read()) == []
    recorder.settle()
    assert plane.read_app_range(recorder.universe, b"q", b"r") == []
    assert [e.event.data for e in recorder.read()] == [b"%d" % n for n in range(10)]


@pytest.mark.parametrize(
    "query",
    [
        DCBQuery([DCBQueryItem(types="Seat")]),  # type: ignore[arg-type]
        DCBQuery([DCBQueryItem(tags=None)]),  # type: ignore[arg-type]
        DCBQuery([None]),  # type: ignore[list-item]
        DCBQuery(None),  # type: ignore[arg-type]
    ],
    ids=["types-a-string", "tags-none", "item-none", "items-none"],
)
def test_a_malformed_query_is_a_data_error_before_anything_is_written(query: DCBQuery) -> None:
    recorder = PlaneDCBRecorder(stores.open_memory_plane(), UniverseId.new())
    recorder.append([DCBEvent("Seat", b"booked", ["seat-1"])])
    with pytest.raises(DataError):
        recorder.append([DCBEvent("Seat", b"again")], DCBAppendCondition(query, 0))
    with pytest.raises(DataError):
        recorder.read(query)
    with pytest.raises(DataError):
        recorder.append(DCBEvent("Seat", b"again"))  # type: ignore[arg-type]
    assert [e.position for e in recorder.read()] == [1]


@pytest.mark.parametrize("kind", ["tag", "type"])
def test_a_name_is_not_matched_by_a_longer_name_that_starts_with_it(kind: str) -> None:
    """``a`` packs to a prefix of what ``a\\x00`` packs to: a condition on ``a`` reads only
    ``a``'s keys."""
    recorder = PlaneDCBRecorder(stores.open_memory_plane(), UniverseId.new())
    if kind == "tag":
        recorder.append([DCBEvent("E", b"1", ["a\x00", "ab"])])
        query = DCBQuery([DCBQueryItem(tags=["a"])])
    else:
        recorder.append([DCBEvent("a\x00", b"1"), DCBEvent("ab", b"2")])
        query = DCBQuery([DCBQueryItem(types=["a"])])
    assert list(recorder.read(query)) == []
    assert recorder.append([DCBEvent("E", b"3")], DCBAppendCondition(query, 0)) >= 2


@pytest.mark.parametrize("commit", [1, 2, 3], ids=["enqueue", "settle", "log"])
@pytest.mark.parametrize("outcome", ["applied", "late", "not-applied"])
@pytest.mark.parametrize("boundary", ["same", "other"])
def test_an_unknown_result_with_another_writer_between_appends_once_and_keeps_the_condition(
    commit: int, outcome: str, boundary: str
) -> None:
    """An unknown result (applied, landing late, or not applied) on the enqueue, the
    settle or the commit after, with another writer appending before the retry under the
    same boundary or another: the call's event is stored at most once, at the position it
    returned, and its condition held."""
    injector = FaultInjector()
    clean, faulty = _beside(injector)
    clean.append([DCBEvent("S", b"s", ["x"])])
    tag = "x" if boundary == "same" else "z"
    theirs = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=[tag])]), 1)

    def compete() -> None:
        with contextlib.suppress(IntegrityError):
            clean.append([DCBEvent("O", b"o", [tag])], theirs)

    injector.fail_commit(
        commit,
        fdb_errors.COMMIT_UNKNOWN_RESULT,
        applied=outcome == "applied",
        late=outcome == "late",
        interleave=compete,
    )
    condition = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=["x"])]), 1)
    try:
        position: int | None = faulty.append([DCBEvent("M", b"m", ["x"])], condition)
    except IntegrityError:
        position = None
    clean.settle()
    stored = [(e.position, e.event.data) for e in clean.read()]
    assert [p for p, _ in stored] == list(range(1, len(stored) + 1))
    mine = [p for p, data in stored if data == b"m"]
    assert mine == ([] if position is None else [position])
    if position is not None and boundary == "same":
        assert b"o" not in [data for p, data in stored if p < position]


def test_a_condition_far_behind_the_head_is_checked_in_windows_then_from_the_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows of 5 positions, 30 events: a condition 28 positions behind is checked up to
    the head in read transactions first (a match is refused there, the enqueue never
    runs); otherwise the enqueue reads only what is after that head -- and sees an event
    another writer placed after the check."""
    monkeypatch.setattr(dcb, "WINDOW", 5)
    plane = stores.open_memory_plane()
    universe = UniverseId.new()
    mine, other = PlaneDCBRecorder(plane, universe), PlaneDCBRecorder(plane, universe)
    for n in range(30):
        other.append([DCBEvent("E", b"%d" % n, ["x"])])
    assert mine.read().head == 30
    checked: list[int] = []
    real_matched = dcb._matched

    def matched(tr: AppTransaction, items: list[DCBQueryItem], after: int) -> Any:
        checked.append(after)
        return real_matched(tr, items, after)

    monkeypatch.setattr(dcb, "_matched", matched)
    tag = {name: DCBQuery([DCBQueryItem(tags=[name])]) for name in ("x", "y", "z")}
    with pytest.raises(IntegrityError):
        mine.append([DCBEvent("E", b"m")], DCBAppendCondition(tag["x"], 2))
    assert checked == []  # refused by the windowed check
    assert mine.append([DCBEvent("E", b"m", ["y"])], DCBAppendCondition(tag["y"], 2)) == 31
    assert checked == [30]
    real_find = mine._find

    def find_then_another_appends(*args: Any) -> tuple[int, list[int]]:
        found = real_find(*args)
        other.append([DCBEvent("E", b"late", ["z"])])  # placed after the checked head
        return found

    monkeypatch.setattr(mine, "_find", find_then_another_appends)
    with pytest.raises(IntegrityError):
        mine.append([DCBEvent("E", b"n", ["z"])], DCBAppendCondition(tag["z"], 2))
    assert checked == [30, 31]
    assert [e.event.data for e in mine.read(tag["z"])] == [b"late"]
