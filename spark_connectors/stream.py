"""``spark.readStream.format("aos_journal")``: every world's journal as an exactly-once
stream.

An offset is the height each world has been read through, as JSON::

    {"version": 1, "worlds": {"<universe>/<world>": 1234, ...}}

(a world absent from an offset has been read through height 0, or ``min_height - 1``; a
query's first start offset carries ``"initial": true`` and the end of its first batch the
``"base"`` it was planned from, so that the batch is the same when Spark runs it again after
a restart). A micro-batch from offset
``start`` to ``end`` holds, for each world, heights ``start + 1 .. end``: heights never
change once written, so the same offset range always gives the same rows, and Spark's
checkpoint of offsets makes a restarted query go on exactly where it stopped. Each
micro-batch lists the worlds again, so a world created mid-stream joins the next one, from
height 1. The rows are planned and read as ``aos_journal``'s batch scan reads them
(:mod:`spark_connectors.journal`): cold from segments, hot from the engine, exact while
export moves heights from hot to cold.

Options, beyond the batch source's:

============================  ============================================================
``max_entries_per_batch``     the most entries one micro-batch admits (Spark's
                              ``ReadMaxRows``; default: all that are there). The limit is
                              shared fairly: each world with entries waiting gets an equal
                              share, and what a world does not need goes to the others.
``max_bytes_per_batch``       the most bytes one micro-batch reads (Spark's
                              ``ReadMaxBytes``), shared as fairly; with the entries' cap,
                              both hold. A hot entry counts the bytes the engine stores
                              for it (read on the driver to size the batch), the heights a
                              batch takes from a segment the segment object's size
                              (:class:`WorldSizes`). The worlds take turns to lead a
                              batch (:func:`admit_bytes`); a leader's entry, or segment
                              rest, larger than the cap is a micro-batch of its own.
``starting``                  ``earliest`` (default: every world from height 1) or
                              ``latest`` (from each world's head when the query first
                              starts; worlds created later from height 1)
============================  ============================================================

The stream never writes into the store: ``commit`` has nothing to release (the plane keeps
no reader state), so a query's progress lives in its checkpoint alone.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, ClassVar, Final, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from persistence.errors import Validation, WorldNotFound
from persistence.futures import drive
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.plane import Plane
from persistence.protocols import journal
from spark_connectors.journal import (
    HOT_ENTRY_ESTIMATE,
    NAME,
    JournalPartition,
    JournalRef,
    parse,
    partitions_of,
    plan_world,
    plane_of,
    read_partition,
)
from spark_connectors.listing import index_page, index_refs, selected_worlds
from spark_connectors.source import ScanOptions

OFFSET_VERSION: Final = 1
MAX_READ_LIMIT: Final = 2**63 - 1
"""The largest ``max_entries_per_batch``: Spark's row limit is a signed 64-bit count."""
STREAM_OPTIONS: Final = ("max_entries_per_batch", "max_bytes_per_batch", "starting")

Heights = dict[str, int]
"""What a stream has read through, by key: a world's height by ``"<universe>/<world>"``, a
universe log's position by ``"<universe>"``."""


def _world_key(key: str) -> str:
    universe, _, world = key.partition("/")
    return f"{UniverseId.parse(universe)}/{WorldId.parse(world)}"


def _universe_key(key: str) -> str:
    return str(UniverseId.parse(key))


@dataclass(frozen=True, slots=True)
class Cursor:
    """What a stream's offsets count: the field that holds the counts, the canonical form
    of a key (``Validation`` if it is not one) and what a key and a count are called."""

    field: str
    key: Callable[[str], str]
    noun: str
    count: str


WORLDS: Final = Cursor("worlds", _world_key, "world", "height")
"""``aos_journal``'s offsets: each world's height."""
UNIVERSES: Final = Cursor("universes", _universe_key, "universe", "position")
"""``aos_log``'s offsets: each universe log's position."""


def offset(
    heights: Mapping[str, int],
    *,
    initial: bool = False,
    base: Mapping[str, int] | None = None,
    cursor: Cursor = WORLDS,
) -> dict[str, Any]:
    """The offset of ``heights`` (keys sorted: the same heights, the same JSON). ``initial``
    marks a query's first start offset; ``base``, in the end offset of a query's first
    batch, is the start that batch was planned from (see :meth:`HeadStream.partitions`)."""
    out: dict[str, Any] = {"version": OFFSET_VERSION, cursor.field: dict(sorted(heights.items()))}
    if initial:
        out["initial"] = True
    if base is not None:
        out["base"] = dict(sorted(base.items()))
    return out


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """A parsed offset: the counts read through, and the marks of :func:`offset`."""

    counts: Heights
    initial: bool = False
    base: Heights | None = None


def parse_offset(
    value: Any, field: str = f"{NAME}.offset", cursor: Cursor = WORLDS
) -> StreamOffset:
    """An offset as Spark hands it back (a dict, or its JSON, from a checkpoint perhaps),
    its keys in canonical form; one that is not this source's is ``Validation`` naming
    what is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise Validation(field, f"JSON, not {value[:80]!r}") from None
    version = value.get("version") if isinstance(value, dict) else None
    if type(version) is not int or version != OFFSET_VERSION:
        raise Validation(field, f"an offset of version {OFFSET_VERSION}, not {value!r:.80}")
    unknown = set(value) - {"version", cursor.field, "initial", "base"}
    if unknown:
        raise Validation(field, f"unknown field(s) {sorted(unknown)}")
    initial = value.get("initial", False)
    if type(initial) is not bool:
        raise Validation(f"{field}.initial", f"true or false, not {initial!r:.40}")
    base = value.get("base")
    return StreamOffset(
        _heights(value.get(cursor.field), f"{field}.{cursor.field}", cursor),
        initial,
        None if base is None else _heights(base, f"{field}.base", cursor),
    )


def heights_of(value: Any, field: str = f"{NAME}.offset", cursor: Cursor = WORLDS) -> Heights:
    """The counts of an offset (:func:`parse_offset`)."""
    return parse_offset(value, field, cursor).counts


def _heights(counts: Any, field: str, cursor: Cursor) -> Heights:
    if not isinstance(counts, dict):
        raise Validation(field, f"a map of {cursor.noun} to {cursor.count}, not {counts!r:.80}")
    out: Heights = {}
    for key, height in counts.items():
        try:
            canonical = cursor.key(str(key))
        except Validation as exc:
            raise Validation(field, f"{key!r:.80}: {exc}") from None
        if type(height) is not int or not 0 <= height <= MAX_HEIGHT:
            raise Validation(f"{field}[{key}]", f"a {cursor.count}, not {height!r:.40}")
        if canonical in out:
            raise Validation(field, f"{key!r:.80} twice")
        out[canonical] = height
    return out


def admit(waiting: Mapping[str, int], budget: int, turn: int = 0) -> Heights:
    """How many of each key's ``waiting`` entries a micro-batch of at most ``budget``
    entries takes: equal shares, in rounds, what a key does not need going to the
    others. When the budget is smaller than the keys waiting, the keys served first
    are those from position ``turn`` (modulo their count) of the key order, so that a caller
    moving ``turn`` on from batch to batch serves every key in turn (deterministic)."""
    granted = dict.fromkeys(waiting, 0)
    ordered = sorted(key for key, count in waiting.items() if count > 0)
    if ordered:
        first = turn % len(ordered)
        ordered = ordered[first:] + ordered[:first]
    active = ordered
    while budget > 0 and active:
        share = max(1, budget // len(active))
        still = []
        for key in active:
            take = min(share, waiting[key] - granted[key], budget)
            granted[key] += take
            budget -= take
            if granted[key] < waiting[key]:
                still.append(key)
            if budget == 0:
                break
        active = still
    return granted


class EntrySizes(Protocol):
    """What one key's waiting entries cost a micro-batch, in order (read as asked for)."""

    def fit(self, taken: int, room: int, most: int) -> tuple[int, int]:
        """How many entries after the first ``taken`` (at most ``most``) fit in ``room``
        bytes, and what they cost."""
        ...

    def next_cost(self, taken: int) -> int:
        """What the entry after the first ``taken`` costs (there is one)."""
        ...


def stable_turn(counts: Mapping[str, int]) -> int:
    """A turn for :func:`admit_bytes` drawn from an offset's counts: the same offset, the
    same turn (in every process: not Python's salted ``hash``), and a new turn whenever a
    micro-batch moves the offset, so no key stays last."""
    text = json.dumps(sorted(counts.items())).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def admit_bytes(
    waiting: Mapping[str, int], sizes: Mapping[str, EntrySizes], budget: int, turn: int = 0
) -> Heights:
    """How many of each key's ``waiting`` entries a micro-batch of ``budget`` bytes takes.
    The keys take turns from position ``turn`` (modulo their count) of the key order; the
    first, the leader, takes its next entry before anything is shared -- alone, if it costs
    more than the budget (what it costs is read whole anyway), so no entry waits beyond its
    key's turn to lead. What is left is shared as :func:`admit` shares entries: equal
    shares in rounds, each key in turn taking what fits in its share -- or, if its next
    entry is larger than its share, that entry if what is left holds it -- and what a key
    does not use going to the others; at the end each key in turn takes what still fits.
    Never more than the budget, except for the leader's entry alone."""
    granted = dict.fromkeys(waiting, 0)
    ordered = sorted(key for key, count in waiting.items() if count > 0)
    if not ordered:
        return granted
    first = turn % len(ordered)
    ordered = ordered[first:] + ordered[:first]
    lead, sized = ordered[0], sizes[ordered[0]]
    cost = sized.next_cost(0)
    granted[lead], used = sized.fit(0, cost, waiting[lead])
    if cost > budget:  # a micro-batch of its own
        return granted
    budget -= used
    ahead = {lead: used}  # counted against the leader's first share
    active = [key for key in ordered if granted[key] < waiting[key]]
    while budget > 0 and active:
        share = max(1, (budget + sum(ahead.values())) // len(active))
        still = []
        for key in active:
            if budget <= 0:
                break
            left = waiting[key] - granted[key]
            room = min(share - ahead.pop(key, 0), budget)
            count, used = sizes[key].fit(granted[key], room, left) if room > 0 else (0, 0)
            if not count and room > 0:  # an entry larger than the share: it goes if what is
                count, used = sizes[key].fit(granted[key], budget, 1)  # left holds it
            granted[key] += count
            budget -= used
            if count and granted[key] < waiting[key]:
                still.append(key)
        active = still  # the keys that took entries and want more
    for key in ordered:  # what is left: each key in turn takes what still fits
        if budget <= 0:
            break
        count, used = sizes[key].fit(granted[key], budget, waiting[key] - granted[key])
        granted[key] += count
        budget -= used
    return granted


@dataclass(frozen=True, slots=True)
class _Piece:
    """A run of a world's heights as admission counts them: heights ``start..`` (counted
    from the first height above the offset, 0-based), ``base`` counted before them;
    ``totals[j]``, what the first ``j + 1`` of them cost -- or, for the rest of a segment,
    ``cost`` for the first and nothing for the others (``totals`` empty, ``count``
    heights)."""

    start: int
    base: int
    count: int
    cost: int = 0
    totals: tuple[int, ...] = ()

    @property
    def end(self) -> int:
        return self.start + self.count

    @property
    def spent(self) -> int:
        """What the whole piece costs."""
        return self.totals[-1] if self.totals else self.cost

    def local(self, j: int) -> int:
        """What its first ``j`` heights cost."""
        if j <= 0:
            return 0
        return self.totals[j - 1] if self.totals else self.cost

    def within(self, room: int) -> int:
        """How many of its heights, from its first, cost at most ``room``."""
        if self.totals:
            return bisect_right(self.totals, room)
        return self.count if self.cost <= room else 0


class WorldSizes:
    """:class:`EntrySizes` of one world's entries above ``after``, read as admission asks:

    * heights in a segment: the first a batch takes from a segment costs the segment
      object's size, the others nothing -- a task fetches the whole object whatever it
      takes from it, so a batch can hold a segment's whole rest for that price; the index
      is read from ``after`` on, a page of :data:`INDEX_PAGE` records at a time (strictly;
      a damaged one makes the whole index read as ``index_refs`` reads it, with its gaps
      and damaged records as heights that cost 1 byte per ref);
    * a hot height: the bytes the engine stores for it (:func:`journal.stored_sizes`, in
      pages of :data:`FIRST_PAGE` keys doubling to 4,096), at least 1; a hole (which the
      micro-batch reports) :data:`HOT_ENTRY_ESTIMATE`.

    A hot height exported since the index was read is sized from the index read again."""

    FIRST_PAGE: ClassVar[int] = 4
    INDEX_PAGE: ClassVar[int] = 64

    def __init__(self, plane: Plane, universe: UniverseId, world: WorldId, after: int) -> None:
        self.plane, self.universe, self.world = plane, universe, world
        self.keys = WorldKeys(universe, world)
        self.after = after
        self.pieces: list[_Piece] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        """Each piece's first index, and what everything through it costs."""
        self.page = self.FIRST_PAGE
        self.refs: list[tuple[int, int, int]] = []
        """``(start, end, cost)`` of the segments read so far, in height order."""
        self.index_done = False
        """Whether :attr:`refs` holds every segment from the one it starts with on."""

    def _read_index(self, height: int) -> None:
        """Read the segments ending at or after ``height``, a page on from what is read."""
        page = index_page(self.plane, self.universe, self.world, height, self.INDEX_PAGE)
        if page is None:  # a damaged record: the whole index, as the listing reads it
            refs, _ = index_refs(self.plane, self.universe, self.world)
            self.refs = [(ref.start, ref.end, max(1, ref.byte_size)) for ref in refs]
            self.index_done = True
            return
        self.refs = [(start, end, max(1, size)) for start, end, size in page]
        self.index_done = len(page) < self.INDEX_PAGE

    def _segment(self, height: int) -> tuple[int, int, int] | None:
        """The segment holding ``height`` (``None``: it is hot), reading the index on."""
        if not self.refs or (self.refs[-1][1] < height and not self.index_done):
            self._read_index(height)
        at = bisect_right(self.refs, (height, 2**64)) - 1
        if at >= 0 and self.refs[at][0] <= height <= self.refs[at][1]:
            return self.refs[at]
        return None

    @property
    def sized(self) -> int:
        """How many heights are sized."""
        return self.pieces[-1].end if self.pieces else 0

    def _add(self, count: int, cost: int = 0, sizes: Sequence[int] = ()) -> None:
        base = self.ends[-1] if self.ends else 0
        totals = tuple(accumulate(max(1, size) for size in sizes))
        piece = _Piece(self.sized, base, count, cost, totals)
        self.pieces.append(piece)
        self.starts.append(piece.start)
        self.ends.append(base + piece.spent)

    def _more(self, want: int) -> None:
        """Size at least one more height (up to ``want`` hot ones)."""
        height = self.after + 1 + self.sized
        segment = self._segment(height)
        if segment is not None:
            self._add(segment[1] - height + 1, cost=segment[2])
            return
        asked = min(want, self.page)
        self.page = min(2 * self.page, journal.MAX_ROWS_PER_READ)
        last = height + asked - 1
        held = drive(journal.stored_sizes(self.plane.engine, self.keys, height, last, asked))
        if not held or held[0][0] != height:
            self.refs, self.index_done = [], False
            if self._segment(height) is not None:
                return  # exported since: sized from the index now
            hole = (held[0][0] if held else last + 1) - height
            self._add(hole, sizes=[HOT_ENTRY_ESTIMATE] * hole)
            return
        run: list[int] = []
        for h, size in held:  # the heights held from ``height`` on, up to a hole
            if h != height + len(run):
                break
            run.append(size)
        self._add(len(run), sizes=run)

    def _cost(self, index: int) -> int:
        """What the first ``index`` heights cost (sized already)."""
        if index <= 0:
            return 0
        at = bisect_right(self.starts, index - 1) - 1
        piece = self.pieces[at]
        return piece.base + piece.local(index - piece.start)

    def next_cost(self, taken: int) -> int:
        while self.sized <= taken:
            self._more(taken + 1 - self.sized)
        return self._cost(taken + 1) - self._cost(taken)

    def fit(self, taken: int, room: int, most: int) -> tuple[int, int]:
        while self.sized < taken:
            self._more(taken - self.sized)
        top = taken + most
        while self.sized < top and (self.ends[-1] if self.ends else 0) - self._cost(taken) <= room:
            self._more(top - self.sized)
        base = self._cost(taken)
        at = bisect_right(self.ends, base + room)  # the first piece that does not fit whole
        if at == len(self.pieces):
            index = self.sized
        else:
            piece = self.pieces[at]
            index = piece.start + piece.within(base + room - piece.base)
        index = max(taken, min(index, top))
        return index - taken, self._cost(index) - base


Ranges = dict[str, tuple[int, int]]
"""What a micro-batch reads, by key: counts ``first..last``."""


def _read_limit(options: Mapping[str, str], name: str, source: str) -> int | None:
    """Option ``name`` (lower-cased ``options``) as a read limit from 1 to
    :data:`MAX_READ_LIMIT` (``None`` if absent); ``Validation`` naming it otherwise."""
    raw = options.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_READ_LIMIT):
        raise Validation(f"{source}.{name}", f"an integer from 1 to {MAX_READ_LIMIT}, not {raw!r}")
    return int(raw)


class HeadStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream over keys whose counts only grow and whose entries never change below them
    (worlds' heights, universe logs' positions): offsets, admission and the restart rules
    of the module docstring, written once. A subclass says what its keys' heads are
    (:meth:`heads`), below what nothing is read (:attr:`floor`), how a micro-batch's
    ranges are planned (:meth:`plan`) and read (:meth:`read`)."""

    cursor: ClassVar[Cursor]

    def __init__(self, options: Mapping[str, str], source: str) -> None:
        lowered = {k.lower(): v for k, v in options.items()}
        self.source = source
        self.max_entries = _read_limit(lowered, "max_entries_per_batch", source)
        self.max_bytes = _read_limit(lowered, "max_bytes_per_batch", source)
        self.starting = lowered.get("starting", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise Validation(f"{source}.starting", f"earliest or latest, not {self.starting!r}")
        self.until: Heights | None = None
        """The heads Trigger.AvailableNow reads up to (set when such a query starts)."""
        self.first: Heights | None = None
        """``starting=latest``: the heads this reader's first start offset names."""

    def heads(self) -> Heights:
        """Each selected key's head now (capped at the selection's highest count)."""
        raise NotImplementedError

    @property
    def floor(self) -> int:
        """The count every key is read through before anything (0 unless a lowest one is
        selected)."""
        raise NotImplementedError

    def plan(self, ranges: Ranges) -> Sequence[InputPartition]:
        """The input partitions that read ``ranges`` (not empty)."""
        raise NotImplementedError

    def sizes(self, key: str, after: int) -> EntrySizes:
        """The sizes of ``key``'s entries above ``after``, for a byte cap; a subclass that
        cannot size its entries before reading them refuses ``max_bytes_per_batch``."""
        raise NotImplementedError

    def _offset(self, counts: Mapping[str, int], **marks: Any) -> dict[str, Any]:
        return offset(counts, cursor=self.cursor, **marks)

    def _parse(self, value: Any) -> StreamOffset:
        return parse_offset(value, f"{self.source}.offset", self.cursor)

    def initialOffset(self) -> dict[str, Any]:
        """Every key from its start (from the lowest count selected), or
        (``starting=latest``) from its head when this reader first answers (the same answer
        after: Spark asks more than once)."""
        if self.starting == "latest":
            if self.first is None:
                self.first = {key: max(h, self.floor) for key, h in self.heads().items()}
            return self._offset(self.first, initial=True)
        return self._offset({}, initial=True)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """``start`` moved on to each key's head, or as far as ``limit`` admits. The end
        of a query's first batch keeps that batch's start as ``base``: Spark logs an end
        offset before running its batch but asks for the first start again after a
        restart, and with ``starting=latest`` the heads will have moved."""
        begin = self._parse(start)
        heads = self.until if self.until is not None else self.heads()
        waiting = {
            key: head - max(begin.counts.get(key, 0), self.floor)
            for key, head in heads.items()
            if head > max(begin.counts.get(key, 0), self.floor)
        }
        turn = sum(begin.counts.values())
        if not isinstance(limit, ReadAllAvailable):
            rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.max_entries
            if rows is not None:
                waiting = admit(waiting, rows, turn)
            size = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.max_bytes
            if size is not None:
                sizes = {
                    key: self.sizes(key, max(begin.counts.get(key, 0), self.floor))
                    for key, count in waiting.items()
                    if count
                }
                waiting = admit_bytes(waiting, sizes, size, stable_turn(begin.counts))
        if not any(waiting.values()):  # nothing new: the start itself, so no batch runs
            return self._offset(begin.counts, initial=begin.initial, base=begin.base)
        end = dict(begin.counts)
        for key, count in waiting.items():
            if count:
                end[key] = max(begin.counts.get(key, 0), self.floor) + count
        return self._offset(end, base=begin.counts if begin.initial else None)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(max_entries_per_batch)`` when that option is set, else
        ``ReadMaxBytes(max_bytes_per_batch)`` when that one is (Spark takes one limit;
        :meth:`latestOffset` applies both options, and a limit Spark gives in place of
        either)."""
        if self.max_entries is not None:
            return ReadMaxRows(self.max_entries)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any]:
        """Each key's head now (shown in the query's progress)."""
        return self._offset(self.heads())

    def prepareForTriggerAvailableNow(self) -> None:
        """Read up to the heads of now, and stop there."""
        self.until = self.heads()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """For each key, counts after ``start`` (after the ``base`` the end offset keeps
        when ``start`` is a query's first, and never below the floor) through ``end``,
        planned by :meth:`plan` (none when there are none)."""
        stop, begun = self._parse(end), self._parse(start)
        use_base = begun.initial and stop.base is not None
        begin = stop.base if use_base and stop.base is not None else begun.counts
        ranges: Ranges = {}
        for key in sorted(stop.counts):
            first, last = max(begin.get(key, 0), self.floor) + 1, stop.counts[key]
            if first <= last:
                ranges[key] = (first, last)
        return self.plan(ranges) if ranges else []

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the plane keeps no state for a reader."""


class JournalStream(HeadStream):
    """``aos_journal``'s stream reader (see the module docstring). Offsets and planning
    run on the driver; :meth:`read` runs in tasks, as the batch scan's does."""

    cursor = WORLDS

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        super().__init__(options, NAME)
        rest = {k: v for k, v in options.items() if k.lower() not in STREAM_OPTIONS}
        self.options: ScanOptions = parse(rest, schema)

    def heads(self) -> Heights:
        """Each selected world's head now, capped at the selection's highest height."""
        plane = plane_of(self.options)
        cap = self.options.selection.max_height
        out: Heights = {}
        for universe, world in selected_worlds(plane, self.options.selection):
            try:
                head = plane.head(universe, world)
            except WorldNotFound:  # a selected world this universe does not have
                continue
            out[f"{universe}/{world}"] = head if cap is None else min(head, cap)
        return out

    @property
    def floor(self) -> int:
        """The height every world is read through before anything: ``min_height - 1``."""
        return max(0, (self.options.selection.min_height or 1) - 1)

    def plan(self, ranges: Ranges) -> Sequence[JournalPartition]:
        """Each world's heights planned as the batch scan plans them."""
        plane = plane_of(self.options)
        refs: list[JournalRef] = []
        for key, (first, last) in ranges.items():
            universe, _, world = key.partition("/")
            refs.extend(
                plan_world(
                    plane,
                    UniverseId.parse(universe),
                    WorldId.parse(world),
                    first,
                    last,
                    self.options.hot_entries,
                )
            )
        return partitions_of(refs, self.options) if refs else []

    def sizes(self, key: str, after: int) -> WorldSizes:
        """The world's entries above ``after``, sized as :class:`WorldSizes` says."""
        universe, _, world = key.partition("/")
        return WorldSizes(
            plane_of(self.options), UniverseId.parse(universe), WorldId.parse(world), after
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows, as the batch scan reads them."""
        assert isinstance(partition, JournalPartition)
        return read_partition(partition, self.options)
