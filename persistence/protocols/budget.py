"""What a plane transaction will count against FoundationDB's size limit, known before it runs.

The plane builds every key itself, so it can count a transaction exactly as FoundationDB will
(:mod:`persistence.txsize`) before running it, and refuse with ``Validation`` what would fail
with 2101 (too large), 2102 (key) or 2103 (value). The budget keeps a tenth of the engine's
``size_limit`` in reserve (:func:`budget`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from persistence import kv, txsize
from persistence.errors import Validation
from persistence.ids import InboxSeq
from persistence.keyspace import CHUNK_SIZE, UniverseKeys, WorldKeys
from persistence.protocols.app_data import AppWrite
from persistence.protocols.calls import CALL_ID_BYTES, CallScope
from persistence.protocols.checksums import SEAL_BYTES
from persistence.protocols.journal import Creation
from persistence.protocols.log import Sequencing
from persistence.records import UniverseInfo

RESERVE: Final = 10
"""Percent of the engine's size limit the plane never plans to use."""

CALL_RECORD_BYTES: Final = 128
"""An upper bound on an append, drain, cursor or snapshot call record's value."""
HEAD_BYTES: Final = 16
"""An upper bound on a journal head record's value."""
CURSOR_BYTES: Final = 24
"""An upper bound on an inbox cursor record's value."""
IDEMPOTENCY_VALUE_BYTES: Final = 32
"""An idempotency index value as written: 12 bytes of sequence, the 16-byte fingerprint and
the 4-byte offset suffix."""
MARK_BYTES: Final = 24
"""An upper bound on an inbox consumed mark's value."""
READY_VALUE_BYTES: Final = 14
"""A ready mark's versionstamped value: the 10-byte versionstamp and the 4-byte offset."""
DRAIN_RESULT_BYTES: Final = 40
"""An upper bound on one world's result in a multi-world drain's call record."""
COMPACTION_RECORD_BYTES: Final = 192
"""An upper bound on an inbox compaction's call record (its outcome is the record's value)."""
LOG_RECORD_BYTES: Final = 48
"""An upper bound on a universe log record's value besides its tag (map, world, height)."""
LATEST_NS: Final = 2**64 - 1
"""The largest time a consumed mark's key can hold (its longest encoding)."""


def budget(engine: kv.Engine) -> int:
    """The bytes one plane transaction may count on ``engine``."""
    return engine.size_limit * (100 - RESERVE) // 100


def entries_cost(keys: WorldKeys, first: int, entries: Sequence[bytes]) -> int:
    """Writing ``entries`` at heights ``first..``: every chunk and its key, each value with
    its checksum (``checksums.SEAL_BYTES``; for a layout without them, 4 bytes a value
    more than it writes)."""
    total = 0
    whole_key = keys.whole_entry_key()
    for offset, entry in enumerate(entries):
        if len(entry) <= CHUNK_SIZE:
            total += txsize.set_cost(len(whole_key(first + offset)), len(entry) + SEAL_BYTES)
            continue
        count = -(-len(entry) // CHUNK_SIZE)
        for index in range(count):
            key = keys.entry_chunk(first + offset, index, count)
            chunk = min(CHUNK_SIZE, len(entry) - index * CHUNK_SIZE)
            total += txsize.set_cost(len(key), chunk + SEAL_BYTES)
    return total


def call_cost(keys: CallScope, record_bytes: int = CALL_RECORD_BYTES) -> int:
    """A call record of at most ``record_bytes``: the retry's lookup, the record, and the
    range clear of the expired records."""
    key = len(keys.call(b"\x00" * CALL_ID_BYTES))
    horizon = len(keys.call(b"\x00" * 8))
    return (
        txsize.get_cost(key)
        + txsize.set_cost(key, record_bytes)
        + txsize.clear_range_cost(len(keys.calls()[0]), horizon)
    )


def append_cost(keys: WorldKeys, first: int, entries: Sequence[bytes]) -> int:
    """Protocol B: read and move the head, write the entries, record the call."""
    head = len(keys.head())
    return (
        txsize.get_cost(head)
        + txsize.set_cost(head, HEAD_BYTES)
        + entries_cost(keys, first, entries)
        + call_cost(keys)
    )


def group_append_cost(
    universe: UniverseKeys,
    batches: Sequence[tuple[WorldKeys, int, Sequence[bytes]]],
    create: Creation | None,
) -> int:
    """A group append of ``(keys, first height, entries)``: per world, read and move the
    head and write the entries -- and with ``create``, creating the world --; one call
    record in the universe's scope."""
    total = call_cost(universe)
    for keys, first, entries in batches:
        head = len(keys.head())
        total += txsize.get_cost(head) + txsize.set_cost(head, HEAD_BYTES)
        total += entries_cost(keys, first, entries)
        if create is not None:
            total += creation_cost(keys, create)
    return total


CHUNK_BOUND: Final = 500
"""More than a journal chunk, a log record or a world's head costs besides its bytes (its
keys are under 120 bytes: ``3 * 120 + 69`` for the write and its conflict range, and a
chunk's 4-byte checksum)."""
WORLD_BOUND: Final = 5_000
"""More than a group append spends on one world besides its entries: reading and writing
the head, and creating the world (meta, universe info, head, genesis snapshot and
baseline, the genesis blobs' metadata: under 3,000 bytes)."""
GROUP_BOUND: Final = 50_000
"""More than a group append's fixed part: its call record and sweep, the log head, and a
tracking record (whose name of at most 1,024 characters makes a key under 4,200 bytes)."""


def group_append_bound(batches: Sequence[Sequence[bytes]], tags: Sequence[Sequence[str]]) -> int:
    """An upper bound on :func:`group_append_cost` plus :func:`sequencing_cost` -- and, for
    one batch without tags, on :func:`append_cost` --, cheap to compute (no keys built):
    the exact cost is computed only when this is over the budget."""
    total = GROUP_BOUND + WORLD_BOUND * len(batches)
    for entries in batches:  # an entry's chunks past its first: at most its bytes // CHUNK_SIZE
        size = sum(map(len, entries))
        total += size + CHUNK_BOUND * (len(entries) + size // CHUNK_SIZE)
    for entry_tags in tags:
        for tag in entry_tags:
            total += 4 * len(tag) + CHUNK_BOUND
    return total


def app_data_bound(writes: Sequence[AppWrite]) -> int:
    """An upper bound on :func:`app_data_cost`, cheap to compute (no keys built)."""
    return sum(4 * len(key) + len(value or b"") + CHUNK_BOUND for key, value in writes)


def app_data_cost(universe: UniverseKeys, writes: Sequence[AppWrite]) -> int:
    """Writing an application's own data: each set or removed key."""
    total = 0
    for key, value in writes:
        size = len(universe.app(key))
        total += txsize.clear_cost(size) if value is None else txsize.set_cost(size, len(value))
    return total


def sequencing_cost(universe: UniverseKeys, sequencing: Sequencing) -> int:
    """A sequenced append's log records (one per entry, with its tag; at a position or in
    the queue, whichever key is longer), the log head read and written, the queue's counter
    read and added to, and the tracking record read and written."""
    head = len(universe.log_head())
    total = txsize.get_cost(head) + txsize.set_cost(head, HEAD_BYTES)
    counter = len(universe.log_queued())
    total += txsize.get_cost(counter) + txsize.set_cost(counter, 8)
    count = sum(len(tags) for tags in sequencing.tags)
    queued = len(universe.log_queue_with_versionstamp(count)) - 4  # less the offset suffix
    record = max(len(universe.log_entry(2**64 - 1)), queued)
    for tags in sequencing.tags:
        for tag in tags:
            total += txsize.set_cost(record, LOG_RECORD_BYTES + len(tag.encode()))
    if sequencing.tracking is not None:
        key = len(universe.tracking(sequencing.tracking[0]))
        total += txsize.get_cost(key) + txsize.set_cost(key, HEAD_BYTES)
    return total


def creation_cost(keys: WorldKeys, create: Creation) -> int:
    """A group append creating a world: read its meta and the universe's info, write the
    info, the meta, the empty head, the genesis snapshot and baseline, and the genesis
    blobs' metadata unless present."""
    universe = UniverseKeys(keys.universe)
    genesis = len(create.genesis.to_cbor())
    info = len(UniverseInfo(create.meta.created_ns).to_cbor())
    total = txsize.get_cost(len(keys.meta())) + txsize.set_cost(
        len(keys.meta()), len(create.meta.to_cbor())
    )
    total += txsize.get_cost(len(universe.info())) + txsize.set_cost(len(universe.info()), info)
    total += txsize.set_cost(len(keys.head()), HEAD_BYTES)
    total += txsize.set_cost(len(keys.snapshot(0)), genesis)
    total += txsize.set_cost(len(keys.baseline()), genesis)
    for hash, meta in create.blobs:
        key = len(universe.cas_meta(hash))
        total += txsize.get_cost(key) + txsize.set_cost(key, len(meta.to_cbor()))
    return total


def drain_cost(keys: WorldKeys, first: int, entries: Sequence[bytes]) -> int:
    """Protocol D: the world's part (:func:`drain_world_cost`) and its call record."""
    return drain_world_cost(keys, first, entries) + call_cost(keys)


def drain_world_cost(keys: WorldKeys, first: int, entries: Sequence[bytes]) -> int:
    """One world's part of a drain: read and move the head and the cursor, write the
    entries, compare-and-clear the world's ready mark (with a value at most
    ``READY_VALUE_BYTES`` long)."""
    head, cursor, ready = len(keys.head()), len(keys.inbox_cursor()), len(keys.ready())
    return (
        txsize.get_cost(head)
        + txsize.set_cost(head, HEAD_BYTES)
        + entries_cost(keys, first, entries)
        + txsize.get_cost(cursor)
        + txsize.set_cost(cursor, CURSOR_BYTES)
        + txsize.set_cost(ready, READY_VALUE_BYTES)
    )


def drain_group_cost(universe: UniverseKeys, worlds: int) -> int:
    """A multi-world drain besides its worlds' parts: one call record in the universe's
    scope holding every world's result."""
    return call_cost(universe, CALL_RECORD_BYTES + DRAIN_RESULT_BYTES * worlds)


def enqueue_cost(keys: WorldKeys, items: Sequence[tuple[bytes, int]]) -> int:
    """Protocol C for ``(idempotency key, encoded envelope length)`` pairs: per item the
    idempotency lookup, the versionstamped item and index entry; one notification add and
    the world's ready mark (a keyless item is counted with the key it gets where commits
    may end unknown: ``Plane._enqueue``)."""
    total = txsize.set_cost(len(keys.notify_counter()), 8)
    total += txsize.set_cost(len(keys.ready()), READY_VALUE_BYTES)
    item_key = len(keys.inbox_item_with_versionstamp(0))
    for idempotency_key, envelope in items:
        idem = len(keys.inbox_idempotency(idempotency_key))
        total += txsize.get_cost(idem)
        total += txsize.versionstamped_key_cost(item_key, envelope)
        total += txsize.set_cost(idem, IDEMPOTENCY_VALUE_BYTES)
    return total


ENQUEUE_BOUND: Final = 1_000
"""More than an enqueue's fixed part costs: the notify counter's add and the ready mark
(keys under 120 bytes)."""
ITEM_BOUND: Final = 1_000
"""More than an enqueued item costs besides its envelope and ``KEY_BYTE_BOUND`` per byte
of its idempotency key: its versionstamped key (under 120 bytes), the idempotency entry's
key (under 120 bytes besides that key's, escaped to at most twice its length) read with a
conflict and written."""
KEY_BYTE_BOUND: Final = 10
"""What one byte of an idempotency key can cost at most: two bytes of the entry's key,
counted twice by its read conflict range and three times by its write."""


def enqueue_bound(items: Sequence[tuple[bytes, int]]) -> int:
    """An upper bound on :func:`enqueue_cost`, cheap to compute (no keys built): the exact
    cost is computed only when this is over the budget."""
    total = ENQUEUE_BOUND
    for idempotency_key, envelope in items:
        total += envelope + ITEM_BOUND + KEY_BYTE_BOUND * len(idempotency_key)
    return total


def compaction_fixed_cost(keys: WorldKeys) -> int:
    """An inbox compaction transaction before its items: reading the consumed marks, writing
    one and clearing the expired ones, the range clear of the items, the call record."""
    marks_begin, marks_end = keys.inbox_consumed_marks()
    mark = len(keys.inbox_consumed_mark(LATEST_NS))
    items_begin, _ = keys.inbox_after(None)
    item_end = len(keys.inbox_item(InboxSeq(b"\x00" * 12))) + 1
    return (
        txsize.read_cost(len(marks_begin), len(marks_end))
        + txsize.set_cost(mark, MARK_BYTES)
        + txsize.clear_range_cost(len(marks_begin), mark)
        + txsize.clear_range_cost(len(items_begin), item_end)
        + call_cost(keys, COMPACTION_RECORD_BYTES)
    )


def compaction_item_cost(keys: WorldKeys, idempotency_key: bytes | None) -> int:
    """Removing one consumed item beyond the fixed cost: reading its idempotency entry (with
    a conflict) and clearing it. The item itself goes with the range clear."""
    if idempotency_key is None:
        return 0
    idem = len(keys.inbox_idempotency(idempotency_key))
    return txsize.get_cost(idem) + txsize.clear_cost(idem)


def check(cost: int, limit: int, field: str, what: str) -> None:
    """``Validation`` naming ``field`` if ``cost`` exceeds ``limit``."""
    if cost > limit:
        raise Validation(
            field,
            f"{what} would count {cost:,} bytes against FoundationDB's transaction size "
            f"limit; the plane's budget is {limit:,} (90% of the engine's size_limit)",
        )
