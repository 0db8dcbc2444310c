"""``aos_journal``: each world's whole journal -- cold segments and the hot tail -- as one
table, heights 1 to the head.

Usage::

    spark.dataSource.register(JournalDataSource)
    df = (spark.read.format("aos_journal")
          .option("kv", "fdb:///etc/foundationdb/fdb.cluster")   # required: the hot tail
          .option("objects", "s3://bucket/prefix?endpoint_url=...")
          .load())

The options, columns and kinds are ``aos_segments``' (:mod:`spark_connectors.source`), with
``kv`` required, ``listing`` always the index, and ``hot_entries``: the most entries of a
world's hot tail one input partition reads (default 16,384), and ``min_partitions``: a scan
of more than one ref is cut into at least this many input partitions (default 2). Rows of
the hot tail have ``segment_start``, ``segment_end`` and ``segment_bytes`` null.

Planning, on the driver, lists each selected world's segment index (as ``aos_segments``
does: a damaged record or a gap is a ref with its error) and then reads its head: heights
above the index's coverage up to that head are the hot tail, cut into ranges. Tasks read a
segment from the object store and a hot range from the engine with
:meth:`~persistence.plane.Plane.read_range`, which stitches: an export that indexes a
segment and deletes its hot keys between planning and reading makes the task read those
heights from the new segment. Heights never change once written and index records are
never removed, so a plan stays exact while export runs: every height from 1 to the head the
plan read is produced once, whatever moves from hot to cold meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from persistence.errors import (
    Corruption,
    DamagedJournalEntry,
    MissingJournalEntry,
    Validation,
    WorldNotFound,
)
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId
from persistence.plane import Plane
from segments import open_plane
from spark_connectors.listing import (
    SegmentRef,
    Selection,
    hole_end,
    index_refs,
    selected_worlds,
)
from spark_connectors.source import (
    ARROW_TYPES,
    ScanOptions,
    arrow_schema,
    error_batch,
    group_refs,
    kind_of,
    object_store_of,
    read_segment,
)

NAME: Final = "aos_journal"
DEFAULT_HOT_ENTRIES: Final = 16_384
DEFAULT_MIN_PARTITIONS: Final = 2
"""A scan or micro-batch of more than one ref is cut into at least this many partitions
(``min_partitions``), even below ``partition_bytes``: a micro-batch is often tens of MiB,
and one partition would leave all but one core idle."""
HOT_ENTRY_ESTIMATE: Final = 1024
"""Bytes a hot entry counts for when partitions are grouped up to ``partition_bytes`` (the
hot tail's sizes are not read at planning)."""


@dataclass(frozen=True, slots=True)
class HotRange:
    """Heights ``start..end`` of a world's journal above its segments at planning."""

    universe: str
    world: str
    start: int
    end: int

    @property
    def byte_size(self) -> int:
        """The range's estimated size, for grouping (:data:`HOT_ENTRY_ESTIMATE`)."""
        return (self.end - self.start + 1) * HOT_ENTRY_ESTIMATE


@dataclass(frozen=True, slots=True)
class ColdRange:
    """Heights ``start..end`` of the indexed segment ``ref`` (all of it, or the part a
    window selects); ``ref.error`` set for heights the index cannot give."""

    ref: SegmentRef
    start: int
    end: int

    @property
    def world(self) -> str:
        """The world's id."""
        return self.ref.world

    @property
    def byte_size(self) -> int:
        """The segment's size (it is fetched whole whatever the window)."""
        return self.ref.byte_size


JournalRef = ColdRange | HotRange


def plan_journal(plane: Plane, selection: Selection, hot_entries: int) -> list[JournalRef]:
    """The refs a scan of ``selection`` reads, per world in height order (see
    :func:`plan_world`), from the selection's lowest height to its highest or the head."""
    refs: list[JournalRef] = []
    lo = max(1, selection.min_height or 1)
    hi = MAX_HEIGHT if selection.max_height is None else selection.max_height
    for universe, world in selected_worlds(plane, selection):
        refs.extend(plan_world(plane, universe, world, lo, hi, hot_entries))
    return refs


def plan_world(
    plane: Plane, universe: UniverseId, world: WorldId, lo: int, hi: int, hot_entries: int
) -> list[JournalRef]:
    """The refs of heights ``lo..hi`` of one world, no higher than the head: the indexed
    segments (damage and gaps as refs with an error), then the hot tail up to the head read
    after the index, in ranges of at most ``hot_entries``. Nothing for a world that does
    not exist (unless segments are indexed for it: ``WorldNotFound``)."""
    cold, covered = index_refs(plane, universe, world)
    try:
        head = plane.head(universe, world)
    except WorldNotFound:
        if cold:  # segments indexed for a world that does not exist: fail the plan
            raise
        return []  # a selected world this universe does not have: nothing to read
    last = min(head, hi)
    refs: list[JournalRef] = [
        ColdRange(ref, max(ref.start, lo), min(ref.end, last))
        for ref in cold
        if ref.end >= lo and ref.start <= last
    ]
    u, w = str(universe), str(world)
    refs.extend(
        HotRange(u, w, start, min(last, start + hot_entries - 1))
        for start in range(max(covered + 1, lo), last + 1, hot_entries)
    )
    return refs


class JournalPartition(InputPartition):
    """One input partition: segments and hot ranges, grouped up to ``partition_bytes``."""

    def __init__(self, refs: tuple[JournalRef, ...]) -> None:
        super().__init__(refs)
        self.refs = refs


def partitions_of(refs: Sequence[JournalRef], options: ScanOptions) -> list[JournalPartition]:
    """``refs`` grouped up to ``partition_bytes``, or less so that there are at least
    ``min_partitions`` groups, or one per ref if there are fewer refs (one empty partition
    if there are none). Refs keep their order."""
    total = sum(ref.byte_size for ref in refs)
    share = -(-total // options.min_partitions)  # rounded up
    limit = max(1, min(options.partition_bytes, share))
    groups = group_refs(refs, limit)
    while len(groups) < min(options.min_partitions, len(refs)):
        # refs of uneven sizes: small ones packed together beside a large one alone; the
        # group of most refs (two at least, as there are fewer groups than refs) is halved
        at = max(range(len(groups)), key=lambda i: len(groups[i]))
        group = groups[at]
        groups[at : at + 1] = [group[: len(group) // 2], group[len(group) // 2 :]]
    return [JournalPartition(group) for group in groups]


def parse(options: Mapping[str, str], schema: StructType | None = None) -> ScanOptions:
    """The options of an ``aos_journal`` scan (``kv`` required, no ``listing``)."""
    if not options.get("kv"):
        raise Validation(f"{NAME}.kv", "the engine URL is required (the hot tail is read there)")
    if "listing" in {k.lower() for k in options}:
        raise Validation(f"{NAME}.listing", "the journal is always listed from the index")
    return ScanOptions.parse(
        options,
        schema,
        source=NAME,
        extra={"hot_entries": DEFAULT_HOT_ENTRIES, "min_partitions": DEFAULT_MIN_PARTITIONS},
    )


class JournalScan(DataSourceReader):
    """Plans on the driver (index, heads, hot ranges) and reads partitions in tasks."""

    def __init__(self, options: ScanOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[JournalPartition]:
        """The refs of :func:`plan_journal`, grouped (:func:`partitions_of`)."""
        plane = plane_of(self.options)
        refs = plan_journal(plane, self.options.selection, self.options.hot_entries)
        return partitions_of(refs, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows (:func:`read_partition`)."""
        return read_partition(partition, self.options)


def read_partition(partition: InputPartition, options: ScanOptions) -> Iterator[pa.RecordBatch]:
    """Each ref's rows: a segment verified whole, a hot range read through the plane."""
    assert isinstance(partition, JournalPartition)
    for ref in partition.refs:
        if isinstance(ref, HotRange):
            yield from hot_batches(plane_of(options), ref, options)
        else:
            objects = object_store_of(options.objects, options.credentials)
            yield from read_segment(objects, ref.ref, options, (ref.start, ref.end))


def hot_batches(plane: Plane, ref: HotRange, options: ScanOptions) -> Iterator[pa.RecordBatch]:
    """The rows of heights ``ref.start..ref.end``, read with ``read_range`` (stitched: a
    height exported since planning comes from its segment) in batches of ``batch_rows``.
    Each batch must hold exactly the heights asked for: fewer is ``Corruption``. In skip
    mode a run of missing heights is one error row, and so is an entry that fails its
    checksum, and the read goes on after it; another failure is an error row for the
    batch's heights."""
    universe, world = UniverseId.parse(ref.universe), WorldId.parse(ref.world)
    height = ref.start
    while height <= ref.end:
        last = min(ref.end, height + options.batch_rows - 1)
        try:
            rows = _read_exactly(plane, universe, world, height, last)
        except MissingJournalEntry as exc:
            if options.on_corrupt == "fail":
                raise
            missing = exc.height if height <= exc.height <= last else height
            if missing > height:  # the heights before the hole are read first
                yield _hot_batch(
                    ref, _read_exactly(plane, universe, world, height, missing - 1), options
                )
            end = hole_end(plane, universe, world, missing, ref.end)
            yield error_batch(ref.universe, ref.world, missing, end, str(exc), options.columns)
            height = end + 1
            continue
        except DamagedJournalEntry as exc:
            if options.on_corrupt == "fail":
                raise
            damaged = exc.height if height <= exc.height <= last else height
            if damaged > height:  # the heights before it are read first
                yield _hot_batch(
                    ref, _read_exactly(plane, universe, world, height, damaged - 1), options
                )
            yield error_batch(ref.universe, ref.world, damaged, damaged, str(exc), options.columns)
            height = damaged + 1
            continue
        except Corruption as exc:
            if options.on_corrupt == "fail":
                raise
            yield error_batch(ref.universe, ref.world, height, last, str(exc), options.columns)
            height = last + 1
            continue
        yield _hot_batch(ref, rows, options)
        height = last + 1


def _read_exactly(
    plane: Plane, universe: UniverseId, world: WorldId, first: int, last: int
) -> list[tuple[int, bytes]]:
    rows = plane.read_range(universe, world, first, last - first + 1)
    if len(rows) != last - first + 1:
        got = f"through {rows[-1][0]}" if rows else "none"
        raise Corruption(
            f"world {world}: heights {first}-{last} were planned below the head, "
            f"the journal gave {got}"
        )
    return rows


def _hot_batch(
    ref: HotRange, rows: list[tuple[int, bytes]], options: ScanOptions
) -> pa.RecordBatch:
    """One batch of hot rows with the scan's columns (kinds filtered when selected); the
    kinds are decoded only when a column or the selection needs them."""
    heights, entries = zip(*rows, strict=True) if rows else ((), ())
    kinds: list[str] = []
    if options.selection.kinds or "kind" in options.columns:
        kinds = [kind_of(entry, 0, len(entry)) for entry in entries]
    if options.selection.kinds:
        keep = [i for i, kind in enumerate(kinds) if kind in options.selection.kinds]
        heights = tuple(heights[i] for i in keep)
        entries = tuple(entries[i] for i in keep)
        kinds = [kinds[i] for i in keep]
    count = len(heights)
    entry_column = pa.array(entries, pa.binary())
    columns = {
        "universe": lambda: pa.repeat(pa.scalar(ref.universe, pa.string()), count),
        "world": lambda: pa.repeat(pa.scalar(ref.world, pa.string()), count),
        "height": lambda: pa.array(heights, pa.int64()),
        "kind": lambda: pa.array(kinds, pa.string()),
        "entry": lambda: entry_column,
        "entry_size": lambda: pc.binary_length(entry_column),
    }
    return pa.RecordBatch.from_arrays(
        [
            columns[name]() if name in columns else pa.nulls(count, ARROW_TYPES[name])
            for name in options.columns
        ],
        schema=arrow_schema(options.columns),
    )


_planes: dict[tuple[str, str, tuple[tuple[str, str], ...]], Plane] = {}
_planes_lock = threading.Lock()


class StoreOptions(Protocol):
    """The options that name a store: engine URL, object-store URL and credentials."""

    @property
    def kv(self) -> str | None: ...
    @property
    def objects(self) -> str: ...
    @property
    def credentials(self) -> tuple[tuple[str, str], ...]: ...


def plane_of(options: StoreOptions) -> Plane:
    """One reading plane per store and process (Spark reuses Python workers across tasks);
    opened with ``create=False``: a scan never creates a store."""
    assert options.kv is not None
    with _planes_lock:
        key = (options.kv, options.objects, options.credentials)
        if key not in _planes:
            objects = object_store_of(options.objects, options.credentials)
            _planes[key] = open_plane(options.kv, objects, create=False)
        return _planes[key]
