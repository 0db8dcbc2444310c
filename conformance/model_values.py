"""The values the oracle (:mod:`conformance.model`) speaks in: abstract inbox sequences
(:class:`SeqRef`), the journal entries it keeps (:data:`JournalEntry`), what it keeps of
each world (:class:`ModelWorld`) and of each item, and the results it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from persistence.inbox_records import InboxEnvelope, InboxItem, encode_inbox_item
from persistence.plane import OWN_KEY_BYTES
from persistence.records import SnapshotRecord

OWN_KEY: Final = bytes(OWN_KEY_BYTES)
"""Stands for the random idempotency key the plane draws for an item enqueued without one
(only its length matters)."""


# --------------------------------------------------------------------------- sequences


@dataclass(frozen=True, slots=True, order=True)
class SeqRef:
    """An abstract inbox sequence: a position in one world's inbox order.

    ``SeqRef(i)`` is the sequence of the world's ``i``-th enqueued item (0-based).
    ``SeqRef(i, ghost=True)`` is a sequence that names no item and sorts just after item
    ``i`` and before item ``i + 1``; ``SeqRef(-1, ghost=True)`` sorts before every item.
    The dataclass order is the sequence order.
    """

    index: int
    ghost: bool = False

    @property
    def label(self) -> str:
        """A stable text form: ``#3`` for item 3, ``#3+`` for the gap after it."""
        return f"#{self.index}{'+' if self.ghost else ''}"


BEFORE_ALL: Final = SeqRef(-1, ghost=True)
"""A sequence that sorts before every item (the real all-zero sequence)."""


def label_of(ref: SeqRef | None) -> str | None:
    """The label of ``ref`` (``None`` for no sequence), as the model puts it in errors."""
    return None if ref is None else ref.label


def envelope_size(item: InboxItem, idempotency_key: bytes | None) -> int:
    """Bytes of the stored inbox envelope of ``item`` with ``idempotency_key`` (``None``:
    none): what a drain's ``max_bytes`` counts."""
    return len(InboxEnvelope(encode_inbox_item(item), idempotency_key).to_cbor())


# --------------------------------------------------------------------------- journal entries


@dataclass(frozen=True, slots=True)
class RawEntry:
    """An entry a caller appended with ``append_batch`` (opaque bytes)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class IngressEntry:
    """The default normalization of drained inbox item ``index`` (an ``ingress`` record)."""

    index: int


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """The ``snapshot`` record a snapshot commit appends when it indexes ``record``."""

    record: SnapshotRecord


@dataclass(frozen=True, slots=True)
class BaselineEntry:
    """The ``baseline_snapshot`` record appended when ``record`` becomes the baseline."""

    record: SnapshotRecord


JournalEntry = RawEntry | IngressEntry | SnapshotEntry | BaselineEntry


# --------------------------------------------------------------------------- model state


@dataclass(frozen=True, slots=True)
class ModelItem:
    """One enqueued inbox item, as the model keeps it."""

    item: InboxItem
    encoded: bytes
    envelope_size: int
    group: int
    """Ordinal of the enqueue call (one transaction, one versionstamp) that stored it."""


@dataclass(frozen=True, slots=True)
class ModelDrainResult:
    """The expected :class:`~persistence.protocols.drain.DrainResult`, with an abstract cursor."""

    first_height: int
    count: int
    cursor: SeqRef | None


@dataclass(slots=True)
class ModelWorld:
    """Everything observable about one world."""

    genesis: SnapshotRecord
    journal: list[JournalEntry] = field(default_factory=list)
    items: list[ModelItem] = field(default_factory=list)
    idempotency: dict[bytes, int] = field(default_factory=dict)
    cursor: int | None = None
    snapshots: dict[int, SnapshotRecord] = field(default_factory=dict)
    baseline: SnapshotRecord | None = None
    groups: int = 0

    @property
    def head(self) -> int:
        """The journal head."""
        return len(self.journal)

    def active(self) -> SnapshotRecord:
        """The active baseline (set at creation)."""
        assert self.baseline is not None
        return self.baseline
