"""FoundationDB's client-side checks and mutation arithmetic, shared by the engines."""

from __future__ import annotations

from persistence.fdb_errors import (
    KEY_OUTSIDE_LEGAL_RANGE,
    KEY_TOO_LARGE,
    VALUE_TOO_LARGE,
    engine_error,
)
from persistence.kv import MAX_KEY_SIZE, MAX_VALUE_SIZE, SYSTEM_KEY_PREFIX


def check_key(key: bytes) -> None:
    """Raise the engine error FoundationDB raises for an illegal or oversize key."""
    if not isinstance(key, bytes):
        raise TypeError(f"keys are bytes, not {type(key).__name__}")
    if len(key) > MAX_KEY_SIZE:
        raise engine_error(KEY_TOO_LARGE, f"key of {len(key)} bytes > {MAX_KEY_SIZE}")
    if key.startswith(SYSTEM_KEY_PREFIX):
        raise engine_error(KEY_OUTSIDE_LEGAL_RANGE, "keys starting with 0xff are reserved")


def check_value(value: bytes) -> None:
    """Raise the engine error FoundationDB raises for an oversize value."""
    if not isinstance(value, bytes):
        raise TypeError(f"values are bytes, not {type(value).__name__}")
    if len(value) > MAX_VALUE_SIZE:
        raise engine_error(VALUE_TOO_LARGE, f"value of {len(value)} bytes > {MAX_VALUE_SIZE}")


def split_versionstamp_offset(data: bytes, what: str) -> tuple[bytes, int]:
    """Split ``data`` into the bytes and the placeholder offset of its 4-byte suffix."""
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
