"""Output that hides nothing: a limit that stops a listing says so, a cut cell ends in an
ellipsis, text shows ``-``, times, sizes with units and short ids where JSON keeps exact
values, ``--stats`` is a line per operation, and ``ok: false`` says why."""

from __future__ import annotations

import json
import re

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


# --------------------------------------------------------------------------- text for people


def test_inspect_says_a_shared_universe_once_with_short_ids(store: Store) -> None:
    text = aosp("inspect", *store.args("--quiet")).text
    first, header, *rows = text.splitlines()
    assert first == f"universe {store.universe}" and header.split()[0] == "world"
    assert len(rows) == 3 and store.universe[:8] not in "".join(rows)
    assert any(r.startswith(store.world[:8] + "  ") for r in rows) and store.world not in text
    cursor = aosp("inspect", *store.world_args("--json")).json()["cursor"]
    assert short_seq(cursor) in text and cursor not in text
    hot = aosp("inspect", *store.args("--quiet", "--hot")).text
    assert re.search(r"\d+\.\d (KiB|MiB)", hot)
    other = aosp("world", "create", *store.args("--json")).json()["universe"]
    mixed = aosp("inspect", *store.args("--quiet")).text.splitlines()
    assert mixed[0].split()[:2] == ["universe", "world"]
    assert any(line.startswith(other[:8] + "  ") for line in mixed[1:])
    listing = aosp("inspect", *store.args("--quiet", "--json")).json()
    assert {w["universe"] for w in listing["worlds"]} == {store.universe, other}


def test_inspect_one_world_shows_time_and_sizes(store: Store) -> None:
    detail = aosp("inspect", *store.world_args("--json")).json()
    assert isinstance(detail["created_ns"], int) and isinstance(detail["segment_bytes"], int)
    fields = dict(
        line.split(None, 1) for line in aosp("inspect", *store.world_args()).text.splitlines()
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fields["created"])
    assert "created_ns" not in fields
    assert fields["segment_bytes"] == human_size(detail["segment_bytes"])
    assert fields["hot_bytes"] == human_size(detail["hot_bytes"])
    segment = detail["segment_list"][0]
    assert f"segment {segment['start']}-{segment['end']}  {human_size(segment['bytes'])}  " in (
        aosp("inspect", *store.world_args()).text
    )


def test_none_shows_as_a_dash(store: Store) -> None:
    made = aosp("world", "create", *store.args("-u", store.universe, "--json")).json()
    listing = aosp("world", "list", *store.args("-u", store.universe)).text.splitlines()
    row = next(line for line in listing if line.split()[1] == made["world"][:8])
    assert row.split()[2] == "-" and "None" not in "".join(listing)
    drained = aosp("inbox", "drain", *store.world_args())
    assert "first_height  -" in drained.text and "None" not in drained.text
    assert aosp("inbox", "drain", *store.world_args("--json")).json()["first_height"] is None


def test_cas_stat_segments_and_fsck_show_sizes_with_units(store: Store) -> None:
    put = aosp("cas", "put", *store.args("-u", store.universe, "-"), stdin=b"y" * 5000)
    digest = put.text.strip()
    stat = aosp("cas", "stat", *store.args("-u", store.universe, digest)).text
    assert "size        4.9 KiB (5,000 bytes)" in stat
    assert (
        aosp("cas", "stat", *store.args("-u", store.universe, digest, "--json")).json()["size"]
        == 5000
    )
    segments = aosp("segments", "list", *store.world_args("--json")).json()
    lines = aosp("segments", "list", *store.world_args()).text.splitlines()
    assert lines[0].split() == ["world", "start", "end", "entries", "size", "object_key"]
    assert lines[1].split()[:6] == [
        store.world[:8],
        str(segments[0]["start"]),
        str(segments[0]["end"]),
        str(segments[0]["entries"]),
        *human_size(segments[0]["bytes"]).split(),
    ]
    fsck = aosp("fsck", *store.args("--quiet")).text
    assert re.search(r"\d+\.\d (KiB|MiB) read \(cas\)", fsck) and "bytes read" not in fsck


# --------------------------------------------------------------------------- --stats


def test_stats_is_a_line_per_operation_in_text_and_json_with_json(store: Store) -> None:
    text = aosp("inspect", *store.world_args("--stats"))
    header, *lines = text.err.splitlines()
    assert header.split() == [
        "operation",
        "calls",
        "errors",
        "mean_ms",
        "p50_ms",
        "p99_ms",
        "max_ms",
    ]
    operations = {line.split()[0]: line.split()[1:] for line in lines}
    assert "journal.head" in operations and int(operations["journal.head"][0]) >= 1
    assert all(re.fullmatch(r"\d+\.\d{3}", v) for v in operations["journal.head"][2:])
    as_json = json.loads(aosp("inspect", *store.world_args("--stats", "--json")).err)
    assert set(as_json["stats"]) == set(operations)


# --------------------------------------------------------------------------- ok: false


def test_a_conformance_report_that_is_not_ok_says_why() -> None:
    from conformance.runner import CaseResult, RunReport

    report = RunReport("memory://", "memory://", "quick")
    assert report.summary()["reason"] == "no case ran"
    report.results = [CaseResult("a", "passed", 0.1), CaseResult("b", "skipped", 0.0, "no fdb")]
    assert report.ok and report.summary()["reason"] is None
    report.results += [CaseResult("c", "failed", 0.1, "x"), CaseResult("d", "error", 0.1, "y")]
    assert report.summary()["reason"] == "2 cases failed or errored: c, d"
    report.results = [CaseResult("b", "skipped", 0.0, "no fdb")]
    assert report.summary()["reason"] == "no case passed: 1 skipped (no fdb)"
