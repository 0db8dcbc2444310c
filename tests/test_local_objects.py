"""Local and memory object stores: create-only, keys confined to the root, listing order;
opening without creating; what the local store's files and directories mean as keys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends.objects import open_object_store
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from persistence.errors import Backend, NotFound, Validation
from persistence.objects import ObjectStore
from segments import open_plane


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    return MemoryObjectStore()


def test_put_is_create_only(store: ObjectStore) -> None:
    assert store.put("a/b/c.bin", b"first") is True
    assert store.put("a/b/c.bin", b"second") is False
    assert store.get("a/b/c.bin") == b"first"
    info = store.stat("a/b/c.bin")
    assert info is not None and info.size == 5
    assert store.stat("a/b/missing") is None
    with pytest.raises(NotFound):
        store.get("a/b/missing")


def test_list_by_prefix_in_key_order_with_start_after(store: ObjectStore) -> None:
    keys = ["seg/w1/0001-0010.log", "seg/w1/0011-0020.log", "seg/w2/0001-0005.log", "cas/x"]
    for key in keys:
        store.put(key, key.encode())
    assert [o.key for o in store.list("seg/")] == sorted(k for k in keys if k.startswith("seg/"))
    assert [o.key for o in store.list("seg/", start_after="seg/w1/0011-0020.log")] == [
        "seg/w2/0001-0005.log"
    ]
    store.delete("cas/x")
    store.delete("cas/x")  # absent: fine
    assert [o.key for o in store.list("cas/")] == []


@pytest.mark.parametrize(
    "key", ["", "/etc/passwd", "../escape", "a/../../b", "a//b", "a/./b", "nul\x00byte", "a\\b"]
)
def test_unsafe_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(Validation):
        store.put(key, b"x")


def test_local_store_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    store.put("k/1", b"x" * 1000)
    store.put("k/1", b"y")
    assert sorted(p.name for p in (tmp_path / "objects" / "k").iterdir()) == ["1"]


def test_urls(tmp_path: Path) -> None:
    assert isinstance(open_object_store("memory://"), MemoryObjectStore)
    local = open_object_store(f"file://{tmp_path}/o?fsync=0")
    assert isinstance(local, LocalObjectStore) and not local.fsync
    with pytest.raises(Validation):
        open_object_store("ftp://x")


def test_streams_ranges_and_declared_hashes(store: ObjectStore) -> None:
    import hashlib
    import io

    body = bytes(range(256)) * 1000
    assert store.put("s/1", io.BytesIO(body), sha256=hashlib.sha256(body).digest())
    with store.open("s/1", start=1000, length=300) as stream:
        assert stream.read() == body[1000:1300]
    with store.open("s/1", start=255_000) as stream:
        assert stream.read() == body[255_000:]
    with pytest.raises(Validation, match="sha256"):
        store.put("s/2", io.BytesIO(body), sha256=b"\x00" * 32)
    assert store.stat("s/2") is None  # nothing stored on a mismatch
    with pytest.raises(NotFound):
        store.open("s/missing")


def test_opening_without_create_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(NotFound, match="does not exist"):
        open_object_store(f"file://{missing}", create=False)
    with pytest.raises(NotFound, match="new, empty store"):
        open_object_store("memory://", create=False)
    with pytest.raises(NotFound):
        open_plane(f"sqlite://{missing}/kv.db", f"file://{missing}/objects", create=False)
    assert not missing.exists()
    (tmp_path / "objects").mkdir()
    store = open_object_store(f"file://{tmp_path}/objects?fsync=0", create=False)
    assert isinstance(store, LocalObjectStore) and not store.fsync


def test_a_refused_object_store_leaves_no_new_database(tmp_path: Path) -> None:
    """With ``create``, the engine a URL names is created only once the object store has
    opened: an objects root that is a file leaves no ``aos.db`` behind."""
    (tmp_path / "not-a-dir").write_bytes(b"")
    with pytest.raises(Backend, match="not a directory"):
        open_plane(f"sqlite://{tmp_path}/aos.db", f"file://{tmp_path}/not-a-dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-dir"]
    open_plane("memory://", "memory://").engine.close()  # a URL of no existing store


def test_a_missing_objects_directory_closes_the_engine_opened_for_it(tmp_path: Path) -> None:
    """``open_plane`` opened the engine from its URL, so it closes it when the object store
    cannot be opened (a second open of the database then finds it released)."""
    open_plane(f"sqlite://{tmp_path}/kv.db", f"file://{tmp_path}/objects").engine.close()
    with pytest.raises(NotFound):
        open_plane(f"sqlite://{tmp_path}/kv.db", f"file://{tmp_path}/nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()


def test_names_reserved_for_temporary_files_are_refused(tmp_path: Path) -> None:
    """Listings skip ``.tmp-*`` files (a crash's leftovers), so such a key would be stored
    but never listed: it is refused before anything is written."""
    store = LocalObjectStore(tmp_path / "objects", fsync=False)
    with pytest.raises(Validation, match=r"object key.*reserved"):
        store.put("a/.tmp-x", b"x")
    with pytest.raises(Validation, match="object key"):
        store.stat(".tmp-x")
    assert store.put("a/.tmp-x/b", b"x")  # only the file name is reserved
    assert [o.key for o in store.list()] == ["a/.tmp-x/b"]


def test_directories_are_prefixes_not_objects(tmp_path: Path) -> None:
    """Key ``a`` cannot be a file while ``a/b`` exists: the directory is no object, and a
    put of ``a`` is a ``Backend`` error, not a claim that ``a`` already exists."""
    store = LocalObjectStore(tmp_path / "objects", fsync=False)
    store.put("a/b", b"x")
    assert store.stat("a") is None
    with pytest.raises(NotFound):
        store.open("a")
    store.delete("a")  # not an object: nothing to delete
    with pytest.raises(Backend, match="is a directory"):
        store.put("a", b"y")
    assert store.stat("a/b/c") is None  # under a file
    with pytest.raises(NotFound):
        store.open("a/b/c")
    assert [o.key for o in store.list()] == ["a/b"]


def test_listing_skips_files_that_are_not_keys(tmp_path: Path) -> None:
    """A file another tool left under the root whose name no store accepts as a key (a
    control character) is not an object: listing it would hand out a key nothing opens."""
    store = LocalObjectStore(tmp_path / "objects", fsync=False)
    store.put("k/1", b"x")
    (tmp_path / "objects" / "k" / "tab\there").write_bytes(b"stray")
    assert [o.key for o in store.list()] == ["k/1"]


def test_listing_reads_only_directories_under_the_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing by prefix does not walk the rest of the root (``cas/`` when listing
    ``seg/``), yet keys where ``/`` meets a lower character stay in order."""
    store = LocalObjectStore(tmp_path / "objects", fsync=False)
    for key in ["cas/x", "seg-1", "seg/w1/1", "seg/w2/1", "segz/1"]:
        store.put(key, b"x")
    scanned: list[str] = []
    scandir = os.scandir

    def recording(path: str) -> object:
        scanned.append(Path(path).relative_to(store.root).as_posix())
        return scandir(path)

    monkeypatch.setattr(os, "scandir", recording)
    assert [o.key for o in store.list("seg/")] == ["seg/w1/1", "seg/w2/1"]
    assert sorted(scanned) == [".", "seg", "seg/w1", "seg/w2"]
    scanned.clear()
    assert [o.key for o in store.list("seg")] == ["seg-1", "seg/w1/1", "seg/w2/1", "segz/1"]
    assert "cas" not in scanned
