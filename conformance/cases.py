"""The conformance cases: the source specification's section 8 cases, failure modes,
determinism tests and scale envelope, written against the contracts only.

Each case takes a :class:`Context` and returns normally (passed), raises
:class:`ConformanceFailure` (failed, with what was wrong) or :class:`CaseSkipped` (skipped,
with why). Cases never assume an empty store: each works in fresh universes, so the suite
can run against a shared production cluster.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from persistence import cbor, fdb_errors
from persistence.errors import (
    BaselineRegression,
    CasBodyMissing,
    CursorAdvanced,
    EngineError,
    HeadAdvanced,
    NotFound,
    PersistError,
    ReceiptHorizonFence,
    SnapshotMismatch,
    Validation,
)
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols import drain as drain_protocol
from persistence.protocols import journal as journal_protocol
from persistence.protocols.calls import Call
from persistence.protocols.cas_bodies import object_key

if TYPE_CHECKING:
    from conformance.torture.servers import ServerFaults
from persistence.records import (
    DomainEventIngress,
    InboxIngress,
    IngressJournalRecord,
    decode_inbox_item,
    decode_journal_record,
)


class ConformanceFailure(AssertionError):
    """The backend broke a guarantee; the message says which and how."""


class CaseSkipped(Exception):
    """The case cannot run against this backend; the message says why."""


@dataclass(frozen=True, slots=True)
class TortureSize:
    """Sizes of the SIGKILL crash torture (:mod:`conformance.torture`): OS processes on the
    shared store, and how long and how often they are killed."""

    worlds: int
    writers: int
    drainers: int
    seconds: float
    """How long processes run and are killed (the final checks come after)."""
    mean_kill_interval: float
    """Mean seconds between two kills (exponentially distributed)."""
    appenders: int = 1
    """Processes appending straight to the journal at the head they read."""
    server_kill_interval: float = 2.0
    """With server faults: mean seconds between two server kills (exponentially
    distributed); each killed server is restarted after a random part of that."""
    compaction_retention_seconds: float = 8.0
    """The run's inbox window (``PlaneConfig.inbox_retention_seconds`` of every plane the
    torture opens): consumed items are compacted this long after they were consumed, while
    ``compactors`` processes run passes among the others.

    It must exceed the longest a writer takes to redo a call whose outcome it lost, counted
    from the first attempt's start (the item was consumed after that attempt committed, and
    is removed at least the window after it was consumed): the first attempt (milliseconds
    on SQLite; on FoundationDB up to its 10 s transaction timeout plus the runner's 1 s when
    it meets a recovery) + the kill and restart (the fleet restarts at once; interpreter,
    imports and open take 0.2-1 s, seconds on a loaded machine) + the kills of that writer
    while it restarts (each process is killed every ``mean_kill_interval`` times the
    processes seconds on average, so chains of two or three are seen in a run) + the redo
    (again up to a timeout, and redone after ``Backend`` once the cluster has recovered).
    Without server kills: about 1 + 3 x 1 + 1 s on either engine, so 8 s leaves room (with
    server kills see ``server_kills_retention_seconds``). Every run measures it
    (``slowest_redo_seconds``) and reports a redo later than the window as a ``window``
    violation: a derivation that fails is a failed run, never a duplicate blamed on the
    store."""
    server_kills_retention_seconds: float = 20.0
    """The window instead of ``compaction_retention_seconds`` while server processes are
    killed too: a first attempt can meet a recovery and time out (11 s), then the restarts
    (3 x 1 s) and the redo (seconds: a server is killed only once the cluster has healed
    from the last kill, so the redo does not wait out a second timeout), about 15 s."""
    compactors: int = 1
    """Compactor processes (more than one run concurrent passes over the same worlds)."""
    floors: tuple[tuple[str, int], ...] = ()
    """Figures the run must reach (``("kills", 40)``, ...): past ``seconds`` it goes on, its
    processes still killed, until the figures it can read while running (kills, what the
    workers' logs acknowledge, monitor samples) reach them, or ``max_seconds``. So a test's
    floors do not depend on how fast a loaded machine runs."""
    max_seconds: float = 0.0
    """The longest a run with ``floors`` goes on (at least ``seconds``)."""

    def retention_seconds(self, server_kills: bool) -> float:
        """The run's inbox window (see ``compaction_retention_seconds``)."""
        if server_kills:
            return self.server_kills_retention_seconds
        return self.compaction_retention_seconds


@dataclass(frozen=True, slots=True)
class Profile:
    """Sizes of one run. ``quick`` is for CI, ``full`` for nightly runs."""

    name: str
    writers: int
    items_per_writer: int
    sparse_worlds: int
    active_worlds: int
    ingress_seconds: float
    export_entries: int
    torture: TortureSize
    fault_seeds: int
    """Seeded random fault-and-crash runs of the fault matrix, after the systematic ones."""


PROFILES = {
    "quick": Profile(
        "quick",
        4,
        40,
        1_000,
        100,
        3.0,
        3_000,
        TortureSize(2, 2, 1, 4.0, 0.4, appenders=1, server_kill_interval=1.0),
        fault_seeds=0,
    ),
    "full": Profile(
        "full",
        8,
        250,
        10_000,
        1_000,
        20.0,
        30_000,
        TortureSize(4, 4, 2, 30.0, 0.3, appenders=2, server_kill_interval=2.0, compactors=2),
        fault_seeds=24,
    ),
}


@dataclass
class Context:
    """What a case gets: the plane under test and the run's profile.

    ``kv_url`` and ``objects_url`` open the same store in another process (the crash
    torture starts OS processes on it); ``None`` means the URL the engine and the object
    store report about themselves."""

    plane: Plane
    profile: Profile
    progress: Callable[[str], None] = lambda _: None
    notes: dict[str, Any] = field(default_factory=dict)
    kv_url: str | None = None
    objects_url: str | None = None
    servers: ServerFaults | None = None
    """How to kill and restart the store's own server processes (crash 2), if given."""

    def store_urls(self) -> tuple[str, str]:
        """URLs that open the store under test from another process."""
        return (
            self.kv_url if self.kv_url is not None else self.plane.engine.url,
            self.objects_url if self.objects_url is not None else self.plane.objects.url,
        )

    def new_world(self) -> tuple[UniverseId, WorldId]:
        """A world in a fresh universe."""
        universe, world = UniverseId.new(), WorldId.new()
        self.plane.create_world(universe, world)
        return universe, world


def check(condition: bool, message: str) -> None:
    """Fail the case with ``message`` unless ``condition``."""
    if not condition:
        raise ConformanceFailure(message)


def expect_error(kind: type[PersistError], call: Callable[[], object], what: str) -> Any:
    """Run ``call``; it must raise ``kind``. Returns the error."""
    try:
        call()
    except kind as exc:
        return exc
    except PersistError as exc:
        raise ConformanceFailure(
            f"{what}: raised {type(exc).__name__}, expected {kind.__name__}"
        ) from exc
    raise ConformanceFailure(f"{what}: no error, expected {kind.__name__}")


def event(n: int, tag: str = "") -> DomainEventIngress:
    """A small, recognisable inbox item."""
    return DomainEventIngress("conformance/Event@1", cbor.encode({"n": n, "tag": tag}))


def run_threads(count: int, target: Callable[[int], None]) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads started together; return their errors."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # reported to the case
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def journal_items(plane: Plane, universe: UniverseId, world: WorldId) -> list[IngressJournalRecord]:
    """The ingress records of a world's journal, in height order."""
    head = plane.head(universe, world)
    records = [decode_journal_record(e) for _, e in plane.read_range(universe, world, 1, head)]
    return [r for r in records if isinstance(r, IngressJournalRecord)]


# --------------------------------------------------------------------- case 1: CAS


def cas_put_get_has(ctx: Context) -> None:
    """Case 1: CAS put/get/has idempotency and hash correctness (inline and external)."""
    plane = ctx.plane
    universe, other = UniverseId.new(), UniverseId.new()
    for size in (0, 100, plane.config.inline_threshold, plane.config.inline_threshold + 1, 1 << 20):
        body = hashlib.shake_256(f"conformance/{size}".encode()).digest(size) if size else b""
        h = plane.put_verified(universe, body)
        check(h == Hash(hashlib.sha256(body).digest()), f"{size} B: returned hash is not sha256")
        check(plane.put_verified(universe, body) == h, f"{size} B: second put changed the hash")
        check(plane.has(universe, h), f"{size} B: has() is false after put")
        check(plane.get(universe, h) == body, f"{size} B: get() returned other bytes")
        check(not plane.has(other, h), f"{size} B: visible in another universe")
    expect_error(NotFound, lambda: plane.get(universe, Hash.of(b"never stored")), "get unknown")


# --------------------------------------------------------------------- case 2: journal


def journal_append_conflicts(ctx: Context) -> None:
    """Case 2: append_batch conflict semantics, contiguity, no partial batch, exactly one
    winner among concurrent appenders at the same expected head, and retry_append_batch."""
    plane = ctx.plane
    u, w = ctx.new_world()
    check(plane.append_batch(u, w, 0, [b"a", b"b"]) == 1, "first append did not start at 1")
    err = expect_error(HeadAdvanced, lambda: plane.append_batch(u, w, 0, [b"x"]), "stale head")
    check((err.expected, err.actual) == (0, 2), f"HeadAdvanced carries {err.expected}/{err.actual}")
    limit = plane.config.max_entry_bytes
    expect_error(
        Validation, lambda: plane.append_batch(u, w, 2, [b"ok", b"x" * (limit + 1)]), "oversize"
    )
    check(plane.head(u, w) == 2, "a refused batch changed the head")
    winners: list[int] = []

    def contend(i: int) -> None:
        try:
            plane.append_batch(u, w, 2, [f"racer {i}".encode(), b"second"])
            winners.append(i)
        except HeadAdvanced:
            pass

    errors = run_threads(ctx.profile.writers, contend)
    check(not errors, f"concurrent appends raised {errors[:1]!r}")
    check(len(winners) == 1, f"{len(winners)} concurrent appends at head 2 succeeded, not 1")
    rows = plane.read_range(u, w, 1, 10)
    check([h for h, _ in rows] == [1, 2, 3, 4], f"heights {[h for h, _ in rows]}")
    check(rows[2][1] == f"racer {winners[0]}".encode(), "the winner's batch is not what was read")
    big = os.urandom(1 << 20)
    plane.append_batch(u, w, 4, [big])
    check(plane.read_range(u, w, 5, 1) == [(5, big)], "a 1 MiB entry did not round-trip")
    # Two appends interleaved inside their transactions (threads rarely overlap under the
    # GIL): both read head 5, both write; exactly one commit may succeed.
    keys = WorldKeys(u, w)
    first, second = plane.engine.create_transaction(), plane.engine.create_transaction()
    drive(journal_protocol.append_batch(first, keys, 5, [b"first"], Call.new()))
    drive(journal_protocol.append_batch(second, keys, 5, [b"second"], Call.new()))
    first.commit().wait()
    try:
        second.commit().wait()
    except EngineError as exc:
        check(
            exc.code == fdb_errors.NOT_COMMITTED,
            f"the losing commit failed with {exc.code}, not 1020",
        )
    else:
        raise ConformanceFailure("two interleaved appends at head 5 both committed")
    check(plane.read_range(u, w, 6, 5) == [(6, b"first")], "the journal after the race is wrong")
    # Redoing an append whose outcome is unknown: found where it landed, appended if the
    # head is still the expected one, HeadAdvanced if it did not land.
    check(plane.retry_append_batch(u, w, 5, [b"first"]) == 6, "a landed append was not found")
    check(plane.retry_append_batch(u, w, 6, [b"redo"]) == 7, "retry at the head did not append")
    expect_error(
        HeadAdvanced, lambda: plane.retry_append_batch(u, w, 6, [b"never"]), "retry, not landed"
    )
    check(plane.head(u, w) == 7, "retries changed the head more than once")


# --------------------------------------------------------------------- case 3: inbox order


def inbox_concurrent_writers(ctx: Context) -> None:
    """Case 3: inbox total order with concurrent writers; each writer's order is kept."""
    plane, profile = ctx.plane, ctx.profile
    u, w = ctx.new_world()
    returned: dict[int, list[InboxSeq]] = {}

    def write(i: int) -> None:
        seqs = []
        for n in range(profile.items_per_writer):
            seqs.append(plane.enqueue(u, w, event(n, f"w{i}")))
        returned[i] = seqs

    errors = run_threads(profile.writers, write)
    check(not errors, f"concurrent enqueues raised {errors[:1]!r}")
    items = plane.read_after(u, w, None, profile.writers * profile.items_per_writer + 10)
    seqs = [s for s, _ in items]
    check(len(items) == profile.writers * profile.items_per_writer, f"{len(items)} items stored")
    check(seqs == sorted(set(seqs)), "sequences are not unique and increasing")
    check(
        sorted(seqs) == sorted(s for v in returned.values() for s in v),
        "stored sequences differ from the ones enqueue returned",
    )
    for i, mine in returned.items():
        check(mine == sorted(mine), f"writer {i} got decreasing sequences")


# --------------------------------------------------------------------- case 4: cursor


def cursor_and_drain_exactly_once(ctx: Context) -> None:
    """Case 4: cursor monotonicity; drains append every item exactly once, also with
    competing drainers and when a drain is retried after its commit applied."""
    plane, profile = ctx.plane, ctx.profile
    u, w = ctx.new_world()
    s1, s2, s3 = plane.enqueue_batch(u, w, [event(1), event(2), event(3)])
    plane.commit_cursor(u, w, None, s2)
    expect_error(Validation, lambda: plane.commit_cursor(u, w, s2, s1), "cursor backwards")
    expect_error(CursorAdvanced, lambda: plane.commit_cursor(u, w, s1, s3), "stale cursor")
    check(plane.inbox_cursor(u, w) == s2, "a refused cursor commit moved the cursor")

    u, w = ctx.new_world()
    total = profile.writers * profile.items_per_writer
    plane.enqueue_batch(u, w, [event(n) for n in range(total)])

    def drain(i: int) -> None:
        while plane.drain_inbox_to_journal(u, w, max_items=7).count:
            pass

    errors = run_threads(2, drain)
    check(not errors, f"competing drains raised {errors[:1]!r}")
    records = journal_items(plane, u, w)
    drained = [cbor.decode(decode_inbox_item(r.item).value_cbor)["n"] for r in records]  # type: ignore[union-attr]
    check(drained == list(range(total)), "drained items are lost, duplicated or reordered")

    # A drain whose commit applied but was reported unknown runs again as the same call:
    u, w = ctx.new_world()
    plane.enqueue_batch(u, w, [event(n) for n in range(5)])
    keys = WorldKeys(u, w)
    call = Call.new()
    from persistence.plane import default_normalizer

    limits = drain_protocol.DrainLimits(3, 1 << 20, plane.config.max_entry_bytes, plane.budget)
    first = drive(drain_protocol.drain(plane.engine, keys, limits, default_normalizer, call))
    again = drive(drain_protocol.drain(plane.engine, keys, limits, default_normalizer, call))
    check(first == again, f"a retried drain returned {again}, first attempt {first}")
    check(plane.head(u, w) == 3, "a retried drain appended again")


# --------------------------------------------------------------------- case 5: snapshots


def snapshot_index_and_baseline(ctx: Context) -> None:
    """Case 5: snapshot index immutability, the receipt-horizon fence, baseline non-regression."""
    plane = ctx.plane
    u, w = ctx.new_world()
    plane.append_batch(u, w, 0, [b"e"] * 6)
    r4, outcome = plane.snapshot_commit(
        u, w, b"s4", height=4, logical_time_ns=4, receipt_horizon_height=4, promote_baseline=True
    )
    check(outcome.indexed and outcome.promoted, "snapshot at 4 was not indexed and promoted")
    _, again = plane.snapshot_commit(
        u, w, b"s4", height=4, logical_time_ns=4, receipt_horizon_height=4, promote_baseline=True
    )
    check(not again.indexed and not again.promoted, "repeating a snapshot commit changed state")
    expect_error(
        SnapshotMismatch,
        lambda: plane.snapshot_commit(u, w, b"other", height=4, logical_time_ns=4),
        "different snapshot at an indexed height",
    )
    expect_error(
        ReceiptHorizonFence,
        lambda: plane.snapshot_commit(
            u,
            w,
            b"s6",
            height=6,
            logical_time_ns=6,
            receipt_horizon_height=5,
            promote_baseline=True,
        ),
        "promotion without the receipt horizon",
    )
    r2, _ = plane.snapshot_commit(
        u, w, b"s2", height=2, logical_time_ns=2, receipt_horizon_height=2
    )
    expect_error(BaselineRegression, lambda: plane.promote_baseline(u, w, r2), "regression")
    check(plane.active_baseline(u, w) == r4, "the baseline moved")
    heights = [s.height for s in plane.list_snapshots(u, w)]
    check(heights == [0, 2, 4], f"snapshot index holds {heights}")


# --------------------------------------------------------------------- case 6: segments


def segment_export_restore(ctx: Context) -> None:
    """Case 6 and determinism 1: export, stitched reads, and restore equal to full replay."""
    from segments.export import ExportConfig, Exporter
    from segments.restore import full_replay, restore

    plane = ctx.plane
    u, w = ctx.new_world()
    entries = [os.urandom(50 + n % 300) for n in range(200)]
    plane.append_batch(u, w, 0, entries[:100])
    plane.enqueue_batch(u, w, [event(n) for n in range(20)])
    plane.drain_inbox_to_journal(u, w)
    head = plane.head(u, w)
    plane.append_batch(u, w, head, entries[100:])
    state = full_replay(plane, u, w, ReferenceKernel())
    plane.snapshot_commit(
        u,
        w,
        state.state,
        height=state.head,
        logical_time_ns=1,
        receipt_horizon_height=state.head,
        promote_baseline=True,
    )
    before = plane.read_range(u, w, 1, 10_000)
    segments = Exporter(plane, ExportConfig(enabled=True, target_entries=50)).export_all(u, w)
    check(len(segments) >= 4, f"only {len(segments)} segments exported")
    check(plane.read_range(u, w, 1, 10_000) == before, "the journal reads differently after export")
    plane.append_batch(u, w, plane.head(u, w), [b"tail"])
    restored = restore(plane, u, w, ReferenceKernel())
    replayed = full_replay(plane, u, w, ReferenceKernel())
    check(restored.state == replayed.state, "restore differs from full replay")


# --------------------------------------------------------------------- failure modes


def failure_object_without_metadata(ctx: Context) -> None:
    """Failure mode 1: an object written whose metadata commit failed; a retry converges."""
    plane = ctx.plane
    universe = UniverseId.new()
    body = os.urandom(plane.config.inline_threshold + 100)
    h = Hash.of(body)
    plane.objects.put(object_key(universe, h), body, sha256=h.digest)  # the crashed attempt
    check(not plane.has(universe, h), "metadata exists without a put")
    check(plane.put_verified(universe, body) == h, "retry returned another hash")
    check(plane.get(universe, h) == body, "retry did not converge")


def failure_metadata_without_body(ctx: Context) -> None:
    """Failure mode 2: metadata present, body missing: a hard error, no silent heal."""
    plane = ctx.plane
    universe = UniverseId.new()
    body = os.urandom(plane.config.inline_threshold + 100)
    h = plane.put_verified(universe, body)
    plane.objects.delete(object_key(universe, h))
    expect_error(CasBodyMissing, lambda: plane.get(universe, h), "read of a missing body")
    check(plane.has(universe, h), "metadata was dropped instead of reported")


# --------------------------------------------------------------------- determinism


def determinism_retries_are_exactly_once(ctx: Context) -> None:
    """Determinism 2: every write protocol, re-run as FoundationDB re-runs a transaction
    whose commit applied but was reported unknown, takes effect once."""
    plane = ctx.plane
    u, w = ctx.new_world()
    keys = WorldKeys(u, w)
    call = Call.new()
    first = drive(journal_protocol.append_batch(plane.engine, keys, 0, [b"a", b"b"], call))
    check(
        drive(journal_protocol.append_batch(plane.engine, keys, 0, [b"a", b"b"], call)) == first,
        "a retried append was not recognised",
    )
    check(plane.head(u, w) == 2, "a retried append wrote twice")
    seq = plane.enqueue(u, w, event(1), idempotency_key=b"retry-me")
    check(plane.enqueue(u, w, event(1), idempotency_key=b"retry-me") == seq, "enqueue duplicated")
    check(len(plane.read_after(u, w, None, 10)) == 1, "a retried enqueue stored a second item")
    plane.commit_cursor(u, w, None, seq)
    plane.commit_cursor(u, w, None, seq)  # the same swap again: recognised
    check(plane.inbox_cursor(u, w) == seq, "a repeated cursor swap failed")


def determinism_drain_order_is_stable(ctx: Context) -> None:
    """Determinism 3: the same ingress gives the same journal order in every run."""
    plane = ctx.plane
    journals = []
    for _ in range(2):
        u, w = ctx.new_world()
        for n in range(30):
            plane.enqueue(u, w, InboxIngress("orders", cbor.encode(n), headers={"n": str(n)}))
            if n % 7 == 0:
                plane.drain_inbox_to_journal(u, w, max_items=4)
        while plane.drain_inbox_to_journal(u, w).count:
            pass
        journals.append([r.item for r in journal_items(plane, u, w)])
    check(journals[0] == journals[1], "two identical runs journaled items in different orders")


# --------------------------------------------------------------------- faults and crashes


def commit_faults_and_crash_points(ctx: Context) -> None:
    """Faults 1: every commit of a host-like workload failed with 1020, 1021 (applied and
    not) and 1007, and a crash at every crash point, recovered by a new plane: exactly the
    fault-free state (:mod:`conformance.fault_matrix`; fault-capable engines only)."""
    from conformance.fault_matrix import commit_faults_and_crash_points as run

    run(ctx)


def crash_torture(ctx: Context) -> None:
    """Crash 1: writer, appender, drainer, exporter and compactor OS processes SIGKILLed at
    random moments and restarted, then every invariant checked against what they durably
    acknowledged (:mod:`conformance.torture`; engines and object stores that processes
    share)."""
    from conformance.torture.run import crash_torture as run

    run(ctx)


def server_kills(ctx: Context) -> None:
    """Crash 2: the crash torture while the store's own server processes (FoundationDB's
    ``fdbserver``) are SIGKILLed and restarted too, so calls meet real recoveries; needs
    ``Context.servers`` (``aosp conformance --fdb-local DIR`` or the kill and restart
    commands)."""
    from conformance.torture.run import crash_torture as run

    if ctx.servers is None:
        raise CaseSkipped(
            "server kills need a way to kill the store's server processes: "
            "--fdb-local DIR, or --server-kill-command and --server-restart-command"
        )
    run(ctx, servers=ctx.servers)


# --------------------------------------------------------------------- scale envelope


def scale_sparse_worlds(ctx: Context) -> None:
    """Scale 1: many sparse worlds; per-operation work does not grow with the world count."""
    plane, count = ctx.plane, ctx.profile.sparse_worlds
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(count)]
    latencies = []
    for i, w in enumerate(worlds):
        plane.create_world(universe, w)
        start = time.perf_counter()
        plane.append_batch(universe, w, 0, [b"sparse"])
        plane.head(universe, w)
        latencies.append(time.perf_counter() - start)
        if i % max(1, count // 10) == 0:
            ctx.progress(f"sparse worlds: {i}/{count}")
    tenth = max(1, count // 10)
    early = sorted(latencies[:tenth])[tenth // 2]
    late = sorted(latencies[-tenth:])[tenth // 2]
    ctx.notes["sparse_median_ms_first_tenth"] = round(early * 1e3, 3)
    ctx.notes["sparse_median_ms_last_tenth"] = round(late * 1e3, 3)
    check(
        late <= max(3 * early, early + 0.005),
        f"median latency grew from {early:.4f}s to {late:.4f}s",
    )


def scale_active_worlds_no_starvation(ctx: Context) -> None:
    """Scale 2: sustained ingress into many active worlds; a round-robin drainer serves every
    world (none starves) and every item arrives exactly once."""
    plane, profile = ctx.plane, ctx.profile
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(profile.active_worlds)]
    for w in worlds:
        plane.create_world(universe, w)
    sent = {w: 0 for w in worlds}
    stop = threading.Event()

    def ingress(i: int) -> None:
        n = 0
        while not stop.is_set():
            w = worlds[(i * 7919 + n) % len(worlds)]
            plane.enqueue(universe, w, event(n, str(i)))
            sent[w] += 1
            n += 1

    threads = [threading.Thread(target=ingress, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + profile.ingress_seconds
    rounds = 0
    try:
        while time.monotonic() < deadline:
            for w in worlds:
                plane.drain_inbox_to_journal(universe, w, max_items=50)
            rounds += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    for w in worlds:  # the final pass after ingress stopped
        while plane.drain_inbox_to_journal(universe, w, max_items=500).count:
            pass
    ctx.notes["active_worlds_drain_rounds"] = rounds
    check(rounds >= 1, "the drainer did not complete one round over the worlds")
    for w in worlds:
        got = plane.head(universe, w)
        check(got == sent[w], f"world {w}: {sent[w]} items sent, {got} journaled")


def scale_export_does_not_stall_writes(ctx: Context) -> None:
    """Scale 3: segment export under sustained appends does not stall foreground writes."""
    from segments.export import ExportConfig, Exporter

    plane, n = ctx.plane, ctx.profile.export_entries
    u, w = ctx.new_world()
    for start in range(0, n, 500):
        plane.append_batch(u, w, start, [os.urandom(200) for _ in range(min(500, n - start))])
    plane.snapshot_commit(
        u,
        w,
        b"baseline",
        height=n,
        logical_time_ns=1,
        receipt_horizon_height=n,
        promote_baseline=True,
    )
    stop = threading.Event()
    latencies: list[float] = []
    errors: list[BaseException] = []

    def foreground() -> None:
        try:
            while not stop.is_set():
                start = time.perf_counter()
                plane.append_batch(u, w, plane.head(u, w), [b"foreground"])
                latencies.append(time.perf_counter() - start)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=foreground)
    thread.start()
    try:
        segments = Exporter(plane, ExportConfig(enabled=True, target_entries=1_000)).export_all(
            u, w
        )
    finally:
        stop.set()
        thread.join()
    check(not errors, f"foreground appends failed during export: {errors[:1]!r}")
    check(len(segments) >= n // 1_000 - 1, f"only {len(segments)} segments exported")
    check(bool(latencies), "no foreground append completed during the export")
    worst = max(latencies)
    ctx.notes["foreground_appends_during_export"] = len(latencies)
    ctx.notes["foreground_worst_latency_ms"] = round(worst * 1e3, 1)
    check(worst < 2.0, f"a foreground append waited {worst:.2f}s during export")


CASES: dict[str, Callable[[Context], None]] = {
    "case1_cas_put_get_has": cas_put_get_has,
    "case2_journal_append_conflicts": journal_append_conflicts,
    "case3_inbox_concurrent_writers": inbox_concurrent_writers,
    "case4_cursor_and_drain_exactly_once": cursor_and_drain_exactly_once,
    "case5_snapshot_index_and_baseline": snapshot_index_and_baseline,
    "case6_segment_export_restore": segment_export_restore,
    "failure1_object_without_metadata": failure_object_without_metadata,
    "failure2_metadata_without_body": failure_metadata_without_body,
    "determinism2_retries_are_exactly_once": determinism_retries_are_exactly_once,
    "determinism3_drain_order_is_stable": determinism_drain_order_is_stable,
    "faults1_commit_faults_and_crash_points": commit_faults_and_crash_points,
    "crash1_sigkill_torture": crash_torture,
    "crash2_server_kills": server_kills,
    "scale1_sparse_worlds": scale_sparse_worlds,
    "scale2_active_worlds_no_starvation": scale_active_worlds_no_starvation,
    "scale3_export_does_not_stall_writes": scale_export_does_not_stall_writes,
}
"""Every case, by its report name, in run order (the scale envelope last: its load would
slow the cases after it). Failure modes 3 (typed head conflict) and 4 (cursor regression
rejected) are checked inside cases 2 and 4; determinism 1 (restore equals full replay)
inside case 6."""
