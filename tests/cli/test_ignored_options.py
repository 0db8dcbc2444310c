"""Options that a command would ignore in some combination are usage errors instead, through a
real ``aosp`` subprocess: exit 2, one ``aosp: usage error: ...`` line naming the options, and
nothing opened, created or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Result, aosp

UNIVERSE = "3f1b1c9e-2d7a-4c55-9a52-7c1e2f3a4b5c"
WORLD = "0c6d4e2f-8a1b-4d3c-b5e6-f708192a3b4c"


def usage_error(result: Result, *words: str) -> None:
    """``result`` is exit 2 with one ``aosp: usage error:`` line holding ``words``."""
    line = result.one_line_error()
    assert result.code == 2, result.err
    assert line.startswith("aosp: usage error: "), line
    for word in words:
        assert word in line, line


def listing(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted (the "nothing created" witness)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --------------------------------------------------------------------------- --data-dir with --kv

STORE_COMMANDS = [
    ["world", "create"],
    ["cas", "put", "-u", UNIVERSE, "-"],
    ["inspect"],
    ["fsck"],
    ["compact", "--orphans"],
    ["spark", "replay-check"],
]


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=" ".join)
def test_data_dir_with_kv_and_objects_is_a_usage_error(command: list[str], tmp_path: Path) -> None:
    kv, objects = f"sqlite://{tmp_path / 'kv.db'}", f"file://{tmp_path / 'objects'}"
    data = str(tmp_path / "data")
    result = aosp(*command, "--data-dir", data, "--kv", kv, "--objects", objects, stdin=b"hi")
    usage_error(result, "--data-dir", "--kv/--objects", "not both")
    assert listing(tmp_path) == []  # nothing opened, nothing created


def test_data_dir_with_kv_alone_is_a_usage_error(tmp_path: Path) -> None:
    result = aosp("world", "create", "--kv", f"sqlite://{tmp_path / 'kv.db'}", "--data-dir", "d")
    usage_error(result, "--kv and --objects go together")
    assert listing(tmp_path) == []


def test_aosp_data_dir_variable_does_not_conflict_with_kv(tmp_path: Path) -> None:
    kv, objects = f"sqlite://{tmp_path / 'kv.db'}", f"file://{tmp_path / 'objects'}"
    env: dict[str, str | None] = {"AOSP_DATA_DIR": str(tmp_path / "data")}
    created = aosp("world", "create", "--kv", kv, "--objects", objects, "--json", env=env)
    assert created.code == 0, created.err
    assert not (tmp_path / "data").exists() and (tmp_path / "kv.db").is_file()


# --------------------------------------------------------------------------- compact


def test_compact_grace_without_orphans_is_a_usage_error(tmp_path: Path) -> None:
    result = aosp("compact", "--data-dir", str(tmp_path / "data"), "--grace", "60")
    usage_error(result, "--grace needs --orphans")
    assert listing(tmp_path) == []


def test_compact_grace_with_orphans_runs(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    assert aosp("world", "create", "--data-dir", data).code == 0
    result = aosp("compact", "--data-dir", data, "--orphans", "--grace", "60", "--json")
    assert result.code == 0, result.err
    assert result.json()["orphans"]["cas"]["collected"] == 0


# --------------------------------------------------------------------------- cas get --json


@pytest.fixture(scope="module")
def cas_store(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``--data-dir D -u U`` of a new store with one world's universe."""
    data = str(tmp_path_factory.mktemp("cas") / "data")
    created = aosp("world", "create", "--data-dir", data, "--json").json()
    return ["--data-dir", data, "-u", created["universe"]]


def put(cas_store: list[str], body: bytes) -> str:
    result = aosp("cas", "put", *cas_store, "-", stdin=body)
    assert result.code == 0, result.err
    return result.text.strip()


def test_cas_get_json_gives_a_utf8_body_as_text(cas_store: list[str]) -> None:
    body = "héllo\n".encode()
    digest = put(cas_store, body)
    result = aosp("cas", "get", *cas_store, digest[:12], "--json")
    assert result.code == 0, result.err
    assert result.json() == {"hash": digest, "size": len(body), "text": "héllo\n"}


def test_cas_get_json_gives_other_bodies_as_base64(cas_store: list[str]) -> None:
    body = b"\xff\x00binary"
    digest = put(cas_store, body)
    result = aosp("cas", "get", *cas_store, digest, "--json")
    assert result.code == 0, result.err
    assert result.json() == {"hash": digest, "size": len(body), "base64": "/wBiaW5hcnk="}


def test_cas_get_json_with_output_writes_the_file_and_says_so(
    cas_store: list[str], tmp_path: Path
) -> None:
    body = b"\x00" * 20_000  # an object, not inline (16 KiB at most)
    digest = put(cas_store, body)
    out = tmp_path / "body.bin"
    result = aosp("cas", "get", *cas_store, digest, "-o", str(out), "--json")
    assert result.code == 0, result.err
    assert result.json() == {"hash": digest, "size": 20_000, "output": str(out)}
    assert out.read_bytes() == body


def test_cas_get_json_of_a_body_too_large_for_json_names_output(
    cas_store: list[str], tmp_path: Path
) -> None:
    digest = put(cas_store, b"x" * (16 * 1024 * 1024 + 1))
    result = aosp("cas", "get", *cas_store, digest, "--json")
    usage_error(result, "--json prints bodies up to 16,777,216 bytes", "--output FILE")
    assert result.out == b""


# --------------------------------------------------------------------------- other combinations

WORLD_ARGS = ["-u", UNIVERSE, "-w", WORLD]
TIMER_EXTRA = ["--schema", "s", "--header", "a=b"]  # a domain event's and an inbox item's
SIGNED = ["--signature-hex", "00"]  # a receipt's
TRIGGER = ["--trigger-seconds", "2"]

IGNORED = [
    (
        ["journal", "read", *WORLD_ARGS, "--raw", "--json"],
        ["--raw", "--json", "not both"],
    ),
    (
        ["inbox", "enqueue", *WORLD_ARGS, "--kind", "timer", "--timer-id", "t", *TIMER_EXTRA],
        [
            "--kind timer_fired does not take",
            "--schema (of --kind domain_event)",
            "--header (of --kind inbox)",
        ],
    ),
    (
        ["inbox", "enqueue", *WORLD_ARGS, "--kind", "control", "--command-name", "c", *SIGNED],
        ["--kind control does not take --signature-hex (of --kind receipt)"],
    ),
    (["drain", "--interval", "1"], ["--interval: for --follow only", "add --follow"]),
    (["drain", "--report-every", "5", "--interval", "1"], ["--interval and --report-every"]),
    (
        ["spark", "replay-follow", "--checkpoint", "CHECKPOINT", "--once", *TRIGGER],
        ["--trigger-seconds", "--once", "not both"],
    ),
    (
        ["inspect", *WORLD_ARGS, "--limit", "5"],
        ["--limit caps the rows of several worlds", "not both"],
    ),
]


@pytest.mark.parametrize(
    ("command", "words"),
    IGNORED,
    ids=[
        "journal-raw-json",
        "enqueue-other-kinds",
        "enqueue-receipt-option",
        "drain-interval",
        "drain-report-every",
        "follow-once-trigger",
        "inspect-one-world-limit",
    ],
)
def test_an_option_the_command_would_ignore_is_a_usage_error(
    command: list[str], words: list[str], tmp_path: Path
) -> None:
    """Refused before the store is opened: the data directory need not even exist."""
    command = [str(tmp_path / "checkpoint") if w == "CHECKPOINT" else w for w in command]
    result = aosp(*command, "--data-dir", str(tmp_path / "data"))
    usage_error(result, *words)
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--steady-worlds", "5"], ["--steady-worlds is for the steady suite", "engine"]),
        (
            ["--steady-seconds", "60", "--plot", "p.png"],
            ["--steady-seconds, --plot are for the steady suite"],
        ),
        (
            ["--fdb", "fdb:///nowhere/fdb.cluster"],
            ["--fdb is for the fdb and eventsourcing-scale suites", "or all"],
        ),
    ],
    ids=["steady-worlds", "steady-seconds-plot", "fdb"],
)
def test_bench_options_of_a_suite_left_out_are_usage_errors(
    options: list[str], words: list[str], tmp_path: Path
) -> None:
    result = aosp("bench", "engine", *options, "--seconds", "0.05", cwd=tmp_path)
    usage_error(result, *words)
    assert result.text == "" and listing(tmp_path) == []  # no suite ran


def test_inspect_limit_still_caps_several_worlds(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    created = aosp("world", "create", *data, "--json").json()
    aosp("world", "create", *data, "-u", created["universe"])
    listed = aosp("inspect", *data, "--limit", "1", "--json", "--quiet")
    assert listed.code == 0, listed.err
    assert len(listed.json()["worlds"]) == 1
