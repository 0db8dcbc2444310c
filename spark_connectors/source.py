"""``aos_segments``: a Spark Python Data Source over cold journal segments.

Usage::

    spark.dataSource.register(SegmentDataSource)
    df = (spark.read.format("aos_segments")
          .option("objects", "s3://bucket/prefix?endpoint_url=...")
          .option("kv", "sqlite:///data/aos.db")      # listing from the segment index
          .load())

Options:

============================  ============================================================
``objects``                   object-store URL holding the segments (required)
``kv``                        engine URL: list segments from the plane's segment index
``listing``                   ``index`` (default when ``kv`` is given) or ``objects`` (list
                              the store; each world's segments must tile its history)
``universe``, ``world``       comma-separated ids to read (or filter the DataFrame)
``on_corrupt``                ``fail`` (default: the job fails naming the object) or
                              ``skip`` (one row per skipped segment, with ``error`` set)
``partition_bytes``           small segments are grouped up to this many bytes per input
                              partition (default 128 MiB); a larger one is its own
``batch_rows``                rows per Arrow record batch (default 8192)
``pushdown``                  ``false`` when ``spark.sql.python.filterPushdown.enabled``
                              is off (Spark refuses push-down readers then)
``aws_access_key_id`` ...     S3 credentials (with ``aws_secret_access_key`` and
                              ``aws_session_token``); else the boto3 chain on each executor
============================  ============================================================

Columns: ``universe``, ``world``, ``segment_start``, ``segment_end``, ``segment_bytes``,
``height``, ``kind`` (the record kind when the entry is one the plane writes, ``ingress:<item
kind>`` for drained items, ``opaque`` otherwise), ``entry``, ``entry_size`` and ``error``
(null except on rows standing for a skipped segment).

Filters on ``universe``, ``world`` (equality, ``IN``) and ``height`` (comparisons) are pushed
down when ``spark.sql.python.filterPushdown.enabled`` is on: whole segments are pruned at
planning and rows outside the height window are not produced. With that setting off, Spark
refuses any reader that implements push-down, so read with ``pushdown=false``: Spark then
filters the rows itself, with the same result. (Spark 4.3 keeps the planned scan of a
DataFrame after a push-down: read a fresh DataFrame for each differently filtered query.)

Each segment object is fetched whole and verified (checksum, header, and the index's
checksum in index mode) before any of its rows is produced, so a task's memory is bounded by
its largest segment (export's ``target_bytes``, 64 MiB by default).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from persistence.errors import Corruption, NotFound, SegmentCorruption, Validation
from persistence.ids import UniverseId, WorldId
from persistence.kernel import entry_kind
from persistence.objects import ObjectStore
from persistence.plane.segment_index import SegmentRecordMismatch
from segments import open_plane
from segments.format import DecodedSegment, SegmentHeader, decode_segment
from spark_connectors.listing import (
    SegmentListingError,
    SegmentRef,
    Selection,
    from_index,
    from_objects,
)

NAME: Final = "aos_segments"
SCHEMA: Final = (
    "universe string, world string, segment_start long, segment_end long, "
    "segment_bytes long, height long, kind string, entry binary, entry_size int, "
    "error string"
)
ARROW_SCHEMA: Final = pa.schema(
    [
        ("universe", pa.string()),
        ("world", pa.string()),
        ("segment_start", pa.int64()),
        ("segment_end", pa.int64()),
        ("segment_bytes", pa.int64()),
        ("height", pa.int64()),
        ("kind", pa.string()),
        ("entry", pa.binary()),
        ("entry_size", pa.int32()),
        ("error", pa.string()),
    ]
)
CREDENTIALS: Final = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
DEFAULT_PARTITION_BYTES: Final = 128 * 1024 * 1024
DEFAULT_BATCH_ROWS: Final = 8192
LENGTH_PREFIX: Final = 4
"""Bytes of the big-endian length before each entry in a segment (docs/segments.md)."""


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """The parsed options: small and picklable (URLs and numbers, never clients)."""

    objects: str
    kv: str | None
    listing: str
    on_corrupt: str
    partition_bytes: int
    batch_rows: int
    credentials: tuple[tuple[str, str], ...]
    pushdown: bool = True
    selection: Selection = field(default_factory=Selection)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ScanOptions:
        """Validate the reader options; a bad one is ``Validation`` naming it."""
        known = {
            "objects", "kv", "listing", "universe", "world", "on_corrupt", "partition_bytes",
            "batch_rows", "path", "pushdown", *CREDENTIALS,
        }  # fmt: skip
        unknown = {k for k in options if k.lower() not in known}
        if unknown:
            raise Validation(NAME, f"unknown option(s) {sorted(unknown)}")
        objects = options.get("objects") or options.get("path")
        if not objects:
            raise Validation(f"{NAME}.objects", "the object-store URL is required")
        kv = options.get("kv")
        listing = options.get("listing", "index" if kv else "objects")
        if listing not in ("index", "objects") or (listing == "index" and not kv):
            raise Validation(f"{NAME}.listing", "index (needs the kv option) or objects")
        on_corrupt = options.get("on_corrupt", "fail")
        if on_corrupt not in ("fail", "skip"):
            raise Validation(f"{NAME}.on_corrupt", f"fail or skip, not {on_corrupt!r}")
        return cls(
            objects=objects,
            kv=kv,
            listing=listing,
            on_corrupt=on_corrupt,
            partition_bytes=_positive(options, "partition_bytes", DEFAULT_PARTITION_BYTES),
            batch_rows=_positive(options, "batch_rows", DEFAULT_BATCH_ROWS),
            credentials=tuple((k, options[k]) for k in CREDENTIALS if options.get(k)),
            pushdown=_flag(options, "pushdown"),
            selection=Selection(
                universes=_ids(options.get("universe"), UniverseId.parse),
                worlds=_ids(options.get("world"), WorldId.parse),
            ),
        )


def _positive(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise Validation(f"{NAME}.{name}", f"a positive integer, not {raw!r}")
    return int(raw)


def _flag(options: Mapping[str, str], name: str) -> bool:
    raw = options.get(name, "true").lower()
    if raw not in ("true", "false"):
        raise Validation(f"{NAME}.{name}", f"true or false, not {raw!r}")
    return raw == "true"


def _ids(raw: str | None, parse: Any) -> frozenset[str]:
    if not raw:
        return frozenset()
    return frozenset(str(parse(part.strip())) for part in raw.split(",") if part.strip())


class SegmentPartition(InputPartition):
    """One input partition: a few small segments, or one large one."""

    def __init__(self, segments: tuple[SegmentRef, ...]) -> None:
        super().__init__(segments)
        self.segments = segments


class SegmentDataSource(DataSource):
    """The ``aos_segments`` data source (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        """The short name used with ``spark.read.format``."""
        return NAME

    def schema(self) -> str:
        """The fixed schema (the DDL string of :data:`SCHEMA`)."""
        return SCHEMA

    def reader(self, schema: StructType) -> SegmentScan:
        """A reader for one scan (with push-down unless the ``pushdown`` option is false)."""
        options = ScanOptions.parse(self.options)
        return PushdownSegmentScan(options) if options.pushdown else SegmentScan(options)


class SegmentScan(DataSourceReader):
    """Plans partitions on the driver (listing, pruning, grouping) and reads them in tasks."""

    def __init__(self, options: ScanOptions) -> None:
        self.options = options
        self.requested = options.selection
        """What the options select; push-down narrows a copy of it."""

    def partitions(self) -> Sequence[SegmentPartition]:
        """One partition per large segment, small ones grouped (listed on the driver)."""
        refs = list_segments(self.options)
        groups: list[list[SegmentRef]] = []
        size = 0
        for ref in refs:
            if not groups or size + ref.byte_size > self.options.partition_bytes:
                groups.append([])
                size = 0
            groups[-1].append(ref)
            size += ref.byte_size
        return [SegmentPartition(tuple(g)) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch, verify and decode each segment; yield Arrow batches of the schema."""
        assert isinstance(partition, SegmentPartition)
        objects = _objects(self.options.objects, self.options.credentials)
        for ref in partition.segments:
            try:
                if ref.error is not None:
                    raise SegmentListingError(
                        f"world {ref.world}: heights {ref.start}-{ref.end}: {ref.error}"
                    )
                yield from segment_batches(objects, ref, self.options)
            except Corruption as exc:
                if self.options.on_corrupt == "fail":
                    raise
                yield _error_batch(ref, str(exc))


class PushdownSegmentScan(SegmentScan):
    """:class:`SegmentScan` with filter push-down. Spark refuses a reader that implements
    ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is off, so this one is
    used unless the ``pushdown`` option is ``false``."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take equality/``IN`` on universe and world and comparisons on height; return
        the rest for Spark to evaluate."""
        selection = self.requested  # Spark may push again into a kept reader
        for f in filters:
            narrowed = _narrow(selection, f)
            if narrowed is None:
                yield f
            else:
                selection = narrowed
        self.options = replace(self.options, selection=selection)


def list_segments(options: ScanOptions) -> list[SegmentRef]:
    """The segments a scan reads, by the configured listing mode."""
    objects = _objects(options.objects, options.credentials)
    if options.listing == "objects":
        return from_objects(objects, options.selection)
    assert options.kv is not None
    plane = open_plane(options.kv, objects, create=False)
    try:
        return from_index(plane, options.selection)
    finally:
        plane.engine.close()


def segment_batches(
    objects: ObjectStore, ref: SegmentRef, options: ScanOptions
) -> Iterator[pa.RecordBatch]:
    """The rows of one segment, verified whole before the first batch is produced."""
    try:
        data = objects.get(ref.object_key)
    except NotFound:
        raise SegmentCorruption(ref.object_key, 0, "segment object is missing") from None
    expect = SegmentHeader(
        UniverseId.parse(ref.universe), WorldId.parse(ref.world), ref.start, ref.end
    )
    segment = decode_segment(data, ref.object_key, expect)
    if ref.checksum is not None and segment.checksum != ref.checksum:
        raise SegmentCorruption(
            ref.object_key, len(data), "checksum differs from the segment index's"
        )
    if len(data) != ref.byte_size:
        raise SegmentRecordMismatch(
            ref.world, ref.end, "byte_size", f"{ref.byte_size}, {ref.object_key} is {len(data)}"
        )
    if len(data) >= 2**31:
        raise SegmentCorruption(ref.object_key, 0, "segment over 2 GiB: too large to scan")
    lo = max(ref.start, options.selection.min_height or ref.start)
    hi = min(ref.end, options.selection.max_height or ref.end)
    if lo > hi:
        return
    count = ref.end - ref.start + 1
    # Whole-segment columns built once; batches are zero-copy slices of them. Entries
    # are copied once into one contiguous buffer (an Arrow binary column's layout).
    starts, view, first = segment.starts, memoryview(data), segment.starts[0]
    payload = b"".join([view[b + LENGTH_PREFIX : e] for b, e in pairwise(starts)])
    offsets = array("i", [start - first - LENGTH_PREFIX * i for i, start in enumerate(starts)])
    entries = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(payload)]
    )
    sizes = pc.binary_length(entries)
    heights = pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count)), ref.start - 1)
    kinds = pa.array(_kinds(segment), pa.string())
    constants = [
        pa.repeat(pa.scalar(ref.universe, pa.string()), count),
        pa.repeat(pa.scalar(ref.world, pa.string()), count),
        pa.repeat(pa.scalar(ref.start, pa.int64()), count),
        pa.repeat(pa.scalar(ref.end, pa.int64()), count),
        pa.repeat(pa.scalar(len(data), pa.int64()), count),
    ]
    whole = pa.RecordBatch.from_arrays(
        [*constants, heights, kinds, entries, sizes, pa.nulls(count, pa.string())],
        schema=ARROW_SCHEMA,
    )
    for first in range(lo, hi + 1, options.batch_rows):
        rows = min(hi, first + options.batch_rows - 1) - first + 1
        yield whole.slice(first - ref.start, rows)


def _kinds(segment: DecodedSegment) -> list[str]:
    """The ``kind`` column. Plane records are canonical CBOR maps (major type 5): anything
    else is opaque without decoding it."""
    data, starts = segment.data, segment.starts
    first = [start + LENGTH_PREFIX for start in starts]
    return [
        _kind(data, begin, end) if begin < end and 0xA0 <= data[begin] <= 0xBF else "opaque"
        for begin, end in zip(first, starts[1:], strict=False)
    ]


def _kind(payload: bytes, start: int, end: int) -> str:
    try:
        return entry_kind(payload[start:end])
    except Corruption:
        return "corrupt record"


def _error_batch(ref: SegmentRef, message: str) -> pa.RecordBatch:
    values: list[Any] = [ref.universe, ref.world, ref.start, ref.end, ref.byte_size]
    values += [None, None, None, None, message]
    return pa.RecordBatch.from_arrays(
        [pa.array([v], t.type) for v, t in zip(values, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA,
    )


def _narrow(selection: Selection, f: Filter) -> Selection | None:
    """``selection`` narrowed by ``f``, or ``None`` if ``f`` cannot be pushed."""
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else None
    raw: Any = getattr(f, "value", None)
    if column in ("universe", "world") and isinstance(f, EqualTo | In):
        values = frozenset([raw] if isinstance(f, EqualTo) else raw)
        if not all(isinstance(v, str) for v in values):
            return None
        if column == "universe":
            current = selection.universes
            return replace(selection, universes=current & values if current else values)
        current = selection.worlds
        return replace(selection, worlds=current & values if current else values)
    if column == "height" and isinstance(raw, int) and not isinstance(raw, bool):
        value: int = raw
        lo, hi = selection.min_height, selection.max_height
        if isinstance(f, EqualTo):
            lo, hi = _max(lo, value), _min(hi, value)
        elif isinstance(f, GreaterThan):
            lo = _max(lo, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            lo = _max(lo, value)
        elif isinstance(f, LessThan):
            hi = _min(hi, value - 1)
        elif isinstance(f, LessThanOrEqual):
            hi = _min(hi, value)
        else:
            return None
        # Heights start at 1, so a bound below 0 selects what 0 does (a Selection's
        # bounds are never negative).
        return replace(selection, min_height=_at_least_0(lo), max_height=_at_least_0(hi))
    return None


def _at_least_0(bound: int | None) -> int | None:
    return None if bound is None else max(bound, 0)


def _max(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def _min(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


_stores: dict[tuple[str, tuple[tuple[str, str], ...]], ObjectStore] = {}
_stores_lock = threading.Lock()


def _objects(url: str, credentials: tuple[tuple[str, str], ...]) -> ObjectStore:
    """One object store per URL and process (Spark reuses Python workers across tasks)."""
    from backends.objects import open_object_store

    with _stores_lock:
        key = (url, credentials)
        if key not in _stores:
            _stores[key] = open_object_store(
                url, credentials=dict(credentials) or None, create=False
            )
        return _stores[key]
