"""The journal's stored records: the records the plane writes into a world's journal
(snapshot announcements, drained items), their ``"kind"`` union and its decoder, and the
journal's head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Self, Union

from persistence import cbor
from persistence.ids import INBOX_SEQ_LEN, Hash, InboxSeq
from persistence.records import (
    CBOR,
    HASH,
    SEQ,
    U64,
    CounterCodec,
    Record,
    SnapshotRecord,
    optional,
    record_from_map,
    required,
)


@dataclass(frozen=True, slots=True)
class _SnapshotAnnouncement(Record):
    """The fields of a :class:`SnapshotRecord`, as announced in the journal."""

    snapshot_ref: Hash = required(HASH)
    height: int = required(U64)
    logical_time_ns: int = required(U64)
    manifest_hash: Hash = required(HASH)
    receipt_horizon_height: int | None = optional(U64)

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
    seq: InboxSeq = required(SEQ)
    item: bytes = required(CBOR)


def ingress_bytes(seq: InboxSeq, item: bytes) -> bytes:
    """``IngressJournalRecord(seq, item).to_cbor()`` for ``item`` bytes its caller encoded
    from a checked record (canonical by construction): the same bytes, without decoding the
    item again to check it (every drained item is journaled so by default). Written from
    its constant parts: the map's entries in canonical order are ``seq`` (a 12-byte
    string), ``item``, ``kind``."""
    return b"".join(
        (_INGRESS_SEQ, seq.raw, _INGRESS_ITEM, cbor.head(2, len(item)), item, _INGRESS_KIND)
    )


_INGRESS_SEQ: Final = cbor.head(5, 3) + cbor.encode("seq") + cbor.head(2, INBOX_SEQ_LEN)
_INGRESS_ITEM: Final = cbor.encode("item")
_INGRESS_KIND: Final = cbor.encode("kind") + cbor.encode(IngressJournalRecord.KIND)


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


@dataclass(frozen=True, slots=True)
class JournalHead(Record):
    """``journal/head``: the highest height."""

    height: int = required(U64)


JOURNAL_HEAD: Final = CounterCodec(JournalHead)
"""The bytes of ``journal/head`` records (:class:`JournalHead`)."""
