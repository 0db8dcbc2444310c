"""The argument checks every object store makes, as FoundationDB's client makes its own:
keys, bodies and their declared hashes, read windows and listings (``Validation`` naming the
argument)."""

from __future__ import annotations

from typing import BinaryIO

from persistence.errors import Validation
from persistence.objects import check_object_key
from persistence.sizes import check_int


def check_put(key: object, data: object, sha256: object, prefix: str = "") -> str:
    """Check the arguments of :meth:`ObjectStore.put` before anything is read or sent."""
    text = check_object_key(key, prefix)
    check_body(data, sha256, "sha256")
    return text


def check_body(data: object, sha256: object, field: str) -> None:
    """Check a body (bytes or a binary stream) and its digest argument ``field`` (``None`` or
    32 bytes), as :meth:`ObjectStore.put` and :meth:`ObjectStore.stage` take them."""
    if not isinstance(data, bytes) and not callable(getattr(data, "read", None)):
        raise Validation("data", f"expected bytes or a binary stream, got {type(data).__name__}")
    if sha256 is not None and (type(sha256) is not bytes or len(sha256) != 32):
        raise Validation(field, f"a sha256 is 32 bytes, got {sha256!r:.80}")


def read_bytes(stream: BinaryIO, n: int = -1) -> bytes:
    """``stream.read(n)``, refusing a stream that yields anything but bytes (a text stream)."""
    chunk = stream.read(n)
    if type(chunk) is not bytes:
        raise Validation("data", f"the stream's read returned {type(chunk).__name__}, not bytes")
    return chunk


def check_window(start: object, length: object) -> None:
    """Check the ``start`` and ``length`` of :meth:`ObjectStore.open`."""
    check_int(start, "start", 0, 2**63 - 1)
    if length is not None:
        check_int(length, "length", 0, 2**63 - 1)


def check_listing(prefix: object, start_after: object) -> None:
    """Check the arguments of :meth:`ObjectStore.list` (at the call, not at the first key)."""
    for value, field in ((prefix, "prefix"), (start_after, "start_after")):
        if value is None and field == "start_after":
            continue
        if not isinstance(value, str):
            raise Validation(field, f"expected text, got {type(value).__name__}")
        try:
            value.encode()
        except UnicodeEncodeError:
            raise Validation(field, "not UTF-8 (a lone surrogate)") from None
