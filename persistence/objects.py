"""The object-store interface: immutable, create-only objects under string keys.

Object stores hold CAS bodies over the inline threshold and cold segments. Keys are
``/``-separated relative paths (``cas/<universe>/sha256/<hex>``,
``segments/<universe>/<world>/<start>-<end>.log``); implementations are chosen by URL in
:mod:`backends.objects`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

from persistence.errors import Validation


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


class ObjectStore(ABC):
    """Create-only object storage."""

    url: str

    @abstractmethod
    def put(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` unless it exists; return whether it was created.

        Never overwrites: when the key exists the stored bytes are left as they are (the
        caller verifies them if it must). Raises ``Validation`` (bad key), ``Backend``."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes of ``key``. Raises ``NotFound``, ``Backend``."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """Size of ``key``, or ``None`` if absent. Raises ``Backend``."""

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order, after ``start_after``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if present (only for cleaning orphans). Raises ``Backend``."""

    def close(self) -> None:  # noqa: B027 -- most stores hold nothing to release
        """Release clients and files."""
