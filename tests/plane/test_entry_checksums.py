"""Journal entry checksums (layouts 3 and 4, issue #35): a changed byte of a stored entry, a
value copied under another key, a damaged chunk -- each is ``DamagedJournalEntry`` naming
the height, on every engine, on every read path and in both checksummed layouts; a layout-2
store keeps its own form."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest

from aosp.fsck import Fsck
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from persistence import kv
from persistence.errors import DamagedJournalEntry, MissingJournalEntry, StoreFormatError
from persistence.ids import UniverseId, WorldId
from persistence.keyspace import CHUNK_SIZE, LAYOUT_KEY, LAYOUT_VERSION, WorldKeys
from persistence.plane import Plane
from persistence.protocols import checksums
from persistence.protocols.checksums import CRC32, CRC32C, SEAL_BYTES
from persistence.records import LayoutRecord
from segments import open_plane
from segments.export import ExportConfig, Exporter
from tests.plane.test_plane_contract import event


def _stored(plane: Plane, key: bytes) -> bytes:
    value = kv.run(plane.engine, lambda tr: tr.get(key))
    assert value is not None
    return value


def _put(plane: Plane, key: bytes, value: bytes) -> None:
    kv.run_sync(plane.engine, lambda tr: tr.set(key, value))


def _flip(value: bytes, at: int) -> bytes:
    changed = bytearray(value)
    changed[at] ^= 0x01
    return bytes(changed)


@pytest.fixture(params=[3, 4], ids=["layout3", "layout4"])
def plane(engine: kv.Engine, request: pytest.FixtureRequest) -> Plane:
    """A plane on a store of each checksummed layout: 3 (CRC-32, as an earlier release
    created it) and 4 (CRC-32C, a new store's)."""
    return open_plane(_at_layout(engine, request.param), MemoryObjectStore())


def test_a_new_store_is_of_layout_4_and_seals_with_crc32c(engine: kv.Engine) -> None:
    plane = open_plane(engine, MemoryObjectStore())
    assert plane.layout == LAYOUT_VERSION == 4 and plane.sealing is CRC32C
    assert CRC32C.algorithm == "crc32c" and CRC32.algorithm == "crc32"


def test_each_layout_seals_every_value_with_its_key(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    sealing = {3: CRC32, 4: CRC32C}[plane.layout or 0]
    assert plane.sealing is sealing and plane.checksummed
    plane.append_batch(universe, world, 0, [b"one", b"two"])
    keys = WorldKeys(universe, world)
    key = keys.entry_chunk(2, 0, 1)
    checksum = sealing.crc(b"two", sealing.crc(key)).to_bytes(SEAL_BYTES, "little")
    assert _stored(plane, key) == sealing.seal(key, b"two") == b"two" + checksum
    assert plane.read_range(universe, world, 1, 2) == [(1, b"one"), (2, b"two")]


@pytest.mark.parametrize("at", [0, 500, 1_000, 1_003], ids=["first", "middle", "last", "sum"])
def test_a_changed_byte_is_damage_on_every_read(
    plane: Plane, universe: UniverseId, world: WorldId, at: int
) -> None:
    """One bit of one entry among 600 (the page's fast path), in its payload or in its
    checksum: read_range, read_hot and fsck each name height 300 and no other."""
    rng = random.Random(at)
    plane.append_batch(universe, world, 0, [rng.randbytes(1_000) for _ in range(600)])
    key = WorldKeys(universe, world).entry_chunk(300, 0, 1)
    _put(plane, key, _flip(_stored(plane, key), at))
    for read in (plane.read_range, plane.read_hot):
        with pytest.raises(DamagedJournalEntry) as err:
            read(universe, world, 1, 600)
        assert err.value.height == 300 and str(world) in str(err.value)
    assert len(plane.read_range(universe, world, 1, 299)) == 299
    assert len(plane.read_range(universe, world, 301, 300)) == 300
    report = Fsck(plane).run()
    journal = [f for f in report.errors if f.area == "journal"]
    assert [(f.subject, "checksum" in f.message) for f in journal] == [("height 300", True)]


def test_a_value_copied_under_another_height_is_damage(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """A whole, well-sealed value in the wrong place (a page of another height written over
    this one): the checksum covers the key, so it does not pass as height 4's entry."""
    plane.append_batch(universe, world, 0, [b"three"] * 3 + [b"four"])
    keys = WorldKeys(universe, world)
    _put(plane, keys.entry_chunk(4, 0, 1), _stored(plane, keys.entry_chunk(3, 0, 1)))
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_range(universe, world, 1, 4)
    assert err.value.height == 4


def test_a_value_copied_from_another_world_is_damage(plane: Plane, universe: UniverseId) -> None:
    a, b = WorldId.new(), WorldId.new()
    for world in (a, b):
        plane.create_world(universe, world)
        plane.append_batch(universe, world, 0, [f"{world}".encode()])
    key_a = WorldKeys(universe, a).entry_chunk(1, 0, 1)
    key_b = WorldKeys(universe, b).entry_chunk(1, 0, 1)
    _put(plane, key_b, _stored(plane, key_a))
    with pytest.raises(DamagedJournalEntry):
        plane.read_range(universe, b, 1, 1)
    assert plane.read_range(universe, a, 1, 1) == [(1, str(a).encode())]


def test_a_damaged_chunk_of_a_large_entry_is_damage(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    big = random.Random(7).randbytes(2 * CHUNK_SIZE + 10)
    plane.append_batch(universe, world, 0, [b"before", big, b"after"])
    key = WorldKeys(universe, world).entry_chunk(2, 1, 3)
    assert len(_stored(plane, key)) == CHUNK_SIZE + SEAL_BYTES
    assert plane.read_range(universe, world, 1, 3)[1] == (2, big)
    _put(plane, key, _flip(_stored(plane, key), 12_345))
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_range(universe, world, 1, 3)
    assert err.value.height == 2
    assert plane.read_range(universe, world, 3, 1) == [(3, b"after")]


def test_a_damaged_entry_read_through_the_universe_log_is_damage(
    plane: Plane, universe: UniverseId
) -> None:
    world, other = WorldId.new(), WorldId.new()
    for each in (world, other):
        plane.create_world(universe, each)
    batches = [(other, 0, [b"x", b"y"]), (world, 0, [b"a", b"b"])]
    plane.append_sequenced(universe, batches, [["t", "t"]] * 2)
    assert [e.entry for e in plane.read_log(universe, 1, 10)] == [b"x", b"y", b"a", b"b"]
    key = WorldKeys(universe, world).entry_chunk(2, 0, 1)
    sound = _stored(plane, key)
    _put(plane, key, _flip(sound, 0))
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_log(universe, 1, 10)
    assert (err.value.world, err.value.height) == (str(world), 2)
    # a sound value of another world's entry, copied under this one's key, is damage too
    _put(plane, key, _stored(plane, WorldKeys(universe, other).entry_chunk(2, 0, 1)))
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_log(universe, 1, 10)
    assert (err.value.world, err.value.height) == (str(world), 2)
    _put(plane, key, sound)
    assert [e.entry for e in plane.read_log(universe, 1, 10)] == [b"x", b"y", b"a", b"b"]


def test_fsck_reports_a_run_of_damaged_entries_once_and_reads_on(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """Heights 100-109 damaged (a page of them), 200 missing: two findings, the run named
    once, the hole after it still found."""
    plane.append_batch(universe, world, 0, [b"x" * 100] * 300)
    keys = WorldKeys(universe, world)
    for height in range(100, 110):
        key = keys.entry_chunk(height, 0, 1)
        _put(plane, key, _flip(_stored(plane, key), 3))
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.entry_chunk(200, 0, 1)))
    findings = {f.subject: f.message for f in Fsck(plane).run().errors if f.area == "journal"}
    assert set(findings) == {"heights 100-109", "height 200"}, findings
    assert "fails its checksum" in findings["heights 100-109"]
    assert "and the 9 after it" in findings["heights 100-109"]
    assert "missing" in findings["height 200"]


def test_export_does_not_move_a_damaged_entry_into_a_segment(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    """A segment gets a checksum of its own: an export that read a damaged entry and wrote
    it into one would make the damage pass every later check. It stops naming the height;
    nothing is indexed, the hot keys stay."""
    plane.append_batch(universe, world, 0, [b"e%d" % i for i in range(20)])
    key = WorldKeys(universe, world).entry_chunk(12, 0, 1)
    _put(plane, key, _flip(_stored(plane, key), 1))
    plane.set_cold_horizon(universe, world, 20)
    exporter = Exporter(plane, ExportConfig(enabled=True, min_entries=1, target_entries=20))
    with pytest.raises(DamagedJournalEntry) as err:
        exporter.export_all(universe, world)
    assert err.value.height == 12
    assert plane.list_segments(universe, world) == []
    assert len(plane.read_hot(universe, world, 1, 11)) == 11


def test_without_its_c_part_layout_4_reads_the_same_and_fsck_says_so(
    engine: kv.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An install without the C part (no compiler) seals and checks CRC-32C in Python: the
    same bytes, read back by the C part and the other way round, damage found; fsck counts
    the entries it checked that way."""
    plane = open_plane(engine, MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"sealed in C", b"x" * (CHUNK_SIZE + 1)])
    monkeypatch.setattr(checksums, "CRC32C", checksums.CRC32C_IN_PYTHON)
    slow = open_plane(engine, MemoryObjectStore())
    assert slow.sealing is checksums.CRC32C_IN_PYTHON
    slow.append_batch(u, w, 2, [b"sealed in Python"])
    expected = [(1, b"sealed in C"), (2, b"x" * (CHUNK_SIZE + 1)), (3, b"sealed in Python")]
    assert slow.read_range(u, w, 1, 3) == expected
    report = Fsck(slow).run()
    assert report.ok and report.warnings == [], report.findings
    assert (
        report.checked["journal entries checked in Python (CRC-32C without its C part: slow)"] == 3
    )
    key = WorldKeys(u, w).entry_chunk(3, 0, 1)
    _put(slow, key, _flip(_stored(slow, key), 2))
    with pytest.raises(DamagedJournalEntry) as err:
        slow.read_range(u, w, 1, 3)
    assert err.value.height == 3
    monkeypatch.undo()
    _put(slow, key, checksums.CRC32C_IN_PYTHON.seal(key, b"sealed in Python"))
    assert plane.read_range(u, w, 1, 3) == expected
    assert "journal entries checked in Python" not in " ".join(Fsck(plane).run().checked)


def _at_layout(engine: kv.Engine, version: int) -> kv.Engine:
    """``engine`` with the layout record of ``version``, as a store written by an older
    (or newer) release holds it."""
    kv.run_sync(engine, lambda tr: tr.set(LAYOUT_KEY, LayoutRecord(version).to_cbor()))
    return engine


def test_a_layout_2_store_keeps_its_entries_as_they_were_written() -> None:
    """A store created by a release before checksums: opened, appended to and read in its
    own form (payloads as written, no checksum), its layout record unchanged; fsck counts
    its entries as read without checksums (not a warning: ``--strict`` would fail every
    such store for good)."""
    engine = _at_layout(MemoryEngine(), 2)
    plane = open_plane(engine, MemoryObjectStore())
    assert plane.layout == 2 and not plane.checksummed
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    plane.append_batch(u, w, 0, [b"old form", b"x" * (CHUNK_SIZE + 1)])
    plane.enqueue(u, w, event(1))
    plane.drain_inbox_to_journal(u, w)
    keys = WorldKeys(u, w)
    assert _stored(plane, keys.entry_chunk(1, 0, 1)) == b"old form"
    assert len(_stored(plane, keys.entry_chunk(2, 0, 2))) == CHUNK_SIZE
    assert [h for h, _ in plane.read_range(u, w, 1, 10)] == [1, 2, 3]
    assert _stored(plane, LAYOUT_KEY) == LayoutRecord(2).to_cbor()
    report = Fsck(plane).run()
    assert report.ok and report.warnings == [], report.findings
    assert report.checked["journal entries without checksums (layout 2)"] == 3
    assert report.checked["journal entries"] == 3


@pytest.mark.parametrize("version", [1, 5])
def test_a_layout_this_release_does_not_read_is_refused(version: int) -> None:
    with pytest.raises(StoreFormatError, match=f"layout {version}"):
        open_plane(_at_layout(MemoryEngine(), version), MemoryObjectStore())


def test_a_plane_opened_on_an_empty_store_learns_its_layout_from_its_creator() -> None:
    """A reader opened (without create) before anything was in the store, which a release
    before checksums then creates (layout 2): it reads and writes that store in layout 2's
    form -- not its own release's guess --, and refused to write before the store had a
    layout at all (review of issue #35's checksums: sealed values in a layout-2 store)."""
    engine = MemoryEngine()
    early = open_plane(engine, MemoryObjectStore(), create=False)
    assert early.layout is None
    u, w = UniverseId.new(), WorldId.new()
    with pytest.raises(StoreFormatError, match="no layout record yet"):
        early.append_batches(u, [(w, 0, [b"too early"])], create_missing=True)
    assert kv.run(engine, lambda tr: tr.get_range(b"", b"\xff")) == []
    old = open_plane(_at_layout(engine, 2), MemoryObjectStore())
    old.create_world(u, w)
    old.append_batch(u, w, 0, [b"written by the old release"])
    assert early.read_range(u, w, 1, 1) == [(1, b"written by the old release")]
    assert early.layout == 2 and not early.checksummed
    early.enqueue(u, w, event(1))
    early.drain_inbox_to_journal(u, w)
    assert len(_stored(old, WorldKeys(u, w).entry_chunk(1, 0, 1))) == len(
        b"written by the old release"
    )
    assert [h for h, _ in old.read_range(u, w, 1, 2)] == [1, 2]  # the drained entry, unsealed


def test_a_store_with_data_but_no_layout_record_is_refused_even_to_a_creator() -> None:
    """Its entries' form is unknown: stamping the current layout over a layout-2 store's
    data would make every entry read as damaged and mix two forms."""
    engine = MemoryEngine()
    plane = open_plane(_at_layout(engine, 2), MemoryObjectStore())
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    kv.run_sync(engine, lambda tr: tr.clear(LAYOUT_KEY))
    for create in (True, False):
        with pytest.raises(StoreFormatError, match="no layout record"):
            open_plane(engine, MemoryObjectStore(), create=create)
    assert kv.run(engine, lambda tr: tr.get(LAYOUT_KEY)) is None


def test_damaged_journal_errors_survive_pickling() -> None:
    """As a Spark task's error crosses processes."""
    for error in (DamagedJournalEntry("w", 5), MissingJournalEntry("w", 6)):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert (again.world, again.height) == (error.world, error.height)


def test_a_byte_changed_in_the_sqlite_file_is_found_where_sqlite_sees_nothing(
    tmp_path: Path,
) -> None:
    """One bit of an entry's payload changed in a closed ``aos.db`` (issue #35: reads
    returned the altered entry, fsck said "0 errors"): SQLite's own check passes -- the
    page is well formed --, the read names the height, fsck reports it."""
    db = tmp_path / "aos.db"
    plane = open_plane(f"sqlite://{db}", f"file://{tmp_path}/objects")
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    rng = random.Random(35)
    entries = [rng.randbytes(1_000) for _ in range(400)]
    plane.append_batch(u, w, 0, entries)
    plane.engine.close()
    body = bytearray(db.read_bytes())
    at = body.find(entries[396][:64])
    assert at > 0 and body.find(entries[396][:64], at + 1) < 0
    body[at + 10] ^= 0x01
    db.write_bytes(bytes(body))
    plane = open_plane(f"sqlite://{db}", f"file://{tmp_path}/objects", create=False)
    assert plane.engine.integrity_check() == []
    with pytest.raises(DamagedJournalEntry) as err:
        plane.read_range(u, w, 1, 400)
    assert err.value.height == 397
    report = Fsck(plane).run()
    assert [(f.area, f.subject) for f in report.errors] == [("journal", "height 397")]
    plane.engine.close()


def test_a_missing_entry_is_still_missing_not_damaged(
    plane: Plane, universe: UniverseId, world: WorldId
) -> None:
    plane.append_batch(universe, world, 0, [b"e"] * 10)
    keys = WorldKeys(universe, world)
    kv.run_sync(plane.engine, lambda tr: tr.clear(keys.entry_chunk(5, 0, 1)))
    with pytest.raises(MissingJournalEntry) as err:
        plane.read_range(universe, world, 1, 10)
    assert err.value.height == 5
