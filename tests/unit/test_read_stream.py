"""``ReadStream``: the one raw-stream base of the object bodies, CAS reads and segments."""

from __future__ import annotations

import hashlib
import io

import pytest

from persistence.errors import CasBodyHashMismatch
from persistence.ids import Hash
from persistence.objects import COPY_CHUNK, ReadStream
from persistence.plane.cas import VerifyingReader


class Counted(ReadStream):
    """Reads ``data`` in pieces of at most 7 bytes, counting the reads and the releases."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.reads: list[int] = []
        self.released = 0

    def _read(self, n: int) -> bytes:
        self.reads.append(n)
        return self._data.read(min(n, 7))

    def _release(self) -> None:
        self.released += 1


def test_read_readinto_and_readall_all_go_through_read() -> None:
    stream = Counted(b"0123456789" * 3)
    assert stream.read(4) == b"0123"
    buffer = bytearray(5)
    assert stream.readinto(buffer) == 5 and bytes(buffer) == b"45678"
    assert stream.read() == b"9" + b"0123456789" * 2
    assert stream.read(3) == b""
    assert stream.reads[:2] == [4, 5] and set(stream.reads[2:]) == {COPY_CHUNK, 3}


def test_a_read_of_nothing_reads_nothing_and_close_releases_once() -> None:
    stream = Counted(b"abc")
    assert stream.read(0) == b"" and stream.readinto(bytearray()) == 0
    assert stream.reads == []
    stream.close()
    stream.close()
    assert stream.released == 1 and stream.closed
    with pytest.raises(ValueError):
        stream.read(1)


def test_a_verifying_reader_checks_the_body_at_its_end_not_at_a_read_of_nothing() -> None:
    body = b"x" * 1000
    good = Hash(hashlib.sha256(body).digest())
    reader = VerifyingReader(io.BytesIO(body), good, len(body), "cas/test")
    assert reader.read(0) == b""  # no end reached, so nothing checked yet
    assert reader.read() == body
    bad = VerifyingReader(io.BytesIO(body[:-1]), good, len(body), "cas/test")
    with pytest.raises(CasBodyHashMismatch):
        bad.read()
