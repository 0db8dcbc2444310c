"""``aosp drain``: the drain worker (``persistence.workers.drain_worker``) -- one pass over the
ready worlds, or ``--follow`` until SIGINT or SIGTERM, printing its lag."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, Final

from aosp.cli import ids
from aosp.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    UsageError,
    counted,
    int_at_least,
    positive_seconds,
    print_fields,
    print_json,
    report_error,
)
from aosp.cli.store import open_store, require_universe
from persistence.errors import Backend, Validation
from persistence.workers.drain_worker import (
    DEFAULT_MAX_BYTES,
    DEFAULT_QUANTUM,
    DEFAULT_WORLDS_PER_TRANSACTION,
    DrainWorker,
    Lag,
    PassReport,
    Shard,
)

DEFAULT_INTERVAL: Final = 0.05
"""``--interval``: the wait of ``--follow`` after a pass that drained nothing."""
DEFAULT_REPORT_EVERY: Final = 10.0
"""``--report-every``: seconds between two lag reports of ``--follow``."""


def cmd_drain(args: argparse.Namespace) -> int:
    """One pass of a drain worker, or passes until stopped (``--follow``)."""
    pacing = {"--interval": args.interval, "--report-every": args.report_every}
    given = [option for option, value in pacing.items() if value is not None]
    if given and not args.follow:  # one pass neither waits nor reports: they would be ignored
        raise UsageError(
            f"{' and '.join(given)}: for --follow only (one pass neither waits nor reports "
            "the lag): add --follow"
        )
    plane = open_store(args)
    require_universe(plane, args.universe)  # not an empty pass, nor following nothing
    try:
        worker = DrainWorker(
            plane,
            universes=None if args.universe is None else [args.universe],
            shard=args.shard,
            quantum=args.quantum,
            max_bytes=args.max_bytes,
            worlds_per_transaction=args.worlds_per_transaction,
        )
    except Validation as exc:  # name the option, not the parameter
        raise Validation(f"--{exc.field.replace('_', '-')}", exc.problem) from None
    if args.backfill:
        marked = worker.backfill()
        if not args.quiet:
            marked_worlds = counted(marked, "world")
            print(f"backfill: marked {marked_worlds} with pending items", file=sys.stderr)
    if not args.follow:
        report = worker.run_pass()
        _print(args, {"pass": _pass(report), "lag": _lag(worker.lag())})
        return EXIT_CHECK_FAILED if report.failures else EXIT_OK
    stop = threading.Event()
    every = DEFAULT_REPORT_EVERY if args.report_every is None else args.report_every
    interval = DEFAULT_INTERVAL if args.interval is None else args.interval
    due = [worker.clock() + every]

    def on_pass(report: PassReport) -> None:
        if worker.clock() >= due[0]:
            _print(args, {"lag": _lag(worker.lag())})
            due[0] = worker.clock() + every

    with _stopped_by_signals(stop):
        while not stop.is_set():
            try:
                worker.run(stop, idle_seconds=interval, on_pass=on_pass)
            except Backend as exc:  # the store is unavailable for now: keep trying
                report_error(exc.kind, f"{exc} (retrying in {interval:g} s)")
                stop.wait(interval)
    lag = worker.lag()
    _print(args, {"stopped": True, "lag": _lag(lag)})
    return EXIT_CHECK_FAILED if lag.failures else EXIT_OK


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (the pass under way finishes) while inside."""
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _pass(report: PassReport) -> dict[str, Any]:
    return {
        "ready_worlds": report.ready,
        "turns": report.turns,
        "items": report.items,
        "transactions": report.transactions,
        "seconds": round(report.seconds, 3),
    }


def _lag(lag: Lag) -> dict[str, Any]:
    return {
        "ready_worlds": lag.ready_worlds,
        "items": lag.items,
        "passes": lag.passes,
        "transactions": lag.transactions,
        "seconds": round(lag.seconds, 3),
        "oldest_wait_at_most": (
            None if lag.oldest_wait_at_most is None else round(lag.oldest_wait_at_most, 3)
        ),
        "ready_since_start": lag.ready_since_start,
        "failures": [
            {"universe": str(u), "world": str(w), "error": why} for u, w, why in lag.failures
        ],
    }


def _print(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """A report: one JSON object per line with ``--json``, else ``name  value`` lines."""
    if args.json:
        print_json(out) if not args.follow else print(_one_line(out))
    else:
        lag = out["lag"]
        fields: dict[str, Any] = {}
        if "pass" in out:
            done = out["pass"]
            fields["pass"] = (
                f"{counted(done['turns'], 'ready world')}, {counted(done['items'], 'item')} "
                f"in {counted(done['transactions'], 'transaction')}, {done['seconds']:.3f} s"
            )
        wait = lag["oldest_wait_at_most"]
        ready = counted(lag["ready_worlds"], "ready world")
        fields["lag"] = f"{ready} at the last scan; oldest wait " + (
            f"at most {wait:.3f} s"
            if wait is not None
            else f"unknown ({lag['ready_since_start']:,} ready since the start)"
        )
        fields["drained"] = (
            f"{counted(lag['items'], 'item')} in {counted(lag['passes'], 'pass', 'passes')}, "
            f"{counted(lag['transactions'], 'transaction')}, {lag['seconds']:.1f} s"
        )
        for failure in lag["failures"]:
            fields[f"failed {failure['world']}"] = failure["error"]
        if out.get("stopped"):
            fields["stopped"] = "by signal"
        print_fields(fields)
    sys.stdout.flush()


def _one_line(out: dict[str, Any]) -> str:
    return json.dumps(out, separators=(",", ":"))


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except Validation as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``drain``."""
    parser = sub.add_parser(
        "drain",
        parents=[common, store],
        help="drain the worlds with pending inbox items, fairly (the drain worker)",
        description="Finds the worlds with items after their cursor through the pending-work "
        "index and drains them by deficit round-robin: every pass gives each ready world one "
        "turn of at most --quantum items, --worlds-per-transaction worlds per transaction "
        "(see docs/protocols.md). One pass by default; --follow runs passes until SIGINT or "
        "SIGTERM, printing the lag every --report-every seconds. Run N processes with "
        "--shard 0/N .. N-1/N to split the worlds between them. Exit 1 if a world could not "
        "be drained (its next item cannot be normalized, or its records are corrupt).",
    )
    parser.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        help="only this universe (its id or a prefix)",
    )
    parser.add_argument("--follow", action="store_true", help="run passes until SIGINT or SIGTERM")
    parser.add_argument(
        "--backfill",
        action="store_true",
        help="first mark every world of the shard with items after its cursor and no ready "
        "mark (once, on a store written before the pending-work index: reads every world)",
    )
    parser.add_argument(
        "--shard",
        type=_shard,
        default=Shard(),
        metavar="I/N",
        help="drain shard I of N (worker I of N processes; default 0/1: every world)",
    )
    parser.add_argument(
        "--quantum",
        type=int_at_least(1),
        default=DEFAULT_QUANTUM,
        help=f"items per world and turn (default {DEFAULT_QUANTUM})",
    )
    parser.add_argument(
        "--max-bytes",
        type=int_at_least(1),
        default=DEFAULT_MAX_BYTES,
        help=f"envelope bytes per world and turn, at least one item (default {DEFAULT_MAX_BYTES})",
    )
    parser.add_argument(
        "--worlds-per-transaction",
        type=int_at_least(1),
        default=DEFAULT_WORLDS_PER_TRANSACTION,
        help=f"worlds drained in one transaction (default {DEFAULT_WORLDS_PER_TRANSACTION})",
    )
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        help="--follow: seconds to wait after a pass that drained nothing (default "
        f"{DEFAULT_INTERVAL:g})",
    )
    parser.add_argument(
        "--report-every",
        type=positive_seconds,
        help=f"--follow: seconds between two lag reports (default {DEFAULT_REPORT_EVERY:g})",
    )
    parser.set_defaults(run=cmd_drain)
