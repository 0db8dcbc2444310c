"""Counts in ``aosp`` output agree with their nouns: "1 segment", never "1 segments"."""

from __future__ import annotations

import io
from pathlib import Path

from aosp.cli.console import Progress, counted, noun
from aosp.cli.fsck import CHECKED_SINGULAR, checked_count
from tests.cli.conftest import aosp


def test_counted_agrees_with_the_count() -> None:
    assert counted(1, "segment") == "1 segment"
    assert counted(0, "segment") == "0 segments"
    assert counted(2, "segment") == "2 segments"
    assert counted(1_024, "byte") == "1,024 bytes"
    assert counted(1, "CAS body", "CAS bodies") == "1 CAS body"
    assert counted(3, "CAS body", "CAS bodies") == "3 CAS bodies"
    assert counted(1, "pass", "passes") == "1 pass" and counted(2, "pass", "passes") == "2 passes"
    assert noun(1, "world") == "world" and noun(7, "world") == "worlds"


def test_progress_units_agree_with_the_total() -> None:
    out = io.StringIO()
    with Progress("verify", 1, unit="world", stream=out) as progress:
        progress.advance()
    assert out.getvalue().rstrip().split(" 1/1 ")[1].startswith("world ")
    out = io.StringIO()
    with Progress("verify", 3, unit="world", stream=out) as progress:
        progress.advance(3)
    assert " 3/3 worlds " in out.getvalue()


def test_fsck_tallies_agree() -> None:
    assert checked_count(1, "universes") == "1 universe"
    assert checked_count(1, "journal entries") == "1 journal entry"
    assert checked_count(2, "journal entries") == "2 journal entries"
    assert checked_count(1, "cas bodies") == "1 cas body"
    assert checked_count(1, "journal entries without checksums (layout 2)") == (
        "1 journal entry without checksums (layout 2)"
    )
    assert checked_count(5, "something new") == "5 something new"  # unknown: as it is
    assert all(singular != plural for plural, singular in CHECKED_SINGULAR.items())


def test_one_of_each_reads_as_one(tmp_path: Path) -> None:
    """A store of one world with one item: every summary line says "1 world", "1 item"."""
    data = str(tmp_path / "data")
    made = aosp("world", "create", "--data-dir", data, "--handle", "w", "--json").json()
    world = ["--data-dir", data, "-u", made["universe"], "-w", "w"]
    assert aosp("inbox", "enqueue", *world, "--kind", "control", "--cmd", "c").code == 0

    drain = aosp("drain", "--data-dir", data)
    assert drain.code == 0, drain.err
    assert "1 ready world, 1 item in 1 transaction," in drain.text, drain.text
    assert "1 item in 1 pass, 1 transaction," in drain.text, drain.text

    fsck = aosp("fsck", "--data-dir", data)
    assert fsck.code == 0, fsck.text + fsck.err
    checked = fsck.text.splitlines()[0]
    assert "1 journal entry," in checked and "1 universe," in checked, checked
    assert checked.endswith(", 1 world"), checked
    assert fsck.text.splitlines()[-1] == "0 errors, 0 warnings"

    verify = aosp("restore", "verify", "--data-dir", data)
    assert verify.code == 0 and "1/1 world: restore equals full replay" in verify.text
    assert "1/1 world " in verify.err, verify.err  # the progress line
    segments = aosp("segments", "verify", "--data-dir", data)
    assert segments.code == 0 and "0/0 segments verified" in segments.text, segments.text
