"""Stored records: CAS metadata, snapshots, segments, world meta, inbox items, journal records.

Each record is a frozen, slotted dataclass stored as a canonical CBOR map with text keys.
A record's fields are declared once, with a :class:`Codec` in the field's metadata; the
generic :func:`encode_record` / :func:`decode_record` turn records into bytes and back.
Optional fields that are ``None`` are omitted from the map (so adding an optional field
later does not change the bytes of existing records).

Decoding is strict: unknown keys, missing required keys, wrong types and non-canonical
bytes are refused. ``from_cbor`` is for stored bytes (a failure is
:class:`~persistence.errors.CorruptRecord`); constructors validate caller input (a failure
is :class:`~persistence.errors.Validation`).

Records that share a map shape (the inbox item union, the journal record union) carry a
``"kind"`` discriminator.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self, TypeVar, Union

from persistence import cbor
from persistence.errors import CorruptRecord, Validation
from persistence.ids import INBOX_SEQ_LEN, MAX_HEIGHT, Hash, InboxSeq, WorldId

# --------------------------------------------------------------------------- field codecs


@dataclass(frozen=True, slots=True)
class Codec:
    """How one field is checked, stored and loaded."""

    name: str
    check: Callable[[Any, str], Any]
    store: Callable[[Any], Any] = lambda value: value
    load: Callable[[Any], Any] = lambda value: value


def _uint(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HEIGHT:
        raise Validation(where, "expected an unsigned 64-bit integer")
    return value


def _bytes(value: Any, where: str) -> bytes:
    if not isinstance(value, bytes):
        raise Validation(where, f"expected bytes, got {type(value).__name__}")
    return value


def _utf8(value: str, where: str) -> str:
    """``value`` if it encodes as UTF-8: a lone surrogate cannot be stored as CBOR text."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raise Validation(where, "not encodable as UTF-8 (a lone surrogate)") from None
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Validation(where, f"expected text, got {type(value).__name__}")
    if not value:
        raise Validation(where, "must not be empty")
    return _utf8(value, where)


def _cbor(value: Any, where: str) -> bytes:
    return cbor.check_canonical(value, where)


def _hash(value: Any, where: str) -> Hash:
    if not isinstance(value, Hash):
        raise Validation(where, f"expected a Hash, got {type(value).__name__}")
    return value


def _hash_load(value: Any) -> Hash:
    if not isinstance(value, bytes) or len(value) != 32:
        raise Validation("hash", "a sha256 digest is exactly 32 bytes")
    return Hash(value)


def _seq(value: Any, where: str) -> InboxSeq:
    if not isinstance(value, InboxSeq):
        raise Validation(where, f"expected an InboxSeq, got {type(value).__name__}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise Validation(where, f"expected a boolean, got {type(value).__name__}")
    return value


def _text_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise Validation(where, f"expected a text-to-text map, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise Validation(where, "expected a text-to-text map")
        _utf8(key, where)
        _utf8(item, where)
    return dict(value)


U64: Final = Codec("u64", _uint)
BOOL: Final = Codec("bool", _bool)
BYTES: Final = Codec("bytes", _bytes)
TEXT: Final = Codec("text", _text)
CBOR: Final = Codec("cbor", _cbor)
HASH: Final = Codec("hash", _hash, store=lambda h: h.digest, load=_hash_load)
SEQ: Final = Codec("seq", _seq, store=lambda s: s.raw, load=lambda raw: InboxSeq(raw))


def _world(value: Any, where: str) -> WorldId:
    if not isinstance(value, WorldId):
        raise Validation(where, f"expected a WorldId, got {type(value).__name__}")
    return value


def _world_load(value: Any) -> WorldId:
    if not isinstance(value, bytes) or len(value) != 16:
        raise Validation("world", "a world id is 16 bytes")
    return WorldId(uuid.UUID(bytes=value))


WORLD: Final = Codec("world", _world, store=lambda w: w.uuid.bytes, load=_world_load)
TEXT_MAP: Final = Codec("text_map", _text_map)


def _f(codec: Codec) -> Any:
    """A required field with ``codec``."""
    return field(metadata={"codec": codec})


def _opt(codec: Codec) -> Any:
    """An optional field with ``codec`` (omitted from the stored map when ``None``)."""
    return field(default=None, metadata={"codec": codec})


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    codec: Codec
    required: bool
    where: str


_SCHEMAS: dict[type, tuple[_Field, ...]] = {}


def _schema(cls: type) -> tuple[_Field, ...]:
    """The fields of a record class, computed once per class (records are on hot paths)."""
    schema = _SCHEMAS.get(cls)
    if schema is None:
        schema = tuple(
            _Field(
                f.name,
                f.metadata["codec"],
                f.default is dataclasses.MISSING,
                f"{cls.__name__}.{f.name}",
            )
            for f in dataclasses.fields(cls)
        )
        _SCHEMAS[cls] = schema
    return schema


_ALLOWED: dict[type, frozenset[str]] = {}


def _allowed_keys(cls: type) -> frozenset[str]:
    """Map keys a stored record of ``cls`` may have (computed once per class)."""
    allowed = _ALLOWED.get(cls)
    if allowed is None:
        names = frozenset(f.name for f in _schema(cls))
        allowed = names | {"kind"} if getattr(cls, "KIND", None) is not None else names
        _ALLOWED[cls] = allowed
    return allowed


class Record:
    """Base of stored records: validation on construction, canonical CBOR both ways."""

    __slots__ = ()
    KIND: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        for f in _schema(type(self)):
            value = getattr(self, f.name)
            if value is not None or f.required:
                checked = f.codec.check(value, f.where)
                if checked is not value:
                    object.__setattr__(self, f.name, checked)

    def to_map(self) -> dict[str, Any]:
        """The record as a CBOR-ready map (with ``"kind"`` for union members)."""
        out: dict[str, Any] = {} if self.KIND is None else {"kind": self.KIND}
        for f in _schema(type(self)):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = f.codec.store(value)
        return out

    def to_cbor(self) -> bytes:
        """Canonical CBOR bytes of the record (fields were validated on construction, so the
        map is inside the canonical model by construction)."""
        return cbor.encode_checked(self.to_map())

    @classmethod
    def from_cbor(cls, data: bytes) -> Self:
        """Strictly decode stored bytes (``CorruptRecord`` if they are not such a record)."""
        return decode_record(cls, data)


R = TypeVar("R", bound=Record)


def record_from_map(cls: type[R], value: Any, what: str) -> R:
    """Build ``cls`` from a decoded map, refusing unknown, missing or mistyped fields."""
    if not isinstance(value, dict):
        raise CorruptRecord(what, f"expected a map, got {type(value).__name__}")
    schema = _schema(cls)
    expected_kind = cls.KIND
    extra = value.keys() - _allowed_keys(cls)
    if extra:
        raise CorruptRecord(what, f"unknown field(s) {sorted(map(str, extra))}")
    if expected_kind is not None and value.get("kind") != expected_kind:
        raise CorruptRecord(what, f"kind {value.get('kind')!r}, expected {expected_kind!r}")
    kwargs: dict[str, Any] = {}
    for f in schema:
        if f.name not in value:
            if f.required:
                raise CorruptRecord(what, f"missing field {f.name!r}")
            continue
        try:
            kwargs[f.name] = f.codec.load(value[f.name])
        except (Validation, ValueError, TypeError) as exc:
            raise CorruptRecord(what, f"field {f.name!r}: {exc}") from None
    try:
        return cls(**kwargs)
    except Validation as exc:
        raise CorruptRecord(what, str(exc)) from None


def decode_record(cls: type[R], data: bytes, what: str | None = None) -> R:
    """Strictly decode stored bytes as ``cls`` (a failure is ``CorruptRecord``)."""
    label = what or cls.__name__
    return record_from_map(cls, cbor.decode_stored(data, label), label)


# --------------------------------------------------------------------------- plane records


@dataclass(frozen=True, slots=True)
class CasMeta(Record):
    """``cas/meta/<hash>``: where a blob's body lives. Exactly one of the two is set."""

    size: int = _f(U64)
    inline_bytes: bytes | None = _opt(BYTES)
    object_key: str | None = _opt(TEXT)

    def __post_init__(self) -> None:
        Record.__post_init__(self)
        if (self.inline_bytes is None) == (self.object_key is None):
            raise Validation("CasMeta", "exactly one of inline_bytes and object_key is set")
        if self.inline_bytes is not None and len(self.inline_bytes) != self.size:
            raise Validation("CasMeta.size", "does not match the inline body length")

    @property
    def storage(self) -> str:
        """``"inline"`` or ``"object"``."""
        return "inline" if self.inline_bytes is not None else "object"


@dataclass(frozen=True, slots=True)
class CasPin(Record):
    """``cas/pin/<hash>/<put_id>``: a put of an external body in flight since ``at_ns`` (its
    clock). While a pin is younger than the collection grace, the body is not collected
    (``protocols/cas_bodies.py``)."""

    at_ns: int = _f(U64)


@dataclass(frozen=True, slots=True)
class CasDoom(Record):
    """``cas/doomed/<hash>``: a collector decided at ``at_ns`` to delete the unreferenced
    body of ``hash``; ``token`` names that collector's attempt; once its DELETE call returned,
    ``settled_ns`` is when no request of it can still land. Puts of the hash wait until it
    is cleared (``protocols/cas_bodies.py``)."""

    at_ns: int = _f(U64)
    token: bytes = _f(BYTES)
    settled_ns: int | None = _opt(U64)


@dataclass(frozen=True, slots=True)
class SnapshotRecord(Record):
    """``snapshot/by_height/<h>`` and ``baseline/active``: one kernel snapshot in CAS."""

    snapshot_ref: Hash = _f(HASH)
    height: int = _f(U64)
    logical_time_ns: int = _f(U64)
    manifest_hash: Hash = _f(HASH)
    receipt_horizon_height: int | None = _opt(U64)


@dataclass(frozen=True, slots=True)
class SegmentIndexRecord(Record):
    """``segments/<world>/<end>``: one immutable cold segment object."""

    start: int = _f(U64)
    end: int = _f(U64)
    object_key: str = _f(TEXT)
    checksum_algorithm: str = _f(TEXT)
    checksum: bytes = _f(BYTES)
    entry_count: int = _f(U64)
    byte_size: int = _f(U64)

    def __post_init__(self) -> None:
        Record.__post_init__(self)
        if not 1 <= self.start <= self.end:
            raise Validation("SegmentIndexRecord", f"bad range {self.start}-{self.end}")
        if self.entry_count != self.end - self.start + 1:
            raise Validation("SegmentIndexRecord.entry_count", "does not match the range")


@dataclass(frozen=True, slots=True)
class WorldMeta(Record):
    """``w/<world>/meta``: written once at world creation."""

    created_ns: int = _f(U64)
    handle: str | None = _opt(TEXT)


# --------------------------------------------------------------------------- inbox items


@dataclass(frozen=True, slots=True)
class DomainEventIngress(Record):
    """A domain event addressed to the world (optionally keyed)."""

    KIND: ClassVar[str | None] = "domain_event"
    schema: str = _f(TEXT)
    value_cbor: bytes = _f(CBOR)
    key: bytes | None = _opt(BYTES)


@dataclass(frozen=True, slots=True)
class ReceiptIngress(Record):
    """An effect adapter's signed receipt for an intent."""

    KIND: ClassVar[str | None] = "receipt"
    intent_hash: Hash = _f(HASH)
    effect_kind: str = _f(TEXT)
    adapter_id: str = _f(TEXT)
    payload_cbor: bytes = _f(CBOR)
    signature: bytes = _f(BYTES)


@dataclass(frozen=True, slots=True)
class InboxIngress(Record):
    """A message delivered to a named inbox of the world."""

    KIND: ClassVar[str | None] = "inbox"
    inbox_name: str = _f(TEXT)
    payload_cbor: bytes = _f(CBOR)
    headers: dict[str, str] | None = _opt(TEXT_MAP)


@dataclass(frozen=True, slots=True)
class TimerFiredIngress(Record):
    """A timer the world set has fired."""

    KIND: ClassVar[str | None] = "timer_fired"
    timer_id: str = _f(TEXT)
    payload_cbor: bytes = _f(CBOR)


@dataclass(frozen=True, slots=True)
class ControlIngress(Record):
    """An operator or host control command."""

    KIND: ClassVar[str | None] = "control"
    cmd: str = _f(TEXT)
    payload_cbor: bytes = _f(CBOR)


InboxItem = Union[  # noqa: UP007 -- a runtime alias used in isinstance checks
    DomainEventIngress, ReceiptIngress, InboxIngress, TimerFiredIngress, ControlIngress
]
INBOX_ITEM_TYPES: Final[tuple[type[Record], ...]] = (
    DomainEventIngress,
    ReceiptIngress,
    InboxIngress,
    TimerFiredIngress,
    ControlIngress,
)
_INBOX_BY_KIND: Final = {cls.KIND: cls for cls in INBOX_ITEM_TYPES}


def encode_inbox_item(item: InboxItem, field: str = "inbox_item") -> bytes:
    """Canonical bytes of an inbox item (with its ``kind``); ``Validation`` naming ``field``
    for anything else. An item of one of the item classes encodes canonically by
    construction; one of a subclass may encode itself otherwise, so its bytes are checked
    (callers build envelopes and journal records from these bytes unchecked)."""
    if not isinstance(item, INBOX_ITEM_TYPES):
        names = " or ".join(kind.__name__ for kind in INBOX_ITEM_TYPES)
        raise Validation(field, f"expected a {names}, got {type(item).__name__}")
    encoded = item.to_cbor()
    if type(item) not in INBOX_ITEM_TYPES:
        cbor.check_canonical(encoded, field)
    return encoded


def decode_inbox_item(data: bytes) -> InboxItem:
    """Strictly decode a stored inbox item."""
    return _inbox_item(cbor.decode_stored(data, "inbox item"))


def _inbox_item(value: Any) -> InboxItem:
    """The inbox item of a strictly decoded CBOR value."""
    kind = value.get("kind") if isinstance(value, dict) else None
    cls = _INBOX_BY_KIND.get(kind)
    if cls is None:
        raise CorruptRecord("inbox item", f"unknown kind {kind!r}")
    return record_from_map(cls, value, f"inbox item ({kind})")  # type: ignore[return-value]


# --------------------------------------------------------------------------- journal records


@dataclass(frozen=True, slots=True)
class _SnapshotAnnouncement(Record):
    """The fields of a :class:`SnapshotRecord`, as announced in the journal."""

    snapshot_ref: Hash = _f(HASH)
    height: int = _f(U64)
    logical_time_ns: int = _f(U64)
    manifest_hash: Hash = _f(HASH)
    receipt_horizon_height: int | None = _opt(U64)

    @classmethod
    def of(cls, record: SnapshotRecord) -> Self:
        """The journal record announcing ``record``."""
        return cls(
            record.snapshot_ref,
            record.height,
            record.logical_time_ns,
            record.manifest_hash,
            record.receipt_horizon_height,
        )


@dataclass(frozen=True, slots=True)
class SnapshotJournalRecord(_SnapshotAnnouncement):
    """Journal record written by snapshot commit (Protocol E step 3)."""

    KIND: ClassVar[str | None] = "snapshot"


@dataclass(frozen=True, slots=True)
class BaselineSnapshotJournalRecord(_SnapshotAnnouncement):
    """Journal record written when a snapshot is promoted to the active baseline."""

    KIND: ClassVar[str | None] = "baseline_snapshot"


@dataclass(frozen=True, slots=True)
class IngressJournalRecord(Record):
    """The default normalization of a drained inbox item: the item and its sequence."""

    KIND: ClassVar[str | None] = "ingress"
    seq: InboxSeq = _f(SEQ)
    item: bytes = _f(CBOR)


def ingress_bytes(seq: InboxSeq, item: bytes) -> bytes:
    """``IngressJournalRecord(seq, item).to_cbor()`` for ``item`` bytes its caller encoded
    from a checked record (canonical by construction): the same bytes, without decoding the
    item again to check it (every drained item is journaled so by default)."""
    return cbor.encode_checked({"kind": IngressJournalRecord.KIND, "seq": seq.raw, "item": item})


JournalRecord = Union[  # noqa: UP007 -- a runtime alias used in isinstance checks
    SnapshotJournalRecord, BaselineSnapshotJournalRecord, IngressJournalRecord
]
JOURNAL_RECORD_TYPES: Final[tuple[type[Record], ...]] = (
    SnapshotJournalRecord,
    BaselineSnapshotJournalRecord,
    IngressJournalRecord,
)
_JOURNAL_BY_KIND: Final = {cls.KIND: cls for cls in JOURNAL_RECORD_TYPES}


def decode_journal_record(data: bytes) -> JournalRecord | None:
    """Decode an entry the plane knows; ``None`` for a caller's own entry format.

    Journal entries are opaque to the plane except the record kinds it writes itself.
    An entry that is canonical CBOR with a known ``kind`` but the wrong fields is
    corrupt, not foreign.
    """
    try:
        value = cbor.decode(data)
    except cbor.NotCanonical:
        return None
    kind = value.get("kind") if isinstance(value, dict) else None
    cls = _JOURNAL_BY_KIND.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return None
    return record_from_map(cls, value, f"journal record ({kind})")  # type: ignore[return-value]


# --------------------------------------------------------------------------- plane bookkeeping


@dataclass(frozen=True, slots=True)
class LayoutRecord(Record):
    """``("layout",)``: the keyspace layout version the store was written with."""

    version: int = _f(U64)


@dataclass(frozen=True, slots=True)
class UniverseInfo(Record):
    """``u/<universe>/info``: written with the universe's first world."""

    created_ns: int = _f(U64)


@dataclass(frozen=True, slots=True)
class ColdHorizon(Record):
    """``export/horizon``: heights at or below ``height`` may be exported to cold segments
    whatever the active baseline (set by the world's owner; only rises)."""

    height: int = _f(U64)


@dataclass(frozen=True, slots=True)
class LogHead(Record):
    """``log/head``: the last position of the universe log (see ``protocols/journal.py``)."""

    position: int = _f(U64)


@dataclass(frozen=True, slots=True)
class LogRecord(Record):
    """``log/<position>``: the journal entry at a universe log position, and the tag the
    appender gave it (readers filter by tag)."""

    world: WorldId = _f(WORLD)
    height: int = _f(U64)
    tag: str = _f(TEXT)


def log_records(world: WorldId, first_height: int, tags: Sequence[str]) -> list[bytes]:
    """``[LogRecord(world, first_height + i, tag).to_cbor() for i, tag in enumerate(tags)]``,
    each distinct tag's record built and validated once: canonical CBOR orders map keys by
    length, so the height (``"height"``, the longest key) is encoded last, and the records
    of one world and tag differ only in its bytes."""
    heads: dict[str, bytes] = {}
    out: list[bytes] = []
    for height, tag in enumerate(tags, start=first_height):
        head = heads.get(tag)
        if head is None:
            head = heads[tag] = _log_record_head(world, tag)
        out.append(head + cbor.unsigned(height))
    return out


@functools.lru_cache(maxsize=4096)
def _log_record_head(world: WorldId, tag: str) -> bytes:
    """The bytes of ``LogRecord(world, height, tag)`` before the height's, kept for recent
    worlds and tags (an aggregate's events mostly share a few)."""
    return LogRecord(world, 0, tag).to_cbor()[:-1]  # less height 0


_LOG_TAG: Final = b"\xa3\x63tag"
"""How a stored log record begins: a map of three, its first key ``tag`` (canonical CBOR
orders keys by length)."""
_LOG_WORLD: Final = b"\x65world\x50"
_LOG_HEIGHT: Final = b"\x66height"
_TEXT_WIDTHS: Final = {0x78: 1, 0x79: 2}
"""CBOR heads of text strings of 24 bytes and more (a tag is at most 65,535), by the bytes
of their length."""


def decode_log_record(raw: bytes, what: str) -> LogRecord:
    """A stored :class:`LogRecord`, read at its fields' places where ``raw`` is exactly
    what :func:`log_records` writes -- checked by encoding the record again from the fields
    read and comparing, so that nothing else passes -- else by the strict decoder (whose
    ``CorruptRecord`` names what is wrong). The universe log is read a record per
    notification: the strict decoder's generic checks were most of its cost."""
    record = _log_record_at_places(raw)
    return record if record is not None else decode_record(LogRecord, raw, what)


def _log_record_at_places(raw: bytes) -> LogRecord | None:
    if not raw.startswith(_LOG_TAG) or len(raw) < 7:
        return None
    lead, at = raw[5], 6
    if 0x60 <= lead < 0x78:
        size = lead - 0x60
    elif lead in _TEXT_WIDTHS:
        at += _TEXT_WIDTHS[lead]
        size = int.from_bytes(raw[6:at], "big")
    else:
        return None
    world_at = at + size + len(_LOG_WORLD)
    height_at = world_at + 16 + len(_LOG_HEIGHT)
    if raw[at + size : world_at] != _LOG_WORLD or raw[world_at + 16 : height_at] != _LOG_HEIGHT:
        return None
    height = _unsigned_at(raw, height_at)
    if height < 0:
        return None
    try:
        tag = raw[at : at + size].decode("utf-8")
        record = LogRecord(_world_of(raw[world_at : world_at + 16]), height, tag)
        again = _log_record_head(record.world, tag) + cbor.unsigned(height)
    except (UnicodeDecodeError, Validation, cbor.NotCanonical):
        return None
    return record if again == raw else None


@functools.lru_cache(maxsize=4096)
def _world_of(raw: bytes) -> WorldId:
    """The world whose id's 16 bytes are ``raw``, kept for recent ones."""
    return _world_load(raw)


@dataclass(frozen=True, slots=True)
class TrackingRecord(Record):
    """``tracking/<name>``: the highest upstream position consumer ``name`` recorded with
    an append."""

    position: int = _f(U64)


@dataclass(frozen=True, slots=True)
class JournalHead(Record):
    """``journal/head``: the highest height."""

    height: int = _f(U64)


_UINT_WIDTHS: Final = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}
"""CBOR heads of unsigned integers of 24 and above, by the bytes that follow them."""


def _unsigned_at(raw: bytes, start: int) -> int:
    """The unsigned integer whose CBOR encoding is all of ``raw`` from ``start``, or -1 if
    those bytes are not one (the caller re-encodes it to refuse a longer head than needed)."""
    if start >= len(raw):
        return -1
    lead = raw[start]
    if lead < 24:
        return lead if len(raw) == start + 1 else -1
    if _UINT_WIDTHS.get(lead) == len(raw) - start - 1:
        return int.from_bytes(raw[start + 1 :], "big")
    return -1


class CounterCodec:
    """Stored bytes of a record whose one field is an unsigned integer (a head, a position),
    both ways, without building the record: canonical CBOR has one encoding per record, and
    such a record's is a constant prefix (the map head and the field's name) then the
    integer's encoding. Bytes are decoded by reading the integer after the prefix and
    checking that re-encoding it gives them back, so anything else -- damaged,
    non-canonical, another record -- goes to the strict decoder and its ``CorruptRecord``."""

    __slots__ = ("_field", "_prefix", "_record", "_start")

    def __init__(self, record: type[Record]) -> None:
        (only,) = _schema(record)
        self._record = record
        self._field = only.name
        self._prefix = record(**{only.name: 0}).to_cbor()[:-1]  # less the integer 0
        self._start = len(self._prefix)

    def encode(self, value: int) -> bytes:
        """The stored bytes of the record holding ``value`` (``Validation`` naming the
        field unless it is an unsigned 64-bit integer, as the record's)."""
        if type(value) is int and 0 <= value <= MAX_HEIGHT:
            return self._prefix + cbor.unsigned(value)
        return self._record(**{self._field: value}).to_cbor()  # raises

    def decode(self, raw: bytes, what: str) -> int:
        """The integer held by the stored bytes ``raw`` (``CorruptRecord`` unless they are
        exactly such a record's)."""
        start = self._start
        if raw[:start] == self._prefix:
            value = _unsigned_at(raw, start)
            if value >= 0 and self.encode(value) == raw:  # the shortest head only
                return value
        # Not such a record's bytes: the strict decoder names what is wrong with them.
        held: int = getattr(decode_record(self._record, raw, what), self._field)
        return held


@dataclass(frozen=True, slots=True)
class InboxCursor(Record):
    """``inbox/cursor``: the last drained (or skipped) sequence."""

    seq: InboxSeq = _f(SEQ)


@dataclass(frozen=True, slots=True)
class CallRecord(Record):
    """``calls/<call id>``: what one write call of the plane did, so that its retry after
    ``commit_unknown_result`` reports that instead of acting again (see ``protocols/calls.py``).
    ``op`` names the protocol; the other fields are its outcome."""

    op: str = _f(TEXT)
    first_height: int | None = _opt(U64)
    count: int | None = _opt(U64)
    seq: InboxSeq | None = _opt(SEQ)
    indexed: bool | None = _opt(BOOL)
    promoted: bool | None = _opt(BOOL)
    value: bytes | None = _opt(BYTES)


@dataclass(frozen=True, slots=True)
class InboxEnvelope(Record):
    """``inbox/e/<seq>``: an inbox item as enqueued, with its idempotency key (so the
    compactor can drop the key together with the item)."""

    item: bytes = _f(CBOR)
    idempotency_key: bytes | None = _opt(BYTES)


_ENVELOPE_FIELDS: Final = frozenset(("item", "idempotency_key"))

FINGERPRINT_BYTES: Final = 16
IDEMPOTENCY_ENTRY_BYTES: Final = INBOX_SEQ_LEN + FINGERPRINT_BYTES
"""``inbox/i/<key>``: the item's sequence, then the fingerprint of its stored envelope."""


def envelope_fingerprint(envelope: bytes) -> bytes:
    """What an idempotency entry keeps of the request it stands for: the first
    :data:`FINGERPRINT_BYTES` of the blake2b digest of the stored envelope (the item and
    its key)."""
    return hashlib.blake2b(envelope, digest_size=FINGERPRINT_BYTES).digest()


def idempotency_entry(value: bytes, what: str) -> tuple[InboxSeq, bytes | None]:
    """The sequence an idempotency entry names and the fingerprint it keeps (``None`` for an
    entry of :data:`INBOX_SEQ_LEN` bytes, written before entries kept one: any item matches
    it); ``CorruptRecord`` naming ``what`` for any other length."""
    if len(value) not in (INBOX_SEQ_LEN, IDEMPOTENCY_ENTRY_BYTES):
        raise CorruptRecord(
            what, f"{len(value)} bytes, not {INBOX_SEQ_LEN} or {IDEMPOTENCY_ENTRY_BYTES}"
        )
    try:
        seq = InboxSeq(value[:INBOX_SEQ_LEN])
    except Validation as exc:
        raise CorruptRecord(what, str(exc)) from None
    return seq, value[INBOX_SEQ_LEN:] or None


def envelope_item(data: bytes, what: str) -> InboxItem:
    """The inbox item of stored :class:`InboxEnvelope` bytes, strictly decoded: as
    ``decode_inbox_item(decode_record(InboxEnvelope, data, what).item)``, with the item
    decoded once (building the envelope would check it by decoding it first)."""
    value = cbor.decode_stored(data, what)
    if (
        type(value) is dict
        and type(value.get("item")) is bytes
        and type(value.get("idempotency_key", b"")) is bytes
        and value.keys() <= _ENVELOPE_FIELDS
    ):
        try:
            item = cbor.decode(value["item"])
        except cbor.NotCanonical as exc:  # as the envelope record's check of its item
            raise CorruptRecord(what, f"InboxEnvelope.item: {exc}") from None
        return _inbox_item(item)
    # Anything else: the record's own decoding names what is wrong, or accepts it.
    return decode_inbox_item(record_from_map(InboxEnvelope, value, what).item)


def envelope_bytes(item: bytes, idempotency_key: bytes | None) -> bytes:
    """``InboxEnvelope(item, idempotency_key).to_cbor()`` for an ``item`` its caller
    encoded from a checked record (so canonical by construction) and a checked key: the
    same bytes, without decoding the item again to check it (every enqueue builds one)."""
    if idempotency_key is None:
        return cbor.encode_checked({"item": item})
    return cbor.encode_checked({"item": item, "idempotency_key": idempotency_key})


@dataclass(frozen=True, slots=True)
class InboxConsumedMark(Record):
    """``inbox/consumed/<at_ns>``: the cursor as an inbox compactor read it at ``at_ns`` (its
    clock, in the key). The cursor only moves forward, so every item at or below ``seq`` was
    consumed at or before ``at_ns`` (see ``protocols/compaction.py``)."""

    seq: InboxSeq = _f(SEQ)


@dataclass(frozen=True, slots=True)
class InboxCompactionRecord(Record):
    """What one inbox compaction transaction removed and wrote, kept as its call record's
    ``value`` so that a retry after an applied ``commit_unknown_result`` reports it."""

    items: int = _f(U64)
    idempotency_entries: int = _f(U64)
    marks_written: int = _f(U64)
    marks_removed: int = _f(U64)
    more: bool = _f(BOOL)


# --------------------------------------------------------------------------- effects and timers


@dataclass(frozen=True, slots=True)
class EffectDispatchItem(Record):
    """``effects/pending/<seq>``: an effect intent waiting for a worker (consumed in P3)."""

    world: WorldId = _f(WORLD)
    intent_hash: Hash = _f(HASH)
    effect_kind: str = _f(TEXT)
    payload_cbor: bytes = _f(CBOR)


@dataclass(frozen=True, slots=True)
class EffectInFlightItem(Record):
    """``effects/inflight/<seq>``: an effect a worker has claimed."""

    world: WorldId = _f(WORLD)
    intent_hash: Hash = _f(HASH)
    effect_kind: str = _f(TEXT)
    payload_cbor: bytes = _f(CBOR)
    claimed_by: str = _f(TEXT)
    claimed_at_ns: int = _f(U64)


@dataclass(frozen=True, slots=True)
class TimerDueItem(Record):
    """``timers/due/<deliver_at_ns>/<intent_hash>``: a timer to fire into a world's inbox."""

    world: WorldId = _f(WORLD)
    intent_hash: Hash = _f(HASH)
    deliver_at_ns: int = _f(U64)
    payload_cbor: bytes = _f(CBOR)


# --------------------------------------------------------------------------- segment export


EXPORT_STATES: Final = ("copy_started", "copy_finished", "delete_started", "delete_finished")


def _export_state(value: Any, where: str) -> str:
    if value not in EXPORT_STATES:
        raise Validation(where, f"unknown export state {value!r}")
    return str(value)


EXPORT_STATE: Final = Codec("export_state", _export_state)


@dataclass(frozen=True, slots=True)
class ExportMarker(Record):
    """``w/<world>/export/marker``: the durable progress of the world's segment export
    (Protocol F), in the spirit of Kafka tiered storage's segment states. ``checksum`` and
    ``byte_size`` are known from ``copy_finished`` on; ``deleted_through`` is the highest
    height whose hot keys are gone."""

    state: str = _f(EXPORT_STATE)
    start: int = _f(U64)
    end: int = _f(U64)
    object_key: str = _f(TEXT)
    checksum: bytes | None = _opt(BYTES)
    byte_size: int | None = _opt(U64)
    deleted_through: int | None = _opt(U64)


JOURNAL_HEAD: Final = CounterCodec(JournalHead)
"""The bytes of ``journal/head`` records (:class:`JournalHead`)."""
LOG_HEAD: Final = CounterCodec(LogHead)
"""The bytes of ``log/head`` records (:class:`LogHead`)."""
TRACKING: Final = CounterCodec(TrackingRecord)
"""The bytes of ``tracking/<name>`` records (:class:`TrackingRecord`)."""
