"""The ``aos_journal`` data source: each world's whole journal, read as a batch table
(:class:`~spark_connectors.journal.JournalScan`) or followed as a stream
(:class:`~spark_connectors.stream.JournalStream`). Register it with
``spark.dataSource.register(JournalDataSource)`` (``spark_session()`` does)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from spark_connectors.journal import NAME, JournalScan, parse
from spark_connectors.source import schema_of
from spark_connectors.stream import STREAM_OPTIONS, JournalStream


class JournalDataSource(DataSource):
    """``spark.read.format("aos_journal")`` and ``spark.readStream.format("aos_journal")``."""

    @classmethod
    def name(cls) -> str:
        """The short name used with ``spark.read.format`` and ``spark.readStream.format``."""
        return NAME

    def schema(self) -> StructType:
        """The columns the ``columns`` option names, else every column of
        :data:`~spark_connectors.source.SCHEMA`."""
        batch = {k: v for k, v in self.options.items() if k.lower() not in STREAM_OPTIONS}
        return schema_of(parse(batch).columns)

    def reader(self, schema: StructType) -> JournalScan:
        """A batch reader producing ``schema``'s columns."""
        return JournalScan(parse(self.options, schema))

    def streamReader(self, schema: StructType) -> JournalStream:
        """A stream reader producing ``schema``'s columns."""
        return JournalStream(self.options, schema)
