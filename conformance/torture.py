"""SIGKILL crash torture: OS processes write, drain and export on one shared store while the
torture kills them at random moments and restarts them; then every invariant is checked
against what the processes durably acknowledged.

Roles (:mod:`conformance.torture_worker`, one OS process each, restarted after each kill):

* **writers** enqueue items with unique idempotency keys into the worlds, singly and in
  batches of three. Before a call a writer logs its *intent*, after it returns the *ack*
  with the sequences. A restarted writer resumes at the first call it has no ack for, so a
  call that was interrupted is repeated with the same keys (and must not duplicate).
* **drainers** drain the worlds in small random batches and log every drain that moved items.
* one **exporter** replays the reference kernel from the active baseline to the head,
  commits that state as a snapshot at the head (promoting it two times in three), and
  exports the journal below the baseline to segments; it logs each snapshot and segment.

Every log line is appended and fsynced **after** the call returned, so it is a durable
acknowledgement. Each incarnation of a process writes its own file, so a line torn by a kill
is always the last of its file, and is ignored (that call is unacknowledged).

While they run, a monitor thread of the torture's own process samples every world: the head,
the cursor and the baseline never move back, snapshot index entries and segment records
never change or vanish, and journal entries read (stitched from segments and the hot tail)
never change. After the run every process is killed, and the store is checked:

1. before any repair: every acknowledged item is either journaled once or pending after the
   cursor;
2. after a final clean drain and export: heights are contiguous through segments and hot
   tail; every journaled item was attempted by a writer, is journaled at most once, in the
   world it was sent to, under the sequence its writer was given; every acknowledged item is
   journaled exactly once; drains are in sequence order and every acknowledged drain is in
   the journal as logged; the cursor is the last drained item; acknowledged snapshots are
   indexed as logged, each indexed height is announced once, every snapshot body equals the
   replay of the journal to its height; baselines only move forward and the active one is
   the last announced; segments are contiguous, below the baseline and as logged; and
   restore (baseline + segments + hot tail) equals full replay, byte for byte.

:func:`run_torture` runs it; :func:`crash_torture` is the conformance case.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from conformance.cases import CaseSkipped, ConformanceFailure, Context, TortureSize
from persistence import cbor
from persistence.errors import PersistError
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.plane import Plane
from persistence.records import (
    BaselineSnapshotJournalRecord,
    DomainEventIngress,
    IngressJournalRecord,
    SegmentIndexRecord,
    SnapshotJournalRecord,
    SnapshotRecord,
    decode_inbox_item,
    decode_journal_record,
)
from segments.export import ExportConfig, Exporter
from segments.restore import full_replay, load_root, restore

SCHEMA: Final = "conformance/TortureItem@1"
BATCH: Final = 3
MULTI_PROCESS_ENGINES: Final = ("sqlite", "fdb")
MULTI_PROCESS_OBJECT_STORES: Final = ("file", "s3")
ROOT: Final = Path(__file__).resolve().parents[1]
MAX_LISTED: Final = 25
"""Violations listed in a failure message (all are in the report's ``violations``)."""

ItemId = tuple[int, int]
"""An item: (writer, index). Its world, payload and idempotency key follow from it."""


# --------------------------------------------------------------------------- what is written


def call_size(n: int) -> int:
    """How many items the writer call starting at item ``n`` enqueues (1, or a batch)."""
    return BATCH if n % 5 == 2 else 1


def call_world(writer: int, n: int, worlds: int) -> int:
    """The world (index) the writer call starting at item ``n`` enqueues into."""
    return (writer + n) % worlds


def item(writer: int, n: int) -> DomainEventIngress:
    """Item ``n`` of ``writer``: its payload names both."""
    return DomainEventIngress(SCHEMA, cbor.encode({"w": writer, "n": n}))


def idempotency_key(writer: int, n: int) -> bytes:
    """The idempotency key of item ``n`` of ``writer`` (the same in every incarnation)."""
    return f"torture/{writer}/{n}".encode()


def item_id(data: bytes) -> ItemId | None:
    """The (writer, index) of a journaled item's bytes; ``None`` if not a torture item."""
    decoded = decode_inbox_item(data)
    if not isinstance(decoded, DomainEventIngress) or decoded.schema != SCHEMA:
        return None
    value = cbor.decode(decoded.value_cbor)
    if not isinstance(value, dict) or set(value) != {"w", "n"}:
        return None
    writer, n = value["w"], value["n"]
    if not isinstance(writer, int) or not isinstance(n, int):
        return None
    return writer, n


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class TortureConfig:
    """Everything the workers need, written to ``config.json`` in the run's directory."""

    kv_url: str
    objects_url: str
    universe: UniverseId
    worlds: tuple[WorldId, ...]
    directory: Path
    seed: int
    writer_pause: float = 0.001
    """Seconds a writer sleeps between calls (so that drains keep up and logs stay small)."""
    export_target_entries: int = 25
    export_delete_chunk: int = 7

    def save(self) -> Path:
        """Write ``config.json``; return its path."""
        path = self.directory / "config.json"
        data = asdict(self)
        data.update(
            universe=str(self.universe),
            worlds=[str(w) for w in self.worlds],
            directory=str(self.directory),
        )
        path.write_text(json.dumps(data, indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> TortureConfig:
        """Read ``config.json``."""
        data = json.loads(path.read_text())
        data.update(
            universe=UniverseId.parse(data["universe"]),
            worlds=tuple(WorldId.parse(w) for w in data["worlds"]),
            directory=Path(data["directory"]),
        )
        return cls(**data)


def check_shared_urls(kv_url: str, objects_url: str) -> None:
    """Raise ``CaseSkipped`` unless both URLs name a store other processes can open."""
    kv_scheme, objects_scheme = urlsplit(kv_url).scheme, urlsplit(objects_url).scheme
    if kv_scheme not in MULTI_PROCESS_ENGINES:
        raise CaseSkipped(
            f"crash torture needs an engine that several OS processes share (sqlite:///file "
            f"or fdb://); kv {kv_url!r} cannot be opened by another process"
        )
    if objects_scheme not in MULTI_PROCESS_OBJECT_STORES:
        raise CaseSkipped(
            f"crash torture needs an object store that several OS processes share (file:// or "
            f"s3://); objects {objects_url!r} cannot be opened by another process"
        )


# --------------------------------------------------------------------------- logs


def log_name(role: str, ident: int, incarnation: int) -> str:
    """The log file of one incarnation of one process."""
    return f"{role}-{ident}.{incarnation}.jsonl"


class Log:
    """An append-only JSON-lines file; each line is fsynced before :meth:`append` returns."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` durably."""
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        os.fsync(self.fd)


def read_lines(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The records of one log file, and whether its last line was torn (and ignored)."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop() != b""  # a complete file ends with a newline
    records = []
    for index, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise ConformanceFailure(f"{path.name}: line {index + 1} is damaged") from None
    return records, torn


def log_files(directory: Path, role: str = "*", ident: str = "*") -> Iterator[Path]:
    """Log files of ``role``/``ident`` (default: every process)."""
    yield from sorted(directory.glob(f"{role}-{ident}.*.jsonl"))


@dataclass(frozen=True, slots=True)
class DrainAck:
    """A drain a drainer saw return (the ``process`` label names the log file)."""

    process: str
    world: int
    first: int
    count: int
    cursor: InboxSeq


@dataclass(frozen=True, slots=True)
class SnapshotAck:
    """A snapshot commit the exporter saw return."""

    world: int
    height: int
    ref: Hash
    promoted: bool


@dataclass(frozen=True, slots=True)
class SegmentAck:
    """A segment the exporter saw exported."""

    world: int
    start: int
    end: int
    checksum: bytes


@dataclass
class Evidence:
    """What the processes durably logged."""

    intents: dict[ItemId, int] = field(default_factory=dict)
    """Every item a writer started to enqueue, and the world it was sent to."""
    acked: dict[ItemId, tuple[int, InboxSeq]] = field(default_factory=dict)
    """Every item whose enqueue returned: its world and sequence."""
    drains: list[DrainAck] = field(default_factory=list)
    snapshots: list[SnapshotAck] = field(default_factory=list)
    segments: list[SegmentAck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    torn_lines: int = 0
    interrupted_calls: int = 0
    """Writer calls whose process was killed after logging the intent, before the ack."""


def read_evidence(directory: Path) -> Evidence:
    """Every log of the run, parsed."""
    evidence = Evidence()
    for path in log_files(directory):
        records, torn = read_lines(path)
        evidence.torn_lines += torn
        process = path.name.removesuffix(".jsonl")
        in_call = False
        for record in records:
            in_call = "intent" in record
            if "intent" in record:
                for n in record["intent"]:
                    evidence.intents[(record["writer"], n)] = record["world"]
            elif "ack" in record:
                for n, seq in record["ack"]:
                    evidence.acked[(record["writer"], n)] = (record["world"], InboxSeq.parse(seq))
            elif "drain" in record:
                evidence.drains.append(
                    DrainAck(
                        process,
                        record["drain"],
                        record["first"],
                        record["count"],
                        InboxSeq.parse(record["cursor"]),
                    )
                )
            elif "snapshot" in record:
                evidence.snapshots.append(
                    SnapshotAck(
                        record["snapshot"],
                        record["height"],
                        Hash.parse(record["ref"]),
                        record["promoted"],
                    )
                )
            elif "segment" in record:
                evidence.segments.append(
                    SegmentAck(
                        record["segment"],
                        record["start"],
                        record["end"],
                        bytes.fromhex(record["checksum"]),
                    )
                )
            elif "error" in record:
                evidence.errors.append(f"{process}: {record['error']}")
        evidence.interrupted_calls += in_call
    return evidence


def resume_point(directory: Path, writer: int) -> int:
    """The first item of ``writer`` whose call has no acknowledgement yet."""
    done = -1
    for path in log_files(directory, "writer", str(writer)):
        for record in read_lines(path)[0]:
            if "ack" in record:
                done = max([done, *(n for n, _ in record["ack"])])
    return done + 1


def state_at(plane: Plane, universe: UniverseId, world: WorldId, height: int) -> bytes:
    """The reference kernel's state after the journal up to ``height``, replayed from the
    active baseline (or from genesis if the baseline is above ``height``)."""
    start = plane.active_baseline(universe, world)
    if start.height > height:
        start = plane.list_snapshots(universe, world)[0]
    kernel = ReferenceKernel()
    kernel.hydrate(load_root(plane, universe, start))
    if height > start.height:
        for h, entry in plane.read_range(universe, world, start.height + 1, height - start.height):
            kernel.apply(h, entry)
    return kernel.snapshot()


# --------------------------------------------------------------------------- the monitor


class Monitor(threading.Thread):
    """Samples every world while the processes run and records what must never happen:
    head, cursor or baseline moving back, an index entry or segment record changing or
    vanishing, a journal entry reading differently from an earlier read."""

    def __init__(self, plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...]) -> None:
        super().__init__(name="torture-monitor", daemon=True)
        self.plane = plane
        self.universe = universe
        self.worlds = worlds
        self.stop = threading.Event()
        self._violations: dict[str, None] = {}
        self.samples = 0
        self.entries_seen = 0
        self._rng = random.Random(0)
        self._heads: dict[int, int] = {}
        self._cursors: dict[int, InboxSeq] = {}
        self._baselines: dict[int, SnapshotRecord] = {}
        self._index: dict[tuple[int, int], bytes] = {}
        self._segments: dict[tuple[int, int], SegmentIndexRecord] = {}
        self._entries: dict[tuple[int, int], bytes] = {}

    @property
    def violations(self) -> list[str]:
        """What the monitor saw go wrong (each distinct finding once)."""
        return list(self._violations)

    def _report(self, message: str) -> None:
        self._violations[message] = None

    def run(self) -> None:
        """Sample every world every 20 ms until :attr:`stop` is set."""
        while not self.stop.wait(0.02):
            for index, world in enumerate(self.worlds):
                try:
                    self.sample(index, world)
                except PersistError as exc:
                    self._report(f"monitor: world {index}: a read failed: {exc!r}")
            self.samples += 1

    def sample(self, index: int, world: WorldId) -> None:
        """One look at world ``index``."""
        plane, u = self.plane, self.universe
        head = plane.head(u, world)
        if head < self._heads.get(index, 0):
            self._report(f"monitor: world {index}: head moved back to {head}")
        self._heads[index] = head
        cursor = plane.inbox_cursor(u, world)
        seen = self._cursors.get(index)
        if seen is not None and (cursor is None or cursor < seen):
            self._report(f"monitor: world {index}: cursor moved back {seen} -> {cursor}")
        if cursor is not None:
            self._cursors[index] = cursor
        baseline = plane.active_baseline(u, world)
        before = self._baselines.get(index)
        if before is not None and (
            baseline.height < before.height
            or (baseline.height == before.height and baseline != before)
        ):
            self._report(
                f"monitor: world {index}: baseline regressed from height {before.height} "
                f"to {baseline.height}"
            )
        self._baselines[index] = baseline
        index_now = {r.height: r.to_cbor() for r in plane.list_snapshots(u, world)}
        for (i, height), stored in self._index.items():  # with commit ids: bytes never change
            if i == index and index_now.get(height) != stored:
                self._report(
                    f"monitor: world {index}: snapshot index entry at {height} changed or vanished"
                )
        self._index.update(((index, h), stored) for h, stored in index_now.items())
        segments = {s.end: s for s in plane.list_segments(u, world)}
        for (i, end), record in self._segments.items():
            if i == index and segments.get(end) != record:
                self._report(f"monitor: world {index}: segment ending at {end} changed or vanished")
        self._segments.update(((index, end), record) for end, record in segments.items())
        if head:
            first = self._rng.randint(1, head)
            for height, entry in plane.read_range(u, world, first, 64):
                digest = hashlib.sha256(entry).digest()
                if self._entries.setdefault((index, height), digest) != digest:
                    self._report(
                        f"monitor: world {index}: journal entry {height} reads differently "
                        "than before"
                    )
                self.entries_seen += 1


# --------------------------------------------------------------------------- the checks


@dataclass
class Journal:
    """One world's journal, read through segments and the hot tail, sorted into records."""

    head: int
    rows: list[tuple[int, bytes]]
    items: list[tuple[int, InboxSeq, ItemId | None]] = field(default_factory=list)
    """(height, sequence, item id) of each drained item, in height order."""
    snapshots: list[tuple[int, SnapshotJournalRecord]] = field(default_factory=list)
    baselines: list[tuple[int, BaselineSnapshotJournalRecord]] = field(default_factory=list)


def read_journal(
    plane: Plane, universe: UniverseId, world: WorldId, index: int, violations: list[str]
) -> Journal | None:
    """The world's whole journal, or ``None`` (and a violation) if it cannot be read whole."""
    try:
        head = plane.head(universe, world)
        rows = plane.read_range(universe, world, 1, head)
    except PersistError as exc:
        violations.append(f"journal: world {index}: the stitched read failed: {exc!r}")
        return None
    heights = [h for h, _ in rows]
    if heights != list(range(1, head + 1)):
        missing = sorted(set(range(1, head + 1)) - set(heights))[:10]
        violations.append(
            f"journal: world {index}: heights are not 1..{head} (missing {missing}, "
            f"{len(rows)} entries read)"
        )
        return None
    journal = Journal(head, rows)
    for height, entry in rows:
        try:
            record = decode_journal_record(entry)
            if isinstance(record, IngressJournalRecord):
                journal.items.append((height, record.seq, item_id(record.item)))
            elif isinstance(record, SnapshotJournalRecord):
                journal.snapshots.append((height, record))
            elif isinstance(record, BaselineSnapshotJournalRecord):
                journal.baselines.append((height, record))
            else:
                violations.append(f"journal: world {index}: entry {height} is not a plane record")
        except PersistError as exc:
            violations.append(f"journal: world {index}: entry {height} does not decode: {exc!r}")
    return journal


def _all_after(
    plane: Plane, universe: UniverseId, world: WorldId, after: InboxSeq | None
) -> list[InboxSeq]:
    """Every inbox sequence after ``after`` (paged)."""
    out: list[InboxSeq] = []
    while page := plane.read_after(universe, world, after, 1_000):
        out.extend(seq for seq, _ in page)
        after = page[-1][0]
    return out


def check_pending(
    plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...], evidence: Evidence
) -> list[str]:
    """Right after the last kill, before anything repairs the store: every acknowledged item
    is journaled once or pending after the cursor, never both, never neither."""
    violations: list[str] = []
    for index, world in enumerate(worlds):
        journal = read_journal(plane, universe, world, index, violations)
        if journal is None:
            continue
        journaled = Counter(seq for _, seq, _ in journal.items)
        pending = set(_all_after(plane, universe, world, plane.inbox_cursor(universe, world)))
        for item_key, (target, seq) in sorted(evidence.acked.items()):
            if target != index:
                continue
            where = f"acknowledged item w{item_key[0]}#{item_key[1]} (world {index}, seq {seq})"
            if journaled[seq] and seq in pending:
                violations.append(
                    f"pending: {where} is journaled and also pending after the cursor"
                )
            elif not journaled[seq] and seq not in pending:
                violations.append(
                    f"lost: {where} is neither journaled nor pending after the cursor"
                )
            elif journaled[seq] > 1:
                violations.append(f"duplicate: {where} is journaled {journaled[seq]} times")
    return violations


def check_store(
    plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...], evidence: Evidence
) -> list[str]:
    """Every invariant of the store against the evidence, after a final clean drain and
    export (see the module documentation). Returns the violations, each with details."""
    violations: list[str] = []
    placed: dict[ItemId, list[tuple[int, int]]] = defaultdict(list)
    unreadable: set[int] = set()
    for index, world in enumerate(worlds):
        journal = read_journal(plane, universe, world, index, violations)
        if journal is None:
            unreadable.add(index)
            continue
        _check_items(journal, index, evidence, placed, violations)
        _check_drains(plane, universe, world, journal, index, evidence, violations)
        _check_snapshots(plane, universe, world, journal, index, evidence, violations)
        _check_segments(plane, universe, world, index, evidence, violations)
        _check_restore(plane, universe, world, index, violations)
    for key, places in sorted(placed.items()):
        if len(places) > 1:
            where = ", ".join(f"world {i} height {h}" for i, h in places)
            violations.append(
                f"duplicate: item w{key[0]}#{key[1]} is journaled {len(places)} times: {where}"
            )
    for key, (target, seq) in sorted(evidence.acked.items()):
        if key not in placed and target not in unreadable:
            violations.append(
                f"lost: acknowledged item w{key[0]}#{key[1]} (world {target}, seq {seq}) is not "
                "in the journal after the final drain"
            )
    return violations


def _check_items(
    journal: Journal,
    index: int,
    evidence: Evidence,
    placed: dict[ItemId, list[tuple[int, int]]],
    violations: list[str],
) -> None:
    previous: InboxSeq | None = None
    for height, seq, key in journal.items:
        if previous is not None and seq <= previous:
            violations.append(
                f"order: world {index}: item at height {height} has seq {seq} <= {previous}"
            )
        previous = seq
        if key is None:
            violations.append(f"journal: world {index}: item at height {height} is not ours")
            continue
        placed[key].append((index, height))
        name = f"item w{key[0]}#{key[1]} at world {index} height {height}"
        if key not in evidence.intents:
            violations.append(f"phantom: {name} was never sent by a writer")
        elif evidence.intents[key] != index:
            violations.append(f"misrouted: {name} was sent to world {evidence.intents[key]}")
        acked = evidence.acked.get(key)
        if acked is not None and acked[1] != seq:
            violations.append(f"sequence: {name} has seq {seq}, its writer was given {acked[1]}")


def _check_drains(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    journal: Journal,
    index: int,
    evidence: Evidence,
    violations: list[str],
) -> None:
    by_height = {height: seq for height, seq, _ in journal.items}
    last_cursor: dict[str, InboxSeq] = {}
    for drain in evidence.drains:
        if drain.world != index:
            continue
        heights = range(drain.first, drain.first + drain.count)
        seqs = [by_height.get(h) for h in heights]
        if None in seqs or seqs[-1] != drain.cursor:
            violations.append(
                f"drain: {drain.process} acknowledged world {index} heights "
                f"{drain.first}-{heights[-1]} with cursor {drain.cursor}; the journal holds "
                f"{[None if s is None else str(s) for s in seqs][:5]} there"
            )
        before = last_cursor.get(drain.process)
        if before is not None and drain.cursor <= before:
            violations.append(
                f"cursor: {drain.process} saw world {index}'s cursor go from {before} to "
                f"{drain.cursor}"
            )
        last_cursor[drain.process] = drain.cursor
    cursor = plane.inbox_cursor(universe, world)
    last = journal.items[-1][1] if journal.items else None
    if cursor != last:
        violations.append(
            f"cursor: world {index}: cursor {cursor} is not the last drained item {last}"
        )


def _check_snapshots(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    journal: Journal,
    index: int,
    evidence: Evidence,
    violations: list[str],
) -> None:
    indexed = {record.height: record for record in plane.list_snapshots(universe, world)}
    for ack in evidence.snapshots:
        if ack.world != index:
            continue
        record = indexed.get(ack.height)
        if record is None or record.snapshot_ref != ack.ref:
            held = None if record is None else record.snapshot_ref
            violations.append(
                f"snapshot: world {index}: height {ack.height} was acknowledged as {ack.ref}, "
                f"the index holds {held}"
            )
    announced = Counter(record.height for _, record in journal.snapshots)
    for height, record in indexed.items():
        if height and announced[height] != 1:
            violations.append(
                f"snapshot: world {index}: indexed height {height} is announced "
                f"{announced[height]} times in the journal"
            )
        if record.height > journal.head:
            violations.append(f"snapshot: world {index}: indexed height {height} > head")
    for at, announcement in journal.snapshots:
        if indexed.get(announcement.height) != _as_record(announcement):
            violations.append(
                f"snapshot: world {index}: the announcement at {at} of height "
                f"{announcement.height} does not match the index"
            )
    previous = 0
    for at, promotion in journal.baselines:
        if promotion.height <= previous:
            violations.append(
                f"baseline: world {index}: promoted to {promotion.height} at journal height "
                f"{at}, after {previous}"
            )
        previous = max(previous, promotion.height)
    active = plane.active_baseline(universe, world)
    last = _as_record(journal.baselines[-1][1]) if journal.baselines else indexed.get(0)
    if active != last:
        violations.append(
            f"baseline: world {index}: active baseline at {active.height} is not the last "
            f"promoted one ({None if last is None else last.height})"
        )
    for ack in evidence.snapshots:
        if ack.world == index and ack.promoted and ack.height > active.height:
            violations.append(
                f"baseline: world {index}: promotion to {ack.height} was acknowledged, the "
                f"active baseline is at {active.height}"
            )
    _check_snapshot_bodies(plane, universe, journal, indexed, index, violations)


def _as_record(
    announcement: SnapshotJournalRecord | BaselineSnapshotJournalRecord,
) -> SnapshotRecord:
    return SnapshotRecord(
        announcement.snapshot_ref,
        announcement.height,
        announcement.logical_time_ns,
        announcement.manifest_hash,
        announcement.receipt_horizon_height,
    )


def _check_snapshot_bodies(
    plane: Plane,
    universe: UniverseId,
    journal: Journal,
    indexed: dict[int, SnapshotRecord],
    index: int,
    violations: list[str],
) -> None:
    """Each snapshot body is the reference kernel's state after the journal up to its
    height, replayed now from genesis: neither the snapshot nor the journal prefix it was
    taken from (since exported) has changed."""
    genesis = indexed.get(0)
    if genesis is None:
        violations.append(f"snapshot: world {index}: no genesis snapshot")
        return
    kernel = ReferenceKernel()
    try:
        kernel.hydrate(load_root(plane, universe, genesis))
        for height, entry in journal.rows:
            kernel.apply(height, entry)
            record = indexed.get(height)
            if record is not None and plane.get(universe, record.snapshot_ref) != kernel.snapshot():
                violations.append(
                    f"snapshot: world {index}: the body at height {height} differs from the "
                    "replay of the journal to that height"
                )
    except PersistError as exc:
        violations.append(f"snapshot: world {index}: replay failed: {exc!r}")


def _check_segments(
    plane: Plane,
    universe: UniverseId,
    world: WorldId,
    index: int,
    evidence: Evidence,
    violations: list[str],
) -> None:
    segments = plane.list_segments(universe, world)
    baseline = plane.active_baseline(universe, world).height
    expected_start = 1
    for segment in segments:
        if segment.start != expected_start:
            violations.append(
                f"segments: world {index}: segment {segment.start}-{segment.end} follows "
                f"{expected_start - 1}"
            )
        if segment.end >= baseline:
            violations.append(
                f"segments: world {index}: segment {segment.start}-{segment.end} is not below "
                f"the baseline at {baseline}"
            )
        expected_start = segment.end + 1
    by_range = {(s.start, s.end): s.checksum for s in segments}
    for ack in evidence.segments:
        if ack.world == index and by_range.get((ack.start, ack.end)) != ack.checksum:
            violations.append(
                f"segments: world {index}: exported segment {ack.start}-{ack.end} is not "
                "indexed as acknowledged"
            )


def _check_restore(
    plane: Plane, universe: UniverseId, world: WorldId, index: int, violations: list[str]
) -> None:
    try:
        restored = restore(plane, universe, world, ReferenceKernel())
        replayed = full_replay(plane, universe, world, ReferenceKernel())
    except PersistError as exc:
        violations.append(f"restore: world {index}: {exc!r}")
        return
    if restored.state != replayed.state:
        violations.append(
            f"restore: world {index}: restore from height {restored.from_height} differs from "
            "full replay"
        )


# --------------------------------------------------------------------------- the run


@dataclass
class TortureReport:
    """The verdict and the figures of one torture run."""

    violations: list[str]
    figures: dict[str, Any]
    directory: Path


@dataclass
class _Process:
    role: str
    ident: int
    incarnation: int
    proc: subprocess.Popen[bytes]


class _Fleet:
    """The worker processes: start, kill, restart, and notice the ones that died alone."""

    def __init__(self, config_path: Path, directory: Path) -> None:
        self.config_path = config_path
        self.directory = directory
        self.processes: list[_Process] = []
        self.kills: Counter[str] = Counter()
        self.final_kills = 0
        self.starts = 0
        self.failures: list[str] = []
        path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def start(self, role: str, ident: int, incarnation: int = 0) -> None:
        """Start incarnation ``incarnation`` of process ``role``-``ident``."""
        name = log_name(role, ident, incarnation).removesuffix(".jsonl")
        with open(self.directory / f"{name}.stderr", "wb") as stderr:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "conformance.torture_worker",
                    str(self.config_path),
                    role,
                    str(ident),
                    str(incarnation),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=self.env,
            )
        self.processes.append(_Process(role, ident, incarnation, proc))
        self.starts += 1

    def kill(self, victim: _Process) -> None:
        """SIGKILL ``victim``, wait for it, and start its next incarnation."""
        if self._kill(victim):
            self.kills[victim.role] += 1
        else:
            self._exited(victim)
        self.processes.remove(victim)
        self.start(victim.role, victim.ident, victim.incarnation + 1)

    @staticmethod
    def _kill(process: _Process) -> bool:
        """SIGKILL ``process`` if it runs; whether it did."""
        running = process.proc.poll() is None
        if running:
            process.proc.send_signal(signal.SIGKILL)
        process.proc.wait()
        return running

    def _exited(self, process: _Process) -> None:
        """Record a process that exited by itself: workers run until they are killed."""
        name = log_name(process.role, process.ident, process.incarnation).removesuffix(".jsonl")
        tail = (self.directory / f"{name}.stderr").read_text(errors="replace")[-600:]
        self.failures.append(
            f"process: {name} exited with status {process.proc.returncode}: {tail.strip()}"
        )

    def reap(self) -> None:
        """Record and restart the processes that exited by themselves."""
        for process in [p for p in self.processes if p.proc.poll() is not None]:
            self._exited(process)
            self.processes.remove(process)
            self.start(process.role, process.ident, process.incarnation + 1)

    def kill_all(self) -> None:
        """SIGKILL every process (the last kill), without restarting them."""
        for process in self.processes:
            if self._kill(process):
                self.final_kills += 1
            else:
                self._exited(process)
        self.processes.clear()


def run_torture(
    plane: Plane,
    kv_url: str,
    objects_url: str,
    size: TortureSize,
    *,
    seed: int,
    directory: Path,
    progress: Callable[[str], None] = lambda _: None,
) -> TortureReport:
    """Run the torture on the store ``plane`` works on (which ``kv_url``/``objects_url``
    open in other processes), in fresh worlds of a fresh universe; logs go to
    ``directory``. Raises ``CaseSkipped`` if the URLs cannot be shared between processes.
    A ``faults+`` engine URL is opened plain in the workers: their faults are real kills."""
    kv_url = kv_url.removeprefix("faults+")
    check_shared_urls(kv_url, objects_url)
    rng = random.Random(seed)
    universe = UniverseId.new()
    worlds = tuple(WorldId.new() for _ in range(size.worlds))
    for world in worlds:
        plane.create_world(universe, world)
    config = TortureConfig(kv_url, objects_url, universe, worlds, directory, seed)
    fleet = _Fleet(config.save(), directory)
    roles = [("writer", i) for i in range(size.writers)]
    roles += [("drainer", i) for i in range(size.drainers)] + [("exporter", 0)]
    for role, ident in roles:
        fleet.start(role, ident)
    monitor = Monitor(plane, universe, worlds)
    monitor.start()
    began = time.monotonic()
    deadline = began + size.seconds
    try:
        while (now := time.monotonic()) < deadline:
            time.sleep(min(rng.expovariate(1 / size.mean_kill_interval), deadline - now))
            fleet.reap()
            fleet.kill(rng.choice(fleet.processes))
        progress(f"torture: {sum(fleet.kills.values())} kills in {size.seconds:.0f}s")
    finally:
        fleet.kill_all()  # the last kill, at whatever moment each process is in
        monitor.stop.set()
        monitor.join()
    run_seconds = time.monotonic() - began
    evidence = read_evidence(directory)
    violations = fleet.failures + monitor.violations + evidence.errors
    violations += check_pending(plane, universe, worlds, evidence)
    exporter = Exporter(plane, ExportConfig(enabled=True, target_entries=25))
    for index, world in enumerate(worlds):  # a clean process finishes what the killed left
        try:
            while plane.drain_inbox_to_journal(universe, world).count:
                pass
            exporter.export_all(universe, world)
        except PersistError as exc:
            violations.append(f"repair: world {index}: the final drain and export failed: {exc!r}")
    progress("torture: checking the store")
    violations += check_store(plane, universe, worlds, evidence)
    violations = list(dict.fromkeys(violations))  # a finding before and after the repair: once
    figures: dict[str, Any] = {
        "seed": seed,
        "seconds": round(run_seconds, 1),
        "processes": len(roles),
        "starts": fleet.starts,
        "kills": sum(fleet.kills.values()),
        **{f"kills_{role}": count for role, count in sorted(fleet.kills.items())},
        "final_kills": fleet.final_kills,
        "items_sent": len(evidence.intents),
        "items_acknowledged": len(evidence.acked),
        "writer_calls_interrupted": evidence.interrupted_calls,
        "items_journaled": _items_journaled(plane, universe, worlds),
        "drains_acknowledged": len(evidence.drains),
        "snapshots_acknowledged": len(evidence.snapshots),
        "promotions_acknowledged": sum(s.promoted for s in evidence.snapshots),
        "segments": sum(len(plane.list_segments(universe, w)) for w in worlds),
        "torn_log_lines": evidence.torn_lines,
        "journal_heights": sum(plane.head(universe, w) for w in worlds),
        "monitor_samples": monitor.samples,
        "monitor_entries_compared": monitor.entries_seen,
    }
    return TortureReport(violations, figures, directory)


def _items_journaled(plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...]) -> int | None:
    """How many items the journals hold (``None`` if one cannot be read)."""
    count = 0
    try:
        for world in worlds:
            for _, entry in plane.read_range(universe, world, 1, plane.head(universe, world)):
                count += isinstance(decode_journal_record(entry), IngressJournalRecord)
    except PersistError:
        return None
    return count


def crash_torture(ctx: Context) -> None:
    """Crash 1: SIGKILL torture of writer, drainer and exporter processes on the shared
    store, then every invariant against what they acknowledged (see the module)."""
    kv_url, objects_url = ctx.store_urls()
    kv_url = kv_url.removeprefix("faults+")  # workers open the plain engine
    check_shared_urls(kv_url, objects_url)
    seed = int.from_bytes(os.urandom(4), "big")
    directory = Path(tempfile.mkdtemp(prefix="aosp-torture-"))
    report = run_torture(
        ctx.plane,
        kv_url,
        objects_url,
        ctx.profile.torture,
        seed=seed,
        directory=directory,
        progress=ctx.progress,
    )
    ctx.notes.update({f"torture_{name}": value for name, value in report.figures.items()})
    if report.violations:
        listed = "\n".join(report.violations[:MAX_LISTED])
        raise ConformanceFailure(
            f"{len(report.violations)} violations (seed {seed}, logs in {directory}):\n{listed}"
        )
    shutil.rmtree(directory, ignore_errors=True)
