"""Opening a store without ``create`` (what reading tools do): nothing is ever created, and
every failure is a typed ``PersistError`` naming the path."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from backends.kv import open_engine
from backends.kv.sqlite import SqliteEngine
from backends.objects.local import LocalObjectStore
from persistence import kv
from persistence.errors import Backend, NotFound, StoreFormatError, Validation


def listing(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --------------------------------------------------------------------------- sqlite


def test_a_missing_database_is_not_found_and_not_created(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no such database"):
        SqliteEngine(tmp_path / "typo.db", create=False)
    with pytest.raises(NotFound, match="does not exist"):
        open_engine(f"sqlite://{tmp_path}/nodir/typo.db", create=False)
    assert listing(tmp_path) == []


def test_an_empty_file_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "aos.db"
    path.touch()
    with pytest.raises(StoreFormatError, match="empty file"):
        SqliteEngine(path, create=False)
    assert listing(tmp_path) == ["aos.db"] and path.stat().st_size == 0


def test_an_sqlite_database_that_is_not_a_store_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "aos.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")  # a valid SQLite file with no tables and no id
    conn.close()
    before = path.read_bytes()
    assert before.startswith(b"SQLite format 3")
    with pytest.raises(StoreFormatError, match="never made a store"):
        SqliteEngine(path, create=False)
    assert path.read_bytes() == before


def test_an_existing_store_opens_and_is_writable(tmp_path: Path) -> None:
    path = tmp_path / "aos.db"
    SqliteEngine(path).close()
    engine = SqliteEngine(path, create=False)
    kv.run_sync(engine, lambda tr: tr.set(b"k", b"v"))
    assert kv.run(engine, lambda tr: tr.get(b"k")) == b"v"
    engine.close()


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e300", "soon"])
def test_busy_timeout_must_be_a_finite_number_of_seconds(tmp_path: Path, value: str) -> None:
    with pytest.raises(Validation, match="busy_timeout"):
        open_engine(f"sqlite://{tmp_path}/aos.db?busy_timeout={value}")
    assert listing(tmp_path) == []


def test_integrity_check_of_deep_damage_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "aos.db"
    engine = SqliteEngine(path)
    kv.run_sync(engine, lambda tr: [tr.set(i.to_bytes(4, "big"), b"x" * 500) for i in range(2_000)])
    engine.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    data = bytearray(path.read_bytes())
    # The middle page: one of the kv table's, below its root (damage to a root page is
    # reported in the check's rows; damage below makes the check itself fail).
    offset = (len(data) // page_size // 2) * page_size
    data[offset : offset + page_size] = b"\xa5" * page_size
    path.write_bytes(bytes(data))
    damaged = SqliteEngine(path, create=False)  # the schema and meta pages are intact
    with pytest.raises(StoreFormatError, match=r"integrity_check cannot run: .*malformed"):
        damaged.integrity_check()
    damaged.close()


def test_memory_without_create_is_not_found() -> None:
    with pytest.raises(NotFound, match="new, empty store"):
        open_engine("memory://", create=False)
    with pytest.raises(NotFound):
        open_engine("faults+memory://", create=False)


# --------------------------------------------------------------------------- local objects


def test_a_missing_object_directory_is_not_found_and_not_created(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no object store"):
        LocalObjectStore(tmp_path / "typo", create=False)
    with pytest.raises(NotFound):
        LocalObjectStore.from_url(f"file://{tmp_path}/typo/deeper?fsync=0", create=False)
    assert listing(tmp_path) == []


def test_an_object_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for create in (True, False):
        with pytest.raises(Backend, match="not a directory"):
            LocalObjectStore(tmp_path / "file", create=create)


def test_from_url_checks_the_url(tmp_path: Path) -> None:
    with pytest.raises(Validation, match="unknown option"):
        LocalObjectStore.from_url(f"file://{tmp_path}?bogus=1")
    with pytest.raises(Validation, match="not a file URL"):
        LocalObjectStore.from_url("s3://bucket")
    store = LocalObjectStore.from_url(f"file://{tmp_path}/objects?fsync=0")
    assert store.root == (tmp_path / "objects").resolve() and not store.fsync


def test_operating_system_errors_are_typed(tmp_path: Path) -> None:
    """A key every store accepts under a root so deep that the whole path is over the
    system's limit (ENAMETOOLONG): ``Backend``. (A key segment over a file name's limit is
    refused before, as on every store: ``Validation``.)"""
    root = tmp_path.joinpath(*["d" * 200] * 17)  # ~3,400 characters
    store = LocalObjectStore(root)
    long_key = "/".join(["k" * 200] * 4)  # the whole path is over PATH_MAX (4,096)
    assert len(str(root / long_key)) > os.pathconf(tmp_path, "PC_PATH_MAX")
    with pytest.raises(Backend, match="File name too long"):
        store.put(long_key, b"body")
    with pytest.raises(Backend, match="File name too long"):
        store.open(long_key)
    with pytest.raises(Backend, match="File name too long"):
        store.stat(long_key)
    with pytest.raises(Validation, match=r"object key.*> 255"):
        store.put("a/" + "x" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1), b"body")


def test_listing_a_vanished_root_fails_instead_of_listing_nothing(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    store.put("a/b", b"body")
    (tmp_path / "objects" / "a" / "b").unlink()
    (tmp_path / "objects" / "a").rmdir()
    (tmp_path / "objects").rmdir()
    with pytest.raises(Backend, match="listing"):
        list(store.list())
