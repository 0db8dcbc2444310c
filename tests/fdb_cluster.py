"""A real FoundationDB 7.3 cluster for the tests, started by them.

``../shared/fdb/fdb-local`` (next to the checkout) carries fdbserver, fdbcli and
``libfdb_c.so`` 7.3.79; the session starts one cluster on loopback and stops it at the end.
Tests that need it skip only when those binaries are absent (a developer machine without
them), saying so.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from backends.kv.fdb import FdbEngine, FdbOptions
from conformance.torture.servers import running
from persistence import kv

ROOT: Final = Path(__file__).resolve().parents[1]
FDB_LOCAL: Final = ROOT.parent / "shared" / "fdb" / "fdb-local"
SKIP_REASON: Final = (
    f"FoundationDB 7.3 binaries not found at {FDB_LOCAL} (a machine without ../shared/fdb)"
)


@dataclass(frozen=True)
class FdbCluster:
    """A running cluster: its directory, cluster file and the client library to load."""

    directory: Path
    cluster_file: Path
    client_library: Path
    processes: int

    @property
    def url(self) -> str:
        """The engine URL (workers in other processes load the same client library)."""
        return f"fdb://{self.cluster_file}?client_library={self.client_library}"

    def engine(self, **options: int) -> FdbEngine:
        """An engine on this cluster."""
        return FdbEngine(
            str(self.cluster_file), FdbOptions(client_library=str(self.client_library), **options)
        )

    def pids(self) -> list[int]:
        """The fdbserver processes, the coordinator first."""
        out = _fdb_local("pids", self.directory)
        return [int(line) for line in out.split()]


class FdbLocalError(RuntimeError):
    """``fdb-local`` exited with an error."""


FDB_LOCAL_SECONDS: Final = 120
"""How long one ``fdb-local`` command may take (a start whose database never becomes
available would poll for up to six minutes)."""


def _fdb_local(*args: object) -> str:
    try:
        done = subprocess.run(
            [str(FDB_LOCAL), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=FDB_LOCAL_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise FdbLocalError(f"fdb-local {args[0]} took over {FDB_LOCAL_SECONDS} s") from None
    if done.returncode != 0:
        raise FdbLocalError(f"fdb-local {args[0]} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _listening_port(processes: int) -> int:
    """A first port for ``processes`` servers below the kernel's ephemeral range. fdb-local's
    default (20000-39999) reaches into it, and a server killed and restarted by the
    server-kill torture could find its port taken meanwhile as the source port of one of the
    many client connections, and die at once."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    return random.randrange(20000, max(20001, ephemeral - processes))


START_ATTEMPTS: Final = 3


def start_cluster(directory: Path, processes: int = 1) -> FdbCluster:
    """Start a cluster of ``processes`` fdbserver processes under ``directory``. The port is
    picked before the servers bind it, so another program (another test session's cluster)
    may take it meanwhile: a server then exits at once, while the database may still become
    available on the others. Such a start is stopped and tried again afresh on another port."""
    library = Path(_fdb_local("bin")) / "lib" / "libfdb_c.so"
    dead: list[int] = []
    failure = ""
    for attempt in range(START_ATTEMPTS):
        home = directory / f"attempt-{attempt}"
        try:
            cluster_file = Path(_fdb_local("start", home, _listening_port(processes), processes))
        except FdbLocalError as exc:  # never available (a port taken): made again
            failure = str(exc)
            _fdb_local("stop", home)
            continue
        cluster = FdbCluster(home, cluster_file, library, processes)
        dead = [pid for pid in cluster.pids() if not running(pid)]
        if not dead:
            return cluster
        failure = f"fdbserver pids {dead} under {home} exited at start"
        _fdb_local("stop", home)
    raise FdbLocalError(f"no cluster after {START_ATTEMPTS} starts; the last: {failure}")


def stop_cluster(cluster: FdbCluster) -> None:
    """Stop every process of ``cluster``."""
    _fdb_local("stop", cluster.directory)


def clear_keyspace(engine: kv.Engine) -> None:
    """Delete every key outside the system keyspace."""
    kv.run_sync(engine, lambda tr: tr.clear_range(b"", b"\xff"))


@pytest.fixture(scope="session")
def fdb_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FdbCluster]:
    """One single-process FoundationDB 7.3.79 cluster on loopback for the whole session."""
    if not os.access(FDB_LOCAL, os.X_OK):
        pytest.skip(SKIP_REASON)
    cluster = start_cluster(tmp_path_factory.mktemp("fdb"))
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
