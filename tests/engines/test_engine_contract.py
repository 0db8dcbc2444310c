"""The transaction interface's contract, checked identically on every engine."""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from persistence import fdb_errors, fdbtuple, kv
from persistence.errors import EngineError, RetryLimitReached, Validation
from persistence.fdbtuple import Versionstamp
from persistence.futures import drive
from persistence.kv import Engine, Transaction


def commit_all(engine: Engine, items: dict[bytes, bytes]) -> None:
    def body(tr: Transaction) -> None:
        for key, value in items.items():
            tr.set(key, value)

    kv.run_sync(engine, body)


def read(engine: Engine, fn: Callable[[Transaction], Awaitable[T]]) -> T:
    return kv.run(engine, fn)


T = TypeVar("T")

KEYS = {bytes([0x10 + i]): bytes([i]) * (i + 1) for i in range(10)}


def test_range_order_and_limits_both_directions(engine: Engine) -> None:
    commit_all(engine, KEYS)
    ordered = sorted(KEYS.items())
    assert read(engine, lambda tr: tr.get_range(b"\x00", b"\xff")) == ordered
    assert read(engine, lambda tr: tr.get_range(b"\x00", b"\xff", limit=3)) == ordered[:3]
    assert read(engine, lambda tr: tr.get_range(b"\x00", b"\xff", reverse=True)) == ordered[::-1]
    assert (
        read(engine, lambda tr: tr.get_range(b"\x00", b"\xff", limit=4, reverse=True))
        == ordered[::-1][:4]
    )
    # half-open interval
    assert read(engine, lambda tr: tr.get_range(b"\x12", b"\x15")) == ordered[2:5]
    assert read(engine, lambda tr: tr.get_range(b"\x15", b"\x12")) == []


def test_range_scan_across_many_pages(engine: Engine) -> None:
    many = {fdbtuple.pack(("k", i)): i.to_bytes(4, "big") for i in range(3000)}
    for chunk in range(0, 3000, 1000):
        commit_all(engine, dict(list(many.items())[chunk : chunk + 1000]))
    rows = read(engine, lambda tr: tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("k",)))))
    assert [int.from_bytes(v, "big") for _, v in rows] == list(range(3000))
    back = read(
        engine,
        lambda tr: tr.get_range(
            *fdbtuple.range_of(fdbtuple.pack(("k",))), reverse=True, limit=1500
        ),
    )
    assert [int.from_bytes(v, "big") for _, v in back] == list(range(2999, 1499, -1))


def test_read_your_writes(engine: Engine) -> None:
    commit_all(engine, KEYS)

    def body(tr: Transaction) -> list[object]:
        seen: list[object] = []
        tr.set(b"\x10", b"new")
        tr.clear(b"\x11")
        tr.set(b"\x30", b"added")
        tr.clear_range(b"\x13", b"\x16")
        tr.set(b"\x14", b"back")
        tr.add(b"\x19", (1).to_bytes(2, "little"))
        seen.append(tr.get(b"\x10").wait())
        seen.append(tr.get(b"\x11").wait())
        seen.append(tr.get(b"\x13").wait())
        seen.append(tr.get(b"\x14").wait())
        seen.append(tr.get(b"\x19").wait())
        seen.append(tr.get_range(b"\x00", b"\xff").wait())
        seen.append(tr.get_range(b"\x00", b"\xff", reverse=True, limit=3).wait())
        return seen

    seen = kv.run_sync(engine, body)
    base19 = int.from_bytes(KEYS[b"\x19"][:2], "little")
    expected19 = ((base19 + 1) % 65536).to_bytes(2, "little")
    assert seen[:5] == [b"new", None, None, b"back", expected19]
    expected = {**KEYS, b"\x10": b"new", b"\x30": b"added", b"\x14": b"back", b"\x19": expected19}
    for gone in (b"\x11", b"\x13", b"\x15"):
        expected.pop(gone)
    assert seen[5] == sorted(expected.items())
    assert seen[6] == sorted(expected.items(), reverse=True)[:3]
    # ... and the committed state is the same view.
    assert read(engine, lambda tr: tr.get_range(b"\x00", b"\xff")) == sorted(expected.items())


def test_atomic_add_is_little_endian_and_wraps(engine: Engine) -> None:
    def add(tr: Transaction, n: int) -> None:
        tr.add(b"counter", n.to_bytes(8, "little"))

    for n in (1, 2, 2**40):
        kv.run_sync(engine, functools.partial(add, n=n))
    assert read(engine, lambda tr: tr.get(b"counter")) == (3 + 2**40).to_bytes(8, "little")
    kv.run_sync(engine, lambda tr: tr.add(b"small", b"\xff"))
    kv.run_sync(engine, lambda tr: tr.add(b"small", b"\x02"))
    assert read(engine, lambda tr: tr.get(b"small")) == b"\x01"


def test_concurrent_atomic_adds_do_not_conflict(engine: Engine) -> None:
    a, b = engine.create_transaction(), engine.create_transaction()
    for tr in (a, b):
        tr.get_read_version().wait()
        tr.add(b"n", (1).to_bytes(8, "little"))
    a.commit().wait()
    b.commit().wait()
    assert read(engine, lambda tr: tr.get(b"n")) == (2).to_bytes(8, "little")


def test_compare_and_clear_clears_only_an_equal_value(engine: Engine) -> None:
    commit_all(engine, {b"same": b"v", b"other": b"v"})

    def body(tr: Transaction) -> None:
        tr.compare_and_clear(b"same", b"v")
        tr.compare_and_clear(b"other", b"w")
        tr.compare_and_clear(b"absent", b"v")

    kv.run_sync(engine, body)
    found = read(engine, lambda tr: tr.get_many([b"same", b"other", b"absent"]))
    assert found == [None, b"v", None]


def test_compare_and_clear_compares_at_commit_without_a_read_conflict(engine: Engine) -> None:
    """A writer that changes the key after the read version makes it keep the new value,
    and aborts nothing; unchanged, it clears."""
    commit_all(engine, {b"mark": b"1"})
    tr = engine.create_transaction()
    seen = tr.get(b"mark", snapshot=True).wait()
    assert seen == b"1"
    tr.compare_and_clear(b"mark", seen)
    kv.run_sync(engine, lambda other: other.set(b"mark", b"2"))
    tr.commit().wait()
    assert read(engine, lambda tr: tr.get(b"mark")) == b"2"
    tr = engine.create_transaction()
    tr.compare_and_clear(b"mark", b"2")
    tr.commit().wait()
    assert read(engine, lambda tr: tr.get(b"mark")) is None


def test_a_compare_and_clear_that_clears_aborts_a_reader_of_the_key(engine: Engine) -> None:
    commit_all(engine, {b"mark": b"1"})
    reader = engine.create_transaction()
    assert reader.get(b"mark").wait() == b"1"
    reader.set(b"derived", b"from 1")
    kv.run_sync(engine, lambda tr: tr.compare_and_clear(b"mark", b"1"))
    with pytest.raises(EngineError) as aborted:
        reader.commit().wait()
    assert aborted.value.code == fdb_errors.NOT_COMMITTED


def test_compare_and_clear_reads_its_own_writes(engine: Engine) -> None:
    commit_all(engine, {b"c": b"v"})
    tr = engine.create_transaction()
    tr.set(b"k", b"v")
    tr.compare_and_clear(b"k", b"v")
    tr.set(b"j", b"v")
    tr.compare_and_clear(b"j", b"w")
    tr.compare_and_clear(b"c", b"v")  # over the committed value
    assert [tr.get(k).wait() for k in (b"c", b"j", b"k")] == [None, b"v", None]
    assert tr.get_range(b"a", b"z").wait() == [(b"j", b"v")]
    tr.commit().wait()
    assert read(engine, lambda tr: tr.get_range(b"a", b"z")) == [(b"j", b"v")]


def test_versionstamps_increase_across_and_within_transactions(engine: Engine) -> None:
    stamps = []
    for i in range(5):

        def body(tr: Transaction, i: int = i) -> kv.VersionstampFuture:
            for user in (2, 0, 1):
                key = fdbtuple.pack_with_versionstamp(("q", Versionstamp(None, user)))
                tr.set_versionstamped_key(key, f"{i}.{user}".encode())
            return tr.get_versionstamp()

        stamps.append(kv.run_sync(engine, body).wait())
    assert all(len(s) == 10 for s in stamps)
    assert stamps == sorted(stamps) and len(set(stamps)) == 5
    rows = read(engine, lambda tr: tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("q",)))))
    assert [v for _, v in rows] == [f"{i}.{u}".encode() for i in range(5) for u in (0, 1, 2)]
    decoded = [fdbtuple.unpack(k)[1] for k, _ in rows]
    assert [d.tr_version for d in decoded] == [s for s in stamps for _ in range(3)]  # type: ignore[union-attr]


def test_versionstamped_value(engine: Engine) -> None:
    def body(tr: Transaction) -> kv.VersionstampFuture:
        tr.set_versionstamped_value(
            b"latest", b"pre" + b"\x00" * 10 + b"post" + (3).to_bytes(4, "little")
        )
        return tr.get_versionstamp()

    stamp = kv.run_sync(engine, body).wait()
    assert read(engine, lambda tr: tr.get(b"latest")) == b"pre" + stamp + b"post"


def test_versionstamp_of_read_only_transaction_is_an_error(engine: Engine) -> None:
    tr = engine.create_transaction()
    tr.get(b"x").wait()
    future = tr.get_versionstamp()
    tr.commit().wait()
    with pytest.raises(EngineError) as err:
        future.wait()
    assert err.value.code == fdb_errors.NO_COMMIT_VERSION


def test_read_then_write_same_key_exactly_one_commits(engine: Engine) -> None:
    commit_all(engine, {b"k": b"0"})
    a, b = engine.create_transaction(), engine.create_transaction()
    for tr, tag in ((a, b"a"), (b, b"b")):
        assert tr.get(b"k").wait() == b"0"
        tr.set(b"k", tag)
    a.commit().wait()
    with pytest.raises(EngineError) as err:
        b.commit().wait()
    assert err.value.code == fdb_errors.NOT_COMMITTED
    assert read(engine, lambda tr: tr.get(b"k")) == b"a"


def test_disjoint_writes_both_commit(engine: Engine) -> None:
    a, b = engine.create_transaction(), engine.create_transaction()
    assert a.get(b"x").wait() is None and b.get(b"y").wait() is None
    a.set(b"x", b"1")
    b.set(b"y", b"2")
    a.commit().wait()
    b.commit().wait()
    assert read(engine, lambda tr: tr.get_many([b"x", b"y"])) == [b"1", b"2"]


def test_snapshot_reads_do_not_conflict(engine: Engine) -> None:
    commit_all(engine, {b"k": b"0"})
    a, b = engine.create_transaction(), engine.create_transaction()
    assert a.get(b"k", snapshot=True).wait() == b"0"
    assert b.get_range(b"a", b"z", snapshot=True).wait() == [(b"k", b"0")]
    a.set(b"other-a", b"1")
    b.set(b"other-b", b"1")
    writer = engine.create_transaction()
    writer.set(b"k", b"changed")
    writer.commit().wait()
    a.commit().wait()
    b.commit().wait()


def test_range_read_conflicts_with_insert_inside_it(engine: Engine) -> None:
    commit_all(engine, {b"r1": b"", b"r5": b""})
    reader = engine.create_transaction()
    assert len(reader.get_range(b"r", b"s").wait()) == 2
    reader.set(b"summary", b"2")
    writer = engine.create_transaction()
    writer.set(b"r3", b"")
    writer.commit().wait()
    with pytest.raises(EngineError) as err:
        reader.commit().wait()
    assert err.value.code == fdb_errors.NOT_COMMITTED


def test_get_many_gives_what_gets_give(engine: Engine) -> None:
    commit_all(engine, {b"a": b"1", b"b": b"2", b"c": b"3"})
    tr = engine.create_transaction()
    tr.set(b"b", b"mine")
    tr.clear(b"c")
    tr.set(b"d", b"new")
    keys = [b"a", b"b", b"c", b"d", b"e", b"a"]
    assert tr.get_many(keys).wait() == [b"1", b"mine", None, b"new", None, b"1"]
    assert tr.get_many([]).wait() == []
    assert tr.get_many(keys, snapshot=True).wait() == [tr.get(k).wait() for k in keys]
    fresh = engine.create_transaction()  # nothing of its own written: the committed values
    assert fresh.get_many(keys, snapshot=True).wait() == [b"1", b"2", b"3", None, None, b"1"]


@pytest.mark.parametrize("snapshot", [False, True])
def test_get_many_conflicts_as_gets_do(engine: Engine, snapshot: bool) -> None:
    commit_all(engine, {b"a": b"1"})
    reader = engine.create_transaction()
    assert reader.get_many([b"a", b"z"], snapshot=snapshot).wait() == [b"1", None]
    reader.set(b"mine", b"")
    commit_all(engine, {b"z": b"now"})  # a key it read as absent
    if snapshot:
        reader.commit().wait()
        return
    with pytest.raises(EngineError) as err:
        reader.commit().wait()
    assert err.value.code == fdb_errors.NOT_COMMITTED


def test_get_many_of_a_stamped_value_is_unreadable(engine: Engine) -> None:
    tr = engine.create_transaction()
    tr.set_versionstamped_value(b"v", b"\x00" * 10 + (0).to_bytes(4, "little"))
    with pytest.raises(EngineError) as err:
        tr.get_many([b"a", b"v"]).wait()
    assert err.value.code == fdb_errors.ACCESSED_UNREADABLE


def test_limited_range_conflicts_only_over_what_was_read(engine: Engine) -> None:
    commit_all(engine, {b"r1": b"", b"r2": b"", b"r3": b""})
    reader = engine.create_transaction()
    assert [k for k, _ in reader.get_range(b"r", b"s", limit=2).wait()] == [b"r1", b"r2"]
    reader.set(b"summary", b"")
    writer = engine.create_transaction()
    writer.set(b"r4", b"")  # beyond the last key read
    writer.commit().wait()
    reader.commit().wait()


def test_explicit_read_conflict_range(engine: Engine) -> None:
    reader = engine.create_transaction()
    reader.get_read_version().wait()
    reader.add_read_conflict_range(b"p", b"q")
    reader.set(b"mine", b"")
    writer = engine.create_transaction()
    writer.set(b"p1", b"")
    writer.commit().wait()
    with pytest.raises(EngineError) as err:
        reader.commit().wait()
    assert err.value.code == fdb_errors.NOT_COMMITTED


def test_a_failed_commit_applies_nothing(engine: Engine) -> None:
    commit_all(engine, {b"k": b"0"})
    loser = engine.create_transaction()
    loser.get(b"k").wait()
    loser.set(b"a", b"1")
    loser.set(b"k", b"x")
    winner = engine.create_transaction()
    winner.set(b"k", b"w")
    winner.commit().wait()
    with pytest.raises(EngineError):
        loser.commit().wait()
    assert read(engine, lambda tr: tr.get_many([b"a", b"k"])) == [None, b"w"]


def test_reads_see_one_snapshot(engine: Engine) -> None:
    commit_all(engine, {b"a": b"1", b"b": b"1"})
    reader = engine.create_transaction()
    assert reader.get(b"a").wait() == b"1"
    commit_all(engine, {b"a": b"2", b"b": b"2"})
    assert reader.get(b"b").wait() == b"1"
    assert reader.get_range(b"a", b"c").wait() == [(b"a", b"1"), (b"b", b"1")]


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda tr: tr.set(b"k" * (kv.MAX_KEY_SIZE + 1), b""), fdb_errors.KEY_TOO_LARGE),
        (lambda tr: tr.set(b"k", b"v" * (kv.MAX_VALUE_SIZE + 1)), fdb_errors.VALUE_TOO_LARGE),
        (lambda tr: tr.set(b"\xffsystem", b""), fdb_errors.KEY_OUTSIDE_LEGAL_RANGE),
        (
            lambda tr: [tr.set(i.to_bytes(4, "big"), b"v" * 99_000) for i in range(102)],
            fdb_errors.TRANSACTION_TOO_LARGE,
        ),
        (
            lambda tr: tr.set_many([(b"a", b""), (b"k" * (kv.MAX_KEY_SIZE + 1), b"")]),
            fdb_errors.KEY_TOO_LARGE,
        ),
        (
            lambda tr: tr.set_many([(b"a", b""), (b"k", b"v" * (kv.MAX_VALUE_SIZE + 1))]),
            fdb_errors.VALUE_TOO_LARGE,
        ),
        (
            lambda tr: tr.set_many([(b"a", b""), (b"\xffsystem", b"")]),
            fdb_errors.KEY_OUTSIDE_LEGAL_RANGE,
        ),
        (
            lambda tr: tr.set_many((i.to_bytes(4, "big"), b"v" * 99_000) for i in range(102)),
            fdb_errors.TRANSACTION_TOO_LARGE,
        ),
    ],
    ids=["key", "value", "system-key", "transaction", *(f"set_many-{n}" for n in range(4))],
)
def test_size_limits(engine: Engine, make, code: int) -> None:  # type: ignore[no-untyped-def]
    # FoundationDB reports some limits when the write is made and others at commit.
    tr = engine.create_transaction()
    with pytest.raises(EngineError) as err:
        make(tr)
        tr.commit().wait()
    assert err.value.code == code


def test_limits_are_inclusive(engine: Engine) -> None:
    key = b"k" * kv.MAX_KEY_SIZE
    kv.run_sync(engine, lambda tr: tr.set(key, b"v" * kv.MAX_VALUE_SIZE))
    assert len(read(engine, lambda tr: tr.get(key)) or b"") == kv.MAX_VALUE_SIZE
    kv.run_sync(engine, lambda tr: tr.set_many([(key, b"w" * kv.MAX_VALUE_SIZE)]))
    assert read(engine, lambda tr: tr.get(key)) == b"w" * kv.MAX_VALUE_SIZE


@pytest.mark.parametrize("bad", ["key", "value"])
def test_set_many_refuses_what_set_refuses(engine: Engine, bad: str) -> None:
    """Pairs are written in turn: those before a refused one are in the transaction's view,
    the refused one and those after it are not."""
    pair: tuple[object, object] = ("k", b"v") if bad == "key" else (b"k", 7)
    tr = engine.create_transaction()
    with pytest.raises(Validation, match=bad):
        tr.set_many([(b"a", b"1"), pair, (b"z", b"2")])  # type: ignore[list-item]
    assert (
        tr.get(b"a").wait() == b"1" and tr.get(b"k").wait() is None and tr.get(b"z").wait() is None
    )


def test_used_after_commit(engine: Engine) -> None:
    tr = engine.create_transaction()
    tr.set(b"a", b"")
    tr.commit().wait()
    with pytest.raises(EngineError) as err:
        tr.set(b"b", b"")  # FoundationDB reports this at the next read or commit
        tr.get(b"b").wait()
    assert err.value.code == fdb_errors.USED_DURING_COMMIT


def test_retry_runner_retries_conflicts_until_commit(engine: Engine) -> None:
    commit_all(engine, {b"n": (0).to_bytes(8, "big")})
    attempts = []

    @kv.transactional
    async def increment(tr: Transaction, interfere: bool) -> int:
        n = int.from_bytes(await tr.get(b"n") or b"", "big")
        attempts.append(n)
        if interfere and len(attempts) == 1:
            commit_all(engine, {b"n": (100).to_bytes(8, "big")})  # a concurrent writer
        tr.set(b"n", (n + 1).to_bytes(8, "big"))
        return n + 1

    assert drive(increment(engine, True)) == 101
    assert attempts == [0, 100]


def test_after_commit_runs_only_what_the_committed_attempt_registered(engine: Engine) -> None:
    commit_all(engine, {b"n": (0).to_bytes(8, "big")})
    ran: list[int] = []

    @kv.transactional
    async def increment(tr: Transaction, attempt: list[int]) -> None:
        attempt[0] += 1
        n = int.from_bytes(await tr.get(b"n") or b"", "big")
        tr.after_commit(functools.partial(ran.append, attempt[0]))
        if attempt[0] == 1:
            commit_all(engine, {b"n": (100).to_bytes(8, "big")})  # a concurrent writer
        tr.set(b"n", (n + 1).to_bytes(8, "big"))

    drive(increment(engine, [0]))
    # the first attempt failed on the conflict: its hook was dropped (on FoundationDB its
    # transaction is reset for the retry; the memory and SQLite engines make a new one)
    assert ran == [2]

    @kv.transactional
    async def refused(tr: Transaction) -> None:
        tr.after_commit(functools.partial(ran.append, 3))
        tr.set(b"n", b"")
        raise RuntimeError("abort before commit")

    with pytest.raises(RuntimeError):
        drive(refused(engine))
    assert ran == [2]


def test_an_after_commit_hook_that_raises_is_logged_and_changes_nothing(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    attempts: list[int] = []

    def fails() -> None:
        raise fdb_errors.engine_error(fdb_errors.NOT_COMMITTED, "a hook's own error")

    @kv.transactional
    async def put(tr: Transaction) -> None:
        attempts.append(1)
        tr.after_commit(fails)
        tr.after_commit(functools.partial(ran.append, "second"))
        tr.set(b"hooked", b"1")

    drive(put(engine))  # committed: reported so, not run again
    assert attempts == [1] and ran == ["second"]
    assert read(engine, lambda tr: tr.get(b"hooked")) == b"1"
    assert "after_commit hook failed" in caplog.text


def test_retry_runner_composes_inside_a_transaction(engine: Engine) -> None:
    @kv.transactional
    async def put(tr: Transaction, key: bytes) -> None:
        tr.set(key, b"1")

    @kv.transactional
    async def both(tr: Transaction) -> None:
        await put(tr, b"x")
        await put(tr, b"y")
        raise RuntimeError("abort before commit")

    with pytest.raises(RuntimeError):
        drive(both(engine))
    assert read(engine, lambda tr: tr.get_many([b"x", b"y"])) == [None, None]


def test_retry_runner_gives_up_after_the_limit(engine: Engine) -> None:
    calls = []

    def always_conflicts(tr: Transaction) -> None:
        calls.append(1)
        raise fdb_errors.engine_error(fdb_errors.NOT_COMMITTED, "test")

    with pytest.raises(RetryLimitReached) as err:
        kv.run_sync(engine, always_conflicts, retry_limit=3)
    assert err.value.retries == 3
    assert err.value.last.code == fdb_errors.NOT_COMMITTED
    assert len(calls) == 4


def test_retry_runner_does_not_retry_permanent_errors(engine: Engine) -> None:
    calls = []

    def too_big(tr: Transaction) -> None:
        calls.append(1)
        tr.set(b"k" * 20_000, b"")

    with pytest.raises(EngineError) as err:
        kv.run_sync(engine, too_big)
    assert err.value.code == fdb_errors.KEY_TOO_LARGE and len(calls) == 1


def test_threads_increment_without_lost_updates(engine: Engine) -> None:
    @kv.transactional
    async def increment(tr: Transaction) -> None:
        n = int.from_bytes(await tr.get(b"c") or b"\x00", "big")
        tr.set(b"c", (n + 1).to_bytes(4, "big"))

    def worker() -> None:
        for _ in range(25):
            drive(increment(engine))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert read(engine, lambda tr: tr.get(b"c")) == (100).to_bytes(4, "big")


# ----------------------------------------------------------------- found by the differential
# Each of these was a difference between the memory engine and FoundationDB 7.3 found by
# tests/engines/test_fdb_differential.py; pinned here on every engine.

STAMP_VALUE = b"\x00" * 10 + (0).to_bytes(4, "little")


def _stamped_key(prefix: bytes) -> bytes:
    return prefix + b"\x00" * 10 + len(prefix).to_bytes(4, "little")


def test_a_read_only_commit_is_not_conflict_checked(engine: Engine) -> None:
    reader = engine.create_transaction()
    assert reader.get(b"k").wait() is None
    commit_all(engine, {b"k": b"moved"})
    future = reader.get_versionstamp()
    reader.commit().wait()  # FoundationDB returns at once: nothing to apply, nothing validated
    with pytest.raises(EngineError) as err:
        future.wait()
    assert err.value.code == fdb_errors.NO_COMMIT_VERSION


def test_inverted_ranges_are_errors(engine: Engine) -> None:
    for declare in (
        lambda tr: tr.clear_range(b"b", b"a"),
        lambda tr: tr.add_read_conflict_range(b"b", b"a"),
    ):
        with pytest.raises(EngineError) as err:
            kv.run_sync(engine, declare)
        assert err.value.code == fdb_errors.INVERTED_RANGE


def test_a_later_clear_overrides_a_versionstamped_value(engine: Engine) -> None:
    def body(tr: Transaction) -> None:
        tr.set_versionstamped_value(b"k", STAMP_VALUE)
        tr.clear(b"k")

    kv.run_sync(engine, body)
    assert read(engine, lambda tr: tr.get(b"k")) is None


def test_an_add_after_a_versionstamped_value_applies_over_the_stamp(engine: Engine) -> None:
    def body(tr: Transaction) -> kv.VersionstampFuture:
        tr.set_versionstamped_value(b"k", STAMP_VALUE)
        tr.add(b"k", b"\x01")
        return tr.get_versionstamp()

    stamp = kv.run_sync(engine, body).wait()
    # an add's result is as wide as its parameter: the stamp's first byte, plus one
    assert read(engine, lambda tr: tr.get(b"k")) == bytes([(stamp[0] + 1) % 256])


def test_versionstamped_values_are_unreadable_until_cleared(engine: Engine) -> None:
    tr = engine.create_transaction()
    tr.set_versionstamped_value(b"k", STAMP_VALUE)
    tr.set(b"k", b"plain")  # still unreadable: the key was stamped in this transaction
    for attempt in (lambda: tr.get(b"k").wait(), lambda: tr.get_range(b"a", b"z").wait()):
        with pytest.raises(EngineError) as err:
            attempt()
        assert err.value.code == fdb_errors.ACCESSED_UNREADABLE
    tr.clear(b"k")
    assert tr.get(b"k").wait() is None
    tr.set(b"k", b"v")
    assert tr.get(b"k").wait() == b"v"


def test_keys_a_versionstamped_key_could_become_are_unreadable(engine: Engine) -> None:
    tr = engine.create_transaction()
    tr.set_versionstamped_key(_stamped_key(b"q/"), b"item")
    assert tr.get_range(b"a", b"q/").wait() == []  # before the possible keys: readable
    with pytest.raises(EngineError) as err:
        tr.get_range(b"q/", b"q0").wait()
    assert err.value.code == fdb_errors.ACCESSED_UNREADABLE
    tr.clear_range(b"q/", b"q0")  # a later clear makes the range known, and drops the key
    assert tr.get_range(b"q/", b"q0").wait() == []
    with pytest.raises(EngineError) as err:
        tr.commit().wait()  # but the failed read poisoned the transaction
    assert err.value.code == fdb_errors.ACCESSED_UNREADABLE

    fresh = engine.create_transaction()
    fresh.set_versionstamped_key(_stamped_key(b"q/"), b"item")
    fresh.clear_range(b"q/", b"q0")
    assert fresh.get_range(b"q/", b"q0").wait() == []
    fresh.commit().wait()
    assert read(engine, lambda t: t.get_range(b"q/", b"q0")) == []


def test_a_stamped_keys_possible_range_starts_at_the_read_version_it_was_issued_with(
    engine: Engine,
) -> None:
    """The keys a versionstamped key could become start at the key stamped with the read
    version the transaction had cached when the write was issued (stamp 0 if none): a key
    stamped below that version stays readable; without a read version, none is."""
    setup = engine.create_transaction()  # a stamped commit: read versions of at least 1
    setup.set_versionstamped_key(_stamped_key(b"p/"), b"item")
    setup.commit().wait()
    lowest = b"q/" + b"\x00" * 10  # the stamp of version 0
    blind = engine.create_transaction()
    blind.set_versionstamped_key(_stamped_key(b"q/"), b"item")  # no read version yet
    assert blind.get_read_version().wait() >= 1  # taken after the write: the range stays as it was
    with pytest.raises(EngineError) as err:
        blind.get(lowest).wait()
    assert err.value.code == fdb_errors.ACCESSED_UNREADABLE

    tr = engine.create_transaction()
    version = tr.get_read_version().wait()
    tr.set_versionstamped_key(_stamped_key(b"q/"), b"item")
    assert tr.get(lowest).wait() is None  # below any stamp this commit can get
    assert tr.get(b"q/" + (version - 1).to_bytes(8, "big") + b"\xff\xff").wait() is None
    with pytest.raises(EngineError) as err:
        tr.get(b"q/" + version.to_bytes(8, "big") + b"\x00\x00").wait()
    assert err.value.code == fdb_errors.ACCESSED_UNREADABLE


def test_reads_of_keys_written_first_add_no_conflict(engine: Engine) -> None:
    commit_all(engine, {b"b": b"1"})
    tr = engine.create_transaction()
    tr.clear(b"a")
    tr.set(b"c", b"mine")
    assert tr.get_range(b"a", b"d").wait() == [(b"b", b"1"), (b"c", b"mine")]
    tr.add_read_conflict_range(b"c", b"c\x00")
    commit_all(engine, {b"a": b"other", b"c": b"other"})  # only keys it fixed itself
    tr.set(b"z", b"1")
    tr.commit().wait()  # no conflict: [a, d) minus a and c was not written by the other
    moved = engine.create_transaction()
    moved.clear(b"a")
    assert moved.get_range(b"a", b"d").wait() == [(b"b", b"1"), (b"c", b"mine")]
    commit_all(engine, {b"b": b"2"})  # a key it depends on
    moved.set(b"z", b"2")
    with pytest.raises(EngineError) as err:
        moved.commit().wait()
    assert err.value.code == fdb_errors.NOT_COMMITTED


def test_an_empty_conflict_range_conflicts_with_nothing(engine: Engine) -> None:
    tr = engine.create_transaction()
    assert tr.get(b"c").wait() is None
    tr.add_read_conflict_range(b"b", b"b")
    commit_all(engine, {b"a": b"1", b"b": b"1", b"b\x00": b"1"})
    tr.set(b"z", b"1")
    tr.commit().wait()


def test_wait_changed_returns_on_a_commit_and_at_its_timeout(engine: Engine) -> None:
    key = b"watched"
    engine.wait_changed(key, b"not the value", 60.0)  # differs already: returns at once
    engine.wait_changed(key, None, 0.05)  # unchanged: returns at the timeout
    commit_all(engine, {key: b"v1"})
    waiter = threading.Thread(target=engine.wait_changed, args=(key, b"v1", 60.0))
    waiter.start()
    commit_all(engine, {b"other key": b"x"})
    commit_all(engine, {key: b"v2"})
    waiter.join(timeout=30.0)
    assert not waiter.is_alive()  # woken by the change, not by the 60 s timeout
