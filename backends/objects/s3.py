"""The S3 object store (``s3://bucket/prefix``): AWS S3 or an S3-compatible server.

Create-only without a read-modify-write race: every create is a conditional write,
``If-None-Match: *`` on ``PutObject`` (bodies up to ``multipart_threshold``) or on
``CompleteMultipartUpload`` (larger bodies and streams, uploaded in ``part_size`` parts). A
``412 PreconditionFailed`` means the key already exists: ``put`` returns ``False`` and the
stored bytes are untouched. A failed multipart upload is always aborted. On a server whose
conditional ``CompleteMultipartUpload`` is not atomic (SeaweedFS, see below) open the store
with ``multipart=False``: large streams are then spooled to a temporary file and sent with
one conditional ``PutObject`` (S3 limit: 5 GiB).

Integrity: every body is sent with ``x-amz-checksum-sha256`` (the caller's declared sha256
for a single put, the part's own sha256 for each part), so a server that checks it rejects
bytes damaged on the way (``BadDigest``, raised as ``Validation`` naming the key). Not every
server checks (moto does not), so by default single-put bodies are also hashed here and a
wrong declared sha256 is refused before anything is sent. Multipart bodies are always hashed
here -- S3 cannot verify a whole-object sha256 for them -- and a mismatch aborts the upload
before ``CompleteMultipartUpload``: nothing is stored. A staged body
(:meth:`S3ObjectStore.stage`) was hashed once when staged, and its digest is sent as it is;
only a multipart upload's parts are hashed again, each for its own checksum.

Retries: botocore's own retrying is switched off for clients this module creates, so that
one policy governs every call and attempts do not multiply: 5xx, throttling (``SlowDown``,
``Throttling``, ``RequestLimitExceeded``, ...), ``409 ConditionalRequestConflict`` (which
botocore never retries) and connection failures are retried up to ``max_attempts`` times
with exponential backoff and jitter. A create retried after a lost response may answer
``False`` for an object it did create itself; the stored bytes are then the caller's own.

Errors name the bucket, key and S3 error code -- never payload bytes. ``boto3`` is imported
only when a store is built; endpoint, region and credentials come from the standard boto3
chain (environment, config files, instance roles) unless given.

Server behaviour, tested (moto 5.2.5, SeaweedFS 4.48; ``tests/objects``):

* ``If-None-Match: *`` on ``PutObject``: both refuse an existing key with 412. SeaweedFS
  atomically (6-16 concurrent writers, 0 double winners in 380+ rounds); moto checks then
  writes without a lock, so concurrent writers can both win.
* ``If-None-Match: *`` on ``CompleteMultipartUpload``: both refuse an existing key, but
  neither atomically: two or more concurrent completes of one key succeeded (the last one
  wins) in a third of SeaweedFS rounds and nearly all moto rounds. Hence ``multipart=False``
  there.
* ``ChecksumSHA256``: SeaweedFS rejects a wrong one (``BadDigest``, on puts and parts);
  moto stores the body regardless (the local check here covers it).
* Listing order: moto lists in S3's byte order; SeaweedFS path segment by path segment
  (``a/x`` before ``a-b``), which :meth:`S3ObjectStore.list` refuses rather than passes on.

:meth:`S3ObjectStore.probe_capabilities` checks the sequential behaviour of a live server
(races cannot be probed cheaply; :mod:`backends.objects.s3_probe`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, Final, cast
from urllib.parse import quote, urlsplit

from backends.objects.checks import (
    check_body,
    check_listing,
    check_put,
    check_window,
    read_bytes,
)
from backends.objects.s3_calls import (
    BodyReader,
    b64,
    cut_parts,
    error_code,
    http_status,
    import_boto3,
    is_not_found,
    is_precondition_failed,
    is_retryable,
    read_up_to,
)
from backends.objects.s3_probe import S3Capabilities, probe
from persistence.errors import Backend, NotFound, Validation
from persistence.objects import (
    COPY_CHUNK,
    ObjectInfo,
    ObjectStore,
    StagedBody,
    check_object_key,
    check_sha256,
)
from persistence.sizes import MiB, check_bool, check_int, check_number

log = logging.getLogger(__name__)

DEFAULT_MULTIPART_THRESHOLD = 8 * MiB
"""Bodies larger than this go by multipart upload."""
DEFAULT_PART_SIZE = 8 * MiB
"""Size of each multipart part but the last."""
MIN_PART_SIZE = 5 * MiB
"""S3 refuses smaller parts (except the last) when the upload completes."""
MAX_PART_SIZE = 5 * 1024 * MiB
MAX_SINGLE_PUT = 5 * 1024 * MiB
"""S3's limit on one PutObject body."""
MAX_PARTS = 10_000
"""S3's limit on parts per upload: with 8 MiB parts, objects up to ~78 GiB."""
DEFAULT_LIST_PAGE_SIZE = 1000
"""Keys per ``ListObjectsV2`` request (S3's maximum)."""
DEFAULT_MAX_ATTEMPTS = 5


class _Staged(StagedBody):
    """A staged body: bytes, or a spool (closed when discarded)."""

    def __init__(
        self, store: S3ObjectStore, body: bytes | BinaryIO, sha256: bytes, size: int
    ) -> None:
        super().__init__(sha256, size)
        self._store = store
        self._body = body

    def publish(self, key: str) -> bool:
        return self._store._create(key, self._body, self.size, self.sha256)

    def discard(self) -> None:
        if not isinstance(self._body, bytes):
            self._body.close()


_BUCKET: Final = re.compile(r"[A-Za-z0-9._-]{1,255}", re.ASCII)
_REGION: Final = re.compile(r"(?![0-9]+$)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)", re.ASCII)


def check_region(region: object) -> None:
    """``None``, or a region name (a host label, as botocore requires)."""
    if region is not None and (not isinstance(region, str) or not _REGION.fullmatch(region)):
        raise Validation("region", f"a region name such as us-east-1, not {region!r}")


def check_endpoint(endpoint_url: object) -> None:
    """``None``, or an ``http://`` or ``https://`` URL with a host (and a valid port)."""
    if endpoint_url is None:
        return
    problem = f"an http:// or https:// URL with a host, not {endpoint_url!r}"
    if not isinstance(endpoint_url, str) or not endpoint_url.isprintable() or " " in endpoint_url:
        raise Validation("endpoint_url", problem)
    try:
        parts = urlsplit(endpoint_url)
        parts.port  # noqa: B018 -- raises ValueError for a port out of range
    except ValueError:
        raise Validation("endpoint_url", problem) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Validation("endpoint_url", problem)


CREDENTIAL_NAMES: Final = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "aws_session_token"}
)
"""Explicit credentials an :class:`S3ObjectStore` accepts (boto3 session arguments)."""


def _check_credentials(credentials: Mapping[str, str] | None) -> None:
    """``None``, or a mapping of names in :data:`CREDENTIAL_NAMES` to printable text."""
    if credentials is not None and not isinstance(credentials, Mapping):
        raise Validation("s3 credentials", f"a mapping, not {type(credentials).__name__}")
    unknown = set(credentials or {}) - CREDENTIAL_NAMES
    if unknown:
        raise Validation("s3 credentials", f"unknown name(s) {sorted(unknown)}")
    for name, value in (credentials or {}).items():
        if not isinstance(value, str) or not value.isprintable():
            raise Validation("s3 credentials", f"{name} is not printable text")


def _new_client(
    boto3: Any,
    config_cls: Any,
    exceptions: Any,
    endpoint_url: str | None,
    region: str | None,
    credentials: Mapping[str, str] | None,
) -> Any:
    """A boto3 S3 client for a store (``boto3``, botocore's ``Config`` and its
    ``exceptions`` as :func:`~backends.objects.s3_calls.import_boto3` gives them), without
    botocore's own retries; endpoint, region and credentials not given come from the
    standard boto3 chain. Arguments botocore refuses are ``Validation``."""
    config_args: dict[str, Any] = {
        # One retry policy: ours (see the module docstring).
        "retries": {"mode": "standard", "total_max_attempts": 1},
        "connect_timeout": 10,
        "read_timeout": 60,
        "max_pool_connections": 32,
        # We always send our own ChecksumSHA256; no CRC32 defaults or aws-chunked
        # bodies that S3-compatible servers may not understand.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }
    if endpoint_url:
        config_args["s3"] = {"addressing_style": "path"}
    # Explicit credentials (aws_access_key_id, aws_secret_access_key,
    # aws_session_token) win over the standard chain, which supplies the rest.
    session = boto3.session.Session(**dict(credentials or {}))
    try:
        return session.client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=region or None,
            config=config_cls(**config_args),
        )
    except (ValueError, exceptions.BotoCoreError) as exc:  # what the checks missed
        raise Validation("endpoint_url or region", str(exc)) from None


def _store_url(
    bucket: str, prefix: str, endpoint_url: str | None, region: str | None, multipart: bool
) -> str:
    """The store's ``s3://`` URL: its bucket and prefix, and the options that made it."""
    query = [
        f"{name}={quote(value, safe=':/')}"
        for name, value in (("endpoint_url", endpoint_url), ("region", region))
        if value
    ]
    if not multipart:
        query.append("multipart=0")
    return f"s3://{bucket}/{prefix}" + (f"?{'&'.join(query)}" if query else "")


class S3ObjectStore(ObjectStore):
    """Create-only objects in an S3 bucket, under an optional key prefix.

    ``prefix`` is joined to every key with ``/`` (``prefix="aos/prod"`` stores key ``cas/x``
    as ``aos/prod/cas/x``); listings return keys relative to it. ``client`` is a ready boto3
    S3 client (its own retry configuration then applies in addition to ours); otherwise one
    is made from ``endpoint_url``, ``region`` and the standard boto3 credential chain.
    ``verify_sha256_locally=False`` leaves the check of a caller's declared sha256 on single
    puts to the server: only for servers known to answer a wrong ``ChecksumSHA256`` with
    ``BadDigest`` (AWS S3, SeaweedFS; not moto). ``list_page_size`` is the ``MaxKeys`` of
    each listing request. ``multipart=False`` never uses multipart uploads (see the module
    docstring: needed where a conditional ``CompleteMultipartUpload`` is not atomic).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        part_size: int = DEFAULT_PART_SIZE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry_base_delay: float = 0.1,
        retry_max_delay: float = 5.0,
        list_page_size: int = DEFAULT_LIST_PAGE_SIZE,
        verify_sha256_locally: bool = True,
        multipart: bool = True,
        credentials: Mapping[str, str] | None = None,
    ) -> None:
        prefix = self.check_location(bucket, prefix)
        check_endpoint(endpoint_url)
        check_region(region)
        check_int(multipart_threshold, "multipart_threshold", 0, 2**63 - 1)
        check_int(part_size, "part_size", MIN_PART_SIZE, MAX_PART_SIZE)
        check_int(max_attempts, "max_attempts", 1, 1_000)
        check_number(retry_base_delay, "retry_base_delay", 0, 3_600)
        check_number(retry_max_delay, "retry_max_delay", 0, 3_600)
        check_int(list_page_size, "list_page_size", 1, 1_000)
        check_bool(verify_sha256_locally, "verify_sha256_locally")
        check_bool(multipart, "multipart")
        _check_credentials(credentials)
        boto3, config_cls, exceptions = import_boto3()
        self.bucket = bucket
        self.prefix = prefix
        self._key_prefix = f"{prefix}/" if prefix else ""
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.max_attempts = max_attempts
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.list_page_size = list_page_size
        self.verify_sha256_locally = verify_sha256_locally
        self.multipart = multipart
        self._client_error: type[Exception] = exceptions.ClientError
        self._botocore_error: type[Exception] = exceptions.BotoCoreError
        self._transport_errors: tuple[type[Exception], ...] = (
            exceptions.ConnectionError,
            exceptions.HTTPClientError,
        )
        self._sleep: Callable[[float], None] = time.sleep
        self._owns_client = client is None
        if client is None:
            client = _new_client(boto3, config_cls, exceptions, endpoint_url, region, credentials)
        self._client = client
        self.url = _store_url(bucket, prefix, endpoint_url, region, multipart)

    @staticmethod
    def check_location(bucket: object, prefix: object) -> str:
        """The key prefix (without outer ``/``), if ``bucket`` is a bucket name and
        ``prefix`` a valid object key or empty."""
        if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
            raise Validation(
                "s3 bucket", f"not a bucket name ([A-Za-z0-9._-], 1-255): {str(bucket)[:100]!r}"
            )
        if not isinstance(prefix, str):
            raise Validation("s3 prefix", f"expected text, got {type(prefix).__name__}")
        prefix = prefix.strip("/")
        if prefix:
            try:
                check_object_key(prefix)
            except Validation as exc:
                raise Validation("s3 prefix", exc.problem) from None
        return prefix

    # ------------------------------------------------------------------ plumbing

    def _full_key(self, key: str) -> str:
        return self._key_prefix + check_object_key(key, self._key_prefix)

    def _where(self, full_key: str) -> str:
        return f"s3://{self.bucket}/{full_key}"

    def _backend(self, op: str, full_key: str, exc: Exception) -> Backend:
        if isinstance(exc, self._client_error):
            detail = f"{error_code(exc) or 'error'} (HTTP {http_status(exc)})"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        return Backend(f"{op} {self._where(full_key)}: {detail}")

    def _call(self, method: Callable[..., Any], op: str, full_key: str, **params: Any) -> Any:
        """``method(**params)``, retried on transient failures with exponential backoff.

        A ``ClientError`` that is not retried (or still fails on the last attempt) is
        re-raised for the caller to classify; other botocore failures become ``Backend``."""
        attempt = 1
        while True:
            try:
                return method(**params)
            except self._client_error as exc:
                if attempt >= self.max_attempts or not is_retryable(exc):
                    raise
                log.debug("%s %s: %s, retrying", op, self._where(full_key), error_code(exc))
            except self._transport_errors as exc:
                if attempt >= self.max_attempts:
                    raise self._backend(op, full_key, exc) from None
                log.debug("%s %s: %s, retrying", op, self._where(full_key), type(exc).__name__)
            except self._botocore_error as exc:
                raise self._backend(op, full_key, exc) from None
            delay = min(self.retry_max_delay, self.retry_base_delay * 2 ** (attempt - 1))
            self._sleep(delay / 2 + random.uniform(0, delay / 2))
            attempt += 1

    def _bad_digest(self, key: str, exc: Exception, what: str) -> Validation | None:
        if error_code(exc) in ("BadDigest", "XAmzContentSHA256Mismatch"):
            return Validation("sha256", f"{what} of {key!r} does not match its sha256 (BadDigest)")
        return None

    # ------------------------------------------------------------------ ObjectStore

    def put(self, key: str, data: bytes | BinaryIO, *, sha256: bytes | None = None) -> bool:
        check_put(key, data, sha256, self._key_prefix)
        full_key = self._key_prefix + key
        if isinstance(data, bytes):
            body = data
            if len(body) <= self.multipart_threshold or not self.multipart:
                return self._put_single(key, full_key, body, sha256)
            return self._put_multipart(key, full_key, cut_parts(body, None, self.part_size), sha256)
        head = read_up_to(data, self.multipart_threshold + 1)
        if len(head) <= self.multipart_threshold:
            return self._put_single(key, full_key, head, sha256)
        if not self.multipart:
            with self._spool(head, data, None) as staged:
                check_sha256(key, sha256, staged.sha256)
                return staged.publish(key)
        return self._put_multipart(key, full_key, cut_parts(head, data, self.part_size), sha256)

    def stage(self, data: bytes | BinaryIO, *, known_sha256: bytes | None = None) -> StagedBody:
        """Bodies up to the multipart threshold are kept in memory, larger streams spooled to
        a temporary file: S3 cannot rename, and a create-only server-side copy from a staging
        key would cost a second upload's worth of server work (see docs/objects.md)."""
        check_body(data, known_sha256, "known_sha256")
        if isinstance(data, bytes):
            body = data
        else:
            body = read_up_to(data, self.multipart_threshold + 1)
            if len(body) > self.multipart_threshold:
                return self._spool(body, data, known_sha256)
        return _Staged(self, body, known_sha256 or hashlib.sha256(body).digest(), len(body))

    def _spool(self, head: bytes, rest: BinaryIO, known_sha256: bytes | None) -> _Staged:
        """``head`` and the rest of a stream, spooled (in memory up to the multipart threshold,
        then to a temporary file) and hashed unless ``known_sha256`` is given."""
        if self.multipart:
            limit, why = self.part_size * MAX_PARTS, f"{MAX_PARTS} parts of {self.part_size} bytes"
        else:
            limit, why = MAX_SINGLE_PUT, "one PutObject: multipart is off for this store"
        digest = hashlib.sha256()
        size = 0
        spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 -- the staged body closes it
            max_size=max(self.multipart_threshold, 1)
        )
        try:
            chunk = head
            while chunk:
                size += len(chunk)
                if size > limit:
                    raise Validation(
                        "object size", f"a body over {limit} bytes is too large ({why})"
                    )
                if known_sha256 is None:
                    digest.update(chunk)
                spool.write(chunk)
                chunk = read_bytes(rest, COPY_CHUNK)
        except BaseException:
            spool.close()
            raise
        sha256 = known_sha256 or digest.digest()
        return _Staged(self, cast(BinaryIO, spool), sha256, size)

    def _create(self, key: str, body: bytes | BinaryIO, size: int, sha256: bytes) -> bool:
        """Create ``key`` from a staged body (its ``sha256`` computed already: sent, not
        computed again)."""
        full_key = self._full_key(key)
        if size <= self.multipart_threshold or not self.multipart:
            if isinstance(body, bytes):
                return self._put_single(key, full_key, body, sha256, hashed=True)
            return self._send_put(key, full_key, body, size, sha256)
        if isinstance(body, bytes):
            parts = cut_parts(body, None, self.part_size)
        else:
            body.seek(0)
            parts = cut_parts(b"", body, self.part_size)
        return self._put_multipart(key, full_key, parts, sha256, hashed=True)

    def _put_single(
        self, key: str, full_key: str, body: bytes, sha256: bytes | None, *, hashed: bool = False
    ) -> bool:
        """One PutObject; ``hashed``: ``sha256`` was computed of ``body`` (not again)."""
        if len(body) > MAX_SINGLE_PUT:
            raise Validation("object size", f"{key!r}: {len(body)} bytes > {MAX_SINGLE_PUT}")
        if sha256 is None or (self.verify_sha256_locally and not hashed):
            actual = hashlib.sha256(body).digest()
            check_sha256(key, sha256, actual)
            sha256 = actual
        return self._send_put(key, full_key, body, len(body), sha256)

    def _send_put(
        self, key: str, full_key: str, body: bytes | BinaryIO, size: int, sha256: bytes
    ) -> bool:
        """``PutObject`` with ``If-None-Match: *`` and the body's sha256; ``False`` on 412."""

        def send(**params: Any) -> Any:
            if not isinstance(body, bytes):
                body.seek(0)  # again on each attempt
            return self._client.put_object(Body=body, **params)

        try:
            self._call(
                send,
                "PutObject",
                full_key,
                Bucket=self.bucket,
                Key=full_key,
                ContentLength=size,
                IfNoneMatch="*",
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=b64(sha256),
            )
        except self._client_error as exc:
            if is_precondition_failed(exc):
                return False
            raise self._bad_digest(key, exc, "body") or self._backend(
                "PutObject", full_key, exc
            ) from None
        return True

    def _put_multipart(
        self,
        key: str,
        full_key: str,
        parts: Iterator[bytes],
        sha256: bytes | None,
        *,
        hashed: bool = False,
    ) -> bool:
        """A multipart upload, each part with its own sha256 for the server to check, the
        whole body hashed and checked against ``sha256`` before it completes -- unless
        ``hashed`` (``sha256`` was computed of these bytes already)."""
        try:
            created = self._call(
                self._client.create_multipart_upload,
                "CreateMultipartUpload",
                full_key,
                Bucket=self.bucket,
                Key=full_key,
                ChecksumAlgorithm="SHA256",
            )
        except self._client_error as exc:
            raise self._backend("CreateMultipartUpload", full_key, exc) from None
        upload_id = str(created["UploadId"])
        digest = hashlib.sha256()
        completed: list[dict[str, Any]] = []
        op = "UploadPart"
        try:
            for number, part in enumerate(parts, start=1):
                if number > MAX_PARTS:
                    raise Validation(
                        "object size",
                        f"{key!r} needs more than {MAX_PARTS} parts of {self.part_size} bytes",
                    )
                if not hashed:
                    digest.update(part)
                checksum = b64(hashlib.sha256(part).digest())
                uploaded = self._call(
                    self._client.upload_part,
                    op,
                    full_key,
                    Bucket=self.bucket,
                    Key=full_key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=part,
                    ChecksumAlgorithm="SHA256",
                    ChecksumSHA256=checksum,
                )
                completed.append(
                    {"PartNumber": number, "ETag": uploaded["ETag"], "ChecksumSHA256": checksum}
                )
            if not hashed:
                check_sha256(key, sha256, digest.digest())
            op = "CompleteMultipartUpload"
            self._call(
                self._client.complete_multipart_upload,
                op,
                full_key,
                Bucket=self.bucket,
                Key=full_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": completed},
                IfNoneMatch="*",
            )
        except self._client_error as exc:
            self._abort(full_key, upload_id)
            if op == "CompleteMultipartUpload" and is_precondition_failed(exc):
                return False
            raise self._bad_digest(key, exc, "a part") or self._backend(op, full_key, exc) from None
        except BaseException:
            self._abort(full_key, upload_id)
            raise
        return True

    def _abort(self, full_key: str, upload_id: str) -> None:
        """Abort a multipart upload; a failure is logged, not raised (the caller is already
        failing, and a bucket lifecycle rule reaps what is left)."""
        try:
            self._call(
                self._client.abort_multipart_upload,
                "AbortMultipartUpload",
                full_key,
                Bucket=self.bucket,
                Key=full_key,
                UploadId=upload_id,
            )
        except (self._client_error, Backend) as exc:
            if not (isinstance(exc, self._client_error) and error_code(exc) == "NoSuchUpload"):
                log.warning("could not abort multipart upload of %s: %s", full_key, exc)

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        full_key = self._full_key(key)
        check_window(start, length)
        if length == 0:
            if self.stat(key) is None:
                raise NotFound(f"object {key!r} not found in {self._where(self._key_prefix)}")
            return io.BytesIO(b"")
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": full_key}
        if start or length is not None:
            end = "" if length is None else str(start + length - 1)
            params["Range"] = f"bytes={start}-{end}"
        try:
            response = self._call(self._client.get_object, "GetObject", full_key, **params)
        except self._client_error as exc:
            if is_not_found(exc):
                raise NotFound(
                    f"object {key!r} not found in {self._where(self._key_prefix)}"
                ) from None
            if error_code(exc) == "InvalidRange" or http_status(exc) == 416:
                return io.BytesIO(b"")  # the range starts at or after the end
            raise self._backend("GetObject", full_key, exc) from None
        reader = BodyReader(response["Body"], self._where(full_key), self._botocore_error)
        return cast(BinaryIO, io.BufferedReader(reader, buffer_size=256 * 1024))

    def stat(self, key: str) -> ObjectInfo | None:
        full_key = self._full_key(key)
        try:
            response = self._call(
                self._client.head_object,
                "HeadObject",
                full_key,
                Bucket=self.bucket,
                Key=full_key,
            )
        except self._client_error as exc:
            if is_not_found(exc):
                return None
            raise self._backend("HeadObject", full_key, exc) from None
        return ObjectInfo(key, int(response["ContentLength"]))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key (UTF-8 byte) order, after ``start_after``: one
        ``ListObjectsV2`` request per ``list_page_size`` keys.

        The order is checked as keys arrive: a server that lists in another order raises
        ``Backend`` instead of handing out keys out of order. SeaweedFS 4.48 does, for keys
        that differ where one has ``/`` and the other a lower character (it lists
        ``a/x`` before ``a-b``, comparing path segments); the plane's own key shapes never
        differ that way. The arguments are checked at the call, not at the first key."""
        check_listing(prefix, start_after)
        return self._list(prefix, start_after)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self._key_prefix + prefix,
            "MaxKeys": self.list_page_size,
        }
        if start_after is not None:
            params["StartAfter"] = self._key_prefix + start_after
        where = self._where(params["Prefix"])
        cut = len(self._key_prefix)
        last = params.get("StartAfter")
        while True:
            try:
                page = self._call(
                    self._client.list_objects_v2, "ListObjectsV2", params["Prefix"], **params
                )
            except self._client_error as exc:
                raise self._backend("ListObjectsV2", params["Prefix"], exc) from None
            for item in page.get("Contents", ()):
                full_key = str(item["Key"])
                if not full_key.startswith(params["Prefix"]):
                    raise Backend(f"ListObjectsV2 {where}: listed {full_key!r}, not under it")
                if last is not None and full_key <= last:
                    raise Backend(
                        f"ListObjectsV2 {where}: listed {full_key!r} after {last!r}: the server "
                        "does not list in key order"
                    )
                last = full_key
                yield ObjectInfo(full_key[cut:], int(item["Size"]))
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                raise Backend(f"ListObjectsV2 {where}: truncated page without a continuation token")
            params["ContinuationToken"] = token

    def delete(self, key: str) -> None:
        full_key = self._full_key(key)
        try:
            self._call(
                self._client.delete_object,
                "DeleteObject",
                full_key,
                Bucket=self.bucket,
                Key=full_key,
            )
        except self._client_error as exc:
            if not is_not_found(exc):
                raise self._backend("DeleteObject", full_key, exc) from None

    def close(self) -> None:
        """Close the HTTP connections of a client this store made (not one passed in)."""
        if self._owns_client:
            self._client.close()

    # ------------------------------------------------------------------ diagnostics

    def probe_capabilities(self) -> S3Capabilities:
        """Check what the server enforces, with a few tiny objects under
        ``<prefix>/_probe/<random>`` (deleted afterwards; :func:`~backends.objects.s3_probe.probe`).

        Run it against a new endpoint before trusting it: without ``conditional_put`` and
        ``conditional_complete`` this store cannot be create-only there."""
        return probe(self)
