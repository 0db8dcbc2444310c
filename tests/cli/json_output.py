"""The ``--json`` schemas of docs/cli.md ("JSON output"): each store command is run with
``--json`` on a copy of the demo store, and the shape of what it prints -- its keys, nested
objects and lists of objects -- must be the shape the doc's table gives for it.

``python -m tests.cli.json_output --write`` runs the commands and writes their shapes into
the table (after a change of output; review the diff)."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cli.conftest import ROOT, Store, aosp, make_demo_store

DOC = ROOT / "docs" / "cli.md"
TABLE = re.compile(
    r"(<!-- json-output -->\n\| command \| prints \|\n\|---\|---\|\n)(.*?)(\n\n)", re.S
)
ROW = re.compile(r"\| `aosp ([^`]*)` \| `(.*)` \|")
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")

Command = Callable[[Store, Path], list[str]]
"""The arguments of one command on ``store`` (a scratch directory for its files)."""


def _body(store: Store, scratch: Path) -> str:
    body = scratch / "body.txt"
    body.write_text("a body for the JSON schemas\n")
    return str(body)


COMMANDS: dict[str, Command] = {
    "inspect": lambda s, _: ["inspect", *s.args("--quiet")],
    "inspect -u U -w W": lambda s, _: ["inspect", *s.world_args("--quiet")],
    "status": lambda s, _: ["status", *s.args()],
    "universe list": lambda s, _: ["universe", "list", *s.args()],
    "world list": lambda s, _: ["world", "list", *s.args()],
    "world create": lambda s, _: ["world", "create", *s.args("-u", s.universe)],
    "cas put": lambda s, d: ["cas", "put", *s.args("-u", s.universe, _body(s, d))],
    "cas stat": lambda s, d: ["cas", "stat", *s.args("-u", s.universe, _hash(s, d))],
    "cas get": lambda s, d: ["cas", "get", *s.args("-u", s.universe, _hash(s, d))],
    "journal read": lambda s, _: ["journal", "read", *s.world_args("--limit", "2")],
    "inbox enqueue": lambda s, _: [
        "inbox",
        "enqueue",
        *s.world_args("--kind", "control", "--cmd", "noop", "--payload", "{}"),
    ],
    "inbox read": lambda s, _: ["inbox", "read", *s.world_args()],
    "inbox drain": lambda s, _: ["inbox", "drain", *s.world_args()],
    "snapshot list": lambda s, _: ["snapshot", "list", *s.world_args()],
    "snapshot commit": lambda s, _: ["snapshot", "commit", *s.world_args()],
    "segments plan": lambda s, _: ["segments", "plan", *s.args("--quiet")],
    "segments export": lambda s, _: ["segments", "export", *s.args("--quiet")],
    "segments list": lambda s, _: ["segments", "list", *s.world_args()],
    "segments verify": lambda s, _: ["segments", "verify", *s.args("--quiet")],
    "restore verify": lambda s, _: ["restore", "verify", *s.args("--quiet")],
    "compact": lambda s, _: ["compact", *s.args("--quiet")],
    "drain": lambda s, _: ["drain", *s.args()],
    "settle": lambda s, _: ["settle", *s.args()],
    "fsck": lambda s, _: ["fsck", *s.args("--quiet")],
}
"""Every store command that prints JSON, in the order they run (some write: ``inbox drain``
drains what ``inbox enqueue`` added)."""


def _hash(store: Store, scratch: Path) -> str:
    put = aosp("cas", "put", *store.args("-u", store.universe, _body(store, scratch), "--json"))
    return str(put.json()["hash"])


def shape(value: Any) -> str:
    """The shape of a JSON value: an object as ``{key, key: shape}`` (a key's shape shown
    when it is an object or a list of them), a list of objects as ``[{...}]`` (their keys
    together), a map -- an object whose keys are data, not names -- as ``{…}``; other
    values are not shown."""
    if isinstance(value, dict):
        if not all(IDENTIFIER.fullmatch(key) for key in value):
            return "{…}"
        fields = []
        for key, item in value.items():
            inner = shape(item)
            fields.append(f"{key}: {inner}" if inner else key)
        return "{" + ", ".join(fields) + "}"
    if isinstance(value, list):
        objects = [item for item in value if isinstance(item, dict)]
        if not objects:
            return ""
        merged: dict[str, Any] = {}
        for item in objects:
            for key, inner in item.items():
                merged.setdefault(key, inner)
        return "[" + shape(merged) + "]"
    return ""


def run_all(store: Store) -> dict[str, str]:
    """Each command's shape, run in order on ``store``."""
    shapes = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, command in COMMANDS.items():
            result = aosp(*command(store, Path(scratch)), "--json")
            assert result.code == 0, f"aosp {name}: exit {result.code}: {result.err}"
            shapes[name] = shape(json.loads(result.out))
    return shapes


def documented() -> dict[str, str]:
    """The table's shapes, by command."""
    match = TABLE.search(DOC.read_text())
    assert match is not None, "docs/cli.md has no JSON output table"
    rows = {}
    for line in match.group(2).splitlines():
        row = ROW.fullmatch(line)
        assert row is not None, f"not a row of the JSON output table: {line!r}"
        rows[row.group(1)] = row.group(2)
    return rows


def write(store: Store) -> None:
    """Run the commands and put their shapes in the table."""
    text = DOC.read_text()
    match = TABLE.search(text)
    assert match is not None
    rows = [f"| `aosp {name}` | `{printed}` |" for name, printed in run_all(store).items()]
    DOC.write_text(text[: match.start(2)] + "\n".join(rows) + text[match.end(2) :])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as directory:
        write(make_demo_store(Path(directory) / "data"))
