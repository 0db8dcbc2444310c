"""The conformance cases: the source specification's section 8 cases, failure modes,
determinism tests and scale envelope (the suite's order: ``conformance/suite.py``).

Each case takes a :class:`~conformance.context.Context` and returns normally (passed),
raises ``ConformanceFailure`` (failed, with what was wrong) or ``CaseSkipped`` (skipped,
with why). A case calls the store through its contract (``ctx.store``:
:class:`persistence.contracts.PlaneContract`); the parts that check how the plane carries
it out over its backend -- two raw transactions racing, a retried protocol call, objects
planted in the object store, an exporter -- use ``ctx.plane`` and say so. Cases never
assume an empty store: each works in fresh universes, so the suite can run against a
shared production cluster.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

from conformance.context import (
    ConformanceFailure,
    Context,
    check,
    event,
    expect_error,
    journal_items,
    run_threads,
)
from persistence import cbor, fdb_errors
from persistence.errors import (
    BaselineRegression,
    CasBodyMissing,
    CursorAdvanced,
    EngineError,
    HeadAdvanced,
    IdempotencyKeyReused,
    NotFound,
    ReceiptHorizonFence,
    SnapshotMismatch,
    Validation,
)
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxIngress, decode_inbox_item
from persistence.kernel import ReferenceKernel
from persistence.keyspace import WorldKeys
from persistence.plane import AppTransaction
from persistence.protocols import drain as drain_protocol
from persistence.protocols import journal as journal_protocol
from persistence.protocols.calls import Call
from persistence.protocols.cas_bodies import object_key

# --------------------------------------------------------------------- case 1: CAS


def cas_put_get_has(ctx: Context) -> None:
    """Case 1: CAS put/get/has idempotency and hash correctness (inline and external)."""
    store = ctx.store
    universe, other = UniverseId.new(), UniverseId.new()
    for size in (
        0,
        100,
        ctx.plane.config.inline_threshold,
        ctx.plane.config.inline_threshold + 1,
        1 << 20,
    ):
        body = hashlib.shake_256(f"conformance/{size}".encode()).digest(size) if size else b""
        h = store.put_verified(universe, body)
        check(h == Hash(hashlib.sha256(body).digest()), f"{size} B: returned hash is not sha256")
        check(store.put_verified(universe, body) == h, f"{size} B: second put changed the hash")
        check(store.has(universe, h), f"{size} B: has() is false after put")
        check(store.get(universe, h) == body, f"{size} B: get() returned other bytes")
        check(not store.has(other, h), f"{size} B: visible in another universe")
    expect_error(NotFound, lambda: store.get(universe, Hash.of(b"never stored")), "get unknown")


# --------------------------------------------------------------------- case 2: journal


def journal_append_conflicts(ctx: Context) -> None:
    """Case 2: append_batch conflict semantics, contiguity, no partial batch, exactly one
    winner among concurrent appenders at the same expected head, and retry_append_batch."""
    store = ctx.store
    u, w = ctx.new_world()
    check(store.append_batch(u, w, 0, [b"a", b"b"]) == 1, "first append did not start at 1")
    err = expect_error(HeadAdvanced, lambda: store.append_batch(u, w, 0, [b"x"]), "stale head")
    check((err.expected, err.actual) == (0, 2), f"HeadAdvanced carries {err.expected}/{err.actual}")
    limit = ctx.plane.config.max_entry_bytes
    expect_error(
        Validation, lambda: store.append_batch(u, w, 2, [b"ok", b"x" * (limit + 1)]), "oversize"
    )
    check(store.head(u, w) == 2, "a refused batch changed the head")
    winners: list[int] = []

    def contend(i: int) -> None:
        try:
            store.append_batch(u, w, 2, [f"racer {i}".encode(), b"second"])
            winners.append(i)
        except HeadAdvanced:
            pass

    errors = run_threads(ctx.profile.writers, contend)
    check(not errors, f"concurrent appends raised {errors[:1]!r}")
    check(len(winners) == 1, f"{len(winners)} concurrent appends at head 2 succeeded, not 1")
    rows = store.read_range(u, w, 1, 10)
    check([h for h, _ in rows] == [1, 2, 3, 4], f"heights {[h for h, _ in rows]}")
    check(rows[2][1] == f"racer {winners[0]}".encode(), "the winner's batch is not what was read")
    big = os.urandom(1 << 20)
    store.append_batch(u, w, 4, [big])
    check(store.read_range(u, w, 5, 1) == [(5, big)], "a 1 MiB entry did not round-trip")
    # Two appends interleaved inside their transactions (threads rarely overlap under the
    # GIL): both read head 5, both write; exactly one commit may succeed.
    keys = WorldKeys(u, w)
    first, second = ctx.plane.engine.create_transaction(), ctx.plane.engine.create_transaction()
    drive(journal_protocol.append_batch(first, keys, 5, [b"first"], Call.new(), ctx.plane.sealing))
    drive(
        journal_protocol.append_batch(second, keys, 5, [b"second"], Call.new(), ctx.plane.sealing)
    )
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
    check(store.read_range(u, w, 6, 5) == [(6, b"first")], "the journal after the race is wrong")
    # Redoing an append whose outcome is unknown: found where it landed, appended if the
    # head is still the expected one, HeadAdvanced if it did not land.
    check(store.retry_append_batch(u, w, 5, [b"first"]) == 6, "a landed append was not found")
    check(store.retry_append_batch(u, w, 6, [b"redo"]) == 7, "retry at the head did not append")
    expect_error(
        HeadAdvanced, lambda: store.retry_append_batch(u, w, 6, [b"never"]), "retry, not landed"
    )
    check(store.head(u, w) == 7, "retries changed the head more than once")


# --------------------------------------------------------------------- case 3: inbox order


def inbox_concurrent_writers(ctx: Context) -> None:
    """Case 3: inbox total order with concurrent writers; each writer's order is kept."""
    store, profile = ctx.store, ctx.profile
    u, w = ctx.new_world()
    returned: dict[int, list[InboxSeq]] = {}

    def write(i: int) -> None:
        seqs = []
        for n in range(profile.items_per_writer):
            seqs.append(store.enqueue(u, w, event(n, f"w{i}")))
        returned[i] = seqs

    errors = run_threads(profile.writers, write)
    check(not errors, f"concurrent enqueues raised {errors[:1]!r}")
    items = store.read_after(u, w, None, profile.writers * profile.items_per_writer + 10)
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
    store, profile = ctx.store, ctx.profile
    u, w = ctx.new_world()
    s1, s2, s3 = store.enqueue_batch(u, w, [event(1), event(2), event(3)])
    store.commit_cursor(u, w, None, s2)
    expect_error(Validation, lambda: store.commit_cursor(u, w, s2, s1), "cursor backwards")
    expect_error(CursorAdvanced, lambda: store.commit_cursor(u, w, s1, s3), "stale cursor")
    check(store.inbox_cursor(u, w) == s2, "a refused cursor commit moved the cursor")

    u, w = ctx.new_world()
    total = profile.writers * profile.items_per_writer
    store.enqueue_batch(u, w, [event(n) for n in range(total)])

    def drain(i: int) -> None:
        while store.drain_inbox_to_journal(u, w, max_items=7).count:
            pass

    errors = run_threads(2, drain)
    check(not errors, f"competing drains raised {errors[:1]!r}")
    records = journal_items(store, u, w)
    drained = [cbor.decode(decode_inbox_item(r.item).value_cbor)["n"] for r in records]  # type: ignore[union-attr]
    check(drained == list(range(total)), "drained items are lost, duplicated or reordered")

    # A drain whose commit applied but was reported unknown runs again as the same call:
    u, w = ctx.new_world()
    store.enqueue_batch(u, w, [event(n) for n in range(5)])
    keys = WorldKeys(u, w)
    call = Call.new()
    from persistence.plane import default_normalizer

    limits = drain_protocol.DrainLimits(
        3, 1 << 20, ctx.plane.config.max_entry_bytes, ctx.plane.budget
    )
    first = drive(
        drain_protocol.drain(
            ctx.plane.engine, keys, limits, default_normalizer, call, ctx.plane.sealing
        )
    )
    again = drive(
        drain_protocol.drain(
            ctx.plane.engine, keys, limits, default_normalizer, call, ctx.plane.sealing
        )
    )
    check(first == again, f"a retried drain returned {again}, first attempt {first}")
    check(store.head(u, w) == 3, "a retried drain appended again")


# --------------------------------------------------------------------- case 5: snapshots


def snapshot_index_and_baseline(ctx: Context) -> None:
    """Case 5: snapshot index immutability, the receipt-horizon fence, baseline non-regression."""
    store = ctx.store
    u, w = ctx.new_world()
    store.append_batch(u, w, 0, [b"e"] * 6)
    r4, outcome = store.snapshot_commit(
        u, w, b"s4", height=4, logical_time_ns=4, receipt_horizon_height=4, promote_baseline=True
    )
    check(outcome.indexed and outcome.promoted, "snapshot at 4 was not indexed and promoted")
    _, again = store.snapshot_commit(
        u, w, b"s4", height=4, logical_time_ns=4, receipt_horizon_height=4, promote_baseline=True
    )
    check(not again.indexed and not again.promoted, "repeating a snapshot commit changed state")
    expect_error(
        SnapshotMismatch,
        lambda: store.snapshot_commit(u, w, b"other", height=4, logical_time_ns=4),
        "different snapshot at an indexed height",
    )
    expect_error(
        ReceiptHorizonFence,
        lambda: store.snapshot_commit(
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
    r2, _ = store.snapshot_commit(
        u, w, b"s2", height=2, logical_time_ns=2, receipt_horizon_height=2
    )
    expect_error(BaselineRegression, lambda: store.promote_baseline(u, w, r2), "regression")
    check(store.active_baseline(u, w) == r4, "the baseline moved")
    heights = [s.height for s in store.list_snapshots(u, w)]
    check(heights == [0, 2, 4], f"snapshot index holds {heights}")


# --------------------------------------------------------------------- case 6: segments


def segment_export_restore(ctx: Context) -> None:
    """Case 6 and determinism 1: export, stitched reads, and restore equal to full replay."""
    from segments.export import ExportConfig, Exporter
    from segments.restore import full_replay, restore

    store = ctx.store
    u, w = ctx.new_world()
    entries = [os.urandom(50 + n % 300) for n in range(200)]
    store.append_batch(u, w, 0, entries[:100])
    store.enqueue_batch(u, w, [event(n) for n in range(20)])
    store.drain_inbox_to_journal(u, w)
    head = store.head(u, w)
    store.append_batch(u, w, head, entries[100:])
    state = full_replay(ctx.plane, u, w, ReferenceKernel())
    store.snapshot_commit(
        u,
        w,
        state.state,
        height=state.head,
        logical_time_ns=1,
        receipt_horizon_height=state.head,
        promote_baseline=True,
    )
    before = store.read_range(u, w, 1, 10_000)
    segments = Exporter(ctx.plane, ExportConfig(enabled=True, target_entries=50)).export_all(u, w)
    check(len(segments) >= 4, f"only {len(segments)} segments exported")
    check(store.read_range(u, w, 1, 10_000) == before, "the journal reads differently after export")
    store.append_batch(u, w, store.head(u, w), [b"tail"])
    restored = restore(ctx.plane, u, w, ReferenceKernel())
    replayed = full_replay(ctx.plane, u, w, ReferenceKernel())
    check(restored.state == replayed.state, "restore differs from full replay")


# --------------------------------------------------------------------- failure modes


def failure_object_without_metadata(ctx: Context) -> None:
    """Failure mode 1: an object written whose metadata commit failed; a retry converges."""
    store = ctx.store
    universe = UniverseId.new()
    body = os.urandom(ctx.plane.config.inline_threshold + 100)
    h = Hash.of(body)
    ctx.plane.objects.put(object_key(universe, h), body, sha256=h.digest)  # the crashed attempt
    check(not store.has(universe, h), "metadata exists without a put")
    check(store.put_verified(universe, body) == h, "retry returned another hash")
    check(store.get(universe, h) == body, "retry did not converge")


def failure_metadata_without_body(ctx: Context) -> None:
    """Failure mode 2: metadata present, body missing: a hard error, no silent heal."""
    store = ctx.store
    universe = UniverseId.new()
    body = os.urandom(ctx.plane.config.inline_threshold + 100)
    h = store.put_verified(universe, body)
    ctx.plane.objects.delete(object_key(universe, h))
    expect_error(CasBodyMissing, lambda: store.get(universe, h), "read of a missing body")
    check(store.has(universe, h), "metadata was dropped instead of reported")


# --------------------------------------------------------------------- determinism


def determinism_retries_are_exactly_once(ctx: Context) -> None:
    """Determinism 2: every write protocol, re-run as FoundationDB re-runs a transaction
    whose commit applied but was reported unknown, takes effect once."""
    store = ctx.store
    u, w = ctx.new_world()
    keys = WorldKeys(u, w)
    call = Call.new()
    first = drive(
        journal_protocol.append_batch(
            ctx.plane.engine, keys, 0, [b"a", b"b"], call, ctx.plane.sealing
        )
    )
    check(
        drive(
            journal_protocol.append_batch(
                ctx.plane.engine, keys, 0, [b"a", b"b"], call, ctx.plane.sealing
            )
        )
        == first,
        "a retried append was not recognised",
    )
    check(store.head(u, w) == 2, "a retried append wrote twice")
    seq = store.enqueue(u, w, event(1), idempotency_key=b"retry-me")
    check(store.enqueue(u, w, event(1), idempotency_key=b"retry-me") == seq, "enqueue duplicated")
    check(len(store.read_after(u, w, None, 10)) == 1, "a retried enqueue stored a second item")
    # the key stands for one request: another item under it is refused, and the batch
    # that carries it stores none of its items
    expect_error(
        IdempotencyKeyReused,
        lambda: store.enqueue(u, w, event(2), idempotency_key=b"retry-me"),
        "enqueue reusing a key for another item",
    )
    expect_error(
        IdempotencyKeyReused,
        lambda: store.enqueue_batch(
            u, w, [event(3), event(4)], idempotency_keys=[b"fresh", b"retry-me"]
        ),
        "a batch reusing a key for another item",
    )
    check(len(store.read_after(u, w, None, 10)) == 1, "a refused enqueue stored an item")
    check(
        store.enqueue(u, w, event(3), idempotency_key=b"fresh") != seq,
        "the refused batch's other key was taken",
    )
    store.commit_cursor(u, w, None, seq)
    store.commit_cursor(u, w, None, seq)  # the same swap again: recognised
    check(store.inbox_cursor(u, w) == seq, "a repeated cursor swap failed")


def determinism_drain_order_is_stable(ctx: Context) -> None:
    """Determinism 3: the same ingress gives the same journal order in every run."""
    store = ctx.store
    journals = []
    for _ in range(2):
        u, w = ctx.new_world()
        for n in range(30):
            store.enqueue(u, w, InboxIngress("orders", cbor.encode(n), headers={"n": str(n)}))
            if n % 7 == 0:
                store.drain_inbox_to_journal(u, w, max_items=4)
        while store.drain_inbox_to_journal(u, w).count:
            pass
        journals.append([r.item for r in journal_items(store, u, w)])
    check(journals[0] == journals[1], "two identical runs journaled items in different orders")


# --------------------------------------------------------------------- faults and crashes


# --------------------------------------------------------------------- application data


def application_data_and_transactions(ctx: Context) -> None:
    """An application's own data: writes ride on a group append (none if it is refused),
    and the application's own transactions -- concurrent read-modify-writes of one key
    count every increment once, and the versionstamped keys they write sort in the order
    they committed."""
    store, profile = ctx.store, ctx.profile
    u, w = ctx.new_world()
    store.append_sequenced(u, [(w, 0, [b"e"])], [["t"]], app_data={b"k": b"1"})
    expect_error(
        HeadAdvanced,
        lambda: store.append_sequenced(
            u, [(w, 0, [b"x"])], [["t"]], app_data={b"k": b"2", b"j": b"2"}
        ),
        "an append at a moved head",
    )
    check(store.read_app_range(u) == [(b"k", b"1")], "a refused append wrote its app data")

    async def increment(tr: AppTransaction) -> int:
        count = int(await tr.get(b"count") or b"0") + 1
        tr.set(b"count", b"%d" % count)
        tr.set_versionstamped_key(b"s" + bytes(10), 1, b"%d" % count)
        return count

    counts: list[int] = []

    def write(i: int) -> None:
        for _ in range(profile.items_per_writer // 4):
            counts.append(store.transact_app(u, increment))

    errors = run_threads(profile.writers, write)
    check(not errors, f"concurrent application transactions raised {errors[:1]!r}")
    total = profile.writers * (profile.items_per_writer // 4)
    check(sorted(counts) == list(range(1, total + 1)), "an increment was lost or counted twice")
    check(store.read_app_data(u, b"count") == b"%d" % total, "the counter's final value")
    stamped = store.read_app_range(u, b"s", b"t", limit=total + 1)
    check(
        [int(value) for _, value in stamped] == list(range(1, total + 1)),
        "versionstamped keys do not sort in commit order",
    )


# --------------------------------------------------------------------- scale envelope


def scale_sparse_worlds(ctx: Context) -> None:
    """Scale 1: many sparse worlds; per-operation work does not grow with the world count."""
    store, count = ctx.store, ctx.profile.sparse_worlds
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(count)]
    latencies = []
    for i, w in enumerate(worlds):
        store.create_world(universe, w)
        start = time.perf_counter()
        store.append_batch(universe, w, 0, [b"sparse"])
        store.head(universe, w)
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
    store, profile = ctx.store, ctx.profile
    universe = UniverseId.new()
    worlds = [WorldId.new() for _ in range(profile.active_worlds)]
    for w in worlds:
        store.create_world(universe, w)
    sent = {w: 0 for w in worlds}
    stop = threading.Event()

    def ingress(i: int) -> None:
        n = 0
        while not stop.is_set():
            w = worlds[(i * 7919 + n) % len(worlds)]
            store.enqueue(universe, w, event(n, str(i)))
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
                store.drain_inbox_to_journal(universe, w, max_items=50)
            rounds += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    for w in worlds:  # the final pass after ingress stopped
        while store.drain_inbox_to_journal(universe, w, max_items=500).count:
            pass
    ctx.notes["active_worlds_drain_rounds"] = rounds
    check(rounds >= 1, "the drainer did not complete one round over the worlds")
    for w in worlds:
        got = store.head(universe, w)
        check(got == sent[w], f"world {w}: {sent[w]} items sent, {got} journaled")


def scale_export_does_not_stall_writes(ctx: Context) -> None:
    """Scale 3: segment export under sustained appends does not stall foreground writes."""
    from segments.export import ExportConfig, Exporter

    store, n = ctx.store, ctx.profile.export_entries
    u, w = ctx.new_world()
    for start in range(0, n, 500):
        store.append_batch(u, w, start, [os.urandom(200) for _ in range(min(500, n - start))])
    store.snapshot_commit(
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
                store.append_batch(u, w, store.head(u, w), [b"foreground"])
                latencies.append(time.perf_counter() - start)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=foreground)
    thread.start()
    try:
        segments = Exporter(ctx.plane, ExportConfig(enabled=True, target_entries=1_000)).export_all(
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
