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
gets/s, notifications/s (target 1.0 for the notification reads). Then, after each side has read
its notifications again (warm: their pages cached), the floor of the notification reads
(:func:`floor_read`: ``sqlite3`` alone on the module's keys, in our process after that
second read, checked to give the same notifications) against their second read, and our
second read against the floor. Rounds alternate the sides
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

import cbor2

from aos_bench import Figure
from aos_eventsourcing.recorders import PlaneApplicationRecorder
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys
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
    """The three phases in this process on the store ``env`` names: seconds each."""
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
    # the reads again, warm (the pages they read are cached now); in our process, then the
    # floor, checked to give the same notifications
    start = time.perf_counter()
    again = _all(app)
    times["reread"] = time.perf_counter() - start
    if len(again) != aggregates * EVENTS:
        raise AssertionError(f"read {len(again)} notifications of {aggregates * EVENTS} again")
    if isinstance(app.recorder, PlaneApplicationRecorder):
        start = time.perf_counter()
        floor = floor_read(database, app.recorder.universe, SECTION)
        times["floor"] = time.perf_counter() - start
        if floor != again:
            raise AssertionError("the floor's notifications are not the application's")
    app.close()
    return times


def _all(app: Any) -> list[Any]:
    """Every notification of ``app``, read :data:`SECTION` at a time."""
    found: list[Any] = []
    while section := app.recorder.select_notifications(start=len(found) + 1, limit=SECTION):
        found.extend(section)
    return found


def floor_read(database: Path, universe: UniverseId, section: int) -> list[Any]:
    """The floor of the notification reads: every notification of ``universe`` in the
    module's SQLite file ``database``, ``section`` a page, with ``sqlite3`` alone on the
    plane's keys -- per page, in one read transaction, the log head, the page's log records
    (one range) and their entries (one ``IN`` query); each entry's checksum checked in one
    call in C, its stored event decoded, an eventsourcing ``Notification`` made -- and none
    of the plane's checks of the records. The notifications."""
    from eventsourcing.persistence import Notification

    if CRC32C.open_rows is None:
        raise RuntimeError("the floor checks checksums in C: the extension is not built")

    keys = UniverseKeys(universe)
    entry_key: dict[bytes, Callable[[int], bytes]] = {}  # a world's entry keys, by its id
    found: list[Any] = []
    conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        first = 1
        while True:
            conn.execute("BEGIN")
            (raw_head,) = conn.execute(
                "SELECT value FROM kv WHERE key = ?", (keys.log_head(),)
            ).fetchone()
            last = min(LOG_HEAD.decode(raw_head, "log head"), first + section - 1)
            records = conn.execute(
                "SELECT value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                keys.log_range(first, last),
            ).fetchall()
            if not records:
                conn.execute("COMMIT")
                return found
            places = []
            for (value,) in records:
                record = cbor2.loads(value)
                world = record["world"]
                make = entry_key.get(world)
                if make is None:
                    world_keys = keys.world(WorldId(uuid.UUID(bytes=world)))
                    make = entry_key[world] = world_keys.whole_entry_key()
                places.append((world, make(record["height"])))
            wanted = [key for _, key in places]
            stored = dict(
                conn.execute(
                    f"SELECT key, value FROM kv WHERE key IN ({','.join('?' * len(wanted))})",
                    wanted,
                ).fetchall()
            )
            conn.execute("COMMIT")
            opened = CRC32C.open_rows([(key, stored[key]) for key in wanted])
            if opened is None:
                raise AssertionError("an entry's checksum does not match")
            for position, (world, _), entry in zip(
                range(first, first + len(records)), places, opened, strict=True
            ):
                version, topic, state = cbor2.loads(entry)[:3]
                found.append(
                    Notification(
                        id=position,
                        originator_id=uuid.UUID(bytes=world),
                        originator_version=version,
                        topic=topic,
                        state=state,
                    )
                )
            first += len(records)
    finally:
        conn.close()


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
    """Measure and return the six figures."""
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
            [(aggregates / sum(o.values()), aggregates / sum(t.values())) for o, t in pairs],
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
    figures.append(
        _figure(
            f"eventsourcing: {floor}, warm ({what})",
            "notifications/s",
            [(notifications / o["floor"], notifications / t["reread"]) for o, t in pairs],
            None,
        )
    )
    figures.append(
        _figure(
            f"eventsourcing: notifications read {SECTION} a call, warm, ours against the floor "
            f"({what})",
            "notifications/s",
            [(notifications / o["reread"], notifications / o["floor"]) for o, _ in pairs],
            None,
            baseline=f"{floor} (the floor, in the same process)",
        )
    )
    return figures


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
