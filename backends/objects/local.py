"""The local-directory object store (``file:///var/lib/aos/objects``): the embedded default.

Create-only and crash-safe: a body is written to a staging file ``.tmp-*`` in the root
(hashed on the way when asked), fsynced, then published with ``link(2)`` -- which fails if the
name exists, so two writers racing on one key cannot overwrite each other -- and the target
directory is fsynced so the new name survives a power loss. So :meth:`LocalObjectStore.stage`
costs no more than a put: the body is written once, and publishing only adds the link.

A crash leaves at most a staging file, never a partial object under a real key. Its writer
holds an exclusive ``flock`` on it for as long as it lives (the kernel drops it when the
process dies, SIGKILL included), so a leftover is told from a body in use without clocks:
each store removes the staging files that are unlocked and at least
:data:`STAGING_SWEEP_SECONDS` old, at its first staging write and then at most once per that
interval. Arguments are checked as every store checks them
(:func:`~persistence.objects.check_object_key` and the checks of :mod:`backends.objects`),
before the disk is touched, so no key can escape the root.

Opened with ``create=False`` (reading tools) the root must already be a directory: nothing
is created, and a mistyped path is ``NotFound`` rather than a new, empty store. Every
operating-system error is typed: ``Backend`` naming the path (``NotFound`` for an object
that is absent).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final, cast

from backends import check_path, split_url, url_flag, url_options, url_path
from backends.objects.checks import check_body, check_listing, check_put, check_window, read_bytes
from persistence.errors import Backend, NotFound, OddObject, Validation
from persistence.objects import (
    COPY_CHUNK,
    ObjectInfo,
    ObjectStore,
    ReadStream,
    StagedBody,
    check_object_key,
    check_sha256,
)
from persistence.sizes import check_bool

_TMP_PREFIX = ".tmp-"
STAGING_SWEEP_SECONDS: Final = 60.0
"""Staging files younger than this are never removed as leftovers (a writer locks its file
right after creating it), and each store looks for leftovers at most this often."""


class _Limited(ReadStream):
    """At most ``remaining`` bytes of an open file (a ranged read)."""

    def __init__(self, fh: BinaryIO, remaining: int) -> None:
        self._fh = fh
        self._remaining = remaining

    def _read(self, n: int) -> bytes:
        n = min(n, self._remaining)
        if n <= 0:
            return b""
        data = self._fh.read(n)
        self._remaining -= len(data)
        return data

    def _release(self) -> None:
        self._fh.close()


def fsync_dir(path: Path) -> None:
    """fsync a directory (so a file created, linked or renamed in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _os_errors(what: str) -> Iterator[None]:
    """Raise an ``OSError`` (or a symlink loop, which ``Path.resolve`` raises as
    ``RuntimeError``) of the block as ``Backend`` naming ``what``."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        raise Backend(f"{what}: {exc}") from None


def parse_file_url(url: str) -> tuple[str, bool]:
    """The directory and ``fsync`` of a ``file:///dir[?fsync=0|1]`` URL, checked
    (``Validation`` naming ``objects url``) before the directory is looked at."""
    parts = split_url(url, "objects url")
    if parts.scheme != "file":
        raise Validation("objects url", f"not a file URL: {url!r}")
    options = url_options(parts, "objects url", {"fsync"})
    fsync = url_flag(options, "fsync", True, "objects url")
    path = url_path(parts, "objects url")
    if not path:
        raise Validation("objects url", f"file URL needs a directory: {url!r}")
    return path, fsync


class LocalObjectStore(ObjectStore):
    late_delete_seconds = 0.0
    """Objects as files under ``root`` (created if missing, unless ``create`` is false)."""

    def __init__(
        self, root: str | os.PathLike[str], *, fsync: bool = True, create: bool = True
    ) -> None:
        text = check_path(root, "root")
        check_bool(fsync, "fsync")
        check_bool(create, "create")
        with _os_errors(f"object store root {text}"):
            self.root = Path(text).resolve()
            if self.root.exists() and not self.root.is_dir():
                raise Backend(f"object store root {self.root} is not a directory")
            if create:
                self.root.mkdir(parents=True, exist_ok=True)
            elif not self.root.exists():
                raise NotFound(f"no object store at {self.root}: the directory does not exist")
        self.fsync = fsync
        self.url = f"file://{self.root}"
        self._next_sweep = float("-inf")

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> LocalObjectStore:
        """The store a ``file:///dir[?fsync=0|1]`` URL names (see :func:`parse_file_url`)."""
        root, fsync = parse_file_url(url)
        return cls(root, fsync=fsync, create=create)

    def _path(self, key: str) -> Path:
        """The file of ``key`` (already checked), which must lie under the root."""
        if key.rpartition("/")[2].startswith(_TMP_PREFIX):
            # listings skip such names as a crash's leftovers: the object would be invisible
            raise Validation("object key", f"a name starting {_TMP_PREFIX!r} is reserved: {key!r}")
        try:
            path = (self.root / key).resolve()
        except RuntimeError:  # Path.resolve's word for a symlink loop
            raise OddObject(key, "a symlink loop") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OddObject(key, "a symlink loop") from None
            raise Backend(f"object {key!r}: {exc}") from None
        if self.root not in path.parents:  # a symlink under the root points out of it
            raise OddObject(key, f"resolves outside {self.root}")
        return path

    def put(self, key: str, data: bytes | BinaryIO, *, sha256: bytes | None = None) -> bool:
        path = self._path(check_put(key, data, sha256))
        with _os_errors(f"object {key!r}"):
            if path.is_file():
                return False
        with self._write(data, hashlib.sha256() if sha256 is not None else None) as staged:
            check_sha256(key, sha256, staged.sha256)
            return staged.link(key, path)

    def stage(self, data: bytes | BinaryIO, *, known_sha256: bytes | None = None) -> StagedBody:
        check_body(data, known_sha256, "known_sha256")
        staged = self._write(data, None if known_sha256 is not None else hashlib.sha256())
        if known_sha256 is not None:
            staged.sha256 = known_sha256
        return staged

    def _write(self, data: bytes | BinaryIO, digest: hashlib._Hash | None) -> _Staged:
        """Write ``data`` to a new staging file (locked), hashing it into ``digest`` (without
        one, ``sha256`` is left empty)."""
        self._sweep_staging()
        with _os_errors(f"staging a body in {self.root}"):
            fd, name = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=self.root)
        staged = _Staged(self, fd, Path(name))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with open(fd, "wb", closefd=False) as fh:
                for chunk in (data,) if isinstance(data, bytes) else _chunks(data):
                    fh.write(chunk)
                    staged.size += len(chunk)
                    if digest is not None:
                        digest.update(chunk)
        except BaseException as exc:
            staged.discard()
            if isinstance(exc, OSError):
                raise Backend(f"staging a body in {self.root}: write failed: {exc}") from None
            raise
        if digest is not None:
            staged.sha256 = digest.digest()
        return staged

    def _sweep_staging(self) -> None:
        """Remove the staging files that killed writers left (see the module docstring)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + STAGING_SWEEP_SECONDS
        with _os_errors(f"sweeping staging files in {self.root}"):
            for entry in os.scandir(self.root):
                if entry.name.startswith(_TMP_PREFIX) and entry.is_file(follow_symlinks=False):
                    _remove_if_left(Path(entry.path))

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        path = self._path(check_object_key(key))
        check_window(start, length)
        try:
            # Without blocking: opening a FIFO for reading waits for a writer (for ever);
            # only a regular file is an object.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            # absent; or a file (a directory) is where a directory (the object) would be
            raise NotFound(f"object {key!r} not found in {self.root}") from None
        except OSError as exc:
            raise Backend(f"object {key!r}: open failed: {exc}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise NotFound(f"object {key!r} not found in {self.root}")
            raise OddObject(key, f"{path} is not a regular file (mode {mode:#o})")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
        if start:
            fh.seek(start)
        stream = fh if length is None else io.BufferedReader(_Limited(fh, length))
        return cast(BinaryIO, stream)

    def stat(self, key: str) -> ObjectInfo | None:
        return self._stat(key, self._path(check_object_key(key)))

    def _stat(self, key: str, path: Path) -> ObjectInfo | None:
        """``ObjectInfo`` of the file at ``path``, ``None`` if absent or a directory."""
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OddObject(key, "a symlink loop") from None
            raise Backend(f"object {key!r}: stat failed: {exc}") from None
        return ObjectInfo(key, st.st_size) if stat.S_ISREG(st.st_mode) else None

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        check_listing(prefix, start_after)  # at the call: the listing itself is lazy
        return self._list(prefix, start_after)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        def fail(exc: OSError) -> None:  # os.walk would skip an unreadable directory silently
            raise Backend(f"listing {self.root}: {exc}")

        found = []
        for dirpath, dirnames, filenames in os.walk(self.root, onerror=fail):
            base = Path(dirpath).relative_to(self.root).as_posix()
            base = "" if base == "." else f"{base}/"
            # descend only into directories that can hold keys with the prefix
            dirnames[:] = [d for d in dirnames if _may_hold(f"{base}{d}/", prefix)]
            for name in filenames:
                key = base + name
                if not key.startswith(prefix) or (start_after is not None and key <= start_after):
                    continue
                if name.startswith(_TMP_PREFIX) or not _is_key(key):
                    continue  # a crash's leftover, or a file another tool put here
                found.append(key)
        for key in sorted(found):  # code-point order, which is UTF-8 byte order, as on S3
            info = self._stat(key, self.root / key)
            if info is not None:
                yield info

    def delete(self, key: str) -> None:
        path = self._path(check_object_key(key))
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return  # absent, or a prefix of other keys rather than an object: nothing to delete
        except OSError as exc:
            raise Backend(f"object {key!r}: delete failed: {exc}") from None


class _Staged(StagedBody):
    """A staging file, locked through ``fd`` until discarded; fsynced when first published
    (a body found present already costs no fsync)."""

    def __init__(self, store: LocalObjectStore, fd: int, path: Path) -> None:
        super().__init__(b"", 0)
        self._store = store
        self._fd: int | None = fd
        self._synced = not store.fsync
        self.path = path

    def publish(self, key: str) -> bool:
        return self.link(key, self._store._path(check_object_key(key)))

    def link(self, key: str, path: Path) -> bool:
        """Link the staging file to ``path``, the file of ``key``, unless it exists."""
        if self._fd is None:
            raise Backend(f"object {key!r}: its staged body was discarded")
        try:
            if not self._synced:
                os.fsync(self._fd)
                self._synced = True
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(self.path, path)
            except FileExistsError:
                if path.is_dir():
                    raise Backend(
                        f"object {key!r}: {path} is a directory (keys under {key!r}/ exist)"
                    ) from None
                return False
            if self._store.fsync:
                fsync_dir(path.parent)
            return True
        except OSError as exc:
            raise Backend(f"object {key!r}: write failed: {exc}") from None

    def discard(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # else unlocked once closed: a sweep removes it
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := read_bytes(stream, COPY_CHUNK):
        yield chunk


def _remove_if_left(path: Path) -> None:
    """Remove the staging file ``path`` if no writer holds it and it is old enough."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return  # gone meanwhile (published and discarded), or not ours to open
    try:
        if time.time() - os.fstat(fd).st_mtime < STAGING_SWEEP_SECONDS:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a live writer's
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _may_hold(directory: str, prefix: str) -> bool:
    """Whether keys under ``directory`` (``a/b/``) can start with ``prefix``."""
    return directory.startswith(prefix[: len(directory)])


def _is_key(name: str) -> bool:
    """Whether a file's name under the root is a key this store could have written."""
    try:
        check_object_key(name)
    except Validation:
        return False
    return True
