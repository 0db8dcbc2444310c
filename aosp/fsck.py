"""``fsck``: a full, read-only integrity check of a store.

What is checked, per universe:

* **CAS** -- every metadata record decodes; an inline body hashes to its key and has the
  recorded size; an external body exists, has the recorded size and hashes to its key.
* **Segments** -- each index record of each world, on its own: it decodes, its key names its
  end height, it names the canonical object of its range with the ``blake3`` checksum, it
  continues the index from height 1 without gap or overlap and ends at or below the head;
  its object exists, its header names the world and range, its checksum verifies and it has
  the record's checksum and byte size. One finding per bad record, whatever is wrong.
* **Engine** -- the engine's own check of its storage: SQLite's ``quick_check`` (or
  ``integrity_check``), FoundationDB's status (the database available, no data missing).
* **Journal** -- every height from the end of segment coverage to the head is stored whole
  and, in a layout with checksums, passes its checksum (the entries of a layout-2 store,
  without them, are counted as such); no hot key remains below coverage unless an export
  is deleting them (its marker says so).
* **Snapshots** -- every indexed snapshot is at or below the head and its state and manifest
  are in the CAS; the active baseline is one of the indexed snapshots and its root is
  complete (every blob its manifest names is in the same universe's CAS).
* **Inbox** -- the cursor and every pending envelope decode; a world with items after its
  cursor has its ready mark (the drain workers' index).
* **Universe log** -- every record from position 1 to the head is there and decodes, none
  is above the head, each names a world whose journal reaches its height; every record
  queued for a position decodes and the queue's counter equals their number (records still
  queued are a warning: appends in flight, or a writer that stopped before settling);
  every tracking record decodes.
* **Objects** -- objects no CAS record or segment index names (and no export in flight) are
  *orphans*: garbage, not damage, so they are warnings.

Findings are ``error`` (data is damaged or missing) or ``warning`` (safe but worth a look).
Nothing is ever repaired: fsck only reads. It sits at the top of the stack (it reads
segments), so it imports the ``segments`` package inside functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from aosp.fsck_reads import (
    cas_page,
    first_key,
    inbox_page,
    log_queue,
    pending_unmarked,
    range_page,
    universe_exists,
    world_records,
)
from aosp.fsck_report import Finding, FsckReport, Severity
from persistence import fdbtuple, kv
from persistence.errors import (
    Backend,
    Corruption,
    CorruptRecord,
    DamagedJournalEntry,
    EngineError,
    MissingJournalEntry,
    NotFound,
    OddObject,
    PersistError,
    SegmentIndexCorruption,
    StoreFormatError,
    Validation,
    elide,
)
from persistence.futures import drive
from persistence.ids import MAX_HEIGHT, Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import (
    InboxCursor,
    InboxEnvelope,
    envelope_fingerprint,
    idempotency_entry,
)
from persistence.keyspace import UniverseKeys, WorldKeys, seq_in_key
from persistence.log_records import decode_log_record
from persistence.plane import Plane
from persistence.protocols import compaction, journal, log, worlds
from persistence.protocols.cas_bodies import doom_is_stale, object_key
from persistence.records import CasDoom, CasMeta, CasPin, SnapshotRecord, decode_record
from persistence.segment_records import ExportMarker
from persistence.sizes import check_bool

READ_CHUNK = 1024 * 1024
LOG_PAGE: Final = 10_000
"""Universe log records read per transaction."""
QUEUE_LIMIT: Final = 100_000
"""Records of the log's queue fsck reads (in one snapshot, with the counter it checks)."""
MAX_FINDINGS_PER_WORLD = 100
"""Past this many runs of missing journal heights in one world, fsck stops listing them
(the count says so)."""


@dataclass
class _Run:
    """A run of heights with one problem (missing, or failing their checksums), named by
    its first height's error."""

    first: int
    last: int
    why: str
    kind: type[Corruption]


def _add_run(runs: list[_Run], first: int, last: int, problem: Corruption) -> None:
    """Note heights ``first..last`` as ``problem``'s: a run of the same kind that ends just
    below joins them."""
    if runs and runs[-1].last == first - 1 and runs[-1].kind is type(problem):
        runs[-1].last = last
    else:
        runs.append(_Run(first, last, str(problem), type(problem)))


FUTURE_MARK_NS: Final = 60 * 10**9
"""A consumed mark dated this far after fsck's clock is reported (a compactor's clock ran
ahead)."""


class Fsck:
    """Checks one store; :meth:`run` returns the report. ``progress`` is called with a
    short note after each world and each CAS page."""

    def __init__(
        self,
        plane: Plane,
        progress: Callable[[str], None] | None = None,
        *,
        full_engine_check: bool = False,
    ) -> None:
        from segments.inputs import require

        self.plane = require(plane, Plane, "plane")
        if progress is not None and not callable(progress):
            raise Validation("progress", f"a callable, not {type(progress).__name__}")
        self.full_engine_check = check_bool(full_engine_check, "full_engine_check")
        """Run the engine's thorough check of its storage, not its quick one."""
        self.report = FsckReport()
        self._progress = progress or (lambda _note: None)
        self._referenced: set[str] = set()
        self._in_flight: set[str] = set()
        """Object-key prefixes of exports in flight (their uploads are not orphans)."""

    def run(self, universes: list[UniverseId] | None = None) -> FsckReport:
        """Check the engine's own storage (where the engine has such a check: SQLite's
        ``quick_check``, ``integrity_check`` with ``full_engine_check``), ``universes``
        (default: all), then the object store for orphans. A universe named that has
        nothing in the store (no world, no CAS body: a mistyped id) is ``NotFound``, raised
        before anything is checked: fsck never reports clean what it could not find."""
        from segments.inputs import require

        if universes is not None:
            for index, universe in enumerate(require(universes, list, "universes")):
                require(universe, UniverseId, f"universes[{index}]")
            for universe in universes:
                if not universe_exists(self.plane, universe):
                    raise NotFound(f"universe {universe}: nothing in the store belongs to it")
        damaged = self._check_engine()
        try:
            self._check_universes(universes)
        except Backend as exc:
            if not damaged:
                raise
            # The engine said its storage is damaged: what could not be read is part of it.
            self.report.findings.append(
                Finding("error", "engine", "", None, "reading", f"the checks stopped: {exc}")
            )
        return self.report

    def _check_universes(self, universes: list[UniverseId] | None) -> None:
        for universe in universes if universes is not None else list(self.plane.universes()):
            self.report.count("universes")
            self._check_cas(universe)
            self._check_handles(universe)
            for world in self.plane.worlds(universe):
                self._check_world(universe, world)
                self._progress(f"world {world}")
            self._check_log(universe)
            if universes is not None:
                self._check_orphans(f"cas/{universe}/")
                self._check_orphans(f"segments/{universe}/")
        if universes is None:
            self._check_orphans("")

    # ------------------------------------------------------------------ universe log

    def _check_log(self, universe: UniverseId) -> None:
        """The universe log's records (1 to the head, each naming a height its world's
        journal reaches), its queue and counter, and the tracking records."""
        keys = UniverseKeys(universe)
        try:
            head = self.plane.log_head(universe)
        except PersistError as exc:
            self._add("error", "log", universe, None, "head", str(exc))
            return
        reaches: dict[WorldId, int] = {}  # the highest height each world is named at
        position = 1
        begin, end = keys.log_range(1, MAX_HEIGHT)
        prefix = keys.log_prefix_len()
        while rows := drive(range_page(self.plane.engine, begin, end, LOG_PAGE)):
            for key, raw in rows:
                try:
                    at = fdbtuple.unpack(key, prefix)[0]
                except (ValueError, IndexError):
                    at = None
                if not isinstance(at, int) or at < position:
                    self._add("error", "log", universe, None, key.hex(), "not a log position")
                    continue
                if at > head:
                    self._add(
                        "error",
                        "log",
                        universe,
                        None,
                        f"position {at}",
                        (f"a record above the head {head}"),
                    )
                    continue
                if at > position:
                    self._add(
                        "error",
                        "log",
                        universe,
                        None,
                        f"positions {position}-{at - 1}",
                        f"missing below the head {head}",
                    )
                position = at + 1
                try:
                    record = decode_log_record(raw, f"universe log at {at}")
                except Corruption as exc:
                    self._add("error", "log", universe, None, f"position {at}", str(exc))
                    continue
                reaches[record.world] = max(reaches.get(record.world, 0), record.height)
                self.report.count("log records")
            begin = rows[-1][0] + b"\x00"
        if position <= head:
            self._add(
                "error",
                "log",
                universe,
                None,
                f"positions {position}-{head}",
                f"missing below the head {head}",
            )
        for world, height in sorted(reaches.items(), key=lambda item: str(item[0])):
            try:
                reached = self.plane.head(universe, world)
            except PersistError as exc:
                reached, why = 0, str(exc)
            else:
                why = f"its journal's head is {reached}"
            if height > reached:
                self._add(
                    "error", "log", universe, world, f"height {height}", f"the log names it: {why}"
                )
        self._check_log_queue(universe, keys)
        tracking_begin, tracking_end = keys.trackings()
        for key, raw in drive(range_page(self.plane.engine, tracking_begin, tracking_end, 10_000)):
            try:
                log.tracked_position(raw)
            except Corruption as exc:
                self._add("error", "log", universe, None, key.hex(), str(exc))
            else:
                self.report.count("tracking records")

    def _check_log_queue(self, universe: UniverseId, keys: UniverseKeys) -> None:
        """Records queued for a log position decode, and the counter is their number."""
        try:
            rows, counter_raw = drive(log_queue(self.plane.engine, keys, QUEUE_LIMIT + 1))
            counter = log.queued_count(counter_raw)
        except PersistError as exc:
            self._add("error", "log", universe, None, "queue", str(exc))
            return
        for key, raw in rows[:QUEUE_LIMIT]:
            try:
                decode_log_record(raw, "universe log queue record")
            except Corruption as exc:
                self._add("error", "log", universe, None, key.hex(), str(exc))
            else:
                self.report.count("queued log records")
        if len(rows) <= QUEUE_LIMIT and counter != len(rows):
            self._add(
                "error",
                "log",
                universe,
                None,
                "queue counter",
                (
                    f"counts {counter} queued records, the queue holds {len(rows)}: an inline "
                    "append would take positions ahead of queued records, or queue for ever"
                ),
            )
        if rows:
            self._add(
                "warning",
                "log",
                universe,
                None,
                "queue",
                (
                    f"{len(rows):,}{'+' if len(rows) > QUEUE_LIMIT else ''} records wait for a "
                    "position: appends in flight, or a writer that stopped between its append "
                    "and its settle (Plane.settle_log settles them)"
                ),
            )

    def _check_engine(self) -> bool:
        """The engine's check of its own storage (SQLite's ``quick_check`` or
        ``integrity_check``; FoundationDB's status): each problem it reports is an error
        finding (area ``engine``); an engine without one is not counted as checked. Whether
        it found damage."""
        check = "integrity_check" if self.full_engine_check else "quick_check"
        if self.plane.engine.url.startswith("fdb://"):
            check = "cluster status"
        try:
            problems = self.plane.engine.integrity_check(full=self.full_engine_check)
        except StoreFormatError as exc:
            problems = [str(exc)]
        except EngineError as exc:  # a cluster whose status cannot be read in time
            problems = [f"the engine's check could not run: {exc}"]
        if problems is None:
            return False
        self.report.count("engine storage checks")
        for problem in problems:
            self.report.findings.append(Finding("error", "engine", "", None, check, problem))
        return bool(problems)

    def _add(
        self,
        severity: Severity,
        area: str,
        universe: UniverseId,
        world: WorldId | None,
        subject: str,
        message: str,
    ) -> None:
        self.report.findings.append(
            Finding(
                severity,
                area,
                str(universe),
                None if world is None else str(world),
                subject,
                message,
            )
        )

    # ------------------------------------------------------------------ CAS

    def _check_cas(self, universe: UniverseId) -> None:
        keys = UniverseKeys(universe)
        prefix = len(keys.cas_meta_range()[0]) - 1
        begin = keys.cas_meta_range()[0]
        while rows := drive(cas_page(self.plane.engine, keys, begin, 1_000)):
            for key, raw in rows:
                self._check_blob(universe, key[prefix:], raw)
            begin = rows[-1][0] + b"\x00"
            bodies = self.report.checked.get("cas bodies", 0)
            self._progress(f"cas of {universe}: {bodies:,} {'body' if bodies == 1 else 'bodies'}")
        self._check_pins_and_dooms(universe, keys)

    def _check_handles(self, universe: UniverseId) -> None:
        """Each entry of the universe's index of handles names a world of the universe
        whose meta has that handle (else ``-w HANDLE`` would open another world, or none,
        and a creation with the handle be refused for a world that does not hold it)."""
        begin, end = UniverseKeys(universe).handles()
        prefix = len(begin) - 1
        while rows := drive(range_page(self.plane.engine, begin, end, 1_000)):
            for key, raw in rows:
                self.report.count("handles")
                try:
                    handle = fdbtuple.unpack(key, prefix)[0]
                    world = worlds.handle_world(raw)
                    meta = self.plane.world_meta(universe, world)
                except (ValueError, IndexError, PersistError) as exc:
                    if self._has_journal(universe, raw):
                        continue  # its world's missing or damaged meta is the world check's
                    self._add("error", "world", universe, None, f"handle {key.hex()}", str(exc))
                    continue
                if meta.handle != handle:
                    subject = f"handle {handle!r}"
                    self._add(
                        "error",
                        "world",
                        universe,
                        world,
                        elide(subject, 200),
                        f"the index names this world, whose handle is {meta.handle!r}",
                    )
            begin = rows[-1][0] + b"\x00"

    def _check_handle_indexed(self, universe: UniverseId, world: WorldId, handle: str) -> None:
        """A world's handle is in the index, naming it. A world of a store written before
        the index has no entry (counted: ``-w HANDLE`` finds it by reading metas); one whose
        entry names another world shares its handle with it (a warning: ``-w`` opens the
        other one)."""
        holder = self.plane.world_of_handle(universe, handle)
        if holder is None:
            self.report.count("handles not indexed (worlds created before the index)")
        elif holder != world:
            self._add(
                "warning",
                "world",
                universe,
                world,
                elide(f"handle {handle!r}", 200),
                f"world {holder} has this handle too (the index names that one: -w finds it)",
            )

    def _has_journal(self, universe: UniverseId, raw: bytes) -> bool:
        """Whether the world an index entry ``raw`` names has a journal head."""
        try:
            self.plane.head(universe, worlds.handle_world(raw))
        except PersistError:
            return False
        return True

    def _check_pins_and_dooms(self, universe: UniverseId, keys: UniverseKeys) -> None:
        """Bodies pinned by puts in flight are not orphans; a doom is a collection in
        progress or settling (counted), or past its lease one a crashed collector left
        (a warning: puts of the body wait)."""
        now = self.plane.clock()
        for name, (begin, end) in (("pin", keys.cas_pins()), ("doom", keys.cas_dooms())):
            prefix = len(begin) - 1
            while rows := drive(range_page(self.plane.engine, begin, end, 1_000)):
                for key, raw in rows:
                    self.report.count(f"cas {name}s")
                    try:
                        digest = fdbtuple.unpack(key, prefix)[0]
                        hash = Hash(digest)  # type: ignore[arg-type]
                        record = decode_record(CasPin if name == "pin" else CasDoom, raw, name)
                    except (ValueError, IndexError, PersistError) as exc:
                        self._add("error", "cas", universe, None, key.hex(), f"cas {name}: {exc}")
                        continue
                    if isinstance(record, CasPin):
                        self._in_flight.add(object_key(universe, hash))
                    elif (
                        isinstance(record, CasDoom)
                        and record.settled_ns is None
                        and doom_is_stale(record, now)
                    ):
                        self._add(
                            "warning",
                            "cas",
                            universe,
                            None,
                            hash.hex,
                            f"a collector doomed this body {(now - record.at_ns) / 1e9:.0f} s "
                            "ago and is gone (puts of the body wait until a pass of aosp "
                            "compact --orphans finishes it)",
                        )
                begin = rows[-1][0] + b"\x00"

    def _check_blob(self, universe: UniverseId, packed_hash: bytes, raw: bytes) -> None:
        from persistence.fdbtuple import unpack

        self.report.count("cas bodies")
        (digest,) = unpack(packed_hash)
        subject = digest.hex() if isinstance(digest, bytes) else repr(digest)
        try:
            meta = decode_record(CasMeta, raw, "cas meta")
        except CorruptRecord as exc:
            self._add("error", "cas", universe, None, subject, str(exc))
            return
        if meta.inline_bytes is not None:
            if hashlib.sha256(meta.inline_bytes).hexdigest() != subject:
                self._add("error", "cas", universe, None, subject, "inline body hash mismatch")
            return
        assert meta.object_key is not None
        self._referenced.add(meta.object_key)
        expected_key = object_key(universe, Hash(bytes.fromhex(subject)))
        if meta.object_key != expected_key:
            self._add(
                "error",
                "cas",
                universe,
                None,
                subject,
                f"object key {meta.object_key!r} is not the body's key {expected_key!r}",
            )
        digest_of, size = hashlib.sha256(), 0
        try:
            with self.plane.objects.open(meta.object_key) as stream:
                while chunk := stream.read(READ_CHUNK):
                    digest_of.update(chunk)
                    size += len(chunk)
        except NotFound:
            self._add("error", "cas", universe, None, subject, f"body {meta.object_key} missing")
            return
        except OddObject as exc:  # a symlink out of the root, a FIFO, ...
            self._add("error", "cas", universe, None, subject, f"body cannot be read: {exc}")
            return
        self.report.count("cas bytes read", size)
        if size != meta.size:
            self._add(
                "error",
                "cas",
                universe,
                None,
                subject,
                f"body {meta.object_key} is {size} bytes, metadata says {meta.size}",
            )
        elif digest_of.hexdigest() != subject:
            self._add(
                "error",
                "cas",
                universe,
                None,
                subject,
                f"body {meta.object_key} hashes to {digest_of.hexdigest()}",
            )

    # ------------------------------------------------------------------ worlds

    def _check_world(self, universe: UniverseId, world: WorldId) -> None:
        self.report.count("worlds")
        keys = WorldKeys(universe, world)
        try:
            head = self.plane.head(universe, world)
        except PersistError as exc:
            self._add("error", "journal", universe, world, "records", str(exc))
            return
        try:
            meta = drive(worlds.read_meta(self.plane.engine, keys))
        except PersistError as exc:  # absent (WorldNotFound) or damaged: the world won't open
            self._add("error", "world", universe, world, "meta", str(exc))
        else:
            if meta.handle is not None:
                self._check_handle_indexed(universe, world, meta.handle)
        try:
            snapshot_rows, marker_raw, cursor_raw = drive(world_records(self.plane.engine, keys))
            marker = (
                None
                if marker_raw is None
                else decode_record(ExportMarker, marker_raw, "export marker")
            )
        except PersistError as exc:
            self._add("error", "journal", universe, world, "records", str(exc))
            return
        if marker is not None:
            self._in_flight.add(marker.object_key)
            self._add(
                "warning",
                "segments",
                universe,
                world,
                marker.object_key,
                f"export in flight ({marker.state}, {marker.start}-{marker.end}): run export "
                "again to finish it",
            )
        covered = self._check_segments(universe, world, head)
        self._check_journal(keys, covered, head, marker)
        self._check_snapshots(universe, world, snapshot_rows, head)
        self._check_inbox(keys, cursor_raw)

    def _check_segments(self, universe: UniverseId, world: WorldId, head: int) -> int:
        """Check each index record and its object (one finding per bad record); return the
        end of segment coverage (the highest end a record claims)."""
        from segments.verify import check_segments

        covered = 0
        for check in check_segments(self.plane, universe, world, head):
            self.report.count("segments")
            if check.record is not None:
                self._referenced.add(check.record.object_key)
                covered = max(covered, check.record.end)
            if check.error is not None:
                self._add("error", "segments", universe, world, check.subject, str(check.error))
            self.report.count("segment bytes read", check.bytes_read)
        return covered

    def _check_journal(
        self, keys: WorldKeys, covered: int, head: int, marker: ExportMarker | None
    ) -> None:
        universe, world = keys.universe, keys.world
        if covered and drive(first_key(self.plane.engine, *keys.entries_between(1, covered))):
            deleting = marker is not None and marker.state == "delete_started"
            if not deleting:
                self._add(
                    "warning",
                    "journal",
                    universe,
                    world,
                    f"heights 1-{covered}",
                    "hot keys remain below segment coverage (an export did not finish "
                    "deleting them; reads take them while they are there and sound, and "
                    "they are not checked here: export the world again to delete them)",
                )
        height = covered + 1
        layout = self.plane.layout
        holes: list[_Run] = []  # runs of missing or damaged heights
        page = self.plane.config.read_page_entries
        while height <= head:
            try:
                rows = self.plane.read_hot(universe, world, height, min(page, head - height + 1))
            except MissingJournalEntry as exc:
                # the run of missing heights ends below the next key of an entry: found in
                # one read, so a head damaged to 10**15 is one finding, not 10**15 reads
                missing = max(height, exc.height)
                engine = self.plane.engine
                last = drive(journal.next_entry_height(engine, keys, missing + 1, head)) - 1
                _add_run(holes, missing, last, exc)
                height = last + 1
                continue
            except DamagedJournalEntry as exc:  # the read goes on after it
                damaged = max(height, exc.height)
                self.report.count("journal entries", damaged - height)  # checked before it
                _add_run(holes, damaged, damaged, exc)
                height = damaged + 1
                continue
            except SegmentIndexCorruption:
                break  # the index record it names is a finding of the segments check already
            if not rows:
                self._add(
                    "error",
                    "journal",
                    universe,
                    world,
                    f"height {height}",
                    "no hot entry and no segment covers it",
                )
                break
            self.report.count("journal entries", len(rows))
            if not self.plane.checksummed:
                self.report.count(f"journal entries without checksums (layout {layout})", len(rows))
            elif self.plane.sealing is not None and self.plane.sealing.in_python:
                self.report.count(
                    "journal entries checked in Python (CRC-32C without its C part: slow)",
                    len(rows),
                )
            height = rows[-1][0] + 1
        for run in holes[:MAX_FINDINGS_PER_WORLD]:
            first, last, why = run.first, run.last, run.why
            if first == last:
                self._add("error", "journal", universe, world, f"height {first}", why)
            else:  # one finding per run: a lost segment's heights are one problem
                subject, more = f"heights {first}-{last}", f", and the {last - first} after it"
                self._add("error", "journal", universe, world, subject, why + more)
        if len(holes) > MAX_FINDINGS_PER_WORLD:
            self._add(
                "error",
                "journal",
                universe,
                world,
                "holes",
                f"{len(holes)} runs of missing or damaged heights in all (first "
                f"{MAX_FINDINGS_PER_WORLD} listed)",
            )

    def _check_snapshots(
        self,
        universe: UniverseId,
        world: WorldId,
        rows: list[tuple[bytes, bytes]],
        head: int,
    ) -> None:
        heights: dict[int, SnapshotRecord] = {}
        incomplete: set[int] = set()
        for _, raw in rows:
            self.report.count("snapshots")
            try:
                record = decode_record(SnapshotRecord, raw, "snapshot record")
            except CorruptRecord as exc:
                self._add("error", "snapshots", universe, world, "index", str(exc))
                continue
            heights[record.height] = record
            subject = f"snapshot {record.height}"
            if record.height > head:
                self._add("error", "snapshots", universe, world, subject, f"above the head {head}")
            for what, ref in (("state", record.snapshot_ref), ("manifest", record.manifest_hash)):
                if not self.plane.has(universe, ref):
                    incomplete.add(record.height)
                    self._add(
                        "error",
                        "snapshots",
                        universe,
                        world,
                        subject,
                        f"{what} {ref} is not in the CAS",
                    )
        try:
            baseline = self.plane.active_baseline(universe, world)
        except PersistError as exc:
            self._add("error", "snapshots", universe, world, "baseline", str(exc))
            return
        subject = f"baseline {baseline.height}"
        if heights.get(baseline.height) != baseline:
            self._add(
                "error",
                "snapshots",
                universe,
                world,
                subject,
                "the active baseline is not the snapshot indexed at its height",
            )
        elif baseline.height not in incomplete:  # else already reported above
            self._check_root(universe, world, baseline, subject)

    def _check_root(
        self, universe: UniverseId, world: WorldId, baseline: SnapshotRecord, subject: str
    ) -> None:
        """Root completeness of the active baseline: restore starts from it, so its state,
        its manifest and every blob the manifest names must be in the universe's CAS."""
        from segments.restore import load_root

        try:
            load_root(self.plane, universe, baseline)
        except Corruption as exc:
            self._add("error", "snapshots", universe, world, subject, f"root incomplete: {exc}")

    def _check_inbox(self, keys: WorldKeys, cursor_raw: bytes | None) -> None:
        universe, world = keys.universe, keys.world
        try:
            cursor = None
            if cursor_raw is not None:
                cursor = decode_record(InboxCursor, cursor_raw, "inbox cursor").seq
            self._check_marks(keys, cursor)
            if drive(pending_unmarked(self.plane.engine, keys)):
                self._add(
                    "error",
                    "inbox",
                    universe,
                    world,
                    "ready mark",
                    "items wait after the cursor but the world has no ready mark: no drain "
                    "worker will find them (aosp drain --backfill marks them)",
                )
            begin = keys.inbox_after(None)[0]
            while rows := drive(inbox_page(self.plane.engine, keys, begin, 1_000)):
                self._check_idempotency(keys, rows)
                self.report.count("inbox items", len(rows))
                begin = rows[-1][0] + b"\x00"
        except CorruptRecord as exc:
            self._add("error", "inbox", universe, world, "records", str(exc))

    def _check_idempotency(self, keys: WorldKeys, rows: list[tuple[bytes, bytes]]) -> None:
        """Every item's idempotency entry names it and keeps its fingerprint: the two are
        written, and compacted, together; an item without its entry would be enqueued again
        by a retry, and one whose entry keeps another fingerprint refused."""
        envelopes = [
            (key, raw, decode_record(InboxEnvelope, raw, "inbox envelope")) for key, raw in rows
        ]
        entries = kv.run_sync(
            self.plane.engine,
            lambda tr: [
                None
                if e.idempotency_key is None
                else tr.get(keys.inbox_idempotency(e.idempotency_key), snapshot=True).wait()
                for _, _, e in envelopes
            ],
        )
        prefix = keys.inbox_prefix_len()
        for (key, raw, envelope), entry in zip(envelopes, entries, strict=True):
            seq = seq_in_key(key, prefix, f"inbox entry key of world {keys.world}")
            if envelope.idempotency_key is None:
                continue
            if entry is None:
                named = "missing: a retry of its enqueue would make a duplicate"
            else:
                try:
                    entry_seq, kept = idempotency_entry(entry, "idempotency entry")
                except CorruptRecord as exc:
                    named = f"damaged ({exc})"
                else:
                    if entry_seq != seq:
                        named = f"naming {entry_seq}: a retry would make a duplicate"
                    elif kept is not None and kept != envelope_fingerprint(raw):
                        named = "keeping another item's fingerprint: a retry would be refused"
                    else:
                        continue
            self._add(
                "error",
                "inbox",
                keys.universe,
                keys.world,
                f"item {seq}",
                f"its idempotency entry ({envelope.idempotency_key!r}) is {named}",
            )

    def _check_marks(self, keys: WorldKeys, cursor: InboxSeq | None) -> None:
        """Consumed marks (inbox compaction) must name sequences at or below the cursor:
        compaction removes the items at or below a mark, so a mark above the cursor would
        let it remove items never drained."""
        marks = kv.run(self.plane.engine, lambda tr: compaction.read_marks(tr, keys))
        self.report.count("consumed marks", len(marks))
        now = self.plane.clock()
        for at_ns, seq in marks:
            if at_ns > now + FUTURE_MARK_NS:
                self._add(
                    "warning",
                    "inbox",
                    keys.universe,
                    keys.world,
                    f"consumed mark {at_ns}",
                    f"dated {(at_ns - now) / 1e9:.0f} s after this host's clock: a compactor's "
                    "clock runs ahead; no new mark is written until then, so compaction of the "
                    "world stalls until a pass whose clock is right drops it (it drops marks "
                    "dated more than the retention window after its time): fix the clock",
                )
            if cursor is None or seq > cursor:
                self._add(
                    "error",
                    "inbox",
                    keys.universe,
                    keys.world,
                    f"consumed mark {at_ns}",
                    f"names {seq}, above the cursor ({cursor}): compaction would remove "
                    "items never drained",
                )

    # ------------------------------------------------------------------ objects

    def _check_orphans(self, prefix: str) -> None:
        listing, last = self.plane.objects.list(prefix), None
        while True:
            try:
                info = next(listing, None)
            except OddObject as exc:  # an entry the store cannot take for one (a loop, ...)
                after = "its start" if last is None else repr(last)
                self.report.findings.append(
                    Finding(
                        "error",
                        "objects",
                        "?",
                        None,
                        prefix or "(all)",
                        f"the listing stopped after {after}: {exc}",
                    )
                )
                return
            if info is None:
                return
            last = info.key
            self.report.count("objects")
            if info.key in self._referenced or info.key.startswith(tuple(self._in_flight)):
                continue
            universe = info.key.split("/")[1] if info.key.count("/") >= 2 else "?"
            self.report.findings.append(
                Finding(
                    "warning",
                    "objects",
                    universe,
                    None,
                    info.key,
                    f"orphaned object ({info.size} bytes): no CAS record or segment names it",
                )
            )
