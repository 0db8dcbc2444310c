"""The segment object format: an immutable, checksummed run of journal entries.

Byte layout (all integers big-endian; documented with examples in ``docs/segments.md``)::

    offset  size  field
    0       8     magic            b"AOSPSEG\\x00"
    8       2     format version   1
    10      4     header length H
    14      H     header           canonical CBOR map:
                                     universe  bytes(16)   world     bytes(16)
                                     start     u64         end       u64
                                     count     u64 (= end - start + 1)
                                     checksum  text (algorithm name, "blake3")
    14+H    ...   entries          count times: length u32, then that many bytes;
                                   the i-th entry is the journal entry at height start + i
    ...     8     trailer magic    b"AOSPEND\\x00"
    ...     32    checksum         blake3 of every byte before the trailer magic

The checksum covers the preamble, the header and the entries, so any flipped bit anywhere
is detected. Readers stream: memory stays bounded by one entry whatever the segment size.
Every failure is a :class:`~persistence.errors.SegmentCorruption` naming the object key
and the byte offset where reading stopped.
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

import blake3

from persistence import cbor
from persistence.errors import SegmentChecksumMismatch, SegmentCorruption, Validation
from persistence.ids import UniverseId, WorldId
from persistence.protocols import segment_index

MAGIC: Final = b"AOSPSEG\x00"
TRAILER_MAGIC: Final = b"AOSPEND\x00"
FORMAT_VERSION: Final = 1
CHECKSUM_ALGORITHM: Final = segment_index.CHECKSUM_ALGORITHM
DIGEST_SIZE: Final = segment_index.DIGEST_SIZE
MAX_HEADER: Final = 4096
MAX_ENTRY: Final = 64 * 1024 * 1024
_PREAMBLE = struct.Struct(">8sHI")
_LENGTH = struct.Struct(">I")
WRITE_BUFFER: Final = 1024 * 1024
"""Bytes a :class:`SegmentWriter` gathers before writing them out."""


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """What a segment says about itself."""

    universe: UniverseId
    world: WorldId
    start: int
    end: int

    @property
    def count(self) -> int:
        """Entries in the segment."""
        return self.end - self.start + 1

    def to_cbor(self) -> bytes:
        """The canonical header map."""
        return cbor.encode(
            {
                "universe": self.universe.uuid.bytes,
                "world": self.world.uuid.bytes,
                "start": self.start,
                "end": self.end,
                "count": self.count,
                "checksum": CHECKSUM_ALGORITHM,
            }
        )


segment_key: Final = segment_index.object_key
"""``segments/<universe>/<world>/<start>-<end>.log`` with 20-digit zero-padded heights, so
listing order is height order (defined with the index, which checks every record names it)."""


class SegmentWriter:
    """Writes one segment to a binary stream, entry by entry, computing the checksum.

    Small writes are gathered and passed to ``out`` (and the checksum) in runs of about
    :data:`WRITE_BUFFER` bytes, so ``out`` holds the whole segment only after :meth:`finish`;
    an entry of at least that size is written through without being copied. ``size`` counts
    every byte added so far, buffered or not."""

    def __init__(self, out: BinaryIO, header: SegmentHeader) -> None:
        if not 1 <= header.start <= header.end:
            raise Validation("segment", f"bad range {header.start}-{header.end}")
        self._out = out
        self._header = header
        self._hash = blake3.blake3()
        self._next = header.start
        encoded = header.to_cbor()
        self._buffer = bytearray(_PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(encoded)) + encoded)
        self.size = len(self._buffer)

    def _flush(self) -> None:
        """Write out and hash the gathered bytes."""
        if self._buffer:
            data, self._buffer = self._buffer, bytearray()  # ``out`` may keep ``data``
            self._out.write(data)
            self._hash.update(data)

    def add(self, height: int, entry: bytes) -> None:
        """Append the entry at ``height`` (heights must arrive in order, without gaps)."""
        if height != self._next or height > self._header.end:
            raise Validation("segment entry", f"height {height}, expected {self._next}")
        if len(entry) > MAX_ENTRY:
            raise Validation("segment entry", f"{len(entry)} bytes > {MAX_ENTRY}")
        buffer = self._buffer
        buffer += _LENGTH.pack(len(entry))
        if len(entry) >= WRITE_BUFFER:
            self._flush()
            self._out.write(entry)
            self._hash.update(entry)
        else:
            buffer += entry
            if len(buffer) >= WRITE_BUFFER:
                self._flush()
        self.size += _LENGTH.size + len(entry)
        self._next += 1

    def finish(self) -> bytes:
        """Write the trailer; return the checksum. Every height must have been added."""
        if self._next != self._header.end + 1:
            raise Validation(
                "segment", f"finished at height {self._next - 1}, not {self._header.end}"
            )
        self._flush()
        digest = self._hash.digest()
        self._out.write(TRAILER_MAGIC + digest)
        self.size += len(TRAILER_MAGIC) + len(digest)
        return digest


class _Source:
    """Reads exactly, hashing, and knows its offset (for error messages)."""

    def __init__(self, stream: BinaryIO, key: str) -> None:
        self.stream = stream
        self.key = key
        self.offset = 0
        self.hash = blake3.blake3()

    def take(self, n: int, what: str, *, hashed: bool = True) -> bytes:
        data = self.stream.read(n)
        while len(data) < n:
            more = self.stream.read(n - len(data))
            if not more:
                raise SegmentCorruption(
                    self.key, self.offset + len(data), f"truncated: {what} needs {n} bytes"
                )
            data += more
        if hashed:
            self.hash.update(data)
        self.offset += n
        return data

    def fail(self, problem: str) -> SegmentCorruption:
        return SegmentCorruption(self.key, self.offset, problem)


def _read_header(src: _Source) -> SegmentHeader:
    magic, version, length = _PREAMBLE.unpack(src.take(_PREAMBLE.size, "preamble"))
    if magic != MAGIC:
        raise SegmentCorruption(src.key, 0, f"bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise SegmentCorruption(src.key, 8, f"unsupported format version {version}")
    if length > MAX_HEADER:
        raise SegmentCorruption(src.key, 10, f"header length {length} > {MAX_HEADER}")
    raw = src.take(length, "header")
    try:
        fields = cbor.decode(raw)
    except cbor.NotCanonical as exc:
        raise src.fail(f"header is not canonical CBOR: {exc}") from None
    expected = {"universe", "world", "start", "end", "count", "checksum"}
    if not isinstance(fields, dict) or set(fields) != expected:
        raise src.fail("header fields are wrong")
    try:
        header = SegmentHeader(
            UniverseId(uuid.UUID(bytes=fields["universe"])),
            WorldId(uuid.UUID(bytes=fields["world"])),
            fields["start"],
            fields["end"],
        )
    except (TypeError, ValueError) as exc:
        raise src.fail(f"header values are wrong: {exc}") from None
    if not (isinstance(header.start, int) and isinstance(header.end, int)):
        raise src.fail("header range is not integers")
    if not 1 <= header.start <= header.end or fields["count"] != header.count:
        raise src.fail(f"header range {header.start}-{header.end} / count {fields['count']}")
    if fields["checksum"] != CHECKSUM_ALGORITHM:
        raise src.fail(f"unsupported checksum algorithm {fields['checksum']!r}")
    return header


class SegmentReader:
    """Streams ``(height, entry)`` pairs out of a segment, validating as it goes.

    The header is read and checked on construction (against ``expect``, from the segment
    index, when given). The checksum is only known at the end: a consumer must treat what it
    received as unverified until iteration finishes without error; ``checksum`` is then set.
    Every failure raises :class:`SegmentCorruption` naming the object key and offset."""

    def __init__(self, stream: BinaryIO, key: str, expect: SegmentHeader | None = None) -> None:
        self._src = _Source(stream, key)
        self.key = key
        self.header = _read_header(self._src)
        self.checksum: bytes | None = None
        self.size: int | None = None
        """Bytes of the whole object, set with ``checksum``."""
        if expect is not None and expect != self.header:
            raise SegmentCorruption(
                key,
                0,
                f"header says {self.header.world} {self.header.start}-{self.header.end}, "
                f"index says {expect.world} {expect.start}-{expect.end}",
            )

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        src = self._src
        for height in range(self.header.start, self.header.end + 1):
            (length,) = _LENGTH.unpack(src.take(_LENGTH.size, f"length of entry {height}"))
            if length > MAX_ENTRY:
                raise src.fail(f"entry {height} length {length} > {MAX_ENTRY}")
            yield height, src.take(length, f"entry {height}")
        computed = src.hash.digest()
        trailer = src.take(len(TRAILER_MAGIC), "trailer", hashed=False)
        if trailer != TRAILER_MAGIC:
            raise src.fail(f"bad trailer magic {trailer!r} (more entries than the header says?)")
        stored = src.take(DIGEST_SIZE, "checksum", hashed=False)
        if stored != computed:
            raise SegmentChecksumMismatch(
                self.key, src.offset - DIGEST_SIZE, stored.hex(), computed.hex()
            )
        if src.stream.read(1):
            raise src.fail("trailing bytes after the checksum")
        self.checksum = stored
        self.size = src.offset

    def verify(self) -> bytes:
        """Read to the end without keeping entries; return the verified checksum."""
        for _ in self:
            pass
        assert self.checksum is not None
        return self.checksum


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    """A whole segment verified in memory. ``starts[i]`` is the offset in ``data`` of entry
    ``i``'s 4-byte length (entry ``i`` is at height ``header.start + i``) and ``starts[-1]``
    the end of the last entry, so entry ``i`` is ``data[starts[i] + 4 : starts[i + 1]]``:
    length-prefixed values in one buffer, which Arrow can slice without a Python loop."""

    header: SegmentHeader
    checksum: bytes
    data: bytes
    starts: list[int]

    def entry(self, index: int) -> bytes:
        """Entry ``index`` (0-based)."""
        return self.data[self.starts[index] + _LENGTH.size : self.starts[index + 1]]


def decode_segment(data: bytes, key: str, expect: SegmentHeader | None = None) -> DecodedSegment:
    """Verify and index a segment held whole in memory: the checksum is checked before any
    entry is looked at, so nothing unverified is ever returned. The fast path for readers
    that fetch whole objects (the Spark source); :class:`SegmentReader` streams instead.
    Every failure raises :class:`SegmentCorruption` naming ``key`` and the offset."""
    src = _Source(io.BytesIO(data), key)
    header = _read_header(src)
    if expect is not None and expect != header:
        raise SegmentCorruption(
            key,
            0,
            f"header says {header.world} {header.start}-{header.end}, "
            f"expected {expect.world} {expect.start}-{expect.end}",
        )
    body_end = len(data) - len(TRAILER_MAGIC) - DIGEST_SIZE
    if body_end < src.offset:
        raise SegmentCorruption(key, len(data), "truncated: no room for the trailer")
    stored = data[body_end + len(TRAILER_MAGIC) :]
    computed = blake3.blake3(memoryview(data)[:body_end]).digest()
    if data[body_end : body_end + len(TRAILER_MAGIC)] != TRAILER_MAGIC or stored != computed:
        raise SegmentChecksumMismatch(
            key, body_end + len(TRAILER_MAGIC), stored.hex(), computed.hex()
        )
    unpack, size = _LENGTH.unpack_from, _LENGTH.size
    pos = src.offset
    starts = []
    for height in range(header.start, header.end + 1):
        if pos + size > body_end:
            raise SegmentCorruption(key, pos, f"truncated: length of entry {height}")
        starts.append(pos)
        (length,) = unpack(data, pos)
        if length > MAX_ENTRY:
            raise SegmentCorruption(key, pos, f"entry {height} length {length} > {MAX_ENTRY}")
        pos += size + length
    if pos != body_end:
        raise SegmentCorruption(
            key, min(pos, body_end), "entries do not end where the trailer starts"
        )
    starts.append(pos)
    return DecodedSegment(header, stored, data, starts)
