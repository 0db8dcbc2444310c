"""The ``aosp bench`` command: the benchmark suites, plugged into ``aosp`` through the
``aosp.commands`` entry point of this distribution (``aosp`` itself knows no suite)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from aos_bench import Figure, require
from aosp.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Progress,
    UsageError,
    positive_seconds,
    print_json,
)
from aosp.cli.store import make_directory


def _progress(args: argparse.Namespace) -> Progress:
    """The run's progress: a line per suite, a bar too on a terminal."""
    return Progress("bench", enabled=not (args.quiet or args.json), unit="suite", summary=False)


SUITES = (
    "engine",
    "plane",
    "cas",
    "segments",
    "export-load",
    "spark",
    "spark-journal",
    "steady",
    "fairness",
    "fdb",
    "eventsourcing",
    "eventsourcing-scale",
)
DEFAULT_SUITES = ("engine", "plane", "cas")
FDB_SUITES: Final = ("fdb", "eventsourcing-scale")
"""The suites that measure on the FoundationDB cluster ``--fdb`` names."""
"""What ``aosp bench`` runs without a suite named: the quick ones (a minute or two)."""


def chosen_suites(named: list[str], fdb: str | None) -> list[str]:
    """The suites ``aosp bench SUITE...`` runs, each once in the order named: the quick
    :data:`DEFAULT_SUITES` when none is named, every suite for ``all`` (those of
    :data:`FDB_SUITES` only with a cluster, or named too)."""
    if "all" in named:
        return [s for s in SUITES if s not in FDB_SUITES or fdb or s in named]
    return list(dict.fromkeys(named or DEFAULT_SUITES))


SUITE_NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "plane": ("eventsourcing",),
    "eventsourcing": ("eventsourcing",),
    "eventsourcing-scale": ("eventsourcing", "psycopg"),
    "spark": ("pyarrow", "pyspark"),
    "spark-journal": ("pyarrow", "pyspark"),
    "steady": ("matplotlib",),
    "fairness": ("matplotlib",),
}
"""The packages a suite needs beyond the core install (this distribution's dependencies,
or for the Spark suites the ``spark`` extra's): checked for every chosen suite before any
runs."""


def check_suites(suites: list[str], fdb: str | None) -> None:
    """Refuse a run before it starts, rather than after the suites before a failing one:
    a suite whose packages are missing (``MissingDependency`` naming them and the extra),
    a suite of :data:`FDB_SUITES` without ``--fdb``."""
    for suite in suites:
        if suite in FDB_SUITES and not fdb:
            raise UsageError(f"the {suite} suite needs --fdb URL (a FoundationDB cluster)")
    for suite in suites:
        extra = "spark" if suite.startswith("spark") else "bench"
        require(f"the {suite} suite", extra, *SUITE_NEEDS.get(suite, ()))


STEADY_OPTIONS: Final = ("steady_seconds", "steady_worlds", "steady_rate", "plot")
"""The ``bench`` options (``dest``) only the steady suite reads."""


def check_suite_options(args: argparse.Namespace, suites: list[str]) -> None:
    """``UsageError`` for options of a suite the run leaves out (they would be ignored):
    the steady suite's, and ``--fdb`` (named suites none of which uses a cluster; ``all``
    takes it in)."""
    given = [f"--{d.replace('_', '-')}" for d in STEADY_OPTIONS if getattr(args, d) is not None]
    if given and "steady" not in suites:
        raise UsageError(
            f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for the steady suite, "
            f"which this run leaves out (it runs {' '.join(suites)}): name steady too"
        )
    if args.fdb is not None and not set(FDB_SUITES) & set(suites):
        raise UsageError(
            f"--fdb is for the {' and '.join(FDB_SUITES)} suites, which this run leaves out "
            f"(it runs {' '.join(suites)}): name one too, or all"
        )


def bench_suite(text: str) -> str:
    """argparse ``type=`` of ``SUITE``: a suite's name, or ``all``."""
    if text not in (*SUITES, "all"):
        raise argparse.ArgumentTypeError(
            f"no suite {text!r}: expected one of {', '.join(SUITES)}, or all"
        )
    return text


def cmd_bench(args: argparse.Namespace) -> int:
    """Run benchmark suites; print each figure against its peer or limit."""
    # the suites load here, not with the parser every ``aosp`` command builds
    from aos_bench import (
        cas,
        engine,
        eventsourcing_scale,
        export_load,
        fairness,
        fdb,
        plane,
        segments,
        spark,
        spark_journal,
        steady,
    )
    from aos_bench import eventsourcing as eventsourcing_suite

    # checked here, before any suite runs (SteadyConfig names its fields, not the options)
    if args.steady_worlds is not None and args.steady_worlds < 1:
        raise UsageError(f"--steady-worlds must be at least 1, not {args.steady_worlds}")
    if args.steady_rate is not None and not 0 < args.steady_rate < float("inf"):
        raise UsageError(f"--steady-rate must be a positive number, not {args.steady_rate}")
    steady_options = {
        "worlds": args.steady_worlds,
        "seconds": args.steady_seconds,
        "rate": args.steady_rate,
    }
    steady_config = steady.SteadyConfig(
        **{name: value for name, value in steady_options.items() if value is not None}
    )

    suites = chosen_suites(args.suites, args.fdb)
    check_suite_options(args, suites)
    check_suites(suites, args.fdb)
    plot = args.plot or steady.default_plot_path()
    if "steady" in suites:
        make_directory(plot.parent, "--plot")  # before the runs, not after them

    runners: dict[str, Callable[..., list[Figure]]] = {
        "engine": engine.run,
        "plane": plane.run,
        "cas": cas.run,
        "segments": segments.run,
        "export-load": export_load.run,
        "spark": spark.run,
        "spark-journal": spark_journal.run,
        "steady": lambda seconds, progress: steady.run(steady_config, plot, progress),
        "fairness": fairness.run,
        "fdb": functools.partial(fdb.run, fdb_url=args.fdb),
        "eventsourcing": eventsourcing_suite.run,
        "eventsourcing-scale": functools.partial(eventsourcing_scale.run, fdb_url=args.fdb),
    }
    figures: list[Figure] = []
    with _progress(args) as progress:
        for done, suite in enumerate(suites):
            progress.count(done, len(suites))
            figures.extend(runners[suite](seconds=args.seconds, progress=progress.message))
        progress.count(len(suites), len(suites))
    if args.json:
        print_json([f.to_json() for f in figures])
    else:
        for f in figures:
            target = (
                "" if f.target is None else f"  target {f.target:g}x {'ok' if f.met else 'MISSED'}"
            )
            print(f"{f.name}\n  {f.value:,.1f} {f.unit} vs {f.baseline_value:,.1f} ({f.baseline})")
            spread = "" if f.spread is None else f" [{f.spread[0]:.2f}-{f.spread[1]:.2f}]"
            print(f"  ratio {f.ratio:.2f}x{spread}{target}")
    return EXIT_CHECK_FAILED if any(f.met is False for f in figures) else EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``bench`` (the ``aosp.commands`` entry point)."""
    bench = sub.add_parser(
        "bench",
        parents=[common],
        help="run benchmarks and print ratios against their peers",
        description="Each figure is measured in the same run as the peer or limit it is "
        "compared with; exit 1 if a figure misses its target.",
    )
    bench.add_argument(
        "suites",
        nargs="*",
        type=bench_suite,
        metavar="SUITE",
        help=f"{', '.join(SUITES)}; or all (fdb only with --fdb). Default: the quick ones, "
        f"{' '.join(DEFAULT_SUITES)}",
    )
    bench.add_argument(
        "--seconds",
        type=positive_seconds,
        default=2.0,
        help="time per measurement (default 2; at most a year)",
    )
    bench.add_argument(
        "--fdb",
        metavar="URL",
        help="a FoundationDB cluster for the fdb suite (fdb:///path/fdb.cluster?...); "
        "without it the fdb suite is left out of `all`",
    )
    bench.add_argument(
        "--steady-seconds",
        type=positive_seconds,
        help="steady suite: length of each of its two runs (default 180; --seconds does "
        "not apply to it; at least 4 retention windows of 10 s)",
    )
    bench.add_argument("--steady-worlds", type=int, help="steady suite: worlds (default 100)")
    bench.add_argument(
        "--steady-rate",
        type=float,
        help="steady suite: items enqueued per second over all worlds (default 100)",
    )
    bench.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="steady suite: where to write the plot (default: steady-state.png in the "
        "system's temporary directory; the path is printed)",
    )
    bench.set_defaults(run=cmd_bench)
