"""aosp compact through real subprocesses: a dry run writes nothing, a pass past the window
removes consumed items and their idempotency entries, and the store stays clean."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from backends.kv.sqlite import SqliteEngine
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.protocols.hot_state import measure
from segments.format import segment_key
from tests.cli.conftest import Store, aosp

WINDOW = "0.001"
"""A window shorter than an aosp process's start (hundreds of milliseconds): the pass after
the one that marks a world always finds the mark expired."""


def dump(store: Store) -> list[tuple[bytes, bytes]]:
    engine = SqliteEngine(store.data_dir / "aos.db", create=False)
    try:
        return list(engine.create_transaction().get_range(b"", b"\xff").wait())
    finally:
        engine.close()


def hot(store: Store) -> dict[str, dict[str, int]]:
    engine = SqliteEngine(store.data_dir / "aos.db", create=False)
    try:
        keys = WorldKeys(UniverseId.parse(store.universe), WorldId.parse(store.world))
        return measure(engine, keys).to_json()
    finally:
        engine.close()


def test_a_dry_run_writes_nothing(store: Store) -> None:
    before = dump(store)
    result = aosp("compact", *store.args("--dry-run", "--json", "--retention", WINDOW))
    assert result.code == 0, result.err
    rows = result.json()["worlds"]
    assert len(rows) == 3 and all(r["mark_due"] and r["items"] == 0 for r in rows)
    assert dump(store) == before


def test_items_consumed_past_the_window_go_with_their_idempotency_entries(store: Store) -> None:
    consumed = hot(store)["inbox_consumed"]["count"]
    assert consumed > 0 and hot(store)["idempotency"]["count"] == consumed
    first = aosp("compact", *store.args("--json", "--quiet", "--retention", WINDOW)).json()
    assert all(r["marks_written"] == 1 and r["items"] == 0 for r in first["worlds"])
    preview = aosp("compact", *store.args("--dry-run", "--json", "--quiet", "--retention", WINDOW))
    row = next(r for r in preview.json()["worlds"] if r["world"] == store.world)
    assert row["items"] == consumed

    second = aosp("compact", *store.args("--json", "--quiet", "--retention", WINDOW)).json()
    row = next(r for r in second["worlds"] if r["world"] == store.world)
    assert (row["items"], row["idempotency_entries"]) == (consumed, consumed)
    after = hot(store)
    assert after["inbox_consumed"]["count"] == after["idempotency"]["count"] == 0
    assert aosp("fsck", *store.args("--quiet")).code == 0
    assert aosp("restore", "verify", *store.args("--quiet")).code == 0


def test_a_bad_window_is_a_usage_error_naming_the_option(store: Store) -> None:
    before = dump(store)
    result = aosp("compact", *store.args("--retention", "0"))
    assert result.code == 2
    assert result.err.strip().splitlines() == [
        "aosp: validation error: --retention: must be at least one nanosecond"
    ]
    assert dump(store) == before


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    result = aosp("compact", "--data-dir", str(tmp_path / "nowhere"))
    assert result.code == 3 and "no store" in result.err
    assert not (tmp_path / "nowhere").exists()


def _plant_orphans(store: Store) -> tuple[Path, Path]:
    """A CAS body whose put never committed its metadata, and a segment object below what
    the world's index covers (a racing exporter's upload): both orphans."""
    u, w = store.universe, store.world
    body = os.urandom(30_000)
    cas = store.data_dir / "objects" / "cas" / u / "sha256" / hashlib.sha256(body).hexdigest()
    cas.write_bytes(body)
    segment = store.data_dir / "objects" / segment_key(UniverseId.parse(u), WorldId.parse(w), 1, 1)
    segment.parent.mkdir(parents=True, exist_ok=True)
    segment.write_bytes(b"x" * 10)
    return cas, segment


def test_orphans_are_collected_and_fsck_is_clean_after(store: Store) -> None:
    cas, segment = _plant_orphans(store)  # the demo exported segments from height 1
    assert aosp("fsck", *store.args("--quiet", "--strict")).code == 1
    before = dump(store)
    preview = aosp("compact", *store.world_args("--orphans", "--dry-run", "--json", "--quiet"))
    assert preview.code == 0, preview.err
    orphans = preview.json()["orphans"]
    assert orphans["cas"]["collected"] == 1 and orphans["cas"]["collected_bytes"] == 30_000
    assert orphans["segments"]["collected"] == 1 and orphans["segments"]["referenced"] >= 1
    assert dump(store) == before and cas.exists() and segment.exists()

    done = aosp("compact", *store.world_args("--orphans", "--json", "--quiet"))
    assert done.code == 0, done.err
    assert done.json()["orphans"] == orphans
    assert not cas.exists() and not segment.exists()
    assert aosp("fsck", *store.args("--quiet", "--strict")).code == 0
    assert aosp("restore", "verify", *store.args("--quiet")).code == 0
