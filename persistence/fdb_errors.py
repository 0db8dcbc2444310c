"""FoundationDB's error codes, their names and its retry table (``flow/error_definitions.h``).

Every engine raises :class:`~persistence.errors.EngineError` with these numbers, so the retry
runner of :mod:`persistence.kv` is written once. The FoundationDB engine classifies through
``libfdb_c`` itself; the table here is what the other engines use, and a test compares it with
the real library's ``fdb_error_predicate`` for every code.
"""

from __future__ import annotations

from typing import Final

from persistence.errors import EngineError

TRANSACTION_TOO_OLD: Final = 1007
FUTURE_VERSION: Final = 1009
NOT_COMMITTED: Final = 1020
COMMIT_UNKNOWN_RESULT: Final = 1021
TRANSACTION_CANCELLED: Final = 1025
TRANSACTION_TIMED_OUT: Final = 1031
ACCESSED_UNREADABLE: Final = 1036
PROCESS_BEHIND: Final = 1037
DATABASE_LOCKED: Final = 1038
CLUSTER_VERSION_CHANGED: Final = 1039
COMMIT_PROXY_MEMORY_LIMIT_EXCEEDED: Final = 1042
BATCH_TRANSACTION_THROTTLED: Final = 1051
GRV_PROXY_MEMORY_LIMIT_EXCEEDED: Final = 1078
TAG_THROTTLED: Final = 1213
PROXY_TAG_THROTTLED: Final = 1223
IO_ERROR: Final = 1510
CLIENT_INVALID_OPERATION: Final = 2000
KEY_OUTSIDE_LEGAL_RANGE: Final = 2004
INVERTED_RANGE: Final = 2005
USED_DURING_COMMIT: Final = 2017
NO_COMMIT_VERSION: Final = 2021
TRANSACTION_TOO_LARGE: Final = 2101
KEY_TOO_LARGE: Final = 2102
VALUE_TOO_LARGE: Final = 2103

MAYBE_COMMITTED: Final = frozenset({COMMIT_UNKNOWN_RESULT, CLUSTER_VERSION_CHANGED})
"""Errors after which the transaction may or may not have been applied."""

RETRYABLE_NOT_COMMITTED: Final = frozenset(
    {
        NOT_COMMITTED,
        TRANSACTION_TOO_OLD,
        FUTURE_VERSION,
        DATABASE_LOCKED,
        PROCESS_BEHIND,
        COMMIT_PROXY_MEMORY_LIMIT_EXCEEDED,
        BATCH_TRANSACTION_THROTTLED,
        GRV_PROXY_MEMORY_LIMIT_EXCEEDED,
        TAG_THROTTLED,
        PROXY_TAG_THROTTLED,
    }
)
"""Errors after which the transaction certainly was not applied and may be retried."""

RETRYABLE: Final = MAYBE_COMMITTED | RETRYABLE_NOT_COMMITTED
"""FoundationDB's ``fdb_error_predicate(RETRYABLE)``: what ``on_error`` retries. The FDB
engine asks ``libfdb_c`` itself; this copy is what the other engines use, and a test
compares it with the library's predicates for every code."""

ERROR_DESCRIPTIONS: Final = {
    COMMIT_PROXY_MEMORY_LIMIT_EXCEEDED: "commit_proxy_memory_limit_exceeded",
    BATCH_TRANSACTION_THROTTLED: "batch_transaction_throttled",
    GRV_PROXY_MEMORY_LIMIT_EXCEEDED: "grv_proxy_memory_limit_exceeded",
    TRANSACTION_TOO_OLD: "transaction_too_old",
    FUTURE_VERSION: "future_version",
    NOT_COMMITTED: "not_committed",
    COMMIT_UNKNOWN_RESULT: "commit_unknown_result",
    TRANSACTION_CANCELLED: "transaction_cancelled",
    TRANSACTION_TIMED_OUT: "transaction_timed_out",
    ACCESSED_UNREADABLE: "accessed_unreadable",
    PROCESS_BEHIND: "process_behind",
    DATABASE_LOCKED: "database_locked",
    CLUSTER_VERSION_CHANGED: "cluster_version_changed",
    IO_ERROR: "io_error",
    CLIENT_INVALID_OPERATION: "client_invalid_operation",
    KEY_OUTSIDE_LEGAL_RANGE: "key_outside_legal_range",
    INVERTED_RANGE: "inverted_range",
    USED_DURING_COMMIT: "used_during_commit",
    NO_COMMIT_VERSION: "no_commit_version",
    TRANSACTION_TOO_LARGE: "transaction_too_large",
    KEY_TOO_LARGE: "key_too_large",
    VALUE_TOO_LARGE: "value_too_large",
    TAG_THROTTLED: "tag_throttled",
    PROXY_TAG_THROTTLED: "proxy_tag_throttled",
}


def engine_error(code: int, detail: str = "", *, read_conflict: bool = False) -> EngineError:
    """An :class:`EngineError` with FoundationDB's name for ``code``."""
    name = ERROR_DESCRIPTIONS.get(code, "engine_error")
    return EngineError(code, f"{name}: {detail}" if detail else name, read_conflict=read_conflict)


def is_retryable(error: BaseException) -> bool:
    """Whether ``fdb.transactional`` would retry ``error``."""
    return isinstance(error, EngineError) and error.code in RETRYABLE
