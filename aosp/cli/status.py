"""``aosp status``: a live view of a store -- per universe, the worlds with pending work, the
inbox backlog and how old its oldest item is, the hot journal above the last segment,
exports in flight, compaction marks and CAS bodies awaiting deletion; then the busiest
worlds. It reads with snapshot reads (:mod:`persistence.protocols.status`) and never writes.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from typing import Any, Final

from aosp.cli.console import (
    EXIT_OK,
    UsageError,
    int_at_least,
    interruptible,
    iso_time,
    positive_seconds,
    print_json,
    print_table,
    short_id,
)
from aosp.cli.store import open_store, require_universe, world_options
from persistence.errors import Backend
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane
from persistence.protocols.status import (
    Count,
    UniverseStatus,
    WorldStatus,
    ready_worlds,
    universe_status,
)
from persistence.protocols.status import world_status as read_world_status

CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"
"""Cursor home and erase display: each refresh of the live view redraws the screen."""

DEFAULT_CAP: Final = 1_000
"""``--cap``: items counted per world (read, values too: the cost of a reading)."""

DEFAULT_INTERVAL: Final = 2.0
"""``--interval``: seconds between two readings of the live view."""

WORLD_COLUMNS: Final = (
    "world",
    "handle",
    "head",
    "pending",
    "oldest_pending",
    "hot_entries",
    "baseline",
    "cold_through",
    "export",
    "marks",
)
"""The columns of the busiest-worlds table."""


def _age(status: WorldStatus, versions_per_second: float | None) -> float | None:
    """Seconds since the oldest pending item was enqueued, where the engine's versions
    keep time (FoundationDB); ``None`` where they count commits (SQLite, memory)."""
    versions = status.pending_age_versions()
    if versions is None or versions_per_second is None:
        return None
    return versions / versions_per_second


def _duration(seconds: float | None) -> str:
    """``seconds`` for a person: ``-`` if unknown, else ``850ms``, ``12s``, ``3m05s``, ``2h07m``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _world_row(
    world: WorldId, status: WorldStatus, versions_per_second: float | None
) -> dict[str, Any]:
    """One world's figures, as JSON values."""
    return {
        "world": str(world),
        "handle": status.handle,
        "head": status.head,
        "cursor": None if status.cursor is None else str(status.cursor),
        "pending": status.pending.value,
        "pending_more": status.pending.capped,
        "ready": status.ready,
        "oldest_pending": None if status.oldest_pending is None else str(status.oldest_pending),
        "oldest_pending_age_seconds": _age(status, versions_per_second),
        "hot_entries": status.hot_entries,
        "baseline": status.baseline,
        "cold_through": status.cold_through,
        "export": None if status.export is None else status.export.state,
        "compaction_marks": status.consumed_marks.value,
        "compaction_marks_more": status.consumed_marks.capped,
        "oldest_mark": None if status.oldest_mark_ns is None else iso_time(status.oldest_mark_ns),
    }


def _busiest(row: dict[str, Any]) -> tuple[int, int, str]:
    """Sort key: most pending first, then most hot entries, then by id."""
    return (-row["pending"], -row["hot_entries"], row["world"])


def universe_report(
    plane: Plane, universe: UniverseId, worlds: list[WorldId], counted: Count, cap: int
) -> dict[str, Any]:
    """The figures of ``universe`` (``counted``: its worlds, up to the limit) and of each of
    ``worlds`` (busiest first). With more worlds than the limit, the totals are those of
    ``worlds`` (``worlds_more`` says so)."""
    versions_per_second = plane.engine.versions_per_second
    rows = []
    for world in worlds:
        status = drive(read_world_status(plane.engine, WorldKeys(universe, world), cap))
        rows.append(_world_row(world, status, versions_per_second))
    rows.sort(key=_busiest)
    totals: UniverseStatus = drive(universe_status(plane.engine, UniverseKeys(universe), cap))
    ages = [
        r["oldest_pending_age_seconds"] for r in rows if r["oldest_pending_age_seconds"] is not None
    ]
    return {
        "universe": str(universe),
        "worlds": counted.value,
        "worlds_more": counted.capped,
        "ready_worlds": totals.ready_worlds.value,
        "ready_worlds_more": totals.ready_worlds.capped,
        "pending": sum(r["pending"] for r in rows),
        "pending_more": any(r["pending_more"] for r in rows),
        "oldest_pending_age_seconds": max(ages, default=None),
        "hot_entries": sum(r["hot_entries"] for r in rows),
        "exports_in_flight": sum(r["export"] is not None for r in rows),
        "compaction_marks": sum(r["compaction_marks"] for r in rows),
        "compaction_marks_more": any(r["compaction_marks_more"] for r in rows),
        "cas_dooms": totals.dooms.value,
        "cas_dooms_more": totals.dooms.capped,
        "cas_pins": totals.pins.value,
        "cas_pins_more": totals.pins.capped,
        "log_head": totals.log_head,
        "log_queued": totals.log_queued.value,
        "log_queued_more": totals.log_queued.capped,
        "busiest": rows,
    }


def snapshot(plane: Plane, args: argparse.Namespace) -> dict[str, Any]:
    """One reading of the whole view, as the ``--json`` document."""
    if args.world is not None and args.universe is None:
        raise UsageError("--world needs --universe")
    if args.universe is not None:
        require_universe(plane, args.universe)
        universes = [args.universe]
    else:
        universes = list(plane.universes())
    reports = []
    for universe in universes:
        if args.world is not None:
            worlds, counted = [args.world], Count(1, False)
        else:
            listed = list(itertools.islice(plane.worlds(universe), args.limit + 1))
            counted = Count.of(len(listed), args.limit)
            # The worlds with pending work first, wherever their ids fall: the busiest
            # are among them, even in a universe of more than --limit worlds.
            ready = drive(ready_worlds(plane.engine, UniverseKeys(universe), args.limit))
            worlds = list(dict.fromkeys([*ready, *listed[: args.limit]]))[: args.limit]
        reports.append(universe_report(plane, universe, worlds, counted, args.cap))
    return {
        "ok": True,
        "read_at": iso_time(time.time_ns()),
        "kv": plane.engine.url,
        "objects": plane.objects.url,
        "layout": plane.layout,
        "universes": reports,
    }


def _count(value: int, more: bool) -> str:
    return str(Count(value, more))


def print_view(view: dict[str, Any], top: int) -> None:
    """The view as text: a line per universe, then its busiest worlds."""
    print(f"{view['kv']}  objects {view['objects']}  layout {view['layout']}  {view['read_at']}")
    if not view["universes"]:
        print("(no universe)")
    for u in view["universes"]:
        print()
        print(
            f"universe {short_id(u['universe'])}  "
            f"worlds {_count(u['worlds'], u['worlds_more'])}  "
            f"ready {_count(u['ready_worlds'], u['ready_worlds_more'])}  "
            f"pending {_count(u['pending'], u['pending_more'])}  "
            f"oldest {_duration(u['oldest_pending_age_seconds'])}  "
            f"hot entries {u['hot_entries']:,}  "
            f"exports {u['exports_in_flight']}  "
            f"marks {_count(u['compaction_marks'], u['compaction_marks_more'])}  "
            f"cas dooms {_count(u['cas_dooms'], u['cas_dooms_more'])}  "
            f"pins {_count(u['cas_pins'], u['cas_pins_more'])}  "
            f"log {u['log_head']:,}  "
            f"queued {_count(u['log_queued'], u['log_queued_more'])}"
        )
        rows = [
            {
                "world": short_id(r["world"]),
                "handle": r["handle"] or "-",
                "head": f"{r['head']:,}",
                "pending": _count(r["pending"], r["pending_more"]),
                "oldest_pending": _duration(r["oldest_pending_age_seconds"])
                if r["pending"]
                else "-",
                "hot_entries": f"{r['hot_entries']:,}",
                "baseline": f"{r['baseline']:,}",
                "cold_through": f"{r['cold_through']:,}",
                "export": r["export"] or "-",
                "marks": _count(r["compaction_marks"], r["compaction_marks_more"]),
            }
            for r in u["busiest"][:top]
        ]
        print_table(rows, WORLD_COLUMNS)
        if u["worlds_more"]:
            print(
                f"(figures of {len(u['busiest']):,} worlds: those with pending work, then the "
                "first by id; --limit reads more)"
            )
        hidden = len(u["busiest"]) - len(rows)
        if hidden > 0:
            print(f"({hidden} quieter worlds not shown: --top {len(u['busiest'])} shows them)")


def cmd_status(args: argparse.Namespace) -> int:
    """Print the view once (``--once``, ``--json`` or not a terminal), else redraw it every
    ``--interval`` seconds until interrupted (a reading the store fails is shown as its
    error, and the next one tried)."""
    if args.interval is not None and (args.once or args.json):
        raise UsageError("--interval paces the live view: not with --once or --json")
    interval = DEFAULT_INTERVAL if args.interval is None else args.interval
    plane = open_store(args)
    if args.json:
        print_json(snapshot(plane, args))
        return EXIT_OK
    if args.once or not sys.stdout.isatty():
        print_view(snapshot(plane, args), args.top)
        return EXIT_OK
    try:
        with interruptible():  # Ctrl-C is the way out, however the view was started
            while True:
                try:
                    view = snapshot(plane, args)
                except Backend as exc:  # the store failed this reading: say so, read again
                    print(CLEAR_SCREEN, end="")
                    print(f"aosp: {exc.kind} error: {exc}")
                else:
                    print(CLEAR_SCREEN, end="")
                    print_view(view, args.top)
                print(f"\n(every {interval:g} s; Ctrl-C to stop)", flush=True)
                time.sleep(interval)
    except KeyboardInterrupt:  # the way out of the live view
        return EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``status``."""
    parser = sub.add_parser(
        "status",
        parents=[common, store, world_options(required=False)],
        help="a live view of the store: backlog, drain lag, hot journal, exports, compaction",
        description="Per universe: worlds with pending work, inbox backlog and the age of its "
        "oldest item (FoundationDB; '-' where the engine's versions count commits), hot "
        "journal entries above the last segment, exports in flight, compaction marks, CAS "
        "bodies awaiting deletion; then its busiest worlds. Snapshot reads only: it never "
        "writes. On a terminal it refreshes until Ctrl-C; --once or --json print one reading.",
    )
    parser.add_argument("--once", action="store_true", help="print one reading and exit")
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        help=f"seconds between two readings of the live view (default {DEFAULT_INTERVAL:g})",
    )
    parser.add_argument(
        "--top",
        type=int_at_least(1),
        default=10,
        help="busiest worlds shown per universe in text (default 10; --json gives all read)",
    )
    parser.add_argument(
        "--limit",
        type=int_at_least(1),
        default=1_000,
        help="worlds read per universe (default 1000; more are counted as '1000+')",
    )
    parser.add_argument(
        "--cap",
        type=int_at_least(1),
        default=DEFAULT_CAP,
        help="pending items, marks, dooms and pins counted at most per world or universe "
        f"(default {DEFAULT_CAP}; more shows as '{DEFAULT_CAP:,}+'). Pending items are "
        "counted by reading them: the cap bounds what a reading costs",
    )
    parser.set_defaults(run=cmd_status)
