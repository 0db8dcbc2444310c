"""The object-store interface: immutable, create-only objects under string keys.

Object stores hold CAS bodies over the inline threshold and cold segments. Keys are
``/``-separated relative paths (``cas/<universe>/sha256/<hex>``,
``segments/<universe>/<world>/<start>-<end>.log``); implementations are chosen by URL in
:mod:`backends.objects`. Bodies may be larger than memory: ``put`` accepts a stream and
``open`` returns one. A body whose key is known only once it has been read (a content
address) is written with ``stage``, hashed on the way, then published under its key.
"""

from __future__ import annotations

import hashlib
import io
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Self

from persistence.errors import Validation
from persistence.sizes import MAX_OBJECT_KEY_BYTES, MAX_OBJECT_KEY_SEGMENT_BYTES

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

COPY_CHUNK = 1024 * 1024
"""Bytes moved per read/write when streaming."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or ``stat`` knows about an object."""

    key: str
    size: int


def check_object_key(key: object, prefix: str = "") -> str:
    """Return ``key`` if every store can hold it, else raise ``Validation`` naming the object key.

    One rule for every store, so that a key one store accepts every store accepts:

    * a safe relative path -- not empty, not absolute, no empty, ``.`` or ``..`` segment, no
      backslash -- so nothing can escape a store's root;
    * no control characters (NUL; and S3 listings are XML 1.0, which cannot carry most);
    * valid UTF-8 (no lone surrogates: no store can name an object with one);
    * at most :data:`~persistence.sizes.MAX_OBJECT_KEY_BYTES` UTF-8 bytes together with the
      store's ``prefix`` (S3's limit), and at most
      :data:`~persistence.sizes.MAX_OBJECT_KEY_SEGMENT_BYTES` in each ``/``-separated
      segment (a file name's limit, the local store's)."""
    if not isinstance(key, str) or not key:
        raise Validation("object key", "must be a non-empty string")
    if key.startswith("/") or "\\" in key:
        raise Validation("object key", f"not a safe relative key: {key[:200]!r}")
    if any(ord(c) < 0x20 or c == "\x7f" for c in key):
        raise Validation("object key", f"control character in {key[:200]!r}")
    try:
        size = len((prefix + key).encode())
    except UnicodeEncodeError:
        raise Validation("object key", f"not UTF-8 (a lone surrogate): {key[:200]!r}") from None
    if size > MAX_OBJECT_KEY_BYTES:
        raise Validation(
            "object key",
            f"{size:,} bytes (UTF-8, with the store's prefix) > {MAX_OBJECT_KEY_BYTES:,}",
        )
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise Validation("object key", f"empty, '.' or '..' segment in {key[:200]!r}")
    longest = max(len(part.encode()) for part in parts)
    if longest > MAX_OBJECT_KEY_SEGMENT_BYTES:
        raise Validation(
            "object key",
            f"a segment of {longest:,} bytes (UTF-8) > {MAX_OBJECT_KEY_SEGMENT_BYTES} "
            f"in {key[:200]!r}...",
        )
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


class ReadStream(io.RawIOBase):
    """A read-only raw stream whose subclass says only how to read (``_read``) and what to
    release when closed (``_release``, called once): ``read``, ``readinto`` and ``readall``
    are written here, once. A read of 0 bytes returns ``b""`` without reading; a read
    after ``close`` is a ``ValueError``, as for any closed file."""

    def readable(self) -> bool:
        return True

    def _read(self, n: int) -> bytes:
        """Up to ``n`` (> 0) bytes; ``b""`` only at the end."""
        raise NotImplementedError

    def _release(self) -> None:
        """Free what the stream reads from (nothing by default)."""

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all the rest if ``size`` is negative or ``None``)."""
        if size is None or size < 0:
            return self.readall()
        self._open()
        return self._read(size) if size else b""

    def readall(self) -> bytes:
        """The rest of the stream, read :data:`COPY_CHUNK` bytes at a time."""
        self._open()
        return b"".join(iter(lambda: self._read(COPY_CHUNK), b""))

    def readinto(self, buffer: WriteableBuffer) -> int:
        self._open()
        view = memoryview(buffer).cast("B")
        data = self._read(len(view)) if len(view) else b""
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._release()
        super().close()

    def _open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")


class StagedBody(ABC):
    """A body a store holds under no key yet (see :meth:`ObjectStore.stage`); leaving it as a
    context manager discards the staging copy (a published object stays)."""

    def __init__(self, sha256: bytes, size: int) -> None:
        self.sha256 = sha256
        self.size = size

    @abstractmethod
    def publish(self, key: str) -> bool:
        """Create ``key`` with the body unless it exists, as :meth:`ObjectStore.put` does (and
        with the same errors); whether it was created. May be called again, for instance after
        the object was deleted."""

    @abstractmethod
    def discard(self) -> None:
        """Drop the staging copy (idempotent)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


class ObjectStore(ABC):
    """Create-only object storage."""

    url: str
    late_delete_seconds: float = 300.0
    """How long after :meth:`delete` returned a request it sent may still take effect (a
    retried request whose first attempt timed out): orphan collection keeps puts of the body
    waiting that long. Stores whose delete is done when it returns say 0."""

    @abstractmethod
    def put(self, key: str, data: bytes | BinaryIO, *, sha256: bytes | None = None) -> bool:
        """Create ``key`` from bytes or a readable binary stream unless it exists; return
        whether it was created.

        Never overwrites: when the key exists the stored bytes are left as they are (the
        caller verifies them if it must). With ``sha256`` the store checks the body against
        it and stores nothing on a mismatch (``Validation``). Raises ``Validation`` (bad
        key), ``Backend``."""

    @abstractmethod
    def stage(self, data: bytes | BinaryIO, *, known_sha256: bytes | None = None) -> StagedBody:
        """Write a body whose key is not known yet where no key can see it, hashing it (sha256)
        on the way; :meth:`StagedBody.publish` then creates it under its key.

        ``known_sha256`` is the digest the caller computed of these very bytes: it is trusted
        and not computed again (a server that checks checksums still checks it). Raises
        ``Validation`` (bad ``data`` or digest), ``Backend``."""

    @abstractmethod
    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        """A stream of the object's bytes from ``start`` (``length`` bytes, or to the end).
        Raises ``Validation`` (bad key, ``start`` or ``length``), ``NotFound``, ``Backend``.
        Close it when done."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """Size of ``key``, or ``None`` if absent. Raises ``Validation`` (bad key), ``Backend``."""

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order, after ``start_after``.
        Bad arguments are ``Validation`` at the call, not at the first key; ``Backend``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if present (only for cleaning orphans). Raises ``Validation`` (bad
        key), ``Backend``."""

    def get(self, key: str) -> bytes:
        """The whole object in memory. Raises ``NotFound``, ``Backend``."""
        with self.open(key) as stream:
            return stream.read()

    def close(self) -> None:  # noqa: B027 -- most stores hold nothing to release
        """Release clients and files."""
