"""FoundationDB's client-side checks and mutation arithmetic, shared by the engines."""

from __future__ import annotations

from persistence.errors import Validation
from persistence.fdb_errors import (
    KEY_OUTSIDE_LEGAL_RANGE,
    KEY_TOO_LARGE,
    VALUE_TOO_LARGE,
    engine_error,
)
from persistence.kv import MAX_KEY_SIZE, MAX_VALUE_SIZE, SYSTEM_KEY_PREFIX
from persistence.sizes import MAX_ROW_LIMIT


def check_type(value: object, field: str) -> bytes:
    """``Validation`` naming ``field`` unless ``value`` is ``bytes`` (the binding's
    ``TypeError``, typed as every caller mistake is)."""
    if type(value) is not bytes:
        raise Validation(field, f"expected bytes, got {type(value).__name__}")
    return value


def check_range(begin: object, end: object) -> None:
    """``Validation`` unless both ends of a range are ``bytes``."""
    check_type(begin, "begin")
    check_type(end, "end")


def check_limit(limit: object) -> int:
    """``Validation`` unless a range read's ``limit`` is an ``int`` (0 means no limit); a
    negative one is the engine error FoundationDB raises, checked by the reader."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise Validation("limit", f"expected an integer, got {type(limit).__name__}")
    if limit > MAX_ROW_LIMIT:
        raise Validation("limit", f"{limit} > {MAX_ROW_LIMIT} (a C int in FoundationDB)")
    return limit


def check_key(key: bytes) -> None:
    """Raise the engine error FoundationDB raises for an illegal or oversize key."""
    check_type(key, "key")
    if len(key) > MAX_KEY_SIZE:
        raise engine_error(KEY_TOO_LARGE, f"key of {len(key)} bytes > {MAX_KEY_SIZE}")
    if key.startswith(SYSTEM_KEY_PREFIX):
        raise engine_error(KEY_OUTSIDE_LEGAL_RANGE, "keys starting with 0xff are reserved")


def check_pair(key: bytes, value: bytes) -> None:
    """:func:`check_key` and :func:`check_value` in one call, for bulk writes."""
    if (
        type(key) is not bytes
        or type(value) is not bytes
        or len(key) > MAX_KEY_SIZE
        or len(value) > MAX_VALUE_SIZE
        or key.startswith(SYSTEM_KEY_PREFIX)
    ):
        check_key(key)
        check_value(value)


def check_value(value: bytes) -> None:
    """Raise the engine error FoundationDB raises for an oversize value."""
    check_type(value, "value")
    if len(value) > MAX_VALUE_SIZE:
        raise engine_error(VALUE_TOO_LARGE, f"value of {len(value)} bytes > {MAX_VALUE_SIZE}")


def split_versionstamp_offset(data: bytes, what: str) -> tuple[bytes, int]:
    """Split ``data`` into the bytes and the placeholder offset of its 4-byte suffix."""
    check_type(data, what)
    if len(data) < 4:
        raise ValueError(f"versionstamped {what} lacks its 4-byte offset suffix")
    body, offset = data[:-4], int.from_bytes(data[-4:], "little")
    if offset + 10 > len(body):
        raise ValueError(f"versionstamp offset {offset} outside the {len(body)}-byte {what}")
    return body, offset


def apply_add(current: bytes | None, param: bytes) -> bytes:
    """FoundationDB's ``ADD`` mutation: little-endian add, result as wide as ``param``."""
    width = len(param)
    base = int.from_bytes((current or b"")[:width], "little")
    total = (base + int.from_bytes(param, "little")) % (1 << (8 * width))
    return total.to_bytes(width, "little")


def apply_compare_and_clear(current: bytes | None, param: bytes) -> bytes | None:
    """FoundationDB's ``COMPARE_AND_CLEAR`` mutation: the key goes if its value is
    ``param`` (an absent key stays absent), else keeps its value."""
    return None if current is None or current == param else current
