"""Per-call records: how a write call recognises its own earlier attempt.

FoundationDB retries ``commit_unknown_result`` (1021), and the commit may have applied; other
clients may commit before the retry. Its documented recipe is a unique key per transaction,
looked up on retry. Every write protocol of the plane takes a :class:`Call` -- an id drawn
once per plane call, outside the retry loop -- and in the same transaction as its writes
stores what it did under ``calls/<id>`` of its scope (the world; the universe for effects).
The retry finds that record and returns its outcome, whatever happened in between; the first
attempt skips the lookup, since its id is new. A retry issues its lookup with its
protocol's first reads (:func:`begin`), so it costs no round trip of its own. An engine
whose commits never end that way (``Engine.commit_may_be_unknown`` false: SQLite) never
retries an applied commit, so its calls keep no record.

Ids begin with the call's wall-clock start (big-endian nanoseconds), so a scope's records
sort oldest first. A record written also clears the records of its scope older than the
call's window (:data:`DEFAULT_WINDOW_SECONDS`) -- one blind range clear up to the window's
start, no read --, unless a clear of the scope committed by a call of the same plane
that started within :data:`SWEEP_FRACTION` of the window of it (:class:`Sweeps`), so a
scope holds the records of its window and of at most that fraction more. The window must
outlast every call's retries: the FDB engine's timeout bounds them (10 s by default) and
:func:`persistence.kv.run` gives up after ``Engine.max_retry_seconds`` (60 s); clocks of the
hosts must agree to well within the window.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from persistence import kv
from persistence.errors import Validation
from persistence.futures import Future, Ready
from persistence.records import CallRecord, decode_record

DEFAULT_WINDOW_SECONDS: Final = 600.0
"""How long a call record is kept: ten minutes, against calls that retry for at most one or
two."""

SWEEP_FRACTION: Final = 8
"""A plane clears a scope's expired records at most once per this fraction of the window
(75 s of the default ten minutes)."""

SWEPT_SCOPES: Final = 16_384
"""Scopes whose last clear a plane remembers, twice over: past them, it starts a new
generation and forgets the one before."""

CALL_ID_BYTES: Final = 16
"""A call id: 8 bytes of start time, 8 random bytes."""

_UNDRAWN: Final = bytes(CALL_ID_BYTES - 8)

_draws = random.Random(os.urandom(32))
"""Where the random half of call ids comes from: a generator seeded from the system's
randomness in each process (again in a forked child, which would otherwise repeat its
parent's ids), so that drawing an id is no system call. Ids must be unique, not secret.
A copy of a process made without Python's fork hooks (a VM or container snapshot restored
twice, a fork from C) draws the same sequence as the original; two of its calls' ids
collide only if they also start in the same nanosecond, in the same scope."""
os.register_at_fork(after_in_child=lambda: _draws.seed(os.urandom(32)))


class CallScope(Protocol):
    """Where a protocol keeps call records (``WorldKeys``, ``UniverseKeys``)."""

    def call(self, call_id: bytes) -> bytes:
        """The record key of ``call_id``."""
        ...

    def calls(self) -> tuple[bytes, bytes]:
        """Every record of the scope, oldest first."""
        ...


class Sweeps:
    """When a committed call of a plane last cleared each scope's expired records, so that
    its calls clear them at most about once per :data:`SWEEP_FRACTION` of the window, not
    with every record: the range clear is a mutation, and a write conflict range the
    cluster resolves, in every commit (on FoundationDB, leaving it out of most commits took
    the server's CPU per append from about 1.45 to 1.25 times the raw transaction's:
    docs/benchmarks.md).

    A scope is marked only once a transaction that cleared it has committed
    (``Transaction.after_commit``): an attempt that fails, a refused append, a call that
    gives up leave it due, so the next call clears it. Until one commits, every call of
    the scope clears. The mark is the start of the latest call whose clear committed.
    Shared by the plane's threads and event loops (a race clears twice or loses a mark,
    harmlessly: the scope is due sooner); it remembers the scopes of the last two runs of
    :data:`SWEPT_SCOPES`."""

    __slots__ = ("_last", "_older")

    def __init__(self) -> None:
        self._last: dict[bytes, int] = {}
        self._older: dict[bytes, int] = {}

    def due(self, scope: bytes, now_ns: int, window_ns: int) -> bool:
        """Whether a call of ``scope`` (its records' first key) starting at ``now_ns``
        clears the expired records: no clear of it committed by a call that started within
        the fraction of ``window_ns`` of it, before or after (calls in flight together; a
        clock gone back by more than that: it is due)."""
        last = self._last.get(scope)
        if last is None:
            last = self._older.get(scope)
        return last is None or abs(now_ns - last) >= window_ns // SWEEP_FRACTION

    def mark(self, scope: bytes, started_ns: int) -> None:
        """A clear of ``scope`` by a call started at ``started_ns`` committed (one that
        started before the latest marked leaves the mark as it is)."""
        last = self._last.get(scope)
        if last is None:
            if len(self._last) >= SWEPT_SCOPES:
                self._older, self._last = self._last, {}
            last = self._older.get(scope)
        if last is None or started_ns > last:
            self._last[scope] = started_ns


@dataclass(slots=True)
class Call:
    """One plane call: its id, how many attempts of it have run (in this process), whether
    it keeps a record (only where a retry may follow an applied commit:
    ``Engine.commit_may_be_unknown``), and its plane's :class:`Sweeps` (``None``: every
    record it writes clears the expired ones)."""

    id: bytes
    window_ns: int
    attempts: int = 0
    recorded: bool = True
    sweeps: Sweeps | None = None

    @classmethod
    def new(
        cls,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        now_ns: int | None = None,
        *,
        recorded: bool = True,
        sweeps: Sweeps | None = None,
    ) -> Call:
        """A call starting at ``now_ns`` (nanoseconds since the epoch; now by default)."""
        if not window_seconds > 0:
            raise Validation("call_record_seconds", f"must be positive, got {window_seconds!r}")
        stamp = (time.time_ns() if now_ns is None else now_ns).to_bytes(8, "big")
        # Only a record's key uses the id: a call that keeps none draws no random bytes.
        tail = _draws.randbytes(CALL_ID_BYTES - 8) if recorded else _UNDRAWN
        return cls(stamp + tail, int(window_seconds * 1e9), 0, recorded, sweeps)

    @property
    def started_ns(self) -> int:
        """When the call started (its id's clock)."""
        return int.from_bytes(self.id[:8], "big")


REPLAYS: Final[Counter[str]] = Counter()
"""Retries in this process that found their call's record -- an earlier attempt had
committed (an applied ``commit_unknown_result``) -- by call kind."""


@dataclass(slots=True)
class Opening:
    """An attempt of a call as it started: the read it issued for its record (a retry's),
    in flight with the protocol's first reads."""

    tr: kv.Transaction
    scope: CallScope
    call: Call
    done: Future[bytes | None] | None

    @property
    def fresh(self) -> bool:
        """Whether no earlier attempt's record is looked for (a first attempt, or a call
        that keeps none): its outcome is this attempt's own, so the protocol may issue its
        writes before its reads are in (a retry must first learn whether an earlier attempt
        committed, and return that instead of writing)."""
        return self.done is None


def next_attempt(call: Call) -> bool:
    """Count an attempt of ``call``; whether it is the first (no earlier attempt of it can
    have committed)."""
    call.attempts += 1
    return call.attempts == 1


def begin(tr: kv.Transaction, scope: CallScope, call: Call) -> Opening:
    """Start an attempt of ``call``: issue, without waiting, the read of the record an
    earlier attempt that committed wrote (a retry; read with a conflict on the record key,
    which only this call writes). The first attempt reads no record: its id is new. A call
    that keeps no record reads nothing."""
    first = next_attempt(call)
    done = None if first or not call.recorded else tr.get(scope.call(call.id))
    return Opening(tr, scope, call, done)


def replayed(opening: Opening) -> Awaitable[CallRecord | None]:
    """The record of an earlier attempt of the call that committed, if any (a first
    attempt, which reads none, gets a value known already)."""
    if opening.done is None:
        return _NO_RECORD
    return _decoded(opening.done)


_NO_RECORD: Final[Future[CallRecord | None]] = Ready(None)


async def _decoded(read: Future[bytes | None]) -> CallRecord | None:
    raw = await read
    if raw is None:
        return None
    done = decode_record(CallRecord, raw, "call record")
    REPLAYS[done.op] += 1
    return done


def record(opening: Opening, op: str, **outcome: Any) -> None:
    """Store ``CallRecord(op, **outcome)`` as what the call did (in the transaction that
    does it), and clear the records of its scope older than the call's window if its
    :class:`Sweeps` says it is due: a blind range clear up to the first id of the window
    (ids begin with their call's start), so nothing is read. A call that keeps no record
    writes (and builds) nothing. A call whose retry can tell its outcome from its own
    arguments records ``op`` alone (an append: its first height is its expected head + 1),
    a value encoded once per ``op``."""
    call = opening.call
    if not call.recorded:
        return
    tr, scope = opening.tr, opening.scope
    horizon = call.started_ns - call.window_ns
    if horizon > 0:
        first = scope.calls()[0]
        sweeps = call.sweeps
        if sweeps is None or sweeps.due(first, call.started_ns, call.window_ns):
            tr.clear_range(first, scope.call(horizon.to_bytes(8, "big")))
            if sweeps is not None:
                tr.after_commit(functools.partial(sweeps.mark, first, call.started_ns))
    if outcome:
        value = CallRecord(op, **outcome).to_cbor()
    else:
        value = _BARE.get(op) or _BARE.setdefault(op, CallRecord(op).to_cbor())
    tr.set(scope.call(call.id), value)


_BARE: Final[dict[str, bytes]] = {}
"""The encoded record of each ``op`` recorded without an outcome (a few protocol names)."""
