"""Identifiers: universes, worlds, content hashes, journal heights, inbox sequences, segments.

All are frozen, slotted value types that check their value at construction, so an id that
exists is well formed. ``parse`` functions accept the one documented external (text) form and
raise :class:`~persistence.errors.Validation` naming the field on anything else. The
``check_*`` functions are what the plane calls on each argument of a public call.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from typing import Final, TypeVar

from persistence.errors import Validation
from persistence.fdbtuple import INCOMPLETE

_HEX: Final = re.compile("[0-9a-f]*", re.ASCII | re.IGNORECASE)
_SEGMENT_TEXT: Final = re.compile("[1-9][0-9]{0,19}-[1-9][0-9]{0,19}", re.ASCII)
"""Heights without signs, spaces, leading zeros or non-ASCII digits: one spelling per range."""

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


_UUID_TEXT: Final = re.compile(
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII | re.IGNORECASE
)
"""The one text form of a universe or world id: 8-4-4-4-12 ASCII hex digits (either case).
``uuid.UUID`` also takes braces, ``urn:uuid:``, missing dashes and non-ASCII digits; two
spellings of one id would be two ids to every tool that compares text."""


def _parse_uuid(text: object, field: str) -> uuid.UUID:
    if not isinstance(text, str):
        raise Validation(field, f"expected UUID text, got {type(text).__name__}")
    if _UUID_TEXT.fullmatch(text) is None:
        raise Validation(
            field, f"expected 8-4-4-4-12 hexadecimal digits (36 characters), not {text[:64]!r}"
        )
    return uuid.UUID(text)


def _check_uuid(value: object, field: str) -> None:
    if type(value) is not uuid.UUID:
        raise Validation(field, f"expected a uuid.UUID, got {type(value).__name__}")


@dataclass(frozen=True, slots=True, order=True)
class UniverseId:
    """A universe: the scope of a CAS and a set of worlds."""

    uuid: uuid.UUID

    def __post_init__(self) -> None:
        _check_uuid(self.uuid, "universe")

    def __hash__(self) -> int:
        # As the generated hash (equal ids, equal hashes) in one call: that one hashes a
        # tuple holding the UUID, whose own __hash__ is Python code. Ids key hot caches.
        return hash(self.uuid.int)

    @classmethod
    def parse(cls, text: object) -> UniverseId:
        """Parse the canonical text form: 8-4-4-4-12 hex digits (either case)."""
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

    def __post_init__(self) -> None:
        _check_uuid(self.uuid, "world")

    def __hash__(self) -> int:
        # As the generated hash (equal ids, equal hashes) in one call: that one hashes a
        # tuple holding the UUID, whose own __hash__ is Python code. Ids key hot caches.
        return hash(self.uuid.int)

    @classmethod
    def parse(cls, text: object) -> WorldId:
        """Parse the canonical text form: 8-4-4-4-12 hex digits (either case)."""
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
        if type(self.digest) is not bytes or len(self.digest) != 32:
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
        if _HEX.fullmatch(body) is None:
            raise Validation(field, f"not hexadecimal: {body[:64]!r}")
        return cls(bytes.fromhex(body))

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
        if type(self.raw) is not bytes or len(self.raw) != INBOX_SEQ_LEN:
            raise Validation("inbox_seq", f"an inbox sequence is exactly {INBOX_SEQ_LEN} bytes")
        if self.raw[:10] == INCOMPLETE:
            # The engines' placeholder for "stamp me at commit": no commit assigns it.
            raise Validation("inbox_seq", "an incomplete versionstamp (ten 0xff bytes)")

    @classmethod
    def parse(cls, text: object, field: str = "inbox_seq") -> InboxSeq:
        """Parse the 24-hex-digit text form."""
        if not isinstance(text, str) or len(text) != 2 * INBOX_SEQ_LEN:
            raise Validation(field, f"an inbox sequence is {2 * INBOX_SEQ_LEN} hex digits")
        if _HEX.fullmatch(text) is None:
            raise Validation(field, f"not hexadecimal: {text!r}")
        try:
            return cls(bytes.fromhex(text))
        except Validation as exc:
            raise Validation(field, exc.problem) from None

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
        if not isinstance(text, str) or _SEGMENT_TEXT.fullmatch(text) is None:
            raise Validation(
                "segment", f"expected '<start>-<end>' in plain decimal, not {str(text)[:64]!r}"
            )
        start, end = text.split("-")
        return cls(int(start), int(end))

    @property
    def count(self) -> int:
        """Number of heights in the range."""
        return self.end - self.start + 1

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"


IdT = TypeVar("IdT", UniverseId, WorldId, Hash, InboxSeq)


def check_id(value: object, kind: type[IdT], field: str) -> IdT:
    """Return ``value`` if it is a ``kind`` (a constructed id is well formed), else raise
    ``Validation`` naming ``field``: a caller passing text or a raw UUID gets told to parse."""
    if not isinstance(value, kind):
        raise Validation(
            field,
            f"expected a {kind.__name__} (parse text with {kind.__name__}.parse), "
            f"got {type(value).__name__}",
        )
    return value
