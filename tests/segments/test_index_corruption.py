"""Every kind of damage to a segment index record is found and reported -- by stitched
reads, the replay check, fsck and the ``aosp segments verify`` / ``restore verify`` /
``fsck`` / ``journal read`` commands -- one finding for the one bad record, never a hang and
never a usage error for the whole store. ``put_segment`` refuses every record export could
not have written, leaving the index as it was. (The Spark source: ``tests/spark``.)

Each test runs under a SIGALRM guard: a read that spins fails the test instead of blocking
the run."""

from __future__ import annotations

import io
import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from aosp.cli import main
from aosp.fsck import Fsck
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import kv
from persistence.errors import (
    Conflict,
    Corruption,
    MissingJournalEntry,
    PersistError,
    SegmentCorruption,
    SegmentIndexCorruption,
    SegmentMissing,
    Validation,
    WorldNotFound,
)
from persistence.ids import UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.keyspace import UniverseKeys
from persistence.plane import Plane
from persistence.segment_records import SegmentIndexRecord
from segments import open_plane
from segments.export import ExportConfig, Exporter
from segments.format import SegmentHeader, SegmentWriter, segment_key
from segments.restore import check_replay, full_replay, restore
from segments.verify import check_segments
from tests.segments.workload import snapshot_now

GUARD_SECONDS = 60


class Hung(Exception):
    """A test outran its guard: something spins."""


@pytest.fixture(autouse=True)
def guard() -> Iterator[None]:
    """Fail (not block) a test that runs past :data:`GUARD_SECONDS`."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still running after {GUARD_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(GUARD_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- the store


@dataclass
class DamageStore:
    """A store whose world ``w`` has segments 1-10, 11-20, 21-29 and a hot height 30; its
    sibling ``w2`` and world ``x`` of another universe ``u2`` have the same layout."""

    root: Path
    plane: Plane
    u: UniverseId
    w: WorldId
    w2: WorldId
    u2: UniverseId
    x: WorldId

    def record(self, end: int, u: UniverseId | None = None, w: WorldId | None = None) -> Any:
        universe, world = u or self.u, w or self.w
        return next(r for r in self.plane.list_segments(universe, world) if r.end == end)

    def set_index(self, key_end: int, record: SegmentIndexRecord | None) -> None:
        """Write ``record`` under the key of end ``key_end`` (``None``: clear it)."""
        keys = UniverseKeys(self.u)

        def write(tr: kv.Transaction) -> None:
            if record is None:
                tr.clear(keys.segment(self.w, key_end))
            else:
                tr.set(keys.segment(self.w, key_end), record.to_cbor())

        kv.run_sync(self.plane.engine, write)

    def cli(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        """``aosp ARGS --data-dir ROOT`` through the CLI's main function."""
        capsys.readouterr()
        code = main([*args, "--data-dir", str(self.root), "--quiet"])
        out, err = capsys.readouterr()
        return code, out, err


def _world(plane: Plane, u: UniverseId, w: WorldId) -> None:
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [f"entry {h}".encode() for h in range(1, 31)])
    snapshot_now(plane, u, w, promote=True)
    Exporter(plane, ExportConfig(enabled=True, target_entries=10)).export_all(u, w)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DamageStore]:
    plane = open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    u, u2 = UniverseId.new(), UniverseId.new()
    w, w2, x = WorldId.new(), WorldId.new(), WorldId.new()
    for universe, world in ((u, w), (u, w2), (u2, x)):
        _world(plane, universe, world)
    assert [(r.start, r.end) for r in plane.list_segments(u, w)] == [(1, 10), (11, 20), (21, 29)]
    yield DamageStore(tmp_path, plane, u, w, w2, u2, x)
    plane.engine.close()


# --------------------------------------------------------------------------- damage


@dataclass(frozen=True)
class Damaged:
    """What a damage leaves for the checks to find: text every report of it contains, the
    end height of the index key whose record is bad (``None``: every record is whole), and
    the fsck area of the one error finding. ``in_index``: the error is a
    ``SegmentIndexCorruption`` naming that key (else the object or the hot journal)."""

    needle: str
    bad_record: int | None
    area: str = "segments"
    in_index: bool = True


def _index_damage(key_end: int) -> Damaged:
    return Damaged(f"segment index record at end {key_end}", key_end)


def key_below_end(s: DamageStore) -> Damaged:
    record = _middle(s)
    s.set_index(20, None)
    s.set_index(15, record)
    return _index_damage(15)


def key_above_end(s: DamageStore) -> Damaged:
    record = _middle(s)
    s.set_index(20, None)
    s.set_index(25, record)
    return _index_damage(25)


def byte_size_wrong(s: DamageStore) -> Damaged:
    s.set_index(20, replace(_middle(s), byte_size=_middle(s).byte_size + 1))
    return _index_damage(20)


def checksum_algorithm_wrong(s: DamageStore) -> Damaged:
    s.set_index(20, replace(_middle(s), checksum_algorithm="sha256"))
    return _index_damage(20)


def record_deleted(s: DamageStore) -> Damaged:
    s.set_index(20, None)  # heights 11-20: no record, and export deleted their hot keys
    return _index_damage(29)  # the record after the gap carries it


def last_record_deleted(s: DamageStore) -> Damaged:
    s.set_index(29, None)  # the index ends at 20; export deleted the hot keys of 21-29
    return Damaged("at height 21", None, area="journal", in_index=False)


def unsafe_key_relative(s: DamageStore) -> Damaged:
    s.set_index(20, replace(_middle(s), object_key="../../x"))
    return _index_damage(20)


def unsafe_key_absolute(s: DamageStore) -> Damaged:
    s.set_index(20, replace(_middle(s), object_key="/etc/passwd"))
    return _index_damage(20)


def other_universes_object(s: DamageStore) -> Damaged:
    s.set_index(20, s.record(20, s.u2, s.x))  # its object, checksum and size: all valid
    return _index_damage(20)


def other_worlds_object(s: DamageStore) -> Damaged:
    s.set_index(20, s.record(20, s.u, s.w2))
    return _index_damage(20)


def other_worlds_bytes(s: DamageStore) -> Damaged:
    """The object at the record's own key replaced by the sibling world's segment."""
    mine, theirs = _middle(s), s.record(20, s.u, s.w2)
    path = s.root / "objects" / mine.object_key
    path.chmod(0o644)
    path.write_bytes((s.root / "objects" / theirs.object_key).read_bytes())
    return Damaged(mine.object_key, 20, in_index=False)


def overlapping_record(s: DamageStore) -> Damaged:
    record = _middle(s)
    wider = replace(
        record, start=5, entry_count=16, object_key=segment_key(s.u, s.w, 5, record.end)
    )
    s.set_index(20, wider)
    return _index_damage(20)


def _middle(s: DamageStore) -> SegmentIndexRecord:
    return s.record(20)  # type: ignore[no-any-return]


DAMAGE: dict[str, Callable[[DamageStore], Damaged]] = {
    f.__name__: f
    for f in (
        key_below_end,
        key_above_end,
        byte_size_wrong,
        checksum_algorithm_wrong,
        record_deleted,
        last_record_deleted,
        unsafe_key_relative,
        unsafe_key_absolute,
        other_universes_object,
        other_worlds_object,
        other_worlds_bytes,
        overlapping_record,
    )
}


@pytest.fixture(params=list(DAMAGE))
def damaged(request: pytest.FixtureRequest, store: DamageStore) -> tuple[DamageStore, Damaged]:
    return store, DAMAGE[request.param](store)


# --------------------------------------------------------------------------- reads


def test_a_stitched_read_fails_naming_the_record(damaged: tuple[DamageStore, Damaged]) -> None:
    s, found = damaged
    with pytest.raises(Corruption) as err:
        s.plane.read_range(s.u, s.w, 1, 100)
    assert found.needle in str(err.value)
    if found.in_index:
        assert isinstance(err.value, SegmentIndexCorruption)
        assert err.value.key_end == found.bad_record
    assert s.plane.read_range(s.u, s.w, 1, 10) == [
        (h, f"entry {h}".encode()) for h in range(1, 11)
    ]  # heights the damage does not touch still read
    sibling = s.plane.read_range(s.u, s.w2, 1, 100)  # nor does the sibling world
    assert [h for h, _ in sibling] == list(range(1, s.plane.head(s.u, s.w2) + 1))


def test_the_replay_check_reports_it_and_restore_needs_no_cold_history(
    damaged: tuple[DamageStore, Damaged],
) -> None:
    s, found = damaged
    with pytest.raises(Corruption, match=found.needle):
        full_replay(s.plane, s.u, s.w, ReferenceKernel())
    # Segments hold only history below the baseline: restore starts there and reads none.
    assert restore(s.plane, s.u, s.w, ReferenceKernel()).from_height == 30
    row = check_replay(s.plane, s.u, s.w, ReferenceKernel)
    assert row["equal"] is False and found.needle in row["error"]
    assert check_replay(s.plane, s.u, s.w2, ReferenceKernel)["equal"] is True


def test_fsck_reports_exactly_the_bad_record(damaged: tuple[DamageStore, Damaged]) -> None:
    s, found = damaged
    report = Fsck(s.plane).run()
    errors = [f for f in report.findings if f.severity == "error"]
    assert len(errors) == 1, errors
    assert errors[0].world == str(s.w) and found.needle in errors[0].message
    assert errors[0].area == found.area


def test_check_segments_reports_one_check_per_record(
    damaged: tuple[DamageStore, Damaged],
) -> None:
    s, found = damaged
    checks = list(check_segments(s.plane, s.u, s.w, s.plane.head(s.u, s.w)))
    bad = [c for c in checks if c.error is not None]
    assert [c.key_end for c in bad] == ([] if found.bad_record is None else [found.bad_record])
    assert all(found.needle in str(c.error) for c in bad)
    assert [c.error for c in checks if c.key_end == 10] == [None]


def test_the_commands_report_it(
    damaged: tuple[DamageStore, Damaged], capsys: pytest.CaptureFixture[str]
) -> None:
    s, found = damaged
    code, out, err = s.cli(capsys, "fsck", "--json")
    assert code == 1, err
    report = json.loads(out)
    assert report["errors"] == 1 and found.needle in json.dumps(report["findings"])

    code, out, err = s.cli(capsys, "restore", "verify", "--json")
    assert code == 1, err
    rows = {r["world"]: r for r in json.loads(out)["worlds"]}
    assert found.needle in rows[str(s.w)]["error"]
    assert [r["equal"] for k, r in rows.items() if k != str(s.w)] == [True, True]

    code, out, err = s.cli(capsys, "journal", "read", "-u", str(s.u), "-w", str(s.w), "--json")
    assert code == 3 and found.needle in err and err.strip().count("\n") == 0, err

    code, out, err = s.cli(capsys, "segments", "verify", "--json")
    failed = json.loads(out)["failed"]
    if found.bad_record is None:
        assert code == 0 and failed == []  # every remaining record is whole; fsck finds it
        return
    assert code == 1, err
    assert len(failed) == 1 and found.needle in failed[0]["error"]
    assert failed[0]["world"] == str(s.w)


def test_an_undecodable_record_is_a_finding_too(
    store: DamageStore, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = UniverseKeys(store.u)
    kv.run_sync(store.plane.engine, lambda tr: tr.set(keys.segment(store.w, 20), b"\xa1\x61x\x01"))
    with pytest.raises(SegmentIndexCorruption, match="segment index record at end 20"):
        store.plane.read_range(store.u, store.w, 11, 5)
    code, out, _ = store.cli(capsys, "segments", "verify", "--json")
    assert code == 1 and [f["key_end"] for f in json.loads(out)["failed"]] == [20]


def test_every_bad_record_is_reported_not_only_the_first(
    store: DamageStore, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = store.record(10), store.record(29)
    store.set_index(10, replace(first, object_key="/etc/passwd"))
    store.set_index(29, replace(second, byte_size=1))
    code, out, _ = store.cli(capsys, "segments", "verify", "--json")
    assert code == 1 and [f["key_end"] for f in json.loads(out)["failed"]] == [10, 29]
    report = Fsck(store.plane).run()
    assert sorted(f.subject for f in report.errors) == sorted(["/etc/passwd", second.object_key])


# --------------------------------------------------------------------------- put_segment


@pytest.fixture
def indexer(store: DamageStore) -> tuple[Plane, UniverseId, WorldId]:
    """A world with 40 entries (and the two records of its snapshot), its baseline at 30
    and nothing indexed yet."""
    plane, u, w = store.plane, store.u, WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [f"entry {h}".encode() for h in range(1, 41)])
    plane.snapshot_commit(
        u, w, b"\xa0", height=30, logical_time_ns=0, receipt_horizon_height=30,
        promote_baseline=True,
    )  # fmt: skip
    return plane, u, w


def upload(plane: Plane, u: UniverseId, w: WorldId, start: int, end: int) -> SegmentIndexRecord:
    """Write the segment of ``start..end`` (``entry <h>`` at each height) at its canonical
    key; return the record that describes it."""
    out = io.BytesIO()
    writer = SegmentWriter(out, SegmentHeader(u, w, start, end))
    for height in range(start, end + 1):
        writer.add(height, f"entry {height}".encode())
    checksum = writer.finish()
    key = segment_key(u, w, start, end)
    plane.objects.put(key, out.getvalue())
    return SegmentIndexRecord(
        start, end, key, "blake3", checksum, end - start + 1, len(out.getvalue())
    )


def test_put_segment_indexes_what_export_would(indexer: tuple[Plane, UniverseId, WorldId]) -> None:
    plane, u, w = indexer
    record = upload(plane, u, w, 1, 10)
    plane.put_segment(u, w, record)
    plane.put_segment(u, w, record)  # the same record again: a no-op
    assert plane.list_segments(u, w) == [record]
    assert plane.read_range(u, w, 1, 40)[9] == (10, b"entry 10")


REFUSALS: dict[str, tuple[Callable[[Plane, UniverseId, WorldId], Any], type[PersistError], str]] = {
    "a gap after the index": (lambda p, u, w: upload(p, u, w, 12, 20), Conflict, "record.start"),
    "an overlap": (lambda p, u, w: upload(p, u, w, 5, 15), Conflict, "next start is 11"),
    "heights above the head": (
        lambda p, u, w: upload(p, u, w, 11, 45), Validation, "above the journal head",
    ),
    "heights not below the baseline": (
        lambda p, u, w: upload(p, u, w, 11, 30), Validation, "baseline 30",
    ),
    "a relative escape": (
        lambda p, u, w: replace(upload(p, u, w, 11, 20), object_key="../../../etc/passwd"),
        Validation, "record.object_key",
    ),
    "an absolute path": (
        lambda p, u, w: replace(upload(p, u, w, 11, 20), object_key="/etc/passwd"),
        Validation, "record.object_key",
    ),
    "another universe's object": (
        lambda p, u, w: upload(p, UniverseId.new(), w, 11, 20), Validation, "record.object_key",
    ),
    "a missing object": (
        lambda p, u, w: SegmentIndexRecord(
            11, 20, segment_key(u, w, 11, 20), "blake3", bytes(32), 10, 100
        ),
        SegmentMissing, "is missing",
    ),
    "a wrong checksum": (
        lambda p, u, w: replace(upload(p, u, w, 11, 20), checksum=bytes(32)),
        Validation, "record.checksum",
    ),
    "a wrong byte size": (
        lambda p, u, w: replace(upload(p, u, w, 11, 20), byte_size=7), Validation,
        "record.byte_size",
    ),
    "a wrong checksum algorithm": (
        lambda p, u, w: replace(upload(p, u, w, 11, 20), checksum_algorithm="md5"),
        Validation, "record.checksum_algorithm",
    ),
    "an object whose header is another range": (
        lambda p, u, w: _mislabelled(p, u, w), SegmentCorruption, "index says",
    ),
}  # fmt: skip


def _mislabelled(plane: Plane, u: UniverseId, w: WorldId) -> SegmentIndexRecord:
    """A segment of 11-19 stored at the key of 11-20, described as 11-20."""
    inner = upload(plane, u, w, 11, 19)
    key = segment_key(u, w, 11, 20)
    data = plane.objects.get(inner.object_key)
    plane.objects.put(key, data)
    return SegmentIndexRecord(11, 20, key, "blake3", inner.checksum, 10, len(data))


@pytest.mark.parametrize("case", list(REFUSALS))
def test_put_segment_refuses(indexer: tuple[Plane, UniverseId, WorldId], case: str) -> None:
    plane, u, w = indexer
    plane.put_segment(u, w, upload(plane, u, w, 1, 10))
    make, error, needle = REFUSALS[case]
    record = make(plane, u, w)
    before = plane.list_segments(u, w)
    with pytest.raises(error) as err:
        plane.put_segment(u, w, record)
    assert needle in str(err.value)
    assert plane.list_segments(u, w) == before


def test_list_segments_of_a_world_that_does_not_exist_is_world_not_found(
    indexer: tuple[Plane, UniverseId, WorldId],
) -> None:
    """Not ``[]``: a mistyped world, or another universe's, must not read as one with no
    cold history (issue #35)."""
    plane, u, w = indexer
    with pytest.raises(WorldNotFound):
        plane.list_segments(u, WorldId.new())
    with pytest.raises(WorldNotFound):
        plane.list_segments(UniverseId.new(), w)  # w is a world of u only
    assert plane.list_segments(u, w) == []  # an existing world without segments


def test_put_segment_refuses_a_world_that_does_not_exist(
    indexer: tuple[Plane, UniverseId, WorldId],
) -> None:
    plane, u, _ = indexer
    ghost = WorldId.new()
    with pytest.raises(WorldNotFound):
        plane.put_segment(u, ghost, upload(plane, u, ghost, 1, 10))
    indexed = kv.run(plane.engine, lambda tr: tr.get_range(*UniverseKeys(u).segment_range(ghost)))
    assert indexed == []  # nothing indexed for it
    with pytest.raises(WorldNotFound):  # and a listing says it does not exist
        plane.list_segments(u, ghost)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("u", WorldId.new(), None), "universe"),
        ((UniverseId.new(), "w", None), "world"),
        ((UniverseId.new(), WorldId.new(), {"start": 1}), "record"),
    ],
)
def test_put_segment_refuses_wrong_types(
    indexer: tuple[Plane, UniverseId, WorldId], args: tuple[Any, Any, Any], field: str
) -> None:
    plane, u, w = indexer
    record = upload(plane, u, w, 1, 10)
    universe, world, bad = args
    with pytest.raises(Validation) as err:
        plane.put_segment(universe, world, record if bad is None else bad)
    assert err.value.field == field
    assert plane.list_segments(u, w) == []


# --------------------------------------------------------------------------- entry points


def test_entry_points_refuse_bad_inputs(store: DamageStore) -> None:
    plane, u, w = store.plane, store.u, store.w
    kernel = ReferenceKernel()
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: Exporter("plane", ExportConfig()), "plane"),  # type: ignore[arg-type]
        (lambda: Exporter(plane, {"enabled": True}), "config"),  # type: ignore[arg-type]
        (lambda: Exporter(plane, ExportConfig()).plan(str(u), w), "universe"),  # type: ignore[arg-type]
        (lambda: Exporter(plane, ExportConfig(enabled=True)).export_once(u, str(w)), "world"),  # type: ignore[arg-type]
        (lambda: restore(plane, u, str(w), kernel), "world"),  # type: ignore[arg-type]
        (lambda: full_replay(plane, u, w, object()), "kernel"),  # type: ignore[arg-type]
        (lambda: restore("plane", u, w, kernel), "plane"),  # type: ignore[arg-type]
        (lambda: Fsck("plane"), "plane"),  # type: ignore[arg-type]
        (lambda: Fsck(plane).run([str(u)]), "universes[0]"),  # type: ignore[list-item]
        (lambda: list(check_segments(plane, u, w, -1)), "head"),
    ]
    for call, field in cases:
        with pytest.raises(Validation) as err:
            call()
        assert err.value.field == field, (field, err.value)


def test_a_read_of_a_gap_is_never_empty(store: DamageStore) -> None:
    """Heights of a deleted record hold nothing anywhere: the read fails, it never returns
    the entries after them as if they came next."""
    store.set_index(20, None)
    with pytest.raises(SegmentIndexCorruption, match="gap: heights 11-20"):
        store.plane.read_range(store.u, store.w, 11, 1)
    store.set_index(29, None)
    with pytest.raises(MissingJournalEntry):
        store.plane.read_range(store.u, store.w, 11, 1)


def test_fsck_reports_an_active_baseline_whose_root_is_incomplete(store: DamageStore) -> None:
    """A baseline whose manifest names a blob the universe's CAS does not hold (written
    directly: promotion refuses it) is one error finding; restore would fail on it."""
    from persistence import cbor
    from persistence.ids import Hash
    from persistence.keyspace import WorldKeys

    plane, u, w = store.plane, store.u, store.w
    missing = Hash.of(b"a blob that was never stored")
    baseline = plane.active_baseline(u, w)
    manifest = plane.put_verified(u, cbor.encode([missing.digest]))
    forged = replace(baseline, manifest_hash=manifest)
    keys = WorldKeys(u, w)

    def write(tr: kv.Transaction) -> None:
        tr.set(keys.snapshot(baseline.height), forged.to_cbor())
        tr.set(keys.baseline(), forged.to_cbor())

    kv.run_sync(plane.engine, write)
    errors = Fsck(plane).run().errors
    assert [(e.area, e.world, e.subject) for e in errors] == [
        ("snapshots", str(w), f"baseline {baseline.height}")
    ]
    assert "root incomplete" in errors[0].message and missing.digest.hex() in errors[0].message
