"""Object stores, opened by URL.

================================  =====================================================
URL                               store
================================  =====================================================
``memory://``                     :class:`~backends.objects.memory.MemoryObjectStore`
``file:///var/lib/aos/objects``   :class:`~backends.objects.local.LocalObjectStore`
                                  (query: ``fsync=0`` to skip fsync, for tests only)
================================  =====================================================
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from persistence.errors import Validation
from persistence.objects import ObjectStore


def open_object_store(url: str) -> ObjectStore:
    """Open the object store named by ``url``."""
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "memory":
        from backends.objects.memory import MemoryObjectStore

        return MemoryObjectStore()
    if parts.scheme == "file":
        from backends.objects.local import LocalObjectStore

        path = unquote(parts.netloc + parts.path)
        if not path:
            raise Validation("objects url", f"file URL needs a directory: {url!r}")
        unknown = set(options) - {"fsync"}
        if unknown:
            raise Validation("objects url", f"unknown option(s) {sorted(unknown)}")
        return LocalObjectStore(path, fsync=options.get("fsync", "1") != "0")
    raise Validation("objects url", f"unknown object store scheme {parts.scheme!r} in {url!r}")
