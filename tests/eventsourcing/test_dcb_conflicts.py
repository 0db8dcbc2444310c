"""DCB appends (``aos_eventsourcing/dcb.py``): which reads conflict -- an append under
another boundary never makes an enqueue run again --, a read error that leaks nothing, and
settles that place what they read and do not give up while the queue moves. Each test
failed before the fix a review proposed."""

from __future__ import annotations

import contextlib
import gc
import random
import threading
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.dcb.api import DCBAppendCondition, DCBEvent, DCBQuery, DCBQueryItem
from eventsourcing.persistence import IntegrityError, InternalError, OperationalError

from aos_eventsourcing import dcb
from aos_eventsourcing.dcb import PlaneDCBRecorder
from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import fdb_errors
from persistence.futures import Failed
from persistence.ids import UniverseId
from persistence.plane import AppTransaction
from segments import open_plane
from tests.eventsourcing import stores
from tests.eventsourcing.dcb_checks import placed


def _beside(injector: FaultInjector) -> tuple[PlaneDCBRecorder, PlaneDCBRecorder]:
    engine, universe = MemoryEngine(), UniverseId.new()
    clean = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)
    faulty = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore()), universe
    )
    return clean, faulty


def _count_enqueues(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    runs: list[int] = []
    real = dcb._enqueue

    async def counting(call: dcb._Call, *args: Any) -> Any:
        if b"mine" in call.entries[0]:
            runs.append(1)
        return await real(call, *args)

    monkeypatch.setattr(dcb, "_enqueue", counting)
    return runs


@pytest.mark.parametrize("where", ["placed", "pending"])
def test_a_type_and_tag_condition_does_not_conflict_with_an_append_under_another_tag(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Condition: no (tag ``z``, type ``T``) event after 5; an event tagged ``z`` of type
    ``U`` is after 5 (placed, or queued by a writer that stopped), so the item's type is
    read. Another writer appends (tag ``y``, type ``T``) -- an event the condition can never
    match -- between the enqueue's reads and its commit (placed: both steps; pending: its
    enqueue): the enqueue runs once. A match needs the item's tags, whose ranges are read
    with conflicts; its types are snapshot reads."""
    injector = FaultInjector()
    other, mine = _beside(injector)
    for n in range(5):
        other.append([DCBEvent("E", b"%d" % n, ["x"])])
    z_event = DCBEvent("U", b"zu", ["z"])
    if where == "placed":
        other.append([z_event])  # at 6
    else:  # queued by a writer that stopped before its settle
        call = dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(z_event)])
        other._enqueue(call, None, 0, None)
    runs = _count_enqueues(monkeypatch)
    fired: list[int] = []

    def another_writer_once() -> None:
        if not fired:
            fired.append(1)
            event = DCBEvent("T", b"yt", ["y"])
            if where == "placed":
                other.append([event])
            else:  # only its enqueue (a settle would move the z event: a real change)
                call = dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(event)])
                other._enqueue(call, None, 0, None)

    condition = DCBAppendCondition(DCBQuery([DCBQueryItem(types=["T"], tags=["z"])]), 5)
    injector.before_every_commit = another_writer_once
    mine.append([DCBEvent("T", b"mine", ["z"])], condition)
    injector.before_every_commit = None
    assert fired
    assert len(runs) == 1


def test_a_read_error_on_the_call_key_does_not_leak_the_check_coroutine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On FoundationDB a read's error surfaces when it is awaited: when the read of the
    ``c`` key fails, the condition's coroutine (its reads already issued) is closed, not
    left "never awaited", and the retry appends."""
    recorder = PlaneDCBRecorder(stores.open_memory_plane(), UniverseId.new())
    recorder.append([DCBEvent("E", b"1", ["a"])])
    real_get = AppTransaction.get
    failed: list[int] = []

    def get(self: AppTransaction, key: bytes, *, snapshot: bool = False) -> Any:
        if key.startswith(b"c") and not snapshot and not failed:
            failed.append(1)
            return Failed(fdb_errors.engine_error(fdb_errors.PROCESS_BEHIND, "lagging"))
        return real_get(self, key, snapshot=snapshot)

    monkeypatch.setattr(AppTransaction, "get", get)
    condition = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=["a"])]), 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert recorder.append([DCBEvent("E", b"2", ["a"])], condition) == 2
        gc.collect()
    assert failed
    leaked = [w for w in caught if "never awaited" in str(w.message)]
    assert not leaked, leaked[0].message


def test_a_settle_removes_the_queue_records_it_read_not_ones_it_recomputes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call queued with another chunking (another version of the module) is placed
    once and its queue records -- the keys read, not keys chunked again here -- removed;
    ``settle()`` ends (bounded here at 5 settles)."""
    plane = stores.open_memory_plane()
    recorder = PlaneDCBRecorder(plane, UniverseId.new())
    monkeypatch.setattr(dcb, "CHUNK_BYTES", 7)
    call = dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(DCBEvent("E", b"data"))])
    recorder._enqueue(call, None, 0, None)  # a writer that chunks by 7, then stopped
    monkeypatch.setattr(dcb, "CHUNK_BYTES", 80_000)
    settles: list[int] = []
    real = plane.append_sequenced

    def bounded(*args: Any, **kwargs: Any) -> Any:
        settles.append(1)
        if len(settles) > 5:
            raise RuntimeError("settle() does not end")
        return real(*args, **kwargs)

    monkeypatch.setattr(plane, "append_sequenced", bounded)
    with contextlib.suppress(RuntimeError):
        recorder.settle()
    assert [e.event.data for e in recorder.read()] == [b"data"]
    assert plane.read_app_range(recorder.universe, b"q", b"r") == []


def test_a_two_tag_item_does_not_conflict_with_an_append_of_one_of_its_tags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Condition: no event tagged both ``z`` and ``w`` after 5. Another writer appends an
    event tagged ``w`` only (it can never match) between the enqueue's reads and its
    commit: the enqueue runs once. A match writes every tag of the item, so its first tag
    is read with a conflict and the others as snapshots."""
    injector = FaultInjector()
    other, mine = _beside(injector)
    for n in range(5):
        other.append([DCBEvent("E", b"%d" % n, ["x"])])
    runs = _count_enqueues(monkeypatch)
    fired: list[int] = []

    def another_writer_once() -> None:
        if not fired:
            fired.append(1)
            other.append([DCBEvent("E", b"w", ["w"])])

    condition = DCBAppendCondition(DCBQuery([DCBQueryItem(tags=["z", "w"])]), 5)
    injector.before_every_commit = another_writer_once
    mine.append([DCBEvent("E", b"mine", ["z", "w"])], condition)
    injector.before_every_commit = None
    assert fired
    assert len(runs) == 1


def test_a_settle_that_loses_to_settles_placing_the_calls_ahead_does_not_give_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four calls are queued ahead (writers that stopped); a settle moves one call at a
    time (``max_batch_entries`` 6). Each time this append's settle is about to commit,
    another process's settle places the first queued call: every loss is progress (the
    head moved), so with ``MAX_ATTEMPTS`` 3 the append still places its call, at 6."""
    from persistence.plane import PlaneConfig

    monkeypatch.setattr(dcb, "MAX_ATTEMPTS", 3)
    config = PlaneConfig(max_batch_entries=6)
    engine, universe = MemoryEngine(), UniverseId.new()
    injector = FaultInjector()
    other = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore(), config), universe)
    mine = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore(), config), universe
    )
    other.append([DCBEvent("E", b"seed")])
    for n in range(4):
        call = dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(DCBEvent("E", b"%d" % n))])
        other._enqueue(call, None, 0, None)
    real = other.plane.append_sequenced
    one_step = threading.local()

    def other_settles_one_call() -> None:
        if getattr(one_step, "busy", False):
            return
        one_step.busy = True
        try:  # one settle of the other process: the first queued call
            _, head, calls, _ = other.plane.transact_app(universe, lambda tr: dcb._queue(None, tr))
            if head is not None and calls and b"mine" not in calls[0].entries[0]:
                chosen = calls[:1]
                names = [each.names() for each in chosen]
                real(
                    universe,
                    [(dcb.STORE_WORLD, head, [e for each in chosen for e in each.entries])],
                    [[event[-1][1] for each in names for event in each]],
                    app_data=dcb._moves(chosen, names, head),
                )
        finally:
            one_step.busy = False

    injector.before_every_commit = other_settles_one_call
    position = mine.append([DCBEvent("E", b"mine")])
    injector.before_every_commit = None
    assert position == 6


NAMES = ["a", "b", "c", "a\x00"]
TYPES = ["T", "U"]


def _random_query(rng: random.Random) -> DCBQuery:
    def item() -> DCBQueryItem:
        return DCBQueryItem(
            types=rng.sample(TYPES, rng.randint(0, 2)) if rng.random() < 0.5 else [],
            tags=rng.sample(NAMES, rng.randint(0, 2)) if rng.random() < 0.9 else [],
        )

    return DCBQuery([item() for _ in range(rng.randint(0 if rng.random() < 0.05 else 1, 2))])


def _matches(query: DCBQuery, event: DCBEvent) -> bool:
    return not query.items or any(
        (not item.types or event.type in item.types) and set(item.tags) <= set(event.tags)
        for item in query.items
    )


def _random_event(rng: random.Random, data: bytes) -> DCBEvent:
    return DCBEvent(rng.choice(TYPES), data, rng.sample(NAMES, rng.randint(0, 2)))


@pytest.mark.parametrize("seed", range(10))
def test_random_conditions_under_faults_hold_over_the_final_store(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random queries (types, tags, both, neither; names that extend others), conditions
    at random positions (far behind the head, at it, beyond it), windows of 3 positions
    (2 a transaction, so far conditions take the windowed check), odd seeds with pages of 3
    queue records of 7 bytes; commit and read faults, and another writer -- appending, or
    queueing and stopping -- after failed commits and before a third of the commits: every
    returned position holds its call's events, positions are dense, and no event that a
    successful append's condition excluded lies between its position and the append's."""
    monkeypatch.setattr(dcb, "WINDOW", 3)
    monkeypatch.setattr(dcb, "WINDOWS", 2)
    if seed % 2:
        monkeypatch.setattr(dcb, "QUEUE_PAGE", 3)
        monkeypatch.setattr(dcb, "CHUNK_BYTES", 7)
    rng = random.Random(seed)
    engine, universe = MemoryEngine(), UniverseId.new()
    clean = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)
    stopping = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)

    def compete() -> None:
        event = _random_event(rng, b"o" + uuid.uuid4().bytes)
        if rng.random() < 0.3:
            call = dcb._Call(b"", uuid.uuid4().bytes, [dcb.encode_event(event)])
            stopping._enqueue(call, None, 0, None)
            return
        with contextlib.suppress(IntegrityError):
            clean.append([event])

    def sometimes() -> None:
        if rng.random() < 0.3:
            compete()

    injector = FaultInjector(
        seed=seed, commit_fault_rate=0.2, read_fault_rate=0.03, interleave=compete
    )
    injector.before_every_commit = sometimes
    faulty = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore()), universe
    )
    conditions: list[tuple[DCBQuery, int, bytes]] = []
    returned: dict[bytes, tuple[int, int]] = {}
    for _ in range(80):
        data = b"m" + uuid.uuid4().bytes
        events = [_random_event(rng, data) for _ in range(rng.randint(1, 2))]
        head = clean.read().head or 0
        after = rng.choice([0, max(0, head - rng.randint(0, 12)), head, head + rng.randint(0, 3)])
        query = _random_query(rng)
        condition = DCBAppendCondition(query, after) if rng.random() < 0.8 else None
        if rng.random() < 0.3:
            list(faulty.read(query))  # the recorder sees a later head
        try:
            position = faulty.append(events, condition)
        except (IntegrityError, OperationalError, InternalError):
            continue
        returned[data] = (position, len(events))
        if condition is not None:
            conditions.append((query, after, data))
    assert returned
    stored, where = placed(clean, returned)
    for query, after, data in conditions:
        first = where[data][0]
        assert not [e for e in stored if after < e.position < first and _matches(query, e.event)]


NOPE = DCBQuery([DCBQueryItem(tags=["nope"])])


def test_a_long_condition_check_by_a_fresh_recorder_does_not_give_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new recorder (it has read no head, so the windowed pre-check is skipped) appends
    under a condition from position 0 over a history longer than the windows of 100
    attempts: nothing matches, nobody else writes, and the append succeeds."""
    monkeypatch.setattr(dcb, "WINDOW", 1)
    monkeypatch.setattr(dcb, "WINDOWS", 1)
    plane, universe = stores.open_memory_plane(), UniverseId.new()
    writer = PlaneDCBRecorder(plane, universe)
    writer.append([DCBEvent("E", b"%d" % n, ["x"]) for n in range(150)])
    fresh = PlaneDCBRecorder(plane, universe)
    assert fresh.append([DCBEvent("E", b"m", ["y"])], DCBAppendCondition(NOPE, 0)) == 151


def test_a_writer_under_another_boundary_is_placed_while_others_keep_appending() -> None:
    """Another writer appends under another tag before each of this writer's commits (150
    times): this append is not refused -- when its settle loses, the winner placed it."""
    engine, universe = MemoryEngine(), UniverseId.new()
    clean = PlaneDCBRecorder(open_plane(engine, MemoryObjectStore()), universe)
    clean.append([DCBEvent("S", b"s", ["other"])])
    injector = FaultInjector()
    faulty = PlaneDCBRecorder(
        open_plane(FaultyEngine(engine, injector), MemoryObjectStore()), universe
    )
    busy = [0]

    def other() -> None:
        if busy[0] < 150:
            busy[0] += 1
            clean.append([DCBEvent("O", b"o", ["other"])])

    injector.before_every_commit = other
    position = faulty.append([DCBEvent("M", b"m", ["mine"])], DCBAppendCondition(NOPE, 0))
    stored = [(e.position, e.event.data) for e in clean.read()]
    assert [p for p, data in stored if data == b"m"] == [position]


def test_an_h_behind_the_world_head_does_not_stop_appends() -> None:
    """``h`` set behind the world's head (a damaged store): the next append is placed at
    the world's head and writes ``h`` right again."""
    plane, universe = stores.open_memory_plane(), UniverseId.new()
    recorder = PlaneDCBRecorder(plane, universe)
    recorder.append([DCBEvent("E", b"1", ["x"]), DCBEvent("E", b"2", ["x"])])

    async def lag(tr: AppTransaction) -> None:
        tr.set(dcb._HEAD, (1).to_bytes(8, "big"))

    plane.transact_app(universe, lag)
    assert recorder.append([DCBEvent("E", b"3", ["y"])]) == 3
    assert [e.position for e in recorder.read()] == [1, 2, 3]
    assert plane.read_app_data(universe, b"h") == (3).to_bytes(8, "big")


def test_threads_appending_under_their_own_tags_on_sqlite_are_never_refused(
    tmp_path: Path,
) -> None:
    """Real SQLite, 16 threads x 10 appends, each thread under its own tag: none refused
    (SQLite's group commit runs waiting writers' transactions together; their settles
    place each other's calls)."""
    plane = open_plane(f"sqlite://{tmp_path}/aos.db", f"file://{tmp_path}/objects")
    universe = UniverseId.new()
    errors: list[Exception] = []

    def run(n: int) -> None:
        recorder = PlaneDCBRecorder(plane, universe)
        for _ in range(10):
            try:
                recorder.append([DCBEvent("E", b"x", [f"t{n}"])])
            except Exception as exc:  # the test reports every one
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert [e.position for e in PlaneDCBRecorder(plane, universe).read()] == list(range(1, 161))
    finally:
        plane.engine.close()
