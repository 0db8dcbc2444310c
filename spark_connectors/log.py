"""``aos_log``: each universe's log -- the journal entries appended with a log position
(``Plane.append_sequenced``: eventsourcing's notifications) -- as one table in position
order, and followed as an exactly-once stream.

Usage::

    df = (spark.read.format("aos_log")            # or spark.readStream.format("aos_log")
          .option("kv", "fdb:///etc/foundationdb/fdb.cluster")
          .option("objects", "s3://bucket/prefix?endpoint_url=...")
          .load())

Columns: ``universe`` (string), ``position`` (long, from 1, without gaps), ``world``
(string), ``height`` (long), ``tag`` (string), ``entry`` (binary: the journal entry at that
world's height, read through cold segments when it has been exported).

============================  ============================================================
``kv``, ``objects``           the store (required both: the log is read from the engine,
                              entries exported since from their segments)
``aws_*``                     credentials of the object store, as ``aos_segments`` takes
``universe``                  comma-separated universe ids (default: every universe)
``tag``                       comma-separated tags: only entries with one of them
``min_position``              the lowest position read (default 1)
``max_position``              the highest position read (default: each log's head)
``log_entries``               the most positions one input partition reads (16,384)
``min_partitions``            a scan is cut into at least this many partitions (2)
``batch_rows``                positions read per transaction and Arrow batch (8,192)
``max_entries_per_batch``     stream only: the most positions one micro-batch admits,
                              shared fairly between universes (Spark's ``ReadMaxRows``);
                              ``max_bytes_per_batch`` is refused
``starting``                  stream only: ``earliest`` (default) or ``latest``
============================  ============================================================

Positions follow commit order without gaps and never change, so a scan planned up to each
log's head at planning reads exactly those positions; a stream's offsets are each
universe's position read through (``{"version": 1, "universes": {"<universe>": 123}}``),
with the restart rules of :mod:`spark_connectors.stream`: with an idempotent sink, every
position is delivered once. A position the log cannot give (a damaged record, a missing
entry) fails the task: the log has no skip mode.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from persistence.errors import Corruption, Validation
from persistence.ids import UniverseId
from persistence.plane import Plane
from persistence.sizes import MAX_ROW_LIMIT, check_text
from spark_connectors.journal import DEFAULT_MIN_PARTITIONS, plane_of
from spark_connectors.source import (
    CREDENTIALS,
    DEFAULT_BATCH_ROWS,
    height_option,
    ids_option,
    positive_option,
)
from spark_connectors.stream import STREAM_OPTIONS, UNIVERSES, HeadStream, Heights, Ranges

NAME: Final = "aos_log"
DEFAULT_LOG_ENTRIES: Final = 16_384
SCHEMA: Final = StructType(
    [
        StructField("universe", StringType(), nullable=False),
        StructField("position", LongType(), nullable=False),
        StructField("world", StringType(), nullable=False),
        StructField("height", LongType(), nullable=False),
        StructField("tag", StringType(), nullable=False),
        StructField("entry", BinaryType(), nullable=False),
    ]
)
ARROW_TYPES: Final = {
    "universe": pa.string(),
    "position": pa.int64(),
    "world": pa.string(),
    "height": pa.int64(),
    "tag": pa.string(),
    "entry": pa.binary(),
}

ARROW_SCHEMA: Final = pa.schema(
    [pa.field(f.name, ARROW_TYPES[f.name], nullable=False) for f in SCHEMA.fields]
)
""":data:`SCHEMA` as the Arrow batches of ``read`` carry it."""


@dataclass(frozen=True, slots=True)
class LogOptions:
    """The parsed options of an ``aos_log`` scan: small and picklable."""

    kv: str
    objects: str
    credentials: tuple[tuple[str, str], ...]
    universes: frozenset[str]
    """Universe ids to read (empty: every universe)."""
    tags: frozenset[str] | None
    min_position: int
    max_position: int | None
    log_entries: int
    min_partitions: int
    batch_rows: int

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType | None = None) -> LogOptions:
        """Validate the options (:data:`STREAM_OPTIONS` excluded) and ``schema`` (only
        :data:`SCHEMA`); a bad one is ``Validation`` naming it."""
        known = {
            "kv", "objects", "universe", "tag", "min_position", "max_position",
            "log_entries", "min_partitions", "batch_rows", *CREDENTIALS,
        }  # fmt: skip
        unknown = {k for k in options if k.lower() not in known}
        if unknown:
            raise Validation(NAME, f"unknown option(s) {sorted(unknown)}")
        for required in ("kv", "objects"):
            if not options.get(required):
                raise Validation(f"{NAME}.{required}", "the store's URL is required")
        if schema is not None and schema != SCHEMA:
            raise Validation(f"{NAME}.schema", f"the source's own ({SCHEMA.simpleString()})")
        low = height_option(options, "min_position", NAME) or 1
        high = height_option(options, "max_position", NAME)
        if high is not None and low > high:
            raise Validation(f"{NAME}.min_position", f"at most max_position ({high}), not {low}")
        return cls(
            kv=options["kv"],
            objects=options["objects"],
            credentials=tuple((k, options[k]) for k in CREDENTIALS if options.get(k)),
            universes=ids_option(options.get("universe"), UniverseId.parse, f"{NAME}.universe"),
            tags=_tags(options.get("tag")),
            min_position=low,
            max_position=high,
            log_entries=positive_option(options, "log_entries", DEFAULT_LOG_ENTRIES, NAME),
            min_partitions=positive_option(options, "min_partitions", DEFAULT_MIN_PARTITIONS, NAME),
            batch_rows=min(
                MAX_ROW_LIMIT, positive_option(options, "batch_rows", DEFAULT_BATCH_ROWS, NAME)
            ),
        )


def _tags(raw: str | None) -> frozenset[str] | None:
    if raw is None:
        return None
    tags = frozenset(check_text(part.strip(), f"{NAME}.tag") for part in raw.split(","))
    if not all(tags):
        raise Validation(f"{NAME}.tag", f"comma-separated tags, none empty, not {raw!r}")
    return tags


def heads(plane: Plane, options: LogOptions) -> Heights:
    """Each selected universe's log head now, capped at ``max_position`` (a selected
    universe that does not exist has none: nothing to read)."""
    chosen = sorted(options.universes) or [str(u) for u in plane.universes()]
    cap = options.max_position
    out: Heights = {}
    for universe in chosen:
        head = plane.log_head(UniverseId.parse(universe))
        out[universe] = head if cap is None else min(head, cap)
    return out


@dataclass(frozen=True, slots=True)
class LogRange:
    """Positions ``first..last`` of one universe's log."""

    universe: str
    first: int
    last: int


class LogPartition(InputPartition):
    """One input partition: one range of one universe's log."""

    def __init__(self, ref: LogRange) -> None:
        super().__init__(ref)
        self.ref = ref


def plan(ranges: Ranges, options: LogOptions) -> list[LogPartition]:
    """``ranges`` (positions by universe) cut into partitions of at most ``log_entries``
    positions, and smaller when that makes at least ``min_partitions`` of them."""
    total = sum(last - first + 1 for first, last in ranges.values())
    size = max(1, min(options.log_entries, -(-total // options.min_partitions)))
    return [
        LogPartition(LogRange(universe, start, min(last, start + size - 1)))
        for universe, (first, last) in sorted(ranges.items())
        for start in range(first, last + 1, size)
    ]


def read(partition: InputPartition, options: LogOptions) -> Iterator[pa.RecordBatch]:
    """The rows of the partition's positions, ``batch_rows`` positions per transaction and
    batch. Without a tag filter every position must come back: one missing is
    ``Corruption`` (positions below a head have no gaps)."""
    assert isinstance(partition, LogPartition)
    ref, plane = partition.ref, plane_of(options)
    universe = UniverseId.parse(ref.universe)
    position = ref.first
    while position <= ref.last:
        last = min(ref.last, position + options.batch_rows - 1)
        entries = plane.read_log(
            universe, position, last - position + 1, last=last, tags=options.tags
        )
        if options.tags is None and len(entries) != last - position + 1:
            raise Corruption(
                f"universe {universe}: log positions {position}-{last} were planned below "
                f"its head, the log gave {len(entries)} of them"
            )
        count = len(entries)
        yield pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(ref.universe, pa.string()), count),
                pa.array([e.position for e in entries], pa.int64()),
                pa.array([str(e.world) for e in entries], pa.string()),
                pa.array([e.height for e in entries], pa.int64()),
                pa.array([e.tag for e in entries], pa.string()),
                pa.array([e.entry for e in entries], pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        position = last + 1


class LogScan(DataSourceReader):
    """Plans on the driver (each log's head) and reads position ranges in tasks."""

    def __init__(self, options: LogOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[LogPartition]:
        """Each selected log from ``min_position`` to its head (or ``max_position``)."""
        low = self.options.min_position
        found = heads(plane_of(self.options), self.options)
        ranges = {u: (low, head) for u, head in found.items() if head >= low}
        return plan(ranges, self.options) if ranges else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows (:func:`read`)."""
        return read(partition, self.options)


class LogStream(HeadStream):
    """``aos_log`` as a stream: offsets are each universe log's position read through."""

    cursor = UNIVERSES

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        super().__init__(options, NAME)
        if self.max_bytes is not None:
            raise Validation(
                f"{NAME}.max_bytes_per_batch",
                "not offered by aos_log: a position's entry lives in its world's journal, "
                "so sizing a batch would read it there first; use max_entries_per_batch",
            )
        rest = {k: v for k, v in options.items() if k.lower() not in STREAM_OPTIONS}
        self.options = LogOptions.parse(rest, schema)

    def heads(self) -> Heights:
        """Each selected universe's log head now (capped at ``max_position``)."""
        return heads(plane_of(self.options), self.options)

    @property
    def floor(self) -> int:
        """``min_position - 1``: the position every log is read through at the start."""
        return self.options.min_position - 1

    def plan(self, ranges: Ranges) -> Sequence[LogPartition]:
        """The ranges cut as the batch scan cuts them."""
        return plan(ranges, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows, as the batch scan reads them."""
        return read(partition, self.options)


class LogDataSource(DataSource):
    """``spark.read.format("aos_log")`` and ``spark.readStream.format("aos_log")``."""

    @classmethod
    def name(cls) -> str:
        """The short name used with ``spark.read.format`` and ``spark.readStream.format``."""
        return NAME

    def schema(self) -> StructType:
        """The source's columns (:data:`SCHEMA`)."""
        return SCHEMA

    def reader(self, schema: StructType) -> LogScan:
        """A batch reader of the log."""
        batch = {k: v for k, v in self.options.items() if k.lower() not in STREAM_OPTIONS}
        return LogScan(LogOptions.parse(batch, schema))

    def streamReader(self, schema: StructType) -> LogStream:
        """A stream reader of the log."""
        return LogStream(self.options, schema)
