"""An application's own data: a subspace of its universe (``("u", U, "app")`` then the
application's key bytes) that the plane stores but never interprets, written only in the
transaction of a group append -- with the events, or the tracking record, that it derives
from -- and read back by key or by range."""

from __future__ import annotations

from collections.abc import Sequence

from persistence import kv
from persistence.keyspace import UniverseKeys

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
