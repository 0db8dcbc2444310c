"""Spark jobs over a plane: the replay check (restore equals full replay, per world, in
parallel tasks), its continuous form (a world checked each time it journals a new
baseline, from the ``aos_journal`` stream) and analytics of cold history (per world and
record kind)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from persistence.ids import UniverseId, WorldId
from persistence.kernel import load_kernel
from persistence.plane import Plane
from segments import open_plane
from segments.restore import REPLAY_CHECK_COLUMNS, check_replay

DEFAULT_KERNEL: Final = "persistence.kernel:ReferenceKernel"
REPLAY_SCHEMA: Final = ", ".join(f"{name} {kind}" for name, kind in REPLAY_CHECK_COLUMNS)
"""One row per world, the columns ``aosp restore verify`` reports too
(``segments.restore.REPLAY_CHECK_COLUMNS``)."""
ANALYTICS_COLUMNS: Final = (
    "universe,world,segment_start,segment_end,segment_bytes,height,kind,entry_size,error"
)
"""The ``aos_segments`` columns :func:`analytics` reads: every one but ``entry``."""


@dataclass(frozen=True, slots=True)
class Store:
    """Where a job's tasks find the plane: URLs only, so it pickles small."""

    kv: str
    objects: str
    credentials: tuple[tuple[str, str], ...] = ()

    def source_options(self) -> dict[str, str]:
        """Options of the ``aos_segments`` source reading this store's index."""
        return {"kv": self.kv, "objects": self.objects, **dict(self.credentials)}


def check_world(store: Store, kernel: str, universe: str, world: str) -> dict[str, Any]:
    """Full replay from genesis versus restore (baseline + segments + tail) of one world:
    a row of :data:`REPLAY_SCHEMA` (``segments.restore.check_replay``)."""
    u, w = UniverseId.parse(universe), WorldId.parse(world)
    plane = _open(store)
    try:
        return check_replay(plane, u, w, lambda: load_kernel(kernel))
    finally:
        _close(plane)


def replay_check(
    spark: Any,
    store: Store,
    *,
    kernel: str = DEFAULT_KERNEL,
    universes: list[str] | None = None,
    worlds: list[str] | None = None,
) -> Any:
    """A DataFrame with one row per world (see :data:`REPLAY_SCHEMA`). Worlds are listed on
    the driver and checked in parallel tasks, each opening the store by URL."""
    return check_worlds(spark, store, kernel, list_worlds(store, universes, worlds))


def check_worlds(spark: Any, store: Store, kernel: str, selected: list[tuple[str, str]]) -> Any:
    """:func:`check_world` of each ``(universe, world)``, in parallel tasks: a DataFrame of
    :data:`REPLAY_SCHEMA`."""
    if not selected:
        return spark.createDataFrame([], REPLAY_SCHEMA)
    slices = min(len(selected), spark.sparkContext.defaultParallelism * 4)
    columns = [c.split()[0] for c in REPLAY_SCHEMA.split(", ")]

    def check(pair: tuple[str, str]) -> tuple[Any, ...]:
        row = check_world(store, kernel, *pair)
        return tuple(row.get(c) for c in columns)

    results = spark.sparkContext.parallelize(selected, slices).map(check)
    return spark.createDataFrame(results, REPLAY_SCHEMA)


BASELINE_KIND: Final = "baseline_snapshot"
"""The kind of the journal record a promotion writes (what the continuous check follows)."""


def follow_replay_check(
    spark: Any,
    store: Store,
    *,
    output: str,
    checkpoint: str,
    kernel: str = DEFAULT_KERNEL,
    once: bool = False,
    trigger_seconds: float = 1.0,
    universes: list[str] | None = None,
    worlds: list[str] | None = None,
    on_batch: Callable[[int, list[dict[str, Any]]], None] | None = None,
) -> Any:
    """The replay check as a streaming query (returned started): it follows the
    ``aos_journal`` stream of baseline records, and each micro-batch checks the worlds
    that journaled a new baseline (or whose journal could not be read: an error row)
    with :func:`check_world`, writing their rows, with ``batch_id``, as Parquet to
    ``<output>/batch=<id>`` (overwritten if Spark runs the batch again after a restart,
    so each baseline's check is in the output once). ``once``: check the baselines there
    are now, then stop (Trigger.AvailableNow). ``on_batch(batch_id, rows)`` is called on
    the driver after each batch with rows (a report, say)."""
    options = {
        **store.source_options(),
        "kind": BASELINE_KIND,
        "columns": "universe,world,height,error",
        "on_corrupt": "skip",  # an unreadable range is an error row: its world is checked
        **({"universe": ",".join(universes)} if universes else {}),
        **({"world": ",".join(worlds)} if worlds else {}),
    }

    def check_batch(batch: Any, batch_id: int) -> None:
        pairs = sorted({(r.universe, r.world) for r in batch.select("universe", "world").collect()})
        if not pairs:
            return
        from pyspark.sql import functions as F

        rows = check_worlds(spark, store, kernel, pairs).withColumn("batch_id", F.lit(batch_id))
        target = f"{output}/batch={batch_id:06d}"
        rows.write.mode("overwrite").parquet(target)
        if on_batch is not None:
            on_batch(batch_id, [r.asDict() for r in spark.read.parquet(target).collect()])

    writer = (
        spark.readStream.format("aos_journal")
        .options(**options)
        .load()
        .writeStream.foreachBatch(check_batch)
        .option("checkpointLocation", checkpoint)
        .queryName("aosp-replay-follow")
    )
    trigger = {"availableNow": True} if once else {"processingTime": f"{trigger_seconds} seconds"}
    return writer.trigger(**trigger).start()


def list_worlds(
    store: Store, universes: list[str] | None, worlds: list[str] | None
) -> list[tuple[str, str]]:
    """``(universe, world)`` pairs of the store, filtered (both filters optional)."""
    plane = _open(store)
    try:
        chosen = [UniverseId.parse(u) for u in universes] if universes else list(plane.universes())
        wanted = {str(WorldId.parse(w)) for w in worlds or []}
        return [
            (str(u), str(w))
            for u in chosen
            for w in plane.worlds(u)
            if not wanted or str(w) in wanted
        ]
    finally:
        _close(plane)


def _open(store: Store) -> Plane:
    """The plane of ``store``, opening only what exists: a job reads, so a mistyped URL is
    ``NotFound`` rather than a new, empty store created on the driver or an executor."""
    from backends.objects import open_object_store

    credentials = dict(store.credentials) or None
    objects = open_object_store(store.objects, credentials=credentials, create=False)
    try:
        return open_plane(store.kv, objects, create=False)
    except BaseException:
        objects.close()
        raise


def _close(plane: Plane) -> None:
    try:
        plane.engine.close()
    finally:
        plane.objects.close()


def analytics(spark: Any, store: Store, **source_options: str) -> tuple[Any, Any]:
    """Two DataFrames over the cold segments: per (universe, world, kind) counts, bytes and
    height ranges; and per world the segment count and sizes. Rows of skipped (corrupt)
    segments, when ``on_corrupt=skip``, are left out of both. The entries themselves are
    never built (the source produces only :data:`ANALYTICS_COLUMNS`)."""
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("aos_segments")
        .options(**store.source_options(), columns=ANALYTICS_COLUMNS, **source_options)
        .load()
        .where(F.col("error").isNull())
    )
    by_kind = (
        rows.groupBy("universe", "world", "kind")
        .agg(
            F.count("*").alias("entries"),
            F.sum("entry_size").alias("bytes"),
            F.min("height").alias("min_height"),
            F.max("height").alias("max_height"),
            F.countDistinct("segment_start").alias("segments"),
        )
        .orderBy("universe", "world", "kind")
    )
    segments = (
        rows.select("universe", "world", "segment_start", "segment_end", "segment_bytes")
        .distinct()
        .groupBy("universe", "world")
        .agg(
            F.count("*").alias("segments"),
            F.sum("segment_bytes").alias("segment_bytes"),
            F.min("segment_bytes").alias("smallest_segment"),
            F.max("segment_bytes").alias("largest_segment"),
            F.max("segment_end").alias("cold_through"),
        )
        .orderBy("universe", "world")
    )
    return by_kind, segments
