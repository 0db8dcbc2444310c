"""eventsourcing's dynamic consistency boundary (``eventsourcing.dcb``) over the plane.

A DCB store is one world of its own universe (the application's, derived for ``"dcb"``):
each event is a journal entry (CBOR ``[type, data, tags]``) and its position is its height
-- 1, 2, ... in the order the appends' enqueues committed, as eventsourcing's recorders
number them.
The events' tags and types are indexed in the application's own data: ``t`` + the packed
tag + the position, ``y`` + the packed type + the position.

An append is two steps (three transactions), so that appends under disjoint boundaries
never conflict:

1. **Enqueue** (one transaction of the application's data, ``Plane.transact_app``): the
   condition reads, with conflicts, only its items' index ranges after its position and
   the *pending* index of their tags and types (``p`` + kind + name + versionstamp + event
   index); the events go to the queue under versionstamped keys (``q`` + versionstamp +
   chunk + chunks: the call's id and entries, CBOR, in chunks of an application value), each
   tag and type into the pending index, and ``c`` + the call's id is written empty. A
   concurrent append of a matching event writes a key in a range the condition read, so one
   of the two transactions fails and runs again; appends of other tags write elsewhere.
2. **Settle**: a snapshot read of ``c`` + the call's id, the head ``h`` and the queue's
   first page; then ``Plane.append_sequenced`` expecting that head appends the page's
   calls, in the order their enqueues committed, to the world at the next heights, and in
   the same transaction moves their index entries from pending to their positions, removes
   their queue records, writes each call's first position under ``c`` + its id and the
   new head under ``h``. Every settle moves the head, so a settle whose page another
   already moved finds the head moved and reads again; its call is then placed (``c``) or
   still queued. The head and the page are read in one snapshot, after the enqueue
   committed: a page read earlier could miss a call queued in between, and placing the
   later call first could put, before the earlier one, an event its condition excluded.

A condition that matches a queued event settles the queue, then checks again (reads show
placed events only, and the event's writer may have stopped before placing it). An enqueue
run again after an unknown commit result finds its ``c`` key and only settles. ``c`` keys
of settled calls are removed by the recorder's next enqueue. (See ``docs/eventsourcing.md``:
DCB.)"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
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
from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InternalError,
    OperationalError,
    ProgrammingError,
)

from aos_eventsourcing import codec
from aos_eventsourcing.recorders import MAX_ATTEMPTS, WATCH_SECONDS, PlaneRecorder
from persistence import cbor, fdbtuple
from persistence.errors import (
    CorruptRecord,
    HeadAdvanced,
    PersistError,
    SequencingIncomplete,
    Validation,
    WorldNotFound,
)
from persistence.futures import Future
from persistence.ids import UniverseId, WorldId
from persistence.plane import AppTransaction, Plane
from persistence.sizes import MiB

STORE_WORLD: Final = WorldId(uuid.uuid5(codec.NAMESPACE, "dcb-events"))
"""The world that holds a DCB store's events (one per universe)."""
WINDOW: Final = 10_000
"""Positions a query reads the index over at a time (:meth:`PlaneDCBRecorder._matches`)."""
WINDOWS: Final = 20
"""Windows one read transaction reads at most (a query over a long history reads on in
the next, at the same head: placed positions never change)."""
GAP: Final = 16
"""Matching positions at most this far apart are read with one range read."""
MAX_TAG_BYTES: Final = 1_000
"""A DCB type or tag, UTF-8 encoded: 1 to 1,000 bytes (each is part of an index key)."""
SETTLE_BYTES: Final = 2 * MiB
"""What one settle writes at most, its events and their index keys (an append of more is
refused before anything is written)."""
QUEUE_PAGE: Final = 256
"""Queue records a settle reads at a time."""
CHUNK_BYTES: Final = 80_000
"""A queue record's value: a call's id and entries (CBOR), in chunks of at most this."""
_TAG: Final = b"t"
_TYPE: Final = b"y"
_QUEUE: Final = b"q"
_QUEUE_END: Final = b"r"
_PENDING: Final = b"p"
_CALL: Final = b"c"
_HEAD: Final = b"h"
_STAMP: Final = 10
_Row = tuple[bytes, bytes]


class _SettleFirst(Exception):
    """An enqueue's condition matched a queued event that may be at or before its position."""


class _Enqueued(Exception):
    """An enqueue found its call's key: an earlier attempt committed."""


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
    """The query's items (``DataError`` unless they are a list of ``DCBQueryItem`` whose
    types and tags are lists of text). A type or tag that no event can have (empty, or
    longer than :data:`MAX_TAG_BYTES`) matches nothing."""
    if query is None:
        return []
    if not isinstance(query, DCBQuery):
        raise DataError(f"a query must be a DCBQuery, not {type(query).__name__}")
    if not isinstance(query.items, list | tuple):
        raise DataError(f"a query's items must be a list, not {type(query.items).__name__}")
    for item in query.items:
        if not isinstance(item, DCBQueryItem):
            raise DataError(f"a query item must be a DCBQueryItem, not {type(item).__name__}")
        for field, names in (("types", item.types), ("tags", item.tags)):
            if not isinstance(names, list | tuple):
                raise DataError(f"a query item's {field} must be a list, not {names!r:.60}")
            for name in names:
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

    def __init__(
        self, plane: Plane, universe: UniverseId, *, closed: threading.Event | None = None
    ) -> None:
        super().__init__(plane, universe, closed=closed)
        self._lock = threading.Lock()
        self._done: list[bytes] = []  # ``c`` keys of settled calls, for the next enqueue
        self._seen = 0  # the highest head this recorder has read

    # ------------------------------------------------------------------ reads

    def _head(self) -> int:
        try:
            return self.plane.head(self.universe, STORE_WORLD)
        except WorldNotFound:
            return 0

    def _events(self, positions: Sequence[int]) -> Iterator[DCBSequencedEvent]:
        """The events at ``positions`` (ascending), read as they are iterated, in spans:
        positions at most :data:`GAP` apart share one range read, the heights between them
        dropped. Positions up to a head read before never change, so reading them later
        reads what was there."""
        wanted = set(positions)
        start = 0
        for index in range(1, len(positions) + 1):
            if index < len(positions) and positions[index] - positions[index - 1] <= GAP:
                continue
            first, last = positions[start], positions[index - 1]
            try:
                rows = self.plane.read_range(self.universe, STORE_WORLD, first, last - first + 1)
                events = [decode_event(entry, h) for h, entry in rows if h in wanted]
            except PersistError as exc:
                raise codec.translate(exc) from exc
            yield from events
            start = index

    def read(
        self,
        query: DCBQuery | None = None,
        *,
        after: int | None = None,
        limit: int | None = None,
    ) -> DCBReadResponse:
        """The events after ``after`` that match ``query`` (every event without items), at
        most ``limit``; the response's head is the store's head (``None`` if empty), or
        with ``limit`` the last event returned. The head and the positions are read in one
        transaction; the events when the response is iterated."""
        try:
            items = _items(query)
            start = _count(after, "after") or 0
            most = _count(limit, "limit")
            if most == 0:
                return SimpleDCBReadResponse(iter([]), None)
            head, positions = self._find(items, start, most)
        except PersistError as exc:
            raise codec.translate(exc) from exc
        events = self._events(positions)
        if most is None:
            return SimpleDCBReadResponse(events, head or None)
        return SimpleDCBReadResponse(events, positions[-1] if positions else None)

    def _find(
        self, items: Sequence[DCBQueryItem], after: int, most: int | None
    ) -> tuple[int, list[int]]:
        """The head, and the first ``most`` (all: ``None``) positions after ``after``, up to
        it, that ``items`` match (every one without items), ascending: read at one head, in
        transactions of :data:`WINDOWS` windows at most."""
        head: int | None = None
        positions: list[int] = []
        while True:
            more = None if most is None else most - len(positions)
            found = self.plane.transact_app(
                self.universe, functools.partial(_positions, items, after, more, head)
            )
            if found is None:  # no ``h`` yet: a new store, or one from before queued appends
                head = self._head()
                continue
            head, batch, after = found
            positions.extend(batch)
            if after >= head or (most is not None and len(positions) >= most):
                self._seen = max(self._seen, head)
                return head, positions

    # ------------------------------------------------------------------ appends

    def append(
        self, events: Sequence[DCBEvent], condition: DCBAppendCondition | None = None
    ) -> int:
        """Append ``events`` unless ``condition`` matches an event recorded after its
        position (``IntegrityError``); the position of the last one."""
        if not isinstance(events, list | tuple):
            raise DataError(f"events must be a list, not {type(events).__name__}")
        if not events:
            raise ProgrammingError("Should be at least one event. Avoid this elsewhere")
        entries = [encode_event(event) for event in events]
        largest = self.plane.config.max_entry_bytes
        for index, entry in enumerate(entries):
            if len(entry) > largest:
                raise DataError(f"event {index} is {len(entry):,} bytes encoded; max {largest:,}")
        items: list[DCBQueryItem] | None = None
        after = 0
        if condition is not None:
            if not isinstance(condition, DCBAppendCondition):
                raise DataError(f"a condition must be a DCBAppendCondition, not {condition!r:.60}")
            items = _items(condition.fail_if_events_match)
            after = _count(condition.after, "after") or 0
        call = _Call(b"", uuid.uuid4().bytes, entries)
        keys, size = call.settle_cost()
        cost = keys + 1, size + 9  # with the head ``h``
        limits = self._settle_limits()
        if cost[0] > limits[0] or cost[1] > limits[1]:
            raise DataError(
                f"an append of {len(entries):,} events ({cost[1]:,} bytes with their index) "
                f"is more than a settle may move: {limits[0]:,} keys, {limits[1]:,} bytes"
            )
        try:
            if items and self._seen - after > WINDOW:  # a long way to check: not in one go
                head, matching = self._find(items, after, 1)
                if matching:
                    raise IntegrityError(condition)
                after = head  # checked up to ``head``: the enqueue checks from there
            self._enqueue(call, items, after, condition)
        except PersistError as exc:
            raise codec.translate(exc) from exc
        try:
            first = self._settle(call.id)
        except PersistError as exc:
            raise OperationalError(
                f"the events are recorded, not yet at positions ({type(exc).__name__}: {exc}); "
                "the next append or settle() places them: do not append them again"
            ) from exc
        assert first is not None
        with self._lock:
            self._done.append(_CALL + call.id)
        return first + len(entries) - 1

    def _enqueue(
        self,
        call: _Call,
        items: Sequence[DCBQueryItem] | None,
        after: int,
        condition: DCBAppendCondition | None,
    ) -> None:
        """Check the condition and queue ``call`` (step 1; ``IntegrityError`` if it
        matches), unless an attempt whose commit result was lost queued it."""
        for _ in range(MAX_ATTEMPTS):
            with self._lock:
                done, self._done = self._done, []
            try:
                self.plane.transact_app(
                    self.universe,
                    functools.partial(_enqueue, call, items, after, condition, done),
                    eager=True,
                )
            except _Enqueued:
                return
            except _SettleFirst:
                self._keep(done)
                self._settle(None)
                continue
            except BaseException:
                self._keep(done)
                raise
            return
        raise OperationalError(f"gave up after {MAX_ATTEMPTS} attempts: the store kept moving")

    def _keep(self, done: list[bytes]) -> None:
        """Give back ``c`` keys an enqueue did not remove: a later one removes them."""
        with self._lock:
            self._done.extend(done)

    def settle(self) -> None:
        """Place what the queue holds when it is called (events of appends that did not
        finish: their writer stopped between the two steps), page by page. The factory
        calls it when it opens the recorder."""
        try:
            self._settle(None)
        except PersistError as exc:
            raise codec.translate(exc) from exc

    def _settle_limits(self) -> tuple[int, int]:
        """What one settle may write: keys (the plane's entries per group append) and bytes."""
        config = self.plane.config
        return config.max_batch_entries, min(SETTLE_BYTES, config.max_batch_bytes // 2)

    def _settle(self, call_id: bytes | None) -> int | None:
        """Settle until the call ``call_id`` is placed and return its first position; or,
        without a call, until what was queued when this began is placed (``None``).
        Settles that place calls are progress; :data:`MAX_ATTEMPTS` bounds those that lose
        to another settle."""
        known = 0  # the head a lost settle found: ``h`` lags it only in a damaged store
        horizon: bytes | None = None  # the last call queued when this began (no call)
        lost = 0
        progress: int | None = None
        while lost < MAX_ATTEMPTS:
            found, head, calls, last = self.plane.transact_app(
                self.universe, functools.partial(_queue, call_id)
            )
            if found is not None:
                return found
            self._seen = max(self._seen, head or 0)
            if head is not None and progress is not None and head > progress:
                lost = 0  # another settle placed calls ahead: progress
            progress = head
            if head is None:  # a new store, or one from before queued appends
                self.plane.transact_app(self.universe, functools.partial(_init_head, self._head()))
                lost += 1
                continue
            if call_id is None:
                horizon = last if horizon is None else horizon
                if not calls or horizon is None or calls[0].stamp > horizon:
                    return None
            elif not calls:
                raise CorruptRecord("DCB call", f"{call_id.hex()}: neither queued nor placed")
            head = max(head, known)  # the head read with the page, or one a settle found
            chosen = _chosen(calls, self._settle_limits())
            names = [each.names() for each in chosen]
            try:
                self.plane.append_sequenced(
                    self.universe,
                    [(STORE_WORLD, head, [entry for each in chosen for entry in each.entries])],
                    [[event[-1][1] for each in names for event in each]],  # the types
                    create_missing=head == 0,
                    app_data=_moves(chosen, names, head),
                )
            except HeadAdvanced as exc:
                known, lost = exc.actual, lost + 1
                continue
            except WorldNotFound:
                lost += 1
                continue
            except SequencingIncomplete:  # appended: positions are heights, ``c`` is written
                pass
            except Validation as exc:  # a call queued by a process with larger limits
                raise InternalError(
                    f"the queued DCB call {chosen[0].stamp.hex()} needs a larger settle than "
                    f"this process may write ({exc}): raise max_batch_entries or "
                    "max_batch_bytes to place it; appends wait behind it"
                ) from exc
            first = head + 1
            for each in chosen:
                if each.id == call_id:
                    return first
                first += len(each.entries)
        raise OperationalError(f"gave up after {MAX_ATTEMPTS} settles lost to others")

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


@dataclass(frozen=True, slots=True)
class _Call:
    """One append's events as the queue holds them: its versionstamp, its id, its entries
    and the keys of the queue records they were read from (the versionstamp and the keys
    empty for a call not read from the queue: one about to be queued)."""

    stamp: bytes
    id: bytes
    entries: list[bytes]
    keys: tuple[bytes, ...] = ()

    def chunks(self) -> list[bytes]:
        """The call's id and entries, CBOR, cut into queue record values."""
        payload = cbor.encode([self.id, self.entries])
        return [payload[i : i + CHUNK_BYTES] for i in range(0, len(payload), CHUNK_BYTES)]

    def names(self) -> list[list[tuple[bytes, str]]]:
        """Each event's index names: ``(kind, tag or type)``, its type last."""
        out = []
        for entry in self.entries:
            event = decode_event(entry, 0).event
            out.append([(_TAG, tag) for tag in event.tags] + [(_TYPE, event.type)])
        return out

    def settle_cost(self) -> tuple[int, int]:
        """Keys and bytes a settle of this call alone writes, less the head ``h``: its
        entries, its index keys set at their positions and cleared from pending, its queue
        records cleared, its ``c``."""
        names = [name for event in self.names() for name in event]
        index_bytes = sum(2 * len(_prefix(kind, name)) + 9 + _STAMP + 4 for kind, name in names)
        records = len(self.chunks())
        keys = len(self.entries) + 2 * len(names) + records + 1
        size = sum(map(len, self.entries)) + index_bytes + (5 + _STAMP) * records + 25
        return keys, size


def _queue_key(stamp: bytes, index: int, count: int) -> bytes:
    return _QUEUE + stamp + index.to_bytes(2, "big") + count.to_bytes(2, "big")


def _pending_prefix(kind: bytes, name: str) -> bytes:
    return _PENDING + _prefix(kind, name)


def _head_value(value: bytes | None) -> int | None:
    if value is None:
        return None
    if len(value) != 8:
        raise CorruptRecord("DCB head", f"{len(value)} bytes, not 8")
    return int.from_bytes(value, "big")


def _page(rows: Sequence[_Row]) -> list[_Call]:
    """The calls whose every record is in ``rows`` (queue records in key order), up to the
    first that is not (``CorruptRecord`` for a record that does not decode)."""
    calls: list[_Call] = []
    at = 0
    while at < len(rows):
        key = rows[at][0]
        if len(key) != 15:
            raise CorruptRecord("DCB queue record", f"key {key!r:.60}: not q + stamp + 2 + 2")
        stamp, count = key[1:11], int.from_bytes(key[13:15], "big")
        group = rows[at : at + count]
        if len(group) < count:
            break
        if [k for k, _ in group] != [_queue_key(stamp, i, count) for i in range(count)]:
            raise CorruptRecord("DCB queue record", f"stamp {stamp.hex()}: chunks out of order")
        value = cbor.decode(b"".join(v for _, v in group))
        if not (
            isinstance(value, list)
            and len(value) == 2
            and isinstance(value[0], bytes)
            and isinstance(value[1], list)
            and value[1]
            and all(isinstance(entry, bytes) for entry in value[1])
        ):
            raise CorruptRecord("DCB queue record", f"stamp {stamp.hex()}: not [id, entries]")
        calls.append(_Call(stamp, value[0], value[1], tuple(k for k, _ in group)))
        at += count
    return calls


def _chosen(calls: Sequence[_Call], limits: tuple[int, int]) -> list[_Call]:
    """The first of ``calls`` that one settle may move (the first one at least)."""
    keys, size = 1, 9  # the head ``h``
    chosen: list[_Call] = []
    for call in calls:
        more_keys, more_size = call.settle_cost()
        keys, size = keys + more_keys, size + more_size
        if chosen and (keys > limits[0] or size > limits[1]):
            break
        chosen.append(call)
    return chosen


def _moves(
    calls: Sequence[_Call], names: Sequence[list[list[tuple[bytes, str]]]], head: int
) -> dict[bytes, bytes | None]:
    """A settle's writes of the application's data: each call's first position, its queue
    records removed, its events' index keys (``names``: the calls' :meth:`_Call.names`)
    moved from pending to their positions, and the new head."""
    moves: dict[bytes, bytes | None] = {}
    position = head
    for call, call_names in zip(calls, names, strict=True):
        moves[_CALL + call.id] = (position + 1).to_bytes(8, "big")
        for key in call.keys:  # those read: chunked by whichever writer queued the call
            moves[key] = None
        for index, event_names in enumerate(call_names):
            position += 1
            for kind, name in event_names:
                moves[_pending_prefix(kind, name) + call.stamp + index.to_bytes(4, "big")] = None
                moves[_index_key(kind, name, position)] = b""
    moves[_HEAD] = position.to_bytes(8, "big")
    return moves


async def _indexed(tr: AppTransaction, kind: bytes, name: str, after: int, upto: int) -> set[int]:
    """The positions after ``after``, up to ``upto``, of the events of type or tag ``name``
    (by ``kind``): snapshot reads (placed index keys never change)."""
    if not _storable(name):
        return set()
    prefix = _prefix(kind, name)
    found: set[int] = set()
    begin, end = prefix + (after + 1).to_bytes(8, "big"), prefix + (upto + 1).to_bytes(8, "big")
    while begin < end:
        rows = await tr.get_range(begin, end, limit=10_000, snapshot=True)
        found.update(int.from_bytes(key[len(prefix) :], "big") for key, _ in rows)
        if len(rows) < 10_000:
            break
        begin = rows[-1][0] + b"\x00"
    return found


async def _matching(
    tr: AppTransaction, items: Sequence[DCBQueryItem], after: int, upto: int
) -> set[int] | None:
    """The positions after ``after``, up to ``upto``, of the events some item matches
    (``None``: every event -- an item with neither types nor tags)."""
    out: set[int] = set()
    for item in items:
        if not item.tags and not item.types:
            return None
        positions: set[int] | None = None
        for tag in item.tags:
            tagged = await _indexed(tr, _TAG, tag, after, upto)
            positions = tagged if positions is None else positions & tagged
            if not positions:
                break
        if item.types and (positions is None or positions):
            typed: set[int] = set()
            for kind in item.types:
                typed |= await _indexed(tr, _TYPE, kind, after, upto)
            positions = typed if positions is None else positions & typed
        out |= positions or set()
    return out


async def _positions(
    items: Sequence[DCBQueryItem],
    after: int,
    most: int | None,
    head: int | None,
    tr: AppTransaction,
) -> tuple[int, list[int], int] | None:
    """The head (``h``, unless given; ``None`` if there is none), the first ``most`` (all:
    ``None``) positions after ``after``, up to it, that ``items`` match (every one without
    items), ascending, and the position up to which they were looked for: the index is
    read window by window of :data:`WINDOW` positions, :data:`WINDOWS` at most, stopping
    once ``most`` are found (a subscription's pages read the index from where they start,
    not to the head)."""
    if head is None:
        head = _head_value(await tr.get(_HEAD, snapshot=True))
        if head is None:
            return None
    if not items:
        count = max(0, head - after if most is None else min(most, head - after))
        return head, list(range(after + 1, after + 1 + count)), head
    found: list[int] = []
    low = after
    for _ in range(WINDOWS):
        if low >= head or (most is not None and len(found) >= most):
            break
        high = min(head, low + WINDOW)
        matching = await _matching(tr, items, low, high)
        found.extend(range(low + 1, high + 1) if matching is None else sorted(matching))
        low = high
    return head, found if most is None else found[:most], low


def _matched(
    tr: AppTransaction, items: Sequence[DCBQueryItem], after: int
) -> Coroutine[object, object, tuple[bool, bool, bool]]:
    """Issue the condition's first reads now; the coroutine it returns tells whether an
    event placed after position ``after`` matches an item, whether a queued one does, and
    whether that cannot be told here (an item matching every event, in a store whose head
    ``h`` is not written yet).

    An event that would match an item writes every one of the item's tags (or, for an
    item without tags, one of its types) into the index: so each item's first tag -- or
    each of its types, without tags -- is read with a conflict, placed after ``after`` and
    pending; its other tags, and its types when it has tags, are snapshot reads, which no
    append under another boundary conflicts with. The first wave is every item's tags (its
    types, without tags); an item's types follow, only where its tags found events.
    Positions and versionstamps are below 2**63, so an id starts below ``0x80``: a range
    ends there, before the keys of a name that extends this one (``a`` and ``a\\x00`` pack
    to ``\\x02a\\x00`` and ``\\x02a\\x00\\xff\\x00``)."""
    items = list(items) or [DCBQueryItem()]  # a query without items matches every event
    every = any(not item.tags and not item.types for item in items)
    head_read = tr.get(_HEAD) if every else None
    queued_read = tr.get_range(_QUEUE, _QUEUE_END, limit=1) if every else None
    low = (after + 1).to_bytes(8, "big")
    reads: dict[tuple[bytes, str, bool, bool], Future[list[tuple[bytes, bytes]]]] = {}

    def issue(kind: bytes, name: str, queued: bool, snapshot: bool = False) -> None:
        if (kind, name, queued, snapshot) not in reads and _storable(name):
            prefix = _pending_prefix(kind, name) if queued else _prefix(kind, name)
            start = b"" if queued else low
            reads[kind, name, queued, snapshot] = tr.get_range(
                prefix + start, prefix + b"\x80", snapshot=snapshot
            )

    async def ids(kind: bytes, name: str, queued: bool, snapshot: bool = False) -> set[bytes]:
        if not _storable(name):
            return set()
        issue(kind, name, queued, snapshot)
        prefix = _pending_prefix(kind, name) if queued else _prefix(kind, name)
        size = _STAMP + 4 if queued else 8
        rows = await reads[kind, name, queued, snapshot]
        return {key[len(prefix) :] for key, _ in rows if len(key) == len(prefix) + size}

    for item in items:
        for queued in (False, True):
            for i, tag in enumerate(item.tags):
                issue(_TAG, tag, queued, i > 0)
            if not item.tags:
                for type_name in item.types:
                    issue(_TYPE, type_name, queued)

    async def evaluate() -> tuple[bool, bool, bool]:
        settled = pending = unknown = False
        if head_read is not None and queued_read is not None:
            head = _head_value(await head_read)
            unknown = head is None
            settled = head is not None and head > after
            pending = bool(await queued_read)
        for item in items:
            if not item.tags and not item.types:
                continue
            for queued in (False, True):
                found: set[bytes] | None = None
                for i, tag in enumerate(item.tags):
                    tagged = await ids(_TAG, tag, queued, i > 0)
                    found = tagged if found is None else found & tagged
                if item.types and (found is None or found):
                    typed: set[bytes] = set()
                    for type_name in item.types:
                        typed |= await ids(_TYPE, type_name, queued, bool(item.tags))
                    found = typed if found is None else found & typed
                if found:
                    pending, settled = (True, settled) if queued else (pending, True)
        return settled, pending, unknown

    return evaluate()


async def _enqueue(
    call: _Call,
    items: Sequence[DCBQueryItem] | None,
    after: int,
    condition: object,
    done: Sequence[bytes],
    tr: AppTransaction,
) -> None:
    """Check the condition and queue ``call`` (the module docstring's step 1), removing the
    ``c`` keys ``done`` of calls placed before."""
    mine = tr.get(_CALL + call.id)
    check = None if items is None else _matched(tr, items, after)  # its reads in flight
    try:
        marker = await mine
    except BaseException:
        if check is not None:
            check.close()
        raise
    if marker is not None:
        if check is not None:
            check.close()
        raise _Enqueued
    if check is not None:
        settled, pending, unknown = await check
        if settled:
            raise IntegrityError(condition)
        if pending or unknown:  # place the queued events (a writer may have stopped before
            raise _SettleFirst  # it placed them, and reads show only placed ones); check again
    for key in done:
        tr.clear(key)
    chunks = call.chunks()
    for index, chunk in enumerate(chunks):
        tr.set_versionstamped_key(_queue_key(bytes(_STAMP), index, len(chunks)), 1, chunk)
    for index, names in enumerate(call.names()):
        for kind, name in names:
            prefix = _pending_prefix(kind, name)
            tr.set_versionstamped_key(
                prefix + bytes(_STAMP) + index.to_bytes(4, "big"), len(prefix), b""
            )
    tr.set(_CALL + call.id, b"")


async def _queue(
    call_id: bytes | None, tr: AppTransaction
) -> tuple[int | None, int | None, list[_Call], bytes | None]:
    """A settle's read, at one snapshot: the first position of call ``call_id`` if it is
    placed; else the head, the queue's first calls (a first call longer than a page read
    whole) and, without a call, the last queued call's versionstamp."""
    mine = None if call_id is None else tr.get(_CALL + call_id, snapshot=True)
    head_read = tr.get(_HEAD, snapshot=True)
    rows_read = tr.get_range(_QUEUE, _QUEUE_END, limit=QUEUE_PAGE, snapshot=True)
    last_read = None
    if call_id is None:
        last_read = tr.get_range(_QUEUE, _QUEUE_END, limit=1, reverse=True, snapshot=True)
    if mine is not None:
        marker = await mine
        if marker is None:
            raise CorruptRecord("DCB call", f"{call_id!r}: neither queued nor placed")
        if marker:
            return _head_value(marker), None, [], None
    head, rows = _head_value(await head_read), await rows_read
    last = None
    if last_read is not None:
        tail = await last_read
        last = tail[0][0][1 : 1 + _STAMP] if tail else None
    calls = _page(rows)
    if rows and not calls:
        stamp = rows[0][0][1 : 1 + _STAMP]
        calls = _page(await tr.get_range(_QUEUE + stamp, _QUEUE + stamp + b"\xff", snapshot=True))
        if not calls:
            raise CorruptRecord("DCB queue record", f"stamp {stamp.hex()}: chunks missing")
    return None, head, calls, last


async def _init_head(head: int, tr: AppTransaction) -> None:
    """Write ``h`` (the head of a store that has none yet: a store from before queued
    appends, or a new one) unless a settle wrote it first."""
    if await tr.get(_HEAD) is None:
        tr.set(_HEAD, head.to_bytes(8, "big"))
