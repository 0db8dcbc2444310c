"""What ``aosp`` says to do next, through a real subprocess: ``snapshot commit`` names the
height to promote (not the head its own record moved), ``snapshot promote`` of a height
without a snapshot names the heights that have one, and a promotion the fences refuse is a
refusal (exit 1), not a conflict to retry (exit 4)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.cli.conftest import aosp


def fields_of(text: str) -> dict[str, str]:
    """The ``name  value`` lines of a text report (names may hold single spaces)."""
    return dict(re.split(r" {2,}", line, maxsplit=1) for line in text.splitlines())


@pytest.fixture
def world(tmp_path: Path) -> list[str]:
    """A new store with one world whose journal holds 3 drained items (head 3)."""
    data = ["--data-dir", str(tmp_path / "data")]
    created = aosp("world", "create", *data, "--json").json()
    world = [*data, "-u", created["universe"], "-w", created["world"]]
    for n in range(3):
        aosp("inbox", "enqueue", *world, "--kind", "control", "--command-name", f"c{n}")
    assert aosp("inbox", "drain", *world, "--json").json()["drained"] == 3
    return world


def test_commit_names_the_snapshot_height_and_the_promote_command(world: list[str]) -> None:
    committed = aosp("snapshot", "commit", *world, "--receipts-complete")
    assert committed.code == 0, committed.err
    fields = fields_of(committed.text)
    assert fields["snapshot height"] == "3 (the state after entry 3)"
    assert fields["journal head"].startswith("4 (the commit's journal record is above")
    promote = fields["to promote"]
    assert promote.endswith("--height 3") and promote.startswith("aosp snapshot promote ")
    # the printed command is the one to run: it promotes the snapshot
    promoted = aosp(*shlex.split(promote)[1:], "--json")
    assert promoted.code == 0, promoted.err
    assert promoted.json() == {"height": 3, "baseline": 3, "head": 5}


def test_commit_json_says_whether_it_can_be_promoted(world: list[str]) -> None:
    plain = aosp("snapshot", "commit", *world, "--json").json()
    assert (plain["height"], plain["head"], plain["promotable"]) == (3, 4, False)
    complete = aosp("snapshot", "commit", *world, "--receipts-complete", "--json").json()
    assert (complete["height"], complete["head"], complete["promotable"]) == (4, 5, True)
    promoted = aosp(
        "snapshot", "commit", *world, "--receipts-complete", "--promote", "--json"
    ).json()
    assert promoted["baseline"] == promoted["height"] == 5 and not promoted["promotable"]


def test_commit_without_receipt_horizon_says_promote_would_be_refused(world: list[str]) -> None:
    text = aosp("snapshot", "commit", *world).text
    fields = fields_of(text)
    assert fields["receipt horizon"] == "none (committed without --receipts-complete)"
    assert fields["to promote"].startswith("none: the receipt-horizon fence refuses it")
    assert "aosp snapshot promote" not in text


def test_promote_of_the_head_after_commit_names_the_snapshot_height(world: list[str]) -> None:
    assert aosp("snapshot", "commit", *world, "--receipts-complete").code == 0
    missed = aosp("snapshot", "promote", *world, "--height", "4")  # the head, not the snapshot
    line = missed.one_line_error()
    assert missed.code == 3 and line.startswith("aosp: not_found error: --height 4: ")
    assert "snapshots are indexed at heights 0, 3;" in line
    assert "height 4 is the journal record of the snapshot committed at height 3" in line
    assert "its --height is 3" in line


def test_promote_of_a_height_past_the_head_lists_the_snapshot_heights(world: list[str]) -> None:
    missed = aosp("snapshot", "promote", *world, "--height", "99")
    line = missed.one_line_error()
    assert missed.code == 3 and "snapshots are indexed at heights 0;" in line
    assert "journal record" not in line


def test_receipt_fence_is_a_refusal_not_a_retry(world: list[str]) -> None:
    assert aosp("snapshot", "commit", *world).code == 0  # at 3, without a receipt horizon
    fenced = aosp("snapshot", "promote", *world, "--height", "3")
    line = fenced.one_line_error()
    assert fenced.code == 1, fenced.err
    assert line.startswith("aosp: refused error: --height 3: the receipt-horizon fence refuses")
    assert "committed without --receipts-complete" in line
    assert "no retry changes this" in line and "--receipts-complete --promote" in line
    assert "conflict" not in line


def test_promotion_below_the_baseline_is_a_refusal(world: list[str]) -> None:
    promoted = aosp("snapshot", "commit", *world, "--receipts-complete", "--promote", "--json")
    assert promoted.json()["baseline"] == 3
    regress = aosp("snapshot", "promote", *world, "--height", "0")
    line = regress.one_line_error()
    assert regress.code == 1, regress.err
    assert line.startswith("aosp: refused error: --height 0: below the active baseline at height 3")
    assert "never moves down" in line
