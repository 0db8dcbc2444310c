"""An application's own data: a subspace of its universe (``("u", U, "app")`` then the
application's key bytes) that the plane stores but never interprets. It is written in the
transaction of a group append -- with the events, or the tracking record, that it derives
from --, or in a transaction of the application's own (:class:`AppTransaction`: reads with
conflicts, writes, versionstamped keys, confined to the subspace); and read back by key or
by range."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from persistence import kv
from persistence.futures import Future, Mapped
from persistence.keyspace import UniverseKeys
from persistence.sizes import MAX_APP_KEY_BYTES, MAX_APP_VALUE_BYTES, check_bytes, check_int

STAMP_BYTES: Final = 10
"""A versionstamp: 8-byte big-endian commit version, 2-byte batch order."""

AppWrite = tuple[bytes, bytes | None]
"""One write of an application's own data: a key and its new value (``None``: remove it)."""


def write(tr: kv.Transaction, universe: UniverseKeys, writes: Sequence[AppWrite]) -> None:
    """Apply ``writes`` (checked by the caller), in order, blind: nothing is read."""
    for key, value in writes:
        if value is None:
            tr.clear(universe.app(key))
        else:
            tr.set(universe.app(key), value)


@kv.transactional
async def read(tr: kv.Transaction, universe: UniverseKeys, key: bytes) -> bytes | None:
    """The value of ``key`` (``None`` if it has none). A snapshot read: a read-only call."""
    return await tr.get(universe.app(key), snapshot=True)


@kv.transactional
async def read_range(
    tr: kv.Transaction,
    universe: UniverseKeys,
    begin: bytes,
    end: bytes | None,
    limit: int,
    reverse: bool,
) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` ``(key, value)`` pairs from ``begin`` up to ``end`` (exclusive;
    ``None``: the end of the subspace), in key order (descending with ``reverse``), the
    keys as the application wrote them. One snapshot range read: a read-only call."""
    rows = await tr.get_range(
        *universe.app_range(begin, end), limit=limit, reverse=reverse, snapshot=True
    )
    start = universe.app_prefix_len()
    return [(key[start:], value) for key, value in rows]


class AppTransaction:
    """One transaction over an application's own data in a universe, for
    ``Plane.transact_app``: FoundationDB's transaction, confined to the subspace, with the
    application's keys as it writes them. Reads add read-conflict ranges unless
    ``snapshot``; the transaction commits only if nothing it read with a conflict was written
    by a transaction that committed after its read version (then the body runs again).
    Every argument is checked before anything is written (``Validation`` naming it and the
    limit: keys 1 to :data:`MAX_APP_KEY_BYTES` bytes, values at most
    :data:`MAX_APP_VALUE_BYTES`)."""

    __slots__ = ("_keys", "_start", "_tr")

    def __init__(self, tr: kv.Transaction, universe: UniverseKeys) -> None:
        self._tr = tr
        self._keys = universe
        self._start = universe.app_prefix_len()

    def get(self, key: bytes, *, snapshot: bool = False) -> Future[bytes | None]:
        """The value of ``key`` (``None`` if none)."""
        check_bytes(key, "key", low=1, high=MAX_APP_KEY_BYTES)
        return self._tr.get(self._keys.app(key), snapshot=snapshot)

    def get_range(
        self,
        begin: bytes,
        end: bytes | None,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> Future[list[tuple[bytes, bytes]]]:
        """The pairs from ``begin`` up to ``end`` (exclusive; ``None``: the end of the
        subspace) in key order (descending with ``reverse``), at most ``limit`` (0: all).
        Its read-conflict range ends past the last key returned when ``limit`` stops it."""
        check_bytes(begin, "begin", high=MAX_APP_KEY_BYTES + 1)
        if end is not None:
            check_bytes(end, "end", high=MAX_APP_KEY_BYTES + 1)
        check_int(limit, "limit", 0, 2**31 - 1)
        first, last = self._keys.app_range(begin, end)
        start = self._start
        rows = self._tr.get_range(first, last, limit=limit, reverse=reverse, snapshot=snapshot)
        return Mapped(rows, lambda pairs: [(key[start:], value) for key, value in pairs])

    def set(self, key: bytes, value: bytes) -> None:
        """Write ``key``."""
        check_bytes(key, "key", low=1, high=MAX_APP_KEY_BYTES)
        check_bytes(value, "value", high=MAX_APP_VALUE_BYTES)
        self._tr.set(self._keys.app(key), value)

    def clear(self, key: bytes) -> None:
        """Remove ``key`` (nothing if it has no value)."""
        check_bytes(key, "key", low=1, high=MAX_APP_KEY_BYTES)
        self._tr.clear(self._keys.app(key))

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Remove every key from ``begin`` up to ``end`` (exclusive)."""
        check_bytes(begin, "begin", high=MAX_APP_KEY_BYTES + 1)
        check_bytes(end, "end", high=MAX_APP_KEY_BYTES + 1)
        if begin < end:
            self._tr.clear_range(*self._keys.app_range(begin, end))

    def set_versionstamped_key(self, key: bytes, offset: int, value: bytes) -> None:
        """Write ``key`` with its :data:`STAMP_BYTES` bytes from ``offset`` replaced, at
        commit, by the transaction's versionstamp: keys so written sort in commit order.
        FoundationDB's write-conflict range of such a write is every key it could become
        from the transaction's read version on."""
        check_bytes(key, "key", low=STAMP_BYTES, high=MAX_APP_KEY_BYTES)
        check_int(offset, "offset", 0, len(key) - STAMP_BYTES)
        check_bytes(value, "value", high=MAX_APP_VALUE_BYTES)
        full = self._keys.app(key)
        at = self._start + offset
        self._tr.set_versionstamped_key(full + at.to_bytes(4, "little"), value)

    def get_versionstamp(self) -> Future[bytes]:
        """The transaction's versionstamp, known once it has committed (await it after the
        body returns: ``Plane.transact_app`` gives it with ``stamped``)."""
        return self._tr.get_versionstamp()
