"""An application's own data: what a group append writes with its events or its tracking
record (``app_data=``), the application's own transactions over it, and the reads of it
(``protocols/app_data.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from persistence import fdb_errors, kv
from persistence.errors import EngineError, Validation
from persistence.futures import Future
from persistence.ids import UniverseId
from persistence.plane.core import Core, operation, row_limit, universe_keys
from persistence.protocols import app_data
from persistence.protocols.app_data import AppTransaction
from persistence.sizes import (
    MAX_APP_KEY_BYTES,
    MAX_APP_VALUE_BYTES,
    check_bool,
    check_bytes,
)

T = TypeVar("T")


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
    """Reads of an application's own data, and its own transactions over it (it is also
    written by group appends)."""

    @operation("app.transact")
    async def transact_app(
        self,
        universe: UniverseId,
        body: Callable[[AppTransaction], Awaitable[T]],
        *,
        eager: bool = False,
    ) -> T:
        """Run ``body`` -- a coroutine function of an :class:`AppTransaction` over the
        application's own data in ``universe``, awaiting only the transaction's reads --
        in one transaction and commit it, retrying as FoundationDB's retry loop does;
        return what the committed attempt returned. With ``eager``, an attempt that lost a
        conflict is retried at once, without backoff. **The body may run more than once,
        including after a commit that applied** (an unknown commit result): make it
        idempotent, for instance by writing a key unique to the call and reading it
        first."""
        result, _ = await self._transact_app(universe, body, eager, stamped=False)
        return result

    @operation("app.transact_stamped")
    async def transact_app_stamped(
        self,
        universe: UniverseId,
        body: Callable[[AppTransaction], Awaitable[T]],
        *,
        eager: bool = False,
    ) -> tuple[T, bytes | None]:
        """:meth:`transact_app` for a body that writes: what it returned and the 10-byte
        versionstamp of the transaction that committed (the one its versionstamped keys
        got) -- ``None`` if the committed attempt wrote nothing, as a body run again after
        an unknown result that applied, finding its own key, does: the stamp of the attempt
        that applied is then in what it wrote (a versionstamped key or value), not here."""
        return await self._transact_app(universe, body, eager, stamped=True)

    async def _transact_app(
        self,
        universe: UniverseId,
        body: Callable[[AppTransaction], Awaitable[T]],
        eager: object,
        *,
        stamped: bool,
    ) -> tuple[T, bytes | None]:
        keys = universe_keys(universe)
        if not callable(body):
            raise Validation("body", f"expected a coroutine function, got {type(body).__name__}")
        check_bool(eager, "eager")

        async def attempt(tr: kv.Transaction) -> tuple[T, Future[bytes] | None]:
            app = AppTransaction(tr, keys)
            result = await body(app)
            return result, app.get_versionstamp() if stamped else None

        result, stamp = await kv.transact(self.engine, attempt, eager=bool(eager))
        if stamp is None:
            return result, None
        try:
            return result, await stamp
        except EngineError as exc:
            if exc.code != fdb_errors.NO_COMMIT_VERSION:
                raise
            return result, None  # the committed attempt wrote nothing

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
