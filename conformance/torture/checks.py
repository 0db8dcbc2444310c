"""The checks run on the store after the torture, against the evidence."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from conformance.torture.evidence import Evidence
from conformance.torture.workload import (
    AppendId,
    ItemId,
    append_id,
    attachment,
    idempotency_key,
    item_id,
)
from persistence import kv
from persistence.errors import CorruptRecord, PersistError
from persistence.fdbtuple import unpack
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import InboxEnvelope, idempotency_entry
from persistence.journal_records import (
    BaselineSnapshotJournalRecord,
    IngressJournalRecord,
    SnapshotJournalRecord,
    decode_journal_record,
)
from persistence.kernel import ReferenceKernel
from persistence.keyspace import UniverseKeys, WorldKeys, seq_in_key
from persistence.plane import Plane, cas_collection
from persistence.plane.cas_collection import CasCollection
from persistence.protocols import cas_bodies
from persistence.protocols import inbox as inbox_protocol
from persistence.records import SnapshotRecord, decode_record
from segments.collect import SegmentCollection, collect_world
from segments.restore import full_replay, load_root, restore

PAGE_ROWS: Final = 1_000
"""Rows read per transaction when the checks read an inbox."""

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
    appends: list[tuple[int, AppendId]] = field(default_factory=list)
    """(height, id) of each entry an appender wrote, in height order."""


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
            elif record is None and (appended := append_id(entry)) is not None:
                journal.appends.append((height, appended))
            else:
                violations.append(f"journal: world {index}: entry {height} is not a plane record")
        except PersistError as exc:
            violations.append(f"journal: world {index}: entry {height} does not decode: {exc!r}")
    return journal


@dataclass
class Inbox:
    """One world's inbox as stored: the cursor, every item left (compaction removes
    consumed ones) with its idempotency key, and every idempotency entry."""

    cursor: InboxSeq | None
    items: dict[InboxSeq, bytes | None]
    entries: dict[bytes, InboxSeq]

    def pending(self) -> set[InboxSeq]:
        """The items after the cursor."""
        return {seq for seq in self.items if self.cursor is None or seq > self.cursor}


def read_inbox(plane: Plane, universe: UniverseId, world: WorldId) -> Inbox:
    """The world's inbox, read in pages (the store is quiet: no process runs)."""
    keys = WorldKeys(universe, world)
    items: dict[InboxSeq, bytes | None] = {}
    for key, value in _rows(plane, *keys.inbox_after(None)):
        seq = seq_in_key(key, keys.inbox_prefix_len(), "inbox entry key")
        items[seq] = decode_record(InboxEnvelope, value, "inbox entry").idempotency_key
    entries: dict[bytes, InboxSeq] = {}
    for key, value in _rows(plane, *keys.inbox_idempotency_entries()):
        try:
            element = unpack(key, keys.prefix_len())[-1]
        except ValueError:
            element = None
        if not isinstance(element, bytes):
            raise CorruptRecord("idempotency entry key", f"{key.hex()} does not end with a key")
        entries[element] = idempotency_entry(value, "idempotency entry")[0]
    return Inbox(plane.inbox_cursor(universe, world), items, entries)


@kv.transactional
async def _page(tr: kv.Transaction, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    return list(await tr.get_range(begin, end, limit=PAGE_ROWS, snapshot=True))


def _read_inbox(
    plane: Plane, universe: UniverseId, world: WorldId, index: int, violations: list[str]
) -> Inbox | None:
    """The world's inbox, or ``None`` (and a violation) if it cannot be read."""
    try:
        return read_inbox(plane, universe, world)
    except PersistError as exc:
        violations.append(f"inbox: world {index}: the read failed: {exc!r}")
        return None


def _rows(plane: Plane, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every row of ``[begin, end)``, a page per transaction."""
    while rows := drive(_page(plane.engine, begin, end)):
        yield from rows
        if len(rows) < PAGE_ROWS:
            return
        begin = rows[-1][0] + b"\x00"


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
        inbox = _read_inbox(plane, universe, world, index, violations)
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


def ready_worlds(plane: Plane, universe: UniverseId) -> set[WorldId]:
    """The worlds of ``universe`` whose ready mark is set (the pending-work index)."""
    keys = UniverseKeys(universe)
    after, end = keys.ready_range()
    found: set[WorldId] = set()
    page: bytes | None = after
    while page is not None:
        worlds, page = drive(inbox_protocol.read_ready(plane.engine, keys, page, end))
        found.update(worlds)
    return found


@dataclass(frozen=True, slots=True)
class OrphanTally:
    """What the final clean collection pass found: what the killed processes left."""

    cas: CasCollection
    segments: SegmentCollection
    dooms: int
    """Dooms left after it: of collectors killed (or failing) between their decision and
    its end, standing until their lease runs out, and deleted ones kept while they settle
    (``cas_bodies.SETTLE_SECONDS``, if the protocol keeps them)."""


def collect_orphans(
    plane: Plane,
    universe: UniverseId,
    worlds: tuple[WorldId, ...],
    grace: float,
    violations: list[str],
) -> OrphanTally | None:
    """A clean collection pass once every process is dead, on a clock ``grace`` ahead (as
    if it ran that much later: every pin a killed put left has expired), then a dry run:
    nothing may be left collectable -- every orphan is gone but those under another
    collector's doom. ``None`` (and a violation) if a pass fails."""
    grace_ns = round(grace * cas_bodies.NS)

    def later() -> int:
        return plane.clock() + grace_ns

    try:
        cas = cas_collection.collect(plane.engine, plane.objects, universe, later, grace)
        segments = SegmentCollection()
        for world in worlds:
            segments += collect_world(plane, universe, world)
        left = cas_collection.collect(
            plane.engine, plane.objects, universe, later, grace, dry_run=True
        )
        left_segments = SegmentCollection()
        for world in worlds:
            left_segments += collect_world(plane, universe, world, dry_run=True)
        dooms = sum(1 for _ in _rows(plane, *UniverseKeys(universe).cas_dooms()))
    except PersistError as exc:
        violations.append(f"orphans: the final collection failed: {exc!r}")
        return None
    if left.collected or left_segments.collected or left_segments.markers_cleared:
        violations.append(
            f"orphans: after the final collection {left.collected} CAS bodies, "
            f"{left_segments.collected} segment objects and {left_segments.markers_cleared} "
            "finished export markers are still collectable"
        )
    return OrphanTally(cas, segments, dooms)


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
        inbox = _read_inbox(plane, universe, world, index, violations)
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
    _check_redos(evidence, plane.config.inbox_retention_seconds, violations)
    if compacted is not None:
        _check_compaction_reports(evidence, compacted, violations)
    _check_attachments(plane, universe, evidence, violations)
    _check_cas_bodies(plane, universe, violations)
    return violations


def _check_attachments(
    plane: Plane, universe: UniverseId, evidence: Evidence, violations: list[str]
) -> None:
    """No referenced object deleted: every acknowledged attachment put returned the hash of
    its bytes, and reads back as exactly those bytes (``get`` verifies the body against the
    hash), whatever the collectors did meanwhile."""
    for (index, height), ack in sorted(evidence.attachments.items()):
        data = attachment(index, height)
        name = f"attachment of world {index} at height {height} ({ack.hash.hex[:16]})"
        if ack.hash != Hash.of(data):
            violations.append(
                f"orphans: the put of the {name} returned a hash that is not its bytes' "
                f"({Hash.of(data).hex[:16]})"
            )
            continue
        try:
            stored = plane.get(universe, ack.hash)
        except PersistError as exc:
            violations.append(f"orphans: the acknowledged {name} is unreadable: {exc!r}")
            continue
        if stored != data:
            violations.append(f"orphans: the acknowledged {name} reads back other bytes")


def _check_cas_bodies(plane: Plane, universe: UniverseId, violations: list[str]) -> None:
    """No CAS metadata of the run's universe names a missing body, or one that does not
    hash to its key (``get`` verifies), whatever the collectors deleted."""
    keys = UniverseKeys(universe)
    begin, end = keys.cas_meta_range()
    prefix = len(begin) - 1
    while rows := drive(_page(plane.engine, begin, end)):
        for key, _ in rows:
            (digest,) = unpack(key, prefix)
            hash = Hash(digest)  # type: ignore[arg-type]
            try:
                plane.get(universe, hash)
            except PersistError as exc:
                violations.append(f"orphans: the CAS body {hash.hex[:16]} is unreadable: {exc!r}")
        begin = rows[-1][0] + b"\x00"


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
        inbox = _read_inbox(plane, universe, world, index, unread)
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
    promotions = Counter(record.height for _, record in journal.baselines)
    reported_indexed: Counter[int] = Counter()
    reported_promoted: Counter[int] = Counter()
    for ack in evidence.snapshots:
        if ack.world != index:
            continue
        reported_indexed[ack.height] += ack.indexed
        reported_promoted[ack.height] += ack.promoted
        if ack.promoted and ack.height > active.height:
            violations.append(
                f"baseline: world {index}: promotion to {ack.height} was acknowledged, the "
                f"active baseline is at {active.height}"
            )
    for height, count in sorted(reported_indexed.items()):
        if count > 1:
            violations.append(
                f"snapshot: world {index}: {count} calls reported indexing height {height}"
            )
    for height, count in sorted(reported_promoted.items()):
        if count > promotions[height]:
            violations.append(
                f"baseline: world {index}: {count} calls reported promoting height {height}, "
                f"the journal records {promotions[height]} promotions to it"
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
