"""Protocol A with real bodies: streaming, verification modes, the source specification's
failure modes (body written but metadata commit failed; metadata without a good body)."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO, ClassVar

import pytest

from backends.kv.faults import FaultInjector, FaultyEngine, SimulatedCrash
from backends.kv.memory import MemoryEngine
from backends.kv.sqlite import SqliteEngine
from backends.objects import local, memory, s3
from backends.objects.local import STAGING_SWEEP_SECONDS, LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from backends.objects.s3 import S3ObjectStore
from persistence import fdb_errors, ids
from persistence import objects as objects_module
from persistence.errors import (
    CasBodyHashMismatch,
    CasBodyMissing,
    EngineError,
    NotFound,
    Validation,
)
from persistence.futures import drive
from persistence.ids import Hash, UniverseId
from persistence.kv import Engine
from persistence.objects import ObjectStore, StagedBody
from persistence.plane import Plane, PlaneConfig, VerifyMode
from persistence.protocols.cas_bodies import object_key
from segments import open_plane
from tests.cas.cas_worker import KILLED_BODY

BIG = hashlib.shake_256(b"big").digest(300_000)


@pytest.fixture(params=["memory", "local", "s3-moto", "s3-seaweedfs"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalObjectStore(tmp_path / "objects")
    elif request.param == "memory":
        yield MemoryObjectStore()
    else:
        name = request.param.removeprefix("s3-")
        server = request.getfixturevalue(f"{name}_s3")
        client = server.client()
        bucket = server.create_bucket(client)
        yield S3ObjectStore(bucket, "aos", client=client, multipart=name != "seaweedfs")
        server.remove_bucket(bucket, client)


@pytest.fixture
def plane(engine: Engine, objects: ObjectStore) -> Plane:
    return open_plane(engine, objects)


def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
    """Replace a stored body behind the store's back (create-only forbids it through it)."""
    if isinstance(objects, MemoryObjectStore):
        objects.replace_for_test(key, data)
    elif isinstance(objects, LocalObjectStore):
        (objects.root / key).write_bytes(data)
    else:
        assert isinstance(objects, S3ObjectStore)
        objects.delete(key)
        objects.put(key, data)


@pytest.mark.slow
def test_put_get_bytes_and_streams(plane: Plane) -> None:
    u = UniverseId.new()
    h = plane.put_stream(u, io.BytesIO(BIG))
    assert h == Hash.of(BIG)
    assert plane.put_verified(u, BIG) == h  # same blob, no second body
    assert plane.get(u, h) == BIG
    with plane.open_blob(u, h) as stream:
        assert stream.read(1000) == BIG[:1000]
        assert stream.read() == BIG[1000:]
    small = plane.put_stream(u, io.BytesIO(b"tiny"))
    assert plane.get(u, small) == b"tiny"
    assert [o.key for o in plane.objects.list("cas/")] == [object_key(u, h)]


def test_declared_hash_must_match(plane: Plane) -> None:
    u = UniverseId.new()
    wrong = Hash.of(b"something else")
    with pytest.raises(Validation, match="expected_hash"):
        drive(plane._operations.put_bytes(u, BIG, wrong))
    with pytest.raises(Validation, match="expected_hash"):
        plane.put_stream(u, io.BytesIO(BIG), expected=wrong)
    assert not plane.has(u, Hash.of(BIG))
    assert list(plane.objects.list("cas/")) == []
    assert plane.put_stream(u, io.BytesIO(BIG), expected=Hash.of(BIG)) == Hash.of(BIG)


def test_metadata_without_body_or_with_a_wrong_body_is_corruption(plane: Plane) -> None:
    u = UniverseId.new()
    h = plane.put_verified(u, BIG)
    key = object_key(u, h)
    tamper(plane.objects, key, BIG[:-1] + b"\x00")
    with pytest.raises(CasBodyHashMismatch) as err:
        plane.get(u, h)
    assert err.value.where == key
    with pytest.raises(CasBodyHashMismatch), plane.open_blob(u, h) as stream:
        stream.read()
    tamper(plane.objects, key, BIG + b"extra")
    with pytest.raises(CasBodyHashMismatch):
        plane.get(u, h)
    plane.objects.delete(key)
    with pytest.raises(CasBodyMissing):
        plane.get(u, h)
    # never healed: a later put of the same bytes does not rewrite the metadata's body
    assert plane.has(u, h)


def test_verify_modes(engine: Engine, objects: ObjectStore) -> None:
    u = UniverseId.new()
    settings: list[tuple[VerifyMode, float]] = [("always", 0.0), ("sampled", 1.0), ("never", 1.0)]
    modes = {
        mode: open_plane(engine, objects, PlaneConfig(verify_reads=mode, verify_sample_rate=rate))
        for mode, rate in settings
    }
    h = modes["always"].put_verified(u, BIG)
    tamper(objects, object_key(u, h), b"x" * len(BIG))
    with pytest.raises(CasBodyHashMismatch):
        modes["always"].get(u, h)
    with pytest.raises(CasBodyHashMismatch):
        modes["sampled"].get(u, h)  # sample rate 1.0: every read checked
    assert modes["never"].get(u, h) == b"x" * len(BIG)  # documented: no check at all
    never_sampled = open_plane(
        engine, objects, PlaneConfig(verify_reads="sampled", verify_sample_rate=0)
    )
    assert never_sampled.get(u, h) == b"x" * len(BIG)


def test_universes_are_isolated(plane: Plane) -> None:
    a, b = UniverseId.new(), UniverseId.new()
    h = plane.put_verified(a, BIG)
    assert not plane.has(b, h)
    with pytest.raises(NotFound):
        plane.get(b, h)
    plane.put_verified(b, BIG)
    assert {o.key for o in plane.objects.list("cas/")} == {object_key(a, h), object_key(b, h)}


# --------------------------------------------------------------- failure mode 1: body, no metadata


def test_body_written_then_crash_before_metadata_converges_on_retry(objects: ObjectStore) -> None:
    injector = FaultInjector()
    plane = open_plane(FaultyEngine(MemoryEngine(), injector), objects, hooks=injector)
    u = UniverseId.new()
    injector.crash_at("cas.after_body")
    with pytest.raises(SimulatedCrash):
        plane.put_verified(u, BIG)
    h = Hash.of(BIG)
    assert objects.stat(object_key(u, h)) is not None  # the orphan body
    assert not plane.has(u, h)
    assert plane.put_verified(u, BIG) == h  # the retry finds the body and commits metadata
    assert plane.get(u, h) == BIG


def test_metadata_commit_failure_leaves_an_orphan_that_a_retry_adopts(objects: ObjectStore) -> None:
    injector = FaultInjector()
    plane = open_plane(FaultyEngine(MemoryEngine(), injector), objects, hooks=injector)
    u = UniverseId.new()
    injector.fail_commit(2, fdb_errors.IO_ERROR)  # the metadata write (after the pin)
    with pytest.raises(EngineError) as err:
        plane.put_verified(u, BIG)
    assert err.value.code == fdb_errors.IO_ERROR
    h = Hash.of(BIG)
    assert objects.stat(object_key(u, h)) is not None and not plane.has(u, h)
    assert plane.put_verified(u, BIG) == h
    assert plane.get(u, h) == BIG


def test_an_existing_body_with_wrong_bytes_is_refused(objects: ObjectStore) -> None:
    plane = open_plane(MemoryEngine(), objects)
    u = UniverseId.new()
    h = Hash.of(BIG)
    objects.put(object_key(u, h), b"not the blob")  # squatting under the content address
    with pytest.raises(CasBodyHashMismatch):
        plane.put_verified(u, BIG)
    assert not plane.has(u, h)


# --------------------------------------------------------------------------- one hash pass


class CountingSha256:
    """``hashlib.sha256`` that adds the bytes it hashes to ``counted``."""

    counted: ClassVar[list[int]] = []

    def __init__(self, data: bytes = b"") -> None:
        self._hash = hashlib.sha256()
        self.update(data)

    def update(self, data: bytes) -> None:
        self.counted.append(len(data))
        self._hash.update(data)

    def digest(self) -> bytes:
        return self._hash.digest()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of what the plane and the object stores hash (botocore's request signing,
    which is not ours, is not counted)."""
    counted: list[int] = []
    monkeypatch.setattr(CountingSha256, "counted", counted)
    counting = SimpleNamespace(sha256=CountingSha256)
    for module in (ids, objects_module, local, memory, s3):
        monkeypatch.setattr(module, "hashlib", counting)
    return counted


@pytest.mark.parametrize("size", [100, len(BIG)], ids=["inline", "external"])
def test_a_put_hashes_its_body_once(plane: Plane, hashed: list[int], size: int) -> None:
    u = UniverseId.new()
    body = BIG[:size]
    expected = Hash.of(body)
    puts: list[Callable[[], Hash]] = [
        lambda: plane.put_verified(u, body),
        lambda: plane.put_stream(UniverseId.new(), io.BytesIO(body)),
        lambda: plane.put_stream(u, io.BytesIO(body)),  # present already: nothing written
    ]
    for put in puts:
        hashed.clear()
        assert put() == expected
        assert sum(hashed) == size


def test_a_stream_is_staged_as_read_not_spooled(
    objects: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plane hands the stream itself to the store, which stages it (S3 spools only
    bodies over its multipart threshold, 8 MiB here); a local directory publishes the very
    file it staged: the object is a second link to it until the put discards the staging."""
    staged: list[object] = []
    stage = objects.stage

    def recording(data: bytes | BinaryIO, **kwargs: bytes | None) -> StagedBody:
        staged.append(data)
        return stage(data, **kwargs)

    monkeypatch.setattr(objects, "stage", recording)
    monkeypatch.setattr(objects, "put", None)  # never called
    links: list[int] = []
    u = UniverseId.new()
    key = object_key(u, Hash.of(BIG))

    class Hooks:
        def reached(self, step: str) -> None:
            if step == "cas.after_body" and isinstance(objects, LocalObjectStore):
                links.append((objects.root / key).stat().st_nlink)

    plane = open_plane(MemoryEngine(), objects, hooks=Hooks())
    assert plane.put_stream(u, io.BytesIO(BIG)) == Hash.of(BIG)
    assert len(staged) == 1 and not isinstance(staged[0], bytes)
    assert links == ([2] if isinstance(objects, LocalObjectStore) else [])
    assert plane.get(u, Hash.of(BIG)) == BIG


def test_a_refused_stream_stores_nothing(plane: Plane) -> None:
    u = UniverseId.new()

    class TurnsToText:
        def __init__(self) -> None:
            self.reads = 0

        def read(self, n: int = -1) -> bytes | str:
            self.reads += 1
            return b"x" * 50_000 if self.reads == 1 else "text"

    with pytest.raises(Validation, match="stream"):
        plane.put_stream(u, TurnsToText())  # type: ignore[arg-type]
    with pytest.raises(Validation, match="expected_hash"):
        plane.put_stream(u, io.BytesIO(BIG), expected=Hash.of(b"other"))
    assert list(plane.objects.list()) == []
    if isinstance(plane.objects, LocalObjectStore):
        assert [p.name for p in plane.objects.root.iterdir()] == []  # no staging file left


def test_a_killed_stream_put_leaves_a_staging_file_the_next_put_sweeps(tmp_path: Path) -> None:
    """SIGKILLed after its pin, before publishing: its staging file stays (unlocked now),
    nothing is under the content key, and a later put of the same body succeeds and, once
    the leftover is old enough, sweeps it."""
    u = UniverseId.new()
    open_plane(SqliteEngine(tmp_path / "aos.db"), LocalObjectStore(tmp_path / "objects"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = [sys.executable, str(Path(__file__).with_name("cas_worker.py")), "killed"]
    proc = subprocess.run([*args, str(tmp_path), str(u)], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    root = tmp_path / "objects"
    (left,) = [p for p in root.iterdir() if p.name.startswith(".tmp-")]
    assert left.stat().st_size == len(KILLED_BODY)
    store = LocalObjectStore(root)
    plane = open_plane(SqliteEngine(tmp_path / "aos.db"), store)
    assert list(store.list()) == [] and not plane.has(u, Hash.of(KILLED_BODY))
    then = time.time() - 2 * STAGING_SWEEP_SECONDS
    os.utime(left, (then, then))
    assert plane.put_stream(u, io.BytesIO(KILLED_BODY)) == Hash.of(KILLED_BODY)
    assert plane.get(u, Hash.of(KILLED_BODY)) == KILLED_BODY
    assert [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()] == [
        object_key(u, Hash.of(KILLED_BODY))
    ]
