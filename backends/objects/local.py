"""The local-directory object store (``file:///var/lib/aos/objects``): the embedded default.

Create-only and crash-safe: a body is written to a temporary file in the target directory,
fsynced, then published with ``link(2)`` -- which fails if the name exists, so two writers
racing on one key cannot overwrite each other -- and the directory is fsynced so the new
name survives a power loss. A crash leaves at most a ``.tmp-*`` file, never a partial object
under a real key. Keys are validated so that none can escape the root.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

from persistence.errors import Backend, NotFound
from persistence.objects import (
    COPY_CHUNK,
    ObjectInfo,
    ObjectStore,
    check_object_key,
    check_sha256,
)

_TMP_PREFIX = ".tmp-"


class _Limited(io.RawIOBase):
    """At most ``remaining`` bytes of an open file (a ranged read)."""

    def __init__(self, fh: BinaryIO, remaining: int) -> None:
        self._fh = fh
        self._remaining = remaining

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._remaining)
        if n <= 0:
            return 0
        data = self._fh.read(n)
        buffer[: len(data)] = data
        self._remaining -= len(data)
        return len(data)

    def close(self) -> None:
        self._fh.close()
        super().close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).resolve()
        self.fsync = fsync
        self.url = f"file://{self.root}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise Backend(f"object store root {self.root}: {exc}") from None

    def _path(self, key: str) -> Path:
        path = (self.root / check_object_key(key)).resolve()
        if self.root not in path.parents:
            raise Backend(f"object key {key!r} resolves outside {self.root}")
        return path

    def put(self, key: str, data: bytes | BinaryIO, *, sha256: bytes | None = None) -> bool:
        path = self._path(key)
        if path.exists():
            return False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=path.parent)
            try:
                digest = hashlib.sha256()
                with os.fdopen(fd, "wb") as fh:
                    if isinstance(data, bytes):
                        fh.write(data)
                        if sha256 is not None:
                            digest.update(data)
                    else:
                        while chunk := data.read(COPY_CHUNK):
                            fh.write(chunk)
                            if sha256 is not None:
                                digest.update(chunk)
                    fh.flush()
                    if self.fsync:
                        os.fsync(fh.fileno())
                check_sha256(key, sha256, digest.digest())
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
            finally:
                os.unlink(tmp)
            if self.fsync:
                _fsync_dir(path.parent)
            return True
        except OSError as exc:
            raise Backend(f"object {key!r}: write failed: {exc}") from None

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        path = self._path(key)
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            raise NotFound(f"object {key!r} not found in {self.root}") from None
        except OSError as exc:
            raise Backend(f"object {key!r}: open failed: {exc}") from None
        if start:
            fh.seek(start)
        stream = fh if length is None else io.BufferedReader(_Limited(fh, length))
        return cast(BinaryIO, stream)

    def stat(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            return ObjectInfo(key, path.stat().st_size)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Backend(f"object {key!r}: stat failed: {exc}") from None

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            base = Path(dirpath).relative_to(self.root)
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = (base / name).as_posix() if str(base) != "." else name
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    found.append(key)
        for key in sorted(found):
            info = self.stat(key)
            if info is not None:
                yield info

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise Backend(f"object {key!r}: delete failed: {exc}") from None
