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
from typing import BinaryIO
from urllib.parse import parse_qs, unquote, urlsplit

from persistence.errors import NotFound, Validation
from persistence.objects import ObjectStore, check_object_key
from persistence.sizes import check_int


def check_put(key: object, data: object, sha256: object, prefix: str = "") -> str:
    """Check the arguments of :meth:`ObjectStore.put` before anything is read or sent."""
    text = check_object_key(key, prefix)
    check_body(data, sha256, "sha256")
    return text


def check_body(data: object, sha256: object, field: str) -> None:
    """Check a body (bytes or a binary stream) and its digest argument ``field`` (``None`` or
    32 bytes), as :meth:`ObjectStore.put` and :meth:`ObjectStore.stage` take them."""
    if not isinstance(data, bytes) and not callable(getattr(data, "read", None)):
        raise Validation("data", f"expected bytes or a binary stream, got {type(data).__name__}")
    if sha256 is not None and (type(sha256) is not bytes or len(sha256) != 32):
        raise Validation(field, f"a sha256 is 32 bytes, got {sha256!r:.80}")


def read_bytes(stream: BinaryIO, n: int = -1) -> bytes:
    """``stream.read(n)``, refusing a stream that yields anything but bytes (a text stream)."""
    chunk = stream.read(n)
    if type(chunk) is not bytes:
        raise Validation("data", f"the stream's read returned {type(chunk).__name__}, not bytes")
    return chunk


def check_window(start: object, length: object) -> None:
    """Check the ``start`` and ``length`` of :meth:`ObjectStore.open`."""
    check_int(start, "start", 0, 2**63 - 1)
    if length is not None:
        check_int(length, "length", 0, 2**63 - 1)


def check_listing(prefix: object, start_after: object) -> None:
    """Check the arguments of :meth:`ObjectStore.list` (at the call, not at the first key)."""
    for value, field in ((prefix, "prefix"), (start_after, "start_after")):
        if value is None and field == "start_after":
            continue
        if not isinstance(value, str):
            raise Validation(field, f"expected text, got {type(value).__name__}")
        try:
            value.encode()
        except UnicodeEncodeError:
            raise Validation(field, "not UTF-8 (a lone surrogate)") from None


def open_object_store(
    url: str, *, credentials: Mapping[str, str] | None = None, create: bool = True
) -> ObjectStore:
    """Open the object store named by ``url``. ``credentials`` (``aws_access_key_id``,
    ``aws_secret_access_key``, ``aws_session_token``) apply to ``s3://`` only and take
    precedence over the boto3 chain.

    Without ``create`` only an existing store opens and nothing is created: a missing
    ``file://`` directory is ``NotFound``, and so is ``memory://`` (it always names a new,
    empty store). ``s3://`` never creates a bucket either way."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        from backends.objects.memory import MemoryObjectStore

        if not create:
            raise NotFound(f"{url!r} names a new, empty store: there is no existing one to open")
        return MemoryObjectStore()
    if parts.scheme == "file":
        from backends.objects.local import LocalObjectStore

        return LocalObjectStore.from_url(url, create=create)
    if parts.scheme == "s3":
        from backends.objects.s3 import S3ObjectStore

        if not parts.netloc:
            raise Validation("objects url", f"s3 URL needs a bucket: {url!r}")
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
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
