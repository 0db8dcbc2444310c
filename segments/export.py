"""Protocol F: export old journal ranges to immutable segment objects, then delete hot keys.

Safety rules (source specification section 7):

* only heights strictly older than the active baseline minus ``margin`` are exported
  (``end < baseline.height - margin``) -- or at or below the world's cold horizon, which its
  owner sets when it needs no baseline (``Plane.set_cold_horizon``) --, never past the head;
* a segment is uploaded (create-only) and indexed **before** any hot key of its range is
  deleted, and the hot keys are deleted from the lowest height up: a read finds each height
  hot, or cold in an indexed segment, at every moment (reads take a hot key while it is
  there and sound, the segment once it is gone: ``protocols/journal.py``'s
  ``read_entries``);
* every step is recorded in a durable marker, so a crash anywhere resumes and converges.

Marker states, as Kafka tiered storage's segment states::

    copy_started    range [start, end_max] chosen; the object may or may not exist yet
    copy_finished   object uploaded and verified, index record committed (same transaction)
    delete_started  hot keys of [start, end] being deleted, ``deleted_through`` advances
    delete_finished all hot keys gone; the next run clears the marker

Each transition is its own small transaction (``persistence/protocols/export.py``: the
marker, the plan and the indexing step) that reads only the marker and the index, so
exports never conflict with foreground appends and drains (which touch the head and new
heights). Hot keys are deleted with range clears of at most ``delete_chunk_entries``
heights per transaction, well inside FoundationDB's limits. On an engine whose writers
serialize (SQLite: ``Engine.writers_serialize``) each clear also stays under
``delete_chunk_bytes`` of entries (SQLite frees every page it clears, holding the write lock
meanwhile), and the exporter pauses after each one ``pause_ratio`` times as long as it took:
it then holds the write lock at most ``1 / (1 + pause_ratio)`` of the time it deletes, and a
foreground append waits for one short clear at most (docs/benchmarks.md, export under load).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import BinaryIO, Final, cast

from persistence.errors import NotFound, SegmentCorruption, SegmentMissing, Validation
from persistence.futures import drive
from persistence.ids import MAX_HEIGHT, UniverseId, WorldId
from persistence.keyspace import WorldKeys
from persistence.objects import ReadStream
from persistence.plane import Plane
from persistence.protocols import export
from persistence.segment_records import ExportMarker, SegmentIndexRecord
from persistence.sizes import MAX_ROW_LIMIT, KiB, MiB, check_bool, check_int
from persistence.telemetry import traced
from segments.format import CHECKSUM_ALGORITHM, SegmentHeader, SegmentReader, SegmentWriter
from segments.format import segment_key as _segment_key
from segments.inputs import require, require_callable, require_ids

MAX_PAUSE_RATIO: Final = 100.0
"""The largest ``ExportConfig.pause_ratio``: an exporter holding the write lock 1% of the time."""
RACE_ATTEMPTS: Final = 10
"""Times an export step starts again after another exporter moved the marker first."""


@dataclass(frozen=True, slots=True)
class ExportConfig:
    """When and how much to export. Export is off unless ``enabled``."""

    enabled: bool = False
    margin: int = 0
    target_entries: int = 10_000
    target_bytes: int = 64 * MiB
    min_entries: int = 1
    delete_chunk_entries: int = 2_000
    read_page_entries: int = 2_000
    delete_chunk_bytes: int = 64 * KiB
    """Where writers serialize: entry bytes one hot-key clear may free (estimated from the
    segment's size per entry)."""
    pause_ratio: float = 4.0
    """Where writers serialize: the pause after each hot-key clear, in multiples of the
    time the clear took (0: none)."""

    def __post_init__(self) -> None:
        check_bool(self.enabled, "ExportConfig.enabled")
        check_int(self.margin, "ExportConfig.margin", 0, MAX_HEIGHT)
        check_int(self.target_bytes, "ExportConfig.target_bytes", 1, 2**63 - 1)
        check_int(self.delete_chunk_bytes, "ExportConfig.delete_chunk_bytes", 1, 2**63 - 1)
        if (
            isinstance(self.pause_ratio, bool)
            or not isinstance(self.pause_ratio, int | float)
            or not (math.isfinite(self.pause_ratio) and 0 <= self.pause_ratio <= MAX_PAUSE_RATIO)
        ):
            raise Validation(
                "ExportConfig.pause_ratio",
                f"a number from 0 to {MAX_PAUSE_RATIO:g}, not {self.pause_ratio!r}",
            )
        for name in ("target_entries", "min_entries", "delete_chunk_entries", "read_page_entries"):
            check_int(getattr(self, name), f"ExportConfig.{name}", 1, MAX_ROW_LIMIT)


def segment_prefix(universe: UniverseId, world: WorldId, start: int) -> str:
    """Object keys of segments of ``world`` starting at ``start``."""
    return _segment_key(universe, world, start, 1).rsplit("-", 1)[0] + "-"


class _Chunks:
    """Where a :class:`SegmentWriter` writes: a queue of byte runs for :class:`_SegmentStream`."""

    def __init__(self) -> None:
        self.queue: deque[bytes | bytearray] = deque()

    def write(self, data: bytes | bytearray) -> int:
        self.queue.append(data)
        return len(data)


class _SegmentStream(ReadStream):
    """The bytes of one segment, made as they are read.

    The object store's reads drive a :class:`SegmentWriter`, so the segment is neither
    spooled nor written twice, and memory stays bounded by the entries (already held) plus
    one write buffer. ``checksum`` and ``size`` are set once the stream
    has been read to its end; ``produced`` counts the bytes handed out so far."""

    def __init__(self, header: SegmentHeader, entries: list[tuple[int, bytes]]) -> None:
        super().__init__()
        self._chunks = _Chunks()
        self._writer = SegmentWriter(cast(BinaryIO, self._chunks), header)
        self._entries = iter(entries)
        self._current = memoryview(b"")
        self.checksum: bytes | None = None
        self.size = 0
        self.produced = 0

    def _next_run(self) -> bool:
        """Make ``_current`` the next run of bytes; ``False`` at the end of the segment."""
        queue = self._chunks.queue
        while not queue:
            if self.checksum is not None:
                return False
            for height, entry in self._entries:
                self._writer.add(height, entry)
                if queue:
                    break
            else:
                self.checksum = self._writer.finish()
                self.size = self._writer.size
        self._current = memoryview(queue.popleft())
        return True

    def _read(self, n: int) -> bytes:
        if not self._current and not self._next_run():
            return b""
        data = bytes(self._current[:n])
        self._current = self._current[len(data) :]
        self.produced += len(data)
        return data


class Exporter:
    """Runs Protocol F for worlds of one plane."""

    def __init__(self, plane: Plane, config: ExportConfig) -> None:
        self.plane = require(plane, Plane, "plane")
        self.config = require(config, ExportConfig, "config")

    def plan(self, universe: UniverseId, world: WorldId) -> export.ExportPlan | None:
        """The next exportable range, or ``None``."""
        require_ids(universe, world)
        return drive(
            export.plan(
                self.plane.engine,
                WorldKeys(universe, world),
                self.config.margin,
                self.config.min_entries,
                self.config.target_entries,
            )
        )

    def export_all(
        self,
        universe: UniverseId,
        world: WorldId,
        progress: Callable[[str], None] = lambda _: None,
    ) -> list[SegmentIndexRecord]:
        """Finish any interrupted export, then export every safe range; return the new
        segments. Raises ``Validation`` if export is disabled."""
        require_ids(universe, world)
        require_callable(progress, "progress")
        done = []
        while (record := self.export_once(universe, world, progress)) is not None:
            done.append(record)
        return done

    @traced("segments.export")
    def export_once(
        self,
        universe: UniverseId,
        world: WorldId,
        progress: Callable[[str], None] = lambda _: None,
    ) -> SegmentIndexRecord | None:
        """Resume the in-flight export or start the next one; ``None`` if nothing to do.
        When another exporter moves the marker first, start again from where it left it."""
        require_ids(universe, world)
        require_callable(progress, "progress")
        if not self.config.enabled:
            raise Validation("export", "segment export is disabled (ExportConfig.enabled)")
        for _ in range(RACE_ATTEMPTS - 1):
            try:
                return self._step(universe, world, progress)
            except export.ExportRaced:
                continue
        return self._step(universe, world, progress)

    def _step(
        self, universe: UniverseId, world: WorldId, progress: Callable[[str], None]
    ) -> SegmentIndexRecord | None:
        engine = self.plane.engine
        keys = WorldKeys(universe, world)
        marker = drive(export.read_marker(engine, keys))
        if marker is None:
            plan = self.plan(universe, world)
            if plan is None:
                return None
            marker = ExportMarker(
                "copy_started", plan.start, plan.end, segment_prefix(universe, world, plan.start)
            )
            drive(export.transition(engine, keys, self.plane.new_call(), None, marker))
            self.plane.hooks.reached("export.after_copy_started")
        record: SegmentIndexRecord | None = None
        if marker.state == "copy_started" and self._covered(keys) >= marker.start:
            # a marker installed from a stale plan (before the check above existed): its
            # range is indexed already, by another exporter; drop it and plan again
            drive(export.transition(engine, keys, self.plane.new_call(), marker, None))
            raise export.ExportRaced(f"world {world}: marker from {marker.start} below the index")
        if marker.state == "copy_started":
            record = self._copy(universe, world, marker, progress)
            finished = ExportMarker(
                "copy_finished",
                record.start,
                record.end,
                record.object_key,
                record.checksum,
                record.byte_size,
            )
            drive(
                export.transition(
                    engine, keys, self.plane.new_call(), marker, finished, index=record
                )
            )
            self.plane.hooks.reached("export.after_index")
            marker = finished
        if marker.state == "copy_finished":
            started = replace(marker, state="delete_started", deleted_through=marker.start - 1)
            drive(export.transition(engine, keys, self.plane.new_call(), marker, started))
            marker = started
        if marker.state == "delete_started":
            marker = self._delete(keys, marker, progress)
        if marker.state == "delete_finished":
            drive(export.transition(engine, keys, self.plane.new_call(), marker, None))
        if record is None:
            record = self._indexed(universe, world, marker.end)
        progress(f"world {world}: segment {record.start}-{record.end} exported")
        return record

    def _covered(self, keys: WorldKeys) -> int:
        """The last height the world's segment index covers (0: none)."""
        last = drive(export.last_segment(self.plane.engine, keys))
        return 0 if last is None else last.end

    def _indexed(self, universe: UniverseId, world: WorldId, end: int) -> SegmentIndexRecord:
        for record in self.plane.list_segments(universe, world, end):
            if record.end == end:
                return record
        raise NotFound(f"world {world}: no segment indexed at end height {end}")

    # ------------------------------------------------------------ copy

    def _copy(
        self,
        universe: UniverseId,
        world: WorldId,
        marker: ExportMarker,
        progress: Callable[[str], None],
    ) -> SegmentIndexRecord:
        """Upload the segment of ``marker``'s range (or adopt one a crashed run uploaded)."""
        objects = self.plane.objects
        for info in objects.list(marker.object_key):
            return self._adopt(universe, world, info.key, marker)
        entries = self._collect(universe, world, marker)
        end = entries[-1][0]
        key = _segment_key(universe, world, marker.start, end)
        stream = _SegmentStream(SegmentHeader(universe, world, marker.start, end), entries)
        created = objects.put(key, cast(BinaryIO, stream))
        self.plane.hooks.reached("export.after_upload")
        if not created:
            return self._adopt(universe, world, key, marker)
        if stream.checksum is None:
            raise SegmentCorruption(
                key, stream.produced, "the object store stored the segment without reading it all"
            )
        progress(f"world {world}: uploaded {key} ({stream.size} bytes)")
        return SegmentIndexRecord(
            marker.start,
            end,
            key,
            CHECKSUM_ALGORITHM,
            stream.checksum,
            end - marker.start + 1,
            stream.size,
        )

    def _collect(
        self, universe: UniverseId, world: WorldId, marker: ExportMarker
    ) -> list[tuple[int, bytes]]:
        """Hot entries from ``marker.start``, at most to ``marker.end`` and the byte target
        (at least one entry)."""
        entries: list[tuple[int, bytes]] = []
        total = 0
        height = marker.start
        while height <= marker.end:
            page = min(self.config.read_page_entries, marker.end - height + 1)
            rows = self.plane.read_hot(universe, world, height, page)
            if not rows:
                raise NotFound(f"world {world}: hot entry {height} vanished during export")
            size = sum(len(entry) for _, entry in rows)
            if total + size < self.config.target_bytes:  # the whole page fits: no row ends it
                entries.extend(rows)
                total += size
                height = rows[-1][0] + 1
                continue
            for h, entry in rows:
                if entries and total + len(entry) > self.config.target_bytes:
                    return entries
                entries.append((h, entry))
                total += len(entry)
                if total >= self.config.target_bytes:
                    return entries
            height = rows[-1][0] + 1
        return entries

    def _adopt(
        self, universe: UniverseId, world: WorldId, key: str, marker: ExportMarker
    ) -> SegmentIndexRecord:
        """Verify an object a crashed run uploaded and describe it for the index."""
        with self.plane.objects.open(key) as stream:
            reader = SegmentReader(stream, key)
            header = reader.header
            if (
                header.universe != universe
                or header.world != world
                or header.start != marker.start
                or not header.end <= marker.end
                or key != _segment_key(universe, world, header.start, header.end)
            ):
                raise SegmentCorruption(key, 0, "found where an export expected its own segment")
            checksum = reader.verify()
        info = self.plane.objects.stat(key)
        if info is None:
            raise SegmentMissing(key)  # deleted between the read and the stat
        return SegmentIndexRecord(
            header.start, header.end, key, CHECKSUM_ALGORITHM, checksum, header.count, info.size
        )

    # ------------------------------------------------------------ delete

    def _delete(
        self, keys: WorldKeys, marker: ExportMarker, progress: Callable[[str], None]
    ) -> ExportMarker:
        engine = self.plane.engine
        chunk, pause = self.config.delete_chunk_entries, 0.0
        if engine.writers_serialize:
            entries, size = marker.end - marker.start + 1, marker.byte_size or 0
            chunk = max(1, min(chunk, self.config.delete_chunk_bytes * entries // max(size, 1)))
            pause = self.config.pause_ratio
        done = marker.start - 1 if marker.deleted_through is None else marker.deleted_through
        while done < marker.end:
            last = min(marker.end, done + chunk)
            advanced = replace(marker, deleted_through=last)
            start = time.monotonic()
            drive(
                export.transition(
                    engine,
                    keys,
                    self.plane.new_call(),
                    marker,
                    advanced,
                    clear=(done + 1, last),
                )
            )
            self.plane.hooks.reached("export.after_delete_chunk")
            marker, done = advanced, last
            if pause and done < marker.end:
                time.sleep(pause * (time.monotonic() - start))
        finished = replace(marker, state="delete_finished")
        drive(export.transition(engine, keys, self.plane.new_call(), marker, finished))
        self.plane.hooks.reached("export.after_delete")
        progress(f"world {keys.world}: hot keys {marker.start}-{marker.end} deleted")
        return finished
