"""The workers' durable logs and what they acknowledge: intents, acks, drains, snapshots,
segments, attachments and collection passes, read back as :class:`Evidence`."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.context import ConformanceFailure
from conformance.torture.workload import AppendId, ItemId
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.kernel import ReferenceKernel
from persistence.plane import Plane
from segments.restore import load_root

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


def log_files(directory: Path, role: str = "*", ident: str = "*") -> list[Path]:
    """Log files of ``role``/``ident`` (default: every process), each process's in
    incarnation order (``writer-0.10`` after ``writer-0.9``)."""

    def order(path: Path) -> tuple[str, int]:
        process, incarnation = path.name.removesuffix(".jsonl").rsplit(".", 1)
        return process, int(incarnation)

    return sorted(directory.glob(f"{role}-{ident}.*.jsonl"), key=order)


@dataclass(frozen=True, slots=True)
class DrainAck:
    """A drain a drainer saw return (the ``process`` label names the log file)."""

    process: str
    world: int
    first: int
    count: int
    cursor: InboxSeq
    group: int = 1
    """Worlds drained in the same transaction (a drain worker's multi-world drain)."""


@dataclass(frozen=True, slots=True)
class SnapshotAck:
    """A snapshot commit the exporter saw return, and what it reported it changed."""

    world: int
    height: int
    ref: Hash
    indexed: bool
    promoted: bool


@dataclass(frozen=True, slots=True)
class AppendAck:
    """An append an appender saw return, and the height it reported."""

    world: int
    first: int
    retried: bool
    """Reported by ``retry_append_batch`` after an attempt whose outcome was unknown."""


@dataclass(frozen=True, slots=True)
class SegmentAck:
    """A segment the exporter saw exported."""

    world: int
    start: int
    end: int
    checksum: bytes


@dataclass(frozen=True, slots=True)
class AttachmentAck:
    """An attachment put (an external CAS body, :func:`~conformance.torture.workload.attachment`)
    the exporter saw return, and what its put went through."""

    world: int
    height: int
    hash: Hash
    pins: int
    """Times the put pinned the hash: more than once if a collector expired its pin (it then
    found its pin gone at its metadata commit and started over)."""
    waits: int
    """Pauses of the put while a collector's doom on its hash stood."""
    redo: bool
    """A put again of an attachment whose earlier attempt's outcome was unknown (the process
    was killed, or the call raised ``Backend``, after its intent)."""
    stalled: float | None = None
    """Seconds the put stalled after its upload (``None``: it did not), waiting for a
    collector to expire its pin and collect its body (see ``worker.Attachments``)."""
    collected_while_stalled: bool = False
    """Whether a collector did, before the stall's limit."""


@dataclass(frozen=True, slots=True)
class OrphanPass:
    """An orphan collection pass a compactor saw return (after a compaction pass): what it
    reported, as ``CasCollection`` and ``SegmentCollection`` fields."""

    process: str
    cas: dict[str, int]
    segments: dict[str, int]


@dataclass(frozen=True, slots=True)
class RedoAck:
    """A writer call that returned for items the writer had sent before: after an unknown
    outcome (a kill or ``Backend`` after the intent), or deliberately, repeating a call
    already acknowledged. Times are wall-clock seconds (``time.time()``), as the
    compactors' clocks."""

    process: str
    writer: int
    world: int
    items: tuple[tuple[int, InboxSeq], ...]
    """(index, sequence) of each item, as the redo returned them."""
    first_at: float
    """When the first attempt at these items began (its intent)."""
    at: float
    """When the redo returned."""
    acknowledged: bool
    """Whether the call had been acknowledged before (a deliberate redo)."""

    @property
    def seconds(self) -> float:
        """How long after the first attempt began the redo returned."""
        return self.at - self.first_at


@dataclass(frozen=True, slots=True)
class CompactionAck:
    """A compaction pass over every world that a compactor saw return: what it reported."""

    process: str
    transactions: int
    items: int
    idempotency_entries: int


@dataclass
class Evidence:
    """What the processes durably logged."""

    intents: dict[ItemId, int] = field(default_factory=dict)
    """Every item a writer started to enqueue, and the world it was sent to."""
    first_tried: dict[ItemId, float] = field(default_factory=dict)
    """When the first attempt to enqueue each item began (wall-clock seconds)."""
    acked: dict[ItemId, tuple[int, InboxSeq]] = field(default_factory=dict)
    """Every item whose enqueue returned: its world and sequence."""
    drains: list[DrainAck] = field(default_factory=list)
    snapshots: list[SnapshotAck] = field(default_factory=list)
    segments: list[SegmentAck] = field(default_factory=list)
    append_intents: dict[AppendId, int] = field(default_factory=dict)
    """Every entry an appender started to append, and the world it was sent to."""
    appended: dict[AppendId, AppendAck] = field(default_factory=dict)
    redos: list[RedoAck] = field(default_factory=list)
    compactions: list[CompactionAck] = field(default_factory=list)
    attachments: dict[tuple[int, int], AttachmentAck] = field(default_factory=dict)
    """Every acknowledged attachment, by (world, height): the last put that returned."""
    attachment_intents: int = 0
    """Attachment puts begun (redos included)."""
    attachment_stalls: int = 0
    """Attachment puts begun with a stall after their upload (see ``worker.Attachments``)."""
    attachment_acks: list[AttachmentAck] = field(default_factory=list)
    """Every attachment put that returned, in log order."""
    attachments_interrupted: int = 0
    """Attachment puts whose process was killed after logging the intent, before the ack."""
    attachments_blocked: int = 0
    """Attachment puts the exporter gave up waiting on a doom (see
    ``worker.DOOM_WAIT_LIMIT``)."""
    stalls: list[tuple[float, bool]] = field(default_factory=list)
    """Each stall that ended (its put returned or was given up): its seconds and whether a
    collector collected the put's body meanwhile."""
    orphan_passes: list[OrphanPass] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    backend_errors: Counter[str] = field(default_factory=Counter)
    """``Backend`` errors calls raised (outcome unknown; the worker redid the call), by type."""
    retries: dict[str, Counter[int]] = field(
        default_factory=lambda: {"retried": Counter(), "raised": Counter()}
    )
    """Engine errors the retry runners retried and raised, by code, summed over processes."""
    replays: Counter[str] = field(default_factory=Counter)
    """Retries that found their call's record (an applied 1021), by call kind."""
    slowest_call: float = 0.0
    """The longest a call took, in seconds (retries included)."""
    torn_lines: int = 0
    interrupted_calls: int = 0
    """Writer calls whose process was killed after logging the intent, before the ack."""


def read_evidence(directory: Path) -> Evidence:
    """Every log of the run, parsed."""
    evidence = Evidence()
    attempts: Counter[ItemId] = Counter()  # intents logged per writer call (its first item)
    for path in log_files(directory):
        _read_log(evidence, path, attempts)
    return evidence


def _read_log(evidence: Evidence, path: Path, attempts: Counter[ItemId]) -> None:
    """One process's log file: each record; whether it was killed inside a writer call (its
    last line an intent) or an attachment put (its last attachment line an intent); and
    its last counts."""
    records, torn = read_lines(path)
    evidence.torn_lines += torn
    process = path.name.removesuffix(".jsonl")
    in_call = False
    attaching = False
    last_stats: dict[str, Any] = {}
    for record in records:
        if "retries" in record:
            last_stats = record
            continue
        in_call = "intent" in record
        _add_record(evidence, process, record, attempts)
        if "attach" in record or "attached" in record or "attachment_blocked" in record:
            attaching = "attach" in record
            if isinstance(stall := record.get("stall"), dict):  # how a stall ended
                evidence.stalls.append((stall["seconds"], stall["collected"]))
    evidence.interrupted_calls += in_call and process.startswith("writer")
    evidence.attachments_interrupted += attaching
    if last_stats:  # each line holds the process's counts since it started
        _add_stats(evidence, last_stats)


def _add_record(
    evidence: Evidence, process: str, record: dict[str, Any], attempts: Counter[ItemId]
) -> None:
    """One record of ``process``'s log, by the key that says what it is."""
    if "attach" in record:
        evidence.attachment_intents += 1
        evidence.attachment_stalls += record.get("stall", False)
    elif "attached" in record:
        ack = _attachment_ack(record)
        evidence.attachments[(ack.world, ack.height)] = ack
        evidence.attachment_acks.append(ack)
    elif "attachment_blocked" in record:
        evidence.attachments_blocked += 1
    elif "orphans" in record:
        evidence.orphan_passes.append(
            OrphanPass(process, record["orphans"], record["segment_orphans"])
        )
    elif "appender" in record:
        _appender_record(evidence, record)
    elif "intent" in record:
        _writer_intent(evidence, record, attempts)
    elif "ack" in record or "redo" in record:
        _writer_returned(evidence, process, record, attempts)
    elif "compaction" in record:
        evidence.compactions.append(_compaction_ack(process, record))
    elif "drain" in record:
        evidence.drains.append(_drain_ack(process, record))
    elif "snapshot" in record:
        evidence.snapshots.append(_snapshot_ack(record))
    elif "segment" in record:
        evidence.segments.append(_segment_ack(record))
    elif "error" in record:
        evidence.errors.append(f"{process}: {record['error']}")
    elif "backend" in record:
        evidence.backend_errors[record["backend"].split(":")[0]] += 1


def _add_stats(evidence: Evidence, stats: dict[str, Any]) -> None:
    """A process's last counts: engine errors retried and raised, replays, slowest call."""
    for kind, counts in stats["retries"].items():
        evidence.retries[kind].update({int(c): n for c, n in counts.items()})
    evidence.replays.update(stats["replays"])
    evidence.slowest_call = max(evidence.slowest_call, stats["slowest"])


def _attachment_ack(record: dict[str, Any]) -> AttachmentAck:
    """An ``attached`` line of the exporter."""
    stall = record.get("stall")
    return AttachmentAck(
        record["attached"],
        record["height"],
        Hash.parse(record["hash"]),
        record["pins"],
        record["waits"],
        record["redo"],
        None if stall is None else stall["seconds"],
        stall is not None and stall["collected"],
    )


def _appender_record(evidence: Evidence, record: dict[str, Any]) -> None:
    """An appender's intent (the entry and the world it is sent to) or acknowledgement."""
    if "intent" in record:
        evidence.append_intents[(record["appender"], record["intent"])] = record["world"]
    else:
        evidence.appended[(record["appender"], record["appended"])] = AppendAck(
            record["world"], record["first"], record["retried"]
        )


def _writer_intent(evidence: Evidence, record: dict[str, Any], attempts: Counter[ItemId]) -> None:
    """A writer's intent: the items of one attempt at a call, and the world they go to."""
    writer = record["writer"]
    attempts[(writer, record["intent"][0])] += 1
    for n in record["intent"]:
        evidence.intents[(writer, n)] = record["world"]
        evidence.first_tried.setdefault((writer, n), record["at"])


def _writer_returned(
    evidence: Evidence, process: str, record: dict[str, Any], attempts: Counter[ItemId]
) -> None:
    """An ``ack`` (a call returned; a redo if its intent was logged more than once) or a
    ``redo`` (a deliberate repeat of an acknowledged call) line of a writer."""
    writer, world = record["writer"], record["world"]
    items = tuple(
        (n, InboxSeq.parse(seq)) for n, seq in record["ack" if "ack" in record else "redo"]
    )
    first = (writer, items[0][0])
    if "ack" in record:
        evidence.acked.update({(writer, n): (world, seq) for n, seq in items})
        if attempts[first] < 2:
            return
    evidence.redos.append(
        RedoAck(
            process,
            writer,
            world,
            items,
            evidence.first_tried[first],
            record["at"],
            acknowledged="redo" in record,
        )
    )


def _compaction_ack(process: str, record: dict[str, Any]) -> CompactionAck:
    """A ``compaction`` line of a compactor."""
    return CompactionAck(
        process,
        record["transactions"],
        record["items"],
        record["idempotency_entries"],
    )


def _drain_ack(process: str, record: dict[str, Any]) -> DrainAck:
    """A ``drain`` line of a drainer or a drain worker."""
    return DrainAck(
        process,
        record["drain"],
        record["first"],
        record["count"],
        InboxSeq.parse(record["cursor"]),
        record.get("group", 1),
    )


def _snapshot_ack(record: dict[str, Any]) -> SnapshotAck:
    """A ``snapshot`` line of the exporter."""
    return SnapshotAck(
        record["snapshot"],
        record["height"],
        Hash.parse(record["ref"]),
        record["indexed"],
        record["promoted"],
    )


def _segment_ack(record: dict[str, Any]) -> SegmentAck:
    """A ``segment`` line of the exporter."""
    return SegmentAck(
        record["segment"],
        record["start"],
        record["end"],
        bytes.fromhex(record["checksum"]),
    )


@dataclass(frozen=True, slots=True)
class AckedCall:
    """A writer call that was acknowledged, and when its first attempt began."""

    first_at: float
    world: int
    numbers: tuple[int, ...]


@dataclass
class WriterHistory:
    """What a writer's logs say about its calls (read by each incarnation at start)."""

    resume: int
    """The first item whose call has no acknowledgement yet."""
    pending_since: float | None
    """When the first attempt at that call began, if it was attempted (its outcome is
    unknown: the call is redone)."""
    acked: list[AckedCall]
    """The acknowledged calls, oldest first."""


def writer_history(directory: Path, writer: int) -> WriterHistory:
    """``writer``'s calls so far, from its logs."""
    done = -1
    first_at: dict[int, float] = {}
    acked: list[AckedCall] = []
    for path in log_files(directory, "writer", str(writer)):
        for record in read_lines(path)[0]:
            if "intent" in record:
                first_at.setdefault(record["intent"][0], record["at"])
            elif "ack" in record:
                numbers = tuple(n for n, _ in record["ack"])
                acked.append(AckedCall(first_at[numbers[0]], record["world"], numbers))
                done = max(done, *numbers)
    return WriterHistory(done + 1, first_at.get(done + 1), acked)


def append_resume_point(directory: Path, appender: int) -> tuple[int, int | None]:
    """The first entry of ``appender`` not acknowledged yet and, if its last attempt's
    outcome is unknown (the process died or the call raised ``Backend`` after the intent),
    the head that attempt expected: the entry is then either at that head + 1 or nowhere."""
    done, last_intent = -1, None
    for path in log_files(directory, "appender", str(appender)):
        for record in read_lines(path)[0]:
            if "appended" in record:
                done = max(done, record["appended"])
            elif "intent" in record:
                last_intent = record
    if last_intent is None or last_intent["intent"] <= done:
        return done + 1, None
    return done + 1, last_intent["head"]


@dataclass
class AttachmentHistory:
    """What the exporter's logs say about its attachment puts (read by each incarnation)."""

    pending: tuple[int, int] | None = None
    """The (world, height) of the last put if its outcome is unknown: an intent with neither
    an ack nor a give-up after it (the process died, or the call raised ``Backend``)."""
    puts: int = 0
    """Puts begun (intents)."""
    stalls: int = 0
    """Puts begun with a stall."""


def attachment_history(directory: Path) -> AttachmentHistory:
    """The exporter's attachment puts so far, from its logs."""
    history = AttachmentHistory()
    for path in log_files(directory, "exporter"):
        for record in read_lines(path)[0]:
            if "attach" in record:
                history.pending = (record["attach"], record["height"])
                history.puts += 1
                history.stalls += record.get("stall", False)
            elif "attached" in record or "attachment_blocked" in record:
                history.pending = None
    return history


def attachment_resume_point(directory: Path) -> tuple[int, int] | None:
    """The (world, height) of the exporter's last attachment put if its outcome is unknown:
    the next incarnation puts it again, the same bytes, racing the collectors over the body
    the lost attempt may have uploaded."""
    return attachment_history(directory).pending


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
