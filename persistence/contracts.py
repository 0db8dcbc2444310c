"""The plane's contracts: what every backend guarantees, as typed Protocols.

These are the source specification's section 1 traits. The plane implements them once,
over the transaction interface of :mod:`persistence.kv`; a third-party backend may implement
them directly and prove itself with the conformance suite. :class:`Contract` is the surface
that the plane and the conformance suite's oracle (``conformance/model.py``) both implement,
generic in what names an inbox item (``InboxSeq`` for the plane, a symbolic reference for
the model) and what a journal entry reads as (bytes, or the model's symbolic entries);
:class:`PlaneContract` adds what only the plane implements (the universe log, inbox
compaction, the segment index, redoing an append). ``tests/test_contracts.py`` holds both
to them through the type checker.

Every method raises only :class:`~persistence.errors.PersistError` subclasses; each docstring
names the ones a caller should expect. Every method also refuses bad arguments -- a wrong
type, a ``bool`` for an integer, a value over its limit -- with ``Validation`` naming the
argument, before it writes anything: a refused call leaves the store byte-identical.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxItem
from persistence.protocols.app_data import AppTransaction
from persistence.protocols.compaction import InboxCompaction
from persistence.protocols.journal import GroupAppend
from persistence.protocols.log import LogEntry
from persistence.protocols.snapshots import SnapshotOutcome
from persistence.records import SnapshotRecord
from persistence.segment_records import SegmentIndexRecord
from persistence.sizes import MiB

Seq = TypeVar("Seq")
"""What names an inbox item (its sequence)."""
Entry = TypeVar("Entry")
"""What a journal entry reads as."""
SeqOut = TypeVar("SeqOut", covariant=True)
Result = TypeVar("Result")
"""What an application's transaction returns."""


@runtime_checkable
class CasStore(Protocol):
    """Universe-scoped, immutable, content-addressed blobs (Protocol A).

    The hash is always computed by the store. Bodies never change once written;
    a body that does not hash to its key is a ``Corruption`` error, never returned.
    """

    def put_verified(self, universe: UniverseId, data: bytes) -> Hash:
        """Store ``data`` and return ``sha256(data)``.

        Idempotent: a second put of the same bytes writes nothing and returns the same
        hash, also when retried after an unknown commit result.
        Raises ``Validation`` (not bytes), ``Backend``.
        """
        ...

    def get(self, universe: UniverseId, hash: Hash) -> bytes:
        """Return the body of ``hash`` in ``universe``.

        Raises ``NotFound`` (no such blob in this universe), ``Corruption`` (metadata
        present but the body is missing or does not hash to ``hash``), ``Backend``.
        """
        ...

    def has(self, universe: UniverseId, hash: Hash) -> bool:
        """Whether ``universe`` holds metadata for ``hash``. Raises ``Backend``."""
        ...


@runtime_checkable
class WorldJournalStore(Protocol[Entry]):
    """A world's append-only journal: heights ``1..head``, contiguous (Protocol B)."""

    def create_world(
        self, universe: UniverseId, world: WorldId, *, genesis_state: bytes = ...
    ) -> SnapshotRecord:
        """Create a world with its genesis snapshot (``genesis_state`` in CAS) as its
        active baseline at height 0; return the genesis record. ``WorldExists`` if it
        exists, before anything is stored."""
        ...

    def append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Append ``entries`` at heights ``expected_head+1 ..`` atomically; return the first.

        All or nothing: no partial batch is ever visible. If the head is not
        ``expected_head`` raises ``HeadAdvanced(expected, actual)`` and writes nothing.
        A retry after an unknown commit result that did apply is recognised and returns
        the same first height (the batch is not written twice).
        Raises ``Validation`` (empty batch, entry over the size limit), ``NotFound``
        (no such world), ``Backend``.

        A ``Backend`` error (a timeout, the retry limit) leaves the outcome unknown, and
        the attempt may still land later: redo the call with :meth:`retry_append_batch`.
        """
        ...

    def append_batches(
        self,
        universe: UniverseId,
        batches: Sequence[tuple[WorldId, int, Sequence[bytes]]],
        *,
        create_missing: bool = False,
    ) -> list[int]:
        """Group commit: :meth:`append_batch` for each ``(world, expected_head, entries)``
        (one per world) in one transaction; return the first heights, in order.

        All or nothing: a head that is not its ``expected_head`` raises
        ``HeadAdvanced(expected, actual, world)`` naming that world, and writes nothing. With
        ``create_missing``, a world that does not exist and whose batch expects head 0 is
        created (empty genesis) in the same transaction, else ``NotFound``. A retry after an
        unknown commit result that did apply returns the same heights. The limits of one
        append (entries, bytes, transaction size) apply to the whole group: ``Validation``.
        """
        ...

    def read_range(
        self, universe: UniverseId, world: WorldId, from_inclusive: int, limit: int
    ) -> list[tuple[int, Entry]]:
        """Up to ``limit`` entries from ``from_inclusive``, ascending and contiguous.

        Returns fewer only at the head. A height missing inside ``1..head`` raises
        ``MissingJournalEntry`` (a ``Corruption``), never a short or gapped result; an
        entry whose stored bytes changed (it fails its checksum, in a store of layout 3)
        raises ``DamagedJournalEntry``, never an altered entry.
        """
        ...

    def head(self, universe: UniverseId, world: WorldId) -> int:
        """The highest written height (0 for an empty journal). Raises ``NotFound``."""
        ...


@runtime_checkable
class UniverseLog(Protocol):
    """One order across the worlds of a universe: positions given to appended entries."""

    def append_sequenced(
        self,
        universe: UniverseId,
        batches: Sequence[tuple[WorldId, int, Sequence[bytes]]],
        tags: Sequence[Sequence[str]],
        *,
        create_missing: bool = False,
        tracking: tuple[str, int] | None = None,
        app_data: Mapping[bytes, bytes | None] | None = None,
    ) -> GroupAppend:
        """``append_batches``, and each entry gets the next universe log position (1, 2,
        ... in commit order, no gaps), tagged ``tags[batch][entry]``. ``tracking=(name,
        position)`` stores consumer ``name``'s position atomically with the appends;
        ``TrackingConflict`` (nothing written) unless it is above the stored one.
        ``app_data`` is written with them (:class:`ApplicationData`). A retry after an
        unknown commit result that applied returns the same outcome. Where positions are
        given after the commit (queued), a failure to give them is
        ``SequencingIncomplete``: the entries are appended."""
        ...

    def read_log(
        self,
        universe: UniverseId,
        first: int,
        limit: int,
        *,
        last: int | None = None,
        tags: Collection[str] | None = None,
    ) -> list[LogEntry]:
        """Up to ``limit`` entries from position ``first`` (to ``last``), optionally only
        those tagged with one of ``tags``, each with its world, height and journal entry."""
        ...

    def log_head(self, universe: UniverseId) -> int:
        """The last position (0 if none)."""
        ...

    def wait_log(self, universe: UniverseId, after: int, timeout: float) -> int:
        """Block until the last position passes ``after`` (or ``timeout``); return it."""
        ...

    def settle_log(self, universe: UniverseId) -> int:
        """Give positions to entries whose appends committed but stopped before they got
        them (a writer killed between the two steps of a queued sequenced append); return
        the last position."""
        ...

    def tracking_position(self, universe: UniverseId, name: str) -> int | None:
        """The position consumer ``name`` stored last (``None`` if none)."""
        ...

    def wait_tracking(
        self, universe: UniverseId, name: str, at_least: int, timeout: float
    ) -> int | None:
        """Block until consumer ``name`` stored ``at_least`` or more (or ``timeout``);
        return its position."""
        ...


@runtime_checkable
class DrainOutcome(Protocol[SeqOut]):
    """What a drain moved: ``count`` items appended from ``first_height``, the cursor after
    it (``None`` if the inbox was never drained and is empty)."""

    @property
    def first_height(self) -> int: ...

    @property
    def count(self) -> int: ...

    @property
    def cursor(self) -> SeqOut | None: ...


@runtime_checkable
class WorldInboxStore(Protocol[Seq]):
    """The one ingress path of a world: a commit-ordered queue and a monotonic cursor."""

    def enqueue(
        self,
        universe: UniverseId,
        world: WorldId,
        item: InboxItem,
        *,
        idempotency_key: bytes | None = None,
    ) -> Seq:
        """Append ``item``; return its sequence, which sorts after every earlier commit.

        Safe with many concurrent writers. With ``idempotency_key``, a repeated enqueue of
        the same item (e.g. a retry after an unknown commit result) returns the first
        sequence and stores nothing new, for as long as the item is retained: until inbox
        compaction removes it, at least the retention window after it was drained (a repeat
        after that makes a new item). The key stands for one request: another item under it
        is ``IdempotencyKeyReused`` and stores nothing. Raises ``Validation``, ``NotFound``,
        ``Backend``.
        """
        ...

    def enqueue_batch(
        self,
        universe: UniverseId,
        world: WorldId,
        items: Sequence[InboxItem],
        *,
        idempotency_keys: Sequence[bytes] | None = None,
    ) -> list[Seq]:
        """:meth:`enqueue` of each of ``items``, atomically, in order (``idempotency_keys``:
        one per item, distinct); their sequences. One key reused for another item refuses
        the whole batch."""
        ...

    def read_after(
        self, universe: UniverseId, world: WorldId, after_exclusive: Seq | None, limit: int
    ) -> list[tuple[Seq, InboxItem]]:
        """Up to ``limit`` items strictly after ``after_exclusive``, in sequence order."""
        ...

    def inbox_cursor(self, universe: UniverseId, world: WorldId) -> Seq | None:
        """The drained boundary (``None`` before the first drain). Raises ``NotFound``."""
        ...

    def commit_cursor(
        self,
        universe: UniverseId,
        world: WorldId,
        old_cursor: Seq | None,
        new_cursor: Seq,
    ) -> None:
        """Compare-and-swap the drained boundary from ``old_cursor`` to ``new_cursor``.

        The cursor only moves forward: ``new_cursor <= old_cursor`` raises ``Validation``;
        a cursor that is not ``old_cursor`` raises ``CursorAdvanced``; ``new_cursor`` must
        name an item of the inbox. The items it moves over are *consumed without being
        journaled*: a skip, the caller's decision (a host that applies items itself, or
        one that sets a poison item aside), and compaction removes them after the window
        like drained ones; what must reach the journal is drained instead. Re-committing the
        same swap after an unknown commit result is recognised and succeeds.
        """
        ...

    def drain_inbox_to_journal(
        self, universe: UniverseId, world: WorldId, max_items: int = 1_000, max_bytes: int = MiB
    ) -> DrainOutcome[Seq]:
        """Protocol D: append up to ``max_items`` items (at least one, then within
        ``max_bytes``) after the cursor to the journal and move the cursor past them, in one
        transaction: each item lands in the journal exactly once, in sequence order. A
        retry after an unknown commit result that applied returns the first attempt's
        outcome. Raises ``Validation``, ``NotFound``, ``Backend``."""
        ...


@runtime_checkable
class WorldSnapshotStore(Protocol):
    """Immutable snapshot index by height and a never-regressing active baseline."""

    def snapshot_commit(
        self,
        universe: UniverseId,
        world: WorldId,
        snapshot_bytes: bytes,
        *,
        height: int,
        logical_time_ns: int,
        manifest: Sequence[Hash] = (),
        receipt_horizon_height: int | None = None,
        promote_baseline: bool = False,
    ) -> tuple[SnapshotRecord, SnapshotOutcome]:
        """Protocol E: store ``snapshot_bytes`` and its manifest in CAS, index the snapshot
        at ``height`` (at or below the head), journal it and, with ``promote_baseline``,
        make it the active baseline (the fence, root completeness and non-regression of
        :meth:`promote_baseline` apply), all in one transaction. Everything that can refuse
        the commit is checked before the blobs are stored. Returns the record and what
        changed (a retry after an unknown commit result reports the first attempt's)."""
        ...

    def index_snapshot(self, universe: UniverseId, world: WorldId, record: SnapshotRecord) -> None:
        """Index ``record`` at ``record.height``.

        The same record again is a no-op; a different record at that height raises
        ``SnapshotMismatch``. Raises ``NotFound`` if the snapshot body is not in CAS.
        """
        ...

    def active_baseline(self, universe: UniverseId, world: WorldId) -> SnapshotRecord:
        """The active baseline (every world has one from creation). Raises ``NotFound``."""
        ...

    def promote_baseline(
        self, universe: UniverseId, world: WorldId, record: SnapshotRecord
    ) -> None:
        """Make the indexed ``record`` the active baseline.

        Raises ``ReceiptHorizonFence`` unless ``record.receipt_horizon_height`` equals
        ``record.height``, ``RootIncomplete`` (a ``NotFound``) naming the first blob of the
        snapshot's root -- its snapshot, its manifest, every blob the manifest lists -- that
        is not in ``universe``'s CAS, ``BaselineRegression`` if the active baseline is
        higher, and ``NotFound`` if ``record`` is not the record indexed at its height.
        """
        ...

    def list_snapshots(self, universe: UniverseId, world: WorldId) -> list[SnapshotRecord]:
        """Every indexed snapshot of the world, by height. Raises ``NotFound``."""
        ...


@runtime_checkable
class SegmentIndex(Protocol):
    """The authoritative list of a world's cold segments, keyed by end height."""

    def put_segment(self, universe: UniverseId, world: WorldId, record: SegmentIndexRecord) -> None:
        """Index an uploaded segment. The same record again is a no-op; an overlapping or
        different record for the same end height raises ``Conflict``."""
        ...

    def list_segments(
        self, universe: UniverseId, world: WorldId, from_height: int = 1
    ) -> list[SegmentIndexRecord]:
        """Segments whose range ends at or after ``from_height``, in height order."""
        ...


@runtime_checkable
class Contract(
    CasStore,
    WorldJournalStore[Entry],
    WorldInboxStore[Seq],
    WorldSnapshotStore,
    Protocol[Seq, Entry],
):
    """The surface the plane and the conformance suite's oracle both implement."""


@runtime_checkable
class ApplicationData(Protocol):
    """An application's own keys and values in its universe, written with a group append
    (``app_data=`` of ``append_batches`` and ``append_sequenced``: key to value, ``None``
    removes it), in its transaction -- stored exactly when the append is --, or in a
    transaction of the application's own (:meth:`transact_app`)."""

    def transact_app(
        self,
        universe: UniverseId,
        body: Callable[[AppTransaction], Awaitable[Result]],
        *,
        eager: bool = False,
    ) -> Result:
        """Run ``body`` in one transaction over the application's data, retried on
        conflicts (it may run more than once, even after a commit that applied); what the
        committed attempt returned."""
        ...

    def transact_app_stamped(
        self,
        universe: UniverseId,
        body: Callable[[AppTransaction], Awaitable[Result]],
        *,
        eager: bool = False,
    ) -> tuple[Result, bytes | None]:
        """:meth:`transact_app`, with the committed transaction's versionstamp (``None``
        if the attempt that committed wrote nothing)."""
        ...

    def read_app_data(self, universe: UniverseId, key: bytes) -> bytes | None:
        """The value of ``key`` (``None`` if none)."""
        ...

    def read_app_range(
        self,
        universe: UniverseId,
        begin: bytes = b"",
        end: bytes | None = None,
        *,
        limit: int = 1_000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` pairs from ``begin`` up to ``end`` (``None``: to the end), in
        the application's key order (descending with ``reverse``)."""
        ...


@runtime_checkable
class PlaneContract(
    Contract[InboxSeq, bytes], UniverseLog, SegmentIndex, ApplicationData, Protocol
):
    """The plane's whole contract: :class:`Contract`, the universe log, the segment index,
    an application's own data, inbox compaction and redoing an append whose outcome is
    unknown."""

    def retry_append_batch(
        self, universe: UniverseId, world: WorldId, expected_head: int, entries: Sequence[bytes]
    ) -> int:
        """Redo an :meth:`append_batch` whose outcome is unknown, with the same arguments.

        Appends at ``expected_head`` if the head is still there (the unknown attempt then
        never lands: it needs the same head). Otherwise the earlier attempt is settled:
        returns its first height if ``entries`` sit right above ``expected_head``, else
        raises ``HeadAdvanced`` (it did not land). Entries must be unique to the caller
        (carry an event id), or another writer's identical batch reads as this one.
        """
        ...

    def compact_inbox(
        self,
        universe: UniverseId,
        world: WorldId,
        *,
        max_items: int = 1_000,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> InboxCompaction:
        """Remove up to ``max_items`` items consumed at least the retention window ago,
        with their idempotency entries, in one transaction; ``more`` in the result says
        whether such items remain (call again).

        "Consumed at least the window ago" is read from consumed marks stored with the
        world (a compaction marks the cursor with ``now_ns()`` when a mark is due), never
        from the clock alone: an item is removed only if a mark at least the window old
        covers it, so nothing above the cursor and nothing consumed less than the window
        ago is ever removed. Safe to run concurrently with every other call and with other
        compactions, and to stop anywhere. A retry after an unknown commit result reports
        what the first attempt removed. Raises ``Validation``, ``NotFound``, ``Backend``.
        """
        ...
