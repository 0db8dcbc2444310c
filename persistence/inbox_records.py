"""The inbox's stored records: the five inbox item kinds (the ``"kind"`` union every
enqueue writes and every drain reads), the envelope an item is stored in and its fast
paths, idempotency entries, the cursor, consumed marks and inbox compaction's record."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Union

from persistence import cbor
from persistence.errors import CorruptRecord, Validation
from persistence.ids import INBOX_SEQ_LEN, Hash, InboxSeq
from persistence.records import (
    BOOL,
    BYTES,
    CBOR,
    HASH,
    SEQ,
    TEXT,
    TEXT_MAP,
    U64,
    Record,
    optional,
    record_from_map,
    required,
)

# --------------------------------------------------------------------------- inbox items


@dataclass(frozen=True, slots=True)
class DomainEventIngress(Record):
    """A domain event addressed to the world (optionally keyed)."""

    KIND: ClassVar[str | None] = "domain_event"
    schema: str = required(TEXT)
    value_cbor: bytes = required(CBOR)
    key: bytes | None = optional(BYTES)


@dataclass(frozen=True, slots=True)
class ReceiptIngress(Record):
    """An effect adapter's signed receipt for an intent."""

    KIND: ClassVar[str | None] = "receipt"
    intent_hash: Hash = required(HASH)
    effect_kind: str = required(TEXT)
    adapter_id: str = required(TEXT)
    payload_cbor: bytes = required(CBOR)
    signature: bytes = required(BYTES)


@dataclass(frozen=True, slots=True)
class InboxIngress(Record):
    """A message delivered to a named inbox of the world."""

    KIND: ClassVar[str | None] = "inbox"
    inbox_name: str = required(TEXT)
    payload_cbor: bytes = required(CBOR)
    headers: dict[str, str] | None = optional(TEXT_MAP)


@dataclass(frozen=True, slots=True)
class TimerFiredIngress(Record):
    """A timer the world set has fired."""

    KIND: ClassVar[str | None] = "timer_fired"
    timer_id: str = required(TEXT)
    payload_cbor: bytes = required(CBOR)


@dataclass(frozen=True, slots=True)
class ControlIngress(Record):
    """An operator or host control command."""

    KIND: ClassVar[str | None] = "control"
    cmd: str = required(TEXT)
    payload_cbor: bytes = required(CBOR)


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


# --------------------------------------------------------------------------- inbox bookkeeping


@dataclass(frozen=True, slots=True)
class InboxCursor(Record):
    """``inbox/cursor``: the last drained (or skipped) sequence."""

    seq: InboxSeq = required(SEQ)


@dataclass(frozen=True, slots=True)
class InboxEnvelope(Record):
    """``inbox/e/<seq>``: an inbox item as enqueued, with its idempotency key (so the
    compactor can drop the key together with the item)."""

    item: bytes = required(CBOR)
    idempotency_key: bytes | None = optional(BYTES)


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
    return _envelope_decoded(data, what)[0]


def envelope_parts(data: bytes, what: str) -> tuple[InboxItem, bytes]:
    """:func:`envelope_item`, and ``encode_inbox_item`` of the item: the item's stored
    bytes, which a strictly decoded record encodes back to (canonical CBOR), unless they
    hold a null for an absent field (the plane leaves such a field out; a null decodes to
    the same record, so the item is encoded again then)."""
    record, raw, item = _envelope_decoded(data, what)
    if type(item) is dict and None in item.values():
        raw = encode_inbox_item(record)
    return record, raw


def _envelope_decoded(data: bytes, what: str) -> tuple[InboxItem, bytes, Any]:
    """The item of stored envelope bytes: as a record, its stored bytes, its decoded map."""
    value = cbor.decode_stored(data, what)
    if (
        type(value) is dict
        and type(value.get("item")) is bytes
        and type(value.get("idempotency_key", b"")) is bytes
        and value.keys() <= _ENVELOPE_FIELDS
    ):
        raw = value["item"]
        try:
            item = cbor.decode(raw)
        except cbor.NotCanonical as exc:  # as the envelope record's check of its item
            raise CorruptRecord(what, f"InboxEnvelope.item: {exc}") from None
    else:  # anything else: the record's own decoding names what is wrong, or accepts it
        raw = record_from_map(InboxEnvelope, value, what).item
        item = cbor.decode_stored(raw, "inbox item")
    return _inbox_item(item), raw, item


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

    seq: InboxSeq = required(SEQ)


@dataclass(frozen=True, slots=True)
class InboxCompactionRecord(Record):
    """What one inbox compaction transaction removed and wrote, kept as its call record's
    ``value`` so that a retry after an applied ``commit_unknown_result`` reports it."""

    items: int = required(U64)
    idempotency_entries: int = required(U64)
    marks_written: int = required(U64)
    marks_removed: int = required(U64)
    more: bool = required(BOOL)
