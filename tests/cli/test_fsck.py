"""``aosp fsck`` finds each planted fault (exit 1, the finding names it); a clean store
exits 0; warnings (orphans) fail only with ``--strict``. Stored data is never changed."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, envelope_fingerprint
from persistence.journal_records import JOURNAL_HEAD
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from segments import open_plane
from tests.cli.conftest import Store, aosp
from tests.cli.test_commands import open_store


def fsck(store: Store, *more: str) -> tuple[int, dict[str, Any]]:
    result = aosp("fsck", *store.args("--json", "--quiet", *more))
    return result.code, result.json()


def flip_byte(path: Path, offset: int) -> None:
    body = bytearray(path.read_bytes())
    body[offset] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(body))


def ids(store: Store) -> tuple[UniverseId, WorldId]:
    return UniverseId.parse(store.universe), WorldId.parse(store.world)


def external_blob(store: Store, plane: Plane) -> tuple[str, Path]:
    u, _ = ids(store)
    digest = plane.put_verified(u, os.urandom(40_000))
    key = plane.blob_meta(u, digest).object_key
    assert key is not None
    return str(digest), store.data_dir / "objects" / key


def first_segment(store: Store, plane: Plane) -> tuple[str, Path]:
    u, w = ids(store)
    key = plane.list_segments(u, w)[0].object_key
    return key, store.data_dir / "objects" / key


def snapshot_of(store: Store) -> tuple[list[tuple[bytes, bytes]], dict[str, bytes]]:
    """Every key-value pair and every object of the store."""
    plane = open_store(store)
    pairs = plane.engine.create_transaction().get_range(b"", b"\xff").wait()
    plane.engine.close()
    root = store.data_dir / "objects"
    objects = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return pairs, objects


def test_clean_store_passes(store: Store) -> None:
    code, report = fsck(store)
    assert code == 0, report
    assert report["errors"] == 0 and report["warnings"] == 0
    checked = report["checked"]
    assert checked["worlds"] == 3 and checked["segments"] >= 3 and checked["cas bodies"] > 0
    assert checked["journal entries"] > 0 and checked["snapshots"] >= 6
    assert checked["engine storage checks"] == 1  # SQLite's quick_check, and it was clean


def plant_cas_flip(store: Store, plane: Plane) -> str:
    digest, path = external_blob(store, plane)
    flip_byte(path, 1234)
    return digest


def plant_segment_flip(store: Store, plane: Plane) -> str:
    key, path = first_segment(store, plane)
    flip_byte(path, path.stat().st_size // 2)
    return key


def plant_segment_deleted(store: Store, plane: Plane) -> str:
    key, path = first_segment(store, plane)
    path.unlink()
    return key


def plant_hot_key_deleted(store: Store, plane: Plane) -> str:
    u, w = ids(store)
    head = plane.head(u, w)
    keys = WorldKeys(u, w)
    tr = plane.engine.create_transaction()
    tr.clear_range(*keys.entry_prefix(head))
    tr.commit().wait()
    return f"height {head}"


def plant_head_raised_far(store: Store, plane: Plane) -> str:
    """A head damaged to 10**15: one finding for the run of heights it claims, read in a
    few statements (fsck once read them one at a time, for ever)."""
    u, w = ids(store)
    head = plane.head(u, w)
    tr = plane.engine.create_transaction()
    tr.set(WorldKeys(u, w).head(), JOURNAL_HEAD.encode(10**15))
    tr.commit().wait()
    return f"heights {head + 1}-{10**15}"


def plant_meta_deleted(store: Store, plane: Plane) -> str:
    u, w = ids(store)
    tr = plane.engine.create_transaction()
    tr.clear(WorldKeys(u, w).meta())
    tr.commit().wait()
    return "meta"


def plant_meta_damaged(store: Store, plane: Plane) -> str:
    u, w = ids(store)
    tr = plane.engine.create_transaction()
    tr.set(WorldKeys(u, w).meta(), b"\xff\xff\xff\xff")
    tr.commit().wait()
    return "meta"


def plant_ready_mark_cleared(store: Store, plane: Plane) -> str:
    u, w = ids(store)
    plane.enqueue(u, w, DomainEventIngress("test/Event@1", cbor.encode(1)))
    tr = plane.engine.create_transaction()
    tr.clear(WorldKeys(u, w).ready())
    tr.commit().wait()
    return "ready mark"


def plant_idempotency_entry_of_another_item(store: Store, plane: Plane) -> str:
    """The entry names the item but keeps another item's fingerprint: a retry of the
    enqueue would be refused as a reuse of its key."""
    u, w = ids(store)
    seq = plane.enqueue(
        u, w, DomainEventIngress("test/Event@1", cbor.encode(7)), idempotency_key=b"k7"
    )
    other = envelope_fingerprint(b"another item")
    tr = plane.engine.create_transaction()
    tr.set(WorldKeys(u, w).inbox_idempotency(b"k7"), seq.raw + other)
    tr.commit().wait()
    return f"item {seq}"


PLANTS: dict[str, tuple[Callable[[Store, Plane], str], str]] = {
    "flipped CAS body byte": (plant_cas_flip, "cas"),
    "flipped segment byte": (plant_segment_flip, "segments"),
    "deleted segment object": (plant_segment_deleted, "segments"),
    "deleted hot journal key": (plant_hot_key_deleted, "journal"),
    "head raised far above the entries": (plant_head_raised_far, "journal"),
    "world meta deleted": (plant_meta_deleted, "world"),
    "world meta damaged": (plant_meta_damaged, "world"),
    "pending items without their ready mark": (plant_ready_mark_cleared, "inbox"),
    "idempotency entry keeping another item's fingerprint": (
        plant_idempotency_entry_of_another_item,
        "inbox",
    ),
}


@pytest.mark.parametrize("plant", PLANTS, ids=list(PLANTS))
def test_each_planted_fault_is_found(store: Store, plant: str) -> None:
    planter, area = PLANTS[plant]
    subject = planter(store, open_store(store))
    before = snapshot_of(store)
    code, report = fsck(store)
    assert code == 1, report
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [(f["area"], f["subject"]) for f in errors] == [(area, subject)], errors
    assert report["reason"] == "1 error findings: damage or loss (see findings)"
    text = aosp("fsck", *store.args("--quiet"))
    assert text.code == 1 and subject in text.text and "\n1 error, " in text.text
    assert snapshot_of(store) == before  # fsck changed nothing


def test_orphaned_object_is_a_warning_unless_strict(store: Store) -> None:
    u, _ = ids(store)
    body = os.urandom(30_000)
    orphan = (
        store.data_dir / "objects" / "cas" / str(u) / "sha256" / hashlib.sha256(body).hexdigest()
    )
    orphan.write_bytes(body)  # an upload whose metadata never committed (failure mode 1)
    code, report = fsck(store)
    assert code == 0
    assert [(f["severity"], f["area"]) for f in report["findings"]] == [("warning", "objects")]
    assert report["findings"][0]["subject"].endswith(hashlib.sha256(body).hexdigest())
    strict, _ = fsck(store, "--strict")
    assert strict == 1


def test_universe_filter_checks_only_that_universe(store: Store) -> None:
    other = UniverseId.new()
    plane = open_store(store)
    plane.create_world(other, WorldId.new())
    plant_segment_deleted(store, plane)  # damage is in the demo universe
    code, report = fsck(store, "--universe", str(other))
    assert code == 0 and report["checked"]["universes"] == 1 and report["checked"]["worlds"] == 1
    code, _ = fsck(store, "--universe", store.universe)
    assert code == 1


@pytest.mark.parametrize("unsafe", ["../../x", "/etc/passwd"])
def test_an_unsafe_object_key_is_a_finding_not_a_usage_error(store: Store, unsafe: str) -> None:
    """One index record naming a key outside the store is reported as that record's
    damage (exit 1) by fsck and ``segments verify``; neither refuses the whole store."""
    from dataclasses import replace

    from persistence import kv
    from persistence.keyspace import UniverseKeys

    plane = open_store(store)
    u, w = ids(store)
    record = plane.list_segments(u, w)[0]
    keys = UniverseKeys(u)
    forged = replace(record, object_key=unsafe).to_cbor()
    kv.run_sync(plane.engine, lambda tr: tr.set(keys.segment(w, record.end), forged))
    plane.engine.close()
    code, report = fsck(store)
    assert code == 1, report
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [(f["area"], f["subject"]) for f in errors] == [("segments", unsafe)]
    assert f"segment index record at end {record.end}" in errors[0]["message"]
    verify = aosp("segments", "verify", *store.args("--json", "--quiet"))
    assert verify.code == 1 and [f["object_key"] for f in verify.json()["failed"]] == [unsafe]


def test_the_library_never_reports_clean_what_it_did_not_find() -> None:
    """``Fsck.run([u])`` of a universe with nothing in the store is ``NotFound`` (it used
    to report 0 errors); a store without universes is not ``ok`` (nothing was checked)."""
    from aosp.fsck import Fsck
    from persistence.errors import NotFound
    from segments import open_plane

    plane = open_plane("memory://", "memory://")
    assert not Fsck(plane).run().ok and Fsck(plane).run().errors == []
    universe, world, missing = UniverseId.new(), WorldId.new(), UniverseId.new()
    plane.create_world(universe, world)
    with pytest.raises(NotFound, match=str(missing)):
        Fsck(plane).run([universe, missing])
    assert Fsck(plane).run([universe]).ok and Fsck(plane).run().ok


@pytest.mark.parametrize("full", [False, True], ids=["quick_check", "integrity_check"])
def test_damage_only_the_engine_sees_is_an_error(tmp_path: Path, full: bool) -> None:
    """16 KiB of random bytes over two pages in the middle of a closed ``aos.db`` (issue
    #35: fsck said "0 errors" while reads returned altered entries): SQLite's own check
    reports it, and the checks that can no longer read the store say they stopped."""
    data = tmp_path / "store"
    plane = open_store_at(data)
    u, w = UniverseId.new(), WorldId.new()
    plane.create_world(u, w)
    rng = random.Random(35)
    for head in range(0, 800, 100):
        plane.append_batch(u, w, head, [rng.randbytes(1000) for _ in range(100)])
    plane.engine.close()
    db = data / "aos.db"
    middle = db.stat().st_size // 8192 // 2 * 8192
    with db.open("r+b") as file:
        file.seek(middle)
        file.write(rng.randbytes(16384))
    args = ["--full-engine-check"] if full else []
    result = aosp("fsck", "--data-dir", str(data), "--json", "--quiet", *args)
    assert result.code == 1, result.err
    report = result.json()
    engine = [f for f in report["findings"] if f["area"] == "engine"]
    check = "integrity_check" if full else "quick_check"
    assert engine and engine[0]["subject"] == check and engine[0]["severity"] == "error"
    assert report["checked"]["engine storage checks"] == 1 and not report["ok"]


def open_store_at(data: Path) -> Plane:
    """A new embedded store in ``data`` (as ``--data-dir`` names one)."""
    return open_plane(f"sqlite://{data}/aos.db", f"file://{data}/objects")


def test_odd_objects_are_findings_and_the_check_goes_on(store: Store, tmp_path: Path) -> None:
    """A CAS body that is a symlink out of the root, one that is a FIFO, a symlink loop
    among the objects: each a finding, and every world still checked (fsck ended at the
    first with exit 3 and no report, issue #35)."""
    plane = open_store(store)
    outside_digest, outside = external_blob(store, plane)
    fifo_digest, fifo = external_blob(store, plane)
    plane.engine.close()
    outside.rename(tmp_path / "elsewhere")
    outside.symlink_to(tmp_path / "elsewhere")
    fifo.unlink()
    os.mkfifo(fifo)
    (store.data_dir / "objects" / "segments" / "loop").symlink_to("loop")
    code, report = fsck(store)
    assert code == 1, report
    found = {(f["area"], f["subject"]): f["message"] for f in report["findings"]}
    assert "resolves outside" in found["cas", outside_digest]
    assert "not a regular file" in found["cas", fifo_digest]
    listing = found["objects", "(all)"]
    assert "the listing stopped" in listing and "a symlink loop" in listing
    assert report["checked"]["worlds"] == 3 and report["errors"] == 3
