"""``aosp spark replay-check|replay-follow|analytics``: the Spark jobs of
``spark_connectors``, on a local SparkSession by default or on any ``--master``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Final

from aosp.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    UsageError,
    command_group,
    positive_seconds,
    print_json,
    print_table,
)
from aosp.cli.segments import (
    NOTHING_VERIFIED,
    kernel_option,
    replay_fraction,
    replay_passed,
    replay_summary,
    replay_verdict,
)
from aosp.cli.store import open_store, selected_worlds, store_urls, world_options
from persistence.errors import Backend, MissingDependency, NotFound


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf takes KEY=VALUE, not {pair!r}")
        conf[key.strip()] = value
    return conf


def _session(args: argparse.Namespace, progress: Progress) -> Any:
    from spark_connectors.session import spark_session

    conf = {"spark.ui.showConsoleProgress": "false", **_conf(args.conf)}
    progress.message(f"starting Spark ({args.master or 'local[*]'})")
    try:
        spark = spark_session(args.master, "aosp", py_files=args.py_files, **conf)
    except (MissingDependency, NotFound):
        raise  # pyspark not installed, a --py-files path: not the master's doing
    except Backend as exc:  # the master (checked before the JVM starts), or Spark's start
        raise Backend(f"--master {args.master or 'local[*]'}: {exc}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _store(args: argparse.Namespace) -> tuple[Any, bool]:
    """The store the jobs read, checked to exist before Spark starts (the executors open
    it by URL and must not be the ones to find it missing, or to create it), and whether
    it has a world to read. A ``--universe`` or ``--world`` that names none is
    ``NotFound`` here, before Spark starts."""
    from spark_connectors.jobs import Store

    plane = open_store(args)
    try:
        if args.universe is not None:
            any_world = bool(selected_worlds(plane, args))
        else:
            any_world = any(True for u in plane.universes() for _ in plane.worlds(u))
    finally:
        plane.engine.close()
    return Store(*store_urls(args)), any_world


def _selection(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "universes": None if args.universe is None else [str(args.universe)],
        "worlds": None if args.world is None else [str(args.world)],
    }


def cmd_replay_check(args: argparse.Namespace) -> int:
    """Restore versus full replay for every selected world, in Spark tasks."""
    from spark_connectors.jobs import replay_check

    store, any_world = _store(args)  # (a bad --kernel was refused before the command ran)
    progress = Progress("replay-check", enabled=not args.quiet)
    rows: list[dict[str, Any]] = []
    if any_world:  # no world: nothing to check, and no Spark started to check it
        spark = _session(args, progress)
        try:
            progress.message("checking worlds")
            rows = [
                r.asDict()
                for r in replay_check(spark, store, kernel=args.kernel, **_selection(args))
                .orderBy("universe", "world")
                .collect()
            ]
        finally:
            spark.stop()
    summary = replay_summary(rows)
    if args.json:
        print_json({**replay_verdict(summary), "summary": summary, "worlds": rows})
    else:
        table = [
            {**r, "full": (r["full_state_sha256"] or "")[:16],
             "restored": (r["restored_state_sha256"] or "")[:16]}
            for r in rows
        ]  # fmt: skip
        print_table(table, ["world", "head", "baseline_height", "entries_replayed", "full",
                            "restored", "equal", "error"])  # fmt: skip
        print(
            f"{replay_fraction(summary)}: restore equals full replay" if rows else NOTHING_VERIFIED
        )
    return EXIT_OK if replay_passed(summary) else EXIT_CHECK_FAILED


TRIGGER_SECONDS: Final = 1.0
"""``replay-follow --trigger-seconds``: seconds between two micro-batches."""


def cmd_replay_follow(args: argparse.Namespace) -> int:
    """The replay check, continuous: each world checked when it journals a new baseline."""
    if args.once and args.trigger_seconds is not None:
        raise UsageError(
            "--trigger-seconds paces a continuous run's micro-batches; --once checks the "
            "baselines there are and stops: not both"
        )
    from spark_connectors.jobs import follow_replay_check

    store, _ = _store(args)
    progress = Progress("replay-follow", enabled=not args.quiet)
    spark = _session(args, progress)
    rows: list[dict[str, Any]] = []  # kept for --json only: a continuous run keeps counts
    totals = {"worlds": 0, "equal": 0, "differ": 0}

    def report(batch_id: int, batch: list[dict[str, Any]]) -> None:
        for key, count in replay_summary(batch).items():
            totals[key] += count
        if args.json:
            rows.extend(batch)
        else:
            summary = replay_summary(batch)
            print(f"batch {batch_id}: {replay_fraction(summary)}: restore equals full replay",
                  flush=True)  # fmt: skip
            for row in batch:
                if not row["equal"]:
                    print(f"  differs: {row['universe']}/{row['world']}: {row['error'] or ''}",
                          flush=True)  # fmt: skip

    try:
        query = follow_replay_check(
            spark, store, output=args.output, checkpoint=args.checkpoint, kernel=args.kernel,
            once=args.once, trigger_seconds=args.trigger_seconds or TRIGGER_SECONDS,
            on_batch=report,
            **_selection(args),
        )  # fmt: skip
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    finally:
        spark.stop()
    if args.json:
        print_json({"summary": totals, "output": args.output, "checks": rows})
    elif not totals["worlds"]:
        print("no new baseline: nothing checked")
    return EXIT_CHECK_FAILED if totals["differ"] else EXIT_OK


def cmd_analytics(args: argparse.Namespace) -> int:
    """Per world and record kind: counts, bytes, heights, segments; written as Parquet."""
    from spark_connectors.jobs import analytics

    store, _ = _store(args)
    progress = Progress("analytics", enabled=not args.quiet)
    spark = _session(args, progress)
    options = {"listing": args.listing, "on_corrupt": args.on_corrupt}
    if args.universe is not None:
        options["universe"] = str(args.universe)
    if args.world is not None:
        options["world"] = str(args.world)
    try:
        by_kind, segments = analytics(spark, store, **options)
        output = Path(args.output)
        by_kind.write.mode("overwrite").parquet(str(output / "by_kind"))
        segments.write.mode("overwrite").parquet(str(output / "segments"))
        kinds = [r.asDict() for r in spark.read.parquet(str(output / "by_kind")).collect()]
        worlds = [r.asDict() for r in spark.read.parquet(str(output / "segments")).collect()]
    finally:
        spark.stop()
    kinds.sort(key=lambda r: (r["universe"], r["world"], r["kind"]))
    worlds.sort(key=lambda r: (r["universe"], r["world"]))
    if args.json:
        print_json({"output": str(output), "by_kind": kinds, "segments": worlds})
    else:
        print_table(kinds, ["world", "kind", "entries", "bytes", "min_height", "max_height",
                            "segments"])  # fmt: skip
        print()
        print_table(worlds, ["world", "segments", "segment_bytes", "smallest_segment",
                             "largest_segment", "cold_through"])  # fmt: skip
        print(f"written: {output / 'by_kind'}, {output / 'segments'} (Parquet)")
    return EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``spark replay-check`` and ``spark analytics``."""
    spark_options = argparse.ArgumentParser(add_help=False)
    group = spark_options.add_argument_group("spark")
    group.add_argument("--master", help="Spark master URL (default: local[*])")
    group.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.pyspark.python=/opt/venv/bin/python (repeatable)",
    )
    group.add_argument(
        "--py-files",
        action="append",
        default=[],
        metavar="PATH",
        help="ship to the executors (e.g. the aos-persistence wheel, for a cluster whose "
        "Python does not have it; repeatable)",
    )
    filters = world_options(required=False)
    jobs = command_group(sub, "spark", "Spark jobs: replay checks and analytics", metavar="JOB")
    check = jobs.add_parser(
        "replay-check",
        parents=[common, store, filters, spark_options, kernel_option()],
        help="per world: full replay equals restore (exit 1 if any differs)",
    )
    check.set_defaults(run=cmd_replay_check)
    follow = jobs.add_parser(
        "replay-follow",
        parents=[common, store, filters, spark_options, kernel_option()],
        help="the replay check, continuous: each world checked when it journals a new "
        "baseline (a streaming query; exit 1 if any check differs)",
    )
    follow.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        help="the query's checkpoint directory (where it resumes)",
    )
    follow.add_argument(
        "--output",
        default="aosp-replay-follow",
        metavar="DIR",
        help="Parquet output, one directory per batch: DIR/batch=ID (default: "
        "./aosp-replay-follow)",
    )
    follow.add_argument(
        "--once", action="store_true", help="check the baselines there are now, then exit"
    )
    follow.add_argument(
        "--trigger-seconds",
        type=positive_seconds,
        help=f"seconds between micro-batches (default {TRIGGER_SECONDS:g}; not with --once)",
    )
    follow.set_defaults(run=cmd_replay_follow)
    stats = jobs.add_parser(
        "analytics",
        parents=[common, store, filters, spark_options],
        help="per world and record kind: counts, bytes, heights, segments (Parquet)",
    )
    stats.add_argument(
        "--output",
        default="aosp-analytics",
        metavar="DIR",
        help="Parquet output directory (default: ./aosp-analytics; overwritten)",
    )
    stats.add_argument(
        "--listing",
        choices=["index", "objects"],
        default="index",
        help="which segments to read: those the segment index names (the default), or those "
        "a listing of the object store finds (each world's must tile its history)",
    )
    stats.add_argument(
        "--on-corrupt",
        choices=["fail", "skip"],
        default="fail",
        help="a segment that cannot be read fails the job naming it (the default), or is "
        "left out of the figures (skip)",
    )
    stats.set_defaults(run=cmd_analytics)
