"""What one S3 call needs around it (:mod:`backends.objects.s3`): boto3 imported lazily,
S3's errors classified (worth another attempt, ``412 PreconditionFailed``, not found), bodies
cut into multipart parts, and an object's body read as a stream."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

from backends.objects.checks import read_bytes
from persistence.errors import Backend, MissingDependency
from persistence.objects import ReadStream

THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
    }
)
"""Error codes that ask the client to slow down; retried with backoff."""
TRANSIENT_CODES = frozenset(
    {
        "ConditionalRequestConflict",  # 409: a concurrent conditional write is in flight
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
    }
)
"""Other error codes retried with backoff (any HTTP 5xx is retried too)."""
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})


def import_boto3() -> tuple[Any, Any, Any]:
    """``boto3``, ``botocore.config.Config`` and ``botocore.exceptions``, imported lazily."""
    try:
        import boto3
        import botocore.exceptions
        from botocore.config import Config
    except ImportError as exc:
        raise MissingDependency(
            f"the S3 object store needs boto3: pip install 'aos-persistence[s3]' ({exc})"
        ) from None
    return boto3, Config, botocore.exceptions


def b64(digest: bytes) -> str:
    """``digest`` in base64, as S3's checksum headers carry it."""
    return base64.b64encode(digest).decode("ascii")


def error_code(exc: Any) -> str:
    """The S3 error code of a botocore ``ClientError`` (``""`` if none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: Any) -> int:
    """The HTTP status of a botocore ``ClientError`` (0 if none)."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else 0


def is_retryable(exc: Any) -> bool:
    """Whether a ``ClientError`` is worth another attempt."""
    code = error_code(exc)
    status = http_status(exc)
    return code in THROTTLING_CODES or code in TRANSIENT_CODES or status >= 500 or status == 429


def is_precondition_failed(exc: Any) -> bool:
    """Whether a ``ClientError`` is ``412 PreconditionFailed`` (a conditional write lost)."""
    return error_code(exc) == "PreconditionFailed" or http_status(exc) == 412


def is_not_found(exc: Any) -> bool:
    """Whether a ``ClientError`` says the key does not exist."""
    return error_code(exc) in _NOT_FOUND_CODES


def read_up_to(stream: BinaryIO, n: int) -> bytes:
    """Read ``n`` bytes, fewer only at end of stream (``read`` may return short counts)."""
    chunks: list[bytes] = []
    remaining = n
    while remaining > 0:
        chunk = read_bytes(stream, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def cut_parts(first: bytes, rest: BinaryIO | None, part_size: int) -> Iterator[bytes]:
    """``first`` followed by ``rest`` (if any), cut into ``part_size`` pieces (the last may be
    shorter, never empty). Reads at most one part ahead."""
    pending = first
    eof = rest is None
    while True:
        if len(pending) < part_size and not eof:
            assert rest is not None
            wanted = part_size - len(pending)
            more = read_up_to(rest, wanted)
            eof = len(more) < wanted
            pending += more
        if len(pending) >= part_size:
            yield pending[:part_size]
            pending = pending[part_size:]
        elif pending:
            yield pending
            return
        else:
            return


class BodyReader(ReadStream):
    """A ``GetObject`` body as a raw stream; read failures surface as ``Backend``."""

    def __init__(self, body: Any, what: str, botocore_error: type[Exception]) -> None:
        self._body = body
        self._what = what
        self._botocore_error = botocore_error

    def _read(self, n: int) -> bytes:
        try:
            return cast(bytes, self._body.read(n))
        except (self._botocore_error, OSError) as exc:
            raise Backend(f"{self._what}: read failed: {type(exc).__name__}: {exc}") from None

    def _release(self) -> None:
        self._body.close()
