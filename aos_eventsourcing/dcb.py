"""eventsourcing's dynamic consistency boundary (``eventsourcing.dcb``) over the plane.

A DCB store is one world of its own universe (the application's, derived for ``"dcb"``):
each event is a journal entry (CBOR ``[type, data, tags]``) and its position is its height
-- 1, 2, ... in commit order, as eventsourcing's recorders number them --, appended with
``Plane.append_sequenced`` (whose log head wakes subscriptions) expecting the world's head
where the condition was checked. The events' tags and types are indexed in the
application's own data (``app_data``: ``t`` + the packed tag + the position, ``y`` + the
packed type + the position), written in the transaction of the events; a query reads the
index ranges of its items' tags and types, and a condition is checked against them up to
the head the append then expects: if any event was appended since, the append finds the
head moved and checks the events since. Appends of one store therefore serialize on its
head, whatever their boundaries (see ``docs/eventsourcing.md``: DCB)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Final

from eventsourcing.dcb.api import (
    DCBAppendCondition,
    DCBEvent,
    DCBQuery,
    DCBQueryItem,
    DCBReadResponse,
    DCBRecorder,
    DCBSequencedEvent,
)
from eventsourcing.dcb.persistence import DCBListenNotifySubscription
from eventsourcing.dcb.popo import SimpleDCBReadResponse
from eventsourcing.persistence import DataError, IntegrityError, OperationalError, ProgrammingError

from aos_eventsourcing import codec
from aos_eventsourcing.recorders import MAX_ATTEMPTS, WATCH_SECONDS, PlaneRecorder
from persistence import cbor, fdbtuple
from persistence.errors import (
    CorruptRecord,
    HeadAdvanced,
    PersistError,
    SequencingIncomplete,
    WorldNotFound,
)
from persistence.ids import WorldId

STORE_WORLD: Final = WorldId(uuid.uuid5(codec.NAMESPACE, "dcb-events"))
"""The world that holds a DCB store's events (one per universe)."""
WINDOW: Final = 10_000
"""Positions a query reads the index over at a time (:meth:`PlaneDCBRecorder._matches`)."""
GAP: Final = 16
"""Matching positions at most this far apart are read with one range read."""
MAX_TAG_BYTES: Final = 1_000
"""A DCB type or tag, UTF-8 encoded: 1 to 1,000 bytes (each is part of an index key)."""
_TAG: Final = b"t"
_TYPE: Final = b"y"


def _name(value: object, field: str) -> None:
    """``DataError`` naming ``field`` unless ``value`` is text of 1 to
    :data:`MAX_TAG_BYTES` bytes of UTF-8."""
    size = len(codec.check_text(value, field).encode())
    if not 1 <= size <= MAX_TAG_BYTES:
        raise DataError(f"{field} must be 1 to {MAX_TAG_BYTES:,} bytes, not {size:,}")


def _prefix(kind: bytes, name: str) -> bytes:
    return kind + fdbtuple.pack((name,))


def _index_key(kind: bytes, name: str, position: int) -> bytes:
    return _prefix(kind, name) + position.to_bytes(8, "big")


def encode_event(event: DCBEvent) -> bytes:
    """A DCB event's journal entry: CBOR ``[type, data, tags]`` (``DataError`` if a field
    has the wrong type or size)."""
    if not isinstance(event, DCBEvent):
        raise DataError(f"an event must be a DCBEvent, not {type(event).__name__}")
    _name(event.type, "event type")
    if type(event.data) is not bytes:
        raise DataError(f"event data must be bytes, not {type(event.data).__name__}")
    if not isinstance(event.tags, list | tuple):
        raise DataError(f"event tags must be a list, not {type(event.tags).__name__}")
    for tag in event.tags:
        _name(tag, "event tag")
    return cbor.encode([event.type, event.data, list(event.tags)])


def decode_event(entry: bytes, position: int) -> DCBSequencedEvent:
    """The event stored as ``entry`` at ``position`` (``CorruptRecord`` if it is not one)."""
    value = cbor.decode(entry)
    if not (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], str)
        and isinstance(value[1], bytes)
        and isinstance(value[2], list)
        and all(isinstance(tag, str) for tag in value[2])
    ):
        raise CorruptRecord("DCB event", f"position {position}: not [type, data, tags]")
    return DCBSequencedEvent(DCBEvent(value[0], value[1], value[2]), position)


def _count(value: object, name: str) -> int | None:
    """``value``, a count (``None`` allowed); ``DataError`` naming ``name`` otherwise."""
    codec.check_int(value, name, optional=True)
    if value is not None and not 0 <= value < 2**63:  # type: ignore[operator]
        raise DataError(f"{name} must be from 0 to 2**63 - 1, not {value}")
    return value  # type: ignore[return-value]


def _items(query: DCBQuery | None) -> list[DCBQueryItem]:
    """The query's items (``DataError`` for a name that is not text). A type or tag that
    no event can have (empty, or longer than :data:`MAX_TAG_BYTES`) matches nothing."""
    if query is None:
        return []
    if not isinstance(query, DCBQuery):
        raise DataError(f"a query must be a DCBQuery, not {type(query).__name__}")
    for item in query.items:
        for name in [*item.types, *item.tags]:
            if not isinstance(name, str):
                raise DataError(f"a query type or tag must be text, not {type(name).__name__}")
    return list(query.items)


def _storable(name: str) -> bool:
    try:
        return 1 <= len(name.encode()) <= MAX_TAG_BYTES
    except UnicodeEncodeError:
        return False


class PlaneDCBRecorder(PlaneRecorder, DCBRecorder):
    """eventsourcing's ``DCBRecorder`` over the plane (see the module docstring)."""

    # ------------------------------------------------------------------ reads

    def _head(self) -> int:
        try:
            return self.plane.head(self.universe, STORE_WORLD)
        except WorldNotFound:
            return 0

    def _indexed(self, kind: bytes, name: str, after: int, upto: int) -> set[int]:
        """The positions after ``after``, up to ``upto``, of the events of type or tag
        ``name`` (by ``kind``)."""
        if not _storable(name):
            return set()
        prefix = _prefix(kind, name)
        found: set[int] = set()
        begin, end = prefix + (after + 1).to_bytes(8, "big"), prefix + (upto + 1).to_bytes(8, "big")
        while begin < end:
            rows = self.read_app_range(begin, end, limit=10_000)
            found.update(int.from_bytes(key[len(prefix) :], "big") for key, _ in rows)
            if len(rows) < 10_000:
                break
            begin = rows[-1][0] + b"\x00"
        return found

    def _matching(self, items: Sequence[DCBQueryItem], after: int, upto: int) -> set[int] | None:
        """The positions after ``after``, up to ``upto``, of the events some item matches
        (``None``: every event -- an item with neither types nor tags)."""
        out: set[int] = set()
        for item in items:
            if not item.tags and not item.types:
                return None
            positions: set[int] | None = None
            for tag in item.tags:
                tagged = self._indexed(_TAG, tag, after, upto)
                positions = tagged if positions is None else positions & tagged
                if not positions:
                    break
            if item.types and (positions is None or positions):
                typed: set[int] = set()
                for kind in item.types:
                    typed |= self._indexed(_TYPE, kind, after, upto)
                positions = typed if positions is None else positions & typed
            out |= positions or set()
        return out

    def _matches(
        self, items: Sequence[DCBQueryItem], after: int, upto: int, most: int | None
    ) -> list[int]:
        """The first ``most`` (all: ``None``) positions after ``after``, up to ``upto``,
        that ``items`` match, ascending: the index is read window by window of
        :data:`WINDOW` positions, stopping once ``most`` are found (a subscription's pages
        read the index from where they start, not to the head)."""
        found: list[int] = []
        low = after
        while low < upto and (most is None or len(found) < most):
            high = min(upto, low + WINDOW)
            matching = self._matching(items, low, high)
            found.extend(range(low + 1, high + 1) if matching is None else sorted(matching))
            low = high
        return found if most is None else found[:most]

    def _recorded(self, items: Sequence[DCBQueryItem], after: int, upto: int) -> bool:
        """Whether an event after ``after``, up to ``upto``, matches the query of
        ``items`` (every event, without items)."""
        if upto <= after:
            return False
        return not items or bool(self._matches(items, after, upto, 1))

    def _events(self, positions: Sequence[int]) -> list[DCBSequencedEvent]:
        """The events at ``positions`` (ascending), read in spans: positions at most
        :data:`GAP` apart share one range read, the heights between them dropped."""
        wanted = set(positions)
        events: list[DCBSequencedEvent] = []
        start = 0
        for index in range(1, len(positions) + 1):
            if index < len(positions) and positions[index] - positions[index - 1] <= GAP:
                continue
            first, last = positions[start], positions[index - 1]
            rows = self.plane.read_range(self.universe, STORE_WORLD, first, last - first + 1)
            events.extend(decode_event(entry, h) for h, entry in rows if h in wanted)
            start = index
        return events

    def read(
        self,
        query: DCBQuery | None = None,
        *,
        after: int | None = None,
        limit: int | None = None,
    ) -> DCBReadResponse:
        """The events after ``after`` that match ``query`` (every event without items), at
        most ``limit``; the response's head is the store's head (``None`` if empty), or
        with ``limit`` the last event returned."""
        try:
            items = _items(query)
            start = _count(after, "after") or 0
            most = _count(limit, "limit")
            head = self._head()
            if most == 0:
                return SimpleDCBReadResponse(iter([]), None)
            if items:
                positions = self._matches(items, start, head, most)
            else:
                count = head - start if most is None else min(most, head - start)
                positions = list(range(start + 1, start + 1 + max(0, count)))
            events = self._events(positions)
        except PersistError as exc:
            raise codec.translate(exc) from exc
        if most is None:
            return SimpleDCBReadResponse(iter(events), head or None)
        return SimpleDCBReadResponse(iter(events), events[-1].position if events else None)

    # ------------------------------------------------------------------ appends

    def append(
        self, events: Sequence[DCBEvent], condition: DCBAppendCondition | None = None
    ) -> int:
        """Append ``events`` unless ``condition`` matches an event recorded after its
        position (``IntegrityError``); the position of the last one."""
        if not events:
            raise ProgrammingError("Should be at least one event. Avoid this elsewhere")
        entries = [encode_event(event) for event in events]
        items: list[DCBQueryItem] | None = None
        after = 0
        if condition is not None:
            if not isinstance(condition, DCBAppendCondition):
                raise DataError(f"a condition must be a DCBAppendCondition, not {condition!r:.60}")
            items = _items(condition.fail_if_events_match)
            after = _count(condition.after, "after") or 0
        try:
            for _ in range(MAX_ATTEMPTS):
                head = self._head()
                if items is not None:
                    if self._recorded(items, after, head):
                        raise IntegrityError(condition)
                    after = max(after, head)  # checked through ``head``: a retry checks on
                index = {
                    _index_key(kind, name, head + 1 + i): b""
                    for i, event in enumerate(events)
                    for kind, names in ((_TAG, event.tags), (_TYPE, [event.type]))
                    for name in names
                }
                try:
                    done = self.plane.append_sequenced(
                        self.universe,
                        [(STORE_WORLD, head, entries)],
                        [[event.type for event in events]],
                        create_missing=head == 0,
                        app_data=index,
                    )
                except (HeadAdvanced, WorldNotFound):
                    continue  # another append came first: check again at the new head
                except SequencingIncomplete as exc:  # appended: its positions are its heights
                    return exc.first_heights[0] + len(events) - 1
                return done.first_heights[0] + len(events) - 1
        except PersistError as exc:
            raise codec.translate(exc) from exc
        raise OperationalError(f"gave up after {MAX_ATTEMPTS} attempts: the store kept moving")

    def subscribe(
        self, query: DCBQuery | None = None, *, after: int | None = None
    ) -> PlaneDCBSubscription:
        """The events after ``after`` that match ``query``, then each new one as it is
        recorded (the iterating thread blocks between them)."""
        return PlaneDCBSubscription(self, query, after)


class PlaneDCBSubscription(DCBListenNotifySubscription[PlaneDCBRecorder]):
    """eventsourcing's pulling subscription, woken by a watcher thread that waits on the
    store's log head (``Plane.wait_log``) instead of a notification from the recorder."""

    def __init__(
        self, recorder: PlaneDCBRecorder, query: DCBQuery | None = None, after: int | None = None
    ) -> None:
        self._stopped = threading.Event()
        seen = recorder._head()
        super().__init__(recorder, query, after)
        self._watcher = threading.Thread(
            target=self._watch, args=(seen,), name="aos-dcb-watch", daemon=True
        )
        self._watcher.start()

    def stop(self) -> None:
        """Stop: iteration ends; the watcher thread has ended when this returns."""
        self._stopped.set()
        super().stop()
        watcher = getattr(self, "_watcher", None)
        if watcher is not None and watcher is not threading.current_thread() and watcher.is_alive():
            watcher.join()

    def _watch(self, seen: int) -> None:
        recorder = self._recorder
        try:
            while not self._stopped.is_set():
                head = recorder.plane.wait_log(
                    recorder.universe, seen, WATCH_SECONDS, interrupt=self._stopped
                )
                if head > seen:
                    seen = head
                    self._has_been_notified.set()
        except Exception as exc:  # the iterating thread raises it
            if self._thread_error is None:
                self._thread_error = exc
            self.stop()
