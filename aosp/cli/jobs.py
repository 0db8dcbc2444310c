"""Whole jobs: ``demo`` (the README's main job) and ``conformance``."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from aosp.cli.console import (
    EXIT_BACKEND,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    UsageError,
    positive_seconds,
    print_json,
    report_error,
)
from aosp.cli.store import DEFAULT_DATA_DIR, data_dir, make_directory, store_urls
from segments import open_plane

if TYPE_CHECKING:
    from conformance.context import Profile
    from conformance.torture.servers import ServerFaults
    from persistence.kv import Engine


def _progress(args: argparse.Namespace, label: str, unit: str) -> Progress:
    """The progress of a job that prints a line per step: a bar too on a terminal."""
    return Progress(label, enabled=not (args.quiet or args.json), unit=unit, summary=False)


DEMO_LIMITS: Final = {"worlds": 10_000, "writers": 64, "items": 1_000_000}
"""The demo's sizes: a process per writer (a pool of 100,000 was started once)."""


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the world-host simulation on the embedded default store and verify it."""
    from aosp import demo

    for name, most in DEMO_LIMITS.items():
        if not 1 <= getattr(args, name) <= most:
            raise UsageError(f"--{name} must be 1 to {most:,}, not {getattr(args, name)}")
    make_directory(args.data_dir, "--data-dir")
    config = demo.DemoConfig(
        data_dir=args.data_dir, worlds=args.worlds, writers=args.writers, items=args.items
    )
    with _progress(args, "demo", "item") as progress:
        report = demo.run(config, progress.message, progress.count)
    summary = {
        "store": str(args.data_dir),
        "universe": report.universe,
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
        print_json(summary)
    else:
        rows = [
            ("store", summary["store"]),
            ("universe", report.universe),
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
        verdict = (
            "1 world verified" if report.worlds == 1 else f"all {report.worlds} worlds verified"
        )
        print(verdict if report.all_verified else "VERIFICATION FAILED")
    return EXIT_OK if report.all_verified else EXIT_CHECK_FAILED


def cmd_conformance(args: argparse.Namespace) -> int:
    """Run the conformance suite against an engine and object store; write the reports."""
    from backends.objects import open_object_store
    from conformance.context import PROFILES
    from conformance.runner import run_suite, skipped_report
    from persistence.errors import Backend, NotFound

    if args.list:
        return _list_cases(args)
    profile = _sized(PROFILES[args.profile], args)
    servers = _server_faults(args)
    kv_url, objects_url = conformance_store(args)
    make_directory(args.report, "--report")  # before the run, not after it
    try:
        engine = _conformance_engine(kv_url, embedded=args.data_dir is not None)
        plane = open_plane(engine, open_object_store(objects_url))
    except (Backend, NotFound) as exc:
        # An unreachable backend: every case skipped, said plainly, and a failing exit.
        reason = f"backend unavailable: {exc}"
        report = skipped_report(kv_url, objects_url, profile, reason, args.door)
        report_error(exc.kind, f"backend unavailable, nothing ran: {exc}")
        available = False
    else:
        available = True
        with _progress(args, "conformance", "case") as progress:
            report = run_suite(
                plane,
                profile,
                kv_url=kv_url,
                objects_url=objects_url,
                cases=args.case or None,
                servers=servers,
                progress=progress.message,
                door=args.door,
                tally=progress.count,
            )
        plane.engine.close()
    junit, summary_path = report.write(args.report)
    summary = report.summary()
    if args.json:
        print_json(summary)
    else:
        for r in report.results:
            line = f"{r.outcome.upper():<8}{r.name} ({r.seconds:.1f}s)"
            print(line + (f": {r.message.splitlines()[0]}" if r.message else ""))
        print(
            f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} "
            f"skipped in {summary['seconds']}s; reports: {junit}, {summary_path}"
        )
    if not available:
        return EXIT_BACKEND
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


def conformance_store(args: argparse.Namespace) -> tuple[str, str]:
    """The engine and object-store URLs ``conformance`` runs on: ``--kv``/``--objects``
    (each ``memory://`` unless given), or the embedded store in ``--data-dir`` as every
    store command names it, its engine wrapped for fault injection (``faults+``) so that
    the fault case runs too. Not ``$AOSP_DATA_DIR``, nor ``./aosp-data``: the cases leave
    their test universes behind, so they write into a store only when it is named."""
    if args.data_dir is None:
        return args.kv or "memory://", args.objects or "memory://"
    if args.kv is not None or args.objects is not None:
        raise UsageError("--data-dir or --kv/--objects, not both")
    make_directory(args.data_dir, "--data-dir")
    kv_url, objects_url = store_urls(args)
    return f"faults+{kv_url}", objects_url


def _conformance_engine(url: str, *, embedded: bool) -> Engine:
    """The engine the suite runs on. The ``--data-dir`` store is opened as the store
    commands open theirs: an existing database file must be a store (an empty or foreign
    one is refused and left untouched), and only a missing one is created."""
    from backends.kv import open_engine
    from persistence.errors import NotFound

    if not embedded:
        return open_engine(url)
    try:
        return open_engine(url, create=False)
    except NotFound:
        return open_engine(url, create=True)


def _sized(profile: Profile, args: argparse.Namespace) -> Profile:
    """``profile`` with the crash cases' length and kill rates the options give."""
    changes = {
        "seconds": args.torture_seconds,
        "mean_kill_interval": args.kill_interval,
        "server_kill_interval": args.server_kill_interval,
    }
    given = {field: value for field, value in changes.items() if value is not None}
    return dataclasses.replace(profile, torture=dataclasses.replace(profile.torture, **given))


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring, whole, on one line (reST's double backquotes as
    single ones)."""
    paragraph = (doc or "").strip().split("\n\n")[0]
    text = " ".join(paragraph.split()).replace("``", "`")
    end = re.search(r"[.!?](?=\s+[A-Z`(])", text)
    return text if end is None else text[: end.end()]


def _list_cases(args: argparse.Namespace) -> int:
    """``conformance --list``: every case with the first sentence of its description,
    wrapped to the terminal's width (never cut)."""
    from conformance.suite import CASES

    rows = [{"case": name, "what": first_sentence(case.__doc__)} for name, case in CASES.items()]
    if args.json:
        print_json(rows)
        return EXIT_OK
    name_width = max(len(row["case"]) for row in rows)
    width = max(40, shutil.get_terminal_size((100, 24)).columns - name_width - 3)
    print(f"{'case':<{name_width}}  what")
    for row in rows:
        lines = textwrap.wrap(row["what"], width, break_long_words=False, break_on_hyphens=False)
        print(f"{row['case']:<{name_width}}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<{name_width}}  {line}")
    return EXIT_OK


def _server_faults(args: argparse.Namespace) -> ServerFaults | None:
    """The server faults the options name (crash 2), checked before anything runs."""
    from conformance.suite import CASES
    from conformance.torture.servers import CommandServers, LocalCluster

    unknown = [name for name in args.case or () if name not in CASES]
    if unknown:
        raise UsageError(f"unknown --case {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    commands = (args.server_kill_command, args.server_restart_command)
    if (commands[0] is None) != (commands[1] is None):
        raise UsageError("--server-kill-command and --server-restart-command go together")
    if args.fdb_local is not None and commands[0] is not None:
        raise UsageError("--fdb-local or the server commands, not both")
    if args.fdb_local is not None:
        return LocalCluster(args.fdb_local)
    if commands[0] is not None:
        return CommandServers(commands[0], commands[1])
    return None


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``demo`` and ``conformance``."""
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the main job (a verified world-host simulation) on the embedded store",
        description="Several writer processes enqueue all five inbox item kinds into many "
        "worlds; drains, snapshots, baseline promotions and segment export run alongside; "
        "then every world is restored and checked against full replay, and fsck runs.",
    )
    demo.add_argument(
        "--data-dir",
        type=data_dir,
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help="the embedded store it writes (DIR/aos.db, DIR/objects/), created if missing "
        "(default: $AOSP_DATA_DIR, else ./aosp-data)",
    )
    demo.add_argument(
        "--worlds",
        type=int,
        default=32,
        help=f"worlds to simulate (default 32, at most {DEMO_LIMITS['worlds']:,})",
    )
    demo.add_argument(
        "--writers",
        type=int,
        default=4,
        help=f"writer processes (default 4, at most {DEMO_LIMITS['writers']})",
    )
    demo.add_argument(
        "--items",
        type=int,
        default=500,
        help=f"inbox items per writer (default 500, at most {DEMO_LIMITS['items']:,})",
    )
    demo.set_defaults(run=cmd_demo)

    conf = sub.add_parser(
        "conformance",
        parents=[common],
        help="run the conformance suite against a backend",
        description="Runs the suite in fresh universes of the named backend and writes a "
        "JUnit XML report and a JSON summary.",
    )
    store = conf.add_argument_group(
        "store",
        "The store the cases run on, in fresh universes they leave behind: memory:// unless "
        "one is named (never $AOSP_DATA_DIR or ./aosp-data by default).",
    )
    store.add_argument(
        "--data-dir",
        type=data_dir,
        metavar="DIR",
        help="an embedded store (DIR/aos.db, DIR/objects/, created if missing), as the other "
        "commands take it; its engine is wrapped for fault injection (faults+sqlite://) so "
        "that the fault case runs too (default: none, memory://)",
    )
    store.add_argument(
        "--kv",
        metavar="URL",
        help="engine URL: memory://, sqlite:///..., fdb://..., or faults+ before one for the "
        "fault case (default: memory://)",
    )
    store.add_argument(
        "--objects",
        metavar="URL",
        help="object store URL: memory://, file:///..., s3://... (default: memory://)",
    )
    conf.add_argument(
        "--profile",
        choices=["quick", "full"],
        default="quick",
        help="case sizes: quick (for CI, the default) or full (for nightly runs: ten times the "
        "worlds, a 30 s torture, every competing writer and 24 seeded random runs in the "
        "fault matrix)",
    )
    conf.add_argument(
        "--door",
        choices=["blocking", "asyncio"],
        default="blocking",
        help="call the plane blocking (the default), or await every operation on its "
        "AsyncPlane from an event loop (the crash torture's processes too)",
    )
    conf.add_argument(
        "--report",
        type=Path,
        default=Path("conformance-report"),
        metavar="DIR",
        help="where to write junit.xml and summary.json (default: ./conformance-report)",
    )
    conf.add_argument(
        "--case",
        action="append",
        metavar="NAME",
        help="run only this case (repeatable; --list names them)",
    )
    conf.add_argument(
        "--list", action="store_true", help="list the cases with what each checks, and exit"
    )
    conf.add_argument(
        "--fdb-local",
        type=Path,
        metavar="DIR",
        help="crash 2 kills and restarts the fdbserver processes of this `fdb-local start DIR "
        '"" 3` cluster (never its coordinator)',
    )
    conf.add_argument(
        "--server-kill-command",
        metavar="CMD",
        help="crash 2: a shell command that SIGKILLs one server process of the cluster under "
        "test (AOSP_SEED in its environment; what it prints names the victim)",
    )
    conf.add_argument(
        "--server-restart-command",
        metavar="CMD",
        help="crash 2: a shell command that restarts the server the kill command killed",
    )
    conf.add_argument(
        "--torture-seconds",
        type=positive_seconds,
        metavar="S",
        help="crash 1 and 2: how long the processes run and are killed (the profile's: "
        "4 quick, 30 full)",
    )
    conf.add_argument(
        "--kill-interval",
        type=positive_seconds,
        metavar="S",
        help="crash 1 and 2: mean seconds between two worker kills (0.4 quick, 0.3 full)",
    )
    conf.add_argument(
        "--server-kill-interval",
        type=positive_seconds,
        metavar="S",
        help="crash 2: mean seconds between two server kills (1 quick, 2 full)",
    )
    conf.set_defaults(run=cmd_conformance)
