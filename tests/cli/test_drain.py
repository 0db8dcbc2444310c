"""``aosp drain`` through real subprocesses: one pass drains every ready world, shards split
them, ``--follow`` drains what arrives until SIGTERM or SIGINT (synchronised on its own lag
reports, never on a sleep), a world that cannot be drained fails the run, and a missing
store is not created."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import cbor, kv
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane
from persistence.protocols import inbox
from persistence.workers.drain_worker import Shard
from segments import open_plane
from tests.cli.conftest import ROOT, Store, aosp


@contextmanager
def opened(store: Store) -> Iterator[Plane]:
    """The store's plane, in this process."""
    plane = open_plane(
        SqliteEngine(store.data_dir / "aos.db", create=False),
        LocalObjectStore(store.data_dir / "objects", create=False),
    )
    try:
        yield plane
    finally:
        plane.engine.close()


def worlds_of(plane: Plane, store: Store) -> list[WorldId]:
    return list(plane.worlds(UniverseId.parse(store.universe)))


def enqueue(store: Store, items: dict[WorldId, int], first: int = 0) -> None:
    """``items[w]`` new items into each world ``w``."""
    u = UniverseId.parse(store.universe)
    with opened(store) as plane:
        for w, count in items.items():
            plane.enqueue_batch(
                u,
                w,
                [DomainEventIngress("test/Cli@1", cbor.encode(first + n)) for n in range(count)],
            )


def ready(store: Store) -> set[WorldId]:
    u = UniverseId.parse(store.universe)
    with opened(store) as plane:
        keys = UniverseKeys(u)
        worlds, _ = drive(inbox.read_ready(plane.engine, keys, *keys.ready_range()))
        return set(worlds)


def heads(store: Store) -> dict[WorldId, int]:
    u = UniverseId.parse(store.universe)
    with opened(store) as plane:
        return {w: plane.head(u, w) for w in worlds_of(plane, store)}


def test_one_pass_drains_every_ready_world(store: Store) -> None:
    with opened(store) as plane:
        worlds = worlds_of(plane, store)
    before = heads(store)
    enqueue(store, {worlds[0]: 3, worlds[2]: 1})
    assert ready(store) == {worlds[0], worlds[2]}
    result = aosp("drain", *store.args("--json", "--quantum", "2"))
    assert result.code == 0, result.err
    out = result.json()
    assert out["pass"]["ready_worlds"] == 2 and out["pass"]["items"] == 3
    assert out["lag"]["ready_since_start"] == 2 and out["lag"]["oldest_wait_at_most"] is None
    assert ready(store) == {worlds[0]}  # one item left there: quantum 2
    text = aosp("drain", *store.args())
    assert text.code == 0 and "1 ready world, 1 item in 1 transaction," in text.text, text.text
    assert ready(store) == set()
    after = heads(store)
    assert {w: after[w] - before[w] for w in worlds} == {worlds[0]: 3, worlds[1]: 0, worlds[2]: 1}
    assert aosp("fsck", *store.args("--quiet")).code == 0


def test_shards_drain_disjoint_worlds(store: Store) -> None:
    with opened(store) as plane:
        worlds = worlds_of(plane, store)
    enqueue(store, dict.fromkeys(worlds, 1))
    drained: list[set[WorldId]] = []
    for index in range(2):
        before = heads(store)
        result = aosp("drain", *store.args("--json", "--shard", f"{index}/2"))
        assert result.code == 0, result.err
        after = heads(store)
        drained.append({w for w in worlds if after[w] > before[w]})
        assert drained[-1] == {w for w in worlds if Shard(index, 2).holds(w)}
    assert drained[0] | drained[1] == set(worlds) and not drained[0] & drained[1]
    assert ready(store) == set()


class Follower:
    """``aosp drain --follow --json`` in a subprocess; its stdout read line by line."""

    def __init__(self, store: Store) -> None:
        env = {k: v for k, v in os.environ.items() if k != "AOSP_DATA_DIR"}
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aosp",
                "drain",
                *store.args("--follow", "--json", "--report-every", "0.05", "--interval", "0.01"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )

    def report(self) -> dict[str, Any]:
        """The next line it prints (the process must print it; the test's timeout bounds a
        hang)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read().decode() if self.proc.stderr else "no output"
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    def until(self, items: int) -> dict[str, Any]:
        """Reports until one says ``items`` items were drained since the start."""
        while (out := self.report())["lag"]["items"] < items:
            pass
        return out

    def stop(self, signum: int) -> tuple[int, dict[str, Any]]:
        """Send ``signum``; the exit code and the final report."""
        self.proc.send_signal(signum)
        out, _ = self.proc.communicate(timeout=60)
        final = json.loads(out.decode().strip().splitlines()[-1])
        return self.proc.returncode, final


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_follow_drains_what_arrives_until_a_signal(store: Store, signum: int) -> None:
    with opened(store) as plane:
        worlds = worlds_of(plane, store)
    follower = Follower(store)
    try:
        assert follower.report()["lag"]["items"] == 0  # it runs, and found nothing to do
        enqueue(store, {worlds[1]: 4})
        follower.until(4)
        enqueue(store, {worlds[0]: 2, worlds[2]: 3}, first=10)
        reported = follower.until(9)
        assert reported["lag"]["failures"] == []
    finally:
        code, final = follower.stop(signum)
    assert code == 0 and final["stopped"] is True and final["lag"]["items"] == 9
    assert ready(store) == set()


def test_a_world_that_cannot_be_drained_fails_the_run(store: Store) -> None:
    with opened(store) as plane:
        worlds = worlds_of(plane, store)
    enqueue(store, dict.fromkeys(worlds, 2))
    u = UniverseId.parse(store.universe)
    with opened(store) as plane:  # damage the second item of one world's inbox
        keys = WorldKeys(u, worlds[1])
        seq = plane.read_after(u, worlds[1], plane.inbox_cursor(u, worlds[1]), 2)[1][0]
        kv.run_sync(plane.engine, lambda tr: tr.set(keys.inbox_item(seq), b"\x00"))
    result = aosp("drain", *store.args("--json"))
    assert result.code == 1
    (failure,) = result.json()["lag"]["failures"]
    assert failure["world"] == str(worlds[1]) and "CorruptRecord" in failure["error"]
    assert ready(store) == {worlds[1]}  # the others drained, and its first item too
    with opened(store) as plane:
        after = keys.inbox_after(plane.inbox_cursor(u, worlds[1]))
        assert [key for key, _ in kv.run(plane.engine, lambda tr: tr.get_range(*after))] == [
            keys.inbox_item(seq)
        ]


def test_backfill_finds_items_enqueued_before_the_index(store: Store) -> None:
    with opened(store) as plane:
        worlds = worlds_of(plane, store)
    enqueue(store, {worlds[0]: 2})
    with opened(store) as plane:  # as a store written before the ready marks existed
        keys = UniverseKeys(UniverseId.parse(store.universe))
        kv.run_sync(plane.engine, lambda tr: tr.clear_range(*keys.ready_range()))
    assert aosp("drain", *store.args("--json")).json()["pass"]["items"] == 0
    result = aosp("drain", *store.args("--json", "--backfill"))
    assert result.code == 0 and "marked 1 world with pending items" in result.err
    assert result.json()["pass"]["items"] == 2 and ready(store) == set()


def test_bad_options_name_the_option(store: Store) -> None:
    shard = aosp("drain", *store.args("--shard", "2/2"))
    assert shard.code == 2 and "--shard" in shard.one_line_error()
    quantum = aosp("drain", *store.args("--quantum", "600", "--worlds-per-transaction", "20"))
    assert quantum.code == 2
    assert quantum.one_line_error().startswith("aosp: validation error: --quantum:")


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    result = aosp("drain", "--data-dir", str(tmp_path / "nowhere"))
    assert result.code == 3 and "no store" in result.err
    assert not (tmp_path / "nowhere").exists()
    kv_only = aosp(
        "drain", "--kv", f"sqlite://{tmp_path}/typo.db", "--objects", f"file://{tmp_path}/o"
    )
    assert kv_only.code == 3 and not (tmp_path / "typo.db").exists()
