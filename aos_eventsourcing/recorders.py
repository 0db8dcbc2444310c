"""eventsourcing's recorders over the plane: one universe per application, one world per
aggregate, one journal entry per stored event (see ``docs/eventsourcing.md``).

Inserts are one group append of the plane (``append_batches``; ``append_sequenced`` where
notification ids are wanted: every entry then gets the next position of the universe log,
tagged with its topic), all or nothing, expecting each world's head where the recorder last
saw it. Each recorder remembers, per aggregate, the last height and version it saw (after
its own inserts and its reads), so an insert into a known aggregate and an insert into a new
one (expected head 0, created in the same transaction) are each one transaction. When a head
has moved, the recorder reads the version at the new head: a version already taken is
eventsourcing's ``IntegrityError``, anything above it is appended at the new head.

Versions of an aggregate increase along its journal (heights), but need not be contiguous
(snapshots' are not): reads map versions to heights from the first version when the recorder
has seen them to be contiguous, and otherwise read and filter. An aggregate recorder (the
snapshots') also stores a version below the aggregate's last one if it is not taken, as
eventsourcing's SQL and in-memory recorders do: it reads the whole journal to check, and
marks that entry and every later one as out of order (:func:`codec.mark_unsorted`); a read
that meets a marked entry reads the whole journal and sorts it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ConnectionPoolClosedError,
    IntegrityError,
    Notification,
    OperationalError,
    StoredEvent,
    Subscription,
    Tracking,
)

from aos_eventsourcing import codec
from aos_eventsourcing.cache import Known, WorldCache
from persistence.errors import HeadAdvanced, PersistError, SequencingIncomplete, WorldNotFound
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from persistence.sizes import MAX_ROW_LIMIT

log = logging.getLogger(__name__)
MAX_ATTEMPTS: Final = 100
"""Appends one insert tries before giving up (``OperationalError``) while the heads of its
aggregates keep moving without taking its versions."""
ALL: Final = MAX_ROW_LIMIT
"""A read limit that means "to the head"."""
WATCH_SECONDS: Final = 1.0
"""The longest single wait of a subscription's watcher (``stop`` interrupts it)."""
SUBSCRIPTION_PAGE: Final = 500
"""Notifications a subscription reads per query."""
CLOSED: Final = "the infrastructure factory was closed (Application.close())"


class _Unsorted(Exception):
    """A read met an entry marked out of order: the journal must be read whole."""


def _shared_world(origin: object, world: WorldId, owner: str | None) -> IntegrityError:
    """The refusal of an event of ``origin`` whose world holds another aggregate's, the
    one of text id ``owner`` (``None``: of a UUID id)."""
    theirs = "a UUID id" if owner is None else f"text id {owner!r}"
    return IntegrityError(
        f"aggregate {origin!r}: its world {world} holds the events of another aggregate "
        f"({theirs}): a text id and the UUID it hashes to cannot both be used"
    )


@dataclass(slots=True)
class _Batch:
    """The events of one insert for one aggregate: its world's part of the group append."""

    world: WorldId
    origin: object
    text_id: str | None
    versions: list[int]
    entries: list[bytes]
    topics: list[str]
    indexes: list[int]
    """Where each event is in the caller's list."""
    unsorted: bool = False
    """The entries are marked out of order."""


class PlaneClosedError(ConnectionPoolClosedError, OperationalError):
    """A recorder (or factory) used after its factory was closed (``Application.close()``):
    eventsourcing's ``ConnectionPoolClosedError``, as its SQLite and PostgreSQL recorders
    raise, and an ``OperationalError``, as this module raised before."""


class PlaneRecorder:
    """A recorder of one universe of a plane; once ``closed`` is set (by the factory's
    ``close``), every call of it fails (:class:`PlaneClosedError`), whatever the engine."""

    def __init__(
        self, plane: Plane, universe: UniverseId, *, closed: threading.Event | None = None
    ) -> None:
        self._plane = plane
        self._closed = closed
        self.universe = universe
        """The universe that holds the recorder's records."""

    @property
    def plane(self) -> Plane:
        """The plane the recorder writes to (:class:`PlaneClosedError` once closed)."""
        if self._closed is not None and self._closed.is_set():
            raise PlaneClosedError(CLOSED)
        return self._plane

    def app_data(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Mapping[bytes, bytes | None] | None:
        """The application's own data an insert writes in its transaction, with its events
        (and a process's tracking record): key to new value, ``None`` to remove the key;
        ``None`` for nothing (this default). A subclass maps the insert's keyword arguments
        -- what the application's ``save`` or a process's ``_record`` put there, as
        eventsourcing passes them to ``insert_events`` -- to its keys. Called once per
        insert, before its first attempt."""
        return None

    def read_app_data(self, key: bytes) -> bytes | None:
        """The value of the application's own ``key`` (``None`` if it has none)."""
        try:
            return self.plane.read_app_data(self.universe, key)
        except PersistError as exc:
            raise codec.translate(exc) from exc

    def read_app_range(
        self,
        begin: bytes = b"",
        end: bytes | None = None,
        *,
        limit: int = 1_000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` ``(key, value)`` pairs of the application's own data from
        ``begin`` up to ``end`` (``None``: every key from ``begin`` on), in key order
        (descending with ``reverse``): ``Plane.read_app_range``."""
        try:
            return self.plane.read_app_range(
                self.universe, begin, end, limit=limit, reverse=reverse
            )
        except PersistError as exc:
            raise codec.translate(exc) from exc


class _Journals(PlaneRecorder):
    """Aggregates as worlds: inserts and reads of their events."""

    STORES_LOWER_VERSIONS: ClassVar[bool] = False
    """Whether a version below the aggregate's last one is stored if not taken (snapshots:
    eventsourcing's SQL and in-memory recorders store them), or refused (events, whose
    versions eventsourcing only ever appends: a lower one is a conflict)."""

    def __init__(
        self, plane: Plane, universe: UniverseId, *, closed: threading.Event | None = None
    ) -> None:
        super().__init__(plane, universe, closed=closed)
        self._cache = WorldCache()

    # ------------------------------------------------------------------ inserts

    def _insert(
        self,
        stored_events: Sequence[StoredEvent],
        tracking: Tracking | None,
        *,
        sequenced: bool,
        app_data: Mapping[bytes, bytes | None] | None = None,
    ) -> list[int]:
        """Append ``stored_events`` (and ``tracking``, and ``app_data``) in one transaction;
        their log positions in the caller's order if ``sequenced``, else ``[]``."""
        batches = self._group(stored_events)
        if not batches and tracking is None and app_data is None:
            return []
        tracked = (
            None if tracking is None else (tracking.application_name, tracking.notification_id)
        )
        tags = [batch.topics for batch in batches]
        for _ in range(MAX_ATTEMPTS):
            heads = [self._expected_head(batch) for batch in batches]
            group = [(b.world, head, b.entries) for b, head in zip(batches, heads, strict=True)]
            create = 0 in heads  # appends to known aggregates skip the creation's costs
            try:
                if sequenced:
                    done = self.plane.append_sequenced(
                        self.universe,
                        group,
                        tags,
                        create_missing=create,
                        tracking=tracked,
                        app_data=app_data,
                    )
                    first_position = done.first_position
                else:
                    self.plane.append_batches(
                        self.universe, group, create_missing=create, app_data=app_data
                    )
                    first_position = None
            except HeadAdvanced as exc:
                self._moved(batches, exc.world, exc.actual)
                continue
            except WorldNotFound as exc:
                self._moved(batches, exc.world, None)
                continue
            except SequencingIncomplete as exc:  # recorded: find the ids, never insert again
                first_position = self._settled(exc, batches[0].world, heads[0] + 1)
            except PersistError as exc:
                raise codec.translate(exc) from exc
            for batch, head in zip(batches, heads, strict=True):
                self._cache.seen(
                    batch.world, head + 1, batch.versions, batch.text_id, batch.unsorted
                )
            if first_position is None:
                return []
            ids = [0] * len(stored_events)
            order = itertools.chain.from_iterable(batch.indexes for batch in batches)
            for position, index in enumerate(order, start=first_position):
                ids[index] = position
            return ids
        raise OperationalError(
            f"gave up after {MAX_ATTEMPTS} attempts: the heads of the aggregates kept moving"
        )

    def _settled(self, incomplete: SequencingIncomplete, world: WorldId, height: int) -> int:
        """The notification id of the first event of an insert that was recorded but whose
        ids were not settled (``incomplete``): settle the universe log, then find the entry
        of ``world`` at ``height`` above the head the insert read. An ``OperationalError``
        saying the events are recorded if that fails too (saving them again would be an
        ``IntegrityError``: their versions are taken)."""
        try:
            head = self.plane.settle_log(self.universe)
            first = incomplete.after + 1
            while first <= head:
                page = self.plane.read_log(self.universe, first, 1_000, last=head)
                for entry in page:
                    if entry.world == world and entry.height == height:
                        return entry.position
                if not page:
                    break
                first = page[-1].position + 1
        except PersistError as exc:
            raise OperationalError(
                f"the events were recorded, but their notification ids are not known: {exc}"
            ) from exc
        raise OperationalError(
            f"the events were recorded, but their notification ids are not known: {incomplete}"
        )

    def _group(self, stored_events: Sequence[StoredEvent]) -> list[_Batch]:
        """The events by aggregate, in order of first appearance; ``IntegrityError`` if an
        aggregate's versions do not increase within the call (a duplicate, say)."""
        batches: dict[WorldId, _Batch] = {}
        batch: _Batch | None = None
        last: object = None  # the id of the previous event, if a UUID or text
        text_id: str | None = None
        for index, event in enumerate(stored_events):
            origin = event.originator_id
            # An insert's events mostly run aggregate by aggregate: an id equal to the
            # previous event's (both exactly a UUID, or both text) is in the same batch.
            kind = type(origin)
            if (
                batch is None
                or kind is not type(last)
                or (kind is not UUID and kind is not str)
                or origin != last
            ):
                world, text_id = codec.world_of(origin)
                batch = batches.get(world)
                if batch is None:
                    batch = batches[world] = _Batch(world, origin, text_id, [], [], [], [])
                elif batch.text_id != text_id:
                    raise _shared_world(origin, world, batch.text_id)
                last = origin
            version = event.originator_version
            entry = codec.encode(version, event.topic, event.state, text_id)
            if batch.versions and version <= batch.versions[-1]:
                raise IntegrityError(
                    f"aggregate {origin}: version {version} after {batch.versions[-1]} in one "
                    "insert (versions must increase)"
                )
            batch.versions.append(version)
            batch.entries.append(entry)
            batch.topics.append(event.topic)
            batch.indexes.append(index)
        return list(batches.values())

    def _expected_head(self, batch: _Batch) -> int:
        """The head ``batch`` is appended at: where the recorder last saw it (0 if never);
        ``IntegrityError`` if the aggregate had a version at or above the batch's first
        (unless :attr:`STORES_LOWER_VERSIONS`: then only if one of its versions is taken)."""
        known = self._cache.get(batch.world)
        if known is None:
            return 0
        if known.height and known.owner != batch.text_id:
            raise _shared_world(batch.origin, batch.world, known.owner)
        lower = known.last_version is not None and batch.versions[0] <= known.last_version
        if known.unsorted or (lower and self.STORES_LOWER_VERSIONS):
            return self._head_below(batch)
        if lower:
            raise IntegrityError(
                f"aggregate {batch.origin}: version {batch.versions[0]} is taken (the "
                f"aggregate is at version {known.last_version} or above)"
            )
        return known.height

    def _head_below(self, batch: _Batch) -> int:
        """The head ``batch`` is appended at when its versions are not all above the
        journal's last one (or the journal is out of order): the whole journal is read;
        ``IntegrityError`` if one of its versions is taken; its entries are marked out of
        order unless they all come after every stored version of a journal in order."""
        rows = self._read_whole(batch.world)
        if rows and rows[-1][1].text_id != batch.text_id:
            raise _shared_world(batch.origin, batch.world, rows[-1][1].text_id)
        stored = {entry.version for _, entry in rows}
        for version in batch.versions:
            if version in stored:
                raise IntegrityError(f"aggregate {batch.origin}: version {version} is taken")
        in_order = not rows or (
            not rows[-1][1].unsorted and batch.versions[0] > rows[-1][1].version
        )
        if not in_order and not batch.unsorted:
            batch.entries = [codec.mark_unsorted(entry) for entry in batch.entries]
            batch.unsorted = True
        return len(rows)

    def _moved(self, batches: list[_Batch], world: object, head: int | None) -> None:
        """An append found the head of ``world`` at ``head`` (``None``: no such world):
        learn the version there; ``IntegrityError`` if it takes the batch's first version."""
        batch = next((b for b in batches if b.world == world), None)
        if batch is None:  # the plane named a world the insert does not append to
            raise OperationalError(f"an append reported a conflict on world {world}")
        if head is None:
            self._cache.forget(batch.world)
            return
        self._refresh(batch.world, head)
        self._expected_head(batch)

    def _refresh(self, world: WorldId, head: int) -> Known:
        """Learn the version at ``head`` (``head`` must be a height the world had)."""
        if head == 0:
            return self._cache.refreshed(world, 0, None, None)
        try:
            rows = self.plane.read_range(self.universe, world, head, 1)
        except PersistError as exc:
            raise codec.translate(exc) from exc
        entry = codec.decode(rows[0][1], "entry")
        return self._cache.refreshed(world, head, entry.version, entry.text_id, entry.unsorted)

    # ------------------------------------------------------------------ reads

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """The aggregate's events with versions above ``gt`` and at most ``lte``, in version
        order (``desc``: newest first), at most ``limit`` of them (none if its world holds
        another aggregate's: see :class:`Known`)."""
        world, text_id = codec.world_of(originator_id)
        codec.check_int(gt, "gt", optional=True)
        codec.check_int(lte, "lte", optional=True)
        codec.check_int(limit, "limit", optional=True)
        if limit is not None and limit < 1:
            return []
        try:
            try:
                if (
                    self.STORES_LOWER_VERSIONS
                    and not (desc and lte is None)  # reads the head entry first
                    and not (gt is None and lte is None and limit is None)  # reads to it
                    and self._refresh_last(world).unsorted
                ):
                    raise _Unsorted
                if desc:
                    entries = self._descending(world, gt, lte, limit)
                else:
                    entries = self._ascending(world, gt, lte, limit)
            except _Unsorted:
                entries = self._sorted(world, gt, lte, desc, limit)
        except WorldNotFound:
            return []
        except PersistError as exc:
            raise codec.translate(exc) from exc
        return [
            StoredEvent(originator_id, e.version, e.topic, e.state)
            for _, e in entries
            if e.text_id == text_id
        ]

    def set_cold_version(self, originator_id: UUID | str, version: int) -> int:
        """Let segment export (``aosp segments export``, ``segments.export.Exporter``) move
        the aggregate's events at or below ``version`` to cold segments in the object store
        (reads stitch them back); return the height of the world's cold horizon. The horizon
        only rises: a lower version leaves it. In a journal out of order (snapshots taken
        below later ones), the events that go are those before the first above ``version``."""
        try:
            return self._let_go_cold(originator_id, version)
        except PersistError as exc:
            raise codec.translate(exc) from exc

    def _let_go_cold(self, originator_id: UUID | str, version: int) -> int:
        """:meth:`set_cold_version`, its plane errors untranslated."""
        world, text_id = codec.world_of(originator_id)
        codec.check_int(version, "version")
        try:
            found = self._descending(world, None, version, 1)
        except _Unsorted:  # the longest run from height 1 of versions at most ``version``
            rows = self._read_whole(world)
            end = next((i for i, (_, e) in enumerate(rows) if e.version > version), len(rows))
            found = rows[end - 1 : end] if end else []
        if found and found[0][1].text_id != text_id:  # another aggregate's world
            raise WorldNotFound(self.universe, world)
        height = found[0][0] if found else 0
        return self.plane.set_cold_horizon(self.universe, world, height)

    def _read_whole(self, world: WorldId) -> list[tuple[int, codec.Entry]]:
        """Every entry of the journal, in height order (marked ones too)."""
        rows: list[tuple[int, codec.Entry]] = []
        while True:
            page = self._read(world, len(rows) + 1, ALL, any_order=True)
            rows += page
            if len(page) < ALL:
                return rows

    def _sorted(
        self, world: WorldId, gt: int | None, lte: int | None, desc: bool, limit: int | None
    ) -> list[tuple[int, codec.Entry]]:
        """:meth:`select_events`' rows of a journal out of order: all read, then sorted."""
        rows = [
            row
            for row in self._read_whole(world)
            if (gt is None or row[1].version > gt) and (lte is None or row[1].version <= lte)
        ]
        rows.sort(key=lambda row: row[1].version, reverse=desc)
        return rows if limit is None else rows[:limit]

    def _ascending(
        self, world: WorldId, gt: int | None, lte: int | None, limit: int | None
    ) -> list[tuple[int, codec.Entry]]:
        low = 1
        high = None
        if gt is not None or lte is not None:
            first = self._first_version(world)
            if first is None:
                return []
            if gt is not None:
                found = self._low(world, gt, first)
                if found is None:
                    return []
                low = found
            if lte is not None:
                high = lte - first + 1  # version(h) >= first + h - 1: nothing above it
        out: list[tuple[int, codec.Entry]] = []
        while high is None or low <= high:
            want = ALL if high is None else min(ALL, high - low + 1)
            if limit is not None:
                want = min(want, limit - len(out))
            rows = self._read(world, low, want)
            for height, entry in rows:
                if lte is not None and entry.version > lte:
                    return out
                if gt is None or entry.version > gt:
                    out.append((height, entry))
                    if len(out) == limit:
                        return out
            if len(rows) < want:  # the head
                return out
            low += len(rows)
        return out

    def _low(self, world: WorldId, gt: int, first: int) -> int | None:
        """The lowest height that can hold a version above ``gt`` (``None``: none does)."""
        guess = gt - first + 2  # exact while versions are contiguous below it
        if guess <= 1:
            return 1
        known = self._cache.get(world)
        if known is not None and guess - 1 <= known.contiguous:
            return guess
        known = self._refresh_last(world)
        if known.unsorted:
            raise _Unsorted
        if known.last_version is None or known.last_version <= gt:
            return None
        # version(h) <= last_version - (height - h): below this, all are at most gt
        return max(1, gt - known.last_version + known.height + 1)

    def _descending(
        self, world: WorldId, gt: int | None, lte: int | None, limit: int | None
    ) -> list[tuple[int, codec.Entry]]:
        if lte is None and limit is not None:
            # the newest ``limit`` (a snapshot lookup reads one): the head with them
            newest = self._read_last(world, limit)[::-1]
            if gt is not None:
                newest = list(itertools.takewhile(lambda row: row[1].version > gt, newest))
            return newest
        top = self._head(world)
        if lte is not None and top:
            first = self._first_version(world)
            if first is None:
                return []
            top = min(top, lte - first + 1)
        out: list[tuple[int, codec.Entry]] = []
        while top >= 1:
            want = top if limit is None else min(top, limit - len(out))
            rows = self._read(world, top - want + 1, want)
            for height, entry in reversed(rows):
                if gt is not None and entry.version <= gt:
                    return out
                if lte is None or entry.version <= lte:
                    out.append((height, entry))
                    if len(out) == limit:
                        return out
            top -= want
        return out

    def _head(self, world: WorldId) -> int:
        return self.plane.head(self.universe, world)

    def _refresh_last(self, world: WorldId) -> Known:
        """Learn the head and the version there, read together (``WorldNotFound`` raised as
        the plane raises it)."""
        head, rows = self.plane.read_last(self.universe, world, 1)
        if head == 0:
            return self._cache.refreshed(world, 0, None, None)
        entry = codec.decode(rows[0][1], "entry", head, "of world", world)
        return self._cache.refreshed(world, head, entry.version, entry.text_id, entry.unsorted)

    def _read_last(self, world: WorldId, limit: int) -> list[tuple[int, codec.Entry]]:
        """The newest ``limit`` entries and the head, read together, decoded; learned.
        ``_Unsorted`` if the journal is marked out of order (its last entry is)."""
        _, raw = self.plane.read_last(self.universe, world, limit)
        rows = [
            (height, codec.decode(entry, "entry", height, "of world", world))
            for height, entry in raw
        ]
        if rows:
            self._cache.seen(
                world, rows[0][0], [entry.version for _, entry in rows], rows[0][1].text_id,
                rows[-1][1].unsorted,
            )  # fmt: skip
            if rows[-1][1].unsorted:
                raise _Unsorted
        return rows

    def _first_version(self, world: WorldId) -> int | None:
        """The version at height 1 (``None`` if the journal is empty)."""
        known = self._cache.get(world)
        if known is not None and known.first_version is not None:
            return known.first_version
        rows = self._read(world, 1, 1)
        return rows[0][1].version if rows else None

    def _read(
        self, world: WorldId, first: int, limit: int, *, any_order: bool = False
    ) -> list[tuple[int, codec.Entry]]:
        """Entries ``first, ...`` (up to ``limit``, to the head), decoded; learned.
        ``_Unsorted`` if one is marked out of order (then the last is), unless
        ``any_order``."""
        rows = [
            (height, codec.decode(entry, "entry", height, "of world", world))
            for height, entry in self.plane.read_range(self.universe, world, first, limit)
        ]
        if rows:
            owner = rows[0][1].text_id
            unsorted = rows[-1][1].unsorted
            self._cache.seen(world, first, [entry.version for _, entry in rows], owner, unsorted)
            if unsorted and not any_order:
                raise _Unsorted
        return rows


class PlaneAggregateRecorder(_Journals, AggregateRecorder):
    """eventsourcing's ``AggregateRecorder`` (snapshots, for one): each insert is one group
    append (``Plane.append_batches``), without notification ids. A version below the
    aggregate's last one is stored if not taken (a snapshot taken at an earlier version),
    at the cost of reading the aggregate's whole journal for that insert and for every
    insert and bounded read of it afterwards."""

    STORES_LOWER_VERSIONS = True

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        """Record ``stored_events`` atomically (``IntegrityError`` if a version is taken),
        with the application's own data of :meth:`app_data`."""
        self._insert(
            stored_events, None, sequenced=False, app_data=self.app_data(stored_events, **kwargs)
        )


class PlaneSnapshotRecorder(PlaneAggregateRecorder):
    """The snapshot recorder of ``AOSP_COLD_AT_SNAPSHOTS``: each snapshot lets its
    aggregate's events at or below its version go cold. After an insert, the cold horizon of
    each aggregate's journal in ``events`` rises to the version of its newest snapshot in
    the insert (:meth:`set_cold_version`); a snapshot of an aggregate with no events there
    raises nothing. The insert comes first, so an insert refused (bad input, a version
    taken) or failed changes nothing; a horizon that then fails to rise is logged, not
    raised -- the snapshot is stored, and the insert's outcome is what the caller learns --
    and the aggregate's events stay hot until a later snapshot raises it."""

    def __init__(
        self,
        plane: Plane,
        universe: UniverseId,
        events: PlaneAggregateRecorder,
        *,
        closed: threading.Event | None = None,
    ) -> None:
        super().__init__(plane, universe, closed=closed)
        self.events = events
        """The recorder of the events the snapshots summarize."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        """Record ``stored_events`` atomically (``IntegrityError`` if a version is taken),
        then raise the aggregates' cold horizons."""
        super().insert_events(stored_events)
        newest: dict[UUID | str, int] = {}
        for snapshot in stored_events:  # checked by the insert: ids and int versions
            version = snapshot.originator_version
            newest[snapshot.originator_id] = max(
                version, newest.get(snapshot.originator_id, version)
            )
        for originator_id, version in newest.items():
            try:
                self.events._let_go_cold(originator_id, version)
            except WorldNotFound:
                continue
            except PersistError as exc:
                log.warning(
                    "aggregate %s: snapshot %d stored, its events' cold horizon not raised: %s",
                    originator_id,
                    version,
                    exc,
                )


class PlaneApplicationRecorder(_Journals, ApplicationRecorder):
    """eventsourcing's ``ApplicationRecorder``: notification ids are the positions of the
    universe log (``Plane.append_sequenced``), gapless and in commit order."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        """Record ``stored_events`` atomically, with the application's own data of
        :meth:`app_data`; their notification ids, in order."""
        return self._insert(
            stored_events, None, sequenced=True, app_data=self.app_data(stored_events, **kwargs)
        )

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> list[Notification]:
        """Up to ``limit`` notifications from ``start`` (after it, unless
        ``inclusive_of_start``) to ``stop``, with one of ``topics`` if any are given."""
        codec.check_int(start, "start", optional=True)
        codec.check_int(limit, "limit")
        codec.check_int(stop, "stop", optional=True)
        first = 1 if start is None else start if inclusive_of_start else start + 1
        first = max(first, 1)
        if limit < 1 or (stop is not None and stop < first):
            return []
        limit = min(limit, MAX_ROW_LIMIT)
        if not topics:  # positions are gapless: the last one wanted is known
            stop = first + limit - 1 if stop is None else min(stop, first + limit - 1)
        try:
            entries = self.plane.read_log(
                self.universe, first, limit, last=stop, tags=topics or None
            )
        except PersistError as exc:
            raise codec.translate(exc) from exc
        out = []
        for found in entries:
            entry = codec.decode(found.entry, "log position", found.position)
            out.append(
                Notification(
                    id=found.position,
                    originator_id=found.world.uuid if entry.text_id is None else entry.text_id,
                    originator_version=entry.version,
                    topic=entry.topic,
                    state=entry.state,
                )
            )
        return out

    def max_notification_id(self) -> int | None:
        """The last notification id (``None`` before the first)."""
        try:
            return self.plane.log_head(self.universe) or None
        except PersistError as exc:
            raise codec.translate(exc) from exc

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> PlaneSubscription:
        """Notifications after ``gt`` (with one of ``topics``, if given), blocking for new
        ones until stopped."""
        return PlaneSubscription(self, gt, topics)


class PlaneSubscription(Subscription[PlaneApplicationRecorder]):
    """A subscription to an application's notifications. The iterating thread reads the
    log; a watcher thread waits on the log head with ``Plane.wait_log`` (the engine's change
    notification: a FoundationDB watch, the memory engine's commit condition, SQLite's poll)
    and wakes it when the head moves. ``stop`` wakes it at once."""

    def __init__(
        self, recorder: PlaneApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder, gt, topics)
        self._scanned = gt or 0
        self._ready: deque[Notification] = deque()
        self._changed = threading.Event()
        self._error: Exception | None = None
        self._stopped = threading.Event()
        head = recorder.max_notification_id() or 0
        self._watcher = threading.Thread(
            target=self._watch, args=(head,), name="aos-eventsourcing-watch", daemon=True
        )
        self._watcher.start()

    def stop(self) -> None:
        """Stop the subscription: iteration ends, now or at its next item; the watcher
        thread has ended when this returns (it never outlives the subscription's store)."""
        super().stop()
        self._stopped.set()
        self._changed.set()
        if threading.current_thread() is not self._watcher and self._watcher.is_alive():
            self._watcher.join()

    def __next__(self) -> Notification:
        while not self._has_been_stopped:
            if self._ready:
                return self._ready.popleft()
            self._changed.clear()
            head = self._recorder.max_notification_id() or 0
            if head > self._scanned:
                found = self._recorder.select_notifications(
                    self._scanned,
                    SUBSCRIPTION_PAGE,
                    head,
                    self._topics,
                    inclusive_of_start=False,
                )
                self._scanned = found[-1].id if len(found) == SUBSCRIPTION_PAGE else head
                self._ready.extend(found)
                continue
            self._changed.wait()
        if self._error is not None:
            raise self._error
        raise StopIteration

    def _watch(self, after: int) -> None:
        """Wake the iterating thread whenever the log head passes ``after``."""
        recorder = self._recorder
        try:
            while not self._has_been_stopped:
                head = recorder.plane.wait_log(
                    recorder.universe, after, WATCH_SECONDS, interrupt=self._stopped
                )
                if head > after:
                    after = head
                    self._changed.set()
        except Exception as exc:  # reported to the iterating thread, unless stopped
            if not self._has_been_stopped:
                error = codec.translate(exc) if isinstance(exc, PersistError) else exc
                if recorder._closed is not None and recorder._closed.is_set():
                    error = PlaneClosedError(CLOSED)  # the engine closed under the wait
                self._error = error
                self.stop()
