"""Output that hides nothing: a limit that stops a listing says so, a cut cell ends in an
ellipsis, text shows ``-``, times, sizes with units and short ids where JSON keeps exact
values, ``--stats`` is a line per operation, and ``ok: false`` says why."""

from __future__ import annotations

import json

import pytest

from aosp.cli.console import clip, human_size, short_seq
from tests.cli.conftest import Store, aosp

LONG_PAYLOAD = json.dumps({"note": "x" * 120})
"""A payload whose item JSON is longer than a cell of ``inbox read``."""


def test_human_size_clip_and_short_seq() -> None:
    assert [human_size(n) for n in (0, 1023, 1024, 12_595, 3 << 20, 1 << 50)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "12.3 KiB",
        "3.0 MiB",
        "1.0 PiB",
    ]
    assert human_size((1 << 20) - 1) == "1.0 MiB"  # not "1024.0 KiB"
    assert clip("abcdef", 6) == "abcdef" and clip("abcdefg", 6) == "abcde…"
    assert short_seq("000000000000009f00000000") == "9f00000000"


# --------------------------------------------------------------------------- journal read


def test_journal_read_says_when_more_entries_follow(store: Store) -> None:
    text = aosp("journal", "read", *store.world_args("--limit", "2"))
    assert text.code == 0 and len(text.text.splitlines()) == 3  # header and two entries
    assert text.err == "(more entries after height 2: --from 3 shows them)\n"
    page = aosp("journal", "read", *store.world_args("--limit", "2", "--json"))
    assert page.err == "" and (page.json()["more"], page.json()["next_from"]) == (True, 3)
    head = page.json()["head"]
    last = aosp("journal", "read", *store.world_args("--from", str(head - 1), "--json")).json()
    assert [e["height"] for e in last["entries"]] == [head - 1, head]
    assert (last["more"], last["next_from"]) == (False, None)
    exact = aosp("journal", "read", *store.world_args("--from", str(head - 1), "--limit", "2"))
    assert exact.code == 0 and exact.err == ""  # the limit reached the head: nothing more
    raw = aosp("journal", "read", *store.world_args("--limit", "1", "--raw"))
    assert raw.err == "(more entries after height 1: --from 2 shows them)\n"


# --------------------------------------------------------------------------- inbox read


@pytest.fixture
def pending(store: Store) -> list[str]:
    """Three items with long payloads enqueued after the demo's cursor: their sequences."""
    return [
        aosp(
            "inbox",
            "enqueue",
            *store.world_args("--kind", "control", "--command-name", f"c{i}"),
            "--payload",
            LONG_PAYLOAD,
        ).text.strip()
        for i in range(3)
    ]


def test_inbox_read_marks_a_cut_item_and_prints_it_whole_with_full(
    store: Store, pending: list[str]
) -> None:
    items = aosp("inbox", "read", *store.world_args("--json")).json()["items"]
    assert [i["seq"] for i in items] == pending
    whole = [json.dumps(i["item"]) for i in items]
    lines = aosp("inbox", "read", *store.world_args()).text.splitlines()[1:]
    cells = [line.split("  ")[-1].strip() for line in lines]
    assert all(c.endswith("…") and len(c) == 80 for c in cells), cells
    assert [w.startswith(c[:-1]) for w, c in zip(whole, cells, strict=True)] == [True] * 3
    full = aosp("inbox", "read", *store.world_args("--full")).text
    assert "…" not in full and all(w in full for w in whole)


def test_inbox_read_says_when_more_items_follow(store: Store, pending: list[str]) -> None:
    text = aosp("inbox", "read", *store.world_args("--limit", "2"))
    assert text.code == 0 and len(text.text.splitlines()) == 3
    assert text.err == f"(more items after seq {pending[1]}: --after {pending[1]} shows them)\n"
    page = aosp("inbox", "read", *store.world_args("--limit", "2", "--json")).json()
    assert (page["more"], page["next_after"]) == (True, pending[1])
    rest = aosp("inbox", "read", *store.world_args("--after", pending[1], "--json")).json()
    assert [i["seq"] for i in rest["items"]] == pending[2:] and rest["more"] is False
    exact = aosp("inbox", "read", *store.world_args("--limit", "3"))
    assert (
        exact.err == ""
        and aosp("inbox", "read", *store.world_args("--limit", "3", "--json")).json()["next_after"]
        is None
    )
