"""Protocol A: the universe-scoped content-addressed store.

The hash is always computed on our side, once per put: of the bytes by
:meth:`CasOperations.put_bytes`, and
by the object store while it stages a stream (:meth:`ObjectStore.stage`: written where no key
sees it, hashed on the way, with no second copy); a caller may declare the hash it expects,
and a different one is a ``Validation`` error with nothing stored. Bodies up to the inline
threshold live in the metadata value; larger ones are published in the object store at
``cas/<universe>/sha256/<hex>`` **before** the metadata commits, so metadata never points at
nothing, and only after the put's pin has committed (see
:mod:`persistence.protocols.cas_bodies`). If the metadata
commit fails after the body was published, a retry finds the body already there (create-only
publishing returns "exists") and commits the metadata: it converges.
Metadata whose body is missing or does not hash to its key is a hard ``Corruption`` error:
the plane never heals it silently. An upload blocks: it runs as one
:class:`~persistence.futures.Blocking` step (in the executor under asyncio), driving its
transactions in place.

Reads verify the body against its hash: ``always``, ``sampled`` (a fraction of reads), or
``never``. Streaming reads verify at the end of the stream, before reporting EOF.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import time
from typing import BinaryIO, Final, cast

from persistence import metrics, txsize
from persistence.errors import CasBodyHashMismatch, CasBodyMissing, NotFound, Validation
from persistence.futures import drive
from persistence.ids import Hash, UniverseId, check_id
from persistence.keyspace import UniverseKeys
from persistence.objects import COPY_CHUNK, HashingReader, ReadStream, StagedBody
from persistence.plane import cas_collection
from persistence.plane.core import Core, operation, row_limit, universe_keys
from persistence.protocols import cas, cas_bodies
from persistence.protocols.cas_bodies import object_key
from persistence.records import CasDoom, CasMeta
from persistence.sizes import check_bytes

META_OVERHEAD: Final = 32
"""An upper bound on what a ``CasMeta`` record adds to an inline body (CBOR map, size)."""


class VerifyingReader(ReadStream):
    """Streams a body and, at its end, checks its size and sha256 against the metadata."""

    def __init__(self, inner: BinaryIO, hash: Hash, size: int, where: str) -> None:
        self._inner = HashingReader(inner)
        self._raw = inner
        self._hash = hash
        self._size = size
        self._where = where

    def _read(self, n: int) -> bytes:
        data = self._inner.read(n)
        if not data:
            actual = Hash(self._inner.sha256.digest())
            if actual != self._hash or self._inner.size != self._size:
                raise CasBodyHashMismatch(self._hash.hex, actual.hex, self._where)
        return data

    def _release(self) -> None:
        self._raw.close()


class CasOperations(Core):
    """Protocol A over the plane's engine and object store: the CAS operations."""

    def _inline(self, keys: UniverseKeys, hash: Hash, size: int) -> bool:
        """Whether a body of ``size`` bytes is kept in its metadata: at most the inline
        threshold, and its metadata write within the transaction budget."""
        if size > self.config.inline_threshold:
            return False
        key = len(keys.cas_meta(hash))
        cost = txsize.get_cost(key) + txsize.set_cost(key, size + META_OVERHEAD)
        return cost <= self.budget

    @operation("cas.put")
    async def put_verified(self, universe: UniverseId, data: bytes) -> Hash:
        """Store ``data``; return its sha256 (computed here). Idempotent."""
        return await self.put_bytes(universe, data)

    async def put_bytes(
        self, universe: UniverseId, data: bytes, expected: Hash | None = None
    ) -> Hash:
        """Store ``data``; return its sha256 (``Validation`` naming ``expected_hash`` if it
        is not ``expected``). Idempotent."""
        keys = universe_keys(universe)
        check_bytes(data, "data")
        hash = Hash.of(data)
        _check_expected(expected, hash)
        await self._put_bytes(keys, hash, data)
        self.hooks.reached("cas.after_meta")
        return hash

    @operation("cas.put_stream")
    async def put_stream(
        self, universe: UniverseId, stream: BinaryIO, expected: Hash | None = None
    ) -> Hash:
        """Store a body read from ``stream`` with bounded memory; return its sha256.

        A body over the inline threshold is staged by the object store, which hashes it on
        the way (a local directory writes it once, to the file it then publishes). A stream
        that yields anything but bytes is ``Validation`` naming ``stream``, with nothing
        stored. Reading the stream blocks (under asyncio: in the executor)."""
        keys = universe_keys(universe)
        if expected is not None:
            check_id(expected, Hash, "expected")
        if not callable(getattr(stream, "read", None)):
            raise Validation("stream", f"expected a binary stream, got {type(stream).__name__}")
        body = _Body(stream)
        head = await self.blocking(lambda: body.read_head(self.config.inline_threshold + 1))
        if len(head) <= self.config.inline_threshold:  # the whole body
            hash = Hash.of(head)
            _check_expected(expected, hash)
            await self._put_bytes(keys, hash, head)
        else:
            hash = await self.blocking(lambda: self._stage_and_put(keys, body, expected))
        self.hooks.reached("cas.after_meta")
        return hash

    def _stage_and_put(self, keys: UniverseKeys, body: _Body, expected: Hash | None) -> Hash:
        """(Blocking.) Stage the rest of a long body, hashing it, and put it."""
        with self.objects.stage(cast(BinaryIO, body)) as staged:
            hash = Hash(staged.sha256)
            _check_expected(expected, hash)
            self._put_external(keys, hash, staged)
        return hash

    async def _put_bytes(self, keys: UniverseKeys, hash: Hash, data: bytes) -> None:
        """Store ``data`` of ``hash`` unless present, inline or external."""
        if self._inline(keys, hash, len(data)):
            meta = CasMeta(size=len(data), inline_bytes=data)
            metrics.cas_put(present=not await cas.put_meta(self.engine, keys, hash, meta))
        else:
            await self.blocking(lambda: self._put_external(keys, hash, data))

    def _put_external(self, keys: UniverseKeys, hash: Hash, body: bytes | StagedBody) -> None:
        """(Blocking: an upload, with its transactions driven in place.) Unless the metadata
        is present: pin, publish the body (bytes are staged once the first pin found no
        metadata, with their hash: not hashed again), commit the metadata; again while a
        collector expired the pin, after waiting out any doom."""
        key = object_key(keys.universe, hash)
        put_id = os.urandom(16)
        waits = 0
        with contextlib.ExitStack() as staging:
            while True:
                state = drive(cas.pin(self.engine, keys, hash, put_id, self.clock()))
                if state == "present":
                    metrics.cas_put(present=True)
                    return
                if isinstance(state, CasDoom):
                    self._await_collection(keys, hash, key, state, waits)
                    waits += 1
                    continue
                self.hooks.reached("cas.after_pin")
                if isinstance(body, bytes):
                    body = staging.enter_context(self.objects.stage(body, known_sha256=hash.digest))
                if not body.publish(key):
                    # Already there: from an earlier attempt whose metadata commit failed, or
                    # a concurrent put. Content-addressed, so it is ours if it hashes right.
                    try:
                        self._check_existing(hash, key, body.size)
                    except NotFound:
                        continue  # collected meanwhile (this put's pin had expired): again
                    except CasBodyHashMismatch:
                        drive(cas.unpin(self.engine, keys, hash, put_id))  # collection removes it
                        raise
                self.hooks.reached("cas.after_body")
                meta = CasMeta(size=body.size, object_key=key)
                if drive(cas.commit_meta(self.engine, keys, hash, put_id, meta)):
                    metrics.cas_put(present=False)
                    return

    def _await_collection(
        self, keys: UniverseKeys, hash: Hash, key: str, doom: CasDoom, waits: int
    ) -> None:
        """A collector doomed the body: clear its doom once settled, take it over once its
        lease ran out (its collector is gone), else pause."""
        now = self.clock()
        if cas_bodies.doom_is_stale(doom, now):
            if doom.settled_ns is not None:
                drive(cas_bodies.clear_settled(self.engine, keys, hash, now))
            else:
                grace_ns = round(cas_bodies.DEFAULT_GRACE_SECONDS * cas_bodies.NS)
                cas_collection.collect_body(
                    self.engine, self.objects, keys, hash, key, self.clock, grace_ns
                )
            return
        self.hooks.reached("cas.await_collection")
        time.sleep(min(cas_bodies.AWAIT_MAX_SLEEP_SECONDS, 0.01 * 2 ** min(waits, 7)))

    def _check_existing(self, hash: Hash, key: str, size: int) -> None:
        with VerifyingReader(self.objects.open(key), hash, size, key) as verifying:
            while verifying.read(COPY_CHUNK):
                pass

    @operation("cas.stat")
    async def blob_meta(self, universe: UniverseId, hash: Hash) -> CasMeta:
        """Size and location of the body of ``hash`` (``NotFound`` if absent)."""
        return await self._meta(universe, hash)

    async def _meta(self, universe: UniverseId, hash: Hash) -> CasMeta:
        keys = universe_keys(universe)
        meta = await cas.read_meta(self.engine, keys, check_id(hash, Hash, "hash"))
        if meta is None:
            raise NotFound(f"cas {hash} not found in universe {universe}")
        return meta

    def _should_verify(self) -> bool:
        if self.config.verify_reads == "always":
            return True
        return (
            self.config.verify_reads == "sampled"
            and random.random() < self.config.verify_sample_rate
        )

    @operation("cas.open")
    async def open_blob(self, universe: UniverseId, hash: Hash) -> BinaryIO:
        """A stream of the body of ``hash`` (verified at its end, per the verify mode; its
        reads block)."""
        meta = await self._meta(universe, hash)
        if meta.inline_bytes is not None:
            raw: BinaryIO = io.BytesIO(meta.inline_bytes)
            where = "inline metadata"
        else:
            assert meta.object_key is not None
            where = key = meta.object_key
            try:
                raw = await self.blocking(lambda: self.objects.open(key))
            except NotFound:
                raise CasBodyMissing(hash.hex, key) from None
        if not self._should_verify():
            return raw
        return io.BufferedReader(VerifyingReader(raw, hash, meta.size, where), COPY_CHUNK)

    @operation("cas.get")
    async def get(self, universe: UniverseId, hash: Hash) -> bytes:
        """The verified body of ``hash`` (per the verify mode).

        Reads the object in one call and hashes it once: no stream wrappers, no copies."""
        meta = await self._meta(universe, hash)
        if meta.inline_bytes is not None:
            data, where = meta.inline_bytes, "inline metadata"
        else:
            assert meta.object_key is not None
            where = key = meta.object_key
            try:
                data = await self.blocking(lambda: self.objects.get(key))
            except NotFound:
                raise CasBodyMissing(hash.hex, key) from None
        if self._should_verify():
            actual = Hash.of(data)
            if actual != hash or len(data) != meta.size:
                raise CasBodyHashMismatch(hash.hex, actual.hex, where)
        return data

    @operation("cas.require")
    async def require_blob(self, universe: UniverseId, hash: Hash) -> None:
        """Check that ``hash`` is fully present: metadata, and the body object if external.
        Raises ``NotFound`` (no metadata) or ``CasBodyMissing``; does not read the body."""
        meta = await self._meta(universe, hash)
        key = meta.object_key
        if key is not None and await self.blocking(lambda: self.objects.stat(key)) is None:
            raise CasBodyMissing(hash.hex, key)

    @operation("cas.hashes_from")
    async def hashes_from(
        self, universe: UniverseId, digest_prefix: bytes, limit: int = 10
    ) -> list[Hash]:
        """Up to ``limit`` hashes of ``universe``'s CAS whose digest starts with
        ``digest_prefix`` (for tools that take a prefix of a hash, as git does)."""
        keys = universe_keys(universe)
        check_bytes(digest_prefix, "digest_prefix", high=32)
        return await cas.hashes_from(self.engine, keys, digest_prefix, row_limit(limit, low=1))

    @operation("cas.has")
    async def has(self, universe: UniverseId, hash: Hash) -> bool:
        """Whether the universe holds ``hash``."""
        keys = universe_keys(universe)
        return await cas.read_meta(self.engine, keys, check_id(hash, Hash, "hash")) is not None


def _check_expected(expected: Hash | None, actual: Hash) -> None:
    if expected is not None and check_id(expected, Hash, "expected") != actual:
        raise Validation(
            "expected_hash", f"body hashes to {actual.hex}, caller declared {expected.hex}"
        )


class _Body:
    """The body of :meth:`CasOperations.put_stream`: the bytes read ahead, then the rest of
    the stream;
    a read that returns anything but bytes is ``Validation`` naming ``stream``."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._head = b""

    def _read(self, n: int) -> bytes:
        chunk = self._stream.read(n)
        if not isinstance(chunk, bytes):  # even at its end: "" is a text stream's EOF
            raise Validation(
                "stream", f"read returned {type(chunk).__name__}: open it in binary mode"
            )
        return chunk

    def read_head(self, n: int) -> bytes:
        """Read ahead ``n`` bytes (fewer only at the end of the stream) and return them; they
        are read again first."""
        chunks = []
        remaining = n
        while remaining > 0 and (chunk := self._read(remaining)):
            chunks.append(chunk)
            remaining -= len(chunk)
        self._head = b"".join(chunks)
        return self._head

    def read(self, n: int = -1) -> bytes:
        """Like ``stream.read``: the bytes read ahead first, topped up from the stream (so
        that chunks keep the size the reader asks for)."""
        if not self._head:
            return self._read(n)
        if n < 0:
            head, self._head = self._head, b""
            return head + self._read(-1)
        head, self._head = self._head[:n], self._head[n:]
        return head if len(head) == n else head + self._read(n - len(head))
