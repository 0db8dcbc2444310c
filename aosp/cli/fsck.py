"""``aosp fsck``: the full read-only integrity check (see :mod:`aosp.fsck`)."""

from __future__ import annotations

import argparse
from typing import Any, Final

from aosp.cli import ids
from aosp.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    counted,
    human_size,
    print_json,
    short_id,
)
from aosp.cli.store import open_store, require_universe


def cmd_fsck(args: argparse.Namespace) -> int:
    """Check the store; exit 1 on any error finding (on warnings too with ``--strict``)."""
    from aosp.fsck import Fsck

    plane = open_store(args)
    require_universe(plane, args.universe)
    with Progress("fsck", enabled=not args.quiet, unit="step") as progress:
        report = Fsck(
            plane,
            lambda note: progress.advance(note=note),
            full_engine_check=args.full_engine_check,
        ).run(None if args.universe is None else [args.universe])
    if args.json:
        print_json(report.to_json())
    else:
        for f in report.findings:
            where = short_id(f.universe) if f.universe else "-"
            where += f"/{short_id(f.world)}" if f.world else ""
            print(f"{f.severity.upper():<8}{f.area:<10}{where} {f.subject}: {f.message}")
        checked = ", ".join(_tally(what, n) for what, n in sorted(report.checked.items()))
        if report.checked.get("universes"):
            print(f"checked {checked}")
        else:  # not a clean store: nothing was checked (exit 1)
            print(f"{report.reason}" + (f" ({checked})" if checked else ""))
        print(f"{counted(len(report.errors), 'error')}, {counted(len(report.warnings), 'warning')}")
    failed = not report.ok or (args.strict and report.warnings)
    return EXIT_CHECK_FAILED if failed else EXIT_OK


CHECKED_SINGULAR: Final = {
    "universes": "universe",
    "engine storage checks": "engine storage check",
    "handles": "handle",
    "handles not indexed (worlds created before the index)": (
        "handle not indexed (a world created before the index)"
    ),
    "cas pins": "cas pin",
    "cas dooms": "cas doom",
    "cas bodies": "cas body",
    "worlds": "world",
    "segments": "segment",
    "journal entries": "journal entry",
    "snapshots": "snapshot",
    "inbox items": "inbox item",
    "consumed marks": "consumed mark",
    "objects": "object",
}
"""The singular of each tally ``Fsck`` keeps (``FsckReport.checked`` keys, plural)."""


def checked_count(count: int, what: str) -> str:
    """One tally of what fsck checked, its noun agreeing with the count (``1 universe``)."""
    singular = CHECKED_SINGULAR.get(what)
    if singular is None and what.startswith("journal entries without checksums"):
        singular = what.replace("entries", "entry", 1)
    return f"{count:,} {what if count != 1 or singular is None else singular}"


def _tally(what: str, count: int) -> str:
    """One figure of what fsck checked, as text: ``3 worlds``, ``3.4 MiB read (cas)``."""
    if what.endswith(" bytes read"):
        return f"{human_size(count)} read ({what.removesuffix(' bytes read')})"
    return checked_count(count, what)


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``fsck``."""
    parser = sub.add_parser(
        "fsck",
        parents=[common, store],
        help="full integrity check: CAS, segments, journals, indexes, orphans (read-only)",
        description="Reads everything and reports problems; never repairs. Errors are damage "
        "or loss (exit 1); warnings (orphaned objects, an export in flight) are not, unless "
        "--strict.",
    )
    parser.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        help="check only this universe (its id or a prefix)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    parser.add_argument(
        "--full-engine-check",
        action="store_true",
        help="the engine's thorough check of its storage (SQLite: integrity_check, not the "
        "default quick_check)",
    )
    parser.set_defaults(run=cmd_fsck)
