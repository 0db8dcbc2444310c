"""Stored records: how they are declared and encoded, and the plane's general records.

Each record is a frozen, slotted dataclass stored as a canonical CBOR map with text keys.
A record's fields are declared once, with a :class:`Codec` in the field's metadata
(:func:`required`, :func:`optional`); the generic ``to_cbor`` / :func:`decode_record` turn
records into bytes and back. Optional fields that are ``None`` are omitted from the map (so
adding an optional field later does not change the bytes of existing records).
:class:`CounterCodec` writes and reads the bytes of a record whose one field is an unsigned
integer without building it.

Decoding is strict: unknown keys, missing required keys, wrong types and non-canonical
bytes are refused. ``from_cbor`` is for stored bytes (a failure is
:class:`~persistence.errors.CorruptRecord`); constructors validate caller input (a failure
is :class:`~persistence.errors.Validation`).

Records that share a map shape (the inbox item union, the journal record union) carry a
``"kind"`` discriminator.

The records here are the plane's general ones: CAS metadata, pins and dooms, snapshots,
world meta, the layout, universe info, call records, effects and timers. The inbox's
records are in :mod:`persistence.inbox_records`, the journal's in
:mod:`persistence.journal_records`, the universe log's in :mod:`persistence.log_records`,
cold segments' in :mod:`persistence.segment_records`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self, TypeVar

from persistence import cbor
from persistence.errors import CorruptRecord, Validation
from persistence.ids import MAX_HEIGHT, Hash, InboxSeq, WorldId

# --------------------------------------------------------------------------- field codecs


def _as_is(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Codec:
    """How one field is checked, stored and loaded."""

    name: str
    check: Callable[[Any, str], Any]
    store: Callable[[Any], Any] = _as_is
    load: Callable[[Any], Any] = _as_is


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


def required(codec: Codec) -> Any:
    """A required field with ``codec``."""
    return field(metadata={"codec": codec})


def optional(codec: Codec) -> Any:
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


_Encoding = tuple[tuple[str | None, bytes, Callable[[Any], Any] | None], ...]
_ENCODINGS: dict[type, _Encoding | None] = {}
_UNKNOWN: Final = object()


def _encoding(cls: type) -> _Encoding | None:
    """How a record of ``cls`` is written as canonical CBOR, computed once per class: its
    map entries in canonical key order, each as (field name, encoded key, store function or
    ``None`` when the value is stored as it is); the ``kind`` entry of a union member as
    (``None``, its whole encoded entry, ``None``). ``None`` for a class that writes its own
    map (overrides :meth:`Record.to_map`): its records go through that map."""
    known = _ENCODINGS.get(cls, _UNKNOWN)
    if known is not _UNKNOWN:
        return known  # type: ignore[return-value]
    encoding = None
    if getattr(cls, "to_map", None) is Record.to_map:
        entries: list[tuple[bytes, str | None, bytes, Callable[[Any], Any] | None]] = []
        kind = getattr(cls, "KIND", None)
        if kind is not None:
            key = cbor.encode("kind")
            entries.append((key, None, key + cbor.encode(kind), None))
        for f in _schema(cls):
            key = cbor.encode(f.name)
            store = None if f.codec.store is _as_is else f.codec.store
            entries.append((key, f.name, key, store))
        entries.sort(key=lambda entry: cbor.map_order(entry[0]))
        encoding = tuple((name, key, store) for _, name, key, store in entries)
    _ENCODINGS[cls] = encoding
    return encoding


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
        map is inside the canonical model by construction). A record whose stored values
        are all integers, bools, bytes or text -- most are -- is written directly, its
        entries in their precomputed order; any other goes through cbor2."""
        encoding = _encoding(type(self))
        if encoding is None:
            return cbor.encode_checked(self.to_map())
        entries = []
        for name, key, store in encoding:
            if name is None:
                entries.append(key)
                continue
            value = getattr(self, name)
            if value is None:
                continue
            item = cbor.scalar(value if store is None else store(value))
            if item is None:
                return cbor.encode_checked(self.to_map())
            entries.append(key + item)
        return cbor.head(5, len(entries)) + b"".join(entries)

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


_UINT_WIDTHS: Final = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}
"""CBOR heads of unsigned integers of 24 and above, by the bytes that follow them."""


def unsigned_at(raw: bytes, start: int) -> int:
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
            value = unsigned_at(raw, start)
            if value >= 0 and self.encode(value) == raw:  # the shortest head only
                return value
        # Not such a record's bytes: the strict decoder names what is wrong with them.
        held: int = getattr(decode_record(self._record, raw, what), self._field)
        return held


# --------------------------------------------------------------------------- plane records


@dataclass(frozen=True, slots=True)
class CasMeta(Record):
    """``cas/meta/<hash>``: where a blob's body lives. Exactly one of the two is set."""

    size: int = required(U64)
    inline_bytes: bytes | None = optional(BYTES)
    object_key: str | None = optional(TEXT)

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

    at_ns: int = required(U64)


@dataclass(frozen=True, slots=True)
class CasDoom(Record):
    """``cas/doomed/<hash>``: a collector decided at ``at_ns`` to delete the unreferenced
    body of ``hash``; ``token`` names that collector's attempt; once its DELETE call returned,
    ``settled_ns`` is when no request of it can still land. Puts of the hash wait until it
    is cleared (``protocols/cas_bodies.py``)."""

    at_ns: int = required(U64)
    token: bytes = required(BYTES)
    settled_ns: int | None = optional(U64)


@dataclass(frozen=True, slots=True)
class SnapshotRecord(Record):
    """``snapshot/by_height/<h>`` and ``baseline/active``: one kernel snapshot in CAS."""

    snapshot_ref: Hash = required(HASH)
    height: int = required(U64)
    logical_time_ns: int = required(U64)
    manifest_hash: Hash = required(HASH)
    receipt_horizon_height: int | None = optional(U64)


@dataclass(frozen=True, slots=True)
class WorldMeta(Record):
    """``w/<world>/meta``: written once at world creation."""

    created_ns: int = required(U64)
    handle: str | None = optional(TEXT)


# --------------------------------------------------------------------------- plane bookkeeping


@dataclass(frozen=True, slots=True)
class LayoutRecord(Record):
    """``("layout",)``: the keyspace layout version the store was written with."""

    version: int = required(U64)


@dataclass(frozen=True, slots=True)
class UniverseInfo(Record):
    """``u/<universe>/info``: written with the universe's first world."""

    created_ns: int = required(U64)


@dataclass(frozen=True, slots=True)
class CallRecord(Record):
    """``calls/<call id>``: what one write call of the plane did, so that its retry after
    ``commit_unknown_result`` reports that instead of acting again (see ``protocols/calls.py``).
    ``op`` names the protocol; the other fields are its outcome."""

    op: str = required(TEXT)
    first_height: int | None = optional(U64)
    count: int | None = optional(U64)
    seq: InboxSeq | None = optional(SEQ)
    indexed: bool | None = optional(BOOL)
    promoted: bool | None = optional(BOOL)
    value: bytes | None = optional(BYTES)


# --------------------------------------------------------------------------- effects and timers


@dataclass(frozen=True, slots=True)
class EffectDispatchItem(Record):
    """``effects/pending/<seq>``: an effect intent waiting for a worker (consumed in P3)."""

    world: WorldId = required(WORLD)
    intent_hash: Hash = required(HASH)
    effect_kind: str = required(TEXT)
    payload_cbor: bytes = required(CBOR)


@dataclass(frozen=True, slots=True)
class EffectInFlightItem(Record):
    """``effects/inflight/<seq>``: an effect a worker has claimed."""

    world: WorldId = required(WORLD)
    intent_hash: Hash = required(HASH)
    effect_kind: str = required(TEXT)
    payload_cbor: bytes = required(CBOR)
    claimed_by: str = required(TEXT)
    claimed_at_ns: int = required(U64)


@dataclass(frozen=True, slots=True)
class TimerDueItem(Record):
    """``timers/due/<deliver_at_ns>/<intent_hash>``: a timer to fire into a world's inbox."""

    world: WorldId = required(WORLD)
    intent_hash: Hash = required(HASH)
    deliver_at_ns: int = required(U64)
    payload_cbor: bytes = required(CBOR)
