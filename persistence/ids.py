"""Identifiers: universes, worlds, content hashes, journal heights, inbox sequences, segments.

All are frozen, slotted value types. ``parse`` functions accept the external (text) form and
raise :class:`~persistence.errors.Validation` naming the field on malformed input.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Final

from persistence.errors import Validation

MAX_HEIGHT: Final = 2**64 - 1
"""Journal heights are u64; height 0 means "empty journal"."""


def check_height(value: object, field: str = "height", *, allow_zero: bool = True) -> int:
    """Return ``value`` if it is a valid journal height (u64), else raise ``Validation``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Validation(field, f"expected an integer height, got {type(value).__name__}")
    low = 0 if allow_zero else 1
    if not low <= value <= MAX_HEIGHT:
        raise Validation(field, f"height {value} outside [{low}, 2**64-1]")
    return value


def _parse_uuid(text: object, field: str) -> uuid.UUID:
    if isinstance(text, uuid.UUID):
        return text
    if not isinstance(text, str):
        raise Validation(field, f"expected a UUID string, got {type(text).__name__}")
    try:
        return uuid.UUID(text)
    except ValueError:
        raise Validation(field, f"not a UUID: {text[:64]!r}") from None


@dataclass(frozen=True, slots=True, order=True)
class UniverseId:
    """A universe: the scope of a CAS and a set of worlds."""

    uuid: uuid.UUID

    @classmethod
    def parse(cls, text: object) -> UniverseId:
        """Parse the canonical UUID text form."""
        return cls(_parse_uuid(text, "universe"))

    @classmethod
    def new(cls) -> UniverseId:
        """A fresh random universe id."""
        return cls(uuid.uuid4())

    def __str__(self) -> str:
        return str(self.uuid)


@dataclass(frozen=True, slots=True, order=True)
class WorldId:
    """A world inside a universe: one journal, one inbox, one snapshot index."""

    uuid: uuid.UUID

    @classmethod
    def parse(cls, text: object) -> WorldId:
        """Parse the canonical UUID text form."""
        return cls(_parse_uuid(text, "world"))

    @classmethod
    def new(cls) -> WorldId:
        """A fresh random world id."""
        return cls(uuid.uuid4())

    def __str__(self) -> str:
        return str(self.uuid)


@dataclass(frozen=True, slots=True, order=True)
class Hash:
    """A SHA-256 content hash (32 bytes). Text form: 64 lowercase hex digits."""

    digest: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.digest, bytes) or len(self.digest) != 32:
            raise Validation("hash", "a sha256 digest is exactly 32 bytes")

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview) -> Hash:
        """The SHA-256 of ``data``, computed here (never taken from a caller)."""
        return cls(hashlib.sha256(data).digest())

    @classmethod
    def parse(cls, text: object, field: str = "hash") -> Hash:
        """Parse 64 hex digits (an optional ``sha256:`` prefix is accepted)."""
        if not isinstance(text, str):
            raise Validation(field, f"expected hex text, got {type(text).__name__}")
        body = text.removeprefix("sha256:")
        if len(body) != 64:
            raise Validation(field, f"sha256 hex is 64 digits, got {len(body)}")
        try:
            return cls(bytes.fromhex(body))
        except ValueError:
            raise Validation(field, f"not hexadecimal: {body[:64]!r}") from None

    @property
    def hex(self) -> str:
        """64 lowercase hex digits."""
        return self.digest.hex()

    def __str__(self) -> str:
        return self.digest.hex()


INBOX_SEQ_LEN: Final = 12
"""Versionstamp (8-byte commit version, 2-byte batch order) plus 2-byte user version."""


@dataclass(frozen=True, slots=True, order=True)
class InboxSeq:
    """A commit-ordered inbox sequence: opaque bytes whose byte order is commit order.

    On every engine it is a complete FoundationDB versionstamp: 8-byte commit version and
    2-byte batch order (assigned at commit) followed by a 2-byte user version that orders
    several items enqueued in one transaction. Text form: 24 hex digits.
    """

    raw: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != INBOX_SEQ_LEN:
            raise Validation("inbox_seq", f"an inbox sequence is exactly {INBOX_SEQ_LEN} bytes")

    @classmethod
    def parse(cls, text: object, field: str = "inbox_seq") -> InboxSeq:
        """Parse the 24-hex-digit text form."""
        if not isinstance(text, str) or len(text) != 2 * INBOX_SEQ_LEN:
            raise Validation(field, f"an inbox sequence is {2 * INBOX_SEQ_LEN} hex digits")
        try:
            return cls(bytes.fromhex(text))
        except ValueError:
            raise Validation(field, f"not hexadecimal: {text!r}") from None

    @property
    def commit_version(self) -> int:
        """The engine commit version that assigned this sequence."""
        return int.from_bytes(self.raw[:8], "big")

    def __str__(self) -> str:
        return self.raw.hex()


@dataclass(frozen=True, slots=True, order=True)
class SegmentId:
    """An inclusive journal height range ``[start, end]`` held by one cold segment."""

    start: int
    end: int

    def __post_init__(self) -> None:
        check_height(self.start, "segment.start", allow_zero=False)
        check_height(self.end, "segment.end", allow_zero=False)
        if self.end < self.start:
            raise Validation("segment", f"end {self.end} is below start {self.start}")

    @classmethod
    def parse(cls, text: object) -> SegmentId:
        """Parse ``"<start>-<end>"``."""
        if not isinstance(text, str) or text.count("-") != 1:
            raise Validation("segment", "expected '<start>-<end>'")
        start, end = text.split("-")
        if not (start.isdigit() and end.isdigit()):
            raise Validation("segment", f"expected decimal heights, got {text[:64]!r}")
        return cls(int(start), int(end))

    @property
    def count(self) -> int:
        """Number of heights in the range."""
        return self.end - self.start + 1

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"
