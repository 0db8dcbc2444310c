"""The memory engine against a real FoundationDB 7.3 cluster, step for step.

Hypothesis draws a few transactions and an interleaving of their operations (reads with
and without snapshot, range reads with limits in both directions, writes, clears, atomic
adds, versionstamped keys and values, declared conflict ranges, commits). The same program
runs on a fresh :class:`~backends.kv.memory.MemoryEngine` and on the cluster; every
operation's result or error code, every commit's outcome and the final keyspace must be the
same. Versionstamps differ in value between engines, so each is replaced by the rank of the
transaction that committed it. FoundationDB defers a write's error to the transaction's next
read or commit where the memory engine raises it at the write, so a transaction's outcome is
its reads' results up to its first error, then that error's code. A difference is a defect
of the simulator (it exists to behave as FoundationDB does, never more kindly).
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.kv.memory import MemoryEngine
from persistence import fdb_errors, kv
from persistence.errors import EngineError
from tests.fdb_cluster import FdbCluster, clear_keyspace

PREFIX = b"diff/"
NAMES = [b"a", b"b", b"c", b"d", b"e"]
STAMPED = PREFIX + b"v/"
STAMP_PLACEHOLDER = b"\x00" * 10


def key(name: bytes) -> bytes:
    return PREFIX + name


@dataclass(frozen=True)
class Op:
    tx: int
    kind: str
    args: tuple[Any, ...] = ()


names = st.sampled_from(NAMES)
ends = st.sampled_from([*NAMES, b"z"])


def op_for(tx: int) -> st.SearchStrategy[Op]:
    return st.one_of(
        st.builds(lambda n, s: Op(tx, "get", (n, s)), names, st.booleans()),
        st.builds(
            lambda b, e, limit, rev, s: Op(tx, "range", (b, e, limit, rev, s)),
            names,
            ends,
            st.integers(0, 3),
            st.booleans(),
            st.booleans(),
        ),
        st.builds(lambda n, v: Op(tx, "set", (n, v)), names, st.binary(max_size=3)),
        st.builds(lambda n: Op(tx, "clear", (n,)), names),
        st.builds(lambda b, e: Op(tx, "clear_range", (b, e)), names, ends),
        st.builds(
            lambda n, p: Op(tx, "add", (n, p)),
            st.sampled_from(NAMES[:3]),
            st.sampled_from([b"\x01", b"\x02\x00"]),
        ),
        st.builds(lambda v: Op(tx, "vs_key", (v,)), st.binary(max_size=2)),
        # not on "a" to "c": an add over a stamped value changes the stamp's bytes, which
        # the comparison could not map (test_engine_contract checks that case)
        st.builds(lambda n: Op(tx, "vs_value", (n,)), st.sampled_from([b"d", b"e"])),
        st.builds(lambda b, e: Op(tx, "conflict", (b, e)), names, ends),
        st.just(Op(tx, "stamped_range")),
    )


@st.composite
def programs(draw: st.DrawFn) -> tuple[dict[bytes, bytes], list[Op]]:
    initial = draw(st.dictionaries(names, st.binary(min_size=1, max_size=2), max_size=4))
    count = draw(st.integers(2, 3))
    steps: list[Op] = []
    for tx in range(count):
        ops = draw(st.lists(op_for(tx), min_size=1, max_size=5))
        steps.extend([*ops, Op(tx, "commit")])
    # an interleaving that keeps each transaction's own order
    order = draw(st.permutations(range(len(steps))))
    by_tx: dict[int, list[Op]] = {}
    for step in steps:
        by_tx.setdefault(step.tx, []).append(step)
    picks = [steps[i].tx for i in order]
    interleaved = [by_tx[tx].pop(0) for tx in picks]
    return {key(k): v for k, v in initial.items()}, interleaved


READS = {"get", "range", "stamped_range"}


def perform(tr: kv.Transaction, step: Op) -> Any:
    """One step's call on ``tr`` (commit excepted); its result."""
    a = step.args
    if step.kind == "get":
        return tr.get(key(a[0]), snapshot=a[1]).wait()
    if step.kind == "range":
        return tr.get_range(key(a[0]), key(a[1]), limit=a[2], reverse=a[3], snapshot=a[4]).wait()
    if step.kind == "stamped_range":
        return tr.get_range(STAMPED, STAMPED + b"\xff").wait()
    if step.kind == "set":
        return tr.set(key(a[0]), a[1])
    if step.kind == "clear":
        return tr.clear(key(a[0]))
    if step.kind == "clear_range":
        return tr.clear_range(key(a[0]), key(a[1]))
    if step.kind == "add":
        return tr.add(key(a[0]), a[1])
    if step.kind == "vs_key":
        stamped = STAMPED + STAMP_PLACEHOLDER + struct.pack("<I", len(STAMPED))
        return tr.set_versionstamped_key(stamped, a[0])
    if step.kind == "vs_value":
        return tr.set_versionstamped_value(key(a[0]), STAMP_PLACEHOLDER + struct.pack("<I", 0))
    assert step.kind == "conflict", step
    return tr.add_read_conflict_range(key(a[0]), key(a[1]))


def attempt(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except EngineError as exc:
        return ("error", exc.code)


def run_program(
    engine: kv.Engine, initial: dict[bytes, bytes], program: list[Op]
) -> tuple[list[Any], dict[bytes, bytes]]:
    """Run ``program``; return each step's outcome and the final keyspace under PREFIX,
    with versionstamps replaced by commit ranks."""

    def setup(tr: kv.Transaction) -> None:
        tr.clear_range(PREFIX, PREFIX + b"\xff")
        for k, v in initial.items():
            tr.set(k, v)

    kv.run_sync(engine, setup)
    txs: dict[int, kv.Transaction] = {}
    futures: dict[int, kv.VersionstampFuture] = {}
    outcomes: list[Any] = []
    stamps: list[bytes] = []
    failed: set[int] = set()
    for step in program:
        if step.tx in failed:
            continue  # a failed transaction is abandoned
        tr = txs.get(step.tx)
        if tr is None:
            tr = txs[step.tx] = engine.create_transaction()
            futures[step.tx] = tr.get_versionstamp()
        if step.kind == "commit":
            outcome = attempt(tr.commit().wait)
            if outcome[0] == "ok":
                stamp = attempt(futures[step.tx].wait)
                if stamp[0] == "ok":
                    stamps.append(stamp[1])
                outcome = ("committed", "stamp" if stamp[0] == "ok" else stamp)
        else:
            outcome = attempt(functools.partial(perform, tr, step))
        write = step.kind not in READS and step.kind != "commit"
        if outcome[0] == "error":
            # A read of an unreadable key (1036) fails the read and later the commit; any
            # other error ends the transaction (FoundationDB would report it from then on).
            if write or outcome[1] != fdb_errors.ACCESSED_UNREADABLE:
                failed.add(step.tx)
            outcomes.append((step.tx, outcome))
        elif not write:
            outcomes.append((step.tx, outcome))
    final = kv.run(engine, lambda tr: tr.get_range(PREFIX, PREFIX + b"\xff"))

    def normal(data: bytes) -> bytes:
        for rank, stamp in enumerate(stamps):
            data = data.replace(stamp, b"<stamp %d>" % rank)
        return data

    def normal_outcome(tx: int, outcome: Any) -> Any:
        if outcome[0] == "ok" and isinstance(outcome[1], list):
            return tx, ("ok", [(normal(k), normal(v)) for k, v in outcome[1]])
        if outcome[0] == "ok" and isinstance(outcome[1], bytes):
            return tx, ("ok", normal(outcome[1]))
        return tx, outcome

    return [normal_outcome(*o) for o in outcomes], {normal(k): normal(v) for k, v in final}


@pytest.fixture(scope="module")
def fdb_engine(fdb_cluster: FdbCluster) -> kv.Engine:
    engine = fdb_cluster.engine()
    clear_keyspace(engine)
    return engine


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("AOS_DIFF_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(programs())
def test_memory_engine_matches_foundationdb(
    fdb_engine: kv.Engine, program: tuple[dict[bytes, bytes], list[Op]]
) -> None:
    initial, steps = program
    expected = run_program(fdb_engine, initial, steps)
    actual = run_program(MemoryEngine(), initial, steps)

    def by_tx(outcomes: list[Any]) -> dict[int, list[Any]]:
        grouped: dict[int, list[Any]] = {}
        for tx, outcome in outcomes:
            grouped.setdefault(tx, []).append(outcome)
        return grouped

    assert by_tx(actual[0]) == by_tx(expected[0]), "\n".join(
        [*map(str, steps), "memory:", *map(str, actual[0]), "fdb:", *map(str, expected[0])]
    )
    assert actual[1] == expected[1]
