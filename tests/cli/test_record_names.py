"""``inbox enqueue`` options are named after the record fields they fill (``--inbox-name``,
``--cmd``, ``--kind timer_fired``), and the earlier spellings still work."""

from __future__ import annotations

from pathlib import Path

import pytest

from aosp.cli import build_parser
from aosp.cli.inbox import ITEM_KINDS, build_item
from persistence.inbox_records import INBOX_ITEM_TYPES
from tests.cli.conftest import aosp

WORLD = ["-u", "0" * 32, "-w", "1" * 32]
HASH = "ab" * 32


def _item(*args: str) -> dict[str, object]:
    parsed = build_parser().parse_args(["inbox", "enqueue", *WORLD, *args])
    return build_item(parsed).to_map()


def test_the_kinds_are_the_record_kinds() -> None:
    assert tuple(cls.KIND for cls in INBOX_ITEM_TYPES) == ITEM_KINDS


@pytest.mark.parametrize(
    ("record_names", "earlier_names"),
    [
        (
            ["--kind", "domain_event", "--schema", "s@1"],
            ["--kind", "domain-event", "--schema", "s@1"],
        ),
        (
            ["--kind", "receipt", "--intent-hash", HASH, "--effect-kind", "e", "--adapter-id", "a"],
            ["--kind", "receipt", "--intent", HASH, "--effect-kind", "e", "--adapter", "a"],
        ),
        (["--kind", "inbox", "--inbox-name", "orders"], ["--kind", "inbox", "--source", "orders"]),
        (["--kind", "timer_fired", "--timer-id", "t1"], ["--kind", "timer", "--timer-id", "t1"]),
        (["--kind", "control", "--cmd", "pause"], ["--kind", "control", "--command-name", "pause"]),
    ],
    ids=lambda args: args[1],
)
def test_record_field_names_and_earlier_spellings_make_the_same_item(
    record_names: list[str], earlier_names: list[str]
) -> None:
    assert _item(*record_names) == _item(*earlier_names)


def test_each_option_fills_the_field_it_is_named_after() -> None:
    assert _item("--kind", "inbox", "--inbox-name", "orders")["inbox_name"] == "orders"
    assert _item("--kind", "control", "--cmd", "pause")["cmd"] == "pause"
    assert _item("--kind", "timer_fired", "--timer-id", "t1")["kind"] == "timer_fired"
    receipt = _item("--kind", "receipt", "--intent-hash", HASH, "--effect-kind", "e",
                    "--adapter-id", "a")  # fmt: skip
    assert (receipt["intent_hash"], receipt["adapter_id"]) == (bytes.fromhex(HASH), "a")


def test_help_names_the_field_each_option_fills() -> None:
    enqueue = build_parser().parse_args(["inbox", "enqueue", *WORLD, "--kind", "inbox"])
    assert enqueue.kind == "inbox"
    page = " ".join(_enqueue_help().split())
    for option, field in [
        ("--inbox-name NAME, --source NAME", "fills inbox_name"),
        ("--cmd CMD, --command-name CMD", "fills cmd"),
        ("--intent-hash HASH, --intent HASH", "fills intent_hash"),
        ("--adapter-id ID, --adapter ID", "fills adapter_id"),
        ("--timer-id ID", "fills timer_id"),
    ]:
        assert f"{option} " in page and field in page.rsplit(option, 1)[1][:40], option


def _enqueue_help() -> str:
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    inbox = sub.choices["inbox"]
    actions = next(a for a in inbox._actions if isinstance(a, argparse._SubParsersAction))
    return str(actions.choices["enqueue"].format_help())


def test_enqueue_and_read_back_with_the_record_names(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    made = aosp("world", "create", "--data-dir", data, "--handle", "w", "--json").json()
    world = ["--data-dir", data, "-u", made["universe"], "-w", "w"]
    for args in (
        ["--kind", "inbox", "--inbox-name", "orders"],
        ["--kind", "timer_fired", "--timer-id", "t1"],
        ["--kind", "control", "--cmd", "pause"],
    ):
        done = aosp("inbox", "enqueue", *world, *args)
        assert done.code == 0, done.err
    items = aosp("inbox", "read", *world, "--json").json()["items"]
    assert [(i["kind"], i["item"].get("inbox_name") or i["item"].get("timer_id")
             or i["item"].get("cmd")) for i in items] == [
        ("inbox", "orders"), ("timer_fired", "t1"), ("control", "pause")
    ]  # fmt: skip
    missing = aosp("inbox", "enqueue", *world, "--kind", "control")
    assert missing.code == 2
    assert missing.one_line_error() == "aosp: usage error: --kind control needs --cmd"
    unknown = aosp("inbox", "enqueue", *world, "--kind", "timers")
    assert unknown.code == 2 and "timer_fired" in unknown.err
