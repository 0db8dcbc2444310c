"""Stand-in Spark sources that bound ``aos_journal``'s figures (``aosp bench spark-journal``).

Each reads the rows an ``aos_journal`` scan of the same store reads, in the same input
partitions (the journal source's own plan), and does less work per row:

* ``aos_bench_sqlite`` (:class:`SqliteFloor`): the hot tail with ``sqlite3`` alone -- one
  statement a batch, each value's 4-byte seal cut off in Arrow; no checksum, no check that
  a height is there, no plane -- and the segments as ``aos_journal`` reads them. What a
  Python source reading this SQLite file can reach at best.
* ``aos_bench_prebuilt`` (:class:`Prebuilt`): no store at all. Each batch is a slice of one
  Arrow batch of 1 KiB entries built once per Python worker, with the planned heights: what
  Spark itself costs to take the rows from Python workers. As a stream
  (``spark.readStream``), the same batches in micro-batches of ``max_entries_per_batch``
  rows: what Spark costs to run a Python stream.

Only the benchmark's own store is read (an ``sqlite://`` engine URL); none of this is a data
source for users.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from persistence.ids import UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.protocols.checksums import SEAL_BYTES
from spark_connectors.journal import (
    HotRange,
    JournalPartition,
    parse,
    partitions_of,
    plan_journal,
    plane_of,
)
from spark_connectors.source import ScanOptions, object_store_of, read_segment

SCHEMA: Final = "height long, entry binary"
ENTRY_BYTES: Final = 1_024
SQL: Final = "SELECT value FROM kv WHERE key >= ? AND key < ? ORDER BY key"


def _planned(options: ScanOptions) -> list[JournalPartition]:
    """The input partitions of an ``aos_journal`` scan of the same store."""
    plane = plane_of(options)
    return partitions_of(plan_journal(plane, options.selection, options.hot_entries), options)


def _heights(start: int, count: int) -> pa.Array:
    return pa.array(range(start, start + count), pa.int64())


class SqliteFloor(DataSource):
    """``aos_bench_sqlite``: the journal's rows, the hot tail read with ``sqlite3`` alone."""

    @classmethod
    def name(cls) -> str:
        return "aos_bench_sqlite"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _SqliteScan(parse(self.options, schema))


class _SqliteScan(DataSourceReader):
    def __init__(self, options: ScanOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return _planned(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, JournalPartition)
        options = self.options
        kv = options.kv or ""
        if not kv.startswith("sqlite://"):
            raise ValueError(f"aos_bench_sqlite reads an sqlite:// store, not {kv!r}")
        conn = sqlite3.connect(f"file:{kv.removeprefix('sqlite://')}?mode=ro", uri=True)
        try:
            for ref in partition.refs:
                if not isinstance(ref, HotRange):
                    objects = object_store_of(options.objects, options.credentials)
                    yield from read_segment(objects, ref.ref, options, (ref.start, ref.end))
                    continue
                keys = WorldKeys(UniverseId.parse(ref.universe), WorldId.parse(ref.world))
                for first in range(ref.start, ref.end + 1, options.batch_rows):
                    last = min(ref.end, first + options.batch_rows - 1)
                    values = [v for (v,) in conn.execute(SQL, keys.entries_between(first, last))]
                    entries = pc.binary_slice(pa.array(values, pa.binary()), 0, -SEAL_BYTES)
                    yield pa.RecordBatch.from_arrays(
                        [_heights(first, len(values)), entries], names=["height", "entry"]
                    )
        finally:
            conn.close()


_template: list[pa.Array] = []


def _entries(count: int, rows_per_batch: int) -> pa.Array:
    """``count`` (at most ``rows_per_batch``) entries of :data:`ENTRY_BYTES`, sliced from
    one array built once per process."""
    if not _template or len(_template[0]) < rows_per_batch:
        _template[:] = [
            pa.array([os.urandom(ENTRY_BYTES) for _ in range(rows_per_batch)], pa.binary())
        ]
    return _template[0].slice(0, count)


def _prebuilt(ranges: Sequence[tuple[int, int]], batch_rows: int) -> Iterator[pa.RecordBatch]:
    for start, end in ranges:
        for first in range(start, end + 1, batch_rows):
            count = min(batch_rows, end - first + 1)
            yield pa.RecordBatch.from_arrays(
                [_heights(first, count), _entries(count, batch_rows)], names=["height", "entry"]
            )


class Prebuilt(DataSource):
    """``aos_bench_prebuilt``: rows with the journal's heights and prebuilt entries."""

    @classmethod
    def name(cls) -> str:
        return "aos_bench_prebuilt"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return _PrebuiltScan(parse(self.options, schema))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        options = dict(self.options)
        limit = int(options.pop("max_entries_per_batch"))
        return _PrebuiltStream(parse(options, schema), limit)


class _PrebuiltScan(DataSourceReader):
    def __init__(self, options: ScanOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return [
            InputPartition([(ref.start, ref.end) for ref in partition.refs])
            for partition in _planned(self.options)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _prebuilt(partition.value, self.options.batch_rows)


class _PrebuiltStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets count rows; the rows are the scan's, in its plan's order, ``limit`` a
    micro-batch, each micro-batch in ``min_partitions`` partitions."""

    def __init__(self, options: ScanOptions, limit: int) -> None:
        self.options, self.limit = options, limit
        ranges = [(ref.start, ref.end) for p in _planned(options) for ref in p.refs]
        self.ranges = ranges
        self.total = sum(end - start + 1 for start, end in ranges)

    def initialOffset(self) -> dict[str, int]:
        return {"rows": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """The rows are fixed: nothing to pin."""

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"rows": min(self.total, start["rows"] + self.limit)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """Rows ``start..end`` of the plan's order, cut in ``min_partitions`` parts."""
        picked: list[tuple[int, int]] = []
        skip, want = start["rows"], end["rows"] - start["rows"]
        for first, last in self.ranges:
            count = last - first + 1
            if skip >= count:
                skip -= count
                continue
            take = min(count - skip, want)
            if take <= 0:
                break
            picked.append((first + skip, first + skip + take - 1))
            skip, want = 0, want - take
        parts = max(1, self.options.min_partitions)
        share = -(-len(picked) // parts)
        return [InputPartition(picked[i : i + share]) for i in range(0, len(picked), share)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _prebuilt(partition.value, self.options.batch_rows)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release."""
