"""The workers' durable logs and what they acknowledge: intents, acks, drains, snapshots
and segments, read back as :class:`Evidence`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.cases import ConformanceFailure
from conformance.torture.workload import ItemId
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
