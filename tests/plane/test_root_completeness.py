"""Promotion checks root completeness: a snapshot whose manifest names a blob that its
universe's CAS does not hold never becomes the baseline (restore could not load it), and
the refused promotion writes nothing. Once the blob is in the universe, the same snapshot
promotes and restores."""

from __future__ import annotations

import pytest

from persistence import kv
from persistence.errors import RootIncomplete
from persistence.ids import Hash, UniverseId, WorldId
from persistence.plane import Plane
from segments.restore import load_root


def _dump(plane: Plane) -> list[tuple[bytes, bytes]]:
    return kv.run(plane.engine, lambda tr: tr.get_range(b"", b"\xff"))


@pytest.mark.parametrize("where", ["absent", "other universe"])
def test_promotion_refuses_a_root_naming_a_blob_outside_its_universe(
    plane: Plane, universe: UniverseId, world: WorldId, where: str
) -> None:
    blob = b"a blob the snapshot needs"
    if where == "other universe":
        other, other_world = UniverseId.new(), WorldId.new()
        plane.create_world(other, other_world)
        plane.put_verified(other, blob)
    plane.append_batch(universe, world, 0, [b"e1"])
    needed = Hash.of(blob)
    record, outcome = plane.snapshot_commit(
        universe, world, b"state", height=1, logical_time_ns=1, manifest=[needed],
        receipt_horizon_height=1,
    )  # fmt: skip
    assert outcome.indexed and not outcome.promoted

    before = _dump(plane)
    with pytest.raises(RootIncomplete) as refused:
        plane.promote_baseline(universe, world, record)
    assert refused.value.blob == needed.hex and refused.value.named_by == "manifest[0]"
    with pytest.raises(RootIncomplete):
        plane.snapshot_commit(
            universe, world, b"state 2", height=2, logical_time_ns=2, manifest=[needed],
            receipt_horizon_height=2, promote_baseline=True,
        )  # fmt: skip
    assert _dump(plane) == before
    assert plane.active_baseline(universe, world).height == 0

    plane.put_verified(universe, blob)
    plane.promote_baseline(universe, world, record)
    assert plane.active_baseline(universe, world) == record
    assert load_root(plane, universe, record) == b"state"
