"""Per-call records: how a write call recognises its own earlier attempt.

FoundationDB retries ``commit_unknown_result`` (1021), and the commit may have applied; other
clients may commit before the retry. Its documented recipe is a unique key per transaction,
looked up on retry. Every write protocol of the plane takes a :class:`Call` -- an id drawn
once per plane call, outside the retry loop -- and in the same transaction as its writes
stores what it did under ``calls/<id>`` of its scope (the world; the universe for effects).
The retry finds that record and returns its outcome, whatever happened in between; the first
attempt skips the lookup, since its id is new. An engine whose commits never end that way
(``Engine.commit_may_be_unknown`` false: SQLite) never retries an applied commit, so its
calls keep no record.

Ids begin with the call's wall-clock start (big-endian nanoseconds), so a scope's records
sort oldest first. Every record written also removes up to two records of its scope that are
older than the call's window (:data:`DEFAULT_WINDOW_SECONDS`), so a scope holds about its
write rate times the window. The window must outlast every call's retries: the FDB engine's
timeout bounds them (10 s by default) and :func:`persistence.kv.run` gives up after
``Engine.max_retry_seconds`` (60 s); clocks of the hosts must agree to well within the window.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final, Protocol

from persistence import fdbtuple, kv
from persistence.errors import CorruptRecord, Validation
from persistence.records import CallRecord, decode_record

DEFAULT_WINDOW_SECONDS: Final = 600.0
"""How long a call record is kept: ten minutes, against calls that retry for at most one or
two."""

CALL_ID_BYTES: Final = 16
"""A call id: 8 bytes of start time, 8 random bytes."""

_UNDRAWN: Final = bytes(CALL_ID_BYTES - 8)

SWEEP: Final = 2
"""Expired records removed per record written (more than one, so a backlog shrinks)."""


class CallScope(Protocol):
    """Where a protocol keeps call records (``WorldKeys``, ``UniverseKeys``)."""

    def call(self, call_id: bytes) -> bytes:
        """The record key of ``call_id``."""
        ...

    def calls(self) -> tuple[bytes, bytes]:
        """Every record of the scope, oldest first."""
        ...


@dataclass(slots=True)
class Call:
    """One plane call: its id, how many attempts of it have run (in this process), and
    whether it keeps a record (only where a retry may follow an applied commit:
    ``Engine.commit_may_be_unknown``)."""

    id: bytes
    window_ns: int
    attempts: int = 0
    recorded: bool = True

    @classmethod
    def new(
        cls,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        now_ns: int | None = None,
        *,
        recorded: bool = True,
    ) -> Call:
        """A call starting at ``now_ns`` (nanoseconds since the epoch; now by default)."""
        if not window_seconds > 0:
            raise Validation("call_record_seconds", f"must be positive, got {window_seconds!r}")
        stamp = (time.time_ns() if now_ns is None else now_ns).to_bytes(8, "big")
        # Only a record's key uses the id: a call that keeps none draws no random bytes.
        tail = os.urandom(CALL_ID_BYTES - 8) if recorded else _UNDRAWN
        return cls(stamp + tail, int(window_seconds * 1e9), 0, recorded)

    @property
    def started_ns(self) -> int:
        """When the call started (its id's clock)."""
        return int.from_bytes(self.id[:8], "big")


REPLAYS: Final[Counter[str]] = Counter()
"""Retries in this process that found their call's record -- an earlier attempt had
committed (an applied ``commit_unknown_result``) -- by call kind."""


async def replayed(tr: kv.Transaction, scope: CallScope, call: Call) -> CallRecord | None:
    """Start an attempt of ``call``: the record of an earlier attempt that committed, if
    any (read with a conflict on the record key, which only this call writes)."""
    call.attempts += 1
    if call.attempts == 1 or not call.recorded:
        return None
    raw = await tr.get(scope.call(call.id))
    if raw is None:
        return None
    done = decode_record(CallRecord, raw, "call record")
    REPLAYS[done.op] += 1
    return done


async def record(tr: kv.Transaction, scope: CallScope, call: Call, op: str, **outcome: Any) -> None:
    """Store ``CallRecord(op, **outcome)`` as what ``call`` did (in the transaction that
    does it), and remove up to :data:`SWEEP` records of the scope older than the call's
    window. A call that keeps no record writes (and builds) nothing."""
    if not call.recorded:
        return
    horizon = call.started_ns - call.window_ns
    if horizon > 0:
        begin, _ = scope.calls()
        expired = scope.call(horizon.to_bytes(8, "big"))  # sorts before every id from horizon
        for key, _ in await tr.get_range(begin, expired, limit=SWEEP, snapshot=True):
            if _started_ns(key, len(begin) - 1) < horizon:
                tr.clear(key)
    tr.set(scope.call(call.id), CallRecord(op, **outcome).to_cbor())


def _started_ns(key: bytes, prefix_len: int) -> int:
    try:
        items = fdbtuple.unpack(key, prefix_len)
    except ValueError:
        items = ()
    if len(items) != 1 or not isinstance(items[0], bytes) or len(items[0]) != 16:
        raise CorruptRecord("call record key", f"{key.hex()} does not end with a call id")
    return int.from_bytes(items[0][:8], "big")
