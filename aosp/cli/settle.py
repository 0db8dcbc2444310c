"""``aosp settle``: give universe log positions to the records a writer queued and did not
settle (``Plane.settle_log``): a process stopped between recording its events and giving
them their positions (``PlaneConfig.log_sequencing``; ``aosp status`` shows them as
``queued``)."""

from __future__ import annotations

import argparse
from typing import Any

from aosp.cli import ids
from aosp.cli.console import EXIT_OK, print_json, print_table, short_id
from aosp.cli.store import open_store, require_universe


def cmd_settle(args: argparse.Namespace) -> int:
    """Settle each selected universe's log queue; print its head before and after."""
    plane = open_store(args)
    require_universe(plane, args.universe)  # a mistyped id is not an empty pass
    universes = [args.universe] if args.universe is not None else list(plane.universes())
    rows: list[dict[str, Any]] = []
    for universe in universes:
        before = plane.log_head(universe)
        head = plane.settle_log(universe)
        rows.append({"universe": str(universe), "log_head_before": before, "log_head": head})
    if args.json:
        print_json({"ok": True, "universes": rows})
    elif not args.quiet:
        shown = [{**row, "universe": short_id(row["universe"])} for row in rows]
        print_table(shown, ["universe", "log_head_before", "log_head"])
    return EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``settle``."""
    parser = sub.add_parser(
        "settle",
        parents=[common, store],
        help="give log positions to queued records a stopped writer left",
        description="Settles each universe's log queue (or --universe's): the records a "
        "writer queued and did not settle before it stopped get the next positions, in the "
        "order they were committed, up to what the queue held when the command began. "
        "Prints each universe's log head before and after (the difference counts appends "
        "other writers made meanwhile too). Writers settle their own records, and "
        "eventsourcing's application recorders settle what is queued when they open: this "
        "is for a universe whose writers have stopped.",
    )
    parser.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        help="only this universe (its id or a prefix)",
    )
    parser.set_defaults(run=cmd_settle)
