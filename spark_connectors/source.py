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
``universe``, ``world``       comma-separated ids to read (others are never listed)
``min_height``, ``max_height``  the height window to read (inclusive; segments outside it
                              are never fetched)
``kind``                      comma-separated record kinds to produce (rows of other kinds
                              are dropped in the task; error rows are always produced)
``on_corrupt``                ``fail`` (default: the job fails naming the object) or
                              ``skip`` (one row per skipped segment, with ``error`` set)
``partition_bytes``           small segments are grouped up to this many bytes per input
                              partition (default 128 MiB); a larger one is its own
``batch_rows``                rows per Arrow record batch (default 8192)
``columns``                   comma-separated columns to produce (default: all); the same as
                              a user-given schema naming a subset of the columns
``aws_access_key_id`` ...     S3 credentials (with ``aws_secret_access_key`` and
                              ``aws_session_token``); else the boto3 chain on each executor
============================  ============================================================

Columns: ``universe``, ``world``, ``segment_start``, ``segment_end``, ``segment_bytes``,
``height``, ``kind`` (the record kind when the entry is one the plane writes, ``ingress:<item
kind>`` for drained items, ``opaque`` otherwise), ``entry``, ``entry_size`` and ``error``
(null except on rows standing for a skipped segment).

A scan builds only the columns of its schema. Spark 4.3 does not tell a Python source which
columns a query uses (its scan builder has no column pruning: ``reader`` receives the
DataFrame's schema, never the query's columns), so name them: with a user-given schema
(``.schema("height long, entry binary")``, the source's names and types, any order) or
``.option("columns", "height,entry")``. Every segment a scan reads is still fetched and
verified whole, whichever columns it produces. With ``on_corrupt=skip`` the columns must
include ``error``, so that a skipped segment is never a silent row of nulls.

What a scan reads is chosen by its options, not by pushed filters: Spark 4.3 keeps the read
a Python source plans under pushed filters on the DataFrame's relation and reuses it for a
later query of that DataFrame that pushes none (``df.where(...).count()`` then
``df.count()`` counts the filtered rows), so a source whose plan depends on pushed filters
answers one query with another's rows. This source implements no ``pushFilters``: each
query reads what its options select and Spark applies the query's filters to those rows
(a filter value that is not an id matches nothing). Selecting by options prunes as
push-down would: whole segments outside the universes, worlds and height window are never
fetched.

Each segment object is fetched whole and verified (checksum, header, and the index's
checksum in index mode) before any of its rows is produced, so a task's memory is bounded by
its largest segment (export's ``target_bytes``, 64 MiB by default).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from persistence.errors import Corruption, NotFound, SegmentCorruption, Validation
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId
from persistence.kernel import entry_kind
from persistence.objects import ObjectStore
from persistence.protocols.segment_index import SegmentRecordMismatch
from segments import open_plane
from segments.format import MAX_ENTRY, DecodedSegment, SegmentHeader, decode_segment
from spark_connectors.listing import (
    SegmentListingError,
    SegmentRef,
    Selection,
    from_index,
    from_objects,
)

NAME: Final = "aos_segments"
SCHEMA: Final = StructType(
    [
        StructField("universe", StringType()),
        StructField("world", StringType()),
        StructField("segment_start", LongType()),
        StructField("segment_end", LongType()),
        StructField("segment_bytes", LongType()),
        StructField("height", LongType()),
        StructField("kind", StringType()),
        StructField("entry", BinaryType()),
        StructField("entry_size", IntegerType()),
        StructField("error", StringType()),
    ]
)
"""Every column the source can produce (a scan produces the ones its schema names)."""
ARROW_TYPES: Final[Mapping[str, pa.DataType]] = {
    "universe": pa.string(),
    "world": pa.string(),
    "segment_start": pa.int64(),
    "segment_end": pa.int64(),
    "segment_bytes": pa.int64(),
    "height": pa.int64(),
    "kind": pa.string(),
    "entry": pa.binary(),
    "entry_size": pa.int32(),
    "error": pa.string(),
}
CREDENTIALS: Final = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
DEFAULT_PARTITION_BYTES: Final = 128 * 1024 * 1024
DEFAULT_BATCH_ROWS: Final = 8192
MAX_KIND_CHARS: Final = 200
"""Longest record kind the ``kind`` option takes."""
MAX_OPTION: Final = 2**63 - 1
"""The largest value of a numeric option (a signed 64-bit count, as Spark's)."""
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
    selection: Selection = field(default_factory=Selection)
    columns: tuple[str, ...] = tuple(SCHEMA.names)
    """The columns to produce, in the schema's order."""
    hot_entries: int = 0
    """``aos_journal``: most entries of the hot tail one input partition reads."""
    min_partitions: int = 1
    """``aos_journal``: the fewest input partitions a scan of more than one ref is cut into."""

    @classmethod
    def parse(
        cls,
        options: Mapping[str, str],
        schema: StructType | None = None,
        *,
        source: str = NAME,
        extra: Mapping[str, int] | None = None,
    ) -> ScanOptions:
        """Validate the reader options of ``source`` and the scan's ``schema`` (a subset
        of :data:`SCHEMA`; the ``columns`` option's when not given); a bad one is
        ``Validation`` naming it. ``extra``: the source's own positive-integer options and
        their defaults (``aos_journal``'s ``hot_entries`` and ``min_partitions``)."""
        extra = extra or {}
        known = {
            "objects", "kv", "listing", "universe", "world", "min_height", "max_height",
            "kind", "on_corrupt", "partition_bytes", "batch_rows", "path", "columns",
            *CREDENTIALS, *extra,
        }  # fmt: skip
        unknown = {k for k in options if k.lower() not in known}
        if unknown:
            raise Validation(source, f"unknown option(s) {sorted(unknown)}")
        objects = options.get("objects") or options.get("path")
        if not objects:
            raise Validation(f"{source}.objects", "the object-store URL is required")
        kv = options.get("kv")
        listing = options.get("listing", "index" if kv else "objects")
        if listing not in ("index", "objects") or (listing == "index" and not kv):
            raise Validation(f"{source}.listing", "index (needs the kv option) or objects")
        on_corrupt = options.get("on_corrupt", "fail")
        if on_corrupt not in ("fail", "skip"):
            raise Validation(f"{source}.on_corrupt", f"fail or skip, not {on_corrupt!r}")
        columns = _columns(options.get("columns"), source)
        if schema is not None:
            given = _schema_columns(schema, source)
            if "columns" in options and given != columns:
                raise Validation(
                    f"{source}.columns", f"{list(columns)} but the schema names {list(given)}"
                )
            columns = given
        if on_corrupt == "skip" and "error" not in columns:
            raise Validation(
                f"{source}.columns",
                "on_corrupt=skip needs the error column (or rows of nulls "
                "would stand for skipped segments)",
            )
        low, high = (
            height_option(options, "min_height", source),
            height_option(options, "max_height", source),
        )
        if low is not None and high is not None and low > high:
            raise Validation(f"{source}.min_height", f"at most max_height ({high}), not {low}")
        return cls(
            objects=objects,
            kv=kv,
            listing=listing,
            on_corrupt=on_corrupt,
            partition_bytes=positive_option(
                options, "partition_bytes", DEFAULT_PARTITION_BYTES, source
            ),
            batch_rows=positive_option(options, "batch_rows", DEFAULT_BATCH_ROWS, source),
            credentials=tuple((k, options[k]) for k in CREDENTIALS if options.get(k)),
            selection=Selection(
                universes=ids_option(
                    options.get("universe"), UniverseId.parse, f"{source}.universe"
                ),
                worlds=ids_option(options.get("world"), WorldId.parse, f"{source}.world"),
                min_height=low,
                max_height=high,
                kinds=_kinds_option(options.get("kind"), source),
            ),
            columns=columns,
            **{
                name: positive_option(options, name, default, source)
                for name, default in extra.items()
            },
        )


def _columns(raw: str | None, source: str) -> tuple[str, ...]:
    """The ``columns`` option: names of :data:`SCHEMA`, at least one, each once."""
    if raw is None:
        return tuple(SCHEMA.names)
    names = tuple(name.strip() for name in raw.split(","))
    unknown = [name for name in names if name not in ARROW_TYPES]
    if unknown or len(set(names)) != len(names):
        raise Validation(
            f"{source}.columns", f"distinct names of {', '.join(SCHEMA.names)}, not {raw!r}"
        )
    return names


def _schema_columns(schema: StructType, source: str) -> tuple[str, ...]:
    """The columns a scan's schema names: each must be a column of :data:`SCHEMA` with its
    name, type and nullability (a user-given schema may name a subset, in any order)."""
    names = tuple(schema.names)
    for given in schema.fields:
        if given.name not in ARROW_TYPES or given != SCHEMA[given.name]:
            raise Validation(
                f"{source}.schema",
                f"{given.simpleString()} is not a column of {SCHEMA.simpleString()} "
                "(names and types as given, nullable)",
            )
    if not names or len(set(names)) != len(names):
        raise Validation(f"{source}.schema", f"distinct columns, not {schema.simpleString()}")
    return names


def schema_of(columns: Sequence[str]) -> StructType:
    """The Spark schema of ``columns`` (names of :data:`SCHEMA`, in the order given)."""
    return StructType([SCHEMA[name] for name in columns])


def positive_option(options: Mapping[str, str], name: str, default: int, source: str) -> int:
    """Option ``name``: an integer from 1 to :data:`MAX_OPTION` (``default`` if absent)."""
    raw = options.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_OPTION):
        raise Validation(f"{source}.{name}", f"an integer from 1 to {MAX_OPTION}, not {raw!r}")
    return int(raw)


def height_option(options: Mapping[str, str], name: str, source: str) -> int | None:
    """Option ``name``: a height (or log position) from 0 to ``MAX_HEIGHT``, if given."""
    raw = options.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 20 or int(raw) > MAX_HEIGHT:
        raise Validation(f"{source}.{name}", f"a height from 0 to {MAX_HEIGHT}, not {raw!r}")
    return int(raw)


def _kinds_option(raw: str | None, source: str) -> frozenset[str]:
    """The ``kind`` option: record kinds as the ``kind`` column spells them."""
    if raw is None:
        return frozenset()
    kinds = frozenset(part.strip() for part in raw.split(","))
    if not all(kinds) or any(len(kind) > MAX_KIND_CHARS for kind in kinds):
        raise Validation(
            f"{source}.kind", f"comma-separated kinds of 1-{MAX_KIND_CHARS} characters, not {raw!r}"
        )
    return kinds


def ids_option(raw: str | None, parse: Any, field: str) -> frozenset[str]:
    """Comma-separated ids, at least one (an empty option would select everything)."""
    if raw is None:
        return frozenset()
    try:
        ids = frozenset(str(parse(part.strip())) for part in raw.split(",") if part.strip())
    except Validation as exc:  # named as the option, not as the id's own field
        raise Validation(field, exc.problem) from None
    if not ids:
        raise Validation(field, f"comma-separated ids (leave it out to read all), not {raw!r}")
    return ids


class _Weighed(Protocol):
    """What a partition groups: anything with a (perhaps estimated) size in bytes."""

    @property
    def byte_size(self) -> int: ...


_Ref = TypeVar("_Ref", bound=_Weighed)


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

    def schema(self) -> StructType:
        """The columns the ``columns`` option names, else every column of :data:`SCHEMA`
        (Spark asks only when the user gives no schema)."""
        return schema_of(ScanOptions.parse(self.options).columns)

    def reader(self, schema: StructType) -> SegmentScan:
        """A reader for one scan producing ``schema``'s columns."""
        return SegmentScan(ScanOptions.parse(self.options, schema))


class SegmentScan(DataSourceReader):
    """Plans partitions on the driver (listing, pruning, grouping) and reads them in tasks."""

    def __init__(self, options: ScanOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[SegmentPartition]:
        """One partition per large segment, small ones grouped (listed on the driver)."""
        groups = group_refs(list_segments(self.options), self.options.partition_bytes)
        return [SegmentPartition(group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Fetch, verify and decode each segment; yield Arrow batches of the schema."""
        assert isinstance(partition, SegmentPartition)
        objects = object_store_of(self.options.objects, self.options.credentials)
        for ref in partition.segments:
            yield from read_segment(objects, ref, self.options)


def group_refs(refs: Sequence[_Ref], partition_bytes: int) -> list[tuple[_Ref, ...]]:
    """``refs`` in order, cut into groups of at most ``partition_bytes`` (by each ref's
    ``byte_size``; a larger one is a group of its own). At least one group: Spark would
    read a plain InputPartition in place of an empty list, so no refs is one empty group."""
    groups: list[list[_Ref]] = []
    size = 0
    for ref in refs:
        if not groups or size + ref.byte_size > partition_bytes:
            groups.append([])
            size = 0
        groups[-1].append(ref)
        size += ref.byte_size
    return [tuple(group) for group in groups] or [()]


def read_segment(
    objects: ObjectStore,
    ref: SegmentRef,
    options: ScanOptions,
    window: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The batches of one listed segment (heights ``window``, inclusive, when given; else
    the selection's); in skip mode a corrupt one is its error row, for the whole segment
    or the window."""
    try:
        if ref.error is not None:
            raise SegmentListingError(
                f"world {ref.world}: heights {ref.start}-{ref.end}: {ref.error}"
            )
        yield from segment_batches(objects, ref, options, window)
    except Corruption as exc:
        if options.on_corrupt == "fail":
            raise
        start, end = window or (ref.start, ref.end)
        yield error_batch(
            ref.universe, ref.world, start, end, str(exc), options.columns, ref.byte_size
        )


def list_segments(options: ScanOptions) -> list[SegmentRef]:
    """The segments a scan reads, by the configured listing mode."""
    objects = object_store_of(options.objects, options.credentials)
    if options.listing == "objects":
        return from_objects(objects, options.selection)
    assert options.kv is not None
    plane = open_plane(options.kv, objects, create=False)
    try:
        return from_index(plane, options.selection)
    finally:
        plane.engine.close()


def segment_batches(
    objects: ObjectStore,
    ref: SegmentRef,
    options: ScanOptions,
    window: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one segment with the columns of ``options`` (heights ``window`` when
    given, else the selection's), verified whole before the first batch is produced; only
    those columns are built."""
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
    want_lo, want_hi = window or (options.selection.min_height, options.selection.max_height)
    lo = max(ref.start, want_lo or ref.start)
    hi = ref.end if want_hi is None else min(ref.end, want_hi)
    if lo > hi:
        return
    # Whole-segment columns built once; batches are zero-copy slices of them.
    source = SegmentColumns(ref, segment)
    whole = pa.RecordBatch.from_arrays(
        [COLUMN_BUILDERS[name](source) for name in options.columns],
        schema=arrow_schema(options.columns),
    )
    rows = whole.slice(lo - ref.start, hi - lo + 1)
    if options.selection.kinds:
        kinds = source.kinds.slice(lo - ref.start, hi - lo + 1)
        rows = rows.filter(pc.is_in(kinds, value_set=pa.array(sorted(options.selection.kinds))))
    for offset in range(0, rows.num_rows, options.batch_rows):
        yield rows.slice(offset, options.batch_rows)


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    """The Arrow schema of batches with ``columns`` (what Spark checks them against)."""
    return pa.schema([(name, ARROW_TYPES[name]) for name in columns])


class SegmentColumns:
    """What a verified segment's columns are built from: the listing's ref and the
    decoded segment. Parts two columns share are computed once, when first needed."""

    def __init__(self, ref: SegmentRef, segment: DecodedSegment) -> None:
        self.ref = ref
        self.segment = segment
        self.count = ref.end - ref.start + 1

    def constant(self, value: str | int, kind: pa.DataType) -> pa.Array:
        """``value`` on every row."""
        return pa.repeat(pa.scalar(value, kind), self.count)

    @cached_property
    def framed(self) -> pa.Array:
        """Each entry with its length prefix, as a binary column over the segment's own
        buffer (zero-copy: the framed entries are contiguous)."""
        starts = self.segment.starts
        offsets = pc.subtract(pa.array(starts, pa.int32()), pa.scalar(starts[0], pa.int32()))
        values = memoryview(self.segment.data)[starts[0] : starts[-1]]
        return pa.Array.from_buffers(
            pa.binary(), self.count, [None, offsets.buffers()[1], pa.py_buffer(values)]
        )

    @cached_property
    def kinds(self) -> pa.Array:
        """The ``kind`` column (:func:`kind_of` of each entry)."""
        data, starts = self.segment.data, self.segment.starts
        bounds = itertools.pairwise(starts)
        return pa.array(
            [kind_of(data, begin + LENGTH_PREFIX, end) for begin, end in bounds], pa.string()
        )


def _entries(source: SegmentColumns) -> pa.Array:
    """The entries, copied once into one contiguous buffer (an Arrow binary column)."""
    return pc.binary_slice(source.framed, LENGTH_PREFIX, LENGTH_PREFIX + MAX_ENTRY)


def _entry_sizes(source: SegmentColumns) -> pa.Array:
    """Entry sizes from the framing, without copying the entries."""
    framed = pc.binary_length(source.framed)
    return pc.subtract(framed, pa.scalar(LENGTH_PREFIX, pa.int32()))


def _heights(source: SegmentColumns) -> pa.Array:
    ones = pa.repeat(pa.scalar(1, pa.int64()), source.count)
    return pc.add(pc.cumulative_sum(ones), source.ref.start - 1)


def kind_of(data: bytes, begin: int, end: int) -> str:
    """The ``kind`` of the entry at ``data[begin:end]``: plane records are canonical CBOR
    maps (major type 5), so anything else is opaque without decoding it."""
    if begin >= end or not 0xA0 <= data[begin] <= 0xBF:
        return "opaque"
    try:
        return entry_kind(data[begin:end])
    except Corruption:
        return "corrupt record"


COLUMN_BUILDERS: Final[dict[str, Callable[[SegmentColumns], pa.Array]]] = {
    "universe": lambda s: s.constant(s.ref.universe, pa.string()),
    "world": lambda s: s.constant(s.ref.world, pa.string()),
    "segment_start": lambda s: s.constant(s.ref.start, pa.int64()),
    "segment_end": lambda s: s.constant(s.ref.end, pa.int64()),
    "segment_bytes": lambda s: s.constant(len(s.segment.data), pa.int64()),
    "height": _heights,
    "kind": lambda s: s.kinds,
    "entry": _entries,
    "entry_size": _entry_sizes,
    "error": lambda s: pa.nulls(s.count, pa.string()),
}
"""How each column of a segment's rows is built; a scan calls only its columns'."""


def error_batch(
    universe: str,
    world: str,
    start: int,
    end: int,
    message: str,
    columns: Sequence[str],
    segment_bytes: int | None = None,
) -> pa.RecordBatch:
    """The row standing for heights ``start..end`` that could not be read: where they are
    (in ``segment_start``/``segment_end``) and why, the entry columns null."""
    known: dict[str, Any] = {
        "universe": universe,
        "world": world,
        "segment_start": start,
        "segment_end": end,
        "segment_bytes": segment_bytes,
        "error": message,
    }
    return pa.RecordBatch.from_arrays(
        [pa.array([known.get(name)], ARROW_TYPES[name]) for name in columns],
        schema=arrow_schema(columns),
    )


_stores: dict[tuple[str, tuple[tuple[str, str], ...]], ObjectStore] = {}
_stores_lock = threading.Lock()


def object_store_of(url: str, credentials: tuple[tuple[str, str], ...]) -> ObjectStore:
    """One object store per URL and process (Spark reuses Python workers across tasks)."""
    from backends.objects import open_object_store

    with _stores_lock:
        key = (url, credentials)
        if key not in _stores:
            _stores[key] = open_object_store(
                url, credentials=dict(credentials) or None, create=False
            )
        return _stores[key]
