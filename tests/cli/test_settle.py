"""``aosp settle``: the records a writer queued and did not settle (it stopped between its
two transactions) get their log positions; a mistyped universe is ``NotFound``; a missing
store is not created."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, SimulatedCrash
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence.ids import UniverseId, WorldId
from persistence.plane import PlaneConfig
from segments import open_plane
from tests.cli.conftest import Store, aosp


def _stopped_writer(store: Store) -> tuple[UniverseId, WorldId]:
    """A sequenced append settled (position 1), then one of two entries whose writer
    stopped after queuing them."""
    universe, world = UniverseId.parse(store.universe), WorldId.new()
    engine = SqliteEngine(store.data_dir / "aos.db", create=False)
    objects = LocalObjectStore(store.data_dir / "objects", create=False)
    injector = FaultInjector()
    queuing = open_plane(engine, objects, PlaneConfig(log_sequencing="queued"), hooks=injector)
    try:
        queuing.append_sequenced(universe, [(world, 0, [b"a"])], [["t"]], create_missing=True)
        injector.crash_at("journal.after_append")
        with pytest.raises(SimulatedCrash):
            queuing.append_sequenced(universe, [(world, 1, [b"b", b"c"])], [["t", "t"]])
    finally:
        engine.close()
    return universe, world


def _queued(store: Store) -> tuple[int, int]:
    (u,) = aosp("status", *store.args("--json", "-u", store.universe)).json()["universes"]
    return u["log_head"], u["log_queued"]


def test_settle_places_what_a_stopped_writer_queued(store: Store) -> None:
    _stopped_writer(store)
    assert _queued(store) == (1, 2)
    result = aosp("settle", *store.args("--json", "-u", store.universe))
    assert result.code == 0, result.err
    assert result.json() == {
        "ok": True,
        "universes": [{"universe": store.universe, "log_head_before": 1, "log_head": 3}],
    }
    assert _queued(store) == (3, 0)
    again = aosp("settle", *store.args("--json"))  # every universe; nothing left to place
    assert again.code == 0, again.err
    rows = {row["universe"]: row for row in again.json()["universes"]}
    assert rows[store.universe] == {
        "universe": store.universe,
        "log_head_before": 3,
        "log_head": 3,
    }
    text = aosp("settle", *store.args("-u", store.universe))
    assert text.code == 0 and "log_head_before" in text.out.decode()


def test_settle_of_a_universe_the_store_does_not_hold_is_not_found(store: Store) -> None:
    result = aosp("settle", *store.args("-u", str(UniverseId.new())))
    assert result.code == 3, result.err
    assert "--universe" in result.one_line_error()


def test_settle_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = aosp("settle", "--data-dir", str(missing))
    assert result.code == 3, result.err
    assert "--data-dir" in result.one_line_error()
    assert not missing.exists()
