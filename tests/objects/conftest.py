"""Session-scoped S3 servers for the object-store tests (see :mod:`tests.objects.servers`).

Each server starts once per session, the first time a test asks for it, and is skipped
(with the reason) only when the environment cannot run it at all: a server that is there
but fails to start is an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.objects.servers import S3Server, ServerUnavailable, moto_server, seaweedfs_server


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[S3Server]:
    """moto's S3 on 127.0.0.1, served from a thread of this process."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(moto_server())
        except ServerUnavailable as exc:
            pytest.skip(f"moto S3 server unavailable: {exc}")
        yield server


@pytest.fixture(scope="session")
def seaweedfs_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS server (master, volume, filer, S3 gateway) on 127.0.0.1."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(seaweedfs_server(tmp_path_factory.mktemp("seaweedfs")))
        except ServerUnavailable as exc:
            pytest.skip(f"SeaweedFS server unavailable: {exc}")
        yield server
