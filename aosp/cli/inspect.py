"""``aosp inspect``: universes, worlds, heads, cursors, baselines and segments at a glance."""

from __future__ import annotations

import argparse
from typing import Any

from aosp.cli.console import (
    EXIT_OK,
    Progress,
    int_at_least,
    print_fields,
    print_json,
    print_table,
)
from aosp.cli.store import open_store, selected_worlds, world_options
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane

PENDING_CAP = 10_000
"""Pending inbox items are counted up to this many (an inbox holds any number)."""


def world_summary(plane: Plane, universe: UniverseId, world: WorldId) -> dict[str, Any]:
    """One world's state: head, cursor and pending items, baseline, snapshots, segments."""
    meta = plane.world_meta(universe, world)
    cursor = plane.inbox_cursor(universe, world)
    pending = len(plane.read_after(universe, world, cursor, PENDING_CAP))
    segments = plane.list_segments(universe, world)
    return {
        "universe": str(universe),
        "world": str(world),
        "handle": meta.handle,
        "head": plane.head(universe, world),
        "cursor": None if cursor is None else str(cursor),
        "pending": pending if pending < PENDING_CAP else f"{PENDING_CAP}+",
        "baseline": plane.active_baseline(universe, world).height,
        "snapshots": len(plane.list_snapshots(universe, world)),
        "segments": len(segments),
        "cold_through": segments[-1].end if segments else 0,
        "segment_bytes": sum(s.byte_size for s in segments),
    }


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print a summary row per selected world (details when one world is named)."""
    plane = open_store(args)
    if args.world is not None and args.universe is not None:
        summary = world_summary(plane, args.universe, args.world)
        summary["created_ns"] = plane.world_meta(args.universe, args.world).created_ns
        summary["snapshot_list"] = [
            {"height": s.height, "snapshot_ref": str(s.snapshot_ref)}
            for s in plane.list_snapshots(args.universe, args.world)
        ]
        summary["segment_list"] = [
            {"start": s.start, "end": s.end, "object_key": s.object_key, "bytes": s.byte_size}
            for s in plane.list_segments(args.universe, args.world)
        ]
        if args.json:
            print_json(summary)
        else:
            print_fields({k: v for k, v in summary.items() if not k.endswith("_list")})
            for s in summary["segment_list"]:
                print(f"segment {s['start']}-{s['end']}  {s['bytes']} bytes  {s['object_key']}")
        return EXIT_OK
    worlds = selected_worlds(plane, args)[: args.limit]
    rows = []
    with Progress("inspect", len(worlds), enabled=not args.quiet, unit="worlds") as progress:
        for universe, world in worlds:
            rows.append(world_summary(plane, universe, world))
            progress.advance()
    if args.json:
        print_json({"universes": len({r["universe"] for r in rows}), "worlds": rows})
    else:
        print_table(
            rows,
            [
                "universe",
                "world",
                "handle",
                "head",
                "cursor",
                "pending",
                "baseline",
                "snapshots",
                "segments",
                "cold_through",
            ],
        )
    return EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``inspect``."""
    parser = sub.add_parser(
        "inspect",
        parents=[common, store, world_options(required=False)],
        help="show universes and worlds: heads, cursors, baselines, segments",
        description="One row per world (all worlds, one universe's, or one world in detail).",
    )
    parser.add_argument(
        "--limit",
        type=int_at_least(1),
        default=1_000,
        help="show at most this many worlds (default 1000)",
    )
    parser.set_defaults(run=cmd_inspect)
