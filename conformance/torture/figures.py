"""The figures a torture run reports (kills, what the workers' logs say they did, what
compaction and orphan collection did, what the store holds, what the servers went
through), and when a run is long enough that they must show compaction and an orphan
collection pass."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from conformance.torture.checks import InboxTally
from conformance.torture.evidence import Evidence
from conformance.torture.fleet import Fleet
from conformance.torture.killer import Killer
from conformance.torture.orphan_checks import OrphanTally
from conformance.torture.servers import ServerFaults
from persistence.fdb_errors import ERROR_DESCRIPTIONS
from persistence.ids import UniverseId, WorldId
from persistence.plane import Plane
from persistence.protocols.compaction import MARKS_PER_WINDOW

COMPACTION_SLACK_SECONDS: Final = 5.0
"""Time for the processes to start and drain a first item, and for a compactor killed
meanwhile to come back (see :func:`compaction_due`)."""


def compaction_due(seconds: float, window: float) -> bool:
    """Whether a run of ``seconds`` must have compacted something: items drained in its
    first :data:`COMPACTION_SLACK_SECONDS` are marked within a sixteenth of the window (plus
    a pass interval) and removed one window later."""
    return seconds >= window * (1 + 2 / MARKS_PER_WINDOW) + COMPACTION_SLACK_SECONDS


def orphan_collection_due(seconds: float, grace: float) -> bool:
    """Whether a run of ``seconds`` must have acknowledged an orphan collection pass: the
    compactors start one after each compaction pass, the first within
    :data:`COMPACTION_SLACK_SECONDS`; its pins are those of puts at least ``grace`` old."""
    return seconds >= COMPACTION_SLACK_SECONDS + grace


def kill_figures(fleet: Fleet, killer: Killer) -> dict[str, int]:
    """Kills so far: of worker processes (by role) and, with server faults, of servers."""
    kills = {
        "kills": sum(fleet.kills.values()),
        **{f"kills_{role}": count for role, count in sorted(fleet.kills.items())},
    }
    if killer.servers is not None:
        kills["server_kills"] = killer.server_kills
    return kills


def evidence_figures(evidence: Evidence) -> dict[str, Any]:
    """What the workers' logs say they did (readable while they run)."""
    redos = [r.seconds for r in evidence.redos if not r.acknowledged]
    repeats = [r.seconds for r in evidence.redos if r.acknowledged]
    return {
        "items_sent": len(evidence.intents),
        "items_acknowledged": len(evidence.acked),
        "writer_calls_interrupted": evidence.interrupted_calls,
        "writer_redos_after_unknown_outcome": len(redos),
        "slowest_redo_seconds": round(max(redos, default=0.0), 3),
        "writer_redos_of_acknowledged_calls": len(repeats),
        "oldest_redo_of_acknowledged_call_seconds": round(max(repeats, default=0.0), 3),
        "compaction_passes": len(evidence.compactions),
        "compaction_transactions": sum(c.transactions for c in evidence.compactions),
        "compaction_items_reported": sum(c.items for c in evidence.compactions),
        "compaction_entries_reported": sum(c.idempotency_entries for c in evidence.compactions),
        "appends_acknowledged": len(evidence.appended),
        "appends_retried_after_unknown_outcome": sum(a.retried for a in evidence.appended.values()),
        "drains_acknowledged": len(evidence.drains),
        "drains_acknowledged_by_drain_workers": sum(
            d.process.startswith("drainworker") for d in evidence.drains
        ),
        "multi_world_drains_acknowledged": sum(d.group > 1 for d in evidence.drains),
        "snapshots_acknowledged": len(evidence.snapshots),
        "promotions_acknowledged": sum(s.promoted for s in evidence.snapshots),
        "torn_log_lines": evidence.torn_lines,
        "calls_failed_backend": dict(sorted(evidence.backend_errors.items())),
        "engine_errors_retried": _by_code(evidence.retries["retried"]),
        "engine_errors_raised": _by_code(evidence.retries["raised"]),
        "retries_that_found_their_call_applied": dict(sorted(evidence.replays.items())),
        "slowest_call_seconds": evidence.slowest_call,
    }


def orphan_figures(
    evidence: Evidence, final: OrphanTally | None, seconds: float, grace: float
) -> dict[str, Any]:
    """What the exporter's attachment puts went through, what the compactors' collection
    passes reported, and what the final clean pass found left."""
    cas: Counter[str] = Counter()
    segments: Counter[str] = Counter()
    for done in evidence.orphan_passes:
        cas.update(done.cas)
        segments.update(done.segments)
    acks = evidence.attachment_acks
    return {
        "attachments_acknowledged": len(evidence.attachments),
        "attachment_puts": evidence.attachment_intents,
        "attachment_puts_interrupted": evidence.attachments_interrupted,
        "attachment_redos_after_unknown_outcome": sum(a.redo for a in acks),
        "attachment_puts_pinned_again": sum(a.pins > 1 for a in acks),
        "attachment_puts_waited_on_a_doom": sum(a.waits > 0 for a in acks),
        "attachment_puts_given_up_on_a_doom": evidence.attachments_blocked,
        "attachment_puts_stalled": evidence.attachment_stalls,
        "attachment_stalls_collected": sum(collected for _, collected in evidence.stalls),
        "attachment_stalls_not_collected": sum(not c for _, c in evidence.stalls),
        "slowest_stall_collected_seconds": max(
            (seconds for seconds, collected in evidence.stalls if collected), default=0.0
        ),
        "orphan_grace_seconds": grace,
        "orphan_collection_due": orphan_collection_due(seconds, grace),
        "orphan_passes": len(evidence.orphan_passes),
        "orphan_bodies_collected": cas["collected"],
        "orphan_bytes_collected": cas["collected_bytes"],
        "orphan_bodies_seen_pinned": cas["pinned"],
        "orphan_pins_expired": cas["pins_expired"],
        "orphan_bodies_abandoned": cas["abandoned"],
        "orphan_dooms_resumed": cas["dooms_resumed"],
        "orphan_dooms_settled": cas["dooms_settled"],
        "orphan_segment_objects_collected": segments["collected"],
        "orphan_export_markers_cleared": segments["markers_cleared"],
        **(
            {}
            if final is None
            else {
                "orphan_bodies_left": final.cas.collected,
                "orphan_pins_left": final.cas.pins_expired,
                "orphan_dooms_left": final.dooms,
                "orphan_segment_objects_left": final.segments.collected,
                "orphan_export_markers_left": final.segments.markers_cleared,
            }
        ),
    }


def compaction_figures(tally: InboxTally | None, window: float, due: bool) -> dict[str, Any]:
    """What compaction did to the journaled items (``None``: a journal could not be read)."""
    return {
        "items_journaled": None if tally is None else tally.items_journaled,
        "compaction_window_seconds": window,
        "compaction_due": due,
        "items_compacted": None if tally is None else tally.items_removed,
        "idempotency_entries_compacted": None if tally is None else tally.entries_removed,
    }


def store_figures(
    plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...]
) -> dict[str, int]:
    """The segments and the journal heights the run's worlds hold at the end."""
    return {
        "segments": sum(len(plane.list_segments(universe, w)) for w in worlds),
        "journal_heights": sum(plane.head(universe, w) for w in worlds),
    }


def server_figures(servers: ServerFaults, killer: Killer, began_wall: float) -> dict[str, Any]:
    """The servers killed (by kind), the kills put off, and the recoveries the servers
    logged since the run began (where they can tell)."""
    recoveries = servers.recoveries(began_wall)
    figures: dict[str, Any] = {
        "servers_killed": dict(sorted(killer.servers_killed.items())),
        "server_kills_postponed": killer.server_kills_postponed,
    }
    if recoveries is not None:
        figures["recoveries"] = len(recoveries)
        figures["slowest_recovery_seconds"] = round(max(recoveries, default=0.0), 3)
    return figures


def _by_code(counts: Counter[int]) -> dict[str, int]:
    """Error counts keyed by ``code name``."""
    return {f"{code} {ERROR_DESCRIPTIONS.get(code, '?')}": n for code, n in sorted(counts.items())}
