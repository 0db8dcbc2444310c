"""The object-store interface: immutable, create-only objects under string keys.

Object stores hold CAS bodies over the inline threshold and cold segments. Keys are
``/``-separated relative paths (``cas/<universe>/sha256/<hex>``,
``segments/<universe>/<world>/<start>-<end>.log``); implementations are chosen by URL in
:mod:`backends.objects`. Bodies may be larger than memory: ``put`` accepts a stream and
``open`` returns one.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from persistence.errors import Validation

COPY_CHUNK = 1024 * 1024
"""Bytes moved per read/write when streaming."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or ``stat`` knows about an object."""

    key: str
    size: int


def check_object_key(key: object) -> str:
    """Return ``key`` if it is a safe relative object key, else raise ``Validation``.

    Refused: empty keys, absolute paths, ``.``/``..`` or empty segments, NUL and
    backslashes -- nothing may escape a store's root."""
    if not isinstance(key, str) or not key:
        raise Validation("object key", "must be a non-empty string")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise Validation("object key", f"not a safe relative key: {key[:200]!r}")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise Validation("object key", f"empty, '.' or '..' segment in {key[:200]!r}")
    return key


def check_sha256(key: str, expected: bytes | None, actual: bytes) -> None:
    """Raise ``Validation`` if a body's sha256 is not the one the caller declared."""
    if expected is not None and expected != actual:
        raise Validation(
            "sha256", f"body of {key!r} hashes to {actual.hex()}, caller declared {expected.hex()}"
        )


class HashingReader:
    """Wraps a binary stream, hashing (sha256) and counting what is read through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        """Read like ``stream.read`` and account for the bytes."""
        data = self._stream.read(n)
        self.sha256.update(data)
        self.size += len(data)
        return data


class ObjectStore(ABC):
    """Create-only object storage."""

    url: str

    @abstractmethod
    def put(self, key: str, data: bytes | BinaryIO, *, sha256: bytes | None = None) -> bool:
        """Create ``key`` from bytes or a readable binary stream unless it exists; return
        whether it was created.

        Never overwrites: when the key exists the stored bytes are left as they are (the
        caller verifies them if it must). With ``sha256`` the store checks the body against
        it and stores nothing on a mismatch (``Validation``). Raises ``Validation`` (bad
        key), ``Backend``."""

    @abstractmethod
    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        """A stream of the object's bytes from ``start`` (``length`` bytes, or to the end).
        Raises ``NotFound``, ``Backend``. Close it when done."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """Size of ``key``, or ``None`` if absent. Raises ``Backend``."""

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order, after ``start_after``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if present (only for cleaning orphans). Raises ``Backend``."""

    def get(self, key: str) -> bytes:
        """The whole object in memory. Raises ``NotFound``, ``Backend``."""
        with self.open(key) as stream:
            return stream.read()

    def close(self) -> None:  # noqa: B027 -- most stores hold nothing to release
        """Release clients and files."""
