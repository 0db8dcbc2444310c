"""The fault matrix's competing writers: other clients, each committing between an attempt
of the workload's commit and its retry (the interleaving mode)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Final

from conformance.context import event
from conformance.fault_matrix_workload import EXPORT, after_window, second_world
from persistence.errors import Conflict, NotFound
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from segments.export import Exporter


def _compete_append(other: Plane, u: UniverseId, w: WorldId) -> None:
    other.append_batch(u, w, other.head(u, w), [b"competitor"])


def _compete_drain(other: Plane, u: UniverseId, w: WorldId) -> None:
    other.drain_inbox_to_journal(u, w, max_items=1)


def _compete_enqueue(other: Plane, u: UniverseId, w: WorldId) -> None:
    other.enqueue(u, w, event(99, "competitor"))


def _compete_snapshot(other: Plane, u: UniverseId, w: WorldId) -> None:
    head = other.head(u, w)
    taken = {s.height for s in other.list_snapshots(u, w)}
    if head > other.active_baseline(u, w).height and head not in taken:
        other.snapshot_commit(
            u,
            w,
            b"competitor state at %d" % head,
            height=head,
            logical_time_ns=head,
            receipt_horizon_height=head,
            promote_baseline=True,
        )


def _compete_export(other: Plane, u: UniverseId, w: WorldId) -> None:
    Exporter(other, EXPORT).export_once(u, w)


def _compete_cursor(other: Plane, u: UniverseId, w: WorldId) -> None:
    cursor = other.inbox_cursor(u, w)
    following = other.read_after(u, w, cursor, 1)
    if following:
        other.commit_cursor(u, w, cursor, following[0][0])


def _compete_claim(other: Plane, u: UniverseId, w: WorldId) -> None:
    for seq, _ in other.pending_effects(u, 1):
        other.claim_effect(u, seq, "competitor")


def _compete_drain_worlds(other: Plane, u: UniverseId, w: WorldId) -> None:
    worlds = [w]
    with contextlib.suppress(NotFound):
        other.head(u, second_world(w))
        worlds.append(second_world(w))
    other.drain_worlds(u, worlds, max_items=1)


def _compete_sequenced(other: Plane, u: UniverseId, w: WorldId) -> None:
    """A sequenced append of another world of the universe (it takes log positions)."""
    world = WorldId(uuid.uuid5(w.uuid, "fault-matrix competitor's sequenced world"))
    try:
        head = other.head(u, world)
    except NotFound:
        head = 0
    other.append_sequenced(u, [(world, head, [b"competitor"])], [["c"]], create_missing=True)


def _compete_compact(other: Plane, u: UniverseId, w: WorldId) -> None:
    later = after_window(other)
    other.compact_inbox(u, w, max_items=1, now_ns=lambda: later)


SEQUENCED_COMPETITOR: Final = "sequenced append"
"""The competitor that takes universe log positions (every commit of the workload's
sequenced appends meets it, in every profile)."""

COMPETITORS: Final[dict[str, Callable[[Plane, UniverseId, WorldId], None]]] = {
    "append": _compete_append,
    "drain": _compete_drain,
    "enqueue": _compete_enqueue,
    "snapshot and promotion": _compete_snapshot,
    "export step": _compete_export,
    "cursor commit": _compete_cursor,
    "effect claim": _compete_claim,
    "inbox compaction": _compete_compact,
    "multi-world drain": _compete_drain_worlds,
    SEQUENCED_COMPETITOR: _compete_sequenced,
}
"""Other clients, each committing between an attempt of the workload's commit and its retry
(the interleaving mode): a plane without faults on the same engine, world and universe."""


def competitor(kind: str, other: Plane, u: UniverseId, w: WorldId) -> Callable[[], None]:
    """The commit of the competing writer ``kind`` on ``other``, to make between the tries."""

    def compete() -> None:
        with contextlib.suppress(Conflict, NotFound):  # the same in both runs of a pair
            COMPETITORS[kind](other, u, w)

    return compete
