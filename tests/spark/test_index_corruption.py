"""The ``aos_segments`` source with index listing reports every kind of index damage: the
job fails naming it, or (``on_corrupt=skip``) one error row stands for the heights it
cannot read while every other row is still produced. The damage kinds are those of
``tests/segments/test_index_corruption.py``, planted on the same store layout; one shared
SparkSession reads them all (a few jobs, not one per kind)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import kv
from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from segments import open_plane
from segments.export import ExportConfig, Exporter
from segments.verify import check_segments
from spark_connectors.listing import Selection, from_index
from tests.segments.test_index_corruption import (
    DAMAGE,
    Damaged,
    DamageStore,
    _world,
    guard,  # noqa: F401 -- the SIGALRM guard fixture, for these tests too
)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[tuple[str, DamageStore, Damaged]]]:
    """One damaged store per kind of damage."""

    made = []
    for name, plant in DAMAGE.items():
        root = tmp_path / name
        root.mkdir()
        plane = open_plane(SqliteEngine(root / "aos.db"), LocalObjectStore(root / "objects"))
        u, u2 = UniverseId.new(), UniverseId.new()
        w, w2, x = WorldId.new(), WorldId.new(), WorldId.new()
        for universe, world in ((u, w), (u, w2), (u2, x)):
            _world(plane, universe, world)
        store = DamageStore(root, plane, u, w, w2, u2, x)
        made.append((name, store, plant(store)))
    yield made
    for _, store, _ in made:
        store.plane.engine.close()


def _read(spark: Any, store: DamageStore, **options: str) -> Any:
    return (
        spark.read.format("aos_segments")
        .options(
            objects=f"file://{store.root / 'objects'}",
            kv=f"sqlite://{store.root / 'aos.db'}",
            universe=str(store.u),
            **options,
        )
        .load()
    )


def test_index_damage_fails_the_job_or_is_an_error_row(
    spark: Any, stores: list[tuple[str, DamageStore, Damaged]]
) -> None:
    for name, store, found in stores:
        with pytest.raises(Exception, match=re.escape(found.needle)):
            _read(spark, store).count()
        rows = _read(spark, store, on_corrupt="skip").collect()
        errors = [r for r in rows if r.error is not None]
        assert len(errors) == 1 and found.needle in errors[0].error, (name, errors)
        assert errors[0].world == str(store.w)
        good = {
            (str(store.w), h)
            for check in check_segments(store.plane, store.u, store.w, 100)
            if check.error is None and check.record is not None
            for h in range(check.record.start, check.record.end + 1)
        }
        sibling = {(str(store.w2), h) for h in range(1, 30)}
        got = {(r.world, r.height) for r in rows if r.error is None}
        assert got == sibling | good, name  # every height a good record holds is read
        first_unread = min(set(range(1, 30)) - {h for _, h in good})
        assert errors[0].segment_start == first_unread, name
        # every height the index does not give is covered by the error row: none vanishes
        unread = set(range(errors[0].segment_start, errors[0].segment_end + 1))
        assert unread | {h for _, h in good} >= set(range(1, 30)), name


def test_the_listing_names_a_gap_before_any_task_runs(
    stores: list[tuple[str, DamageStore, Damaged]],
) -> None:
    store = next(s for name, s, _ in stores if name == "record_deleted")
    refs = from_index(store.plane, Selection(universes=frozenset({str(store.u)})))
    errors = [r for r in refs if r.error is not None]
    assert [(r.world, r.start, r.end) for r in errors] == [(str(store.w), 11, 29)]
    assert "gap: heights 11-20" in (errors[0].error or "")
    with pytest.raises(Validation, match=r"Selection\.min_height"):
        Selection(min_height=-1)
    with pytest.raises(Validation, match="selection"):
        from_index(store.plane, "everything")  # type: ignore[arg-type]


def test_a_world_filter_lists_only_the_universes_that_have_the_world(
    stores: list[tuple[str, DamageStore, Damaged]],
) -> None:
    store = next(s for name, s, _ in stores if name == "record_deleted")
    refs = from_index(store.plane, Selection(worlds=frozenset({str(store.x)})))
    assert refs and {(r.universe, r.world) for r in refs} == {(str(store.u2), str(store.x))}
    absent = from_index(store.plane, Selection(worlds=frozenset({str(WorldId.new())})))
    assert absent == []  # a filter naming a world no universe has matches nothing


def test_a_damaged_hot_entry_above_the_segments_does_not_stop_the_listing(
    tmp_path: Path,
) -> None:
    """The listing looks at the first hot height above the index to see that the journal
    goes on there; an entry that fails its checksum does go on (it is not this source's to
    read): the segments are listed, none fails."""
    plane = open_plane(f"sqlite://{tmp_path}/aos.db", f"file://{tmp_path}/objects")
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"e%d" % i for i in range(30)])
    plane.set_cold_horizon(u, w, 20)
    Exporter(plane, ExportConfig(enabled=True, min_entries=1, target_entries=20)).export_all(u, w)
    key = WorldKeys(u, w).entry_chunk(21, 0, 1)
    stored = kv.run(plane.engine, lambda tr: tr.get(key))
    assert stored is not None
    kv.run_sync(plane.engine, lambda tr: tr.set(key, bytes([stored[0] ^ 1]) + stored[1:]))
    refs = list(from_index(plane, Selection()))
    assert [(r.start, r.end, r.error) for r in refs] == [(1, 20, None)]
    plane.engine.close()
