"""The FoundationDB engine: a thin adapter over the official Python bindings.

Install with ``pip install 'aos-persistence[fdb]'`` (PyPI package ``foundationdb``, imported
as ``fdb``; the PyPI package named ``fdb`` is an unrelated Firebird driver). The bindings
load ``libfdb_c`` from the FoundationDB client package, whose version must match the
cluster's (8.0 bindings refuse a 7.x client library).

The adapter does almost nothing of its own, on purpose. What it must get right:

* ``tr[key]`` / ``tr.get`` return a lazy ``Value``: presence is tested with ``.present()``.
* Ranges are lazy and die with the transaction: every range is materialised here, inside
  the transaction, into a list of ``(bytes, bytes)``.
* ``get_versionstamp()`` is requested before commit and resolved after it; the result is
  converted with ``bytes()``.
* ``fdb.FDBError`` becomes :class:`~persistence.errors.EngineError` with the same code, so
  the retry runner of :mod:`persistence.kv` (the same table as ``on_error``) applies.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final, TypeVar

from persistence import kv
from persistence.errors import EngineError, MissingDependency

DEFAULT_API_VERSION: Final = 730

T = TypeVar("T")

_fdb: Any = None


def load_bindings(api_version: int) -> Any:
    """Import ``fdb`` and select ``api_version``, or explain what to install."""
    global _fdb
    if _fdb is not None:
        selected = _fdb.get_api_version()
        if selected != api_version:
            raise MissingDependency(
                f"FoundationDB API version {selected} is already selected in this process; "
                f"cannot also use {api_version}"
            )
        return _fdb
    try:
        import fdb
    except ImportError:
        raise MissingDependency(
            "the FoundationDB engine needs the official bindings: "
            "pip install 'aos-persistence[fdb]' (PyPI package 'foundationdb', not 'fdb')"
        ) from None
    if fdb.is_api_version_selected() and fdb.get_api_version() != api_version:
        raise MissingDependency(
            f"FoundationDB API version {fdb.get_api_version()} was already selected by this "
            f"process (the host application?); cannot also use {api_version}"
        )
    try:
        if not fdb.is_api_version_selected():
            fdb.api_version(api_version)
    except Exception as exc:  # RuntimeError/OSError when libfdb_c cannot be loaded
        raise MissingDependency(
            f"the FoundationDB client library (libfdb_c) could not be loaded for API version "
            f"{api_version}: {exc}. Install the foundationdb-clients package matching your "
            "cluster's version."
        ) from None
    _fdb = fdb
    return fdb


def _translate(fdb: Any, call: Callable[[], T]) -> T:
    try:
        return call()
    except fdb.FDBError as exc:
        raise EngineError(int(exc.code), str(exc.description)) from None


class _Future(kv.VersionstampFuture):
    def __init__(self, fdb: Any, future: Any) -> None:
        self._fdb = fdb
        self._future = future

    def wait(self) -> bytes:
        return _translate(self._fdb, lambda: bytes(self._future.wait()))


class FdbTransaction(kv.Transaction):
    """Delegates to an ``fdb.Transaction``."""

    def __init__(self, fdb: Any, tr: Any) -> None:
        self._fdb = fdb
        self._tr = tr

    def _reader(self, snapshot: bool) -> Any:
        return self._tr.snapshot if snapshot else self._tr

    def get(self, key: bytes, *, snapshot: bool = False) -> bytes | None:
        def read() -> bytes | None:
            value = self._reader(snapshot).get(key)
            return bytes(value) if value.present() else None

        return _translate(self._fdb, read)

    def get_range(
        self,
        begin: bytes,
        end: bytes,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        def read() -> list[tuple[bytes, bytes]]:
            # Everything is materialised anyway: ask for it all in as few round trips as
            # the cluster allows instead of the iterator mode's small first batches.
            rows = self._reader(snapshot).get_range(
                begin,
                end,
                limit=limit,
                reverse=reverse,
                streaming_mode=self._fdb.StreamingMode.want_all,
            )
            return [(bytes(kv_.key), bytes(kv_.value)) for kv_ in rows]

        return _translate(self._fdb, read)

    def set(self, key: bytes, value: bytes) -> None:
        kv.check_key(key)
        kv.check_value(value)
        _translate(self._fdb, lambda: self._tr.set(key, value))

    def clear(self, key: bytes) -> None:
        _translate(self._fdb, lambda: self._tr.clear(key))

    def clear_range(self, begin: bytes, end: bytes) -> None:
        _translate(self._fdb, lambda: self._tr.clear_range(begin, end))

    def add(self, key: bytes, param: bytes) -> None:
        _translate(self._fdb, lambda: self._tr.add(key, param))

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        _translate(self._fdb, lambda: self._tr.set_versionstamped_key(key, value))

    def set_versionstamped_value(self, key: bytes, value: bytes) -> None:
        _translate(self._fdb, lambda: self._tr.set_versionstamped_value(key, value))

    def get_versionstamp(self) -> kv.VersionstampFuture:
        return _Future(self._fdb, _translate(self._fdb, self._tr.get_versionstamp))

    def add_read_conflict_range(self, begin: bytes, end: bytes) -> None:
        _translate(self._fdb, lambda: self._tr.add_read_conflict_range(begin, end))

    def get_read_version(self) -> int:
        return _translate(self._fdb, lambda: int(self._tr.get_read_version().wait()))

    def commit(self) -> None:
        _translate(self._fdb, lambda: self._tr.commit().wait())


class FdbEngine(kv.Engine):
    """A FoundationDB cluster, named by its cluster file."""

    def __init__(
        self, cluster_file: str | None = None, *, api_version: int = DEFAULT_API_VERSION
    ) -> None:
        self.cluster_file = cluster_file or os.environ.get("FDB_CLUSTER_FILE") or None
        self.url = f"fdb://{self.cluster_file or ''}"
        self._fdb = load_bindings(api_version)
        self._db = _translate(self._fdb, lambda: self._fdb.open(self.cluster_file))

    def create_transaction(self) -> FdbTransaction:
        return FdbTransaction(self._fdb, self._db.create_transaction())
