"""``aosp compact``: inbox compaction (``persistence.protocols.compaction``) of selected worlds,
and with ``--orphans`` the collection of orphaned objects (``persistence.protocols.cas_bodies``,
``segments.collect``)."""

from __future__ import annotations

import argparse
import time
from typing import Any, Final

from aosp.cli.console import (
    EXIT_BACKEND,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    UsageError,
    counted,
    human_size,
    int_at_least,
    noun,
    positive_seconds,
    print_json,
    print_table,
    short_id,
)
from aosp.cli.store import open_store, selected_worlds, world_options
from persistence.errors import Backend, Corruption, Validation
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane, PlaneConfig, cas_collection
from persistence.protocols import cas_bodies, compaction
from persistence.workers.compactor import Compactor
from segments.collect import SegmentCollection, collect_world

PREVIEW_CAP: Final = 100_000
"""A dry run counts removable items up to this many per world (``more_than_counted``)."""


def _config(args: argparse.Namespace) -> PlaneConfig:
    try:
        return PlaneConfig(inbox_retention_seconds=args.retention)
    except Validation as exc:
        raise Validation("--retention", exc.problem) from None


def cmd_compact(args: argparse.Namespace) -> int:
    """Compact (or, with ``--dry-run``, preview) the inbox of every selected world."""
    if args.grace is not None and not args.orphans:
        raise UsageError(
            "--grace needs --orphans: it is how long a CAS put's pin protects its upload "
            "from the orphan collection, which only --orphans runs"
        )
    config = _config(args)
    plane = open_store(args, config=config)
    worlds = selected_worlds(plane, args, worldless=args.orphans)  # CAS bodies of a universe
    try:
        compactor = Compactor(plane, max_items=args.max_items)
    except Validation as exc:
        raise Validation("--max-items", exc.problem) from None
    rows, stopped = _compact_worlds(plane, compactor, config, worlds, args)
    orphans: dict[str, dict[str, int]] | None = None
    orphan_error: str | None = None
    if args.orphans and not stopped:
        try:
            orphans = _collect(plane, worlds, args)
        except (Corruption, Backend) as exc:
            orphan_error = f"{type(exc).__name__}: {exc}"
            stopped = isinstance(exc, Backend)
    failed = [r for r in rows if "error" in r]
    if args.json:
        out: dict[str, Any] = {"dry_run": args.dry_run, "worlds": rows, "failed": len(failed)}
        if orphans is not None:
            out["orphans"] = orphans
        if orphan_error is not None:
            out["orphans_error"] = orphan_error
        print_json(out)
    else:
        _print_summary(rows, len(worlds), orphans, orphan_error, dry_run=args.dry_run)
    if stopped:
        return EXIT_BACKEND
    return EXIT_CHECK_FAILED if failed or orphan_error is not None else EXIT_OK


def _compact_worlds(
    plane: Plane,
    compactor: Compactor,
    config: PlaneConfig,
    worlds: list[tuple[UniverseId, WorldId]],
    args: argparse.Namespace,
) -> tuple[list[dict[str, Any]], bool]:
    """One pass (or preview) per world, in order, with a progress bar: a row per world,
    with its counts or its error, and whether the store failed (the rows then end with the
    world it failed on: a corrupt world does not stop the others, a failed store does)."""
    rows: list[dict[str, Any]] = []
    with Progress("compact", len(worlds), enabled=not args.quiet, unit="world") as progress:
        for universe, world in worlds:
            row: dict[str, Any] = {"universe": str(universe), "world": str(world)}
            try:
                row |= _world_pass(plane, compactor, config, universe, world, args.dry_run)
            except Corruption as exc:  # one damaged world must not stop the others
                row["error"] = f"{type(exc).__name__}: {exc}"
            except Backend as exc:  # the store failed: report what was done, then stop
                row["error"] = f"{type(exc).__name__}: {exc}"
                rows.append(row)
                return rows, True
            rows.append(row)
            progress.advance()
    return rows, False


def _world_pass(
    plane: Plane,
    compactor: Compactor,
    config: PlaneConfig,
    universe: UniverseId,
    world: WorldId,
    dry_run: bool,
) -> dict[str, Any]:
    """The counts of one world's compaction pass, or with ``dry_run`` of its preview."""
    if dry_run:
        seen = compaction.preview(
            plane.engine,
            WorldKeys(universe, world),
            config.inbox_retention_ns,
            time.time_ns(),
            PREVIEW_CAP,
        )
        return {
            "marks": seen.marks,
            "mark_due": seen.mark_due,
            "items": seen.removable,
            "more_than_counted": seen.removable_capped,
        }
    done, transactions = compactor.compact_world(universe, world)
    return {
        "items": done.items,
        "idempotency_entries": done.idempotency_entries,
        "marks_written": done.marks_written,
        "marks_removed": done.marks_removed,
        "transactions": transactions,
    }


def _print_summary(
    rows: list[dict[str, Any]],
    worlds: int,
    orphans: dict[str, dict[str, int]] | None,
    orphan_error: str | None,
    *,
    dry_run: bool,
) -> None:
    """The worlds' table, the items removed (or removable) from ``worlds`` worlds, and the
    orphan collection's counts or error."""
    failed = any("error" in r for r in rows)
    columns = ["world", "marks", "mark_due", "items"] if dry_run else ["world", "items"]
    if not dry_run:
        columns += ["idempotency_entries", "marks_written", "marks_removed"]
    table = [{**r, "world": short_id(r["world"])} for r in rows]
    print_table(table, [*columns, *(["error"] if failed else [])])
    verb = "removable" if dry_run else "removed"
    total = sum(r.get("items", 0) for r in rows)
    capped = any(r.get("more_than_counted") for r in rows)
    items = f"{total:,}{'+' if capped else ''} consumed {noun(total, 'item')}"
    print(f"{items} {verb} from {counted(worlds, 'world')}")
    if orphans is not None:
        print(_orphans_line(orphans, dry_run))
    if orphan_error is not None:
        print(f"orphan collection failed: {orphan_error}")


def _orphans_line(orphans: dict[str, dict[str, int]], dry_run: bool) -> str:
    """What the orphan collection collected (or found collectable), in one line."""
    cas, seg = orphans["cas"], orphans["segments"]
    verb = "collectable" if dry_run else "collected"
    left_over = cas["dooms_resumed"] + cas["dooms_settled"]
    return (
        f"orphans {verb}: {counted(cas['collected'], 'CAS body', 'CAS bodies')} "
        f"({human_size(cas['collected_bytes'])}; {cas['pinned']:,} pinned by "
        f"puts in flight, {counted(cas['pins_expired'], 'expired pin')}, "
        f"{counted(left_over, 'left-over collection')}, {cas['abandoned']:,} left to "
        f"their lease), {counted(seg['collected'], 'segment object')} "
        f"({human_size(seg['collected_bytes'])}; {seg['kept']:,} kept for an "
        f"export in flight), {counted(seg['markers_cleared'], 'finished export marker')}"
    )


def _collect(
    plane: Plane, worlds: list[tuple[UniverseId, WorldId]], args: argparse.Namespace
) -> dict[str, dict[str, int]]:
    """Collect (or count, with ``--dry-run``) the orphaned CAS bodies of the selected
    universe (every universe, also those without worlds, when none is selected) and the
    orphaned segment objects and finished markers of the selected worlds."""
    cas = cas_collection.CasCollection()
    grace = cas_bodies.DEFAULT_GRACE_SECONDS if args.grace is None else args.grace
    universes = [args.universe] if args.universe is not None else list(plane.universes())
    for universe in universes:
        cas += cas_collection.collect(
            plane.engine, plane.objects, universe, plane.clock, grace, dry_run=args.dry_run
        )
    segments = SegmentCollection()
    for universe, world in worlds:
        segments += collect_world(plane, universe, world, dry_run=args.dry_run)
    return {
        "cas": {name: getattr(cas, name) for name in cas.__slots__},
        "segments": {name: getattr(segments, name) for name in segments.__slots__},
    }


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``compact``."""
    parser = sub.add_parser(
        "compact",
        parents=[common, store, world_options(required=False)],
        help="remove consumed inbox items and their idempotency entries past the window",
        description="One compaction pass per selected world: marks the cursor when a mark is "
        "due and removes the items consumed at least --retention seconds ago (by the marks) "
        "with their idempotency entries. A store's first pass removes nothing: run it at "
        "least every retention/16. Exit 1 if a world could not be compacted (corrupt); exit 3 if "
        "the store failed (the worlds done so far are reported).",
    )
    parser.add_argument(
        "--retention",
        type=float,
        default=PlaneConfig().inbox_retention_seconds,
        help="the idempotency window in seconds, more than 0 and at most ten years (default "
        "86400); use the hosts' value",
    )
    parser.add_argument(
        "--max-items",
        type=int_at_least(1),
        default=1_000,
        help="items removed per transaction (default 1000)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="show what a pass would remove (no mark written, nothing removed)",
    )
    parser.add_argument(
        "--orphans",
        action="store_true",
        help="also delete orphaned objects: CAS bodies of the worlds' universes that no "
        "metadata names and no put in flight pins, segment objects of the worlds that no "
        "index record names and no export can adopt, and finished export markers",
    )
    parser.add_argument(
        "--grace",
        type=positive_seconds,
        help="with --orphans: seconds a CAS put's pin protects its upload (default "
        f"{cas_bodies.DEFAULT_GRACE_SECONDS:g}): longer than any upload takes",
    )
    parser.set_defaults(run=cmd_compact)
