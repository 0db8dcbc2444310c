"""``aosp inspect``: universes, worlds, heads, cursors, baselines, segments and hot state at a
glance."""

from __future__ import annotations

import argparse
from typing import Any, Final

from aosp.cli.console import (
    EXIT_OK,
    Progress,
    UsageError,
    human_size,
    int_at_least,
    iso_time,
    print_fields,
    print_json,
    print_table,
    short_id,
    short_seq,
)
from aosp.cli.store import open_store, selected_worlds, world_options
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols.hot_state import measure

DEFAULT_LIMIT: Final = 1_000
"""The most worlds ``inspect`` shows without ``--limit``."""

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


HOT_COLUMNS: Final = {
    "hot_entries": ("journal", "count"),
    "consumed": ("inbox_consumed", "count"),
    "idem": ("idempotency", "count"),
    "calls": ("call_records", "count"),
    "bookkeeping": ("bookkeeping", "count"),
}
"""Table columns of ``--hot``: family and figure of :mod:`persistence.protocols.hot_state`."""


def hot_summary(plane: Plane, universe: UniverseId, world: WorldId) -> dict[str, Any]:
    """The world's hot keys by family, their totals, and the ``--hot`` table columns."""
    state = measure(plane.engine, WorldKeys(universe, world))
    families = state.to_json()
    columns = {name: families[family][figure] for name, (family, figure) in HOT_COLUMNS.items()}
    return {"hot": families, "hot_keys": state.keys, "hot_bytes": state.bytes, **columns}


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print a summary row per selected world (details when one world is named)."""
    one_world = args.world is not None and args.universe is not None
    if one_world and args.limit is not None:
        raise UsageError("--limit caps the rows of several worlds; -u with -w shows one: not both")
    plane = open_store(args)
    if one_world:
        summary = world_summary(plane, args.universe, args.world)
        summary["created_ns"] = plane.world_meta(args.universe, args.world).created_ns
        summary.update(hot_summary(plane, args.universe, args.world))
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
            _print_world(summary)
        return EXIT_OK
    worlds = selected_worlds(plane, args)[: DEFAULT_LIMIT if args.limit is None else args.limit]
    rows = []
    with Progress("inspect", len(worlds), enabled=not args.quiet, unit="world") as progress:
        for universe, world in worlds:
            row = world_summary(plane, universe, world)
            if args.hot:
                row.update(hot_summary(plane, universe, world))
            rows.append(row)
            progress.advance()
    if args.json:
        print_json({"universes": len({r["universe"] for r in rows}), "worlds": rows})
    else:
        _print_rows(rows, args.hot)
    return EXIT_OK


SIZE_FIELDS: Final = ("segment_bytes", "hot_bytes")
"""Fields of ``inspect`` that count bytes (text shows them with units)."""


def _print_world(summary: dict[str, Any]) -> None:
    """One world in detail as text: ``name  value`` lines, its hot families and segments."""
    fields = {
        k: human_size(v) if k in SIZE_FIELDS else v
        for k, v in summary.items()
        if not k.endswith("_list") and k not in ("hot", "created_ns") and k not in HOT_COLUMNS
    }
    fields["created"] = iso_time(summary["created_ns"])
    print_fields(fields)
    for name, figures in summary["hot"].items():
        print(f"hot {name}: {figures['count']:,} ({human_size(figures['bytes'])})")
    for s in summary["segment_list"]:
        print(f"segment {s['start']}-{s['end']}  {human_size(s['bytes'])}  {s['object_key']}")


def _print_rows(rows: list[dict[str, Any]], hot: bool) -> None:
    """A row per world as text: short ids, sizes with units; a universe all rows share is
    said once above the table, not in every row."""
    universes = {r["universe"] for r in rows}
    shared = len(universes) == 1
    if shared:
        print(f"universe {universes.pop()}")
    table = [
        {
            **r,
            "universe": short_id(r["universe"]),
            "world": short_id(r["world"]),
            "cursor": None if r["cursor"] is None else short_seq(r["cursor"]),
            **({"hot_bytes": human_size(r["hot_bytes"])} if hot else {}),
        }
        for r in rows
    ]
    columns = [
        *([] if shared else ["universe"]),
        "world",
        "handle",
        "head",
        "cursor",
        "pending",
        "baseline",
        "snapshots",
        "segments",
        "cold_through",
        *(["hot_keys", "hot_bytes", *HOT_COLUMNS] if hot else []),
    ]
    print_table(table, columns)


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
        help=f"show at most this many worlds (default {DEFAULT_LIMIT}; not with -w)",
    )
    parser.add_argument(
        "--hot",
        action="store_true",
        help="also count each world's hot keys by family (reads every key of the world; "
        "always shown for one world)",
    )
    parser.set_defaults(run=cmd_inspect)
