"""An eventsourcing application end to end on one machine: the ``aos_eventsourcing`` module
on a SQLite file against ``eventsourcing.sqlite``, the comparison an application leaving
``eventsourcing.sqlite`` makes (issue #38).

Each side is an ``Application`` selected by environment variables, as a user selects it,
in a fresh interpreter on a new store (ours: ``AOSP_KV_URL=sqlite://...``, synchronous FULL
by default, and a local object directory; theirs: ``SQLITE_DBNAME``), both WAL with
``synchronous=FULL``, checked in the process before it measures. The process:

1. saves :data:`AGGREGATES` aggregates, each registered and taught ``EVENTS - 1`` tricks
   before its one ``save`` (``EVENTS`` events in one insert into a new aggregate);
2. gets each back through ``repository.get`` (reads its events, projects it);
3. reads every notification, :data:`SECTION` per ``select_notifications`` call (what a
   follower's pull does).

Figures: the three phases together, aggregates/s (target 0.8); each phase alone -- saves/s,
gets/s, notifications/s (target 1.0 for the notification reads). Then each side reads its
notifications again (warm: their pages cached), and our process reads them through
:class:`ReadFloor` (``sqlite3`` alone on the module's keys, on a connection with the
plane's page cache, warmed by a first read checked to give the application's
notifications), then runs the floor's statements alone; their process runs its own
statement alone (``sqlite3``, the rows as tuples). The floor against their second read, the
floor's statements against theirs, our second read against the floor. Rounds alternate the sides
(theirs first in even rounds, ours in odd ones) after a warm-up run of each, ``ROUNDS``
rounds; a figure is the median of the per-round ratios, with the lowest and highest.
"""

from __future__ import annotations

import multiprocessing
import queue
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from aos_bench import Figure
from aos_bench.fdb_raw import opened_entry
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys, height_keys
from persistence.log_records import LOG_HEAD
from persistence.protocols.checksums import CRC32C

AGGREGATES: Final = 2_000
EVENTS: Final = 5
SECTION: Final = 100
ROUNDS: Final = 5
PEER: Final = "eventsourcing 9.5 eventsourcing.sqlite (WAL, synchronous=FULL)"


def environ(side: str, directory: Path) -> dict[str, str]:
    """The environment selecting ``side`` (``ours`` or ``theirs``) on a new store in
    ``directory``."""
    if side == "ours":
        return {
            "PERSISTENCE_MODULE": "aos_eventsourcing",
            "AOSP_KV_URL": f"sqlite://{directory / 'ours.db'}",
            "AOSP_OBJECTS_URL": f"file://{directory / 'objects'}",
        }
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(directory / "es.db")}


def _checked_durable(app: Any, database: Path) -> None:
    """``RuntimeError`` unless ``app``'s store is WAL with ``synchronous=FULL``."""
    if app.env.get("PERSISTENCE_MODULE") == "aos_eventsourcing":
        synchronous = str(app.factory.plane.engine.synchronous)
    else:
        with app.recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute("PRAGMA synchronous")
            synchronous = {2: "FULL", 3: "EXTRA"}.get(int(cursor.fetchone()[0]), "weaker")
    conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)
    journal_mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    conn.close()
    if journal_mode != "wal" or synchronous != "FULL":
        raise RuntimeError(
            f"store not configured as intended: journal_mode={journal_mode}, "
            f"synchronous={synchronous}"
        )


def _workload(env: dict[str, str], aggregates: int) -> dict[str, float]:
    """The three phases in this process on the store ``env`` names, then the second read
    and the statements alone (in ours, also the floor): seconds each."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Dog(Aggregate):
        @event("Registered")
        def __init__(self, name: str) -> None:
            self.name = name
            self.tricks: list[str] = []

        @event("TrickAdded")
        def add_trick(self, trick: str) -> None:
            self.tricks.append(trick)

    class DogSchool(Application[Any]):
        pass

    app = DogSchool(env=env)
    database = Path(env.get("SQLITE_DBNAME") or urlsplit(env["AOSP_KV_URL"]).path)
    _checked_durable(app, database)
    ids = []
    start = time.perf_counter()
    for number in range(aggregates):
        dog = Dog(f"dog {number}")
        for trick in range(EVENTS - 1):
            dog.add_trick(f"trick {trick}")
        app.save(dog)
        ids.append(dog.id)
    saved = time.perf_counter()
    for aggregate_id in ids:
        if len(app.repository.get(aggregate_id).tricks) != EVENTS - 1:
            raise AssertionError(f"aggregate {aggregate_id} came back without its tricks")
    got = time.perf_counter()
    first, read = 1, 0
    while section := app.recorder.select_notifications(start=first, limit=SECTION):
        read += len(section)
        first = section[-1].id + 1
    done = time.perf_counter()
    if read != aggregates * EVENTS:
        raise AssertionError(f"read {read} notifications of {aggregates * EVENTS}")
    times = {"save": saved - start, "get": got - saved, "read": done - got}
    # the reads again, warm (the pages they read are cached now), counted as the first
    start = time.perf_counter()
    again = _count(app)
    times["reread"] = time.perf_counter() - start
    if again != aggregates * EVENTS:
        raise AssertionError(f"read {again} notifications of {aggregates * EVENTS} again")
    if app.env.get("PERSISTENCE_MODULE") == "aos_eventsourcing":
        times.update(_floor_times(app, database, aggregates * EVENTS))
    else:
        recorder: Any = app.recorder  # eventsourcing.sqlite's
        table = recorder.events_table_name
        times["statements"] = _their_statements(database, table, aggregates * EVENTS)
    app.close()
    return times


def _count(app: Any) -> int:
    """How many notifications ``app`` has, read :data:`SECTION` at a time, as the first read
    reads them (none kept)."""
    first, read = 1, 0
    while section := app.recorder.select_notifications(start=first, limit=SECTION):
        read += len(section)
        first = section[-1].id + 1
    return read


def _all(app: Any) -> list[Any]:
    """Every notification of ``app``, read :data:`SECTION` at a time."""
    found: list[Any] = []
    while section := app.recorder.select_notifications(
        start=(found[-1].id + 1 if found else 1), limit=SECTION
    ):
        found.extend(section)
    return found


def _floor_times(app: Any, database: Path, notifications: int) -> dict[str, float]:
    """Seconds of the floor's read of every notification, and of its statements alone, on
    a connection configured as the plane's (page cache) and warmed by a first read checked
    to give the application's notifications."""
    floor = ReadFloor(database, app.recorder.universe, SECTION, app.factory.plane.engine.cache_mib)
    try:
        if floor.notifications() != _all(app):
            raise AssertionError("the floor's notifications are not the application's")
        pages = floor.pages()
        start = time.perf_counter()
        read = floor.count()
        middle = time.perf_counter()
        rows = floor.statements(pages)
        end = time.perf_counter()
    finally:
        floor.close()
    if read != notifications or rows != 2 * notifications:
        raise AssertionError(f"the floor read {read} notifications and {rows} rows")
    return {"floor": middle - start, "statements": end - middle}


def _their_statements(database: Path, table: str, notifications: int) -> float:
    """Seconds of ``eventsourcing.sqlite``'s notification statement alone over every
    notification, :data:`SECTION` a page (its ``SELECT``, each page in a read transaction,
    the rows fetched as tuples), on a connection warmed by a first pass."""
    conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, isolation_level=None)
    statement = f"SELECT rowid, * FROM {table} WHERE rowid>=? ORDER BY rowid LIMIT ?"

    def fetch() -> int:
        fetched, first = 0, 1
        while True:
            conn.execute("BEGIN")
            rows = conn.execute(statement, (first, SECTION)).fetchall()
            conn.execute("COMMIT")
            if not rows:
                return fetched
            fetched += len(rows)
            first = rows[-1][0] + 1

    try:
        fetch()
        start = time.perf_counter()
        fetched = fetch()
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    if fetched != notifications:
        raise AssertionError(f"eventsourcing's statements fetched {fetched} rows")
    return elapsed


class ReadFloor:
    """The floor of the notification reads: a universe's notifications in the module's
    SQLite file with ``sqlite3`` alone on the plane's keys, ``section`` a page. Per page, in
    one read transaction: the log head, the page's log records (one range, each key checked
    to be the next position), then their entries (one ``IN`` query); each entry's checksum
    checked (in one call in C where the extension is built), its stored event decoded, an
    eventsourcing ``Notification`` made. None of the plane's other checks of the records.
    :meth:`statements` runs the same statements alone, their parameters made beforehand."""

    def __init__(self, database: Path, universe: UniverseId, section: int, cache_mib: int) -> None:
        self.keys = UniverseKeys(universe)
        self.section = section
        self.conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, isolation_level=None)
        self.conn.execute(f"PRAGMA cache_size = {-1024 * cache_mib}")

    def close(self) -> None:
        self.conn.close()

    def notifications(self) -> list[Any]:
        """Every notification, as eventsourcing's ``Notification``."""
        found: list[Any] = []
        self._read(found.append)
        return found

    def count(self) -> int:
        """How many notifications there are, each made as :meth:`notifications` makes it
        and not kept (as the timed reads of both sides count theirs)."""
        counted = 0

        def keep(_: Any) -> None:
            nonlocal counted
            counted += 1

        self._read(keep)
        return counted

    def _read(self, keep: Callable[[Any], None]) -> None:
        """Make every notification, page by page, and pass each to ``keep``."""
        import cbor2
        from eventsourcing.persistence import Notification

        entry_keys: dict[bytes, Callable[[int], bytes]] = {}  # a world's, by its id's bytes
        first = 1
        while (page := self._page(first, entry_keys)) is not None:
            places, stored = page
            try:
                rows = [(key, stored[key]) for _, key in places]
            except KeyError as exc:
                raise ValueError(f"the log names an entry that is not stored: {exc}") from None
            for position, (world, _), entry in zip(
                range(first, first + len(places)), places, _opened(rows), strict=True
            ):
                item = cbor2.loads(entry)
                text_id = item[3] if len(item) > 3 else None
                keep(
                    Notification(
                        id=position,
                        originator_id=uuid.UUID(bytes=world) if text_id is None else text_id,
                        originator_version=item[0],
                        topic=item[1],
                        state=item[2],
                    )
                )
            first += len(places)

    def _page(
        self, first: int, entry_keys: dict[bytes, Callable[[int], bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], dict[bytes, bytes]] | None:
        """In one read transaction, the log records from ``first`` (their keys checked to be
        positions ``first, first + 1, ...``) as ``(world id's bytes, entry key)``, and the
        entries they name, by key; ``None`` past the head. ``entry_keys`` keeps each world's
        entry-key function."""
        import cbor2

        keys, conn = self.keys, self.conn
        conn.execute("BEGIN")
        try:
            (raw_head,) = conn.execute(
                "SELECT value FROM kv WHERE key = ?", (keys.log_head(),)
            ).fetchone()
            last = min(LOG_HEAD.decode(raw_head, "log head"), first + self.section - 1)
            if last < first:
                return None
            records = conn.execute(
                "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                keys.log_range(first, last),
            ).fetchall()
            expected = height_keys(keys.log_entry, keys.log_prefix_len(), first, last - first + 1)
            if [key for key, _ in records] != expected:
                raise ValueError(f"the universe log misses a position from {first} to {last}")
            places = []
            for _, value in records:
                record = cbor2.loads(value)
                world = record["world"]
                make = entry_keys.get(world)
                if make is None:
                    world_keys = keys.world(WorldId(uuid.UUID(bytes=world)))
                    make = entry_keys[world] = world_keys.whole_entry_key()
                places.append((world, make(record["height"])))
            return places, self._entries([key for _, key in places])
        finally:
            conn.execute("COMMIT")

    def _entries(self, wanted: list[bytes]) -> dict[bytes, bytes]:
        marks = ",".join("?" * len(wanted))
        rows = self.conn.execute(f"SELECT key, value FROM kv WHERE key IN ({marks})", wanted)
        return dict(rows.fetchall())

    def pages(self) -> list[tuple[tuple[bytes, bytes], list[bytes]]]:
        """Each page's log range and the keys of its entries: the statements' parameters."""
        out = []
        first = 1
        while (page := self._page(first, {})) is not None:
            places, _ = page
            out.append(
                (self.keys.log_range(first, first + len(places) - 1), [k for _, k in places])
            )
            first += len(places)
        return out

    def statements(self, pages: list[tuple[tuple[bytes, bytes], list[bytes]]]) -> int:
        """The floor's statements alone, for ``pages`` (:meth:`pages`): per page the log
        head, the log range and the entries, their rows fetched in one read transaction.
        The rows fetched (log records and entries)."""
        conn = self.conn
        fetched = 0
        for bounds, wanted in pages:
            conn.execute("BEGIN")
            conn.execute("SELECT value FROM kv WHERE key = ?", (self.keys.log_head(),)).fetchone()
            records = conn.execute(
                "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key", bounds
            ).fetchall()
            fetched += len(records) + len(self._entries(wanted))
            conn.execute("COMMIT")
        return fetched


def _opened(rows: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The payloads of sealed entries (``(key, stored)`` rows), each seal checked: in one
    call in C where the extension is built, else one by one (``fdb_raw.opened_entry``)."""
    if CRC32C.open_rows is None:
        return [opened_entry(key, value) for key, value in rows]
    opened = CRC32C.open_rows(rows)
    if opened is None:
        raise ValueError("an entry's checksum does not match")
    return opened


def _child(env: dict[str, str], aggregates: int, out: Any) -> None:
    out.put(_workload(env, aggregates))


def run_side(side: str, aggregates: int = AGGREGATES) -> dict[str, float]:
    """One run of ``side`` in a fresh interpreter on a new store: seconds per phase."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix=f"aosp-bench-app-{side}-") as name:
        process = ctx.Process(target=_child, args=(environ(side, Path(name)), aggregates, out))
        process.start()
        try:
            while True:
                try:
                    times: dict[str, float] = out.get(timeout=1.0)
                    break
                except queue.Empty:
                    if process.exitcode is not None:
                        raise RuntimeError(
                            f"the {side} application process failed (exit code {process.exitcode})"
                        ) from None
        finally:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    return times


def run(
    rounds: int = ROUNDS,
    aggregates: int = AGGREGATES,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Figure]:
    """Measure and return the seven figures."""
    progress(f"eventsourcing: an application end to end, {aggregates} aggregates x {EVENTS}")
    run_side("theirs", aggregates)  # warm-up of each side: imports, page cache
    run_side("ours", aggregates)
    pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    for number in range(rounds):
        if number % 2:
            ours = run_side("ours", aggregates)
            theirs = run_side("theirs", aggregates)
        else:
            theirs = run_side("theirs", aggregates)
            ours = run_side("ours", aggregates)
        pairs.append((ours, theirs))
    notifications = aggregates * EVENTS
    what = f"{aggregates} aggregates x {EVENTS} events, sqlite FULL"
    figures = [
        _figure(
            f"eventsourcing: an application end to end: save, get and read back {what}",
            "aggregates/s",
            [(aggregates / _whole(o), aggregates / _whole(t)) for o, t in pairs],
            0.8,
        )
    ]
    for phase, name, unit, count, target in (
        ("save", "saves of new aggregates", "saves/s", aggregates, None),
        ("get", "repository.get of each", "gets/s", aggregates, None),
        ("read", f"notifications read {SECTION} a call", "notifications/s", notifications, 1.0),
    ):
        figures.append(
            _figure(
                f"eventsourcing: an application end to end, {name} ({what})",
                unit,
                [(count / o[phase], count / t[phase]) for o, t in pairs],
                target,
            )
        )
    floor = f"notifications read {SECTION} a call: sqlite3 alone on the module's keys"
    for name, our_phase, their_phase, baseline in (
        (floor, "floor", "reread", "its second read"),
        (f"{floor}, its statements alone", "statements", "statements", "its statement alone"),
    ):
        figures.append(
            _figure(
                f"eventsourcing: {name}, warm ({what})",
                "notifications/s",
                [(notifications / o[our_phase], notifications / t[their_phase]) for o, t in pairs],
                None,
                baseline=f"{PEER}, {baseline} (warm)",
            )
        )
    figures.append(
        _figure(
            f"eventsourcing: notifications read {SECTION} a call, ours' second read (warm) against "
            f"the floor ({what})",
            "notifications/s",
            [(notifications / o["reread"], notifications / o["floor"]) for o, _ in pairs],
            None,
            baseline=f"{floor} (the floor, in the same process)",
        )
    )
    return figures


def _whole(times: dict[str, float]) -> float:
    """Seconds of the three phases an application end to end is timed by."""
    return times["save"] + times["get"] + times["read"]


def _figure(
    name: str,
    unit: str,
    rates: list[tuple[float, float]],
    target: float | None,
    baseline: str = PEER,
) -> Figure:
    return Figure(
        name=name,
        value=round(statistics.median(o for o, _ in rates), 1),
        unit=unit,
        baseline=baseline,
        baseline_value=round(statistics.median(t for _, t in rates), 1),
        target=target,
        better="higher",
        round_ratios=tuple(o / t for o, t in rates),
    )
