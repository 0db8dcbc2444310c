"""eventsourcing applications on the plane (the ``aos_eventsourcing`` module) against
eventsourcing's own recorders doing the same calls, measured in the same run.

The module is loaded as an application loads it: ``InfrastructureFactory.construct`` with
``PERSISTENCE_MODULE=aos_eventsourcing`` and ``AOSP_KV_URL`` / ``AOSP_OBJECTS_URL`` (nothing
here imports it). Events are ``StoredEvent(uuid, version, topic, 100-byte state)``.

Figures, on SQLite files at equal durability (ours: :class:`~backends.kv.sqlite.SqliteEngine`
with ``synchronous=FULL`` and a local object directory; theirs: ``SQLiteApplicationRecorder``
with WAL and ``PRAGMA synchronous = FULL`` on every connection, checked before measuring --
the plane suite's peer, see ``benchmarks/aos_bench/plane.py``):

1. ``insert_events`` of one event into a new aggregate, calls/s (target 1.0);
2. ``insert_events`` of one event into an existing aggregate (the next version), calls/s
   (target 1.0);
3. ``select_events`` of a 10-event aggregate (what a repository reads), calls/s;
4. ``select_notifications`` of 10 notifications from 10 aggregates (a follower's section),
   calls/s;
5. eventsourcing's ``test_concurrent_throughput`` workload: 4 threads inserting 50-event
   batches into new aggregates, events/s; and ``THREADS_SMALL`` threads each inserting one
   event at a time into an aggregate of its own (what SQLite's group commit serves: many
   small durable commits at once), inserts/s;
6. durable commits per insert into a new aggregate, and 7. into an existing one, counted in
   the SQLite write-ahead log of each side (commit frames: with ``synchronous=FULL`` each is
   one fsync), against eventsourcing's (target 1.0: no more than theirs); and the bytes of
   the log's frames per insert (pages written: a page per B-tree leaf or interior page the
   insert changed), reported without a target;
8. for each kind of insert, the module's SQL without its Python: the statements its
   inserts ran on a store of their own, traced, their values bound as parameters again,
   replayed over a plain ``sqlite3`` connection (WAL, FULL) on a copy of that store --
   against eventsourcing's recorder making the calls (the most figures 1-2 could reach if
   the module's Python cost nothing), and 9. against eventsourcing's statements replayed
   the same way (what each mapping's rows cost in SQLite); reported without targets;

and on the memory engine against eventsourcing's in-memory ``POPOApplicationRecorder``
(figures 10-12: 1-3 again; no targets, reported); and an application end to end, each side
in fresh processes (figures 13-16, :mod:`aos_bench.eventsourcing_app`: 2,000 aggregates of 5
events saved, got back and their notifications read; target 0.8 for the whole, 1.0 for the
notification reads; figures 17-19: the floor of those reads, ``sqlite3`` alone on the
module's keys, against their second read, its statements alone against theirs, and ours
against it).

Figures 1-4 and 8-12 alternate the two sides **operation by operation** after a warm-up, in
``ROUNDS`` rounds (the plane suite's ``_alternate``); each reports the median and range of
the per-round ratios. Figure 5 alternates whole rounds (theirs, ours) after a warm-up round of
each, a round of the concurrent workload being ``JOBS`` jobs.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from aos_bench import Figure, eventsourcing_app
from aos_bench.plane import (
    BASELINE,
    ROUNDS,
    _alternate,
    _Compared,
    _eventsourcing,
    _figure,
    _their_recorder,
)

STATE: Final = b"s" * 100
TOPIC: Final = "bench:Event"
SELECTED: Final = 10
"""Events of the aggregate ``select_events`` reads, and notifications per section."""
WORKERS: Final = 4
JOB_EVENTS: Final = 50
JOBS: Final = 40
"""Jobs per round of the concurrent figure (eventsourcing's test runs 10)."""
THREADS_SMALL: Final = 8
SMALL_INSERTS: Final = 100
"""Single-event inserts per thread per round of the small-inserts figure."""
COUNTED: Final = 50
"""Inserts whose durable commits are counted."""
MODULE: Final = "aos_eventsourcing"
REPLAY_PAIRS_PER_SECOND: Final = 2_500
"""Pairs per second of a round that the replay figures capture statements for: their
warm-up and each round stop at ``seconds / ROUNDS`` times this many pairs."""
REPLAY_WARM_INSERTS: Final = 1_000
"""Inserts a replay runs before it is timed: enough to fill either side's log past its
first checkpoint (1,000 pages; an insert writes 2-4)."""


def _ours(kv_url: str, objects_url: str, trace: Callable[[str], None] | None = None) -> Any:
    """The module's application recorder, constructed as eventsourcing constructs it; with
    ``trace`` (an SQLite store), every statement its connections run is passed to it as
    SQLite traces it."""
    from eventsourcing.persistence import InfrastructureFactory
    from eventsourcing.utils import Environment

    env = {"PERSISTENCE_MODULE": MODULE, "AOSP_KV_URL": kv_url, "AOSP_OBJECTS_URL": objects_url}
    factory = InfrastructureFactory.construct(Environment("BenchApp", env))
    if trace is not None:
        engine = cast(Any, factory).plane.engine
        acquire = engine._acquire

        def traced() -> sqlite3.Connection:
            conn: sqlite3.Connection = acquire()
            conn.set_trace_callback(trace)
            return conn

        setattr(engine, "_acquire", traced)  # noqa: B010 -- patch a method
    return factory, factory.application_recorder()


class _Side:
    """Calls on one recorder: events of new aggregates, the next version of one aggregate,
    reads of a 10-event aggregate and of a 10-notification section."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.event = _eventsourcing().StoredEvent
        self.existing = uuid.uuid4()
        self.version = 0
        self.read = uuid.uuid4()
        self.recorder.insert_events([self.event(self.read, v, TOPIC, STATE) for v in range(1, 11)])
        for _ in range(SELECTED):
            self.new()
        self.first = self.recorder.max_notification_id() - SELECTED + 1

    def new(self) -> None:
        self.recorder.insert_events([self.event(uuid.uuid4(), 1, TOPIC, STATE)])

    def next(self) -> None:
        self.version += 1
        self.recorder.insert_events([self.event(self.existing, self.version, TOPIC, STATE)])

    def select(self) -> None:
        if len(self.recorder.select_events(self.read)) != SELECTED:
            raise AssertionError("select_events returned the wrong events")

    def section(self) -> None:
        if len(self.recorder.select_notifications(self.first, SELECTED)) != SELECTED:
            raise AssertionError("select_notifications returned the wrong notifications")

    def job(self) -> None:
        aggregate = uuid.uuid4()
        self.recorder.insert_events(
            [self.event(aggregate, v, TOPIC, STATE) for v in range(JOB_EVENTS)]
        )


def _calls(
    name: str,
    baseline: str,
    ours: Callable[[], None],
    theirs: Callable[[], None],
    seconds: float,
    target: float | None,
) -> Figure:
    return _figure(name, "calls/s", baseline, _alternate(ours, theirs, seconds, 10), 1, target)


def _throughput(side: _Side) -> float:
    """Events/s of ``JOBS`` jobs on ``WORKERS`` threads."""
    with ThreadPoolExecutor(WORKERS) as pool:
        for _ in range(WORKERS):  # warm every thread's connection
            pool.submit(side.job).result()
        start = time.perf_counter()
        for future in [pool.submit(side.job) for _ in range(JOBS)]:
            future.result()
        return JOBS * JOB_EVENTS / (time.perf_counter() - start)


def _workload_figure(
    name: str, unit: str, workload: Callable[[_Side], float], ours: _Side, theirs: _Side
) -> Figure:
    """``workload``'s rate on each side: a warm-up round of each, then ``ROUNDS`` rounds
    alternating (theirs first)."""
    workload(theirs)
    workload(ours)
    ours_rates, theirs_rates = [], []
    for _ in range(ROUNDS):
        theirs_rates.append(workload(theirs))
        ours_rates.append(workload(ours))
    compared = _Compared.of(ours_rates, theirs_rates)
    return _figure(name, unit, f"{BASELINE}: the same workload", compared, 1, None)


def _small_inserts(side: _Side) -> float:
    """Inserts/s of ``THREADS_SMALL`` threads, each inserting ``SMALL_INSERTS`` single
    events into an aggregate of its own, one call per event."""

    def work() -> None:
        aggregate = uuid.uuid4()
        for version in range(1, SMALL_INSERTS + 1):
            side.recorder.insert_events([side.event(aggregate, version, TOPIC, STATE)])

    with ThreadPoolExecutor(THREADS_SMALL) as pool:
        start = time.perf_counter()
        for future in [pool.submit(work) for _ in range(THREADS_SMALL)]:
            future.result()
        return THREADS_SMALL * SMALL_INSERTS / (time.perf_counter() - start)


class _Replay:
    """One kind of insert's SQL without the Python above it: the statements ``count`` calls
    of ``insert`` ran on their own store (``database``, its statements passed to
    ``statements`` by the store's trace), their values bound again (:func:`bound`), each
    call's run again in the same order over a plain ``sqlite3`` connection with WAL and
    ``synchronous=FULL``, on a copy of that store taken before the first of them. The
    first ``REPLAY_WARM_INSERTS`` are replayed at once, untimed: the copy starts with an
    empty log, and commits that grow the log file sync slower than ones that overwrite it
    after a checkpoint (about 1.7x here, both sides), which stores in use no longer do."""

    def __init__(
        self, database: Path, insert: Callable[[], None], statements: list[str], count: int
    ) -> None:
        copy = database.with_name(f"{database.stem}-replayed.db")
        source = sqlite3.connect(database)
        self.conn = sqlite3.connect(copy, isolation_level=None)
        source.backup(self.conn)
        source.close()
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.inserts = iter(_captured(insert, statements, REPLAY_WARM_INSERTS + count))
        for _ in range(REPLAY_WARM_INSERTS):
            self()

    def __call__(self) -> None:
        statements = next(self.inserts, None)
        if statements is None:
            raise RuntimeError("replay: every captured insert was replayed")
        for statement, values in statements:
            self.conn.execute(statement, values).fetchall()

    def close(self) -> None:
        self.conn.close()


Bound = tuple[str, tuple[object, ...]]
"""A statement with its literal values taken out as parameters, and those values."""


def _captured(insert: Callable[[], None], statements: list[str], count: int) -> list[list[Bound]]:
    """The statements each of ``count`` calls of ``insert`` ran (``statements`` being where
    its store's trace puts them), connection settings (``PRAGMA``) left out, each
    :func:`bound`."""
    calls = []
    for _ in range(count):
        statements.clear()
        insert()
        calls.append([bound(s) for s in statements if not s.startswith("PRAGMA")])
    statements.clear()
    return calls


_LITERAL: Final = re.compile(r"x'([0-9a-fA-F]*)'|'((?:[^']|'')*)'|(?<![\w.])(-?\d+)(?![\w.])")


def bound(statement: str) -> Bound:
    """``statement`` as traced (values inline: blobs ``x'..'``, texts ``'..'``, integers)
    with each value replaced by a ``?`` parameter, and the values: run so, a statement's
    text repeats from call to call and is prepared once (the statement cache), as both
    recorders' statements are -- not parsed anew with its values every time."""
    values: list[object] = []

    def take(match: re.Match[str]) -> str:
        blob, text, number = match.groups()
        if blob is not None:
            values.append(bytes.fromhex(blob))
        elif text is not None:
            values.append(text.replace("''", "'"))
        else:
            values.append(int(number))
        return "?"

    return _LITERAL.sub(take, statement), tuple(values)


def replay_figures(tmp: Path, seconds: float, theirs: _Side) -> list[Figure]:
    """Figures 8 and 9 for each kind of insert: the module's statements replayed (no Python
    layer) against eventsourcing's recorder ``theirs`` making the same calls -- the most the
    module could reach with its Python free -- and against eventsourcing's statements
    replayed the same way (what the mapping's rows cost in SQLite), on fresh stores in
    ``tmp``."""
    most = max(10, round(seconds / ROUNDS * REPLAY_PAIRS_PER_SECOND))
    count = most * (ROUNDS + 1)
    figures = []
    for tag, kind in (("new", "a new aggregate"), ("next", "an existing aggregate")):
        ours_traced: list[str] = []
        factory, recorder = _ours(
            f"sqlite://{tmp}/ours-{tag}.db?synchronous=OFF",
            f"file://{tmp}/objects-{tag}",
            ours_traced.append,
        )
        ours = _Side(recorder)
        ours_replay = _Replay(tmp / f"ours-{tag}.db", getattr(ours, tag), ours_traced, 2 * count)
        factory.close()
        theirs_traced: list[str] = []
        recorder = _their_recorder(
            str(tmp / f"theirs-{tag}.db"), create=True, trace=theirs_traced.append
        )
        their_replay = _Replay(
            tmp / f"theirs-{tag}.db", getattr(_Side(recorder), tag), theirs_traced, count
        )
        recorder.datastore.close()
        name = f"eventsourcing: insert_events into {kind}, the module's SQL replayed"
        figures.append(
            _figure(
                f"{name} without its Python (sqlite FULL)",
                "calls/s",
                f"{BASELINE}: the same calls",
                _alternate(ours_replay, getattr(theirs, tag), seconds, 10, most),
                1,
                None,
            )
        )
        figures.append(
            _figure(
                f"{name}, against eventsourcing's SQL replayed (sqlite FULL)",
                "calls/s",
                f"{BASELINE}: its statements for the same calls, traced and replayed the same way",
                _alternate(ours_replay, their_replay, seconds, 10, most),
                1,
                None,
            )
        )
        ours_replay.close()
        their_replay.close()
    return figures


@dataclass(frozen=True)
class WalCount:
    """What ``database``'s write-ahead log holds since its last reset (:func:`wal_count`)."""

    salt: bytes
    """The log's salt: it changes when the log is reset after a checkpoint."""
    commits: int
    """Commit frames (a frame whose header names the database size ends a commit)."""
    frames: int
    frame_bytes: int
    """Bytes of one frame: its 24-byte header and a page."""


def wal_count(database: Path) -> WalCount:
    """The frames of ``database``'s write-ahead log since its last reset."""
    wal = Path(f"{database}-wal").read_bytes()
    if len(wal) < 32:
        return WalCount(b"", 0, 0, 0)
    page_size = int.from_bytes(wal[8:12], "big")
    salt = wal[16:24]
    commits = frames = 0
    for offset in range(32, len(wal) - 24 - page_size + 1, 24 + page_size):
        header = wal[offset : offset + 24]
        if header[8:16] != salt:
            break
        frames += 1
        commits += int.from_bytes(header[4:8], "big") != 0
    return WalCount(salt, commits, frames, 24 + page_size)


def _per_call(database: Path, call: Callable[[], None]) -> tuple[float, float]:
    """Durable commits and bytes of log frames per ``call``, averaged over ``COUNTED``
    calls (counted again if the log was checkpointed and reset meanwhile)."""
    for _ in range(3):
        before = wal_count(database)
        for _ in range(COUNTED):
            call()
        after = wal_count(database)
        if after.salt == before.salt:
            frames = after.frames - before.frames
            return (after.commits - before.commits) / COUNTED, frames * after.frame_bytes / COUNTED
    raise RuntimeError(f"{database}: the log was reset during every count")


def commit_figures(tmp: Path) -> list[Figure]:
    """Figures 6 and 7 (and the log bytes per insert), on fresh stores of both sides in
    ``tmp``: for each kind of insert, its durable commits, then its bytes."""
    factory, recorder = _ours(f"sqlite://{tmp}/ours-count.db", f"file://{tmp}/objects")
    theirs_recorder = _their_recorder(str(tmp / "theirs-count.db"), create=True)
    ours, theirs = _Side(recorder), _Side(theirs_recorder)
    figures = []
    for what, ours_call, theirs_call in (
        ("a new aggregate", ours.new, theirs.new),
        ("an existing aggregate", ours.next, theirs.next),
    ):
        our_commits, our_bytes = _per_call(tmp / "ours-count.db", ours_call)
        their_commits, their_bytes = _per_call(tmp / "theirs-count.db", theirs_call)
        counts = (
            ("durable commits", "(sqlite WAL)", "commits", "commit frames in its WAL", 1.0),
            ("WAL bytes", "(sqlite)", "bytes", "its WAL frames", None),
        )
        for (what_counted, where, unit, counted, target), value, baseline_value in zip(
            counts, (our_commits, our_bytes), (their_commits, their_bytes), strict=True
        ):
            figures.append(
                Figure(
                    name=f"eventsourcing: {what_counted} per insert into {what} {where}",
                    value=value,
                    unit=unit,
                    baseline=f"{BASELINE}: {counted} over {COUNTED} inserts",
                    baseline_value=baseline_value,
                    target=target,
                    better="lower",
                )
            )
    factory.close()
    theirs_recorder.datastore.close()
    return figures


def _sqlite(tmp: Path, seconds: float, progress: Callable[[str], None]) -> list[Figure]:
    progress("eventsourcing: the module on SQLite vs SQLiteApplicationRecorder")
    factory, recorder = _ours(f"sqlite://{tmp}/ours.db", f"file://{tmp}/objects")
    theirs_recorder = _their_recorder(str(tmp / "theirs.db"), create=True)
    ours, theirs = _Side(recorder), _Side(theirs_recorder)
    base = f"{BASELINE}:"
    figures = [
        _calls(
            "eventsourcing: insert_events into a new aggregate (sqlite FULL)",
            f"{base} the same calls",
            ours.new,
            theirs.new,
            seconds,
            1.0,
        ),
        _calls(
            "eventsourcing: insert_events into an existing aggregate (sqlite FULL)",
            f"{base} the same calls",
            ours.next,
            theirs.next,
            seconds,
            1.0,
        ),
        _calls(
            f"eventsourcing: select_events of a {SELECTED}-event aggregate (sqlite)",
            f"{base} the same calls",
            ours.select,
            theirs.select,
            seconds,
            None,
        ),
        _calls(
            f"eventsourcing: select_notifications of {SELECTED} from {SELECTED} aggregates "
            "(sqlite)",
            f"{base} the same calls",
            ours.section,
            theirs.section,
            seconds,
            None,
        ),
    ]
    progress("eventsourcing: concurrent throughput")
    figures.append(
        _workload_figure(
            f"eventsourcing: concurrent_throughput, {WORKERS} threads of {JOB_EVENTS}-event "
            "inserts into new aggregates (sqlite FULL)",
            "events/s",
            _throughput,
            ours,
            theirs,
        )
    )
    progress("eventsourcing: small inserts on many threads")
    figures.append(
        _workload_figure(
            f"eventsourcing: {THREADS_SMALL} threads of single-event inserts into their own "
            "aggregates (sqlite FULL)",
            "inserts/s",
            _small_inserts,
            ours,
            theirs,
        )
    )
    progress("eventsourcing: durable commits per insert")
    figures.extend(commit_figures(tmp))
    progress("eventsourcing: the inserts' SQL replayed without Python")
    figures.extend(replay_figures(tmp, seconds, theirs))
    factory.close()
    theirs_recorder.datastore.close()
    return figures


def _memory(seconds: float, progress: Callable[[str], None]) -> list[Figure]:
    progress("eventsourcing: the module on the memory engine vs POPOApplicationRecorder")
    from eventsourcing.popo import POPOApplicationRecorder

    factory, recorder = _ours("memory://", "memory://")
    ours, theirs = _Side(recorder), _Side(POPOApplicationRecorder())
    base = "eventsourcing 9.5 POPOApplicationRecorder (in memory)"
    figures = [
        _calls(f"eventsourcing: {what} (memory engine)", base, mine, their, seconds, None)
        for what, mine, their in (
            ("insert_events into a new aggregate", ours.new, theirs.new),
            ("insert_events into an existing aggregate", ours.next, theirs.next),
            (f"select_events of a {SELECTED}-event aggregate", ours.select, theirs.select),
        )
    ]
    factory.close()
    return figures


def run(seconds: float = 2.0, progress: Callable[[str], None] = lambda _: None) -> list[Figure]:
    """Measure and return the figures (``MissingDependency`` without eventsourcing)."""
    _eventsourcing()
    with tempfile.TemporaryDirectory(prefix="aosp-bench-es-") as name:
        figures = _sqlite(Path(name), seconds, progress)
    return figures + _memory(seconds, progress) + eventsourcing_app.run(progress=progress)
