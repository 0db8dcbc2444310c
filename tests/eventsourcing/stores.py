"""The stores the eventsourcing test cases run on: a fresh one for every test."""

from __future__ import annotations

import os
import tempfile
from typing import ClassVar, Protocol, TypeVar
from unittest import TestCase, mock

import pytest

from persistence.ids import UniverseId
from persistence.plane import Plane
from segments import open_plane
from tests.fdb_cluster import FdbCluster, clear_keyspace


def open_memory_plane() -> Plane:
    """A plane on a new memory store."""
    return open_plane("memory://", "memory://")


class _Recorder(Protocol):
    def __init__(self, plane: Plane, universe: UniverseId) -> None: ...


R = TypeVar("R", bound=_Recorder)


class Store(TestCase):
    """A test case with a fresh store of ``engine`` (``memory`` or ``sqlite``) per test:
    :meth:`urls` names it, :meth:`open_plane` opens it."""

    engine: ClassVar[str]
    cluster: FdbCluster
    _urls: tuple[str, str] | None = None

    def urls(self) -> tuple[str, str]:
        """The engine and object-store URLs of this test's store."""
        if self._urls is None:
            if self.engine == "fdb":
                self._urls = (self.cluster.url, "memory://")
            elif self.engine == "memory":
                self._urls = ("memory://", "memory://")
            else:
                path = self.enterContext(tempfile.TemporaryDirectory(prefix="aos-es-"))
                self._urls = (f"sqlite://{path}/aos.db", f"file://{path}/objects")
        return self._urls

    def open_plane(self) -> Plane:
        """A plane on this test's store (one per call: memory:// is a new store each time),
        closed after the test."""
        plane = open_plane(*self.urls())
        self.addCleanup(plane.objects.close)
        self.addCleanup(plane.engine.close)
        return plane

    def recorder(self, cls: type[R]) -> R:
        """A recorder of class ``cls`` in a new universe of this test's store."""
        return cls(self.open_plane(), UniverseId.new())

    def environ(self) -> dict[str, str]:
        """The variables that select the module and this test's store."""
        kv_url, objects_url = self.urls()
        return {
            "PERSISTENCE_MODULE": "aos_eventsourcing",
            "AOSP_KV_URL": kv_url,
            "AOSP_OBJECTS_URL": objects_url,
        }

    def set_environ(self) -> None:
        """Put :meth:`environ` in ``os.environ`` for the test (applications read it)."""
        self.enterContext(mock.patch.dict(os.environ, self.environ()))


class Memory(Store):
    """The memory engine (FoundationDB's semantics) and a memory object store."""

    engine = "memory"


class Sqlite(Store):
    """An SQLite file and a local object directory in a temporary directory."""

    engine = "sqlite"


class Fdb(Store):
    """The test session's FoundationDB 7.3 cluster (emptied for each test) and a memory
    object store; skipped, saying why, where the cluster's binaries are absent."""

    engine = "fdb"

    @pytest.fixture(autouse=True)
    def _empty_cluster(self, fdb_cluster: FdbCluster) -> None:
        self.cluster = fdb_cluster
        engine = fdb_cluster.engine()
        clear_keyspace(engine)
        engine.close()
