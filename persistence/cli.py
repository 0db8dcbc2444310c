"""``aosp``: the operator's command-line tool.

Exit codes: 0 success; 1 a check failed (verification, integrity, benchmark target);
2 usage error; 3 the store or a backend failed (the message names what).
Errors print as one line on stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from persistence.errors import PersistError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_BACKEND = 3

DEFAULT_DATA_DIR = Path(os.environ.get("AOSP_DATA_DIR", "aosp-data"))


def _progress(enabled: bool) -> Any:
    def show(message: str) -> None:
        if enabled:
            print(f"... {message}", file=sys.stderr, flush=True)

    return show


# --------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the world-host simulation on the embedded default store and verify it."""
    from persistence import demo

    config = demo.DemoConfig(
        data_dir=args.data_dir, worlds=args.worlds, writers=args.writers, items=args.items
    )
    report = demo.run(config, _progress(not args.json))
    summary = {
        "store": str(args.data_dir),
        "worlds": report.worlds,
        "items": report.items,
        "journal_entries": report.entries,
        "snapshots": report.snapshots,
        "segments": report.segments,
        "worlds_restored": report.restored,
        "blobs": report.blobs,
        "blob_bytes": report.blob_bytes,
        "seconds": round(report.seconds, 3),
        "items_per_second": round(report.items / report.seconds, 1) if report.seconds else 0,
        "checks": report.checks,
        "all_verified": report.all_verified,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        rows = [
            ("store", summary["store"]),
            ("worlds", report.worlds),
            ("writer processes", args.writers),
            ("inbox items", f"{report.items} ({summary['items_per_second']} items/s end to end)"),
            ("journal entries", report.entries),
            ("snapshots", report.snapshots),
            ("segments", report.segments),
            ("blobs", f"{report.blobs} ({report.blob_bytes / 1e6:.1f} MB)"),
        ]
        for name, value in rows:
            print(f"{name:<18}{value}")
        for name, ok in report.checks.items():
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
        verdict = f"all {report.worlds} worlds verified"
        print(verdict if report.all_verified else "VERIFICATION FAILED")
    return EXIT_OK if report.all_verified else EXIT_CHECK_FAILED


# --------------------------------------------------------------------------- bench

SUITES = ("engine", "plane", "cas")


def cmd_bench(args: argparse.Namespace) -> int:
    """Run benchmark suites; print each figure against its peer or limit."""
    from persistence.benchmarks import Figure, cas, engine, plane

    runners = {"engine": engine.run, "plane": plane.run, "cas": cas.run}
    figures: list[Figure] = []
    for suite in args.suites or SUITES:
        figures.extend(runners[suite](seconds=args.seconds, progress=_progress(not args.json)))
    if args.json:
        print(json.dumps([f.to_json() for f in figures], indent=2))
    else:
        for f in figures:
            target = (
                "" if f.target is None else f"  target {f.target:g}x {'ok' if f.met else 'MISSED'}"
            )
            print(f"{f.name}\n  {f.value:,.1f} {f.unit} vs {f.baseline_value:,.1f} ({f.baseline})")
            print(f"  ratio {f.ratio:.2f}x{target}")
    return EXIT_CHECK_FAILED if any(f.met is False for f in figures) else EXIT_OK


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog="aosp",
        description="Operator tool of the AOS hosted persistence plane.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 usage error, 3 store/backend error.",
    )
    parser.add_argument("--verbose", action="store_true", help="print tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the main job on the embedded default store")
    demo.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="store directory")
    demo.add_argument("--worlds", type=int, default=8, help="worlds to simulate")
    demo.add_argument("--writers", type=int, default=4, help="writer processes")
    demo.add_argument("--items", type=int, default=200, help="inbox items per writer")
    demo.add_argument("--json", action="store_true", help="machine-readable summary")
    demo.set_defaults(run=cmd_demo)

    bench = sub.add_parser("bench", help="run benchmarks and print ratios against baselines")
    bench.add_argument("suites", nargs="*", choices=[*SUITES, []], metavar="SUITE")
    bench.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    bench.add_argument("--json", action="store_true", help="machine-readable figures")
    bench.set_defaults(run=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aosp`` console command."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except PersistError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"aosp: {exc.kind} error: {exc}", file=sys.stderr)
        return EXIT_BACKEND
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
