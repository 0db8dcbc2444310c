"""What a run of the fault matrix's workload left and reported, made comparable between
runs (inbox sequences by position, ids by placeholders, bytes by digests), and the
comparisons: the fault-free run against the workload's expected effects, a run against
its fault-free reference or twin."""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from conformance.context import check
from conformance.fault_matrix_workload import (
    COMPACT_AT,
    GROUP_ENTRIES,
    SEQUENCED_ENTRIES,
    SNAPSHOT_HEIGHT,
    large_body,
    second_world,
    sequenced_world,
)
from persistence import kv
from persistence.errors import NotFound
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import encode_inbox_item, idempotency_entry
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.keyspace import UniverseKeys, WorldKeys
from persistence.plane import DrainResult, Plane
from persistence.protocols import inbox as inbox_protocol
from persistence.protocols import log as log_protocol
from persistence.protocols.compaction import read_marks
from persistence.protocols.export import read_marker


def normal_outcome(outcome: object, position: dict[InboxSeq, int]) -> object:
    """An outcome with what legitimately differs between runs (sequences) replaced by
    positions in the inbox."""
    if isinstance(outcome, InboxSeq):
        return ("seq", position.get(outcome, str(outcome)))
    if isinstance(outcome, list):
        return [normal_outcome(item, position) for item in outcome]
    if isinstance(outcome, DrainResult):
        return (
            "drain",
            outcome.first_height,
            outcome.count,
            normal_outcome(outcome.cursor, position),
        )
    return outcome


def positions(
    plane: Plane, u: UniverseId, w: WorldId, reported: Iterable[InboxSeq]
) -> dict[InboxSeq, int]:
    """Each inbox sequence by its rank among those the world (and the second world) still
    shows -- items in the inbox, in the journal, the cursor, the consumed marks -- and those
    the run's calls reported (compaction removes consumed items, also ones skipped and never
    journaled)."""
    seqs = set(reported)
    for world in _worlds(plane, u, w).values():
        keys = WorldKeys(u, world)
        seqs.update(seq for seq, _ in plane.read_after(u, world, None, 100))
        for _, entry in plane.read_range(u, world, 1, plane.head(u, world)):
            record = decode_journal_record(entry)
            if isinstance(record, IngressJournalRecord):
                seqs.add(record.seq)
        cursor = plane.inbox_cursor(u, world)
        marks = kv.run(plane.engine, functools.partial(read_marks, keys=keys))
        seqs.update(seq for _, seq in marks)
        if cursor is not None:
            seqs.add(cursor)
    return {seq: i for i, seq in enumerate(sorted(seqs))}


def _worlds(plane: Plane, u: UniverseId, w: WorldId) -> dict[str, WorldId]:
    """The run's world and, once the group append created it, the second world."""
    worlds = {"W": w}
    with contextlib.suppress(NotFound):
        plane.head(u, second_world(w))
        worlds["W2"] = second_world(w)
    return worlds


def reported_seqs(outcome: object) -> Iterator[InboxSeq]:
    """The inbox sequences in a call's reported outcome."""
    if isinstance(outcome, InboxSeq):
        yield outcome
    elif isinstance(outcome, list):
        for item in outcome:
            yield from reported_seqs(item)
    elif isinstance(outcome, DrainResult) and outcome.cursor is not None:
        yield outcome.cursor


def logical_state(
    plane: Plane, u: UniverseId, w: WorldId, position: dict[InboxSeq, int]
) -> dict[str, Any]:
    """What a caller observes of world ``w``, with what legitimately differs between runs
    (inbox sequences, universe and world ids) replaced by ``position`` and placeholders."""
    keys = WorldKeys(u, w)
    second = second_world(w)
    head = plane.head(u, w)
    inbox = plane.read_after(u, w, None, 100)
    cursor = plane.inbox_cursor(u, w)
    notify = kv.run(plane.engine, lambda tr: tr.get(keys.notify_counter()))
    entries = kv.run(plane.engine, lambda tr: tr.get_range(*keys.inbox_idempotency_entries()))
    marks = kv.run(plane.engine, lambda tr: read_marks(tr, keys))

    def placeholders(key: str) -> str:
        return key.replace(str(u), "U").replace(str(w), "W").replace(str(second), "W2")

    labels = {w: "W", second: "W2", sequenced_world(w): "W3"}
    universe_log = [
        (e.position, labels.get(e.world, "other"), e.height, e.tag, digest(e.entry))
        for e in plane.read_log(u, 1, 100)
    ]
    ukeys = UniverseKeys(u)
    queue = kv.run(plane.engine, lambda tr: tr.get_range(*ukeys.log_queue()))
    queued = log_protocol.queued_count(kv.run(plane.engine, lambda tr: tr.get(ukeys.log_queued())))

    objects = [
        (placeholders(info.key), info.size)
        for prefix in (f"cas/{u}/", f"segments/{u}/")
        for info in plane.objects.list(prefix)
    ]
    worlds = _worlds(plane, u, w)
    ready = set(
        drive(
            inbox_protocol.read_ready(plane.engine, UniverseKeys(u), *UniverseKeys(u).ready_range())
        )[0]
    )
    second_cursor = plane.inbox_cursor(u, second) if "W2" in worlds else None
    return {
        "head": head,
        "journal": _journal(plane, u, w, position),
        "second world": _journal(plane, u, second, position) if "W2" in worlds else None,
        "second world cursor": None if second_cursor is None else position[second_cursor],
        "pending without a ready mark": [
            label
            for label, world in worlds.items()
            if world not in ready and plane.read_after(u, world, plane.inbox_cursor(u, world), 1)
        ],
        "inbox": [(position[seq], digest(encode_inbox_item(item))) for seq, item in inbox],
        "idempotency entries": sorted(
            (
                position.get(idempotency_entry(v, "idempotency entry")[0], str(v))
                for _, v in entries
            ),
            key=str,
        ),
        "consumed marks": [(at_ns - COMPACT_AT, position[seq]) for at_ns, seq in marks],
        "cursor": None if cursor is None else position[cursor],
        "notifications": int.from_bytes(notify or b"", "little"),
        "snapshots": plane.list_snapshots(u, w),
        "baseline": plane.active_baseline(u, w),
        "blobs": [
            digest(plane.get(u, Hash.of(b"conformance small blob"))),
            digest(plane.get(u, Hash.of(large_body(plane)))),
        ],
        "objects": objects,
        "segments": [(s.start, s.end, s.entry_count) for s in plane.list_segments(u, w)],
        "export marker": drive(read_marker(plane.engine, WorldKeys(u, w))),
        "pending effects": [(i.world == w, i.intent_hash) for _, i in plane.pending_effects(u)],
        "inflight effects": [
            (i.world == w, i.intent_hash, i.claimed_by) for _, i in plane.inflight_effects(u)
        ],
        "timers": [
            (t.world == w, t.intent_hash, t.deliver_at_ns) for t in plane.due_timers(u, 1 << 62)
        ],
        "universe log": universe_log,
        "universe log head": plane.log_head(u),
        "log queue": (len(queue), queued),
    }


def _journal(
    plane: Plane, u: UniverseId, w: WorldId, position: dict[InboxSeq, int]
) -> list[tuple[int, str, object, str]]:
    """World ``w``'s journal: each drained item by its position, other entries by kind."""
    journal: list[tuple[int, str, object, str]] = []
    for height, entry in plane.read_range(u, w, 1, plane.head(u, w)):
        record = decode_journal_record(entry)
        if isinstance(record, IngressJournalRecord):
            at = position.get(record.seq, str(record.seq))
            journal.append((height, "item", at, digest(record.item)))
        else:
            journal.append(
                (height, "opaque" if record is None else str(record.KIND), None, digest(entry))
            )
    return journal


def digest(data: bytes) -> str:
    """What the state keeps of bytes: enough of their sha256 to compare, none of the bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def check_reference(state: dict[str, Any]) -> None:
    """The fault-free run itself must show the workload's effects exactly once."""
    items = [entry[2] for entry in state["journal"] if entry[1] == "item"]
    check(
        items == [0, 1, 2, 3, 5, 6],
        f"fault-free run journaled inbox positions {items}, not 0-3, 5, 6",
    )
    check(state["head"] == SNAPSHOT_HEIGHT + 5, f"fault-free run ended at head {state['head']}")
    group = state["journal"][SNAPSHOT_HEIGHT + 2]
    second = state["second world"] or []
    check(
        group[3] == digest(GROUP_ENTRIES[0])
        and [entry[1:3] for entry in second] == [("opaque", None), ("item", 7)]
        and second[0][3] == digest(GROUP_ENTRIES[1]),
        f"fault-free run: the group append and the multi-world drain left {group} in the "
        f"world and {second} in the second world",
    )
    check(
        (state["cursor"], state["second world cursor"]) == (6, 7),
        f"fault-free run left the cursors at {state['cursor']}, {state['second world cursor']}",
    )
    check(
        state["notifications"] == 6,
        "fault-free run: six enqueue calls that stored items did not notify six times",
    )
    # Compaction removed the five consumed items and their entries; k1 retried after the
    # window is a new item (position 5), k4 retried inside it was not; k6 is position 6.
    check(
        [position for position, _ in state["inbox"]] == [5, 6],
        f"fault-free run left inbox positions {state['inbox']} after compaction, not [5, 6]",
    )
    check(
        state["idempotency entries"] == [5, 6],
        f"fault-free run left idempotency entries {state['idempotency entries']}, not [5, 6]",
    )
    check(
        state["consumed marks"] == [(0, 4)],
        f"fault-free run left consumed marks {state['consumed marks']}, not [(0, 4)]",
    )
    check(
        state["pending without a ready mark"] == [],
        f"fault-free run: {state['pending without a ready mark']} have items and no ready mark",
    )
    check(state["baseline"].height == SNAPSHOT_HEIGHT, "fault-free run did not promote at 7")
    check(state["segments"] == [(1, 3, 3), (4, 6, 3)], f"segments {state['segments']}")
    logged = [(1, "W3", 1, "sequenced", digest(SEQUENCED_ENTRIES[0]))]
    logged.append((2, "W3", 2, "sequenced", digest(SEQUENCED_ENTRIES[1])))
    check(
        (state["universe log"], state["universe log head"], state["log queue"])
        == (logged, 2, (0, 0)),
        f"fault-free run left the universe log {state['universe log']} at head "
        f"{state['universe log head']}, queue {state['log queue']}: not both sequenced "
        "entries once, in order, and an empty queue",
    )


def state_difference(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    """Each part of ``actual`` that is not as ``expected`` ("" if none)."""
    parts = []
    for name, value in expected.items():
        if actual.get(name) != value:
            parts.append(f"{name}: {_short(actual.get(name))}, fault-free {_short(value)}")
    return "; ".join(parts)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 240 else text[:240] + "..."


def first_misreport(expected: list[tuple[str, object]], got: list[tuple[str, object]]) -> str:
    """The first call whose reported outcome differs ("" if none)."""
    for i, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            return f"call {i} {want[0]!r} reported {_short(have[1])}, twin {_short(want[1])}"
    if len(got) != len(expected):
        return f"{len(got)} calls reported, fault-free twin {len(expected)}"
    return ""
