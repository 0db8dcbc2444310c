"""The checks run on the store after the torture, against the evidence: right after the
last kill (:func:`check_pending`), and after a final clean drain and export
(:func:`check_store`, with :mod:`~conformance.torture.orphan_checks` and
:mod:`~conformance.torture.restore_checks`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from conformance.torture.evidence import Evidence
from conformance.torture.orphan_checks import check_attachments, check_cas_bodies
from conformance.torture.reads import (
    Inbox,
    Journal,
    inbox_or_violation,
    read_journal,
    ready_worlds,
)
from conformance.torture.restore_checks import check_restore, check_segments, check_snapshots
from conformance.torture.workload import AppendId, ItemId, idempotency_key
from persistence.ids import InboxSeq, UniverseId, WorldId
from persistence.plane import Plane


def _check_inbox(inbox: Inbox, index: int, violations: list[str]) -> None:
    """Compaction removes an item only at or below the cursor, and always with its
    idempotency entry: no entry names a removed item, no item lacks its entry (a retry
    would enqueue it again)."""
    for key, seq in sorted(inbox.entries.items()):
        if seq in inbox.items:
            continue
        if inbox.cursor is None or seq > inbox.cursor:
            violations.append(
                f"removed: world {index}: item {seq} (key {key!r}) above the cursor "
                f"{inbox.cursor} is gone from the inbox, its idempotency entry remains"
            )
        else:
            violations.append(
                f"compaction: world {index}: the idempotency entry {key!r} names item {seq}, "
                "which was removed without it"
            )
    for seq, item_key in sorted(inbox.items.items()):
        if item_key is not None and inbox.entries.get(item_key) != seq:
            held = inbox.entries.get(item_key)
            violations.append(
                f"dedup: world {index}: item {seq} is in the inbox but its idempotency entry "
                f"{item_key!r} {'is gone' if held is None else f'names {held}'}: a retry would "
                "enqueue it again"
            )


def check_pending(
    plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...], evidence: Evidence
) -> list[str]:
    """Right after the last kill, before anything repairs the store: every acknowledged item
    is journaled once or pending after the cursor, never both, never neither (one missing
    above the cursor was *removed*: compacted before it was drained); the inbox is as
    compaction may leave it (:func:`_check_inbox`); a world with items after its cursor has
    its ready mark."""
    violations: list[str] = []
    ready = ready_worlds(plane, universe)
    for index, world in enumerate(worlds):
        journal = read_journal(plane, universe, world, index, violations)
        if journal is None:
            continue
        journaled = Counter(seq for _, seq, _ in journal.items)
        inbox = inbox_or_violation(plane, universe, world, index, violations)
        if inbox is None:
            continue
        _check_inbox(inbox, index, violations)
        pending = inbox.pending()
        if pending and world not in ready:
            violations.append(
                f"ready: world {index} has {len(pending)} items after its cursor and no ready "
                "mark: no drain worker would find them"
            )
        for item_key, (target, seq) in sorted(evidence.acked.items()):
            if target != index:
                continue
            where = f"acknowledged item w{item_key[0]}#{item_key[1]} (world {index}, seq {seq})"
            if journaled[seq] and seq in pending:
                violations.append(
                    f"pending: {where} is journaled and also pending after the cursor"
                )
            elif not journaled[seq] and seq not in pending:
                if inbox.cursor is None or seq > inbox.cursor:
                    violations.append(
                        f"removed: {where} is not journaled and gone from the inbox above the "
                        f"cursor {inbox.cursor}"
                    )
                else:
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
    compacted: InboxTally | None = InboxTally()
    ready = ready_worlds(plane, universe)
    for index, world in enumerate(worlds):
        if world in ready:
            violations.append(
                f"ready: world {index} is still marked ready after the final drain found its "
                "inbox empty"
            )
    for index, world in enumerate(worlds):
        journal = read_journal(plane, universe, world, index, violations)
        inbox = inbox_or_violation(plane, universe, world, index, violations)
        compacted = (
            None
            if compacted is None or journal is None or inbox is None
            else (compacted + InboxTally.of(journal, inbox))
        )
        if journal is None:
            unreadable.add(index)
            continue
        _check_items(journal, index, evidence, placed, violations)
        _check_appends(journal, index, evidence, violations)
        _check_drains(plane, universe, world, journal, index, evidence, violations)
        check_snapshots(plane, universe, world, journal, index, evidence, violations)
        check_segments(plane, universe, world, index, evidence, violations)
        check_restore(plane, universe, world, index, violations)
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
    _check_redos(evidence, plane.config.inbox_retention_seconds, violations)
    if compacted is not None:
        _check_compaction_reports(evidence, compacted, violations)
    check_attachments(plane, universe, evidence, violations)
    check_cas_bodies(plane, universe, violations)
    return violations


@dataclass(frozen=True, slots=True)
class InboxTally:
    """What compaction did to journaled items: the items gone from the inbox and the
    idempotency entries gone with them, out of the items journaled."""

    items_journaled: int = 0
    items_removed: int = 0
    entries_removed: int = 0

    @classmethod
    def of(cls, journal: Journal, inbox: Inbox) -> InboxTally:
        """One world's tally."""
        removed = [(seq, key) for _, seq, key in journal.items if seq not in inbox.items]
        entries = sum(
            inbox.entries.get(idempotency_key(*key)) != seq
            for seq, key in removed
            if key is not None
        )
        return cls(len(journal.items), len(removed), entries)

    def __add__(self, other: InboxTally) -> InboxTally:
        return InboxTally(
            self.items_journaled + other.items_journaled,
            self.items_removed + other.items_removed,
            self.entries_removed + other.entries_removed,
        )


def inbox_tally(
    plane: Plane, universe: UniverseId, worlds: tuple[WorldId, ...]
) -> InboxTally | None:
    """Every world's tally (``None`` if a journal cannot be read whole)."""
    total = InboxTally()
    for index, world in enumerate(worlds):
        unread: list[str] = []
        journal = read_journal(plane, universe, world, index, unread)
        inbox = inbox_or_violation(plane, universe, world, index, unread)
        if journal is None or inbox is None:
            return None
        total += InboxTally.of(journal, inbox)
    return total


def _check_redos(evidence: Evidence, window: float, violations: list[str]) -> None:
    """Every redo returned inside the window (else the run's window is shorter than its
    redos take, and nothing it says about deduplication holds), and every redo of an
    acknowledged call got the sequences the call was acknowledged with."""
    for redo in evidence.redos:
        first_n = redo.items[0][0]
        name = f"{redo.process}'s redo of w{redo.writer}#{first_n}"
        if redo.seconds >= window:
            violations.append(
                f"window: {name} returned {redo.seconds:.1f} s after the first attempt began, "
                f"beyond the run's {window:g} s window (raise the torture's retention)"
            )
            continue
        for n, seq in redo.items:
            acked = evidence.acked.get((redo.writer, n))
            if redo.acknowledged and acked is not None and acked[1] != seq:
                violations.append(
                    f"dedup: {name} {redo.seconds:.1f} s after the first attempt (inside the "
                    f"{window:g} s window) got seq {seq} for w{redo.writer}#{n}, acknowledged "
                    f"with {acked[1]}"
                )


def _check_compaction_reports(
    evidence: Evidence, compacted: InboxTally, violations: list[str]
) -> None:
    """The compactors reported no more than the store lost: each acknowledged pass's
    removals are its own (a retry after an applied 1021 reports the first attempt's)."""
    items = sum(ack.items for ack in evidence.compactions)
    entries = sum(ack.idempotency_entries for ack in evidence.compactions)
    if items > compacted.items_removed or entries > compacted.entries_removed:
        violations.append(
            f"compaction: passes reported removing {items} items and {entries} idempotency "
            f"entries; the inboxes lost {compacted.items_removed} journaled items and "
            f"{compacted.entries_removed} of their entries"
        )


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


def _check_appends(journal: Journal, index: int, evidence: Evidence, violations: list[str]) -> None:
    """Each entry an appender wrote is in the journal at most once, was sent to this world,
    and (if its append returned) sits at the height the call reported; an appender's
    entries follow its order."""
    heights: dict[AppendId, list[int]] = defaultdict(list)
    for height, key in journal.appends:
        heights[key].append(height)
    for key, at in sorted(heights.items()):
        name = f"appended entry a{key[0]}#{key[1]} at world {index} heights {at}"
        if len(at) > 1:
            violations.append(f"duplicate: {name} is journaled {len(at)} times")
        if key not in evidence.append_intents:
            violations.append(f"phantom: {name} was never sent by an appender")
        elif evidence.append_intents[key] != index:
            violations.append(f"misrouted: {name} was sent to world {evidence.append_intents[key]}")
    for key, ack in sorted(evidence.appended.items()):
        if ack.world != index:
            continue
        if heights.get(key) != [ack.first]:
            how = "reported by a retry" if ack.retried else "reported"
            violations.append(
                f"append: a{key[0]}#{key[1]} was {how} at world {index} height {ack.first}; "
                f"the journal holds it at {heights.get(key, [])}"
            )
    last: dict[int, tuple[int, int]] = {}
    for height, (appender, n) in journal.appends:
        before = last.get(appender)
        if before is not None and n <= before[1]:
            violations.append(
                f"order: world {index}: appender {appender}'s entry {n} at height {height} "
                f"follows its entry {before[1]} at height {before[0]}"
            )
        last[appender] = (height, n)


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
