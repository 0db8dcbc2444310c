"""A SparkSession for the connector's jobs: local by default, any master when given.

PySpark 4.3 needs Java 17. When ``JAVA_HOME`` is unset or not a Java 17, the session looks
for one in the usual Debian location before starting the JVM.

The master is checked before the JVM starts (:func:`check_master`, a few seconds at most):
Spark itself retries a ``spark://`` address that is not a master for about a minute (three
registration attempts 20 s apart, fixed in ``StandaloneAppClient``: ``spark.rpc.askTimeout``
and ``spark.rpc.lookupTimeout`` shorten each attempt, not the wait between them) and then
fails with a Java stack trace, where a wrong address deserves one line at once. So a
``spark://`` host must accept a TCP connection and answer one request of Spark's RPC
protocol as a Spark process does (a web UI, a REST port or any other server does not).

Spark's own log lines below ERROR are not shown (:data:`QUIET_LOG4J2`): its startup WARN
lines are about the machine, not the job, and would bury the job's own messages on stderr.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import struct
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
QUIET_LOG4J2 = Path(__file__).with_name("log4j2-quiet.properties")
"""The log4j2 configuration a session's driver starts with (Spark's lines at ERROR and
above, on stderr), unless the caller's configuration names one (:func:`quiet_logs`)."""
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a ``spark://`` master to accept a TCP connection, and again for its
answer to the RPC probe."""


MASTER_FORMS = re.compile(
    r"local(\[(\*|[1-9][0-9]*)(\s*,\s*[0-9]+)?\])?"
    r"|local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*\]"
)
"""Local masters, as Spark's ``SparkMasterRegex`` spells them (not checked further: they
run on this machine)."""
PROBE_ENDPOINT = "aosp-master-probe"
"""The RPC endpoint the probe asks for: no Spark process has one, so a Spark process
answers with a failure naming it (logged by a master as a disassociation, nothing more)."""
RPC_REQUEST, RPC_RESPONSE, RPC_FAILURE = 3, 4, 5
"""Message types of Spark's transport protocol (``org.apache.spark.network.protocol``)."""


def check_master(master: str, timeout: float = CONNECT_TIMEOUT, *, tls: bool = False) -> None:
    """Refuse, before any JVM starts, a master this machine cannot use: ``Validation``
    (field ``master``) for a form Spark does not run, ``Backend`` for a ``spark://`` master
    none of whose hosts accepts a connection and answers Spark's RPC protocol within
    ``timeout`` seconds (only the TCP connection is checked with ``tls``: RPC over TLS is
    not probed), for ``yarn`` without ``HADOOP_CONF_DIR`` or ``YARN_CONF_DIR``, and for a
    ``k8s://`` API server that does not accept a connection."""
    if MASTER_FORMS.fullmatch(master):
        return
    if master.startswith("spark://"):
        _check_standalone(master, timeout, tls)
    elif master == "yarn":
        if not (os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")):
            raise Backend(
                "yarn needs the cluster's configuration: neither HADOOP_CONF_DIR nor "
                "YARN_CONF_DIR is set"
            )
    elif master.startswith("k8s://"):
        server = master.removeprefix("k8s://")
        default_port = 80 if server.startswith("http://") else 443
        host, port = _address(master, server.split("://", 1)[-1], default_port)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as exc:
            raise Backend(f"Kubernetes API server {host}:{port}: {exc.strerror or exc}") from None
    else:
        raise Validation(
            "master",
            f"{master!r} is not a master Spark runs: local, local[N], local[*], "
            "spark://host:port[,host:port...], yarn or k8s://host:port",
        )


def _address(master: str, address: str, default_port: int) -> tuple[str, int]:
    try:
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname, parts.port or default_port
    except ValueError as exc:
        raise Validation("master", f"not host:port in {master!r}: {exc}") from None
    if not host:
        raise Validation("master", f"no host in {master!r}")
    return host, port


def _check_standalone(master: str, timeout: float, tls: bool) -> None:
    failures = []
    for address in master.removeprefix("spark://").split(","):
        host, port = _address(master, address, SPARK_MASTER_PORT)
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                problem = None if tls else _rpc_problem(sock, host, port, timeout)
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or exc}")
            continue
        if problem is None:
            return
        failures.append(f"{host}:{port} {problem}")
    raise Backend(f"Spark master {master} is unreachable ({'; '.join(failures)})")


def _rpc_problem(sock: socket.socket, host: str, port: int, timeout: float) -> str | None:
    """Send one RPC request as Spark's ``NettyRpcEnv`` frames it (to an endpoint no process
    has) and read the reply: ``None`` if it is a Spark reply to it (or cannot be told: the
    server closed without a word, or answered in TLS), else what is wrong."""

    def utf(text: str) -> bytes:  # Java's DataOutput.writeUTF (for text without NUL)
        data = text.encode()
        return struct.pack(">H", len(data)) + data

    request_id = int.from_bytes(os.urandom(7), "big")
    body = (
        b"\x00"  # no sender address (the server uses the connection's)
        + b"\x01" + utf(host) + struct.pack(">i", port)  # the receiver's address
        + utf(PROBE_ENDPOINT)
        # content: a Java-serialized String, with a line end so that a line-based
        # server (HTTP: a web UI, a REST port) answers at once instead of waiting for one
        + b"\xac\xed\x00\x05\x74" + utf("probe\r\n\r\n")
    )  # fmt: skip
    header = struct.pack(">qbqi", 8 + 1 + 8 + 4 + len(body), RPC_REQUEST, request_id, len(body))
    sock.settimeout(timeout)
    reply = b""
    try:
        sock.sendall(header + body)
        while len(reply) < 17 and (chunk := sock.recv(4096)):
            reply += chunk
    except TimeoutError:
        return f"accepts connections but did not answer Spark's RPC protocol within {timeout:g} s"
    except OSError:
        pass  # reset after a partial reply: judged by what came
    if not reply or reply[:1] in (b"\x15", b"\x16"):
        return None  # closed without a word, or a TLS record: Spark will tell
    if (
        len(reply) >= 17
        and reply[8] in (RPC_RESPONSE, RPC_FAILURE)
        and int.from_bytes(reply[9:17], "big") == request_id
    ):
        return None
    return f"is not a Spark master: it answered {reply[:24]!r}"


def _rpc_tls(conf: dict[str, str]) -> bool:
    """Whether ``conf`` turns on TLS for Spark's RPC (``spark.ssl.rpc.*`` inherits
    ``spark.ssl.enabled``)."""
    rpc = conf.get("spark.ssl.rpc.enabled", conf.get("spark.ssl.enabled", "false"))
    return rpc.strip().lower() == "true"


def quiet_logs(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the driver started on :data:`QUIET_LOG4J2` (added to
    ``spark.driver.extraJavaOptions``), unless a log4j2 configuration is already chosen:
    in those options, or by a ``log4j2.properties`` in ``$SPARK_CONF_DIR``. It takes effect
    when the session starts the JVM (the first session of the process)."""
    options = conf.get(DRIVER_JAVA_OPTIONS, "")
    if "log4j2.configurationFile" in options or "log4j.configurationFile" in options:
        return conf
    spark_conf_dir = os.environ.get("SPARK_CONF_DIR")
    if spark_conf_dir and Path(spark_conf_dir, "log4j2.properties").is_file():
        return conf
    quiet = f"-Dlog4j2.configurationFile={QUIET_LOG4J2.as_uri()}"
    return {**conf, DRIVER_JAVA_OPTIONS: f"{quiet} {options}".strip()}


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
    """Get or create a SparkSession (``local[*]`` unless ``master``), with the
    ``aos_segments``, ``aos_journal`` and ``aos_log`` sources registered. Spark logs at ERROR
    and above from its start, unless ``conf`` or ``$SPARK_CONF_DIR`` chooses a log4j2 configuration
    (:func:`quiet_logs`).

    ``py_files`` are shipped to the executors and put on their ``sys.path``: on a cluster
    whose Python environments do not have this package, pass its built wheel (shipped as a
    ``.zip``, which Spark puts on the path; a wheel of pure Python imports from a zip)."""
    if master is not None:
        check_master(master, tls=_rpc_tls(conf))
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
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
    )
    for key, value in quiet_logs(conf).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Py4J and PySpark errors of a JVM that did not start
        first = next((line for line in str(exc).splitlines() if line.strip()), "")
        raise Backend(f"Spark did not start ({type(exc).__name__}): {first.strip()}") from exc
    for path in py_files:
        spark.sparkContext.addPyFile(_as_zip(Path(path)))
    from spark_connectors.journal_source import JournalDataSource
    from spark_connectors.log import LogDataSource
    from spark_connectors.source import SegmentDataSource

    spark.dataSource.register(SegmentDataSource)
    spark.dataSource.register(JournalDataSource)
    spark.dataSource.register(LogDataSource)
    return spark
