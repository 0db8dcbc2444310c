"""The keyspace: every key the plane reads or writes is built here, and nowhere else.

Keys are FoundationDB tuples (:mod:`persistence.fdbtuple`) so byte order is logical order.
The logical layout (source specification section 2), with ``U``/``W`` the universe and
world UUIDs:

=====================================================  ====================================
key                                                    value
=====================================================  ====================================
``("layout",)``                                        ``LayoutRecord`` (layout version)
``("u", U, "info")``                                   ``UniverseInfo`` (first world time)
``("u", U, "handle", handle)``                         16-byte id of the world of that handle
``("u", U, "calls", call_id)``                         ``CallRecord`` (effect calls)
``("u", U, "cas", "meta", hash)``                      ``CasMeta``
``("u", U, "cas", "pin", hash, put_id)``               ``CasPin`` (a put of the body in flight)
``("u", U, "cas", "doomed", hash)``                    ``CasDoom`` (its body being collected)
``("u", U, "segments", W, end)``                       ``SegmentIndexRecord``
``("u", U, "effects", "pending", versionstamp)``       ``EffectDispatchItem``
``("u", U, "effects", "inflight", versionstamp)``      ``EffectInFlightItem``
``("u", U, "effects", "by_intent", hash)``             sequence of the intent's effect
``("u", U, "timers", "due", deliver_at_ns, hash)``     ``TimerDueItem``
``("u", U, "ready", bucket, W)``                       10-byte versionstamp (pending-work mark)
``("u", U, "log", "at", position)``                    ``LogRecord`` (the universe log)
``("u", U, "log", "head")``                            ``LogHead``
``("u", U, "log", "q", versionstamp, i)``              ``LogRecord`` queued for a position
``("u", U, "log", "queued")``                          i64, little-endian (atomic add): queued
``("u", U, "tracking", name)``                         ``TrackingRecord``
``("u", U, "w", W, "meta")``                           ``WorldMeta``
``("u", U, "w", W, "journal", "head")``                ``JournalHead``
``("u", U, "w", W, "journal", "e", h, i, n)``          chunk ``i`` of ``n`` of the entry at ``h``
``("u", U, "w", W, "snapshot", "by_height", h)``       ``SnapshotRecord``
``("u", U, "w", W, "baseline", "active")``             ``SnapshotRecord``
``("u", U, "w", W, "inbox", "e", versionstamp)``       ``InboxEnvelope``
``("u", U, "w", W, "inbox", "cursor")``                ``InboxCursor``
``("u", U, "w", W, "inbox", "idem", key)``             12-byte inbox sequence
``("u", U, "w", W, "inbox", "consumed", at_ns)``       ``InboxConsumedMark`` (cursor at ``at_ns``)
``("u", U, "w", W, "notify", "counter")``              u64, little-endian (atomic add)
``("u", U, "w", W, "export", "marker")``               ``ExportMarker`` (export in flight)
``("u", U, "w", W, "gc", "pin", hash)``                pin reason (CBOR)
``("u", U, "w", W, "calls", call_id)``                 ``CallRecord`` (what a write call did)
=====================================================  ====================================

Journal entries larger than one value are split into chunks of at most
:data:`CHUNK_SIZE` bytes; every chunk key carries its index and the chunk count, so a missing
chunk is detected, never read as a short entry. In layout 3 each stored value (a whole entry
or a chunk) ends with 4 bytes of checksum over its key and payload, so a changed byte is
detected, never read as another entry.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

from persistence.errors import CorruptRecord
from persistence.fdbtuple import (
    INT_ZERO,
    VERSIONSTAMP,
    Element,
    Versionstamp,
    pack,
    pack_bytes,
    pack_with_versionstamp,
    range_of,
    strinc,
    unpack,
)
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId

LAYOUT_VERSION: Final = 4
"""Version of the layout a new store is written in. Layout 2 keeps per-call records
(``calls``) instead of layout 1's batch ids in the head, cursor and snapshot records; layout
3 ends every stored value of a journal entry with its checksum, CRC-32, layout 4 with
CRC-32C (:mod:`persistence.protocols.checksums`). A store keeps the layout it was created
in: layouts 2 to 4 are read and written, each in its own form; others are refused at open."""
READABLE_LAYOUTS: Final = (2, 3, 4)
"""The layouts this software opens."""
CHECKSUM_LAYOUT: Final = 3
"""The first layout whose journal entries carry checksums."""

CHUNK_SIZE: Final = 90_000
"""Bytes per journal-entry chunk (FoundationDB's value limit is 100,000)."""

LAYOUT_KEY: Final = pack(("layout",))


def _range(prefix: tuple[Element, ...]) -> tuple[bytes, bytes]:
    return range_of(pack(prefix))


@functools.lru_cache(maxsize=8192)
def _packed(elements: tuple[Element, ...]) -> bytes:
    """``pack(elements)``, kept for prefixes and constant suffixes (a tuple's encoding is
    the concatenation of its elements' encodings)."""
    return pack(elements)


_INT_CODES: Final = [bytes((INT_ZERO + width,)) for width in range(9)]
_WHOLE: Final = pack((0, 1))
"""Key suffix after the height of an entry stored whole: chunk 0 of 1."""


def _height(height: int) -> bytes:
    """``pack((height,))`` for heights, built directly: it runs once per entry written or
    read (a positive integer below 2**63 is type code ``0x14 + width`` then ``width``
    big-endian bytes). Property-tested against :func:`pack`."""
    if 0 < height < 2**63:
        width = (height.bit_length() + 7) // 8
        return _INT_CODES[width] + height.to_bytes(width, "big")
    return pack((height,))


@dataclass(frozen=True, slots=True)
class _UniversePrefixes:
    """A universe's key prefixes, packed once per universe (a tuple's encoding is its
    elements' encodings concatenated)."""

    base: bytes
    """Every key of the universe."""
    calls: bytes
    log_head: bytes
    log_at: bytes
    log_queue: bytes
    log_queued: bytes


@functools.lru_cache(maxsize=4096)
def _universe_prefixes(universe: UniverseId) -> _UniversePrefixes:
    base = pack(("u", universe.uuid))
    return _UniversePrefixes(
        base,
        base + _CALLS_SUFFIX,
        base + _LOG_HEAD_SUFFIX,
        base + _LOG_AT_SUFFIX,
        base + _LOG_QUEUE_SUFFIX,
        base + _LOG_QUEUED_SUFFIX,
    )


READY_BUCKETS: Final = 256
"""Buckets of the pending-work index: drain workers that share a universe each scan a
contiguous range of buckets (``aosp drain --shard``)."""


def ready_bucket(world: WorldId) -> int:
    """The bucket of ``world``'s ready mark: the first byte of the sha256 of its id, so that
    worlds spread evenly over the buckets whatever scheme made their ids."""
    return hashlib.sha256(world.uuid.bytes).digest()[0]


@functools.lru_cache(maxsize=4096)
def _ready_key(universe: UniverseId, world: WorldId) -> bytes:
    """A world's ready mark key, packed once per world (every enqueue writes it)."""
    return pack(("u", universe.uuid, "ready", ready_bucket(world), world.uuid))


@dataclass(frozen=True, slots=True)
class _WorldPrefixes:
    """A world's key prefixes (and its head's key), packed once per world."""

    base: bytes
    """Every key of the world."""
    head: bytes
    entry: bytes
    calls: bytes
    inbox_item: bytes


@functools.lru_cache(maxsize=4096)
def _world_prefixes(universe: UniverseId, world: WorldId) -> _WorldPrefixes:
    base = _universe_prefixes(universe).base + _WORLDS + pack((world.uuid,))
    return _WorldPrefixes(
        base,
        base + _HEAD_SUFFIX,
        base + _ENTRY_SUFFIX,
        base + _CALLS_SUFFIX,
        base + _INBOX_ITEM_SUFFIX,
    )


_HEAD_SUFFIX: Final = pack(("journal", "head"))
_ENTRY_SUFFIX: Final = pack(("journal", "e"))
_CALLS_SUFFIX: Final = pack(("calls",))
_INBOX_ITEM_SUFFIX: Final = pack(("inbox", "e"))
_WORLDS: Final = pack(("w",))
_LOG_HEAD_SUFFIX: Final = pack(("log", "head"))
_LOG_AT_SUFFIX: Final = pack(("log", "at"))
_LOG_QUEUE_SUFFIX: Final = pack(("log", "q"))
_LOG_QUEUED_SUFFIX: Final = pack(("log", "queued"))
_APP_SUFFIX: Final = pack(("app",))


class _Prefixes(Protocol):
    """What every scope's packed prefixes hold."""

    @property
    def base(self) -> bytes:
        """Every key of the scope."""
        ...

    @property
    def calls(self) -> bytes:
        """The scope's call records."""
        ...


P = TypeVar("P", bound=_Prefixes)


class _Scope(Generic[P]):
    """What the keys of a universe and of a world share: their prefixes, packed once and
    looked up on first use (then attribute reads, not a cache lookup that hashes the ids
    per key); keys under them; the scope's call records (``protocols/calls.py``)."""

    __slots__ = ()
    _prefixes: P | None

    def _load(self) -> P:
        """The scope's prefixes, from their per-scope cache."""
        raise NotImplementedError

    def _hot(self) -> P:
        prefixes = self._prefixes
        if prefixes is None:
            prefixes = self._load()
            object.__setattr__(self, "_prefixes", prefixes)
        return prefixes

    def _key(self, *suffix: Element) -> bytes:
        """The key ``(*prefix, *suffix)``, its prefix packed once."""
        return self._hot().base + pack(suffix)

    def _const(self, *suffix: str) -> bytes:
        """The key ``(*prefix, *suffix)`` for a constant suffix, both packed once."""
        return self._hot().base + _packed(suffix)

    def call(self, call_id: bytes) -> bytes:
        """The record of a write call of this scope (a world's; a universe's: effects,
        group appends and drains)."""
        return self._hot().calls + pack_bytes(call_id)

    def calls(self) -> tuple[bytes, bytes]:
        """Every call record of the scope, oldest first."""
        return range_of(self._hot().calls)


@dataclass(frozen=True, slots=True)
class UniverseKeys(_Scope[_UniversePrefixes]):
    """Keys of one universe."""

    universe: UniverseId
    _prefixes: _UniversePrefixes | None = field(default=None, init=False, repr=False, compare=False)
    """:func:`_universe_prefixes`, looked up on first use."""

    @property
    def _p(self) -> tuple[Element, ...]:
        return ("u", self.universe.uuid)

    def _load(self) -> _UniversePrefixes:
        return _universe_prefixes(self.universe)

    def info(self) -> bytes:
        """Marker written when the universe gets its first world."""
        return self._const("info")

    def log_head(self) -> bytes:
        """The universe log's last position."""
        return self._hot().log_head

    def log_entry(self, position: int) -> bytes:
        """The universe log record at ``position``."""
        return self._hot().log_at + _height(position)

    def log_prefix_len(self) -> int:
        """Length of the log record key prefix (what precedes the packed position)."""
        return len(self._hot().log_at)

    def log_range(self, first: int, last: int) -> tuple[bytes, bytes]:
        """The universe log records at ``first..last``."""
        return self.log_entry(first), self.log_entry(last) + b"\x00"

    def log_queue_with_versionstamp(self, index: int) -> bytes:
        """The key (with offset suffix) of the ``index``-th record a transaction queues for
        a log position, ordered by the commit's versionstamp (``protocols/log.py``)."""
        return pack_with_versionstamp((Versionstamp(None, 0), index), self._hot().log_queue)

    def log_queue(self) -> tuple[bytes, bytes]:
        """Every record queued for a log position, in commit order."""
        return range_of(self._hot().log_queue)

    def log_queued(self) -> bytes:
        """How many records are queued for a log position (an atomic counter)."""
        return self._hot().log_queued

    def handle(self, handle: str) -> bytes:
        """The world whose handle is ``handle`` (handles are unique in a universe)."""
        return self._key("handle", handle)

    def handles(self, prefix: str = "") -> tuple[bytes, bytes]:
        """The handles of the universe's worlds that start with ``prefix`` (every one: the
        empty prefix), in handle order (a tuple's text is its UTF-8 then a terminator)."""
        if not prefix:
            return _range((*self._p, "handle"))
        begin = self._key("handle", prefix)[:-1]
        return begin, strinc(begin)

    def tracking(self, name: str) -> bytes:
        """The tracking record of consumer ``name``."""
        return self._key("tracking", name)

    def trackings(self) -> tuple[bytes, bytes]:
        """Every consumer's tracking record."""
        return _range((*self._p, "tracking"))

    def app(self, key: bytes) -> bytes:
        """The application's own key ``key`` (its bytes as given, after the subspace's
        packed prefix, so that the application's key order and prefixes hold)."""
        return self._hot().base + _APP_SUFFIX + key

    def app_range(self, begin: bytes, end: bytes | None) -> tuple[bytes, bytes]:
        """The application's own keys from ``begin`` up to ``end`` (exclusive; ``None``:
        to the end of its subspace)."""
        prefix = self._hot().base + _APP_SUFFIX
        return prefix + begin, strinc(prefix) if end is None else prefix + end

    def app_prefix_len(self) -> int:
        """Length of what precedes an application's own key in its engine key."""
        return len(self._hot().base) + len(_APP_SUFFIX)

    def ready(self, world: WorldId) -> bytes:
        """The pending-work mark of ``world``: written by every enqueue that stores items,
        cleared by a drain that leaves the inbox empty (``protocols/inbox.py``)."""
        return _ready_key(self.universe, world)

    def ready_range(self, first: int = 0, end: int = READY_BUCKETS) -> tuple[bytes, bytes]:
        """The marks of the worlds in buckets ``first`` to ``end - 1``, bucket by bucket."""
        return pack((*self._p, "ready", first)), pack((*self._p, "ready", end))

    def ready_prefix_len(self) -> int:
        """Length of the ready-mark key prefix, to decode (bucket, world) from keys."""
        return len(pack((*self._p, "ready")))

    def cas_meta(self, hash: Hash) -> bytes:
        """CAS metadata of ``hash``."""
        return self._key("cas", "meta", hash.digest)

    def cas_meta_range(self) -> tuple[bytes, bytes]:
        """Every CAS metadata key of the universe."""
        return _range((*self._p, "cas", "meta"))

    def cas_metas_from(self, digest_prefix: bytes) -> tuple[bytes, bytes]:
        """The CAS metadata keys of the hashes whose digest starts with ``digest_prefix``
        (a tuple's bytes element is its escaped bytes then a terminator: the key of every
        such digest starts with the prefix's encoding minus its terminator)."""
        begin = self._key("cas", "meta", digest_prefix)[:-1]
        return begin, strinc(begin)

    def cas_pin(self, hash: Hash, put_id: bytes) -> bytes:
        """The pin of put ``put_id`` of the external body of ``hash``."""
        return self._key("cas", "pin", hash.digest, put_id)

    def cas_pins(self, hash: Hash | None = None) -> tuple[bytes, bytes]:
        """Every pin of ``hash`` (of every hash: ``None``)."""
        if hash is None:
            return _range((*self._p, "cas", "pin"))
        return _range((*self._p, "cas", "pin", hash.digest))

    def cas_doom(self, hash: Hash) -> bytes:
        """The collection decision for the body of ``hash``."""
        return self._key("cas", "doomed", hash.digest)

    def cas_dooms(self) -> tuple[bytes, bytes]:
        """Every collection decision of the universe."""
        return _range((*self._p, "cas", "doomed"))

    def segment(self, world: WorldId, end: int) -> bytes:
        """Index record of the segment of ``world`` ending at height ``end``."""
        return self._key("segments", world.uuid, end)

    def segment_range(self, world: WorldId, from_end: int = 0) -> tuple[bytes, bytes]:
        """Index records of ``world`` whose end height is at least ``from_end``."""
        begin, end = _range((*self._p, "segments", world.uuid))
        return (self.segment(world, from_end) if from_end else begin), end

    def effect(self, state: str, seq: InboxSeq) -> bytes:
        """An effect in ``state`` ("pending" or "inflight") with sequence ``seq``."""
        return pack((*self._p, "effects", state, Versionstamp.from_bytes(seq.raw)))

    def effect_range(self, state: str) -> tuple[bytes, bytes]:
        """All effects in ``state``."""
        return _range((*self._p, "effects", state))

    def effect_prefix_len(self, state: str) -> int:
        """Length of the effect key prefix of ``state``."""
        return len(self._key("effects", state))

    def pending_effect_with_versionstamp(self) -> bytes:
        """A pending effect key (with offset suffix) sequenced by the commit versionstamp."""
        return pack_with_versionstamp((*self._p, "effects", "pending", Versionstamp(None, 0)))

    def effect_by_intent(self, intent: Hash) -> bytes:
        """The sequence of the pending effect of ``intent`` (idempotent dispatch)."""
        return self._key("effects", "by_intent", intent.digest)

    def timer(self, deliver_at_ns: int, intent: Hash) -> bytes:
        """A timer due at ``deliver_at_ns``."""
        return self._key("timers", "due", deliver_at_ns, intent.digest)

    def timer_range(self, until_ns: int | None = None) -> tuple[bytes, bytes]:
        """Timers due (strictly) before ``until_ns``, or all timers."""
        begin, end = _range((*self._p, "timers", "due"))
        return begin, (end if until_ns is None else self._key("timers", "due", until_ns))

    def all(self) -> tuple[bytes, bytes]:
        """Every key of the universe."""
        return _range(self._p)

    def world(self, world: WorldId) -> WorldKeys:
        """Keys of ``world`` in this universe."""
        return WorldKeys(self.universe, world)

    def worlds_range(self) -> tuple[bytes, bytes]:
        """Every per-world key of the universe."""
        return _range((*self._p, "w"))

    def world_meta_prefix_len(self) -> int:
        """Length of the ``("u", U, "w")`` prefix, to decode world ids from keys."""
        return len(self._const("w"))


def seq_in_key(key: bytes, prefix_len: int, what: str) -> InboxSeq:
    """The versionstamp sequence that ends ``key`` after its ``prefix_len``-byte prefix (an
    inbox item or effect key); ``CorruptRecord`` naming ``what`` if it holds none."""
    if len(key) == prefix_len + 13 and key[prefix_len] == VERSIONSTAMP:  # the tuple's only
        return InboxSeq(key[prefix_len + 1 :])  # element: a versionstamp's code, 12 bytes
    try:
        element = unpack(key, prefix_len)
    except ValueError as exc:
        raise CorruptRecord(what, f"key {key.hex()} does not decode: {exc}") from None
    if len(element) != 1 or not isinstance(element[0], Versionstamp):
        raise CorruptRecord(what, f"key {key.hex()} does not end with one versionstamp")
    return InboxSeq(element[0].to_bytes())


def universes_range() -> tuple[bytes, bytes]:
    """Every universe key."""
    return _range(("u",))


@dataclass(frozen=True, slots=True)
class WorldKeys(_Scope[_WorldPrefixes]):
    """Keys of one world."""

    universe: UniverseId
    world: WorldId
    _prefixes: _WorldPrefixes | None = field(default=None, init=False, repr=False, compare=False)
    """:func:`_world_prefixes`, looked up on first use."""

    @property
    def _p(self) -> tuple[Element, ...]:
        return ("u", self.universe.uuid, "w", self.world.uuid)

    def _load(self) -> _WorldPrefixes:
        return _world_prefixes(self.universe, self.world)

    def meta(self) -> bytes:
        """The world's ``WorldMeta``."""
        return self._const("meta")

    def all(self) -> tuple[bytes, bytes]:
        """Every key of the world."""
        return _range(self._p)

    def prefix_len(self) -> int:
        """Length of the prefix every key of the world starts with (to classify keys)."""
        return len(self._hot().base)

    # journal

    def head(self) -> bytes:
        """The journal head record."""
        return self._hot().head

    def entry_prefix(self, height: int) -> tuple[bytes, bytes]:
        """Every chunk of the entry at ``height``."""
        return range_of(self._hot().entry + _height(height))

    def entry_chunk(self, height: int, index: int, count: int) -> bytes:
        """Chunk ``index`` of ``count`` of the entry at ``height``."""
        prefix = self._hot().entry
        if index == 0 and count == 1:
            return prefix + _height(height) + _WHOLE
        return prefix + pack((height, index, count))

    def whole_entry_key(self) -> Callable[[int], bytes]:
        """A function of the height giving ``entry_chunk(height, 0, 1)`` with the world's
        prefix bound once (readers call it for every row)."""
        prefix = self._hot().entry
        return lambda height: prefix + _height(height) + _WHOLE

    def entries_from(self, height: int) -> tuple[bytes, bytes]:
        """Entry chunks from ``height`` (inclusive) to the end of the journal."""
        begin = self._key("journal", "e", height)
        return begin, _range((*self._p, "journal", "e"))[1]

    def entries_between(self, first: int, last: int) -> tuple[bytes, bytes]:
        """Entry chunks of heights ``first..last`` inclusive."""
        prefix = self._hot().entry
        return prefix + _height(first), prefix + _height(last + 1)

    def entry_prefix_len(self) -> int:
        """Length of the journal-entry key prefix, to decode heights from keys."""
        return len(self._hot().entry)

    # snapshots

    def snapshot(self, height: int) -> bytes:
        """The snapshot record indexed at ``height``."""
        return self._key("snapshot", "by_height", height)

    def snapshots(self) -> tuple[bytes, bytes]:
        """Every snapshot record of the world."""
        return _range((*self._p, "snapshot", "by_height"))

    def snapshot_prefix_len(self) -> int:
        """Length of the snapshot key prefix."""
        return len(self._const("snapshot", "by_height"))

    def baseline(self) -> bytes:
        """The active baseline."""
        return self._const("baseline", "active")

    # inbox

    def inbox_item(self, seq: InboxSeq) -> bytes:
        """The inbox entry of ``seq``."""
        return pack((*self._p, "inbox", "e", Versionstamp.from_bytes(seq.raw)))

    def inbox_item_with_versionstamp(self, user_version: int) -> bytes:
        """An inbox entry key (with offset suffix) whose seq is the commit versionstamp."""
        return pack_with_versionstamp((Versionstamp(None, user_version),), self._hot().inbox_item)

    def inbox_after(self, seq: InboxSeq | None) -> tuple[bytes, bytes]:
        """Inbox entries strictly after ``seq`` (all entries for ``None``)."""
        begin, end = _range((*self._p, "inbox", "e"))
        return (begin if seq is None else self.inbox_item(seq) + b"\x00"), end

    def inbox_prefix_len(self) -> int:
        """Length of the inbox-entry key prefix, to decode sequences from keys."""
        return len(self._const("inbox", "e"))

    def inbox_cursor(self) -> bytes:
        """The drained boundary."""
        return self._const("inbox", "cursor")

    def inbox_idempotency(self, key: bytes) -> bytes:
        """The sequence of the item enqueued with idempotency ``key``."""
        return self._key("inbox", "idem", key)

    def inbox_idempotency_entries(self) -> tuple[bytes, bytes]:
        """Every idempotency entry of the world's inbox."""
        return _range((*self._p, "inbox", "idem"))

    def inbox_through(self, seq: InboxSeq) -> tuple[bytes, bytes]:
        """Inbox entries up to and including ``seq``."""
        return _range((*self._p, "inbox", "e"))[0], self.inbox_item(seq) + b"\x00"

    def inbox_consumed_mark(self, at_ns: int) -> bytes:
        """The consumed mark a compactor wrote at ``at_ns`` (its clock, nanoseconds)."""
        return self._key("inbox", "consumed", at_ns)

    def inbox_consumed_marks(self) -> tuple[bytes, bytes]:
        """Every consumed mark of the world, oldest first."""
        return _range((*self._p, "inbox", "consumed"))

    def inbox_consumed_prefix_len(self) -> int:
        """Length of the consumed-mark key prefix, to decode times from keys."""
        return len(self._const("inbox", "consumed"))

    def export_marker(self) -> bytes:
        """Progress of the world's in-flight segment export (Protocol F)."""
        return self._const("export", "marker")

    def cold_horizon(self) -> bytes:
        """The height through which the world's owner lets export move entries to cold
        segments without a baseline."""
        return self._const("export", "horizon")

    def notify_counter(self) -> bytes:
        """The world's enqueue counter: one atomic add per enqueue transaction that stores
        items (nothing in the plane reads it; see docs/protocols.md)."""
        return self._const("notify", "counter")

    def ready(self) -> bytes:
        """The world's pending-work mark (:meth:`UniverseKeys.ready`)."""
        return _ready_key(self.universe, self.world)

    def gc_pin(self, hash: Hash) -> bytes:
        """A GC pin of ``hash`` held by this world."""
        return self._key("gc", "pin", hash.digest)


_PLAIN_HEIGHTS: Final = 2**63
"""Heights below this are packed as one type byte naming their width, then their big-endian
bytes (the tuple encoding's integers); ``height_keys`` builds the keys of higher ones singly."""


def height_keys(key_of: Callable[[int], bytes], prefix: int, first: int, count: int) -> list[bytes]:
    """``[key_of(h) for h in range(first, first + count)]``, built in bulk, for keys that
    are a ``prefix``-byte prefix, the packed height, then a constant tail (whole journal
    entries: ``WorldKeys.whole_entry_key`` and ``entry_prefix_len``; universe log records:
    ``UniverseKeys.log_entry`` and ``log_prefix_len``): the keys of plain heights of one
    width differ only in the heights' big-endian bytes."""
    if count == 1:  # a single append's
        return [key_of(first)]
    out: list[bytes] = []
    height, stop = first, first + count
    while height < stop:
        if height >= _PLAIN_HEIGHTS:
            out.append(key_of(height))
            height += 1
            continue
        width = (height.bit_length() + 7) // 8
        run_stop = min(stop, 1 << (8 * width), _PLAIN_HEIGHTS)
        key = key_of(height)
        lead, tail = key[: prefix + 1], key[prefix + 1 + width :]
        out.extend([lead + h.to_bytes(width, "big") + tail for h in range(height, run_stop)])
        height = run_stop
    return out


def whole_run(
    keys: list[bytes], whole_key: Callable[[int], bytes], prefix: int, first: int
) -> bool:
    """Whether ``keys`` -- strictly increasing, as a range read returns them -- are the keys
    of the whole entries at heights ``first, first + 1, ...`` (``whole_key`` and ``prefix``
    as for :func:`height_keys`), checked without building them: the first and the last must
    be those heights' keys, and every key must have their length and their suffix (what
    follows the height). Such keys differ only in the height's bytes, which then strictly
    increase from the first height to the last: they are each height between, once."""
    count = len(keys)
    if not count:
        return True
    last = first + count - 1
    if last >= _PLAIN_HEIGHTS:
        return False
    low, high = whole_key(first), whole_key(last)
    size = len(low)
    if keys[0] != low or keys[-1] != high or len(high) != size or max(map(len, keys)) != size:
        return False
    joined = b"".join(keys)
    if len(joined) != count * size:
        return False
    suffix = prefix + 1 + (last.bit_length() + 7) // 8
    return all(joined[i::size] == low[i : i + 1] * count for i in range(suffix, size))
