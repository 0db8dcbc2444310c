"""One process of the SIGKILL crash torture (:mod:`conformance.torture`).

Usage: ``python -m conformance.torture.worker CONFIG ROLE ID INCARNATION`` (the torture
itself forks its processes from a server that imported this module: :func:`forked`)

``CONFIG`` is the run's ``config.json``; ``ROLE`` is ``writer``, ``appender``, ``drainer``,
``drainworker``, ``exporter`` or ``compactor``. The process opens the shared store with the
run's inbox window (``TortureConfig.plane_config``) behind the run's door
(``TortureConfig.door``: with ``asyncio``, every call is awaited on an ``AsyncPlane``), then
works until it is killed, appending
what each call durably did (and what it reported) to ``<ROLE>-<ID>.<INCARNATION>.jsonl`` in
the run's directory (fsynced after the call returned).

The exporter's plane has :class:`PutSteps` as its hooks: they count what each of its
attachment puts went through, stall the puts that stall (:class:`Attachments`) and give up a
put that waits on a doom too long (logged as ``attachment_blocked``).

A ``Backend`` error (a timeout while the cluster recovers, the retry limit) leaves the call's
outcome unknown: it is logged as ``{"backend": ...}`` and the process goes on as after a
restart (a writer repeats the call with the same idempotency keys, an appender appends again
at the head the unknown attempt expected, see :func:`append`). After a call that changed the
retry runner's counts, after such an error, and every :data:`STATS_EVERY` calls, it logs
those counts and its slowest call (``{"retries": ...}``). Any other error is logged as
``{"error": ...}`` and ends the process with status 1: the torture reports it.
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from backends.kv import open_engine
from backends.objects import open_object_store
from conformance.context import ConformanceFailure
from conformance.doors import through
from conformance.torture.evidence import (
    AckedCall,
    Log,
    append_resume_point,
    attachment_history,
    log_name,
    state_at,
    writer_history,
)
from conformance.torture.workload import (
    TortureConfig,
    append_entry,
    append_world,
    attachment,
    call_size,
    call_world,
    idempotency_key,
    item,
)
from persistence import kv
from persistence.errors import Backend, HeadAdvanced
from persistence.futures import drive
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.keyspace import UniverseKeys
from persistence.plane import DrainResult, Plane, cas_collection
from persistence.protocols import calls as plane_calls
from persistence.protocols import cas_bodies
from persistence.protocols.compaction import MARKS_PER_WINDOW
from persistence.workers.compactor import Compactor
from persistence.workers.drain_worker import DrainWorker, Shard
from segments import open_plane
from segments.collect import SegmentCollection, collect_world
from segments.export import ExportConfig, Exporter

IMPORTED_BY: Final = os.getpid()
"""The process that imported this module: the fork server, if it preloaded it."""
STATS_EVERY: Final = 50
"""Calls between two logs of the counts when the retry counts did not change."""
REDO_EVERY: Final = 8
"""A writer repeats one of its acknowledged calls after every this many calls."""
REDO_AGE: Final = (0.25, 0.5)
"""Which acknowledged calls a writer repeats: those whose first attempt began between these
fractions of the window ago -- after several compaction passes (a mark every sixteenth of
the window), with half the window left for the repeat itself."""
COMPACTION_PAGE: Final = 16
"""Items a compaction transaction removes at most: small, so that passes take several
transactions and kills land between them."""
STALL_EVERY: Final = 50
"""One attachment put in this many stalls after its upload (see :class:`Attachments`)."""
STALL_FIRST: Final = 3
"""The first put that stalls (counted from 0 over the run): early, so that every run has
one."""
STALL_LIMIT: Final = 15.0
"""The longest a stalled put waits for a collector to collect its body."""
STALL_POLL: Final = 0.05
"""Seconds between two looks of a stalled put at its pin and its body."""
DOOM_WAIT_LIMIT: Final = 1.0
"""Seconds the exporter's attachment put waits on a collector's doom before it gives up.
A collector deciding and deleting holds its doom for milliseconds; one killed (or failing
with ``Backend``) in between leaves it for the doom's lease (``cas_bodies.DOOM_LEASE_SECONDS``),
minutes, longer than a run, and so does a doom kept after the delete while late requests
may still land (if the protocol keeps one): the put would wait that long."""


class Calls:
    """Counts a process's calls and their longest duration; logs these and the retry
    runner's counts whenever those changed, and every :data:`STATS_EVERY` calls."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.count = 0
        self.slowest = 0.0
        self._logged: dict[str, dict[int, int]] = kv.RETRY_STATS.snapshot()

    def done(self, started: float) -> None:
        """A call that began at ``started`` (``time.monotonic()``) returned."""
        self.count += 1
        self.slowest = max(self.slowest, time.monotonic() - started)
        if self.count % STATS_EVERY == 0 or kv.RETRY_STATS.snapshot() != self._logged:
            self.stats()

    def stats(self) -> None:
        """Log the counts so far (each line holds the process's totals)."""
        self._logged = retries = kv.RETRY_STATS.snapshot()
        self.log.append(
            {
                "retries": {
                    kind: {str(c): n for c, n in by.items()} for kind, by in retries.items()
                },
                "replays": dict(plane_calls.REPLAYS),
                "calls": self.count,
                "slowest": round(self.slowest, 3),
            }
        )

    def unknown(self, exc: Backend) -> None:
        """A call's outcome is unknown: log it (the caller redoes the call)."""
        self.log.append({"backend": f"{type(exc).__name__}: {exc}"})
        self.stats()


def write(plane: Plane, config: TortureConfig, writer: int, log: Log) -> None:
    """Enqueue items forever, from the first call without an acknowledgement.

    A call whose outcome is unknown (the process was killed after logging the intent, or
    the call raised ``Backend``) is redone with the same keys, by the next incarnation or at
    once; if the first attempt landed, the redo must return its sequences. After every
    :data:`REDO_EVERY` calls the writer also repeats one acknowledged call of
    :data:`REDO_AGE`, logged as a ``redo``: inside the window it must get the acknowledged
    sequences. Intents, acks and redos carry their wall-clock time (``at``): the checks
    measure each redo from its call's first attempt, against the window."""
    calls = Calls(log)
    history = writer_history(config.directory, writer)
    n, first_at = history.resume, history.pending_since
    recent = deque(history.acked)
    while True:
        size = call_size(n)
        target = call_world(writer, n, len(config.worlds))
        numbers = tuple(range(n, n + size))
        now = time.time()
        first_at = now if first_at is None else first_at
        log.append({"writer": writer, "world": target, "intent": numbers, "at": now})
        started = time.monotonic()
        try:
            seqs = _enqueue(plane, config, writer, target, numbers)
        except Backend as exc:
            calls.unknown(exc)
            continue  # the same call again, with the same keys
        log.append(
            {"writer": writer, "world": target, "ack": _pairs(numbers, seqs), "at": time.time()}
        )
        recent.append(AckedCall(first_at, target, numbers))
        n, first_at = n + size, None
        calls.done(started)
        if calls.count % REDO_EVERY == 0:
            _redo_acknowledged(plane, config, writer, recent, calls, log)
        time.sleep(config.writer_pause)


def _enqueue(
    plane: Plane, config: TortureConfig, writer: int, target: int, numbers: tuple[int, ...]
) -> list[InboxSeq]:
    """Enqueue ``writer``'s items ``numbers`` into world ``target``: one ``enqueue`` or an
    ``enqueue_batch``, as the call's size says."""
    world = config.worlds[target]
    items = [item(writer, i) for i in numbers]
    keys = [idempotency_key(writer, i) for i in numbers]
    if len(numbers) == 1:
        return [plane.enqueue(config.universe, world, items[0], idempotency_key=keys[0])]
    return plane.enqueue_batch(config.universe, world, items, idempotency_keys=keys)


def _pairs(numbers: tuple[int, ...], seqs: list[InboxSeq]) -> list[list[int | str]]:
    return [[i, str(seq)] for i, seq in zip(numbers, seqs, strict=True)]


def _redo_acknowledged(
    plane: Plane,
    config: TortureConfig,
    writer: int,
    recent: deque[AckedCall],
    calls: Calls,
    log: Log,
) -> None:
    """Repeat the oldest acknowledged call of :data:`REDO_AGE` (each at most once), as a
    client retrying after a lost reply does; ``recent`` drops the calls too old for it."""
    now = time.time()
    youngest, oldest = (now - f * config.inbox_retention_seconds for f in REDO_AGE)
    while recent and recent[0].first_at < oldest:
        recent.popleft()
    if not recent or recent[0].first_at > youngest:
        return
    call = recent.popleft()
    started = time.monotonic()
    try:
        seqs = _enqueue(plane, config, writer, call.world, call.numbers)
    except Backend as exc:
        calls.unknown(exc)  # not redone: the call was acknowledged already
        return
    log.append(
        {
            "writer": writer,
            "world": call.world,
            "redo": _pairs(call.numbers, seqs),
            "at": time.time(),
        }
    )
    calls.done(started)


def append(plane: Plane, config: TortureConfig, appender: int, log: Log) -> None:
    """Append entries straight to a world's journal at the head it reads, one per call.

    An attempt whose outcome is unknown (the call raised ``Backend``, or the process died
    after logging the intent) is redone with ``retry_append_batch`` and the head it
    expected: that appends it, or finds where the unknown attempt put it, or reports that it
    did not land (``HeadAdvanced``)."""
    calls = Calls(log)
    target = append_world(appender, len(config.worlds))
    world = config.worlds[target]
    n, unsure = append_resume_point(config.directory, appender)
    while True:
        entry = append_entry(appender, n)
        started = time.monotonic()
        expected = unsure
        try:
            if expected is None:
                expected = plane.head(config.universe, world)
                log.append({"appender": appender, "world": target, "intent": n, "head": expected})
                first = plane.append_batch(config.universe, world, expected, [entry])
            else:
                log.append({"appender": appender, "world": target, "intent": n, "head": expected})
                first = plane.retry_append_batch(config.universe, world, expected, [entry])
        except HeadAdvanced:
            unsure = None
            continue  # not appended: another writer moved the head first
        except Backend as exc:
            calls.unknown(exc)
            unsure = expected  # None if the head could not be read: nothing was sent
            continue
        log.append(
            {
                "appender": appender,
                "world": target,
                "appended": n,
                "first": first,
                "retried": unsure is not None,
            }
        )
        n, unsure = n + 1, None
        calls.done(started)
        time.sleep(config.writer_pause)


def drain(plane: Plane, config: TortureConfig, drainer: int, log: Log) -> None:
    """Drain every world in small random batches forever."""
    calls = Calls(log)
    rng = random.Random(config.seed * 1_000 + drainer)
    order = list(enumerate(config.worlds))
    while True:
        rng.shuffle(order)
        moved = 0
        for index, world in order:
            started = time.monotonic()
            try:
                result = plane.drain_inbox_to_journal(
                    config.universe, world, max_items=rng.randint(1, 8)
                )
            except Backend as exc:
                calls.unknown(exc)
                continue
            calls.done(started)
            _log_drain(log, index, result)
            moved += result.count
        if not moved:
            time.sleep(0.005)


def _log_drain(log: Log, index: int, result: DrainResult, group: int = 1) -> None:
    """Log a drain of world ``index`` that moved items (``group``: worlds in its
    transaction)."""
    if result.count:
        assert result.cursor is not None
        log.append(
            {
                "drain": index,
                "first": result.first_height,
                "count": result.count,
                "cursor": str(result.cursor),
                "group": group,
            }
        )


def drain_worker(plane: Plane, config: TortureConfig, ident: int, log: Log) -> None:
    """A :class:`DrainWorker` on shard ``ident`` of ``config.drain_workers``, passes forever:
    it finds the worlds through the ready marks and drains a few items per world and turn,
    all of its shard's ready worlds in one multi-world transaction; every world a
    transaction moved items of is logged as a drainer's drain is."""
    calls = Calls(log)
    rng = random.Random(config.seed * 1_000 + 500 + ident)
    index = {world: i for i, world in enumerate(config.worlds)}

    def drained(universe: UniverseId, results: dict[WorldId, DrainResult]) -> None:
        for world, result in results.items():
            _log_drain(log, index[world], result, len(results))

    worker = DrainWorker(
        plane,
        universes=[config.universe],
        shard=Shard(ident, config.drain_workers),
        quantum=rng.randint(1, 4),
        worlds_per_transaction=len(config.worlds),
        drained=drained,
    )
    while True:
        started = time.monotonic()
        try:
            report = worker.run_pass()
        except Backend as exc:
            calls.unknown(exc)
            continue
        if report.failures:
            raise ConformanceFailure(f"drain worker: {report.failures[0]}")
        calls.done(started)
        if not report.items:
            time.sleep(0.005)


class AttachmentBlocked(Exception):
    """An attachment put waited :data:`DOOM_WAIT_LIMIT` seconds on a doom: given up."""


class PutSteps:
    """The exporter plane's hooks: count the steps of a CAS put (pins, pauses on a doom),
    run the put's stall (if it has one) after its first upload, and give the put up
    (:class:`AttachmentBlocked`) once it has waited ``limit`` seconds on a doom."""

    def __init__(self, limit: float = DOOM_WAIT_LIMIT) -> None:
        self.limit = limit
        self.pins = self.waits = 0
        self.waiting_since: float | None = None
        self.stall: Callable[[], None] | None = None

    def start(self, stall: Callable[[], None] | None = None) -> None:
        """A put begins: count afresh; ``stall`` runs once, after its first upload."""
        self.pins = self.waits = 0
        self.waiting_since = None
        self.stall = stall

    def reached(self, step: str) -> None:
        if step == "cas.after_pin":
            self.pins += 1
            self.waiting_since = None
        elif step == "cas.after_body" and self.stall is not None:
            stall, self.stall = self.stall, None
            stall()
        elif step == "cas.await_collection":
            self.waits += 1
            now = time.monotonic()
            if self.waiting_since is None:
                self.waiting_since = now
            elif now - self.waiting_since >= self.limit:
                raise AttachmentBlocked(f"waited {now - self.waiting_since:.1f} s on a doom")


@kv.transactional
async def _pinned(tr: kv.Transaction, keys: UniverseKeys, hash: Hash) -> bool:
    """Whether a pin of ``hash`` stands."""
    return bool(await tr.get_range(*keys.cas_pins(hash), limit=1, snapshot=True))


class Attachments:
    """The exporter's attachment puts: each logged before (``attach``) and after
    (``attached``, with the hash and what the put went through); one whose outcome is
    unknown is put again before anything else (:meth:`redo`).

    One put in :data:`STALL_EVERY` (from the :data:`STALL_FIRST`, counted over the run's
    incarnations; the next one if that is a redo) *stalls* after its upload, before its
    metadata commit, as a slow client does, until the collectors have expired its pin and
    deleted its body (at most :data:`STALL_LIMIT` seconds): its metadata commit then finds
    the pin gone and the put starts over -- it waits for the collector's doom to be
    cleared, pins again and uploads anew, or gives up after :data:`DOOM_WAIT_LIMIT`. A kill
    during the stall leaves a body and an expired pin, which the next incarnation's redo and
    the collectors race for. Redos never stall."""

    def __init__(
        self,
        plane: Plane,
        config: TortureConfig,
        steps: PutSteps,
        log: Log,
        stall_every: int | None = STALL_EVERY,
        stall_first: int = STALL_FIRST,
    ) -> None:
        self.plane, self.config, self.steps, self.log = plane, config, steps, log
        self.stall_every, self.stall_first = stall_every, stall_first
        """``None``: no put stalls."""
        history = attachment_history(config.directory)
        self.pending = history.pending
        self.puts, self.stalls = history.puts, history.stalls
        self.stalled: dict[str, Any] | None = None

    def put(self, index: int, height: int, redo: bool = False) -> None:
        """Put the attachment of world ``index`` at ``height`` (``Backend`` leaves it
        pending)."""
        data = attachment(index, height)
        threshold = self.plane.config.inline_threshold
        assert len(data) > threshold, f"an attachment of {len(data)} bytes would be inline"
        hash = Hash.of(data)
        every = self.stall_every
        stall = (
            every is not None and not redo and self.puts >= self.stall_first + self.stalls * every
        )
        self.pending = (index, height)
        self.log.append({"attach": index, "height": height, "stall": stall})
        self.puts += 1
        self.stalls += stall
        self.stalled = None
        self.steps.start((lambda: self._stall(hash)) if stall else None)
        try:
            returned = self.plane.put_verified(self.config.universe, data)
        except AttachmentBlocked as exc:
            self.log.append(
                {
                    "attachment_blocked": index,
                    "height": height,
                    "why": str(exc),
                    "stall": self.stalled,
                }
            )
            self.pending = None
            return
        self.log.append(
            {
                "attached": index,
                "height": height,
                "hash": returned.hex,
                "pins": self.steps.pins,
                "waits": self.steps.waits,
                "redo": redo,
                "stall": self.stalled,
            }
        )
        self.pending = None

    def _stall(self, hash: Hash) -> None:
        """Wait until neither a pin nor the body of ``hash`` remains (a collector expired
        the pin and collected the body), or :data:`STALL_LIMIT` passed."""
        keys = UniverseKeys(self.config.universe)
        key = cas_bodies.object_key(self.config.universe, hash)
        began = time.monotonic()
        collected = False
        while time.monotonic() - began < STALL_LIMIT:
            if self.plane.objects.stat(key) is None and not drive(
                _pinned(self.plane.engine, keys, hash)
            ):
                collected = True
                break
            time.sleep(STALL_POLL)
        self.stalled = {"seconds": round(time.monotonic() - began, 3), "collected": collected}

    def redo(self) -> None:
        """Put again the attachment whose outcome is unknown, if any."""
        if self.pending is not None:
            self.put(*self.pending, redo=True)


def export(plane: Plane, config: TortureConfig, steps: PutSteps, log: Log) -> None:
    """Snapshot (promoting two times in three), attach and export every world, round after
    round; first put again the attachment a killed incarnation left unacknowledged."""
    exporter = Exporter(
        plane,
        ExportConfig(
            enabled=True,
            target_entries=config.export_target_entries,
            delete_chunk_entries=config.export_delete_chunk,
        ),
    )
    attachments = Attachments(plane, config, steps, log)
    calls = Calls(log)
    rounds = 0
    while True:
        for index, world in enumerate(config.worlds):
            started = time.monotonic()
            try:
                attachments.redo()
                _export_world(
                    plane, exporter, attachments, config, index, world, rounds % 3 != 2, log
                )
            except Backend as exc:
                calls.unknown(exc)
                continue
            calls.done(started)
        rounds += 1
        time.sleep(0.02)


def _export_world(
    plane: Plane,
    exporter: Exporter,
    attachments: Attachments,
    config: TortureConfig,
    index: int,
    world: WorldId,
    promote: bool,
    log: Log,
) -> None:
    """Snapshot the world at its head (maybe promoting) and put that height's attachment,
    then export what is safe."""
    height = plane.head(config.universe, world)
    if height:
        state = state_at(plane, config.universe, world, height)
        record, outcome = plane.snapshot_commit(
            config.universe,
            world,
            state,
            height=height,
            logical_time_ns=height,
            receipt_horizon_height=height,
            promote_baseline=promote,
        )
        log.append(
            {
                "snapshot": index,
                "height": height,
                "ref": record.snapshot_ref.hex,
                "indexed": outcome.indexed,
                "promoted": outcome.promoted,
            }
        )
        attachments.put(index, height)
    while (segment := exporter.export_once(config.universe, world)) is not None:
        log.append(
            {
                "segment": index,
                "start": segment.start,
                "end": segment.end,
                "checksum": segment.checksum.hex(),
            }
        )


def compact(plane: Plane, config: TortureConfig, log: Log) -> None:
    """Compaction passes over the run's worlds forever, twice per mark interval (a
    sixteenth of the window: the compactor's documented cadence), each logged with what it
    reported removing, and each followed by an orphan collection pass (:func:`collect`)."""
    compactor = Compactor(plane, max_items=COMPACTION_PAGE)
    calls = Calls(log)
    pause = config.inbox_retention_seconds / MARKS_PER_WINDOW / 2
    while True:
        started = time.monotonic()
        try:
            totals = compactor.run([config.universe])
        except Backend as exc:
            calls.unknown(exc)
            continue
        if totals.failures:
            _, world, problem = totals.failures[0]
            raise ConformanceFailure(f"compaction of world {world} failed: {problem}")
        log.append(
            {
                "compaction": totals.worlds,
                "transactions": totals.transactions,
                "items": totals.compaction.items,
                "idempotency_entries": totals.compaction.idempotency_entries,
            }
        )
        calls.done(started)
        started = time.monotonic()
        try:
            collect(plane, config, log)
        except Backend as exc:
            calls.unknown(exc)
            continue
        calls.done(started)
        time.sleep(pause)


def collect(plane: Plane, config: TortureConfig, log: Log) -> None:
    """One orphan collection pass: the run's CAS bodies that no metadata names and no pin
    younger than the run's short grace protects, then each world's segment objects below
    its index's coverage that no record names, and finished export markers; logged with
    what it reported."""
    cas = cas_collection.collect(
        plane.engine, plane.objects, config.universe, plane.clock, config.orphan_grace_seconds
    )
    segments = SegmentCollection()
    for world in config.worlds:
        segments += collect_world(plane, config.universe, world)
    log.append(
        {
            "orphans": {name: getattr(cas, name) for name in cas.__slots__},
            "segment_orphans": {name: getattr(segments, name) for name in segments.__slots__},
        }
    )


def _open(config: TortureConfig, log: Log, hooks: StepHooks = NO_HOOKS) -> Plane:
    """Open the shared store, waiting out a cluster that is recovering."""
    while True:
        try:
            plane = open_plane(
                open_engine(config.kv_url),
                open_object_store(config.objects_url),
                config.plane_config(),
                hooks=hooks,
            )
            return through(config.door, plane)
        except Backend as exc:
            log.append({"backend": f"{type(exc).__name__}: {exc}"})
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """Run one torture process (see the module documentation)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    config = TortureConfig.load(Path(args[0]))
    role, ident, incarnation = args[1], int(args[2]), int(args[3])
    log = Log(config.directory / log_name(role, ident, incarnation))
    steps = PutSteps()
    try:
        plane = _open(config, log, steps if role == "exporter" else NO_HOOKS)
        if role == "writer":
            write(plane, config, ident, log)
        elif role == "appender":
            append(plane, config, ident, log)
        elif role == "drainer":
            drain(plane, config, ident, log)
        elif role == "drainworker":
            drain_worker(plane, config, ident, log)
        elif role == "exporter":
            export(plane, config, steps, log)
        elif role == "compactor":
            compact(plane, config, log)
        else:
            raise ValueError(f"unknown role {role!r}")
    except Exception as exc:
        log.append({"error": f"{type(exc).__name__}: {exc}"})
        traceback.print_exc()
        return 1
    return 0


def forked(
    config: str,
    role: str,
    ident: int,
    incarnation: int,
    stderr: str,
    environment: dict[str, str],
) -> None:
    """:func:`main` in a process forked by the torture's fork server
    (``conformance.torture.fleet``), set up as a new process would be: its standard error
    goes to ``stderr``, its standard input and output to ``/dev/null``, and its environment
    is ``environment`` (the parent's at the start, not the server's). If the server could
    not preload this module (its import failed there), the child imported it and says so
    on standard error: every restart then costs the imports."""
    with open(stderr, "ab") as err, open(os.devnull, "r+b") as null:
        os.dup2(null.fileno(), 0)
        os.dup2(null.fileno(), 1)
        os.dup2(err.fileno(), 2)
    os.environ.clear()
    os.environ.update(environment)
    if os.getpid() == IMPORTED_BY:
        print("torture worker: not preloaded by the fork server; imported it", file=sys.stderr)
    sys.exit(main([config, role, str(ident), str(incarnation)]))


if __name__ == "__main__":
    sys.exit(main())
