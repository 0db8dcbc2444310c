"""The source in S3 mode (moto server on loopback), and the replay-check and analytics
jobs, in-process and through ``aosp spark``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from persistence.ids import WorldId
from spark_connectors.jobs import Store, analytics, replay_check
from tests.cli.conftest import aosp
from tests.objects.servers import REGION, S3Server
from tests.segments.workload import snapshot_now
from tests.spark.conftest import SegmentStore, build_store


def test_s3_mode_reads_what_the_local_store_holds(
    spark: Any, store: SegmentStore, moto_s3: S3Server
) -> None:
    bucket = moto_s3.create_bucket()
    client = moto_s3.client()
    root = store.root / "objects"
    for path in (root / "segments").rglob("*.log"):
        client.put_object(
            Bucket=bucket, Key=f"plane/{path.relative_to(root)}", Body=path.read_bytes()
        )
    url = f"s3://{bucket}/plane?endpoint_url={moto_s3.endpoint_url}&region={REGION}"
    df = (
        spark.read.format("aos_segments")
        .option("objects", url)
        .option("aws_access_key_id", moto_s3.access_key)
        .option("aws_secret_access_key", moto_s3.secret_key)
        .load()  # listing: objects (no kv given)
    )
    rows = {(r.world, r.height, bytes(r.entry)) for r in df.collect()}
    assert rows == store.expected_rows()
    world = str(store.worlds[3])
    pruned = (
        spark.read.format("aos_segments")
        .options(objects=url, aws_access_key_id=moto_s3.access_key)
        .option("aws_secret_access_key", moto_s3.secret_key)
        .option("partition_bytes", "1")
        .option("world", world)
        .load()
    )
    assert pruned.rdd.getNumPartitions() == len(
        store.plane.list_segments(store.universe, store.worlds[3])
    )
    assert {(r.world, r.height, bytes(r.entry)) for r in pruned.collect()} == {
        row for row in rows if row[0] == world
    }


def break_baseline(store: SegmentStore, world: WorldId) -> None:
    """Promote a baseline whose state is not the replay of the journal below it."""
    plane, u = store.plane, store.universe
    head = plane.head(u, world)
    plane.append_batch(u, world, head, [b"one more"])
    plane.snapshot_commit(
        u, world, b"\xa1\x61x\x01", height=head + 1, logical_time_ns=time.time_ns(),
        receipt_horizon_height=head + 1, promote_baseline=True,
    )  # fmt: skip


def test_replay_check_flags_only_the_inconsistent_world(spark: Any, tmp_path: Path) -> None:
    store = build_store(tmp_path / "store", seed=5, worlds=4)
    broken = store.worlds[2]
    break_baseline(store, broken)
    rows = {r.world: r for r in replay_check(spark, Store(store.kv, store.objects)).collect()}
    assert set(rows) == {str(w) for w in store.worlds}
    assert [w for w, r in rows.items() if not r.equal] == [str(broken)]
    ok = rows[str(store.worlds[0])]
    assert ok.full_state_sha256 == ok.restored_state_sha256 and ok.error is None
    assert ok.head == store.plane.head(store.universe, store.worlds[0])
    assert ok.entries_replayed == ok.head and ok.baseline_height > 0
    only = replay_check(
        spark, Store(store.kv, store.objects), worlds=[str(store.worlds[0])]
    ).collect()
    assert [r.world for r in only] == [str(store.worlds[0])]


def test_analytics_counts_kinds_bytes_and_segments(spark: Any, store: SegmentStore) -> None:
    by_kind, segments = analytics(spark, Store(store.kv, store.objects))
    expected: dict[tuple[str, str], list[int]] = {}
    from persistence.kernel import entry_kind

    for w, h, entry in store.expected_rows():
        kind = entry_kind(entry) if entry[:1] and 0xA0 <= entry[0] <= 0xBF else "opaque"
        agg = expected.setdefault((w, kind), [0, 0, h, h])
        agg[0] += 1
        agg[1] += len(entry)
        agg[2], agg[3] = min(agg[2], h), max(agg[3], h)
    got = {
        (r.world, r.kind): [r.entries, r.bytes, r.min_height, r.max_height]
        for r in by_kind.collect()
    }
    assert got == expected
    per_world = {r.world: r for r in segments.collect()}
    for world in store.worlds:
        records = store.plane.list_segments(store.universe, world)
        row = per_world[str(world)]
        assert row.segments == len(records) and row.cold_through == records[-1].end
        assert row.segment_bytes == sum(s.byte_size for s in records)


def test_cli_replay_check_and_analytics(tmp_path: Path) -> None:
    store = build_store(tmp_path / "store", seed=9, worlds=3)
    break_baseline(store, store.worlds[1])
    store.plane.engine.close()
    data = ["--data-dir", str(store.root), "--master", "local[1]", "--quiet"]
    check = aosp("spark", "replay-check", *data, "--json")
    assert check.code == 1, check.err
    report = check.json()
    assert report["summary"] == {"worlds": 3, "equal": 2, "differ": 1}
    assert [r["world"] for r in report["worlds"] if not r["equal"]] == [str(store.worlds[1])]
    one = aosp(
        "spark", "replay-check", *data, "-u", str(store.universe), "-w", str(store.worlds[0])
    )
    assert one.code == 0 and "1/1 world" in one.text
    out = tmp_path / "analytics"
    stats = aosp("spark", "analytics", *data, "--output", str(out), "--json")
    assert stats.code == 0, stats.err
    result = json.loads(stats.out)
    assert {r["world"] for r in result["segments"]} == {str(w) for w in store.worlds}
    assert (out / "by_kind").is_dir() and any((out / "by_kind").glob("*.parquet"))


def test_cli_replay_follow_checks_each_new_baseline_once(tmp_path: Path) -> None:
    """``--once`` checks the baselines there are (a world whose history cannot be read is
    checked, and differs); run again from the checkpoint it checks only the worlds that
    journaled a baseline since, and flags the one that differs."""
    store = build_store(tmp_path / "store", seed=3, worlds=3)
    damaged = store.plane.list_segments(store.universe, store.worlds[0])[0].object_key
    path = store.root / "objects" / damaged
    data_bytes = bytearray(path.read_bytes())
    data_bytes[len(data_bytes) // 2] ^= 0x10
    path.chmod(0o644)
    path.write_bytes(bytes(data_bytes))
    data = ["--data-dir", str(store.root), "--master", "local[1]", "--quiet"]
    follow = [
        "spark", "replay-follow", *data, "--checkpoint", str(tmp_path / "checkpoint"),
        "--output", str(tmp_path / "checks"), "--once", "--json",
    ]  # fmt: skip
    first = aosp(*follow)  # the damaged segment is an error row: its world is checked
    assert first.code == 1, first.err
    assert first.json()["summary"] == {"worlds": 3, "equal": 2, "differ": 1}
    (bad,) = [r for r in first.json()["checks"] if not r["equal"]]
    assert bad["world"] == str(store.worlds[0]) and damaged.split("/")[-1] in bad["error"]
    quiet = aosp(*follow)  # nothing new: nothing checked, nothing written
    assert quiet.code == 0 and quiet.json()["summary"]["worlds"] == 0, quiet.err
    break_baseline(store, store.worlds[1])
    u, w = store.universe, store.worlds[2]
    snapshot_now(store.plane, u, w, promote=True)
    store.plane.engine.close()
    second = aosp(*follow)
    assert second.code == 1, second.err
    checks = second.json()["checks"]
    assert sorted(r["world"] for r in checks) == sorted([str(store.worlds[1]), str(w)])
    assert [r["world"] for r in checks if not r["equal"]] == [str(store.worlds[1])]
    batches = sorted(p.name for p in (tmp_path / "checks").iterdir())
    assert len(batches) == 2 and all(b.startswith("batch=") for b in batches)


def test_cli_spark_on_a_missing_store(tmp_path: Path) -> None:
    result = aosp("spark", "replay-check", "--data-dir", str(tmp_path / "none"))
    assert result.code == 3 and "no store" in result.err


def test_the_scan_benchmark_checks_and_reports_both_readers(tmp_path: Path) -> None:
    """``aosp bench spark``'s suite at a tiny size, in its own process (it owns its sessions)."""
    import subprocess
    import sys

    from aos_bench.spark import LOCAL_1_ROUNDS, ROUNDS
    from tests.cli.conftest import ROOT

    code = (
        "import json; from aos_bench import spark; "
        "print(json.dumps([f.to_json() for f in spark.run(entries=16_000)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pruned, full, single, *scaling = json.loads(done.stdout.strip().splitlines()[-1])
    assert pruned["target"] == 0.8 and full["target"] is None and single["target"] is None
    assert "(height, entry)" in pruned["name"] and "every column" in full["name"]
    assert "local[1]" in single["name"] and len(scaling) == 2
    for figure, rounds in ((pruned, ROUNDS), (full, ROUNDS), (single, LOCAL_1_ROUNDS)):
        assert figure["unit"] == "rows/s" and "16,000 entries" in figure["name"]
        assert len(figure["round_ratios"]) == rounds
        assert figure["ratio_min"] <= figure["ratio"] <= figure["ratio_max"]
    for figure in (pruned, full, single, *scaling):
        assert figure["value"] > 0 and figure["baseline_value"] > 0


def test_the_journal_benchmark_checks_and_reports_its_figures() -> None:
    """``aosp bench spark-journal`` at a tiny size, in its own process: its three figures
    with targets, and the four floors beside them (no target)."""
    import subprocess
    import sys

    from aos_bench.spark_journal import ROUNDS
    from tests.cli.conftest import ROOT

    code = (
        "import json; from aos_bench import spark_journal; print(json.dumps("
        "[f.to_json() for f in spark_journal.run(entries=16_000, latency_seconds=3)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    batch, stream, sqlite, against_floor, prebuilt, prebuilt_stream, latency = figures
    assert (batch["target"], stream["target"], latency["target"]) == (0.8, 0.7, 1.0)
    floors = (sqlite, against_floor, prebuilt, prebuilt_stream)
    assert [f["target"] for f in floors] == [None] * 4
    assert "sqlite3 alone" in sqlite["name"] and "prebuilt" in prebuilt["name"]
    assert "stream" in prebuilt_stream["name"] and "floor" in against_floor["baseline"]
    for figure in (batch, stream, *floors):
        assert figure["unit"] == "rows/s"
        assert len(figure["round_ratios"]) == ROUNDS and figure["value"] > 0
        assert figure["ratio_min"] <= figure["ratio"] <= figure["ratio_max"]
    assert "16,000" in batch["name"] and "16,000" in stream["name"]
    assert batch["baseline_value"] == sqlite["baseline_value"] == prebuilt["baseline_value"]
    assert latency["unit"] == "s" and latency["value"] > 0 and latency["baseline_value"] == 3.0
