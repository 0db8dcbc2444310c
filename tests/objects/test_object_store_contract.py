"""One object-store contract, run on every store: local directory, memory, and S3 on moto and
on SeaweedFS (servers from ``tests/objects/conftest.py``, a fresh bucket per test).

The S3 stores run with a key prefix, 5 MiB multipart threshold/parts (the S3 minimum, so
the multipart path is cheap to reach) and 7-key listing pages (so pagination is exercised
by every listing). The SeaweedFS store runs as it must be deployed, with ``multipart=False``
(its conditional CompleteMultipartUpload is not atomic: large bodies go by one spooled
PutObject); moto's exercises the multipart path, and the S3-only tests at the end run
multipart on both. S3-only behaviour (what each server enforces, retries, URLs, errors) is
tested at the end.
"""

from __future__ import annotations

import base64
import hashlib
import io
import random
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from backends.objects import open_object_store
from backends.objects.local import LocalObjectStore
from backends.objects.memory import MemoryObjectStore
from backends.objects.s3 import MIN_PART_SIZE, S3ObjectStore
from backends.objects.s3_probe import S3Capabilities
from persistence.errors import Backend, MissingDependency, NotFound, Validation
from persistence.objects import ObjectStore
from tests.objects.servers import S3Server

MiB = 1024 * 1024
STORE_KINDS = ["local", "memory", "s3-moto", "s3-seaweedfs"]
S3_SERVERS = ["moto", "seaweedfs"]
S3_PREFIX = "root/sub"
S3_PAGE = 7
MULTIPART_BODY = 6 * MiB
"""Over the S3 test stores' multipart threshold: two parts."""

UNSAFE_KEYS = [
    "",
    "/etc/passwd",
    "../escape",
    "a/../../b",
    "a//b",
    "a/./b",
    "a/",
    "nul\x00b",
    "a\\b",
]

MOTO_RACE = (
    "moto's If-None-Match is check-then-act without a lock (moto/s3/responses.py, PutObject "
    "and CompleteMultipartUpload): concurrent writers of one key can all get 200 (seen with "
    "16 writers of 20 MB puts, and 6 concurrent multipart completes); no client can fix that"
)


def _body(size: int, seed: int = 0) -> bytes:
    """``size`` pseudo-random bytes, the same for the same seed."""
    return random.Random(seed).randbytes(size)


class Trickle(io.RawIOBase):
    """A stream that returns at most ``step`` bytes per read, like a socket or a pipe."""

    def __init__(self, data: bytes, step: int = 100_000) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._step = step

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._step, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def _stream(data: bytes) -> BinaryIO:
    return Trickle(data)  # type: ignore[return-value]


MakeS3Store = Callable[..., S3ObjectStore]


@pytest.fixture
def make_s3_store() -> Iterator[MakeS3Store]:
    """``make(server, **options)``: an S3 store in a fresh bucket of ``server`` (removed after
    the test), with the test settings unless ``options`` override them."""
    made: list[tuple[S3Server, S3ObjectStore]] = []

    def make(server: S3Server, **options: Any) -> S3ObjectStore:
        client = server.client()
        settings: dict[str, Any] = {
            "client": client,
            "multipart_threshold": MIN_PART_SIZE,
            "part_size": MIN_PART_SIZE,
            "list_page_size": S3_PAGE,
            "retry_base_delay": 0.01,
        }
        settings.update(options)
        store = S3ObjectStore(server.create_bucket(client), S3_PREFIX, **settings)
        made.append((server, store))
        return store

    yield make
    for server, store in made:
        server.remove_bucket(store.bucket, store._client)
        store._client.close()


@pytest.fixture(params=STORE_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which store the test runs on."""
    return str(request.param)


@pytest.fixture
def store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, make_s3_store: MakeS3Store
) -> ObjectStore:
    """A fresh, empty store of ``kind``."""
    if kind == "local":
        return LocalObjectStore(tmp_path / "objects", fsync=False)
    if kind == "memory":
        return MemoryObjectStore()
    server_name = kind.removeprefix("s3-")
    server = request.getfixturevalue(f"{server_name}_s3")
    return make_s3_store(server, multipart=server_name != "seaweedfs")


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> S3Server:
    """Each S3 server in turn."""
    server = request.getfixturevalue(f"{request.param}_s3")
    assert isinstance(server, S3Server)
    return server


# --------------------------------------------------------------------------- create-only


@pytest.mark.parametrize("size", [5, MULTIPART_BODY], ids=["small", "multipart"])
def test_put_is_create_only(store: ObjectStore, size: int) -> None:
    first, second = _body(size, 1), _body(size + 1, 2)
    assert store.put("a/b/c.bin", first) is True
    assert store.put("a/b/c.bin", second) is False
    assert store.put("a/b/c.bin", _stream(second)) is False
    assert store.put("a/b/c.bin", second, sha256=hashlib.sha256(second).digest()) is False
    assert store.get("a/b/c.bin") == first
    info = store.stat("a/b/c.bin")
    assert info is not None and (info.key, info.size) == ("a/b/c.bin", size)


def _race(store: ObjectStore, key: str, bodies: list[bytes]) -> list[bool]:
    """Put ``bodies[i]`` under ``key`` from thread ``i``, all released at once."""
    barrier = threading.Barrier(len(bodies))
    results: list[bool | BaseException] = [False] * len(bodies)

    def write(i: int) -> None:
        barrier.wait()
        try:
            results[i] = store.put(key, bodies[i])
        except BaseException as exc:  # reported below
            results[i] = exc

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures
    return [r is True for r in results]


@pytest.mark.parametrize("size", [1000, MULTIPART_BODY], ids=["small", "multipart"])
def test_concurrent_puts_of_one_key_have_one_winner(
    kind: str, store: ObjectStore, size: int
) -> None:
    if kind == "s3-moto":
        pytest.skip(MOTO_RACE)
    writers = 6
    for round_ in range(3 if size < MiB else 1):
        key = f"race/{round_}"
        bodies = [_body(size, seed) for seed in range(writers)]
        winners = [i for i, created in enumerate(_race(store, key, bodies)) if created]
        assert len(winners) == 1, f"round {round_}: winners {winners}"
        assert store.get(key) == bodies[winners[0]]


def test_empty_object(store: ObjectStore) -> None:
    assert store.put("empty", b"", sha256=hashlib.sha256(b"").digest()) is True
    assert store.put("empty", b"x") is False
    assert store.get("empty") == b""
    info = store.stat("empty")
    assert info is not None and info.size == 0
    with store.open("empty", start=0, length=10) as stream:
        assert stream.read() == b""


# --------------------------------------------------------------------------- streams, ranges


def test_streaming_put_of_20_mib_and_ranged_reads(store: ObjectStore) -> None:
    body = _body(20 * MiB, 7)
    digest = hashlib.sha256(body).digest()
    assert store.put("big/20mib", _stream(body), sha256=digest) is True
    info = store.stat("big/20mib")
    assert info is not None and info.size == len(body)

    with store.open("big/20mib") as stream:  # streamed in chunks
        hasher, total = hashlib.sha256(), 0
        while chunk := stream.read(MiB):
            hasher.update(chunk)
            total += len(chunk)
    assert (total, hasher.digest()) == (len(body), digest)

    boundary = MIN_PART_SIZE  # a part boundary on the S3 stores
    for start, length in [(0, 1), (boundary - 3, 6), (1234, MiB), (len(body) - 10, 10)]:
        with store.open("big/20mib", start=start, length=length) as stream:
            assert stream.read() == body[start : start + length], (start, length)
    with store.open("big/20mib", start=len(body) - 100) as stream:
        assert stream.read() == body[-100:]
    with store.open("big/20mib", start=len(body) - 5, length=50) as stream:  # past the end
        assert stream.read() == body[-5:]
    with store.open("big/20mib", start=len(body) + 5) as stream:  # starts after the end
        assert stream.read() == b""
    with store.open("big/20mib", start=3, length=0) as stream:
        assert stream.read() == b""
    assert store.put("big/20mib", _stream(_body(20 * MiB, 8))) is False
    assert store.get("big/20mib") == body


def test_small_stream(store: ObjectStore) -> None:
    body = b"a small body from a stream"
    assert store.put("s/small", _stream(body), sha256=hashlib.sha256(body).digest()) is True
    assert store.get("s/small") == body
    with store.open("s/small", start=2, length=5) as stream:
        assert stream.read(2) + stream.read() == body[2:7]


@pytest.mark.parametrize(
    ("size", "as_stream"),
    [(100, False), (100, True), (MULTIPART_BODY, False), (MULTIPART_BODY, True)],
    ids=["small-bytes", "small-stream", "multipart-bytes", "multipart-stream"],
)
def test_wrong_declared_sha256_is_refused_and_nothing_stored(
    store: ObjectStore, size: int, as_stream: bool
) -> None:
    body = _body(size, 3)
    wrong = hashlib.sha256(body + b"!").digest()
    with pytest.raises(Validation, match="sha256") as caught:
        store.put("h/bad", _stream(body) if as_stream else body, sha256=wrong)
    assert "h/bad" in str(caught.value)
    assert store.stat("h/bad") is None
    assert list(store.list("h/")) == []
    # Nothing half-made blocks a correct put afterwards.
    assert store.put("h/bad", body, sha256=hashlib.sha256(body).digest()) is True
    assert store.get("h/bad") == body


# --------------------------------------------------------------------------- staged bodies


@pytest.mark.parametrize(
    ("size", "as_stream"),
    [(0, False), (100, True), (MULTIPART_BODY, False), (MULTIPART_BODY, True)],
    ids=["empty-bytes", "small-stream", "multipart-bytes", "multipart-stream"],
)
def test_a_staged_body_is_hashed_and_invisible_until_published(
    store: ObjectStore, size: int, as_stream: bool
) -> None:
    body = _body(size, 11)
    with store.stage(_stream(body) if as_stream else body) as staged:
        assert (staged.sha256, staged.size) == (hashlib.sha256(body).digest(), size)
        assert list(store.list()) == []
        assert staged.publish("st/a") is True
        assert staged.publish("st/a") is False  # create-only
        assert staged.publish("st/b") is True  # again, under another key
        store.delete("st/b")
        assert staged.publish("st/b") is True  # and again after a delete
    assert [(i.key, i.size) for i in store.list()] == [("st/a", size), ("st/b", size)]
    assert store.get("st/a") == store.get("st/b") == body


def test_publishing_a_staged_body_never_overwrites(store: ObjectStore) -> None:
    assert store.put("st/k", b"first") is True
    with store.stage(_stream(b"second")) as staged:
        assert staged.publish("st/k") is False
    assert store.get("st/k") == b"first"


def test_a_known_sha256_is_taken_as_given(store: ObjectStore) -> None:
    """The caller hashed the bytes itself: the digest is passed on, not computed again."""
    body = _body(1000, 12)
    digest = hashlib.sha256(body).digest()
    with store.stage(body, known_sha256=digest) as staged:
        assert (staged.sha256, staged.size) == (digest, len(body))
        assert staged.publish("st/known") is True
    assert store.get("st/known") == body


def test_stage_arguments_are_checked(store: ObjectStore) -> None:
    with pytest.raises(Validation, match="data"):
        store.stage("text")  # type: ignore[arg-type]
    with pytest.raises(Validation, match="data"):
        store.stage(io.StringIO("text"))  # type: ignore[arg-type]
    with pytest.raises(Validation, match="known_sha256"):
        store.stage(b"x", known_sha256=b"short")
    with store.stage(b"x") as staged, pytest.raises(Validation, match="object key"):
        staged.publish("../escape")
    assert list(store.list()) == []


# --------------------------------------------------------------------------- listing

LISTED = [
    "cas/abc",
    "seg/w1/0001.log",
    "seg/w1/0002.log",
    "seg/w10/0001.log",
    "seg/w2/0001.log",
    "seg/w2/0002.log",
    "seg_x/1",
    "z",
]


def test_list_by_prefix_and_start_after_in_key_order(store: ObjectStore) -> None:
    for key in reversed(LISTED):
        assert store.put(key, key.encode())

    def keys(prefix: str = "", start_after: str | None = None) -> list[str]:
        return [info.key for info in store.list(prefix, start_after)]

    assert keys() == LISTED
    assert [i.size for i in store.list()] == [len(k) for k in LISTED]
    assert keys("seg/") == LISTED[1:6]
    assert keys("seg") == LISTED[1:7]
    assert keys("seg/w1") == LISTED[1:4]  # a prefix, not a directory
    assert keys("seg/w1/") == LISTED[1:3]
    assert keys("seg/", start_after="seg/w1/0002.log") == LISTED[3:6]
    assert keys("seg/", start_after="seg/w1/0001.loh") == LISTED[2:6]  # not a key
    assert keys("seg/", start_after="a") == LISTED[1:6]  # before the prefix
    assert keys("seg/", start_after="seg/w9") == []
    assert keys(start_after="seg/w2/0002.log") == ["seg_x/1", "z"]
    assert keys("nothing/") == []


def test_listing_pages(kind: str, store: ObjectStore) -> None:
    """More keys than one page: 1100 (> S3's 1000 per request) on the local and memory
    stores, 3 pages and a bit on the S3 stores (7 keys per page)."""
    count = 1100 if kind in ("local", "memory") else 3 * S3_PAGE + 2
    keys = [f"p/{i:05d}" for i in range(count)]
    for key in keys:
        store.put(key, b"x")
    store.put("q/outside", b"x")
    assert [info.key for info in store.list("p/")] == keys
    middle = count // 2
    assert [info.key for info in store.list("p/", start_after=keys[middle])] == keys[middle + 1 :]
    assert [info.key for info in store.list("p/", start_after=keys[S3_PAGE - 1])] == keys[S3_PAGE:]


ORDER_TRAP = ["a!", "a-b/1", "a.b", "a/!x", "a/1", "a/z", "a0"]
"""Sorted keys where ``/`` meets a lower character (``!``, ``-``, ``.``) after ``a``."""


def test_list_order_where_a_slash_meets_a_lower_character(kind: str, store: ObjectStore) -> None:
    for key in reversed(ORDER_TRAP):
        store.put(key, b"x")
    if kind == "s3-seaweedfs":
        # SeaweedFS lists a/!x, a/1, a/z before a! (segment by segment): refused, not
        # handed out of order.
        with pytest.raises(Backend, match="does not list in key order"):
            list(store.list())
        return
    assert [info.key for info in store.list()] == ORDER_TRAP
    assert [info.key for info in store.list("a", start_after="a.b")] == ORDER_TRAP[3:]


# --------------------------------------------------------------------------- delete, absent


def test_delete(store: ObjectStore) -> None:
    store.put("d/1", b"one")
    store.put("d/2", b"two")
    store.delete("d/1")
    assert store.stat("d/1") is None
    with pytest.raises(NotFound):
        store.get("d/1")
    store.delete("d/1")  # absent: fine
    store.delete("d/never")
    assert [info.key for info in store.list("d/")] == ["d/2"]
    assert store.put("d/1", b"again") is True  # create-only, not create-once
    assert store.get("d/1") == b"again"


def test_absent_objects(store: ObjectStore) -> None:
    assert store.stat("no/such") is None
    with pytest.raises(NotFound):
        store.get("no/such")
    with pytest.raises(NotFound):
        store.open("no/such", start=10, length=5)
    with pytest.raises(NotFound):
        store.open("no/such", start=0, length=0)
    assert list(store.list("no/")) == []


@pytest.mark.parametrize("key", UNSAFE_KEYS)
def test_unsafe_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(Validation):
        store.put(key, b"x")
    with pytest.raises(Validation):
        store.open(key)
    with pytest.raises(Validation):
        store.stat(key)
    with pytest.raises(Validation):
        store.delete(key)


def test_one_key_length_rule_for_every_store(store: ObjectStore) -> None:
    """A segment of 255 UTF-8 bytes is stored by every store (the local store's file-name
    limit), one of 256 refused by every store as ``Validation`` naming the object key and
    the limit, before anything is written (memory and S3 took 300 bytes, the local store
    failed on the file system: ``Backend``)."""
    fits = "seg/" + "é" * 127 + "x"  # 255 bytes
    assert store.put(fits, b"x") is True and store.get(fits) == b"x"
    for key in ("seg/" + "y" * 256, "seg/" + "é" * 128 + "/z", "y" * 300):
        with pytest.raises(Validation, match=r"object key.*256 bytes|object key.*300 bytes"):
            store.put(key, b"x")
        with pytest.raises(Validation, match="> 255"):
            store.stat(key)
    assert [info.key for info in store.list("seg/")] == [fits]


def test_listing_arguments_are_checked_at_the_call(store: ObjectStore) -> None:
    """A bad ``list`` argument fails when ``list`` is called, not at the first key read
    (the listing is lazy; a caller that never iterates would never hear of it)."""
    for prefix, start_after, field in [(5, None, "prefix"), ("", b"k", "start_after")]:
        with pytest.raises(Validation, match=field):
            store.list(prefix, start_after)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- S3 only

EXPECTED_CAPABILITIES = {
    "moto": S3Capabilities(
        conditional_put=True,
        conditional_complete=True,
        checks_sha256=False,
        lists_in_key_order=True,
    ),
    "seaweedfs": S3Capabilities(
        conditional_put=True,
        conditional_complete=True,
        checks_sha256=True,
        lists_in_key_order=False,
    ),
}
"""What each server enforces (moto 5.2.5, SeaweedFS 4.48) -- see also ``MOTO_RACE``."""


def test_s3_server_capabilities(s3_server: S3Server, make_s3_store: MakeS3Store) -> None:
    store = make_s3_store(s3_server)
    assert store.probe_capabilities() == EXPECTED_CAPABILITIES[s3_server.name]
    assert list(store.list()) == []  # the probe cleans up


def test_s3_server_side_sha256_check(s3_server: S3Server, make_s3_store: MakeS3Store) -> None:
    """With the local check off, a wrong declared sha256 reaches the server: SeaweedFS
    answers BadDigest (-> Validation, nothing stored), moto stores the body anyway -- which
    is why the local check is on by default."""
    store = make_s3_store(s3_server, verify_sha256_locally=False)
    body = b"body of the object"
    wrong = hashlib.sha256(b"something else").digest()
    if s3_server.name == "seaweedfs":
        with pytest.raises(Validation, match=r"'k/bad'.*BadDigest"):
            store.put("k/bad", body, sha256=wrong)
        assert store.stat("k/bad") is None
    else:
        assert store.put("k/bad", body, sha256=wrong) is True
        assert store.get("k/bad") == body


def test_s3_keys_live_under_the_prefix_and_failed_uploads_are_aborted(
    s3_server: S3Server, make_s3_store: MakeS3Store
) -> None:
    store = make_s3_store(s3_server)
    store.put("cas/1", b"x")
    store.put("big", _body(MULTIPART_BODY))
    with pytest.raises(Validation):
        store.put("big-bad", _stream(_body(MULTIPART_BODY)), sha256=b"\x01" * 32)
    assert store.put("big", _body(MULTIPART_BODY, 9)) is False  # 412 on complete: aborted
    raw = store._client.list_objects_v2(Bucket=store.bucket)
    assert [o["Key"] for o in raw["Contents"]] == [f"{S3_PREFIX}/big", f"{S3_PREFIX}/cas/1"]
    uploads = store._client.list_multipart_uploads(Bucket=store.bucket)
    assert uploads.get("Uploads", []) == []
    assert store.url == f"s3://{store.bucket}/{S3_PREFIX}"


def test_s3_listing_is_paginated(
    s3_server: S3Server, make_s3_store: MakeS3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_s3_store(s3_server)
    for i in range(2 * S3_PAGE + 1):
        store.put(f"k/{i:02d}", b"x")
    calls: list[dict[str, Any]] = []
    real = store._client.list_objects_v2

    def spy(**params: Any) -> Any:
        calls.append(params)
        return real(**params)

    monkeypatch.setattr(store._client, "list_objects_v2", spy)
    assert len(list(store.list("k/"))) == 2 * S3_PAGE + 1
    assert len(calls) == 3
    assert calls[0]["Prefix"] == f"{S3_PREFIX}/k/" and calls[0]["MaxKeys"] == S3_PAGE
    assert "ContinuationToken" in calls[1]


def test_s3_url(moto_s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = moto_s3.create_bucket()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_s3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_s3.secret_key)
    url = f"s3://{bucket}/aos/prod?endpoint_url={moto_s3.endpoint_url}&region=us-east-1"
    store = open_object_store(url)
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix) == (bucket, "aos/prod")
    assert store.put("cas/x", b"via url") is True
    assert store.get("cas/x") == b"via url"
    again = open_object_store(store.url)
    assert isinstance(again, S3ObjectStore) and again.get("cas/x") == b"via url"
    store.close()
    again.close()
    bare = open_object_store(f"s3://{bucket}?region=us-east-1")
    assert isinstance(bare, S3ObjectStore) and bare.prefix == "" and bare.multipart
    bare.close()
    single = open_object_store(f"{url}&multipart=0")
    assert isinstance(single, S3ObjectStore) and not single.multipart
    assert single.url.endswith("&multipart=0")
    single.close()
    moto_s3.remove_bucket(bucket)
    with pytest.raises(Validation, match="option"):
        open_object_store(f"s3://{bucket}/p?endpoint=http://x")
    with pytest.raises(Validation, match="bucket"):
        open_object_store("s3:///prefix")
    with pytest.raises(Validation):
        S3ObjectStore(bucket, "a/../b", region="us-east-1")
    with pytest.raises(Validation, match="part_size"):
        S3ObjectStore(bucket, part_size=MiB, region="us-east-1")


def test_s3_errors_name_key_and_code_not_payload(moto_s3: S3Server) -> None:
    store = S3ObjectStore("no-such-bucket-here", "p", client=moto_s3.client())
    payload = b"SECRET-PAYLOAD-BYTES"
    for operation in (
        lambda: store.put("k/1", payload),
        lambda: store.put("k/2", _body(MULTIPART_BODY) + payload),
        lambda: store.get("k/1"),
        lambda: list(store.list("k/")),
    ):
        with pytest.raises(Backend) as caught:
            operation()
        message = str(caught.value)
        assert "NoSuchBucket" in message and "no-such-bucket-here" in message, message
        assert "SECRET" not in message


def test_s3_missing_boto3_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(MissingDependency, match="boto3"):
        S3ObjectStore("bucket")


# ----------------------------------------------------------- S3 retries (stubbed client)


def _stubbed_store(**options: Any) -> tuple[S3ObjectStore, Any]:
    import boto3
    from botocore.stub import Stubber

    client = boto3.session.Session().client(
        "s3",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",  # never contacted
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    stubber = Stubber(client)
    stubber.activate()
    store = S3ObjectStore("b", client=client, retry_base_delay=0.001, **options)
    return store, stubber


def _error(stubber: Any, method: str, code: str, status: int) -> None:
    stubber.add_client_error(method, service_error_code=code, http_status_code=status)


def test_s3_retries_conflicts_throttling_and_5xx() -> None:
    store, stubber = _stubbed_store()
    _error(stubber, "put_object", "ConditionalRequestConflict", 409)
    _error(stubber, "put_object", "SlowDown", 503)
    _error(stubber, "put_object", "InternalError", 500)
    stubber.add_response("put_object", {"ETag": '"e"'})
    assert store.put("k", b"x") is True
    _error(stubber, "put_object", "RequestLimitExceeded", 400)
    _error(stubber, "put_object", "PreconditionFailed", 412)
    assert store.put("k", b"x") is False
    stubber.assert_no_pending_responses()


def test_s3_gives_up_after_max_attempts_and_never_retries_client_errors() -> None:
    store, stubber = _stubbed_store(max_attempts=3)
    for _ in range(3):
        _error(stubber, "head_object", "ServiceUnavailable", 503)
    with pytest.raises(Backend, match=r"HeadObject s3://b/k: ServiceUnavailable \(HTTP 503\)"):
        store.stat("k")
    _error(stubber, "put_object", "AccessDenied", 403)
    with pytest.raises(Backend, match="AccessDenied"):
        store.put("k", b"x")
    stubber.assert_no_pending_responses()


def test_s3_multipart_failure_aborts_the_upload() -> None:
    store, stubber = _stubbed_store(multipart_threshold=0)
    stubber.add_response("create_multipart_upload", {"UploadId": "u1"})
    stubber.add_response("upload_part", {"ETag": '"p1"'})
    _error(stubber, "complete_multipart_upload", "AccessDenied", 403)
    stubber.add_response("abort_multipart_upload", {})
    with pytest.raises(Backend, match=r"CompleteMultipartUpload .*: AccessDenied"):
        store.put("k", b"body")
    stubber.add_response("create_multipart_upload", {"UploadId": "u2"})
    stubber.add_response("abort_multipart_upload", {})

    class Broken(io.RawIOBase):
        """One byte, then a read error."""

        def __init__(self) -> None:
            self.served = False

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            if self.served:
                raise OSError("disk on fire")
            self.served = True
            buffer[:1] = b"x"
            return 1

    with pytest.raises(OSError, match="disk on fire"):
        store.put("k", Broken())  # type: ignore[arg-type]
    stubber.assert_no_pending_responses()


def test_s3_single_put_mode_spools_streams_and_resends_them_whole_on_retry() -> None:
    """``multipart=False``: a stream over the threshold is spooled and sent with one
    conditional PutObject; a retried attempt sends the whole body again."""
    from botocore.exceptions import ClientError

    body = _body(3 * MiB, 5)
    sent: list[tuple[bytes, dict[str, Any]]] = []

    class FakeClient:
        def put_object(self, *, Body: BinaryIO, **params: Any) -> dict[str, Any]:
            sent.append((Body.read(), params))
            if len(sent) == 1:
                error = {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}
                raise ClientError(error, "PutObject")
            return {"ETag": '"e"'}

    store = S3ObjectStore(
        "b", "p", client=FakeClient(), multipart=False, multipart_threshold=MiB, retry_base_delay=0
    )
    assert store.put("k", _stream(body), sha256=hashlib.sha256(body).digest()) is True
    assert [data for data, _ in sent] == [body, body]
    params = sent[1][1]
    assert params["IfNoneMatch"] == "*" and params["ContentLength"] == len(body)
    assert params["Key"] == "p/k"
    assert base64.b64decode(params["ChecksumSHA256"]) == hashlib.sha256(body).digest()
    with pytest.raises(Validation, match="sha256"):
        store.put("k2", _stream(body), sha256=hashlib.sha256(b"other").digest())
    assert len(sent) == 2  # refused before sending
