"""Byte-size units, the limits on caller input that no configuration changes, and the checks
that enforce them.

Every public call of the plane, the object stores and the engines checks each argument with
these before it writes anything, and refuses with :class:`~persistence.errors.Validation`
naming the argument and the limit -- never with ``TypeError`` or ``OverflowError`` from deep
inside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from persistence.errors import Validation

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB

MAX_ROW_LIMIT: Final = 2**31 - 1
"""The largest ``limit`` of a listing call: FoundationDB's range-read row limit is a C
``int``, and SQLite's is a 64-bit integer; a larger limit is no use to anyone."""
MAX_IDEMPOTENCY_KEY_BYTES: Final = 256
"""An inbox idempotency key: 1 to 256 bytes (it is part of a key)."""
MAX_NAME_CHARS: Final = 1024
"""A world handle or an effect worker's name."""
MAX_OBJECT_KEY_BYTES: Final = 1024
"""An object key, UTF-8 encoded: S3's limit, which the other stores share so that a key
accepted by one store is accepted by every store."""
MAX_OBJECT_KEY_SEGMENT_BYTES: Final = 255
"""One ``/``-separated segment of an object key, UTF-8 encoded: a file name's limit on the
local store's file systems (``NAME_MAX``), which the other stores share for the same
reason."""
MAX_APP_KEY_BYTES: Final = 2048
"""A key of an application's own data (``app_data`` of a group append): 1 to 2,048 bytes
(it is part of an engine key; FoundationDB's keys end at 10,000 bytes)."""
MAX_APP_VALUE_BYTES: Final = 90_000
"""A value of an application's own data: at most 90,000 bytes (one engine value;
FoundationDB's end at 100,000 bytes)."""
MAX_CALL_RECORD_SECONDS: Final = 7 * 24 * 3600.0
"""The longest call-record window (``PlaneConfig.call_record_seconds``): a week."""


def check_int(value: object, field: str, low: int, high: int) -> int:
    """Return ``value`` if it is an ``int`` (not a ``bool``) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Validation(field, f"expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise Validation(field, f"{value} outside [{low}, {high}]")
    return value


def check_bool(value: object, field: str) -> bool:
    """Return ``value`` if it is a ``bool``."""
    if not isinstance(value, bool):
        raise Validation(field, f"expected True or False, got {type(value).__name__}")
    return value


def check_number(value: object, field: str, low: float, high: float) -> float:
    """Return ``value`` if it is a finite ``int`` or ``float`` (not a ``bool``) in
    ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Validation(field, f"expected a number, got {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= high):
        raise Validation(field, f"{value!r} outside [{low}, {high}]")
    return value


def check_bytes(value: object, field: str, *, low: int = 0, high: int | None = None) -> bytes:
    """Return ``value`` if it is ``bytes`` of ``low`` to ``high`` bytes."""
    if type(value) is not bytes:
        raise Validation(field, f"expected bytes, got {type(value).__name__}")
    if len(value) < low or (high is not None and len(value) > high):
        limit = f"{low} to {high}" if high is not None else f"at least {low}"
        raise Validation(field, f"{len(value):,} bytes; expected {limit}")
    return value


def check_text(value: object, field: str, high: int = MAX_NAME_CHARS) -> str:
    """Return ``value`` if it is non-empty text of at most ``high`` characters that encodes as
    UTF-8 (no lone surrogates: they cannot be stored)."""
    if not isinstance(value, str):
        raise Validation(field, f"expected text, got {type(value).__name__}")
    if not 1 <= len(value) <= high:
        raise Validation(field, f"{len(value):,} characters; expected 1 to {high:,}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise Validation(field, "not encodable as UTF-8 (a lone surrogate)") from None
    return value


def check_sequence(value: object, field: str, low: int, high: int) -> Sequence[object]:
    """Return ``value`` if it is a list or tuple of ``low`` to ``high`` elements (a ``bytes``
    or ``str`` is a sequence too, and always a mistake here)."""
    if not isinstance(value, list | tuple):
        raise Validation(field, f"expected a list or tuple, got {type(value).__name__}")
    if not low <= len(value) <= high:
        raise Validation(field, f"{len(value):,} elements; expected {low} to {high}")
    return value
