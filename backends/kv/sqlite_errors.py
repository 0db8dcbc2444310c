"""The SQLite engine's errors as the engines' typed ones: a lock not granted in time is
1020 (``not_committed``: nothing was applied), anything else SQLite raises is 1510
(``io_error``)."""

from __future__ import annotations

import sqlite3
from typing import Final

from persistence import fdb_errors
from persistence.errors import EngineError

_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED and their extended codes (BUSY_SNAPSHOT, ...)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF in _BUSY_CODES) or "locked" in str(exc)


def sqlite_error(exc: sqlite3.Error, during: str) -> EngineError:
    """The engine error for ``exc``, raised while doing ``during``."""
    message = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
        # The write lock was not granted within busy_timeout: nothing was applied.
        return fdb_errors.engine_error(fdb_errors.NOT_COMMITTED, f"{during}: {message}")
    return fdb_errors.engine_error(fdb_errors.IO_ERROR, f"{during}: {message}")
