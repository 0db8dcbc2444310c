"""The FoundationDB engine against a real cluster.

These tests run only when ``FDB_CLUSTER_FILE`` names a readable cluster file, the official
bindings and ``libfdb_c`` load, and the cluster answers; otherwise they are skipped. Every test
works under its own random key prefix and clears it afterwards.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterator

import pytest

from backends.kv.fdb import FdbEngine
from persistence import kv
from persistence.errors import EngineError, MissingDependency

SKIP_REASON = "no FoundationDB cluster reachable (FDB_CLUSTER_FILE unset or unreadable)"
TIMEOUT_MS = 10_000
"""Per-transaction timeout, so an unreachable cluster fails (1031) instead of hanging."""


def _end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (no trailing 0xff here)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[FdbEngine]:
    """An engine on the cluster named by ``FDB_CLUSTER_FILE``, or a skip."""
    path = os.environ.get("FDB_CLUSTER_FILE", "")
    if not path or not os.path.isfile(path) or not os.access(path, os.R_OK):
        pytest.skip(SKIP_REASON)
    try:
        engine = FdbEngine(path)
    except (MissingDependency, EngineError) as exc:
        pytest.skip(f"{SKIP_REASON}: {exc}")
    # The adapter has no options API; the binding's database options are reached directly.
    engine._db.options.set_transaction_timeout(TIMEOUT_MS)
    try:
        engine.create_transaction().get_read_version()
    except EngineError as exc:
        pytest.skip(f"{SKIP_REASON}: {exc}")
    yield engine
    engine.close()


@pytest.fixture
def prefix(cluster: FdbEngine) -> Iterator[bytes]:
    """A fresh key prefix, cleared after the test."""
    key_prefix = b"aosp-test/" + uuid.uuid4().hex.encode() + b"/"
    yield key_prefix
    end = _end(key_prefix)
    kv.run(cluster, lambda tr: tr.clear_range(key_prefix, end))
    assert kv.run(cluster, lambda tr: tr.get_range(key_prefix, end)) == []


def test_set_and_get(cluster: FdbEngine, prefix: bytes) -> None:
    kv.run(cluster, lambda tr: tr.set(prefix + b"k", b"value"))
    kv.run(cluster, lambda tr: tr.set(prefix + b"empty", b""))
    tr = cluster.create_transaction()
    assert tr.get(prefix + b"k") == b"value"
    assert tr.get(prefix + b"k", snapshot=True) == b"value"
    assert tr.get(prefix + b"empty") == b""
    assert tr.get(prefix + b"missing") is None
    kv.run(cluster, lambda tr: tr.clear(prefix + b"k"))
    assert cluster.create_transaction().get(prefix + b"k") is None


def test_range_forward_reverse_and_limits(cluster: FdbEngine, prefix: bytes) -> None:
    rows = [(prefix + b"r/%d" % i, b"v%d" % i) for i in range(5)]

    def write(tr: kv.Transaction) -> None:
        tr.set(prefix + b"q", b"outside")
        for key, value in rows:
            tr.set(key, value)

    kv.run(cluster, write)
    begin, end = prefix + b"r/", prefix + b"r0"
    tr = cluster.create_transaction()
    assert tr.get_range(begin, end) == rows
    assert tr.get_range(begin, end, limit=2) == rows[:2]
    assert tr.get_range(begin, end, reverse=True) == rows[::-1]
    assert tr.get_range(begin, end, limit=3, reverse=True) == rows[::-1][:3]
    assert tr.get_range(begin, end, snapshot=True) == rows
    assert len(tr.get_range(prefix, _end(prefix))) == 6


def test_versionstamp(cluster: FdbEngine, prefix: bytes) -> None:
    placeholder = b"\x00" * 10
    stamped = prefix + b"vs/"
    tr = cluster.create_transaction()
    tr.set_versionstamped_key(stamped + placeholder + struct.pack("<I", len(stamped)), b"item")
    tr.set_versionstamped_value(prefix + b"latest", placeholder + struct.pack("<I", 0))
    future = tr.get_versionstamp()
    tr.commit()
    stamp = future.wait()
    assert type(stamp) is bytes
    assert len(stamp) == 10
    check = cluster.create_transaction()
    assert check.get_range(stamped, _end(stamped)) == [(stamped + stamp, b"item")]
    assert check.get(prefix + b"latest") == stamp

    read_only = cluster.create_transaction()
    read_only.get(prefix + b"latest")
    read_only_future = read_only.get_versionstamp()
    read_only.commit()
    with pytest.raises(EngineError) as error:
        read_only_future.wait()
    assert error.value.code == kv.NO_COMMIT_VERSION


def test_conflict(cluster: FdbEngine, prefix: bytes) -> None:
    key = prefix + b"contended"
    kv.run(cluster, lambda tr: tr.set(key, b"0"))
    first, second = cluster.create_transaction(), cluster.create_transaction()
    assert first.get(key) == b"0"
    assert second.get(key) == b"0"
    first.set(key, b"first")
    second.set(key, b"second")
    first.commit()
    with pytest.raises(EngineError) as error:
        second.commit()
    assert error.value.code == kv.NOT_COMMITTED
    assert kv.is_retryable(error.value)
    assert cluster.create_transaction().get(key) == b"first"


def test_transactional_retry(cluster: FdbEngine, prefix: bytes) -> None:
    key = prefix + b"counter"
    attempts: list[int] = []

    @kv.transactional
    def bump(tr: kv.Transaction) -> int:
        attempts.append(1)
        current = tr.get(key)
        if len(attempts) == 1:
            kv.run(cluster, lambda other: other.set(key, b"\x05"))
        value = (current or b"\x00")[0] + 1
        tr.set(key, bytes([value]))
        return value

    assert bump(cluster) == 6
    assert len(attempts) == 2
    assert cluster.create_transaction().get(key) == b"\x06"
