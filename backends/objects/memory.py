"""The memory object store: a dict in this process (``memory://``), for tests and demos."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from persistence.errors import NotFound
from persistence.objects import ObjectInfo, ObjectStore, check_object_key


class MemoryObjectStore(ObjectStore):
    """Create-only objects in memory; thread-safe."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> bool:
        check_object_key(key)
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = bytes(data)
            return True

    def get(self, key: str) -> bytes:
        check_object_key(key)
        with self._lock:
            try:
                return self._objects[key]
            except KeyError:
                raise NotFound(f"object {key!r} not found") from None

    def stat(self, key: str) -> ObjectInfo | None:
        check_object_key(key)
        with self._lock:
            data = self._objects.get(key)
        return None if data is None else ObjectInfo(key, len(data))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        with self._lock:
            keys = sorted(k for k in self._objects if k.startswith(prefix))
            items = [ObjectInfo(k, len(self._objects[k])) for k in keys]
        return iter([i for i in items if start_after is None or i.key > start_after])

    def delete(self, key: str) -> None:
        check_object_key(key)
        with self._lock:
            self._objects.pop(key, None)

    def replace_for_test(self, key: str, data: bytes) -> None:
        """Overwrite an object in place, bypassing create-only (to plant corruption)."""
        with self._lock:
            self._objects[key] = data
