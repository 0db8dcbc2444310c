"""``aosp``: the operator's command-line tool.

Exit codes: 0 success; 1 a check failed (verification, integrity, benchmark target);
2 usage error; 3 the store or a backend failed (the message names what).
Errors print as one line on stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
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


def _demo_writer(db_path: str, writer: int, count: int) -> list[str]:
    """One writer process: ``count`` transactions, each a versionstamped item + counter."""
    from backends.kv.sqlite import SqliteEngine
    from persistence import fdbtuple, kv
    from persistence.fdbtuple import Versionstamp

    engine = SqliteEngine(db_path)
    stamps = []
    for i in range(count):

        def body(tr: kv.Transaction, i: int = i) -> kv.VersionstampFuture:
            tr.set_versionstamped_key(
                fdbtuple.pack_with_versionstamp(("demo", "items", Versionstamp(None, 0))),
                fdbtuple.pack((writer, i, os.urandom(200))),
            )
            tr.add(fdbtuple.pack(("demo", "count")), (1).to_bytes(8, "little"))
            return tr.get_versionstamp()

        stamps.append(kv.run(engine, body).wait().hex())
    engine.close()
    return stamps


def cmd_demo(args: argparse.Namespace) -> int:
    """Several writer processes commit to the embedded store; verify nothing lost."""
    from backends.kv.sqlite import SqliteEngine
    from persistence import fdbtuple, kv

    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    db_path = data_dir / "aos.db"
    engine = SqliteEngine(db_path)
    kv.run(engine, lambda tr: tr.clear_range(*fdbtuple.range_of(fdbtuple.pack(("demo",)))))
    progress = _progress(not args.json)
    progress(f"{args.writers} writer processes x {args.items} transactions into {db_path}")
    start = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.writers) as pool:
        results = pool.starmap(
            _demo_writer, [(str(db_path), w, args.items) for w in range(args.writers)]
        )
    elapsed = time.perf_counter() - start
    rows = kv.run(
        engine, lambda tr: tr.get_range(*fdbtuple.range_of(fdbtuple.pack(("demo", "items"))))
    )
    count = kv.run(engine, lambda tr: tr.get(fdbtuple.pack(("demo", "count"))))
    total = args.writers * args.items
    seen = [fdbtuple.unpack(v)[:2] for _, v in rows]
    checks = {
        "every item stored once": len(rows) == total and len(set(seen)) == total,
        "counter matches": count == total.to_bytes(8, "little"),
        "per-writer order kept": all(
            [i for w2, i in seen if w2 == w] == list(range(args.items)) for w in range(args.writers)
        ),
        "versionstamps distinct": len({s for r in results for s in r}) == total,
        "sqlite integrity": engine.integrity_check() == [],
    }
    engine.close()
    summary = {
        "store": str(db_path),
        "writers": args.writers,
        "transactions": total,
        "seconds": round(elapsed, 3),
        "commits_per_second": round(total / elapsed, 1),
        "checks": checks,
        "all_verified": all(checks.values()),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"store            {db_path}")
        print(f"writers          {args.writers} processes")
        print(f"transactions     {total} in {elapsed:.2f} s ({total / elapsed:.0f} commits/s)")
        for name, ok in checks.items():
            print(f"{'ok ' if ok else 'FAIL'} {name}")
        print("all verified" if summary["all_verified"] else "VERIFICATION FAILED")
    return EXIT_OK if summary["all_verified"] else EXIT_CHECK_FAILED


# --------------------------------------------------------------------------- bench

SUITES = ("engine", "plane")


def cmd_bench(args: argparse.Namespace) -> int:
    """Run benchmark suites; print each figure against its peer or limit."""
    from persistence.benchmarks import Figure, engine, plane

    runners = {"engine": engine.run, "plane": plane.run}
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
    demo.add_argument("--writers", type=int, default=4, help="writer processes")
    demo.add_argument("--items", type=int, default=200, help="transactions per writer")
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
