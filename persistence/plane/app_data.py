"""An application's own data: what a group append writes with its events or its tracking
record (``app_data=``), and the reads of it (``protocols/app_data.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from persistence.errors import Validation
from persistence.ids import UniverseId
from persistence.plane.core import Core, operation, row_limit, universe_keys
from persistence.protocols import app_data
from persistence.sizes import (
    MAX_APP_KEY_BYTES,
    MAX_APP_VALUE_BYTES,
    check_bool,
    check_bytes,
)


def checked_app_data(value: object, field: str = "app_data") -> list[app_data.AppWrite]:
    """``value`` -- a mapping of key to new value (``None``: remove the key) -- as the
    writes it stands for, in its order; ``Validation`` naming the first bad key or value
    and the limit (keys 1 to :data:`MAX_APP_KEY_BYTES` bytes, values at most
    :data:`MAX_APP_VALUE_BYTES`)."""
    if not isinstance(value, Mapping):
        raise Validation(field, f"expected a mapping of bytes to bytes or None, got {value!r:.60}")
    writes: list[app_data.AppWrite] = []
    for key, new in value.items():
        check_bytes(key, f"{field} key", low=1, high=MAX_APP_KEY_BYTES)
        if new is not None:
            check_bytes(new, f"{field}[{key!r:.40}]", high=MAX_APP_VALUE_BYTES)
        writes.append((key, new))
    return writes


class AppDataOperations(Core):
    """Reads of an application's own data (it is written by group appends)."""

    @operation("app.read")
    async def read_app_data(self, universe: UniverseId, key: bytes) -> bytes | None:
        """The value of the application's own ``key`` in ``universe`` (``None`` if none)."""
        keys = universe_keys(universe)
        check_bytes(key, "key", low=1, high=MAX_APP_KEY_BYTES)
        return await app_data.read(self.engine, keys, key)

    @operation("app.read_range")
    async def read_app_range(
        self,
        universe: UniverseId,
        begin: bytes = b"",
        end: bytes | None = None,
        *,
        limit: int = 1_000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` ``(key, value)`` pairs of the application's own data in
        ``universe``, from ``begin`` up to ``end`` (exclusive; ``None``: every key from
        ``begin`` on), in key order -- descending with ``reverse``. One snapshot read: to
        page, read again from after the last key (``key + b"\\x00"``; with ``reverse``, up
        to the last key)."""
        keys = universe_keys(universe)
        check_bytes(begin, "begin", high=MAX_APP_KEY_BYTES + 1)  # a key + b"\x00": paging
        if end is not None:
            check_bytes(end, "end", high=MAX_APP_KEY_BYTES + 1)
        row_limit(limit)
        check_bool(reverse, "reverse")
        if limit == 0 or (end is not None and end <= begin):
            return []
        return await app_data.read_range(self.engine, keys, begin, end, limit, reverse)
