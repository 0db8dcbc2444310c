"""The memory object store: a dict in this process (``memory://``), for tests and demos."""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterator
from typing import BinaryIO

from backends.objects.checks import check_body, check_listing, check_put, check_window, read_bytes
from persistence.errors import NotFound
from persistence.objects import (
    ObjectInfo,
    ObjectStore,
    StagedBody,
    check_object_key,
    check_sha256,
)


class _Staged(StagedBody):
    """A staged body: the bytes, kept until published."""

    def __init__(self, store: MemoryObjectStore, body: bytes, sha256: bytes) -> None:
        super().__init__(sha256, len(body))
        self._store = store
        self._body = body

    def publish(self, key: str) -> bool:
        check_object_key(key)
        return self._store._create(key, self._body)

    def discard(self) -> None:
        pass  # nothing outside this object


class MemoryObjectStore(ObjectStore):
    late_delete_seconds = 0.0
    """Create-only objects in memory; thread-safe."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes | BinaryIO, *, sha256: bytes | None = None) -> bool:
        check_put(key, data, sha256)
        body = data if isinstance(data, bytes) else read_bytes(data)
        check_sha256(key, sha256, hashlib.sha256(body).digest() if sha256 else b"")
        return self._create(key, body)

    def _create(self, key: str, body: bytes) -> bool:
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = bytes(body)
            return True

    def stage(self, data: bytes | BinaryIO, *, known_sha256: bytes | None = None) -> StagedBody:
        check_body(data, known_sha256, "known_sha256")
        body = data if isinstance(data, bytes) else read_bytes(data)
        return _Staged(self, body, known_sha256 or hashlib.sha256(body).digest())

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        check_object_key(key)
        check_window(start, length)
        with self._lock:
            try:
                data = self._objects[key]
            except KeyError:
                raise NotFound(f"object {key!r} not found") from None
        end = len(data) if length is None else start + length
        return io.BytesIO(data[start:end])

    def stat(self, key: str) -> ObjectInfo | None:
        check_object_key(key)
        with self._lock:
            data = self._objects.get(key)
        return None if data is None else ObjectInfo(key, len(data))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        check_listing(prefix, start_after)
        with self._lock:
            items = sorted((k, len(v)) for k, v in self._objects.items() if k.startswith(prefix))
        return iter([ObjectInfo(k, n) for k, n in items if start_after is None or k > start_after])

    def delete(self, key: str) -> None:
        check_object_key(key)
        with self._lock:
            self._objects.pop(key, None)

    def replace_for_test(self, key: str, data: bytes) -> None:
        """Overwrite an object in place, bypassing create-only (to plant corruption)."""
        with self._lock:
            self._objects[key] = data
