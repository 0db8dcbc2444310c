"""``aosp --help`` everywhere: every option and positional of every command says what it
is, in whole sentences, with its default where it has one."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from aosp.cli import build_parser

DANGLING = re.compile(
    r"(,|;|:|\(|-|\b(a|an|and|as|at|by|for|from|in|its|of|on|or|the|than|to|with))$"
)
"""How a help string cut mid-sentence ends."""


def _parsers(
    parser: argparse.ArgumentParser, path: str = "aosp"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree (``aosp``, ``aosp cas``, ``aosp cas get`` ...) by its path."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _actions() -> Iterator[tuple[str, argparse.Action]]:
    """Every action of every parser but ``-h``, with its parser's path and its name."""
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            name = "/".join(action.option_strings) or action.metavar or action.dest
            yield f"{path} {name}", action
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    yield f"{path} {choice.dest}", choice


ACTIONS = dict(_actions())


def test_the_tree_is_walked_whole() -> None:
    """The walk reaches the leaves (a broken walk would pass every test below)."""
    assert "aosp cas get HASH" in ACTIONS
    assert "aosp cas get --universe/-u" in ACTIONS
    assert "aosp spark analytics --on-corrupt" in ACTIONS
    assert "aosp COMMAND" in ACTIONS and "aosp cas ACTION" in ACTIONS
    assert len(ACTIONS) > 300


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_every_option_and_positional_has_help(name: str) -> None:
    text = ACTIONS[name].help
    assert isinstance(text, str) and text.strip(), f"{name}: no help"
    assert text != argparse.SUPPRESS, f"{name}: hidden from --help"


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_no_help_is_cut_mid_sentence(name: str) -> None:
    text = " ".join(str(ACTIONS[name].help).split())
    assert not DANGLING.search(text), f"{name}: help ends mid-sentence: {text!r}"
    assert text.count("(") == text.count(")"), f"{name}: unbalanced parentheses: {text!r}"
    assert text.count("`") % 2 == 0, f"{name}: unbalanced backquotes: {text!r}"


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_defaults_that_matter_are_shown(name: str) -> None:
    """An option that takes a value and has a default says what it is (the store's
    location above all: ``demo --data-dir``)."""
    action = ACTIONS[name]
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.default == []:
        return
    assert "default" in str(action.help), f"{name}: default {action.default!r} not shown"


@pytest.mark.parametrize("path", [path for path, _ in _parsers(build_parser())])
def test_every_help_page_renders(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``--help`` formats (a stray ``%`` in a help string would raise) and names every
    option it has."""
    monkeypatch.setenv("COLUMNS", "100")
    parser = dict(_parsers(build_parser()))[path]
    page = parser.format_help()
    for action in parser._actions:
        for option in action.option_strings:
            assert option in page, f"{path}: {option} missing from --help"


def test_demo_help_shows_where_the_store_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    page = dict(_parsers(build_parser()))["aosp demo"].format_help()
    assert "$AOSP_DATA_DIR" in page and "./aosp-data" in page


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_the_readme_lists_every_command() -> None:
    """The README's command block names every command (it once left out ``drain``)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("## Commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    named = set()
    for line in block.splitlines():
        for part in line.split("#", 1)[0].split(" | "):
            words = part.split()
            if words:
                named.add(words[1] if words[0] == "aosp" else words[0])
    assert set(_commands()) <= named, set(_commands()) - named


def test_the_cli_doc_has_a_row_for_every_command() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    for command in _commands():
        assert any(row.startswith(f"| `{command}") for row in rows), command
