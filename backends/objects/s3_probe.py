"""What a live S3 server enforces (:class:`S3Capabilities`), found by :func:`probe` with a few
tiny objects: the sequential behaviour a create-only store relies on (races cannot be probed
cheaply). :meth:`~backends.objects.s3.S3ObjectStore.probe_capabilities` runs it; what it uses
of the store is stated here (:class:`ProbedStore`)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from backends.objects.s3_calls import b64, error_code, is_precondition_failed
from persistence.errors import Backend


@dataclass(frozen=True, slots=True)
class S3Capabilities:
    """What an S3 server was seen to enforce (see :func:`probe`)."""

    conditional_put: bool
    """``PutObject`` with ``If-None-Match: *`` refuses (412) an existing key."""
    conditional_complete: bool
    """``CompleteMultipartUpload`` with ``If-None-Match: *`` refuses (412) an existing key."""
    checks_sha256: bool
    """``PutObject`` with a wrong ``ChecksumSHA256`` is refused (``BadDigest``), not stored."""
    lists_in_key_order: bool
    """``ListObjectsV2`` lists ``a!`` before ``a/1`` (UTF-8 byte order, as S3 does)."""


class ProbedStore(Protocol):
    """What the probe uses of its store."""

    @property
    def bucket(self) -> str: ...

    @property
    def _key_prefix(self) -> str: ...

    @property
    def _client(self) -> Any: ...

    @property
    def _client_error(self) -> type[Exception]: ...

    def _where(self, full_key: str) -> str: ...

    def _backend(self, op: str, full_key: str, exc: Exception) -> Backend: ...

    def _call(self, method: Callable[..., Any], op: str, full_key: str, **params: Any) -> Any: ...

    def _abort(self, full_key: str, upload_id: str) -> None: ...


def probe(store: ProbedStore) -> S3Capabilities:
    """Check what the server enforces, with a few tiny objects under
    ``<prefix>/_probe/<random>`` (deleted afterwards): a conditional put, a conditional
    multipart complete, a put with a wrong checksum, then a listing's order."""
    base = store._key_prefix + f"_probe/{uuid.uuid4().hex}"
    first, second = f"{base}/create-only", f"{base}/checksum"
    ordered = [f"{base}/order/a!", f"{base}/order/a/1"]
    try:
        conditional_put = _conditional_put(store, first)
        conditional_complete = _conditional_complete(store, first)
        checks_sha256 = _put(store, second, b"4", hashlib.sha256(b"5").digest()) != ""
        lists_in_key_order = _lists_in_key_order(store, base, ordered)
    except store._client_error as exc:
        raise store._backend("probe", base, exc) from None
    finally:
        for full_key in (first, second, *ordered):
            _attempt(store, store._client.delete_object, "DeleteObject", full_key)
    return S3Capabilities(conditional_put, conditional_complete, checks_sha256, lists_in_key_order)


def _attempt(
    store: ProbedStore, method: Callable[..., Any], op: str, full_key: str, **params: Any
) -> str:
    """``""`` on success, else the error code."""
    try:
        store._call(method, op, full_key, Bucket=store.bucket, Key=full_key, **params)
    except store._client_error as exc:
        return "PreconditionFailed" if is_precondition_failed(exc) else error_code(exc)
    return ""


def _put(store: ProbedStore, full_key: str, body: bytes, checksum: bytes) -> str:
    """A conditional ``PutObject`` of ``body`` sent with ``checksum`` (:func:`_attempt`)."""
    return _attempt(
        store,
        store._client.put_object,
        "PutObject",
        full_key,
        Body=body,
        IfNoneMatch="*",
        ChecksumAlgorithm="SHA256",
        ChecksumSHA256=b64(checksum),
    )


def _conditional_put(store: ProbedStore, full_key: str) -> bool:
    """Put ``full_key`` (``Backend`` if that fails), then whether a second conditional put
    of it is refused."""
    if code := _put(store, full_key, b"1", hashlib.sha256(b"1").digest()):
        raise Backend(f"probe PutObject {store._where(full_key)} failed: {code}")
    return _put(store, full_key, b"2", hashlib.sha256(b"2").digest()) != ""


def _conditional_complete(store: ProbedStore, full_key: str) -> bool:
    """Whether a conditional ``CompleteMultipartUpload`` of the existing ``full_key`` is
    refused; the upload is aborted either way."""
    upload = store._call(
        store._client.create_multipart_upload,
        "CreateMultipartUpload",
        full_key,
        Bucket=store.bucket,
        Key=full_key,
        ChecksumAlgorithm="SHA256",
    )
    upload_id = str(upload["UploadId"])
    checksum = b64(hashlib.sha256(b"3").digest())
    try:
        part = store._call(
            store._client.upload_part,
            "UploadPart",
            full_key,
            Bucket=store.bucket,
            Key=full_key,
            UploadId=upload_id,
            PartNumber=1,
            Body=b"3",
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=checksum,
        )
        parts = [{"PartNumber": 1, "ETag": part["ETag"], "ChecksumSHA256": checksum}]
        return (
            _attempt(
                store,
                store._client.complete_multipart_upload,
                "CompleteMultipartUpload",
                full_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
            != ""
        )
    finally:
        store._abort(full_key, upload_id)


def _lists_in_key_order(store: ProbedStore, base: str, ordered: list[str]) -> bool:
    """Put the ``ordered`` keys (in reverse; ``Backend`` if a put fails), then whether a
    listing under ``base`` names them in that order."""
    for full_key in reversed(ordered):
        if code := _put(store, full_key, b"", hashlib.sha256(b"").digest()):
            raise Backend(f"probe PutObject {store._where(full_key)} failed: {code}")
    listed = store._call(
        store._client.list_objects_v2,
        "ListObjectsV2",
        base,
        Bucket=store.bucket,
        Prefix=f"{base}/order/",
    )
    return [item["Key"] for item in listed.get("Contents", ())] == ordered
