"""``aosp segments plan|export|list|verify`` and ``aosp restore verify`` through a real
subprocess, on a store with history below its baseline that is not exported yet."""

from __future__ import annotations

import os
import re
import time

import pytest

from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from segments.restore import REPLAY_CHECK_COLUMNS
from tests.cli.conftest import Store, aosp
from tests.cli.test_commands import open_store
from tests.cli.test_fsck import flip_byte, ids
from tests.segments.workload import snapshot_now


def grow(plane: Plane, universe: UniverseId, world: WorldId, entries: int) -> int:
    """Append ``entries`` entries and promote a baseline at the new head; return it."""
    head = plane.head(universe, world)
    plane.append_batch(universe, world, head, [os.urandom(100) for _ in range(entries)])
    snapshot_now(plane, universe, world, promote=True)
    return plane.active_baseline(universe, world).height


@pytest.fixture
def grown(store: Store) -> tuple[Store, int]:
    plane = open_store(store)
    u, w = ids(store)
    cold_through = plane.list_segments(u, w)[-1].end
    new_baseline = grow(plane, u, w, 50)
    plane.engine.close()
    assert new_baseline > cold_through
    return store, new_baseline


def test_plan_export_list_verify(grown: tuple[Store, int]) -> None:
    store, baseline = grown
    plan = aosp("segments", "plan", *store.world_args("--json")).json()
    assert len(plan) == 1 and plan[0]["next_start"] == plan[0]["cold_through"] + 1
    assert plan[0]["next_end_at_most"] == baseline - 1  # the baseline entry stays hot
    assert aosp("segments", "list", *store.world_args("--json")).json()[-1]["end"] < baseline

    exported = aosp("segments", "export", *store.world_args("--target-entries", "20", "--json"))
    assert exported.code == 0, exported.err
    segments = exported.json()["segments"]
    assert segments[0]["start"] == plan[0]["next_start"] and segments[-1]["end"] == baseline - 1
    assert all(s["end"] - s["start"] < 20 for s in segments) and len(segments) >= 3
    listed = aosp("segments", "list", *store.world_args("--json")).json()
    assert [(s["start"], s["end"]) for s in listed][-len(segments) :] == [
        (s["start"], s["end"]) for s in segments
    ]
    again = aosp("segments", "plan", *store.world_args("--json")).json()
    assert again[0]["next_start"] is None  # nothing left below the baseline
    verified = aosp("segments", "verify", *store.args("--json", "--quiet"))
    assert verified.code == 0 and verified.json()["failed"] == []
    assert verified.json()["segments"] == len(
        aosp("segments", "list", *store.args("--json")).json()
    )
    restored = aosp("restore", "verify", *store.args("--json", "--quiet")).json()
    assert restored["summary"] == {"worlds": 3, "equal": 3, "differ": 0}


@pytest.mark.slow
def test_restore_verify_and_spark_replay_check_share_one_schema(grown: tuple[Store, int]) -> None:
    """``restore verify --json`` and ``spark replay-check --json`` print the same document:
    ``ok``, ``reason``, a summary and one row per world whose keys are
    ``REPLAY_CHECK_COLUMNS``, and on the same store the same rows (one Spark run, about
    10 s)."""
    pytest.importorskip("pyspark")
    store, _ = grown
    assert aosp("segments", "export", *store.args("--quiet")).code == 0  # restore reads cold
    restored = aosp("restore", "verify", *store.args("--json", "--quiet"))
    replayed = aosp(
        "spark", "replay-check", *store.args("--master", "local[1]", "--json", "--quiet")
    )
    assert restored.code == 0 and replayed.code == 0, (restored.err, replayed.err)
    columns = {name for name, _ in REPLAY_CHECK_COLUMNS}
    reports = [restored.json(), replayed.json()]
    for report in reports:
        assert set(report) == {"ok", "reason", "summary", "worlds"} and report["ok"] is True
        assert report["reason"] is None and len(report["worlds"]) == 3
        assert all(set(row) == columns for row in report["worlds"]), report["worlds"]
        assert any(row["baseline_height"] > 0 for row in report["worlds"])
        report["worlds"].sort(key=lambda row: (row["universe"], row["world"]))
    assert reports[0] == reports[1]


def test_export_shows_progress_and_refuses_bad_config(grown: tuple[Store, int]) -> None:
    store, _ = grown
    result = aosp("segments", "export", *store.args("--target-entries", "0"))
    assert result.code == 2 and "target_entries" in result.err.lower().replace("-", "_")
    ok = aosp("segments", "export", *store.args())
    assert ok.code == 0 and "export [" in ok.err and re.search(r"\n\d+ segments? \(", ok.text)


def test_verify_names_a_damaged_segment(store: Store) -> None:
    plane = open_store(store)
    u, w = ids(store)
    key = plane.list_segments(u, w)[0].object_key
    flip_byte(store.data_dir / "objects" / key, 60)
    result = aosp("segments", "verify", *store.args("--quiet"))
    assert result.code == 1 and f"FAIL {key}" in result.text and "2/3 segments" in result.text
    report = aosp("segments", "verify", *store.args("--quiet", "--json")).json()
    assert report["ok"] is False and report["reason"] == (
        f"1 of {report['segments']} segments failed verification (see failed)"
    )


def test_restore_verify_flags_an_inconsistent_baseline(store: Store) -> None:
    plane = open_store(store)
    u, w = ids(store)
    head = plane.head(u, w)
    plane.append_batch(u, w, head, [b"one more"])
    plane.snapshot_commit(
        u,
        w,
        b"\xa0",
        height=head + 1,
        logical_time_ns=time.time_ns(),
        receipt_horizon_height=head + 1,
        promote_baseline=True,
    )  # a baseline whose state is not the replay of its journal
    result = aosp("restore", "verify", *store.args("--json", "--quiet"))
    assert result.code == 1
    rows = {r["world"]: r for r in result.json()["worlds"]}
    assert rows[store.world]["equal"] is False
    assert result.json()["ok"] is False and result.json()["reason"] == (
        "1 of 3 worlds: restore differs from full replay, or failed (see worlds)"
    )
    assert [r["equal"] for k, r in rows.items() if k != store.world] == [True, True]


def test_restore_verify_with_a_bad_kernel_path(store: Store) -> None:
    result = aosp("restore", "verify", *store.args("--kernel", "no.such:Kernel"))
    assert result.code == 2 and "kernel: cannot load" in result.one_line_error()
