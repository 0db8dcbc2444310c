"""The first-hour transcript of docs/cli.md: each ``$ aosp ...`` command of its ``console``
block, run for real in a fresh directory, must print what the block shows (ids, times and
rates aside: an id the block shows stands for the one the run made, consistently, and is
given to later commands in its place).

``python -m tests.cli.transcript --write`` runs the commands and writes their output into
the block (after a change of the tool's output; review the diff)."""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.cli.conftest import ROOT, aosp

DOC = ROOT / "docs" / "cli.md"
BLOCK = re.compile(r"(<!-- transcript -->\n```console\n)(.*?)(```\n)", re.S)
HOME = "/home/me"
"""The directory the transcript shows its commands run in (the test's temporary one)."""

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
TOKEN = re.compile(
    rf"({UUID}|\b[0-9a-f]{{24}}\b|\b[0-9a-f]{{8}}\b|\b[0-9a-f]{{4}}\b(?=\s|$)"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|\d+(?:\.\d+)? items/s|\d+(?:\.\d+)?s\b)"
)
"""What may differ between two runs: ids (a UUID, or the 8 or 4 hex digits of a short
one; an inbox sequence's 24), ISO times, rates and durations."""


@dataclass
class Step:
    """A command of the block and the output it shows (``[exit N]`` last if not 0)."""

    command: str
    output: list[str]


def steps(block: str) -> list[Step]:
    """The block's commands, each with the lines up to the next command."""
    found: list[Step] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            found.append(Step(line[2:], []))
        elif found:
            found[-1].output.append(line)
    return found


def substituted(command: str, ids: dict[str, str]) -> str:
    """``command`` with each id the block shows replaced by the run's."""
    for shown, real in ids.items():
        command = re.sub(rf"\b{shown}\b", real, command)
    return command


def run(command: str, directory: Path) -> list[str]:
    """Run ``command`` (a comment after two spaces and ``#`` aside) in ``directory`` and give
    its stdout and then stderr lines, with ``[exit N]`` if it failed."""
    words = shlex.split(command.split("  #")[0])
    assert words[0] == "aosp", command
    result = aosp(*words[1:], cwd=directory)
    lines = [*result.text.splitlines(), *result.err.splitlines()]
    lines = [line.replace(str(directory), HOME).rstrip() for line in lines]
    if result.code != 0:
        lines.append(f"[exit {result.code}]")
    return lines


def _pair_ids(shown: str, real: str, ids: dict[str, str]) -> bool:
    """Record that the id ``shown`` stands for ``real``; whether that agrees with before."""
    if re.fullmatch(UUID, shown) or re.fullmatch("[0-9a-f]{24}|[0-9a-f]{8}|[0-9a-f]{4}", shown):
        if len(shown) != len(real):
            return False
        for length in (4, 8, len(shown)):
            if (
                length <= len(shown)
                and ids.setdefault(shown[:length], real[:length]) != real[:length]
            ):
                return False
    return True


def same(shown: str, real: str, ids: dict[str, str]) -> bool:
    """Whether ``real`` is the line ``shown``, but for ids, times, rates and durations."""
    shown_parts, real_parts = TOKEN.split(shown), TOKEN.split(real)
    if len(shown_parts) != len(real_parts):
        return False
    for index, (a, b) in enumerate(zip(shown_parts, real_parts, strict=True)):
        if index % 2 == 0:
            if a != b:
                return False
        elif not _pair_ids(a, b, ids):
            return False
    return True


def check(directory: Path) -> list[str]:
    """Run the block's commands; the differences from what it shows (none: it is true)."""
    (block,) = [m.group(2) for m in BLOCK.finditer(DOC.read_text())]
    ids: dict[str, str] = {}
    problems = []
    for step in steps(block):
        real = run(substituted(step.command, ids), directory)
        if len(real) != len(step.output) or not all(
            same(a, b, ids) for a, b in zip(step.output, real, strict=True)
        ):
            problems.append(
                f"$ {step.command}\n--- docs/cli.md shows\n"
                + "\n".join(step.output)
                + "\n--- the tool printed\n"
                + "\n".join(real)
            )
    return problems


def write(directory: Path) -> None:
    """Run the block's commands and put what they print in the block (ids in commands
    follow the run's, as the block's output pairs them)."""
    text = DOC.read_text()
    match = BLOCK.search(text)
    assert match is not None
    ids: dict[str, str] = {}
    lines: list[str] = []
    for step in steps(match.group(2)):
        command = substituted(step.command, ids)
        real = run(command, directory)
        for a, b in zip(step.output, real, strict=False):
            same(a, b, ids)  # pairs what it can: the block's ids with the run's
        lines.extend([f"$ {command}", *real])
    DOC.write_text(text[: match.start(2)] + "\n".join(lines) + "\n" + text[match.end(2) :])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as scratch:
        write(Path(scratch))
