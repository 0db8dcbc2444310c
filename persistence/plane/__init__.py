"""The plane: the contracts of :mod:`persistence.contracts` implemented once, over any
engine and object store, behind two doors -- :class:`Plane` (blocking) and
:class:`AsyncPlane` (asyncio) -- that run the same operations.

Each part of the plane is a module of operations (coroutines that check their arguments,
then run the protocols of :mod:`persistence.protocols` in transactions): ``cas``,
``worlds``, ``journal``, ``log``, ``segments``, ``inbox``, ``snapshots``, ``effects``;
``facade`` composes them and opens the doors. Batch and call ids are drawn once per call,
outside the retry loop, which is what lets a retry recognise an attempt that committed.
"""

from persistence.plane.config import (
    CLAIM_RESERVE,
    EMPTY_MANIFEST,
    GENESIS_STATE,
    INTERRUPT_SECONDS,
    MAX_INBOX_RETENTION_SECONDS,
    MAX_INLINE_BYTES,
    MAX_SETTING,
    MAX_WAIT_SECONDS,
    OWN_KEY_BYTES,
    OWN_KEY_ENVELOPE_BYTES,
    PlaneConfig,
    VerifyMode,
)
from persistence.plane.core import SegmentSource
from persistence.plane.facade import OPERATIONS, AsyncPlane, Operations, Plane
from persistence.plane.journal import Batch, WorldAppend
from persistence.protocols.app_data import AppTransaction
from persistence.protocols.compaction import InboxCompaction
from persistence.protocols.drain import Drained, DrainResult, Normalizer, default_normalizer
from persistence.protocols.journal import GroupAppend
from persistence.protocols.log import LogEntry
from persistence.protocols.snapshots import SnapshotOutcome

__all__ = [
    "CLAIM_RESERVE",
    "EMPTY_MANIFEST",
    "GENESIS_STATE",
    "INTERRUPT_SECONDS",
    "MAX_INBOX_RETENTION_SECONDS",
    "MAX_INLINE_BYTES",
    "MAX_SETTING",
    "MAX_WAIT_SECONDS",
    "OPERATIONS",
    "OWN_KEY_BYTES",
    "OWN_KEY_ENVELOPE_BYTES",
    "AppTransaction",
    "AsyncPlane",
    "Batch",
    "DrainResult",
    "Drained",
    "GroupAppend",
    "InboxCompaction",
    "LogEntry",
    "Normalizer",
    "Operations",
    "Plane",
    "PlaneConfig",
    "SegmentSource",
    "SnapshotOutcome",
    "VerifyMode",
    "WorldAppend",
    "default_normalizer",
]
