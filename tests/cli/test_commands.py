"""Every ``aosp`` store command through a real subprocess: success and error paths."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from aosp.cli import build_parser
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols.hot_state import measure
from segments import open_plane
from tests.cli.conftest import Store, aosp


def open_store(store: Store) -> Plane:
    return open_plane(
        SqliteEngine(store.data_dir / "aos.db"), LocalObjectStore(store.data_dir / "objects")
    )


def _leaf_commands() -> list[list[str]]:
    """Every command path (``["cas", "put"]``, ``["fsck"]`` ...) the parser knows."""

    def walk(parser: object, path: list[str]) -> list[list[str]]:
        actions = getattr(parser, "_subparsers", None)
        if actions is None:
            return [path]
        out: list[list[str]] = []
        for action in actions._group_actions:
            for name, child in action.choices.items():
                out.extend(walk(child, [*path, name]))
        return out

    return walk(build_parser(), [])


@pytest.mark.parametrize("command", _leaf_commands(), ids=" ".join)
def test_every_command_has_help(command: list[str]) -> None:
    result = aosp(*command, "--help")
    assert result.code == 0, result.err
    assert "usage: aosp " + " ".join(command) in result.text
    if command[0] not in ("demo", "conformance", "bench"):
        assert "--json" in result.text


# --------------------------------------------------------------------------- inspect


def test_inspect_lists_every_world(store: Store) -> None:
    listing = aosp("inspect", *store.args("--json", "--quiet")).json()
    assert len(listing["worlds"]) == 3 and listing["universes"] == 1
    row = next(r for r in listing["worlds"] if r["world"] == store.world)
    plane = open_store(store)
    u, w = UniverseId.parse(store.universe), WorldId.parse(store.world)
    assert row["head"] == plane.head(u, w)
    assert row["baseline"] == plane.active_baseline(u, w).height
    assert row["segments"] == len(plane.list_segments(u, w)) > 0
    assert row["cursor"] == str(plane.inbox_cursor(u, w))


def test_inspect_one_world_in_detail(store: Store) -> None:
    detail = aosp("inspect", *store.world_args("--json")).json()
    assert detail["world"] == store.world and detail["created_ns"] > 0
    assert detail["snapshot_list"][0]["height"] == 0
    assert detail["segment_list"][0]["start"] == 1
    text = aosp("inspect", *store.world_args()).text
    assert f"world          {store.world}" in text


def test_inspect_counts_hot_keys_by_family(store: Store) -> None:
    plane = open_store(store)
    u, w = UniverseId.parse(store.universe), WorldId.parse(store.world)
    expected = measure(plane.engine, WorldKeys(u, w))
    detail = aosp("inspect", *store.world_args("--json")).json()
    assert detail["hot"] == expected.to_json()
    assert (detail["hot_keys"], detail["hot_bytes"]) == (expected.keys, expected.bytes)
    # The demo drained every item: all consumed, one idempotency entry each, none pending.
    assert detail["hot"]["inbox_pending"]["count"] == 0
    assert detail["hot"]["inbox_consumed"]["count"] == detail["hot"]["idempotency"]["count"] > 0
    assert detail["hot"]["segment_index"]["count"] == detail["segments"] > 0
    listing = aosp("inspect", *store.args("--json", "--quiet", "--hot")).json()
    row = next(r for r in listing["worlds"] if r["world"] == store.world)
    assert row["hot"] == detail["hot"] and row["consumed"] == detail["consumed"]
    assert "hot" not in aosp("inspect", *store.args("--json", "--quiet")).json()["worlds"][0]


def test_missing_store_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    result = aosp("inspect", "--data-dir", str(tmp_path / "nowhere"))
    assert result.code == 3
    assert "no store in" in result.one_line_error()
    assert not (tmp_path / "nowhere").exists()


def test_malformed_ids_are_usage_errors(store: Store) -> None:
    result = aosp("inspect", *store.args("-u", "not-a-uuid"))
    assert result.code == 2 and "universe" in result.err
    result = aosp("cas", "stat", *store.args("-u", store.universe, "abc"))
    assert result.code == 2 and "4 to 64 hex digits" in result.err  # a prefix is fine, "abc" not


def test_world_without_universe_is_a_usage_error(store: Store) -> None:
    result = aosp("segments", "list", *store.args("-w", store.world))
    assert result.code == 2 and "--world needs --universe" in result.err


def test_unknown_world_is_not_found(store: Store) -> None:
    result = aosp("journal", "read", *store.args("-u", store.universe, "-w", str(WorldId.new())))
    assert result.code == 3 and "not_found" in result.one_line_error()


def test_kv_without_objects_is_a_usage_error(store: Store) -> None:
    result = aosp("inspect", "--kv", f"sqlite://{store.data_dir / 'aos.db'}")
    assert result.code == 2 and "--kv and --objects go together" in result.err


def test_store_urls_instead_of_data_dir(store: Store) -> None:
    urls = ["--kv", f"sqlite://{store.data_dir / 'aos.db'}"]
    urls += ["--objects", f"file://{store.data_dir / 'objects'}"]
    listing = aosp("inspect", *urls, "--json", "--quiet").json()
    assert len(listing["worlds"]) == 3


# --------------------------------------------------------------------------- world, cas


def test_world_create_then_cas_round_trip(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "new")]
    created = aosp("world", "create", *data, "--handle", "alpha", "--json").json()
    u = created["universe"]
    big = os.urandom(100_000)
    (tmp_path / "big.bin").write_bytes(big)
    put = aosp("cas", "put", *data, "-u", u, str(tmp_path / "big.bin"), "--json").json()
    assert put == {"hash": hashlib.sha256(big).hexdigest(), "size": 100_000, "storage": "object"}
    small = aosp("cas", "put", *data, "-u", u, "-", stdin=b"tiny body")
    assert small.code == 0 and small.text.strip() == hashlib.sha256(b"tiny body").hexdigest()
    stat = aosp("cas", "stat", *data, "-u", u, small.text.strip(), "--json").json()
    assert stat["storage"] == "inline" and stat["size"] == 9 and stat["object_key"] is None
    out = tmp_path / "out.bin"
    assert aosp("cas", "get", *data, "-u", u, put["hash"], "-o", str(out)).code == 0
    assert out.read_bytes() == big
    assert aosp("cas", "get", *data, "-u", u, small.text.strip()).out == b"tiny body"


def test_cas_put_with_wrong_expected_hash_is_refused(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "new")]
    u = aosp("world", "create", *data, "--json").json()["universe"]
    wrong = hashlib.sha256(b"something else").hexdigest()
    result = aosp("cas", "put", *data, "-u", u, "-", "--expect", wrong, stdin=b"body")
    assert result.code == 2 and "validation" in result.one_line_error()
    missing = aosp("cas", "stat", *data, "-u", u, hashlib.sha256(b"body").hexdigest())
    assert missing.code == 3 and "not found" in missing.err


def test_cas_get_of_a_damaged_body_fails_and_writes_no_file(store: Store, tmp_path: Path) -> None:
    plane = open_store(store)
    u = UniverseId.parse(store.universe)
    digest = plane.put_verified(u, os.urandom(50_000))
    path = store.data_dir / "objects" / plane.blob_meta(u, digest).object_key  # type: ignore[operator]
    body = bytearray(path.read_bytes())
    body[7] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(body))
    out = tmp_path / "out.bin"
    result = aosp("cas", "get", *store.args("-u", store.universe, str(digest), "-o", str(out)))
    assert result.code == 3 and "corruption" in result.one_line_error()
    assert not out.exists() and not Path(f"{out}.partial").exists()


# --------------------------------------------------------------------------- journal


def test_journal_read_pages_through_cold_and_hot(store: Store) -> None:
    plane = open_store(store)
    u, w = UniverseId.parse(store.universe), WorldId.parse(store.world)
    expected = plane.read_range(u, w, 1, plane.head(u, w))
    page = aosp("journal", "read", *store.world_args("--limit", "1000", "--json")).json()
    assert page["head"] == len(expected)
    assert [(e["height"], bytes.fromhex(e["entry_hex"])) for e in page["entries"]] == expected
    assert {e["kind"] for e in page["entries"]} >= {"ingress:domain_event", "snapshot"}
    tail = aosp("journal", "read", *store.world_args("--from", "3", "--limit", "2", "--json"))
    assert [e["height"] for e in tail.json()["entries"]] == [3, 4]


def test_journal_read_raw_frames_entries(store: Store) -> None:
    raw = aosp("journal", "read", *store.world_args("--limit", "5", "--raw")).out
    plane = open_store(store)
    u, w = UniverseId.parse(store.universe), WorldId.parse(store.world)
    entries, pos = [], 0
    while pos < len(raw):
        (length,) = struct.unpack(">I", raw[pos : pos + 4])
        entries.append(raw[pos + 4 : pos + 4 + length])
        pos += 4 + length
    assert entries == [e for _, e in plane.read_range(u, w, 1, 5)]


def test_journal_read_rejects_height_zero(store: Store) -> None:
    result = aosp("journal", "read", *store.world_args("--from", "0"))
    assert result.code == 2 and "validation error: --from: " in result.one_line_error()


# --------------------------------------------------------------------------- inbox


KIND_ARGS = {
    "domain-event": ["--schema", "test/Thing@1", "--key", "k"],
    "receipt": [
        "--intent",
        "ab" * 32,
        "--effect-kind",
        "http",
        "--adapter",
        "a1",
        "--signature-hex",
        "00",
    ],
    "inbox": ["--source", "orders", "--header", "trace=1"],
    "timer": ["--timer-id", "t1"],
    "control": ["--command-name", "pause"],
}


def test_inbox_enqueue_every_kind_read_and_drain(store: Store) -> None:
    before = aosp("inspect", *store.world_args("--json")).json()
    seqs = []
    for n, (kind, extra) in enumerate(KIND_ARGS.items()):
        result = aosp(
            "inbox",
            "enqueue",
            *store.world_args("--kind", kind, "--payload", f'{{"n": {n}}}'),
            *extra,
            "--idempotency-key",
            f"key-{n}",
            "--json",
        )
        assert result.code == 0, result.err
        assert result.json()["repeat"] is False
        seqs.append(result.json()["seq"])
    repeat = ("--kind", "timer", "--payload", '{"n": 3}', "--timer-id", "t1")
    again = aosp("inbox", "enqueue", *store.world_args(*repeat, "--idempotency-key", "key-3"))
    as_json = aosp(
        "inbox", "enqueue", *store.world_args(*repeat, "--idempotency-key", "key-3", "--json")
    )
    assert as_json.json() == {"seq": seqs[3], "repeat": True}  # the first item's sequence
    assert again.out.decode().strip() == seqs[3]
    assert "a repeat" in again.err and "nothing was stored" in again.err
    pending = aosp("inbox", "read", *store.world_args("--json")).json()["items"]
    assert [p["seq"] for p in pending] == seqs
    assert [p["kind"] for p in pending] == [
        "domain_event",
        "receipt",
        "inbox",
        "timer_fired",
        "control",
    ]
    assert pending[0]["item"]["value_cbor"] == {"n": 0}
    drained = aosp("inbox", "drain", *store.world_args("--json")).json()
    assert drained == {"drained": 5, "first_height": before["head"] + 1, "cursor": seqs[-1]}
    assert aosp("inbox", "read", *store.world_args("--json")).json()["items"] == []
    assert aosp("inbox", "drain", *store.world_args("--json")).json()["drained"] == 0
    journal = aosp(
        "journal", "read", *store.world_args("--from", str(before["head"] + 1), "--json")
    ).json()
    assert [e["kind"] for e in journal["entries"]] == [
        "ingress:domain_event",
        "ingress:receipt",
        "ingress:inbox",
        "ingress:timer_fired",
        "ingress:control",
    ]


def test_inbox_enqueue_usage_errors(store: Store) -> None:
    missing = aosp("inbox", "enqueue", *store.world_args("--kind", "receipt"))
    assert missing.code == 2
    assert "--intent-hash, --effect-kind, --adapter-id" in missing.err
    bad_json = aosp(
        "inbox",
        "enqueue",
        *store.world_args("--kind", "timer", "--timer-id", "t", "--payload", "{"),
    )
    assert bad_json.code == 2 and "--payload" in bad_json.err
    bad_seq = aosp("inbox", "read", *store.world_args("--after", "zz"))
    assert bad_seq.code == 2


def test_inbox_read_after_a_sequence(store: Store) -> None:
    seqs = [
        aosp(
            "inbox",
            "enqueue",
            *store.world_args("--kind", "control", "--command-name", f"c{n}"),
        ).text.strip()
        for n in range(3)
    ]
    items = aosp("inbox", "read", *store.world_args("--after", seqs[0], "--json")).json()["items"]
    assert [i["seq"] for i in items] == seqs[1:]


# --------------------------------------------------------------------------- snapshots


def test_snapshot_list_marks_the_baseline(store: Store) -> None:
    rows = aosp("snapshot", "list", *store.world_args("--json")).json()
    plane = open_store(store)
    baseline = plane.active_baseline(UniverseId.parse(store.universe), WorldId.parse(store.world))
    assert [r["height"] for r in rows if r["baseline"]] == [baseline.height]
    assert rows[0]["height"] == 0 and len(rows) >= 2
    assert "*" in aosp("snapshot", "list", *store.world_args()).text


# --------------------------------------------------------------------------- stats, verbose


def test_stats_prints_per_operation_counts(store: Store) -> None:
    result = aosp("inspect", *store.world_args("--stats", "--json"))
    assert result.code == 0
    stats = json.loads(result.err)["stats"]
    assert stats["journal.head"]["calls"] >= 1 and stats["world.meta"]["errors"] == 0
    assert set(stats["journal.head"]) >= {"calls", "errors", "mean_ms", "p50_ms", "p99_ms"}


def test_verbose_adds_the_traceback(store: Store) -> None:
    args = store.args("-u", store.universe, "-w", str(WorldId.new()))
    quiet = aosp("journal", "read", *args)
    loud = aosp("journal", "read", *args, "--verbose")
    assert quiet.code == loud.code == 3
    assert "Traceback" in loud.err and "Traceback" not in quiet.err


def test_payloads_are_canonical_cbor(store: Store) -> None:
    aosp(
        "inbox",
        "enqueue",
        *store.world_args("--kind", "control", "--command-name", "x"),
        "--payload",
        '{"b": 1, "a": [true, null]}',
    )
    plane = open_store(store)
    u, w = UniverseId.parse(store.universe), WorldId.parse(store.world)
    (_, item), *_ = plane.read_after(u, w, plane.inbox_cursor(u, w), 10)
    assert item.payload_cbor == cbor.encode({"a": [True, None], "b": 1})  # type: ignore[union-attr]


def test_snapshot_commit_and_promote_make_a_world_exportable(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "new")]
    created = aosp("world", "create", *data, "--json").json()
    world = [*data, "-u", created["universe"], "-w", created["world"]]
    for n in range(3):
        aosp("inbox", "enqueue", *world, "--kind", "control", "--command-name", f"c{n}")
    assert aosp("inbox", "drain", *world, "--json").json()["drained"] == 3
    refused = aosp("snapshot", "commit", *world, "--promote")
    assert refused.code == 2 and "--receipts-complete" in refused.one_line_error()
    plain = aosp("snapshot", "commit", *world, "--json").json()
    assert plain["height"] == 3 and plain["indexed"] and plain["receipt_horizon"] is None
    assert plain["baseline"] == 0  # indexed, not promoted
    fenced = aosp("snapshot", "promote", *world, "--height", "3")
    assert fenced.code == 1 and "receipt horizon" in fenced.one_line_error()  # no retry helps
    promoted = aosp(
        "snapshot", "commit", *world, "--receipts-complete", "--promote", "--json"
    ).json()
    assert promoted["height"] == promoted["baseline"] == plain["height"] + 1  # + its record
    again = aosp("snapshot", "promote", *world, "--height", "0")
    assert again.code == 1 and "never moves down" in again.one_line_error()
    exported = aosp("segments", "export", *world, "--json", "--quiet").json()
    assert [(s["start"], s["end"]) for s in exported["segments"]] == [(1, promoted["height"] - 1)]


def test_journal_read_decode_shows_plane_records(store: Store) -> None:
    page = aosp("journal", "read", *store.world_args("--decode", "--limit", "1000", "--json"))
    entries = page.json()["entries"]
    ingress = next(e for e in entries if e["kind"].startswith("ingress:"))
    assert ingress["record"]["kind"] == "ingress" and len(ingress["record"]["seq"]) == 24
    assert ingress["record"]["item"]["kind"] == ingress["kind"].removeprefix("ingress:")
    snapshot = next(e for e in entries if e["kind"] == "snapshot")
    assert len(snapshot["record"]["snapshot_ref"]) == 64 and snapshot["record"]["height"] >= 0
    text = aosp("journal", "read", *store.world_args("--decode", "--limit", "3")).text
    assert '"kind": "ingress"' in text or '"kind": "snapshot"' in text
    both = aosp("journal", "read", *store.world_args("--decode", "--raw"))
    assert both.code == 2 and "not both" in both.one_line_error()
