"""A SparkSession for the connector's jobs: local by default, any master when given.

PySpark 4.3 needs Java 17. When ``JAVA_HOME`` is unset or not a Java 17, the session looks
for one in the usual Debian location before starting the JVM.

A ``spark://`` master is checked with a TCP connect (a few seconds at most) before the JVM
starts: Spark itself retries an unreachable master for about a minute and then fails with a
Java stack trace, where a dead address deserves one line at once.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from persistence.errors import Backend, MissingDependency, NotFound, Validation

JAVA_17_GLOB = "/usr/lib/jvm/java-17-openjdk*"
SPARK_MASTER_PORT = 7077
"""A standalone master's port when a ``spark://`` URL names none."""
CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a ``spark://`` master to accept a TCP connection."""


def check_master_reachable(master: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """For a standalone ``spark://host:port[,host:port...]`` master, ``Backend`` unless
    one of its hosts accepts a TCP connection within ``timeout`` seconds (other masters --
    ``local[*]``, ``yarn``, ``k8s://`` -- are left to Spark)."""
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):
        try:
            parts = urlsplit(f"//{address}")
            host, port = parts.hostname, parts.port or SPARK_MASTER_PORT
        except ValueError as exc:
            raise Validation("master", f"not spark://host:port: {master!r}: {exc}") from None
        if not host:
            raise Validation("master", f"no host in {master!r}")
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or exc}")
    raise Backend(f"Spark master {master} is unreachable ({'; '.join(failures)})")


def _java_17() -> str | None:
    current = os.environ.get("JAVA_HOME", "")
    if "17" in os.path.basename(current.rstrip("/")) and os.path.isdir(current):
        return current
    found = sorted(glob.glob(JAVA_17_GLOB))
    return found[0] if found else (current or None)


def _as_zip(path: Path) -> str:
    """``path``, or for a wheel a ``.zip`` copy of it (Spark adds only ``.zip``, ``.egg`` and
    ``.py`` files to the executors' ``sys.path``)."""
    if not path.is_file():
        raise NotFound(f"py file {path} does not exist")
    if path.suffix != ".whl":
        return str(path)
    copy = Path(tempfile.mkdtemp(prefix="aosp-pyfiles-")) / (path.stem + ".zip")
    shutil.copyfile(path, copy)
    return str(copy)


def spark_session(
    master: str | None = None,
    app_name: str = "aosp",
    *,
    py_files: Sequence[str | os.PathLike[str]] = (),
    **conf: str,
) -> Any:
    """Get or create a SparkSession (``local[*]`` unless ``master``), with Python filter
    push-down on and the ``aos_segments`` source registered.

    ``py_files`` are shipped to the executors and put on their ``sys.path``: on a cluster
    whose Python environments do not have this package, pass its built wheel (shipped as a
    ``.zip``, which Spark puts on the path; a wheel of pure Python imports from a zip)."""
    if master is not None:
        check_master_reachable(master)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingDependency(
            "pyspark is not installed: pip install 'aos-persistence[spark]'"
        ) from None
    java_home = _java_17()
    if java_home:
        os.environ["JAVA_HOME"] = java_home
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or "local[*]")
        .appName(app_name)
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for path in py_files:
        spark.sparkContext.addPyFile(_as_zip(Path(path)))
    from spark_connectors.source import SegmentDataSource

    spark.dataSource.register(SegmentDataSource)
    return spark
