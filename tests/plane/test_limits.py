"""FoundationDB's limits, enforced before any transaction: whatever the plane accepts fits
(no 2101 transaction_too_large, 2102 key_too_large, 2103 value_too_large on any engine),
and whatever does not fit is ``Validation`` with nothing written.

Engines run with a small ``size_limit`` (FoundationDB's transaction option; the memory and
SQLite engines count sizes as FoundationDB does, :mod:`persistence.txsize`), so that the
property test reaches the edges with small inputs; one profile keeps the limit large enough
for items near FoundationDB's fixed 100,000-byte value limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from backends.kv.faults import FaultInjector, FaultyEngine
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.memory import MemoryObjectStore
from persistence import cbor, fdb_errors, kv
from persistence.errors import EngineError, Validation
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, encode_inbox_item
from persistence.keyspace import WorldKeys
from persistence.plane import MAX_INLINE_BYTES, OWN_KEY_ENVELOPE_BYTES, Plane, PlaneConfig
from persistence.protocols import budget
from persistence.sizes import MAX_IDEMPOTENCY_KEY_BYTES
from segments import open_plane
from tests.fdb_cluster import FdbCluster, clear_keyspace

LIMIT_ERRORS = {
    fdb_errors.TRANSACTION_TOO_LARGE,
    fdb_errors.KEY_TOO_LARGE,
    fdb_errors.VALUE_TOO_LARGE,
}
SIZE_LIMITS = {"small": 20_000, "value": 400_000}
"""``small``: a transaction of a few kilobytes is already too large; ``value``: room for
items and entries around FoundationDB's 100,000-byte value limit."""


def _engine(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> kv.Engine:
    if kind == "fdb":
        cluster: FdbCluster = request.getfixturevalue("fdb_cluster")
        engine: kv.Engine = cluster.engine()
        clear_keyspace(engine)
        return engine
    if kind == "sqlite":
        return SqliteEngine(tmp_path / "kv.db", synchronous="OFF")
    return MemoryEngine()


@pytest.fixture(params=[(k, s) for k in ("memory", "sqlite", "fdb") for s in SIZE_LIMITS])
def limited(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Plane, UniverseId, WorldId]]:
    kind, profile = request.param
    engine = _engine(kind, tmp_path, request)
    engine.size_limit = SIZE_LIMITS[profile]
    config = PlaneConfig(max_entry_bytes=300_000, inline_threshold=MAX_INLINE_BYTES)
    plane = open_plane(engine, MemoryObjectStore(), config)
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    yield plane, u, w
    engine.close()


def _dump(engine: kv.Engine) -> list[tuple[bytes, bytes]]:
    rows: list[tuple[bytes, bytes]] = []
    begin = b""
    while True:

        def page(tr: kv.Transaction, b: bytes = begin) -> list[tuple[bytes, bytes]]:
            return tr.get_range(b, b"\xff", limit=500, snapshot=True).wait()

        batch = kv.run_sync(engine, page)
        rows.extend(batch)
        if len(batch) < 500:
            return rows
        begin = batch[-1][0] + b"\x00"


def _item(size: int) -> DomainEventIngress:
    return DomainEventIngress("test/Sized@1", cbor.encode(b"x" * size))


batches = st.one_of(
    st.lists(st.integers(0, 1_000), min_size=1, max_size=40),  # many small: the total
    st.lists(st.integers(95_000, 160_000), min_size=1, max_size=2),  # few near the value limit
)
Operation = Callable[[Plane, UniverseId, WorldId], object]


@st.composite
def operations(draw: st.DrawFn) -> tuple[str, Operation]:
    kind = draw(st.sampled_from(["append", "enqueue", "drain", "put"]))
    if kind == "append":
        entries = [b"e" * n for n in draw(batches)]
        return (
            f"append {len(entries)} ({sum(map(len, entries))} B)",
            lambda p, u, w: p.append_batch(u, w, p.head(u, w), entries),
        )
    if kind == "enqueue":
        batch = draw(batches)
        key_size = draw(st.sampled_from([None, 8, 100, 256]))
        keys = None
        if key_size is not None:
            # a key names its item (position and size): a key met again is a retry of the
            # same item, never a reuse for another (IdempotencyKeyReused)
            keys = [(b"%d-%d" % (i, n)).rjust(key_size, b"k") for i, n in enumerate(batch)]
        return f"enqueue {len(batch)} (keys {key_size})", lambda p, u, w: p.enqueue_batch(
            u, w, [_item(n) for n in batch], idempotency_keys=keys
        )
    if kind == "drain":
        max_items = draw(st.integers(1, 200))
        return f"drain {max_items}", lambda p, u, w: p.drain_inbox_to_journal(
            u, w, max_items=max_items, max_bytes=8 << 20
        )
    size = draw(st.one_of(st.integers(99_900, 100_100), st.integers(0, 160_000)))
    return f"put {size}", lambda p, u, w: p.put_verified(u, b"b" * size)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(operations(), min_size=1, max_size=6))
def test_what_validation_accepts_fits_and_what_it_refuses_writes_nothing(
    limited: tuple[Plane, UniverseId, WorldId], ops: list[tuple[str, Operation]]
) -> None:
    plane, u, w = limited
    for what, operation in ops:
        before = _dump(plane.engine)
        try:
            operation(plane, u, w)
            event(f"{what.split()[0]} accepted")
        except Validation:
            event(f"{what.split()[0]} refused")
            assert _dump(plane.engine) == before, f"{what}: refused, but wrote"
        except EngineError as exc:
            assert exc.code not in LIMIT_ERRORS, f"{what}: accepted, then {exc}"
            raise


@pytest.mark.parametrize("kind", ["memory", "sqlite", "fdb"])
def test_the_largest_batch_the_plane_accepts_commits_at_full_size(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """At FoundationDB's real 10,000,000-byte limit: 10,000 entries of 838 bytes (which the
    engines used to accept by counting only keys and values, and FoundationDB refused with
    2101) are refused; the largest batch of such entries the plane accepts commits."""
    engine = _engine(kind, tmp_path, request)
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    entry = b"x" * 838
    with pytest.raises(Validation, match="10,850,541 bytes"):
        plane.append_batch(u, w, 0, [entry] * 10_000)
    assert plane.append_batch(u, w, 0, [entry] * 8_294) == 1
    with pytest.raises(Validation):
        plane.append_batch(u, w, 8_294, [entry] * 8_295)
    assert plane.head(u, w) == 8_294
    engine.close()


def test_a_keyless_item_meets_the_same_limits_on_every_engine(tmp_path: Path) -> None:
    """On SQLite a keyless item stores no idempotency key, elsewhere a random one: its limits
    count that key on every engine, so the largest item accepted is the same everywhere."""
    overhead = len(encode_inbox_item(DomainEventIngress("t/E@1", cbor.encode(b""))))
    # the edge, counted with the key, falls some 20 bytes into the 40 sizes tried below
    payload = kv.MAX_VALUE_SIZE - OWN_KEY_ENVELOPE_BYTES - overhead - 20
    engines: list[kv.Engine] = [
        SqliteEngine(tmp_path / "kv.db"),
        MemoryEngine(),
        FaultyEngine(SqliteEngine(tmp_path / "faulty.db"), FaultInjector(seed=1)),
    ]
    verdicts = []
    for engine in engines:
        plane = open_plane(engine, MemoryObjectStore(), PlaneConfig(max_batch_bytes=1 << 20))
        u, w = UniverseId.new(), WorldId.new()
        plane.create_world(u, w)
        accepted = []
        for extra in range(40):  # over the edge, a byte at a time
            item = DomainEventIngress("t/E@1", cbor.encode(bytes(payload + extra)))
            try:
                plane.enqueue(u, w, item)
                accepted.append(extra)
            except Validation as exc:
                assert exc.field == "items[0]"
        verdicts.append(accepted)
        engine.close()
    assert verdicts[0] == verdicts[1] == verdicts[2]
    assert 0 < len(verdicts[0]) < 40  # the edge lies inside the range tried


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from([b"\x00", b"k" * 16, bytes(16), bytes(MAX_IDEMPOTENCY_KEY_BYTES)]),
            st.sampled_from([1, 100, 99_999, 100_000]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_quick_enqueue_bound_is_never_below_the_exact_cost(
    items: list[tuple[bytes, int]],
) -> None:
    """The plane computes an enqueue's exact cost only when this bound is over the budget:
    it must bound the longest keys, zero bytes (escaped to two) included."""
    keys = WorldKeys(UniverseId.new(), WorldId.new())
    assert budget.enqueue_bound(items) >= budget.enqueue_cost(keys, items)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_keyed_batch_at_the_documented_item_limit_is_enqueued(kind: str, tmp_path: Path) -> None:
    """``max_batch_entries`` (10,000) items, each with its idempotency key, in one
    ``enqueue_batch``: the keys' entries are read in one wave before any write, so no read
    walks the batch's versionstamped writes (that made it quadratic: 73-158 s on SQLite, a
    RetryLimitReached after 64 s on memory). Measured 0.3 s; the bound is generous."""
    engine: kv.Engine = MemoryEngine() if kind == "memory" else SqliteEngine(tmp_path / "a.db")
    plane = Plane(engine, MemoryObjectStore())
    count = plane.config.max_batch_entries
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    items = [DomainEventIngress("test/Item@1", b"\xa0")] * count
    keys = [b"key-%d" % n for n in range(count)]
    started = time.monotonic()
    seqs = plane.enqueue_batch(u, w, items, idempotency_keys=keys)
    assert time.monotonic() - started < 30.0
    assert len(set(seqs)) == count == len(plane.read_after(u, w, None, count + 1))
    assert plane.enqueue_batch(u, w, items[:3], idempotency_keys=keys[:3]) == seqs[:3]
