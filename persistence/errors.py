"""The one exception hierarchy of the plane.

Every failure a caller can see is a :class:`PersistError`, typed by kind:

* :class:`Conflict` -- the store moved under the caller (an optimistic precondition
  failed). Each subtype carries what the caller expected and what it found.
* :class:`NotFound` -- a named thing does not exist.
* :class:`Validation` -- the caller's input is malformed or over a limit; nothing was
  written. The error names the field and, where there is one, the limit.
* :class:`Backend` -- the engine or object store failed (I/O, network, an engine error
  code). :class:`EngineError` carries FoundationDB's numeric error code.
* :class:`Corruption` -- stored data violates an invariant. Never healed silently.

Errors carry sizes, heights, keys and hashes -- never payload bytes. In a message over
:data:`MAX_MESSAGE_CHARS` characters (a 5,000-character path echoed back), each long value
keeps its start and its end, the middle elided (:func:`elide`); the errors' fields keep
the values whole.
"""

from __future__ import annotations

import re
from typing import ClassVar, Final

MAX_MESSAGE_CHARS: Final = 1_000
"""The longest message an error keeps whole."""


MAX_VALUE_CHARS: Final = 240
"""The longest run of non-blank characters (a path, a key, a value) a long message keeps
whole."""

_LONG_VALUE: Final = re.compile(rf"\S{{{MAX_VALUE_CHARS + 1},}}")


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]}...({len(text) - 2 * keep:,} characters elided)...{text[-keep:]}"


def elide(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` if it is at most ``limit`` characters; else each value in it over
    :data:`MAX_VALUE_CHARS` (a run of non-blank characters) keeps its start and end around
    a note of how many characters were left out -- the words around them stay whole --
    and a text still too long is cut so in its middle."""
    if len(text) <= limit:
        return text
    text = _LONG_VALUE.sub(lambda value: _cut(value[0], MAX_VALUE_CHARS // 2 - 20), text)
    return text if len(text) <= limit else _cut(text, (limit - 40) // 2)


class PersistError(Exception):
    """Root of every error the plane raises."""

    kind: ClassVar[str] = "error"

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (elide(args[0]),)
        super().__init__(*args)


# --------------------------------------------------------------------------- conflicts


class Conflict(PersistError):
    """An optimistic precondition failed; refresh and retry with new expectations."""

    kind = "conflict"


class HeadAdvanced(Conflict):
    """An append was called at a journal head that is no longer current. ``world`` names
    the world whose head moved (the one that refused a group append)."""

    def __init__(self, expected: int, actual: int, world: object = None) -> None:
        where = "" if world is None else f" of world {world}"
        super().__init__(f"journal head{where} advanced: expected {expected}, actual {actual}")
        self.expected = expected
        self.actual = actual
        self.world = world


class Contended(Conflict):
    """A transaction that was to give up on a busy key did: ``attempts`` attempts in a row
    failed on a conflict, so none of them committed (``kv.transact``'s ``conflicts``)."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"{attempts} attempts in a row failed on a conflict; none committed")
        self.attempts = attempts


class TrackingConflict(Conflict):
    """A sequenced append's tracking position is not above the one its consumer recorded
    (the upstream position was processed already)."""

    def __init__(self, name: str, recorded: int, attempted: int) -> None:
        super().__init__(
            f"tracking {name!r} is at position {recorded}: {attempted} was recorded already"
        )
        self.name = name
        self.recorded = recorded
        self.attempted = attempted


class CursorAdvanced(Conflict):
    """``commit_cursor`` compare-and-swap failed: the cursor is not where the caller said."""

    def __init__(self, expected: str | None, actual: str | None) -> None:
        super().__init__(f"inbox cursor moved: expected {expected}, actual {actual}")
        self.expected = expected
        self.actual = actual


class IdempotencyKeyReused(Conflict):
    """An enqueue carried an idempotency key the world's inbox already holds for another
    item: the key stands for one request, so the new item is refused, not dropped (an exact
    retry, the same item under the same key, returns the first sequence instead)."""

    def __init__(self, world: object, key: bytes, seq: str) -> None:
        super().__init__(
            f"world {world}: idempotency key {key!r:.120} was enqueued as {seq} with another "
            "item (a retry must repeat the item; a new request needs a new key)"
        )
        self.world = world
        self.key = key
        self.seq = seq


class WorldExists(Conflict):
    """A world with this id already exists (with different metadata)."""


class HandleTaken(Conflict):
    """Another world of the universe has this handle (handles are unique in a universe).
    Not a ``WorldExists``: the world asked for was not created, and a caller that takes
    ``WorldExists`` as "already there" must not take this for it."""

    def __init__(self, handle: str, world: str, universe: str) -> None:
        super().__init__(
            f"handle {elide(handle, 200)!r} is taken in universe {universe}: it names world {world}"
        )
        self.handle = handle
        self.world = world
        self.universe = universe

    def __reduce__(self) -> tuple[type[HandleTaken], tuple[str, str, str]]:
        return type(self), (self.handle, self.world, self.universe)


class SnapshotMismatch(Conflict):
    """A different snapshot record is already indexed at this height (the index is immutable)."""

    def __init__(self, height: int, existing: str, attempted: str) -> None:
        super().__init__(
            f"snapshot at height {height} already indexed as {existing}, refusing {attempted}"
        )
        self.height = height
        self.existing = existing
        self.attempted = attempted


class BaselineRegression(Conflict):
    """Promotion would move the active baseline to a lower height."""

    def __init__(self, current: int, attempted: int) -> None:
        super().__init__(
            f"baseline may not regress: active at height {current}, attempted {attempted}"
        )
        self.current = current
        self.attempted = attempted


class ReceiptHorizonFence(Conflict):
    """Promotion refused: the snapshot's receipt horizon does not reach its height."""

    def __init__(self, height: int, receipt_horizon_height: int | None) -> None:
        super().__init__(
            f"baseline promotion fence: snapshot at height {height} has receipt horizon "
            f"{receipt_horizon_height}; promotion needs it equal to the height"
        )
        self.height = height
        self.receipt_horizon_height = receipt_horizon_height


# --------------------------------------------------------------------------- not found


class NotFound(PersistError):
    """A named object (world, blob, snapshot, segment, key) does not exist."""

    kind = "not_found"


class WorldNotFound(NotFound):
    """The world does not exist in the universe."""

    def __init__(self, universe: object, world: object) -> None:
        super().__init__(f"world {world} not found in universe {universe}")
        self.universe = universe
        self.world = world


class RootIncomplete(NotFound):
    """A snapshot's root names a blob that its universe's CAS does not hold, so restore could
    not load it: promotion to baseline is refused. ``blob`` is the missing hash (hex) and
    ``named_by`` what names it (``snapshot_ref``, ``manifest_hash`` or ``manifest[i]``)."""

    def __init__(self, height: int, named_by: str, blob: str, universe: object) -> None:
        super().__init__(
            f"snapshot at height {height} is incomplete: {named_by} names blob {blob}, which is "
            f"not in the CAS of universe {universe}"
        )
        self.height = height
        self.named_by = named_by
        self.blob = blob


# --------------------------------------------------------------------------- validation


class Validation(PersistError):
    """Caller input is malformed or exceeds a limit; nothing was written."""

    kind = "validation"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# --------------------------------------------------------------------------- backend


class Backend(PersistError):
    """The engine or object store failed; the operation may be retried."""

    kind = "backend"


class EngineError(Backend):
    """An error of the transactional engine, numbered as FoundationDB numbers them.

    The memory and SQLite engines raise the same codes FoundationDB would, so the retry
    policy (``persistence.fdb_errors.is_retryable``) is written once.
    """

    def __init__(self, code: int, description: str, *, read_conflict: bool = False) -> None:
        super().__init__(f"engine error {code}: {description}")
        self.code = code
        self.description = description
        self.read_conflict = read_conflict
        """A 1020 because data the transaction read had changed at its commit (not, say,
        a lock that was not granted in time), as the SQLite and memory engines tell it:
        :func:`persistence.kv.run` retries it alone where writers serialize."""


class RetryLimitReached(Backend):
    """A transaction kept failing with retryable engine errors; ``last`` is the last one."""

    def __init__(self, retries: int, last: EngineError) -> None:
        super().__init__(f"gave up after {retries} retries; last {last}")
        self.retries = retries
        self.last = last


class SequencingIncomplete(Backend):
    """A sequenced append committed its entries (at ``first_heights``) and queued their
    universe log records, but settling the queue failed with ``cause``: the positions are
    not known. Do not append the entries again. ``Plane.settle_log`` gives them positions
    once what failed is mended (the cause says what: a damaged queue record is
    ``Corruption``); ``read_log`` above ``after`` then shows them."""

    def __init__(self, first_heights: list[int], after: int, cause: PersistError) -> None:
        super().__init__(
            f"the entries were appended (first heights {first_heights}) but their log "
            f"positions are not known: settling the universe log failed: {cause}"
        )
        self.first_heights = first_heights
        self.after = after
        """A log head read before the entries committed: their positions will be above it."""
        self.cause = cause


class StoreFormatError(Backend):
    """A file or keyspace is not a store of ours, is damaged, or has a newer layout."""


class MissingDependency(Backend):
    """An optional component is not installed; the message names the pip extra."""


# --------------------------------------------------------------------------- corruption


class Corruption(PersistError):
    """Stored data violates an invariant. Fail closed; never heal silently."""

    kind = "corruption"


class CorruptRecord(Corruption):
    """A stored record does not decode strictly (not canonical CBOR, wrong fields)."""

    def __init__(self, what: str, problem: str) -> None:
        super().__init__(f"corrupt {what}: {problem}")
        self.what = what
        self.problem = problem


class MissingJournalEntry(Corruption):
    """A height inside the journal's existing range has no entry."""

    def __init__(self, world: str, height: int) -> None:
        super().__init__(f"world {world}: journal entry at height {height} is missing")
        self.world = world
        self.height = height

    def __reduce__(self) -> tuple[type[MissingJournalEntry], tuple[str, int]]:
        return type(self), (self.world, self.height)


class DamagedJournalEntry(Corruption):
    """A stored journal entry fails its checksum: its bytes changed after they were written
    (a damaged page, a file edited or swapped). Names the world and the height."""

    def __init__(self, world: str, height: int) -> None:
        super().__init__(
            f"world {world}: journal entry at height {height} fails its checksum (its stored "
            "bytes changed after they were written)"
        )
        self.world = world
        self.height = height

    def __reduce__(self) -> tuple[type[DamagedJournalEntry], tuple[str, int]]:
        return type(self), (self.world, self.height)


class CasBodyMissing(Corruption):
    """CAS metadata exists but the object-store body does not."""

    def __init__(self, hash_hex: str, object_key: str) -> None:
        super().__init__(f"cas {hash_hex}: body object {object_key!r} is missing")
        self.hash_hex = hash_hex
        self.object_key = object_key


class OddObject(Corruption):
    """What is at an object's place in a store cannot be an object: a path that leads out
    of the store's root, a symlink loop, a FIFO or other file that is not a regular one.
    Names the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"object {key!r}: {problem}")
        self.key = key
        self.problem = problem


class CasBodyHashMismatch(Corruption):
    """A CAS body does not hash to its key."""

    def __init__(self, hash_hex: str, actual_hex: str, where: str) -> None:
        super().__init__(f"cas {hash_hex}: body at {where} hashes to {actual_hex}")
        self.hash_hex = hash_hex
        self.actual_hex = actual_hex
        self.where = where


class SegmentCorruption(Corruption):
    """A segment object is malformed; names the object key and byte offset."""

    def __init__(self, object_key: str, offset: int, problem: str) -> None:
        super().__init__(f"segment {object_key!r} at offset {offset}: {problem}")
        self.object_key = object_key
        self.offset = offset
        self.problem = problem


class SegmentChecksumMismatch(SegmentCorruption):
    """A segment's body checksum does not match its header or its index record."""

    def __init__(self, object_key: str, offset: int, expected: str, actual: str) -> None:
        super().__init__(
            object_key, offset, f"checksum mismatch: expected {expected}, got {actual}"
        )
        self.expected = expected
        self.actual = actual


class SegmentIndexCorruption(Corruption):
    """A segment index record disagrees with its key or with the index around it."""

    def __init__(self, world: str, key_end: int, problem: str) -> None:
        super().__init__(f"world {world}: segment index record at end {key_end}: {problem}")
        self.world = world
        self.key_end = key_end
        self.problem = problem


class SegmentMissing(Corruption):
    """The segment index names an object the object store does not have."""

    def __init__(self, object_key: str) -> None:
        super().__init__(f"segment object {object_key!r} is missing")
        self.object_key = object_key
