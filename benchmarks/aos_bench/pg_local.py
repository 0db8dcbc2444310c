"""A PostgreSQL server of its own, on loopback, for the comparisons with
``eventsourcing.postgres``: the distribution's binaries (Debian's ``postgresql`` package),
a new cluster in a temporary directory, started with durable commits (``fsync=on``,
``synchronous_commit=on``, the defaults, checked once it is up) and stopped afterwards.

PostgreSQL refuses to run as root: as root, the cluster's directory is given to the
``postgres`` user (created by the package) and every server command runs as that user."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from persistence.errors import MissingDependency

USER: Final = "aosp"
"""The database user (and database) the cluster is created with (trust authentication on
loopback: the server listens on 127.0.0.1 only)."""
SETTINGS: Final = {"fsync": "on", "synchronous_commit": "on", "max_connections": "200"}


def binaries() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest installed major version), or
    ``None`` where PostgreSQL's server is not installed."""
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return versions[0].parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    """A running server: how to reach it, and its version."""

    port: int
    version: str
    home: Path
    """The cluster's directory (removed when the server stops)."""

    def environ(self) -> dict[str, str]:
        """The variables that make ``eventsourcing.postgres`` use this server."""
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": USER,
            "POSTGRES_HOST": "127.0.0.1",
            "POSTGRES_PORT": str(self.port),
            "POSTGRES_USER": USER,
            "POSTGRES_PASSWORD": "unused",
        }

    def settings(self) -> dict[str, str]:
        """The server's durability settings, as it reports them."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname=USER) as conn:
            return {
                name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in ("fsync", "synchronous_commit", "wal_sync_method", "server_version")
            }


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        what = next((Path(part).name for part in command if "/" in part), command[0])
        said = (done.stderr or done.stdout).strip()[-1500:]
        raise RuntimeError(f"{what} failed ({done.returncode}): {said}")


@contextmanager
def running(root: Path | None = None) -> Iterator[Server]:
    """A new cluster in a new directory under ``root`` (the system's temporary directory by
    default: as root, the ``postgres`` user must be able to reach it), started on a free
    loopback port, stopped and removed on exit. ``MissingDependency`` without the server's
    binaries or, as root, without the ``postgres`` user; ``RuntimeError`` with the
    server's own words if it does not start."""
    bindir = binaries()
    if bindir is None:
        raise MissingDependency(
            "PostgreSQL's server is not installed (initdb, pg_ctl): apt-get install postgresql"
        )
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise MissingDependency(
                "running as root, PostgreSQL needs the postgres user (Debian's package)"
            ) from None
    with tempfile.TemporaryDirectory(prefix="aosp-pg-", dir=root) as name:
        home = Path(name)
        data, log = home / "data", home / "server.log"
        if owner is not None:
            os.chown(home, owner.pw_uid, owner.pw_gid)
        as_owner = ["runuser", "-u", "postgres", "--"] if owner is not None else []
        _run([*as_owner, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER])
        port = _free_port()
        options = " ".join(
            [f"-p {port}", f"-k {home}", "-c listen_addresses=127.0.0.1"]
            + [f"-c {key}={value}" for key, value in SETTINGS.items()]
        )
        ctl = [*as_owner, str(bindir / "pg_ctl"), "-D", str(data)]
        try:
            _run([*ctl, "-l", str(log), "-o", options, "-w", "start"])
        except RuntimeError as exc:
            tail = log.read_text()[-1500:] if log.exists() else ""
            raise RuntimeError(f"{exc}\n{tail}") from None
        try:
            import psycopg

            with psycopg.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres") as conn:
                conn.autocommit = True
                conn.execute(f"CREATE DATABASE {USER}")
                version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            yield Server(port, version, home)
        finally:
            subprocess.run([*ctl, "-m", "fast", "-w", "stop"], check=False, capture_output=True)
