"""Cold history: ``segments plan|export|list|verify`` and ``restore verify``."""

from __future__ import annotations

import argparse
from typing import Any, Final

from aosp.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    command_group,
    counted,
    human_size,
    noun,
    print_json,
    print_table,
    short_id,
)
from aosp.cli.store import open_store, selected_worlds, world_options
from persistence.kernel import load_kernel

EXPORT_OPTIONS: Final = {
    "margin": "--margin",
    "target_entries": "--target-entries",
    "target_bytes": "--target-bytes",
    "min_entries": "--min-entries",
    "pause_ratio": "--pause-ratio",
}
"""The option that gives each field of ``ExportConfig``."""


def _export_config(args: argparse.Namespace) -> Any:
    from segments.export import ExportConfig

    return ExportConfig(
        enabled=True,
        margin=args.margin,
        target_entries=args.target_entries,
        target_bytes=args.target_bytes,
        min_entries=args.min_entries,
        pause_ratio=args.pause_ratio,
    )


def cmd_segments_plan(args: argparse.Namespace) -> int:
    """Show the next range export would move per world (without moving anything)."""
    from segments.export import Exporter

    plane = open_store(args)
    exporter = Exporter(plane, _export_config(args))
    rows = []
    for universe, world in selected_worlds(plane, args):
        plan = exporter.plan(universe, world)
        segments = plane.list_segments(universe, world)
        rows.append(
            {
                "universe": str(universe),
                "world": str(world),
                "head": plane.head(universe, world),
                "cold_through": segments[-1].end if segments else 0,
                "next_start": None if plan is None else plan.start,
                "next_end_at_most": None if plan is None else plan.end,
            }
        )
    if args.json:
        print_json(rows)
    else:
        print_table(
            rows, ["universe", "world", "head", "cold_through", "next_start", "next_end_at_most"]
        )
    return EXIT_OK


def cmd_segments_export(args: argparse.Namespace) -> int:
    """Export every safe range of the selected worlds (resuming interrupted exports)."""
    from segments.export import Exporter

    plane = open_store(args)
    exporter = Exporter(plane, _export_config(args))
    worlds = selected_worlds(plane, args)
    exported: list[dict[str, Any]] = []
    with Progress("export", len(worlds), enabled=not args.quiet, unit="world") as progress:
        for universe, world in worlds:
            for record in exporter.export_all(universe, world, progress.message):
                exported.append(
                    {
                        "universe": str(universe),
                        "world": str(world),
                        "start": record.start,
                        "end": record.end,
                        "bytes": record.byte_size,
                        "object_key": record.object_key,
                    }
                )
            progress.advance()
    if args.json:
        print_json({"worlds": len(worlds), "segments": exported})
    else:
        columns = [c for c in SEGMENT_COLUMNS if c != "entries"]
        print_table([_segment_text(r) for r in exported], columns)
        total = sum(r["bytes"] for r in exported)
        print(
            f"{counted(len(exported), 'segment')} ({human_size(total)}) from "
            f"{counted(len(worlds), 'world')}"
        )
    return EXIT_OK


def cmd_segments_list(args: argparse.Namespace) -> int:
    """List the segment index of the selected worlds."""
    plane = open_store(args)
    rows = [
        {
            "universe": str(universe),
            "world": str(world),
            "start": s.start,
            "end": s.end,
            "entries": s.entry_count,
            "bytes": s.byte_size,
            "checksum": f"{s.checksum_algorithm}:{s.checksum.hex()}",
            "object_key": s.object_key,
        }
        for universe, world in selected_worlds(plane, args)
        for s in plane.list_segments(universe, world)
    ]
    if args.json:
        print_json(rows)
    else:
        print_table([_segment_text(r) for r in rows], SEGMENT_COLUMNS)
    return EXIT_OK


SEGMENT_COLUMNS: Final = ("world", "start", "end", "entries", "size", "object_key")
"""The text columns of ``segments list`` and ``segments export``."""


def _segment_text(row: dict[str, Any]) -> dict[str, Any]:
    """A segment row as text shows it: the world's short id, the size with units."""
    return {**row, "world": short_id(row["world"]), "size": human_size(row["bytes"])}


def cmd_segments_verify(args: argparse.Namespace) -> int:
    """Check every index record and read its segment to the end: the record agrees with its
    key, the records around it and its object (header, checksum, algorithm, byte size).
    Every bad record is listed, not only the first."""
    from segments.verify import check_segments

    plane = open_store(args)
    worlds = selected_worlds(plane, args)
    checked, failures = 0, []
    with Progress("verify", len(worlds), enabled=not args.quiet, unit="world") as progress:
        for universe, world in worlds:
            for check in check_segments(plane, universe, world, plane.head(universe, world)):
                checked += 1
                if check.error is not None:
                    failures.append(
                        {
                            "universe": str(universe),
                            "world": str(world),
                            "key_end": check.key_end,
                            "object_key": check.subject,
                            "error": str(check.error),
                        }
                    )
            progress.advance()
    ok = bool(worlds) and not failures  # no world: nothing was verified, so no pass
    reason = None
    if not worlds:
        reason = NOTHING_VERIFIED
    elif failures:
        reason = f"{len(failures)} of {checked} segments failed verification (see failed)"
    if args.json:
        print_json(
            {
                "ok": ok,
                "reason": reason,
                "worlds": len(worlds),
                "segments": checked,
                "failed": failures,
            }
        )
    else:
        for failure in failures:
            print(f"FAIL {failure['object_key']}: {failure['error']}")
        print(
            f"{checked - len(failures)}/{checked} {noun(checked, 'segment')} verified"
            if worlds
            else NOTHING_VERIFIED
        )
    return EXIT_OK if ok else EXIT_CHECK_FAILED


NOTHING_VERIFIED: Final = "the store has no worlds: nothing was verified"
"""What a check over every world says of a store without any (and exits 1)."""


def replay_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``summary`` of ``restore verify`` and ``spark replay-check``: worlds, equal,
    differ."""
    differ = sum(1 for r in rows if not r["equal"])
    return {"worlds": len(rows), "equal": len(rows) - differ, "differ": differ}


def replay_fraction(summary: dict[str, Any]) -> str:
    """``equal/worlds world(s)`` of a replay check's summary."""
    return f"{summary['equal']}/{summary['worlds']} {noun(summary['worlds'], 'world')}"


def replay_passed(summary: dict[str, Any]) -> bool:
    """Whether a replay check passed: some world was checked and none differs (no world
    is nothing verified, not a pass)."""
    return bool(summary["worlds"]) and not summary["differ"]


def replay_verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """``ok`` and, when not, the ``reason`` of a replay check's JSON."""
    if replay_passed(summary):
        return {"ok": True, "reason": None}
    if not summary["worlds"]:
        return {"ok": False, "reason": NOTHING_VERIFIED}
    return {
        "ok": False,
        "reason": f"{summary['differ']} of {summary['worlds']} worlds: restore differs from "
        "full replay, or failed (see worlds)",
    }


def cmd_restore_verify(args: argparse.Namespace) -> int:
    """For each world, restore (baseline + segments + tail) and full replay must agree.
    Prints what ``aosp spark replay-check`` prints: a summary and one row per world with
    the columns of ``segments.restore.REPLAY_CHECK_COLUMNS``."""
    from segments.restore import check_replay

    load_kernel(args.kernel)  # a bad path is a usage error before any work
    plane = open_store(args)
    worlds = selected_worlds(plane, args)
    rows = []
    with Progress("restore", len(worlds), enabled=not args.quiet, unit="world") as progress:
        for universe, world in worlds:
            rows.append(check_replay(plane, universe, world, lambda: load_kernel(args.kernel)))
            progress.advance()
    differ = [r for r in rows if not r["equal"]]
    summary = replay_summary(rows)
    if args.json:
        print_json({**replay_verdict(summary), "summary": summary, "worlds": rows})
    else:
        table = [
            {
                **r,
                "full": (r["full_state_sha256"] or "")[:16],
                "restored": (r["restored_state_sha256"] or "")[:16],
            }
            for r in rows
        ]
        print_table(
            table,
            ["world", "head", "baseline_height", "entries_replayed", "full", "restored", "equal"],
        )
        for r in differ:
            if r["error"] is not None:
                print(f"FAIL {r['world']}: {r['error']}")
        print(
            f"{replay_fraction(summary)}: restore equals full replay" if rows else NOTHING_VERIFIED
        )
    return EXIT_OK if replay_passed(summary) else EXIT_CHECK_FAILED


def kernel_option() -> argparse.ArgumentParser:
    """``--kernel module:Class`` (default: the reference kernel), for replay checks."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--kernel",
        default="persistence.kernel:ReferenceKernel",
        help="kernel as module:Class (default: the reference kernel)",
    )
    return parser


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``segments`` and ``restore``."""
    some_worlds = world_options(required=False)
    export_options = argparse.ArgumentParser(add_help=False)
    group = export_options.add_argument_group("export")
    group.add_argument(
        "--margin",
        type=int,
        default=0,
        help="entries below the baseline to keep hot, not exported (default 0)",
    )
    group.add_argument(
        "--target-entries",
        type=int,
        default=10_000,
        help="entries per segment at most (default 10000)",
    )
    group.add_argument(
        "--target-bytes",
        type=int,
        default=64 << 20,
        help=f"bytes of entries per segment at most, unless one entry alone is larger "
        f"(default {64 << 20}: 64 MiB)",
    )
    group.add_argument(
        "--min-entries",
        type=int,
        default=1,
        help="the fewest entries a segment is written with (default 1)",
    )
    group.add_argument(
        "--pause-ratio",
        type=float,
        default=4.0,
        help="on SQLite, pause after each hot-key clear this many times as long as it took, "
        "so that foreground writers wait little (default 4; 0 in a quiet period: ~5x faster)",
    )

    segments = command_group(sub, "segments", "cold segments: plan, export, list and verify")
    plan = segments.add_parser(
        "plan",
        parents=[common, store, some_worlds, export_options],
        help="what export would move next (nothing is changed)",
    )
    plan.set_defaults(run=cmd_segments_plan, option_fields=EXPORT_OPTIONS)
    export = segments.add_parser(
        "export",
        parents=[common, store, some_worlds, export_options],
        help="move journal history below the baseline to segment objects",
        description="Exports every safe range (below the active baseline, minus "
        "--margin) of each selected world; resumes any interrupted export first.",
    )
    export.set_defaults(run=cmd_segments_export, option_fields=EXPORT_OPTIONS)
    listing = segments.add_parser(
        "list", parents=[common, store, some_worlds], help="the segment index"
    )
    listing.set_defaults(run=cmd_segments_list)
    verify = segments.add_parser(
        "verify",
        parents=[common, store, some_worlds],
        help="read every segment: checksum, header and index agree (exit 1 if not)",
    )
    verify.set_defaults(run=cmd_segments_verify)

    restore = command_group(sub, "restore", "check that restore equals full replay")
    check = restore.add_parser(
        "verify",
        parents=[common, store, some_worlds, kernel_option()],
        help="restore equals full replay for every world (exit 1 if not)",
    )
    check.set_defaults(run=cmd_restore_verify)
