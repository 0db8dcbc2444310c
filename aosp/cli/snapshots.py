"""The snapshots' commands: ``snapshot list|commit|promote``."""

from __future__ import annotations

import argparse
import shlex
import time
from typing import Any, Final

from aosp.cli.console import (
    EXIT_OK,
    Refused,
    UsageError,
    command_group,
    int_at_least,
    print_fields,
    print_json,
    print_table,
)
from aosp.cli.store import (
    check_kernel,
    open_store,
    world_options,
)
from persistence.errors import (
    BaselineRegression,
    NotFound,
    ReceiptHorizonFence,
)
from persistence.journal_records import SnapshotJournalRecord, decode_journal_record
from persistence.plane import Plane
from persistence.records import SnapshotRecord


def cmd_snapshot_list(args: argparse.Namespace) -> int:
    """List the snapshot index, marking the active baseline."""
    plane = open_store(args)
    baseline = plane.active_baseline(args.universe, args.world)
    rows: list[dict[str, Any]] = [
        {
            "height": s.height,
            "baseline": s == baseline,
            "snapshot_ref": str(s.snapshot_ref),
            "logical_time_ns": s.logical_time_ns,
            "receipt_horizon": s.receipt_horizon_height,
        }
        for s in plane.list_snapshots(args.universe, args.world)
    ]
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            r["baseline"] = "*" if r["baseline"] else ""
        print_table(rows, ["height", "baseline", "snapshot_ref", "receipt_horizon"])
    return EXIT_OK


def _snapshot_at(plane: Plane, args: argparse.Namespace, height: int) -> SnapshotRecord | None:
    found = [s for s in plane.list_snapshots(args.universe, args.world) if s.height == height]
    return found[0] if found else None


def promote_command(args: argparse.Namespace, height: int) -> str:
    """The ``aosp snapshot promote`` command line that promotes the snapshot at ``height``
    of the command's world in the command's store (full ids, quoted for a shell)."""
    store = (
        ["--data-dir", str(args.data_dir)]
        if args.kv is None
        else ["--kv", str(args.kv), "--objects", str(args.objects)]
    )
    words = ["aosp", "snapshot", "promote", *store]
    words += ["-u", str(args.universe), "-w", str(args.world), "--height", str(height)]
    return shlex.join(words)


def _snapshot_summary(
    plane: Plane, args: argparse.Namespace, record: SnapshotRecord, indexed: bool
) -> int:
    """What ``snapshot commit`` did, and what comes next: the snapshot's height (the state
    after that journal entry; the commit's own journal record is one above it, at the
    head), whether the fences let it be promoted, and the command that promotes it."""
    baseline = plane.active_baseline(args.universe, args.world)
    head = plane.head(args.universe, args.world)
    fenced = record.receipt_horizon_height != record.height
    promotable = not fenced and record.height > baseline.height
    result = {
        "height": record.height,
        "snapshot_ref": str(record.snapshot_ref),
        "receipt_horizon": record.receipt_horizon_height,
        "indexed": indexed,
        "baseline": baseline.height,
        "head": head,
        "promotable": promotable,
    }
    if args.json:
        print_json(result)
        return EXIT_OK
    if baseline == record:
        step = "none: it is the active baseline"
    elif fenced:
        step = (
            "none: the receipt-horizon fence refuses it (its horizon is not its height); "
            "commit a snapshot with --receipts-complete (and --promote) to make a baseline"
        )
    elif not promotable:
        step = f"none: the active baseline is at height {baseline.height}, above it"
    else:
        step = promote_command(args, record.height)
    state = "genesis" if record.height == 0 else f"the state after entry {record.height}"
    print_fields(
        {
            "snapshot height": f"{record.height} ({state})",
            "snapshot_ref": result["snapshot_ref"],
            "receipt horizon": (
                "none (committed without --receipts-complete)"
                if record.receipt_horizon_height is None
                else record.receipt_horizon_height
            ),
            "indexed": "yes" if indexed else "no (already indexed at this height)",
            "baseline height": baseline.height,
            "journal head": head
            if head == record.height
            else f"{head} (the commit's journal record is above the snapshot: not its height)",
            "to promote": step,
        }
    )
    return EXIT_OK


def cmd_snapshot_commit(args: argparse.Namespace) -> int:
    """Snapshot the kernel's state at the head (Protocol E); optionally promote it to the
    baseline, which lets ``segments export`` move the history below it."""
    from segments.restore import restore

    if args.promote and not args.receipts_complete:
        raise UsageError(
            "--promote needs --receipts-complete: the receipt-horizon fence promotes only a "
            "snapshot whose receipt horizon is its height"
        )
    kernel = check_kernel(args.kernel)
    plane = open_store(args)
    state = restore(plane, args.universe, args.world, kernel)
    existing = _snapshot_at(plane, args, state.head)
    if existing is not None:  # nothing journaled since: the index at this height is immutable
        record, indexed = existing, False
        if args.promote:
            _promote(plane, args, record)
    else:
        record, outcome = plane.snapshot_commit(
            args.universe,
            args.world,
            state.state,
            height=state.head,
            logical_time_ns=time.time_ns(),
            receipt_horizon_height=state.head if args.receipts_complete else None,
            promote_baseline=args.promote,
        )
        indexed = outcome.indexed
    return _snapshot_summary(plane, args, record, indexed)


def _promote(
    plane: Plane, args: argparse.Namespace, record: SnapshotRecord, option: str = ""
) -> None:
    """Promote ``record``; the fence's refusal as :class:`Refused` saying what would pass
    (``option``: the option that named the snapshot, which the message starts with)."""
    try:
        plane.promote_baseline(args.universe, args.world, record)
    except ReceiptHorizonFence as exc:
        horizon = exc.receipt_horizon_height
        raise Refused(
            f"{option}the receipt-horizon fence refuses the snapshot at height {exc.height}: its "
            + (
                "receipt horizon is none (it was committed without --receipts-complete)"
                if horizon is None
                else f"receipt horizon is {horizon}"
            )
            + f", and promotion needs it equal to the height ({exc.height}). The index is "
            "immutable, so no retry changes this: commit a new snapshot with "
            "`aosp snapshot commit --receipts-complete --promote`"
        ) from None


def _missing_snapshot(plane: Plane, args: argparse.Namespace, height: int) -> NotFound:
    """``NotFound`` for ``--height`` naming no snapshot: the heights that have one (the
    nearest, if there are many), and, if ``height`` holds the journal record of a snapshot
    commit (the head just after ``snapshot commit``), the snapshot's own height."""
    heights = [s.height for s in plane.list_snapshots(args.universe, args.world)]
    below = [h for h in heights if h < height]
    above = [h for h in heights if h > height]
    if len(heights) <= MAX_LISTED_HEIGHTS:
        where = f"snapshots are indexed at heights {', '.join(map(str, heights))}"
    else:
        near = [*below[-1:], *above[:1]]
        where = (
            f"{len(heights):,} snapshots are indexed; the nearest at heights "
            f"{' and '.join(map(str, near))}"
        )
    hint = ""
    head = plane.head(args.universe, args.world)
    entry = plane.read_range(args.universe, args.world, height, 1) if 1 <= height <= head else []
    if entry:
        record = decode_journal_record(entry[0][1])
        if isinstance(record, SnapshotJournalRecord):
            hint = (
                f"; height {height} is the journal record of the snapshot committed at height "
                f"{record.height}: its --height is {record.height}"
            )
    return NotFound(
        f"--height {height}: no snapshot is indexed at {height} in world {args.world} "
        f"({where}; `aosp snapshot list` shows them){hint}"
    )


MAX_LISTED_HEIGHTS: Final = 10
"""The most snapshot heights a ``--height`` naming no snapshot lists (else the nearest)."""


def cmd_snapshot_promote(args: argparse.Namespace) -> int:
    """Promote the snapshot indexed at ``--height`` to the active baseline."""
    plane = open_store(args)
    record = _snapshot_at(plane, args, args.height)
    if record is None:
        raise _missing_snapshot(plane, args, args.height)
    try:
        _promote(plane, args, record, f"--height {args.height}: ")
    except BaselineRegression as exc:  # the baseline never moves down: no retry helps
        raise Refused(
            f"--height {args.height}: below the active baseline at height {exc.current}, and "
            "a baseline never moves down; promote a snapshot at or above it"
        ) from None
    baseline = plane.active_baseline(args.universe, args.world)
    result = {
        "height": args.height,
        "baseline": baseline.height,
        "head": plane.head(args.universe, args.world),
    }
    print_json(result) if args.json else print_fields(result)
    return EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``snapshot``."""
    one_world = world_options(required=True)
    snapshot = command_group(sub, "snapshot", "list, commit and promote a world's snapshots")
    listing = snapshot.add_parser(
        "list", parents=[common, store, one_world], help="the index; * marks the baseline"
    )
    listing.set_defaults(run=cmd_snapshot_list)
    commit = snapshot.add_parser(
        "commit",
        parents=[common, store, one_world],
        help="snapshot the kernel's state at the head (optionally promote it)",
        description="Restores the world through --kernel, stores the state as a snapshot at "
        "the head and indexes it; with --promote it becomes the active baseline, below "
        "which `segments export` moves history to cold segments.",
    )
    commit.add_argument(
        "--kernel",
        default="persistence.kernel:ReferenceKernel",
        help="kernel as module:Class (default: the reference kernel)",
    )
    commit.add_argument(
        "--receipts-complete",
        action="store_true",
        help="assert that every receipt of effects up to the head is journaled: records the "
        "receipt horizon at the snapshot's height (promotion needs it)",
    )
    commit.add_argument("--promote", action="store_true", help="make it the active baseline")
    commit.set_defaults(run=cmd_snapshot_commit)
    promote = snapshot.add_parser(
        "promote",
        parents=[common, store, one_world],
        help="make an indexed snapshot the active baseline",
        description="The receipt-horizon fence and non-regression are checked: a snapshot "
        "without a complete receipt horizon, or below the baseline, is refused (exit 1: no "
        "retry changes it).",
    )
    promote.add_argument(
        "--height",
        type=int_at_least(0),
        required=True,
        help="height of the snapshot (its `snapshot height`, not the journal head after the "
        "commit; `snapshot list` shows them)",
    )
    promote.set_defaults(run=cmd_snapshot_promote)
