"""Local and memory object stores: create-only, keys confined to the root, listing order."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.objects import open_object_store
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from persistence.errors import NotFound, Validation
from persistence.objects import ObjectStore


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
