"""Protocol F under faults: a crash at every step converges; damaged or missing segments
are typed Corruption naming the object; foreground writes continue during export."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import kv
from persistence.errors import (
    DamagedJournalEntry,
    MissingJournalEntry,
    SegmentChecksumMismatch,
    SegmentCorruption,
    SegmentMissing,
)
from persistence.futures import drive
from persistence.ids import UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import Plane
from persistence.protocols.export import read_marker
from segments import open_plane
from segments.export import ExportConfig, Exporter
from segments.restore import full_replay, restore
from tests.segments.workload import snapshot_now

CONFIG = ExportConfig(enabled=True, target_entries=6, delete_chunk_entries=4)
ENTRIES = [f"e{i}".encode() * (i % 7 + 1) for i in range(1, 31)]


U = UniverseId.parse("00000000-0000-4000-8000-000000000001")
W = WorldId.parse("00000000-0000-4000-8000-000000000002")


def prepared(plane: Plane) -> tuple[UniverseId, WorldId]:
    """The same world in every run, so segment bytes (and checksums) must be identical."""
    u, w = U, W
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, ENTRIES)
    snapshot_now(plane, u, w, promote=True)  # baseline at 30
    return u, w


State = tuple[list[tuple[int, int, bytes]], list[str], list[int], list[tuple[int, bytes]]]


def state_of(plane: Plane, u: UniverseId, w: WorldId) -> State:
    """Segments + index + hot keys + journal view, for comparing runs."""
    head = plane.head(u, w)
    segments = [(s.start, s.end, s.checksum) for s in plane.list_segments(u, w)]
    objects = sorted(o.key.rsplit("/", 1)[1] for o in plane.objects.list("segments/"))
    hot = [h for h, _ in plane.read_hot(u, w, segments[-1][1] + 1 if segments else 1, 1000)]
    return segments, objects, hot, plane.read_range(u, w, 1, head)


def test_a_crash_at_every_export_step_resumes_and_converges(tmp_path: Path) -> None:
    reference = open_plane(MemoryEngine(), LocalObjectStore(tmp_path / "ref"))
    u, w = prepared(reference)
    Exporter(reference, CONFIG).export_all(u, w)
    expected = state_of(reference, u, w)
    assert len(expected[0]) == 5  # 29 exportable heights in segments of 6

    probe = FaultInjector()
    plane = open_plane(
        FaultyEngine(MemoryEngine(), probe), LocalObjectStore(tmp_path / "probe"), hooks=probe
    )
    pu, pw = prepared(plane)
    before = dict(probe.points)
    Exporter(plane, CONFIG).export_all(pu, pw)
    points = {p: n - before.get(p, 0) for p, n in probe.points.items() if p.startswith("export.")}
    assert set(points) == {
        "export.after_copy_started",
        "export.after_upload",
        "export.after_index",
        "export.after_delete_chunk",
        "export.after_delete",
    }
    runs = 0
    for point, occurrences in sorted(points.items()):
        for occurrence in range(1, occurrences + 1):
            injector = FaultInjector()
            plane = open_plane(
                FaultyEngine(MemoryEngine(), injector),
                LocalObjectStore(tmp_path / f"{point}-{occurrence}"),
                hooks=injector,
            )
            cu, cw = prepared(plane)
            injector.crash_at(point, occurrence)
            with pytest.raises(SimulatedCrash):
                Exporter(plane, CONFIG).export_all(cu, cw)
            # Between the crash and the restart the journal reads the same, from every
            # height: whichever of a height's hot key and segment the read finds first.
            for first in range(1, 31):
                read = plane.read_range(cu, cw, first, 31 - first)
                assert [e for _, e in read] == ENTRIES[first - 1 :], f"{point} #{occurrence}"
            Exporter(plane, CONFIG).export_all(cu, cw)  # the restarted exporter
            got = state_of(plane, cu, cw)
            assert got[0] == expected[0] and got[1:] == expected[1:], f"{point} #{occurrence}"
            assert drive(read_marker(plane.engine, WorldKeys(cu, cw))) is None
            runs += 1
    assert runs >= 15


@pytest.mark.parametrize("point", ["export.after_index", "export.after_delete_chunk"])
def test_a_damaged_hot_key_left_below_coverage_is_read_from_its_segment(
    tmp_path: Path, point: str
) -> None:
    """Between indexing a segment and deleting its hot keys, both hold its heights: a hot
    key that is damaged there (or undecodable) does not fail a read -- the segment holding
    the page's first height is read instead. Above coverage, the damage is still found."""
    injector = FaultInjector()
    plane = open_plane(
        FaultyEngine(MemoryEngine(), injector), LocalObjectStore(tmp_path), hooks=injector
    )
    u, w = prepared(plane)
    injector.crash_at(point, 1)  # the first segment (1-6) indexed, its keys not all gone
    with pytest.raises(SimulatedCrash):
        Exporter(plane, CONFIG).export_all(u, w)
    keys = WorldKeys(u, w)

    async def damage(tr: kv.Transaction) -> None:
        key = keys.entry_chunk(6, 0, 1)
        value = await tr.get(key)
        assert value is not None
        tr.set(key, value[:-1] + bytes([value[-1] ^ 1]))
        tr.set(keys.entry_chunk(5, 0, 1) + b"\xff", b"junk")  # not an entry's key

    kv.run(plane.engine, damage)
    for first in range(1, 31):
        read = plane.read_range(u, w, first, 31 - first)
        assert [e for _, e in read] == ENTRIES[first - 1 :], first
    # above coverage nothing holds the heights: damage there is still an error
    kv.run(plane.engine, lambda tr: _flip_entry(tr, keys, 20))
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_range(u, w, 1, 30)
    assert err.value.height == 20


async def _flip_entry(tr: kv.Transaction, keys: WorldKeys, height: int) -> None:
    key = keys.entry_chunk(height, 0, 1)
    value = await tr.get(key)
    assert value is not None
    tr.set(key, bytes([value[0] ^ 1]) + value[1:])


def test_an_undecodable_key_among_a_worlds_entries_is_a_missing_entry(
    tmp_path: Path,
) -> None:
    """Not a ``ValueError`` of the key's decoding: the height whose key is out of place."""
    plane = open_plane(MemoryEngine(), LocalObjectStore(tmp_path))
    u, w = prepared(plane)
    keys = WorldKeys(u, w)
    kv.run(plane.engine, lambda tr: _set(tr, keys.entry_chunk(5, 0, 1) + b"\xff", b"junk"))
    with pytest.raises(MissingJournalEntry) as err:  # where height 6's key should be
        plane.read_range(u, w, 5, 3)
    assert err.value.height == 6


async def _set(tr: kv.Transaction, key: bytes, value: bytes) -> None:
    tr.set(key, value)


def test_commit_faults_during_export_converge(tmp_path: Path) -> None:
    for seed in range(6):
        injector = FaultInjector(seed=seed)
        plane = open_plane(
            FaultyEngine(MemoryEngine(), injector), LocalObjectStore(tmp_path / str(seed))
        )
        u, w = prepared(plane)
        injector.commit_fault_rate = 0.3
        Exporter(plane, CONFIG).export_all(u, w)
        injector.commit_fault_rate = 0
        assert injector.log
        assert [e for _, e in plane.read_range(u, w, 1, 30)] == ENTRIES
        assert restore(plane, u, w, ReferenceKernel()).state == (
            full_replay(plane, u, w, ReferenceKernel()).state
        )


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Plane, UniverseId, WorldId, LocalObjectStore]:
    objects = LocalObjectStore(tmp_path / "objects")
    plane = open_plane(MemoryEngine(), objects)
    u, w = prepared(plane)
    Exporter(plane, CONFIG).export_all(u, w)
    return plane, u, w, objects


def _segment_file(objects: LocalObjectStore, plane: Plane, u: UniverseId, w: WorldId) -> Path:
    record = plane.list_segments(u, w)[1]
    return objects.root / record.object_key


def test_flipped_byte_is_corruption_naming_the_object(exported) -> None:  # type: ignore[no-untyped-def]
    plane, u, w, objects = exported
    path = _segment_file(objects, plane, u, w)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(SegmentCorruption) as err:
        plane.read_range(u, w, 1, 30)
    assert err.value.object_key == plane.list_segments(u, w)[1].object_key
    with pytest.raises(SegmentCorruption):
        full_replay(plane, u, w, ReferenceKernel())


def test_truncated_object_is_corruption_with_offset(exported) -> None:  # type: ignore[no-untyped-def]
    plane, u, w, objects = exported
    path = _segment_file(objects, plane, u, w)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])
    with pytest.raises(SegmentCorruption) as err:
        plane.read_range(u, w, 7, 3)
    assert "truncated" in err.value.problem and err.value.offset <= len(data) - 20


def test_missing_object_is_corruption_never_empty(exported) -> None:  # type: ignore[no-untyped-def]
    plane, u, w, objects = exported
    _segment_file(objects, plane, u, w).unlink()
    with pytest.raises(SegmentMissing):
        plane.read_range(u, w, 7, 3)
    assert plane.read_range(u, w, 1, 6) == [(h, ENTRIES[h - 1]) for h in range(1, 7)]


def test_wrong_index_checksum_is_a_mismatch(exported) -> None:  # type: ignore[no-untyped-def]
    plane, u, w, _ = exported
    record = plane.list_segments(u, w)[0]
    from dataclasses import replace

    forged = replace(record, checksum=bytes(32))
    keys = UniverseKeys(u)
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.segment(w, record.end), forged.to_cbor()))
    with pytest.raises(SegmentChecksumMismatch) as err:
        plane.read_range(u, w, 1, 3)
    assert err.value.object_key == record.object_key


def test_foreground_appends_continue_during_export(tmp_path: Path) -> None:
    plane = open_plane(SqliteEngine(tmp_path / "kv.db"), LocalObjectStore(tmp_path / "objects"))
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    for start in range(0, 3000, 500):
        plane.append_batch(u, w, start, [bytes(200)] * 500)
    snapshot_now(plane, u, w, promote=True)
    errors: list[BaseException] = []
    stop = threading.Event()
    appended = [0]

    def writer() -> None:
        try:
            while not stop.is_set():
                plane.append_batch(u, w, plane.head(u, w), [b"foreground"])
                appended[0] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        segments = Exporter(plane, ExportConfig(enabled=True, target_entries=250)).export_all(u, w)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert appended[0] > 0 and len(segments) == 12
    head = plane.head(u, w)
    rows = plane.read_range(u, w, 1, head)
    assert [h for h, _ in rows] == list(range(1, head + 1))
