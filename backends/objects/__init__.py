"""Object stores, opened by URL.

================================  =====================================================
URL                               store
================================  =====================================================
``memory://``                     :class:`~backends.objects.memory.MemoryObjectStore`
``file:///var/lib/aos/objects``   :class:`~backends.objects.local.LocalObjectStore`
                                  (query: ``fsync=0`` to skip fsync, for tests only)
``s3://bucket/prefix``            :class:`~backends.objects.s3.S3ObjectStore`: keys
                                  under ``prefix/`` in ``bucket`` (the prefix may be
                                  empty); query: ``endpoint_url=``, ``region=``,
                                  ``multipart=0`` (one PutObject per object: for
                                  servers such as SeaweedFS whose conditional
                                  CompleteMultipartUpload is not atomic)
================================  =====================================================

An S3-compatible server is named by its endpoint, for example::

    s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000&region=us-east-1
    s3://bucket/prefix?endpoint_url=http://127.0.0.1:8333&region=us-east-1&multipart=0

Whatever the URL leaves out (endpoint, region, and always the credentials) comes from the
standard boto3 chain: ``AWS_*`` environment variables, ``~/.aws`` config files, instance
roles.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from persistence.errors import Validation
from persistence.objects import ObjectStore


def open_object_store(url: str, *, credentials: Mapping[str, str] | None = None) -> ObjectStore:
    """Open the object store named by ``url``. ``credentials`` (``aws_access_key_id``,
    ``aws_secret_access_key``, ``aws_session_token``) apply to ``s3://`` only and take
    precedence over the boto3 chain."""
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "memory":
        from backends.objects.memory import MemoryObjectStore

        return MemoryObjectStore()
    if parts.scheme == "file":
        from backends.objects.local import LocalObjectStore

        path = unquote(parts.netloc + parts.path)
        if not path:
            raise Validation("objects url", f"file URL needs a directory: {url!r}")
        unknown = set(options) - {"fsync"}
        if unknown:
            raise Validation("objects url", f"unknown option(s) {sorted(unknown)}")
        return LocalObjectStore(path, fsync=options.get("fsync", "1") != "0")
    if parts.scheme == "s3":
        from backends.objects.s3 import S3ObjectStore

        if not parts.netloc:
            raise Validation("objects url", f"s3 URL needs a bucket: {url!r}")
        unknown = set(options) - {"endpoint_url", "region", "multipart"}
        if unknown:
            raise Validation("objects url", f"unknown option(s) {sorted(unknown)}")
        return S3ObjectStore(
            unquote(parts.netloc),
            unquote(parts.path).strip("/"),
            endpoint_url=options.get("endpoint_url"),
            region=options.get("region"),
            multipart=options.get("multipart", "1") != "0",
            credentials=credentials,
        )
    raise Validation("objects url", f"unknown object store scheme {parts.scheme!r} in {url!r}")
