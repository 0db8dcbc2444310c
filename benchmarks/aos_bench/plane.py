"""Plane throughput on the SQLite engine against the ``eventsourcing`` library's SQLite
application recorder doing the equivalent work, and reads against raw SQL on our own table,
measured in the same run.

Figures (1,000-byte entries, events and inbox items throughout):

1. single-entry :meth:`Plane.append_batch` commits/s vs single-event ``insert_events`` calls/s
   (target 1.0);
2. 100-entry ``append_batch`` entries/s vs 100-event ``insert_events`` events/s (target 1.2);
3. ``read_range`` of 20,000 entries vs a raw ``SELECT key, value FROM kv`` of the same 20,000
   rows of our own table on a plain ``sqlite3`` connection (target 0.8: what the plane and the
   engine add to reading the rows);
4. ``read_range`` of 20,000 entries vs ``select_events`` of the same 20,000 events (target 2.0);
5. enqueue -> drain end to end: 4 writer processes (``spawn`` context) each call
   :meth:`Plane.enqueue` one item at a time for a fixed time while this process drains
   with :meth:`Plane.drain_inbox_to_journal` until every item is in the journal (the count
   and every entry are verified afterwards). The eventsourcing equivalent: the same 4
   writer processes each call ``insert_events`` with one event at a time (each writer its
   own aggregate sequence, so writers never collide on a version, as enqueues never
   collide), while this process follows the application's notification log with
   ``select_notifications`` until it has read every event. The notification log is
   eventsourcing's one total order over all writers, as the journal is ours; ours does
   more work (every item is written twice: into the inbox, then into the journal with
   the cursor); the target is issue #16's, 1.0.
6. what journal checksums cost (layout 3, ``protocols/checksums.py``): single-entry and
   100-entry ``append_batch`` and ``read_range`` of 20,000 entries on a store of the current
   layout against the same calls on a store of layout 2 (entries stored without
   checksums), both ours, in the same run (target 0.95: within the noise of the figures
   above).

Figures 1-4 and 6 use one store per side; after a warm-up, each of ``ROUNDS`` rounds calls the
two sides **alternately, operation by operation** (the order flipping every pair), timing
each call, so drift in fsync latency or CPU contention hits both sides alike. A round's
ratio is our calls/s over theirs in that round; a figure reports the median and the range
of its round ratios (``Figure.round_ratios``) and the median rate of each side. Figure 5
alternates whole rounds (theirs, ours), each on fresh stores.

Durability and configuration of each side (both files in the same temporary directory):

* ours: :class:`~backends.kv.sqlite.SqliteEngine` with ``synchronous="FULL"``: a file
  database in WAL journal mode, ``PRAGMA synchronous = FULL`` on every connection (every
  commit fsyncs the WAL), 8 KiB pages, busy timeout 60 s; objects in a
  :class:`~backends.objects.memory.MemoryObjectStore` (only the two tiny genesis bodies,
  stored inline in the engine anyway). No OpenTelemetry SDK is configured (spans are
  no-ops), as in an application that does not trace.
* theirs: eventsourcing 9.5 ``SQLiteApplicationRecorder`` over ``SQLiteDatastore(path,
  lock_timeout=60)``: a file database (not ``:memory:``); the library itself switches the
  file to WAL journal mode on its first connection. It has no option for
  ``synchronous``, so this module wraps the datastore pool's ``_create_connection`` (the
  one place connections are made) to run ``PRAGMA synchronous = FULL`` on every new
  connection, and checks before measuring that a pooled connection reports
  ``journal_mode = wal`` and ``synchronous = 2`` (FULL). Its table is the library's own
  (rowid table plus a ``(originator_id, originator_version)`` primary-key index, default
  4 KiB pages); events are ``StoredEvent(uuid, version, topic, 1,000-byte state)``.
* raw SQL (figure 3): a ``sqlite3`` connection of its own on our store's file, one
  ``SELECT`` of the journal's key range fetched whole.

Both sides make exactly one WAL ``fdatasync`` per commit, so single-entry commits are
bounded by the same fsync latency: even a zero-cost engine cannot reach much beyond 1.0x
there (raw ``sqlite3`` doing BEGIN/INSERT/COMMIT runs at eventsourcing's speed). Page size
matters through the bytes each commit syncs: single appends interleaved on three stores
took 277 us with 8 KiB pages, 307 us with 16 KiB and 305 us with 4 KiB (1 KB entries spill
to overflow pages there); eventsourcing's 250 us.
"""

from __future__ import annotations

import functools
import multiprocessing
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

from aos_bench import Figure, require
from persistence import cbor, kv
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, encode_inbox_item
from persistence.journal_records import IngressJournalRecord
from persistence.keyspace import LAYOUT_KEY, LAYOUT_VERSION, WorldKeys
from persistence.plane import Plane
from persistence.records import LayoutRecord, decode_record
from segments import open_plane

ENTRY: Final = b"x" * 1000
ROUNDS: Final = 5
WARMUP_SECONDS: Final = 0.5
"""Alternating calls of both sides before the measured rounds (connections, page cache and
allocator warm), at most one round's time."""
READ_ENTRIES: Final = 20_000
WRITERS: Final = 4
TOPIC: Final = "bench:Entry"
ITEM_SIZE: Final = 1000
STALL_SECONDS: Final = 120.0


def _eventsourcing() -> SimpleNamespace:
    """The eventsourcing classes used here (``MissingDependency`` if not installed)."""
    require("the benchmarks against eventsourcing", "bench", "eventsourcing")
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    return SimpleNamespace(
        StoredEvent=StoredEvent,
        SQLiteApplicationRecorder=SQLiteApplicationRecorder,
        SQLiteDatastore=SQLiteDatastore,
    )


def _their_recorder(path: str, *, create: bool, trace: Callable[[str], None] | None = None) -> Any:
    """An eventsourcing application recorder on the file ``path``, WAL + synchronous=FULL;
    with ``trace``, every statement its connections run is passed to it as SQLite traces it
    (``sqlite3.Connection.set_trace_callback``)."""
    es = _eventsourcing()
    datastore = es.SQLiteDatastore(path, lock_timeout=60)
    make = datastore.pool._create_connection

    def make_full() -> Any:
        conn = make()
        conn._sqlite_conn.execute("PRAGMA synchronous = FULL")
        conn._sqlite_conn.set_trace_callback(trace)
        return conn

    setattr(datastore.pool, "_create_connection", make_full)  # noqa: B010 -- patch a method
    recorder = es.SQLiteApplicationRecorder(datastore)
    if create:
        recorder.create_table()
    with datastore.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA journal_mode")
        journal_mode = str(cursor.fetchone()[0]).lower()
        cursor.execute("PRAGMA synchronous")
        synchronous = int(cursor.fetchone()[0])
    if journal_mode != "wal" or synchronous != 2:
        raise RuntimeError(
            f"eventsourcing store not configured as intended: journal_mode={journal_mode}, "
            f"synchronous={synchronous}"
        )
    return recorder


def _our_plane(path: str, layout: int | None = None) -> Plane:
    """Our plane on a new SQLite store; with ``layout``, a store of that layout (as an
    older release created it)."""
    from backends.kv.sqlite import SqliteEngine
    from backends.objects.memory import MemoryObjectStore

    engine = SqliteEngine(path, synchronous="FULL")
    if layout is not None:
        record = LayoutRecord(layout).to_cbor()
        kv.run_sync(engine, lambda tr: tr.set(LAYOUT_KEY, record))
    return open_plane(engine, MemoryObjectStore())


def _close(plane: Plane) -> None:
    plane.engine.close()


def _item() -> DomainEventIngress:
    """A domain-event inbox item whose canonical encoding is ``ITEM_SIZE`` bytes."""
    overhead = len(encode_inbox_item(DomainEventIngress("bench.item", cbor.encode(b"x" * 900))))
    item = DomainEventIngress("bench.item", cbor.encode(b"x" * (900 + ITEM_SIZE - overhead)))
    assert len(encode_inbox_item(item)) == ITEM_SIZE
    return item


@dataclass(frozen=True, slots=True)
class _Compared:
    """Two sides measured in alternating rounds: median calls/s of each, and each round's
    ratio (ours over theirs)."""

    ours: float
    theirs: float
    ratios: tuple[float, ...]

    @classmethod
    def of(cls, ours: list[float], theirs: list[float]) -> _Compared:
        """The medians and per-round ratios of the rates of paired rounds."""
        return cls(
            statistics.median(ours),
            statistics.median(theirs),
            tuple(o / t for o, t in zip(ours, theirs, strict=True)),
        )


def _alternate(
    ours: Callable[[], None],
    theirs: Callable[[], None],
    seconds: float,
    minimum: int,
    most: int | None = None,
) -> _Compared:
    """Call ``ours`` and ``theirs`` alternately, one call each in turn (the order flipping
    every pair), timing each call: a warm-up, then ``ROUNDS`` rounds of at least
    ``seconds / ROUNDS`` and ``minimum`` pairs each. With ``most``, the warm-up and each
    round stop at that many pairs (so at most ``most * (ROUNDS + 1)`` calls of each side)."""
    clock = time.perf_counter
    sides = ((0, ours), (1, theirs))
    warm_until = clock() + min(WARMUP_SECONDS, seconds / ROUNDS)
    warm = 0
    while True:
        theirs()
        ours()
        warm += 1
        if clock() >= warm_until or warm == most:
            break
    ours_rates, theirs_rates = [], []
    for _ in range(ROUNDS):
        spent = [0.0, 0.0]
        pairs = 0
        deadline = clock() + seconds / ROUNDS
        while (pairs < minimum or clock() < deadline) and pairs != most:
            for side, fn in sides if pairs % 2 else sides[::-1]:
                start = clock()
                fn()
                spent[side] += clock() - start
            pairs += 1
        ours_rates.append(pairs / spent[0])
        theirs_rates.append(pairs / spent[1])
    return _Compared.of(ours_rates, theirs_rates)


class _Journal:
    """Appends to one world's journal, tracking its head."""

    def __init__(self, plane: Plane, entries: list[bytes]) -> None:
        self.plane = plane
        self.universe = UniverseId.new()
        self.world = WorldId.new()
        self.entries = entries
        self.head = 0
        plane.create_world(self.universe, self.world)

    def append(self) -> None:
        first = self.plane.append_batch(self.universe, self.world, self.head, self.entries)
        self.head = first + len(self.entries) - 1


class _Sequence:
    """Inserts events into one eventsourcing aggregate sequence, tracking its version."""

    def __init__(self, recorder: Any, count: int) -> None:
        self.recorder = recorder
        self.stored_event = _eventsourcing().StoredEvent
        self.id = uuid.uuid4()
        self.count = count
        self.version = 0

    def insert(self) -> None:
        events = [
            self.stored_event(self.id, self.version + 1 + i, TOPIC, ENTRY)
            for i in range(self.count)
        ]
        self.recorder.insert_events(events)
        self.version += self.count


def _figure(
    name: str,
    unit: str,
    baseline: str,
    compared: _Compared,
    scale: int,
    target: float | None,
) -> Figure:
    """A figure of ``compared`` (calls/s times ``scale``: entries or events per call)."""
    return Figure(
        name=name,
        value=round(compared.ours * scale, 1),
        unit=unit,
        baseline=baseline,
        baseline_value=round(compared.theirs * scale, 1),
        target=target,
        better="higher",
        round_ratios=compared.ratios,
    )


BASELINE: Final = "eventsourcing 9.5 SQLiteApplicationRecorder, file DB, WAL + synchronous=FULL"


def _appends(tmp: Path, batch: int, seconds: float, progress: Callable[[str], None]) -> Figure:
    progress(f"plane: {batch}-entry append_batch vs {batch}-event insert_events")
    plane = _our_plane(str(tmp / f"append{batch}.db"))
    recorder = _their_recorder(str(tmp / f"es-append{batch}.db"), create=True)
    journal = _Journal(plane, [ENTRY] * batch)
    sequence = _Sequence(recorder, batch)
    compared = _alternate(journal.append, sequence.insert, seconds, 10)
    _close(plane)
    recorder.datastore.close()
    if batch == 1:
        return _figure(
            "plane: single-entry append_batch (1 KB entries, sqlite FULL)",
            "commits/s",
            f"{BASELINE}: single-event insert_events",
            compared,
            1,
            1.0,
        )
    return _figure(
        f"plane: {batch}-entry append_batch (1 KB entries, sqlite FULL)",
        "entries/s",
        f"{BASELINE}: {batch}-event insert_events",
        compared,
        batch,
        1.2,
    )


def _reads(tmp: Path, seconds: float, progress: Callable[[str], None]) -> list[Figure]:
    progress(f"plane: read_range of {READ_ENTRIES:,} entries vs raw SELECT and select_events")
    path = tmp / "read.db"
    plane = _our_plane(str(path))
    recorder = _their_recorder(str(tmp / "es-read.db"), create=True)
    journal = _Journal(plane, [ENTRY] * 1000)
    sequence = _Sequence(recorder, 1000)
    for _ in range(READ_ENTRIES // 1000):
        journal.append()
        sequence.insert()
    raw = sqlite3.connect(path, isolation_level=None)
    begin, end = WorldKeys(journal.universe, journal.world).entries_between(1, READ_ENTRIES)

    def ours() -> None:
        rows = plane.read_range(journal.universe, journal.world, 1, READ_ENTRIES)
        if len(rows) != READ_ENTRIES or rows[-1] != (READ_ENTRIES, ENTRY):
            raise AssertionError("read_range returned the wrong entries")

    def raw_select() -> None:
        rows = raw.execute(
            "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key", (begin, end)
        ).fetchall()
        if len(rows) != READ_ENTRIES or rows[-1][1][: len(ENTRY)] != ENTRY:  # and its checksum
            raise AssertionError("the raw SELECT returned the wrong rows")

    def theirs() -> None:
        events = recorder.select_events(sequence.id, gt=0, limit=READ_ENTRIES)
        if len(events) != READ_ENTRIES or events[-1].originator_version != READ_ENTRIES:
            raise AssertionError("select_events returned the wrong events")

    against_raw = _alternate(ours, raw_select, seconds, 3)
    against_theirs = _alternate(ours, theirs, seconds, 3)
    raw.close()
    _close(plane)
    recorder.datastore.close()
    name = f"plane: read_range of {READ_ENTRIES:,} entries (1 KB entries, sqlite)"
    return [
        _figure(
            f"{name} vs raw SQL",
            "entries/s",
            f"raw sqlite3 SELECT of the same {READ_ENTRIES:,} rows of our kv table",
            against_raw,
            READ_ENTRIES,
            0.8,
        ),
        _figure(
            name,
            "entries/s",
            f"{BASELINE}: select_events of the same {READ_ENTRIES:,} events",
            against_theirs,
            READ_ENTRIES,
            2.0,
        ),
    ]


def _checksums(tmp: Path, seconds: float, progress: Callable[[str], None]) -> list[Figure]:
    """Figure 6: appends and reads on a store of the current layout (entries sealed with
    CRC-32C) against a layout-2 one (without checksums); the read on a layout-3 store
    (CRC-32) too, reported."""
    progress(
        f"plane: journal checksums (layout {LAYOUT_VERSION}) vs entries without them (layout 2)"
    )
    sealed, plain, crc32 = (
        _our_plane(str(tmp / f"sums-{n}.db"), n) for n in (LAYOUT_VERSION, 2, 3)
    )
    if not sealed.checksummed or plain.checksummed or not crc32.checksummed:
        raise AssertionError("the stores are not of the layouts compared")
    name = "plane: journal checksums"
    baseline = "the same calls on a layout-2 store (entries without checksums)"
    figures = []
    for batch, unit in ((1, "commits/s"), (100, "entries/s")):
        ours, theirs = _Journal(sealed, [ENTRY] * batch), _Journal(plain, [ENTRY] * batch)
        compared = _alternate(ours.append, theirs.append, seconds, 10)
        what = f"{name}, {batch}-entry append_batch (1 KB entries, sqlite FULL)"
        figures.append(_figure(what, unit, baseline, compared, batch, 0.95))
    readers = {}
    for plane in (sealed, plain, crc32):
        journal = _Journal(plane, [ENTRY] * 1000)
        for _ in range(READ_ENTRIES // 1000):
            journal.append()
        readers[plane.layout] = functools.partial(_read_all, journal)
    for layout, target in ((LAYOUT_VERSION, 0.95), (3, None)):
        compared = _alternate(readers[layout], readers[2], seconds, 3)
        what = f"{name}, read_range of {READ_ENTRIES:,} entries (1 KB entries, sqlite)"
        if layout != LAYOUT_VERSION:
            what += f", layout {layout} (CRC-32)"
        figures.append(_figure(what, "entries/s", baseline, compared, READ_ENTRIES, target))
    for plane in (sealed, plain, crc32):
        _close(plane)
    return figures


def _read_all(journal: _Journal) -> None:
    rows = journal.plane.read_range(journal.universe, journal.world, 1, READ_ENTRIES)
    if len(rows) != READ_ENTRIES or rows[-1] != (READ_ENTRIES, ENTRY):
        raise AssertionError("read_range returned the wrong entries")


# --------------------------------------------------------------------------- figure 5

_barrier: Barrier | None = None


def _init_writer(barrier: Barrier) -> None:
    """Pool initializer: keep the start barrier shared with the parent."""
    global _barrier
    _barrier = barrier


def _start() -> float:
    """Wait for every writer and the parent; return the deadline clock's start."""
    assert _barrier is not None
    _barrier.wait(timeout=120)
    return time.perf_counter()


def _writer(kind: str, path: str, universe: str, world: str, seconds: float) -> int:
    """One writer process: enqueue (ours) or insert (theirs) one item per call for
    ``seconds``; return how many it wrote."""
    count = 0
    if kind == "ours":
        plane = _our_plane(path)
        u, w, item = UniverseId.parse(universe), WorldId.parse(world), _item()
        deadline = _start() + seconds
        while time.perf_counter() < deadline:
            plane.enqueue(u, w, item)
            count += 1
        _close(plane)
    else:
        recorder = _their_recorder(path, create=False)
        stored_event = _eventsourcing().StoredEvent
        aggregate = uuid.uuid4()
        state = b"x" * ITEM_SIZE
        deadline = _start() + seconds
        while time.perf_counter() < deadline:
            count += 1
            recorder.insert_events([stored_event(aggregate, count, TOPIC, state)])
        recorder.datastore.close()
    return count


def _check_stalled(job: Any, start: float, seconds: float) -> None:
    """Fail rather than spin if the writers finished long ago and items are still missing."""
    if job.ready() and time.perf_counter() - start > seconds + STALL_SECONDS:
        raise RuntimeError(f"items still missing {STALL_SECONDS} s after the writers stopped")


def _pipeline_ours(pool: Any, barrier: Barrier, tmp: Path, round_: int, seconds: float) -> float:
    path = str(tmp / f"pipe{round_}.db")
    plane = _our_plane(path)
    journal = _Journal(plane, [])
    u, w = journal.universe, journal.world
    job = pool.starmap_async(
        _writer, [("ours", path, str(u), str(w), seconds)] * WRITERS, chunksize=1
    )
    barrier.wait(timeout=120)
    start = time.perf_counter()
    drained = 0
    while True:
        result = plane.drain_inbox_to_journal(u, w, max_items=1000)
        drained += result.count
        if job.ready() and drained >= sum(job.get()):
            break
        _check_stalled(job, start, seconds)
        if result.count == 0:
            time.sleep(0.0005)
    elapsed = time.perf_counter() - start
    total: int = sum(job.get())
    rows = plane.read_range(u, w, 1, total + 1)
    expected = encode_inbox_item(_item())
    seqs = []
    for height, entry in rows:
        record = decode_record(IngressJournalRecord, entry, f"journal entry {height}")
        if record.item != expected:
            raise AssertionError(f"journal entry {height} is not the enqueued item")
        seqs.append(record.seq)
    if len(rows) != total or len(set(seqs)) != total or seqs != sorted(seqs):
        raise AssertionError(f"journal holds {len(rows)} items, {total} were enqueued")
    if plane.read_after(u, w, plane.inbox_cursor(u, w), 1):
        raise AssertionError("inbox not fully drained")
    _close(plane)
    return total / elapsed


def _pipeline_theirs(pool: Any, barrier: Barrier, tmp: Path, round_: int, seconds: float) -> float:
    path = str(tmp / f"es-pipe{round_}.db")
    recorder = _their_recorder(path, create=True)
    job = pool.starmap_async(_writer, [("theirs", path, "", "", seconds)] * WRITERS, chunksize=1)
    barrier.wait(timeout=120)
    start = time.perf_counter()
    seen = 0
    last = 0
    while True:
        notifications = recorder.select_notifications(last + 1, 1000)
        seen += len(notifications)
        if notifications:
            last = notifications[-1].id
        if job.ready() and seen >= sum(job.get()):
            break
        _check_stalled(job, start, seconds)
        if not notifications:
            time.sleep(0.0005)
    elapsed = time.perf_counter() - start
    total: int = sum(job.get())
    everything = recorder.select_notifications(1, total + 1)
    if (
        len(everything) != total
        or len({(n.originator_id, n.originator_version) for n in everything}) != total
    ):
        raise AssertionError(f"notification log holds {len(everything)} events, {total} inserted")
    recorder.datastore.close()
    return total / elapsed


def _pipeline(tmp: Path, seconds: float, progress: Callable[[str], None]) -> Figure:
    progress(f"plane: enqueue -> drain with {WRITERS} writer processes")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS + 1)
    ours_rates, theirs_rates = [], []
    with ctx.Pool(WRITERS, initializer=_init_writer, initargs=(barrier,)) as pool:
        for round_ in range(ROUNDS):
            theirs_rates.append(_pipeline_theirs(pool, barrier, tmp, round_, seconds / ROUNDS))
            ours_rates.append(_pipeline_ours(pool, barrier, tmp, round_, seconds / ROUNDS))
    return _figure(
        f"plane: enqueue -> drain_inbox_to_journal, {WRITERS} writer processes (1 KB items)",
        "items/s",
        f"{BASELINE}: {WRITERS} writer processes of single-event insert_events, "
        "one reader following select_notifications (ours writes each item twice: inbox, "
        "then journal)",
        _Compared.of(ours_rates, theirs_rates),
        1,
        1.0,  # issue #16's target
    )


def run(seconds: float = 2.0, progress: Callable[[str], None] = lambda _: None) -> list[Figure]:
    """Measure and return the plane figures (``MissingDependency`` without eventsourcing)."""
    _eventsourcing()
    figures = []
    with tempfile.TemporaryDirectory(prefix="aosp-bench-plane-") as name:
        tmp = Path(name)
        figures.append(_appends(tmp, 1, seconds, progress))
        figures.append(_appends(tmp, 100, seconds, progress))
        figures.extend(_reads(tmp, seconds, progress))
        figures.append(_pipeline(tmp, seconds, progress))
        figures.extend(_checksums(tmp, seconds, progress))
    return figures
