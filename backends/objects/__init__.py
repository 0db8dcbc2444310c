"""Object stores, opened by URL.

================================  =====================================================
URL                               store
================================  =====================================================
``memory://``                     :class:`~backends.objects.memory.MemoryObjectStore`
``file:///var/lib/aos/objects``   :class:`~backends.objects.local.LocalObjectStore`
                                  (query: ``fsync=0`` to skip fsync, for tests only;
                                  ``fsync=1``, the default)
``s3://bucket/prefix``            :class:`~backends.objects.s3.S3ObjectStore`: keys
                                  under ``prefix/`` in ``bucket`` (the prefix may be
                                  empty); query: ``endpoint_url=`` (``http[s]://``),
                                  ``region=`` (a host label), ``multipart=0|1`` (``0``:
                                  one PutObject per object: for
                                  servers such as SeaweedFS whose conditional
                                  CompleteMultipartUpload is not atomic)
================================  =====================================================

An S3-compatible server is named by its endpoint, for example::

    s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000&region=us-east-1
    s3://bucket/prefix?endpoint_url=http://127.0.0.1:8333&region=us-east-1&multipart=0

Whatever the URL leaves out (endpoint, region, and always the credentials) comes from the
standard boto3 chain: ``AWS_*`` environment variables, ``~/.aws`` config files, instance
roles. A URL is checked whole before anything is opened (:func:`object_store_opener`): a
malformed one is ``Validation`` naming ``objects url`` and the option.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final
from urllib.parse import SplitResult, unquote

from backends import Schemes, in_memory, split_url, url_flag, url_options
from persistence.errors import Validation
from persistence.objects import ObjectStore
from persistence.sizes import check_bool

Credentials = Mapping[str, str] | None
StoreMaker = Callable[[SplitResult, str, bool, Credentials], Callable[[], ObjectStore]]
"""A scheme's maker: the URL's parts, the URL, ``create``, the credentials; the call that
opens it."""
SCHEMES: Final[Schemes[StoreMaker]] = Schemes("objects url", "object store")
"""The object store schemes."""


def open_object_store(
    url: str, *, credentials: Mapping[str, str] | None = None, create: bool = True
) -> ObjectStore:
    """Open the object store named by ``url``. ``credentials`` (``aws_access_key_id``,
    ``aws_secret_access_key``, ``aws_session_token``) apply to ``s3://`` only and take
    precedence over the boto3 chain.

    Without ``create`` only an existing store opens and nothing is created: a missing
    ``file://`` directory is ``NotFound``, and so is ``memory://`` (it always names a new,
    empty store). ``s3://`` never creates a bucket either way."""
    return object_store_opener(url, credentials=credentials, create=create)()


def object_store_opener(
    url: str, *, credentials: Mapping[str, str] | None = None, create: bool = True
) -> Callable[[], ObjectStore]:
    """Check ``url`` and return the call that opens its store. Every mistake in the URL is
    ``Validation`` naming ``objects url`` and the option, raised here: before anything is
    opened or created."""
    parts = split_url(url, "objects url")
    check_bool(create, "create")
    if credentials is not None and not isinstance(credentials, Mapping):
        raise Validation("credentials", f"expected a mapping, got {type(credentials).__name__}")
    return SCHEMES.maker(parts, url)(parts, url, create, credentials)


@SCHEMES.add("memory")
def _memory_opener(
    parts: SplitResult, url: str, create: bool, credentials: Credentials
) -> Callable[[], ObjectStore]:
    from backends.objects.memory import MemoryObjectStore

    return in_memory(parts, url, "objects url", create, MemoryObjectStore)


@SCHEMES.add("file")
def _file_opener(
    parts: SplitResult, url: str, create: bool, credentials: Credentials
) -> Callable[[], ObjectStore]:
    from backends.objects.local import LocalObjectStore, parse_file_url

    root, fsync = parse_file_url(url)
    return lambda: LocalObjectStore(root, fsync=fsync, create=create)


@SCHEMES.add("s3")
def _s3_opener(
    parts: SplitResult, url: str, create: bool, credentials: Credentials
) -> Callable[[], ObjectStore]:
    """``s3://``: a bucket is never created, so ``create`` changes nothing."""
    from backends.objects.s3 import S3ObjectStore, check_endpoint, check_region

    options = url_options(parts, "objects url", {"endpoint_url", "region", "multipart"})
    if not parts.netloc:
        raise Validation("objects url", f"s3 URL needs a bucket: {url!r}")
    for name, check in (("endpoint_url", check_endpoint), ("region", check_region)):
        value = options.get(name)
        if value == "":
            raise Validation("objects url", f"{name} is empty (leave it out for the default)")
        try:
            check(value)
        except Validation as exc:
            raise Validation("objects url", f"{exc.field} must be {exc.problem}") from None
    multipart = url_flag(options, "multipart", True, "objects url")
    bucket, prefix = unquote(parts.netloc), unquote(parts.path).strip("/")
    S3ObjectStore.check_location(bucket, prefix)
    return lambda: S3ObjectStore(
        bucket,
        prefix,
        endpoint_url=options.get("endpoint_url"),
        region=options.get("region"),
        multipart=multipart,
        credentials=credentials,
    )
