"""What every ``aosp`` command shares: exit codes, output (text or ``--json``), progress,
and the one-line error convention."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, NoReturn, TextIO

from persistence.errors import elide

EXIT_OK: Final = 0
"""The command did what was asked and every check passed."""
EXIT_CHECK_FAILED: Final = 1
"""A check failed: verification, integrity (fsck), conformance, a benchmark target; or the
store refused what was asked for a reason no retry changes (:class:`Refused`)."""
EXIT_USAGE: Final = 2
"""Bad arguments or input (argparse's own code), or a value the plane refused."""
EXIT_BACKEND: Final = 3
"""The store or a backend failed, or the named thing does not exist; the message says which."""
EXIT_CONFLICT: Final = 4
"""The store moved under the command (an optimistic precondition failed): retry."""
EXIT_INTERNAL: Final = 5
"""A bug in aosp itself (an unexpected exception); ``--verbose`` shows where."""
EXIT_SIGPIPE: Final = 128 + 13
"""stdout was closed by its reader (``aosp ... | head``): the shell's code for SIGPIPE."""


class UsageError(Exception):
    """A command was given arguments it cannot act on; the message says which."""


class Refused(Exception):
    """The store refuses what the command asks, for a reason that a retry does not change
    (a promotion the fences refuse): ``aosp: refused error: ...``, exit
    :data:`EXIT_CHECK_FAILED`. The message says what would be accepted."""


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse ``type=`` for an integer option that may not go below ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


MAX_SECONDS: Final = 86_400.0 * 365
"""The longest duration an option takes (a year): larger ones overflow the clocks' waits."""


def positive_seconds(text: str) -> float:
    """An argparse type: a positive number of seconds, at most :data:`MAX_SECONDS`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds up to {MAX_SECONDS:.0f} (a year), not {text}"
        )
    return value


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and its noun agreeing, the count with thousands separators: ``1 segment``,
    ``0 segments``, ``1,024 bytes`` (``plural`` when it is not ``singular`` + s: ``1 CAS
    body``, ``2 CAS bodies``)."""
    return f"{count:,} {noun(count, singular, plural)}"


def noun(count: int, singular: str, plural: str | None = None) -> str:
    """The noun agreeing with ``count`` (``n/total`` figures agree with their total)."""
    return singular if count == 1 else plural or f"{singular}s"


def report_error(kind: str, what: str) -> None:
    """The one-line error on stderr: ``aosp: <kind> error: <what>`` (a message of several
    lines is joined into one, so that scripts can read the last line of stderr; a long one
    keeps its start and end: ``errors.elide``)."""
    text = " ".join(line.strip() for line in what.splitlines() if line.strip())
    print(f"aosp: {kind} error: {elide(text)}", file=sys.stderr)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are the one-line ``aosp: usage error: ...`` (exit
    2) rather than argparse's usage block; ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        report_error("usage", f"{message} (see {self.prog} --help)")
        sys.exit(EXIT_USAGE)


def command_group(sub: Any, name: str, help: str, metavar: str = "ACTION") -> Any:
    """Add the command ``name`` whose subcommands (``aosp NAME ACTION``) are added to what
    it returns; ``help`` says what the group is about."""
    group = sub.add_parser(name, help=help, description=f"{help[:1].upper()}{help[1:]}.")
    return group.add_subparsers(
        dest="action",
        required=True,
        metavar=metavar,
        help=f"what to do (`aosp {name} {metavar} --help` shows its options)",
    )


def common_options() -> argparse.ArgumentParser:
    """Options every command takes (``--json``, ``--verbose``, ``--stats``, ``--quiet``)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    group.add_argument("--verbose", action="store_true", help="print tracebacks on errors")
    group.add_argument(
        "--stats", action="store_true", help="print per-operation counts and latencies (stderr)"
    )
    group.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def print_json(value: Any, out: TextIO | None = None) -> None:
    """``value`` as indented JSON on stdout."""
    print(json.dumps(value, indent=2, sort_keys=False), file=out or sys.stdout)


def cell(value: Any) -> str:
    """A value as a text cell or field shows it: ``None`` is ``-``."""
    return "-" if value is None else str(value)


def terminal(stream: TextIO) -> Any:
    """A ``rich`` console on ``stream``, a terminal: it knows the terminal's width (no
    markup or highlighting: cells are shown as they are)."""
    from rich.console import Console

    return Console(file=stream, markup=False, highlight=False, emoji=False)


SHORT_CELL: Final = 12
"""On a terminal, a column this wide or narrower is never cut; a wider one gives way to fit
the terminal's width, down to this many characters (its cells end in ``…``)."""


def fitted(columns: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> list[int]:
    """Column widths for a table in ``width`` characters (two between columns): first
    cells over :data:`SHORT_CELL` give way (down to it, or to their header), then headers
    wider than their cells, the widest first; a cut ends in ``…``."""
    content = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    widths = [max(len(c), w) for c, w in zip(columns, content, strict=True)]
    short = [max(1, min(w, SHORT_CELL)) for w in content]
    floors = ([max(len(c), w) for c, w in zip(columns, short, strict=True)], short)
    for floor in floors:
        while sum(widths) + 2 * (len(widths) - 1) > width:
            over = [w - f for w, f in zip(widths, floor, strict=True)]
            widest = max(range(len(widths)), key=lambda i: over[i])
            if over[widest] <= 0:
                break
            widths[widest] -= 1
    return widths


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], out: TextIO | None = None
) -> None:
    """Rows as an aligned text table (columns in the order given; ``None`` shows ``-``), on
    stdout or ``out``. On a terminal the table fits its width (``rich``: the widest cells
    end in ``…``); elsewhere every cell is whole, for scripts and pipes."""
    stream = out or sys.stdout
    if not rows:
        print("(none)", file=stream)
        return
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    if stream.isatty():
        from rich.table import Table

        console = terminal(stream)
        table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
        for column, width in zip(columns, fitted(columns, cells, console.width), strict=True):
            table.add_column(column, width=width, overflow="ellipsis", no_wrap=True)
        for line in cells:
            table.add_row(*line)
        console.print(table, crop=False)
        return
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    for line in [list(columns), *cells]:
        print(
            "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip(), file=stream
        )


def short_id(full: str) -> str:
    """An id as a person reads it in a table: its first 8 hex digits (a prefix every ``-u``
    and ``-w`` takes, while it is unique)."""
    return full[:8]


def iso_time(ns: int) -> str:
    """A time in nanoseconds since the epoch as ISO 8601 in UTC, to the second."""
    stamp = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")


def print_fields(fields: dict[str, Any]) -> None:
    """``name  value`` lines, names aligned (``None`` shows ``-``)."""
    width = max((len(k) for k in fields), default=0)
    for name, value in fields.items():
        print(f"{name:<{width}}  {cell(value)}")


SIZE_UNITS: Final = ("KiB", "MiB", "GiB", "TiB", "PiB")
"""The binary units :func:`human_size` steps through after bytes."""


def human_size(size: int) -> str:
    """A byte count as a person reads it: ``758 B``, ``9.3 KiB``, ``3.6 MiB`` (the exact
    count stays in ``--json``)."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in SIZE_UNITS:
        value /= 1024
        if round(value, 1) < 1024 or unit == SIZE_UNITS[-1]:
            break
    return f"{value:.1f} {unit}"


ELLIPSIS: Final = "…"
"""What ends a cell cut short (a cut is never silent)."""


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut short, it ends with an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def short_seq(seq: str) -> str:
    """An inbox sequence (24 hex digits, mostly leading zeros on SQLite) as a table shows
    it: without its leading zeros (the full digits end the same way; ``--after`` takes the
    full form)."""
    return seq.lstrip("0") or "0"


class Progress:
    """Progress of long work on stderr: on a terminal a live ``rich`` bar (count, total,
    elapsed time; messages print above it), elsewhere a line at most every ``interval``
    seconds and one at the end (none with ``summary=False``: work that prints its own
    lines), nothing when disabled. ``unit`` is singular (``units`` its plural, when not
    ``unit`` + s). Use as a context manager."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        enabled: bool = True,
        unit: str = "",
        units: str | None = None,
        interval: float = 1.0,
        stream: TextIO | None = None,
        summary: bool = True,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.unit = unit
        self.units = units
        self.enabled = enabled
        self.interval = interval
        self.summary = summary
        self.stream = stream or sys.stderr
        self._tty = self.stream.isatty()
        self._start = time.perf_counter()
        self._shown = self._start
        self._bar: Any = None
        """The ``rich`` progress display, while it is live (on a terminal)."""

    def __enter__(self) -> Progress:
        if self.enabled and self._tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}", markup=False),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}", markup=False),
                console=terminal(self.stream),
                # what the work prints goes where it was sent (stdout may be a pipe)
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._bar.add_task(self.label, total=self.total, unit=self._unit(), note="")
            self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._update("")
            self._bar.stop()
            self._bar = None
        elif self.summary:
            self._draw()

    def advance(self, amount: int = 1, note: str = "") -> None:
        """Count ``amount`` more units done; redraw if due."""
        self.done += amount
        self._due(note)

    def count(self, done: int, total: int | None) -> None:
        """``done`` of ``total`` units are done (work that counts for itself)."""
        self.done, self.total = done, total
        self._due("")

    def message(self, text: str) -> None:
        """A free-form progress line (above the bar on a terminal)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(f"... {text}")
        else:
            print(f"... {text}", file=self.stream, flush=True)

    def _unit(self) -> str:
        count = self.total or self.done
        return noun(count, self.unit, self.units) if self.unit else ""

    def _due(self, note: str) -> None:
        if self._bar is not None:
            self._update(note)  # rich redraws at its own pace
            return
        now = time.perf_counter()
        if self.summary and now - self._shown >= self.interval:
            self._shown = now
            self._draw(note)

    def _update(self, note: str) -> None:
        (task,) = self._bar.task_ids
        self._bar.update(task, completed=self.done, total=self.total, unit=self._unit(), note=note)

    def _draw(self, note: str = "") -> None:
        """The line of a run off a terminal: ``... label [###   ] done/total unit 1.2s``."""
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self._start
        unit = f" {self._unit()}" if self.unit else ""
        if self.total:
            fraction = min(1.0, self.done / self.total)
            bar = "#" * int(fraction * 24)
            text = f"{self.label} [{bar:<24}] {self.done}/{self.total}{unit}"
        else:
            text = f"{self.label} {self.done}{unit}"
        text += f" {elapsed:.1f}s" + (f" {note}" if note else "")
        print(f"... {text}", file=self.stream, flush=True)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Inside, Ctrl-C (SIGINT) raises ``KeyboardInterrupt``, the way out of a command that
    runs until it: also in a process started with SIGINT ignored (as a non-interactive
    shell starts its background jobs), where Python installs no handler of its own. A
    handler someone installed is left as it is; off the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(
        signal.SIGINT
    ) not in (signal.SIG_IGN, signal.SIG_DFL):
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
