"""``aosp``: the operator's command-line tool.

Every command takes ``--help``, ``--json`` (machine-readable output on stdout), ``--verbose``
(tracebacks), ``--stats`` (per-operation counts and latencies on stderr) and ``--quiet`` (no
progress). Commands that open a store take ``--data-dir`` (the embedded default) or
``--kv URL --objects URL``, not both. An option the command would ignore in the combination
given is a usage error, before anything is opened.

Exit codes: 0 success; 1 a check failed (verification, fsck, conformance, a benchmark
target); 2 usage error or input the plane refused; 3 the store or a backend failed, the
named thing does not exist, or a file the command was given cannot be read or written;
4 a conflict (the store moved: retry); a promotion the fences refuse is 1 (``refused``: no
retry changes it); 5 an internal error (a bug in aosp). Errors print as
one line on stderr (``aosp: <kind> error: <what>``); ``--verbose`` adds the traceback. A
closed stdout (``aosp ... | head``) ends the command quietly with 141, as SIGPIPE would.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from aosp.cli import (
    compact,
    data,
    drain,
    fsck,
    inbox,
    inspect,
    jobs,
    segments,
    settle,
    snapshots,
    spark,
    status,
)
from aosp.cli.console import (
    EXIT_BACKEND,
    EXIT_CHECK_FAILED,
    EXIT_CONFLICT,
    EXIT_INTERNAL,
    EXIT_SIGPIPE,
    EXIT_USAGE,
    OneLineParser,
    Refused,
    UsageError,
    common_options,
    print_json,
    print_table,
    report_error,
)
from aosp.cli.store import (
    check_kernel,
    check_store_options,
    command_options,
    named_for_cli,
    store_options,
)
from persistence import telemetry
from persistence.errors import (
    Conflict,
    MissingDependency,
    PersistError,
    ReceiptHorizonFence,
    Validation,
)

COMMAND_MODULES = (
    jobs,
    inspect,
    status,
    data,
    inbox,
    snapshots,
    segments,
    compact,
    drain,
    settle,
    fsck,
    spark,
)
"""Each registers its commands with ``register(subparsers, common, store)``."""

PLUGIN_GROUP = "aosp.commands"
"""The entry-point group of commands other distributions add, each a ``register`` like a
command module's: the benchmarks' ``bench`` (distribution ``aos-persistence-bench``)."""

PLUGINS = {
    "bench": (
        "run benchmarks and print ratios against their peers",
        "pip install -c constraints.txt -e ./benchmarks (the distribution aos-persistence-bench, "
        "in a source checkout)",
    ),
}
"""Commands a known distribution adds: what each does and how to install it. Without the
distribution, the command is still listed and says how, instead of being an unknown choice."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = OneLineParser(
        prog="aosp",
        description="Operator tool of the AOS hosted persistence plane.",
        epilog="Exit codes: 0 ok, 1 a check failed or a refusal no retry changes, 2 usage "
        "error, 3 store/backend error or not found, 4 conflict (retry), 5 internal error.",
    )
    parser.add_argument("--version", action="version", version=f"aosp {_version()}")
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="what to do (`aosp COMMAND --help` shows its options)",
    )
    common, store = common_options(), store_options()
    for module in COMMAND_MODULES:
        module.register(sub, common, store)
    broken: dict[str, str] = {}
    for plugin in entry_points(group=PLUGIN_GROUP):
        try:
            register = plugin.load()
        except Exception as exc:  # a broken plugin must not take every other command down
            broken[plugin.name] = f"{type(exc).__name__}: {exc}"
            continue
        register(sub, common, store)
    for name in sorted(broken.keys() | PLUGINS.keys()):
        if name not in sub.choices:
            help_, install = PLUGINS.get(name, ("a plugin command", "reinstall its distribution"))
            if name in broken:
                problem = f"could not be loaded ({broken[name]:.300})"
                _add_missing(sub, common, name, help_, f"aosp {name} {problem}: {install}")
            else:
                _add_missing(sub, common, name, help_, f"aosp {name} is not installed: {install}")
    return parser


def _add_missing(
    sub: Any, common: argparse.ArgumentParser, name: str, help_: str, why: str
) -> None:
    """List the plugin command ``name`` that is not installed or could not be loaded:
    whatever its arguments, it fails saying ``why`` (``main`` lets it take any)."""
    missing = sub.add_parser(name, parents=[common], help=f"{help_} (unavailable)", description=why)
    missing.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    missing.set_defaults(run=functools.partial(_unavailable, why), any_arguments=True)


def _unavailable(why: str, args: argparse.Namespace) -> int:
    """The run of a plugin command that is not there: say why, and how to get it."""
    raise MissingDependency(why)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aos-persistence")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _kind_and_code(error: PersistError) -> tuple[str, int]:
    """The kind the one-line error names and the exit code of ``error``. The receipt-horizon
    fence is a ``Conflict`` to the library, but nothing a retry changes: the snapshot's
    horizon is fixed when it is indexed, so it is a refusal (exit 1), not a retry (4)."""
    if isinstance(error, ReceiptHorizonFence):
        return "refused", EXIT_CHECK_FAILED
    if isinstance(error, Validation):
        return error.kind, EXIT_USAGE
    if isinstance(error, Conflict):
        return error.kind, EXIT_CONFLICT
    return error.kind, EXIT_BACKEND


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aosp`` console command."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "any_arguments", False):  # as parse_args would
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    with telemetry.collect_stats() as stats:
        try:
            check_store_options(args)  # one store named, before anything is opened
            if getattr(args, "kernel", None) is not None:
                check_kernel(args.kernel)  # a bad --kernel is a usage error before any work
            code: int = args.run(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        except UsageError as exc:
            report_error("usage", str(exc))
            code = EXIT_USAGE
        except Refused as exc:
            report_error("refused", str(exc))
            code = EXIT_CHECK_FAILED
        except PersistError as exc:
            if args.verbose:
                traceback.print_exc()
            named = named_for_cli(exc, args, command_options(parser, args))
            kind, code = _kind_and_code(named)
            report_error(kind, str(named))
        except BrokenPipeError:
            # The reader went away (``aosp ... | head``): stop quietly, as SIGPIPE would.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = EXIT_SIGPIPE
        except KeyboardInterrupt:
            code = 130
        except OSError as exc:
            # A file the command was told to read or write (the store's own I/O errors are
            # typed Backend errors above): the environment, not a bug in aosp.
            if args.verbose:
                traceback.print_exc()
            report_error("io", str(exc))
            code = EXIT_BACKEND
        except Exception as exc:
            if args.verbose:
                traceback.print_exc()
            hint = "" if args.verbose else " (--verbose shows the traceback)"
            report_error("internal", f"{type(exc).__name__}: {exc}{hint}")
            code = EXIT_INTERNAL
        finally:
            if getattr(args, "stats", False):
                _print_stats(stats, as_json=args.json)
    return code


STATS_COLUMNS = ("operation", "calls", "errors", "mean_ms", "p50_ms", "p99_ms", "max_ms")
"""The columns of ``--stats`` as text: a line per operation."""


def _print_stats(stats: telemetry.StatsRecorder, as_json: bool) -> None:
    """``--stats`` on stderr: a JSON object with ``--json``, else an aligned line per
    operation."""
    operations = stats.to_json()
    if not operations:
        print("stats: no plane operations", file=sys.stderr)
    elif as_json:
        print_json({"stats": operations}, out=sys.stderr)
    else:
        rows = [
            {
                "operation": name,
                **{k: f"{v:.3f}" if k.endswith("_ms") else v for k, v in figures.items()},
            }
            for name, figures in operations.items()
        ]
        print_table(rows, STATS_COLUMNS, out=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
