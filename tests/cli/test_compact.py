"""aosp compact through real subprocesses: a dry run writes nothing, a pass past the window
removes consumed items and their idempotency entries, and the store stays clean."""

from __future__ import annotations

from pathlib import Path

from backends.kv.sqlite import SqliteEngine
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane.hot_state import measure
from tests.cli.conftest import Store, aosp

WINDOW = "0.001"
"""A window shorter than an aosp process's start (hundreds of milliseconds): the pass after
the one that marks a world always finds the mark expired."""


def dump(store: Store) -> list[tuple[bytes, bytes]]:
    engine = SqliteEngine(store.data_dir / "aos.db", create=False)
    try:
        return list(engine.create_transaction().get_range(b"", b"\xff"))
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
