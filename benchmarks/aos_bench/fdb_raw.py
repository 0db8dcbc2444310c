"""The floor of the fdb suite: each plane call's minimal transaction, written with the
``fdb`` bindings alone on keys of the plane's layout (entries sealed with their checksums
as the plane stores them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from backends.kv.fdb import FdbEngine
from persistence.inbox_records import InboxCursor, InboxEnvelope
from persistence.journal_records import JOURNAL_HEAD, ingress_bytes
from persistence.keyspace import UniverseKeys, WorldKeys, height_keys, seq_in_key
from persistence.log_records import LOG_HEAD, log_records
from persistence.protocols.checksums import CRC32C, SEAL_BYTES
from persistence.records import decode_record

seal: Final = CRC32C.seal
"""How a new store (layout 4) seals each entry."""
NOTIFY: Final = (1).to_bytes(8, "little")
READY: Final = bytes(10) + (0).to_bytes(4, "little")


def opened_entry(key: bytes, value: bytes) -> bytes:
    """An entry as stored under ``key``, its seal checked (one CRC over key and value gives
    the residue) and taken off; ``ValueError`` if it does not check (or is shorter than a
    seal)."""
    if len(value) < SEAL_BYTES or CRC32C.crc(value, CRC32C.crc(key)) != CRC32C.residue:
        raise ValueError(f"entry {key.hex()}: its checksum does not match")
    return value[:-SEAL_BYTES]


def _raw_key(keys: WorldKeys, index: int) -> bytes:
    return keys.inbox_item_with_versionstamp(index)


def _journal(tr: Any, keys: WorldKeys, head: int, entries: list[bytes]) -> None:
    """Write ``entries`` above ``head``, sealed as the plane stores them, and the new head."""
    for key, entry in zip(
        height_keys(keys.whole_entry_key(), keys.entry_prefix_len(), head + 1, len(entries)),
        entries,
        strict=True,
    ):
        tr[key] = seal(key, entry)
    tr[keys.head()] = JOURNAL_HEAD.encode(head + len(entries))


class Raw:
    """The minimal transactions, with the bindings alone (retried through ``on_error``).
    With ``library_waits``, a thread waits for the commit in libfdb_c
    (``fdb_future_block_until_ready``), as the plane's engine waits off the main thread,
    instead of through the bindings' callback and semaphore."""

    def __init__(self, engine: FdbEngine, *, library_waits: bool = False) -> None:
        self.fdb = engine._fdb
        self.db = engine._db
        self.library_waits = library_waits

    def _run(self, body: Callable[[Any], None]) -> None:
        tr = self.db.create_transaction()
        while True:
            try:
                body(tr)
                self._ready(tr.commit()).wait()
                return
            except self.fdb.FDBError as exc:
                self._ready(tr.on_error(exc)).wait()

    def _ready(self, future: Any) -> Any:
        """``future``, waited for in libfdb_c first if :attr:`library_waits`."""
        if self.library_waits and not future.is_ready():
            future.capi.fdb_future_block_until_ready(future.fpointer)
        return future

    def head(self, tr: Any, keys: WorldKeys) -> int:
        """The world's head, read in ``tr`` (waited for as :attr:`library_waits` says)."""
        return JOURNAL_HEAD.decode(bytes(self._ready(tr[keys.head()])), "head")

    def append(self, keys: WorldKeys, entries: list[bytes]) -> None:
        def body(tr: Any) -> None:
            _journal(tr, keys, self.head(tr, keys), entries)

        self._run(body)

    def append_new(
        self,
        universe: UniverseKeys,
        keys: WorldKeys,
        entries: list[bytes],
        tags: list[str] | None,
    ) -> int:
        """The least a save of a new aggregate does, taking its notification ids in its
        own transaction: the world's head (absent: 0) and, with ``tags``, the universe log's
        head read together with conflicts; the entries and the new head; with ``tags`` a
        log record per entry at the next positions (gapless, in commit order) and the new
        log head. No world record, genesis, call record or queue: a world of the plane
        has those, this one not. A retry that finds the entries in place (an attempt whose
        commit's outcome was unknown committed) does nothing; a head found elsewhere is
        ``RuntimeError``. The first position (0 without ``tags``)."""
        first = 0
        top = len(entries)

        def body(tr: Any) -> None:
            nonlocal first
            head_read = tr[keys.head()]
            log_read = tr[universe.log_head()] if tags is not None else None
            head = JOURNAL_HEAD.decode(bytes(head_read), "head") if head_read.present() else 0
            if head == top:  # this call's earlier attempt committed: its position stands
                key = height_keys(keys.whole_entry_key(), keys.entry_prefix_len(), 1, 1)[0]
                stored = tr[key]
                if stored.present() and bytes(stored) == seal(key, entries[0]):
                    return
            if head != 0:
                raise RuntimeError(f"world {keys.world}: head {head}, expected a new world")
            _journal(tr, keys, head, entries)
            if log_read is None or tags is None:
                return
            after = LOG_HEAD.decode(bytes(log_read), "log head") if log_read.present() else 0
            records = log_records(keys.world, 1, tags)
            positions = height_keys(universe.log_entry, universe.log_prefix_len(), after + 1, top)
            for key, record in zip(positions, records, strict=True):
                tr[key] = record
            tr[universe.log_head()] = LOG_HEAD.encode(after + top)
            first = after + 1

        self._run(body)
        return first

    def enqueue(self, keys: WorldKeys, envelope: bytes) -> bytes:
        """Enqueue ``envelope``; return its commit's versionstamp, which the item's sequence
        is made of (the plane's enqueue returns the sequence)."""
        stamp: list[Any] = []

        def body(tr: Any) -> None:
            tr.set_versionstamped_key(_raw_key(keys, 0), envelope)
            tr.add(keys.notify_counter(), NOTIFY)
            tr.set_versionstamped_value(keys.ready(), READY)
            stamp[:] = [tr.get_versionstamp()]

        self._run(body)
        return bytes(self._ready(stamp[0]).wait())

    def drain(self, keys: WorldKeys, max_items: int) -> int:
        taken = [0]

        def body(tr: Any) -> None:
            cursor_read, head_read = tr.snapshot[keys.inbox_cursor()], tr.snapshot[keys.head()]
            ready = tr.snapshot[keys.ready()]
            raw_cursor = cursor_read.value
            after = None if raw_cursor is None else decode_record(InboxCursor, raw_cursor, "c").seq
            head = JOURNAL_HEAD.decode(bytes(head_read), "head")
            rows = list(
                tr.snapshot.get_range(
                    *keys.inbox_after(after),
                    limit=max_items + 1,
                    streaming_mode=self.fdb.StreamingMode.exact,
                )
            )
            items = rows[:max_items]
            taken[0] = len(items)
            if not items:
                return
            prefix = keys.inbox_prefix_len()
            seqs = [seq_in_key(row.key, prefix, "item") for row in items]
            entries = [
                ingress_bytes(seq, decode_record(InboxEnvelope, row.value, "item").item)
                for seq, row in zip(seqs, items, strict=True)
            ]
            tr.add_read_conflict_key(keys.inbox_cursor())
            tr.add_read_conflict_key(keys.head())
            _journal(tr, keys, head, entries)
            tr[keys.inbox_cursor()] = InboxCursor(seqs[-1]).to_cbor()
            if len(rows) <= max_items and ready.present():
                tr.compare_and_clear(keys.ready(), bytes(ready))

        self._run(body)
        return taken[0]

    def read(self, keys: WorldKeys, count: int) -> int:
        tr = self.db.create_transaction()
        rows = tr.snapshot.get_range(
            *keys.entries_between(1, count), streaming_mode=self.fdb.StreamingMode.want_all
        )
        return sum(1 for _ in rows)

    def read_world(self, keys: WorldKeys, limit: int) -> int:
        """A world's head and its first ``limit`` entries, read together (one wave), the
        entries' seals checked: what a page of the plane's read needs. The entries read."""
        tr = self.db.create_transaction()
        head = tr.snapshot[keys.head()]  # issued now, waited for after the range
        rows = tr.snapshot.get_range(
            *keys.entries_between(1, limit), streaming_mode=self.fdb.StreamingMode.want_all
        )
        opened = [opened_entry(bytes(key), bytes(value)) for key, value in rows]
        top = JOURNAL_HEAD.decode(bytes(self._ready(head)), "head")
        return min(top, len(opened))

    async def append_async(self, keys: WorldKeys, entry: bytes) -> None:
        """The raw append, its futures awaited from the event loop."""
        loop = asyncio.get_running_loop()

        def waiter(future: Any) -> asyncio.Future[None]:
            done: asyncio.Future[None] = loop.create_future()

            def wake(_: Any) -> None:
                loop.call_soon_threadsafe(_settle, done)

            future.on_ready(wake)
            return done

        tr = self.db.create_transaction()
        while True:
            try:
                value = tr[keys.head()]
                await waiter(value)
                head = JOURNAL_HEAD.decode(bytes(value), "head")
                key = height_keys(keys.whole_entry_key(), keys.entry_prefix_len(), head + 1, 1)[0]
                tr[key] = seal(key, entry)
                tr[keys.head()] = JOURNAL_HEAD.encode(head + 1)
                commit = tr.commit()
                await waiter(commit)
                commit.wait()
                return
            except self.fdb.FDBError as exc:
                retry = tr.on_error(exc)
                await waiter(retry)
                retry.wait()


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
