"""The plane's settings (:class:`PlaneConfig`) and the fixed values its operations share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from persistence import cbor, kv
from persistence.errors import Validation
from persistence.inbox_records import InboxEnvelope
from persistence.protocols import calls
from persistence.records import CasMeta
from persistence.sizes import MAX_CALL_RECORD_SECONDS, MAX_NAME_CHARS, MiB, check_int, check_number

VerifyMode = Literal["always", "sampled", "never"]
"""How CAS reads check a body against its hash: every read, a fraction of them, or none."""
LogSequencing = Literal["adaptive", "inline", "queued"]
"""How a sequenced append gives its entries universe log positions (``protocols/log.py``):
in its own transaction (``inline``: appends of a universe conflict on the log head), by
queuing them and settling the queue (``queued``: a second transaction, but appends of
disjoint worlds never conflict), or inline until appends of the universe overlap, then
queued while they do (``adaptive``). An inline append queues only behind records already
queued, and its retries stay inline: beside planes that queue it can starve, so a universe's
writers share one mode, or are all adaptive."""

MAX_INLINE_BYTES: Final = kv.MAX_VALUE_SIZE - (
    len(CasMeta(kv.MAX_VALUE_SIZE, inline_bytes=bytes(kv.MAX_VALUE_SIZE)).to_cbor())
    - kv.MAX_VALUE_SIZE
)
"""The largest CAS body kept inline: its ``CasMeta`` record must fit one FoundationDB value."""
GENESIS_STATE: Final = cbor.encode(None)
"""Default genesis snapshot bytes: a kernel hydrating from them starts empty."""
EMPTY_MANIFEST: Final = cbor.encode([])
"""The manifest of a snapshot that names no blobs (every genesis snapshot's)."""
CLAIM_RESERVE: Final = 4 * MAX_NAME_CHARS + 128
"""Room a dispatched effect's value leaves for its claim: the worker's name (UTF-8) and
claim time, and the call record that repeats the in-flight item."""
MAX_SETTING: Final = 2**63 - 1
"""The largest integer setting: a signed 64-bit integer, which every engine can take."""
MAX_WAIT_SECONDS: Final = 86_400.0
"""The longest wait of :meth:`Plane.wait_log` and :meth:`Plane.wait_tracking`: a day."""
INTERRUPT_SECONDS: Final = 0.05
"""How soon a wait notices its ``interrupt``."""
MAX_INBOX_RETENTION_SECONDS: Final = 10 * 365 * 86_400.0
"""The longest inbox retention window (``PlaneConfig.inbox_retention_seconds``): ten years."""


@dataclass(frozen=True, slots=True)
class PlaneConfig:
    """Limits and policies. Defaults keep every transaction well inside FoundationDB's."""

    inline_threshold: int = 16 * 1024
    max_entry_bytes: int = 4 * MiB
    max_batch_entries: int = 10_000
    max_batch_bytes: int = 8 * MiB
    read_page_entries: int = 2_000
    read_page_bytes: int = 4 * MiB
    verify_reads: VerifyMode = "always"
    verify_sample_rate: float = 0.01
    call_record_seconds: float = calls.DEFAULT_WINDOW_SECONDS
    """How long a write call's record is kept for its own retries (``protocols/calls.py``)."""
    log_sequencing: LogSequencing = "adaptive"
    """How sequenced appends take universe log positions (:data:`LogSequencing`)."""
    inbox_retention_seconds: float = 86_400.0
    """How long a consumed inbox item and its idempotency entry are kept before inbox
    compaction may remove them: an idempotency key deduplicates for at least this long after
    its item was drained (``protocols/compaction.py``)."""

    def __post_init__(self) -> None:
        for name, low, high in (
            ("inline_threshold", 0, MAX_INLINE_BYTES),
            ("max_entry_bytes", 1, None),
            ("max_batch_entries", 1, None),
            ("max_batch_bytes", 1, None),
            ("read_page_entries", 1, None),
            ("read_page_bytes", 1, None),
        ):
            value = getattr(self, name)
            if high is not None and isinstance(value, int) and value > high:
                raise Validation(
                    f"PlaneConfig.{name}",
                    f"{value:,} > {high:,}: an inline body and its metadata must fit one "
                    f"FoundationDB value ({kv.MAX_VALUE_SIZE:,} bytes)",
                )
            check_int(value, f"PlaneConfig.{name}", low, MAX_SETTING if high is None else high)
        if self.verify_reads not in ("always", "sampled", "never"):
            raise Validation(
                "PlaneConfig.verify_reads", f"always, sampled or never, not {self.verify_reads!r}"
            )
        check_number(self.verify_sample_rate, "PlaneConfig.verify_sample_rate", 0, 1)
        if self.log_sequencing not in ("adaptive", "inline", "queued"):
            raise Validation(
                "PlaneConfig.log_sequencing",
                f"adaptive, inline or queued, not {self.log_sequencing!r}",
            )
        field = "PlaneConfig.call_record_seconds"
        if not check_number(self.call_record_seconds, field, 0, MAX_CALL_RECORD_SECONDS):
            raise Validation(field, "must be a positive number of seconds")
        field = "PlaneConfig.inbox_retention_seconds"
        check_number(self.inbox_retention_seconds, field, 0, MAX_INBOX_RETENTION_SECONDS)
        if self.inbox_retention_ns < 1:
            raise Validation(field, "must be at least one nanosecond")

    @property
    def inbox_retention_ns(self) -> int:
        """``inbox_retention_seconds`` in nanoseconds."""
        return round(self.inbox_retention_seconds * 1_000_000_000)


OWN_KEY_BYTES: Final = 16
"""Length of the idempotency key drawn for an item enqueued without one (where it gets one:
``InboxOperations._own_key``)."""
OWN_KEY: Final = bytes(OWN_KEY_BYTES)
"""Stands for such a key where only its size counts."""
OWN_KEY_ENVELOPE_BYTES: Final = len(InboxEnvelope(b"\x00", OWN_KEY).to_cbor()) - len(
    InboxEnvelope(b"\x00", None).to_cbor()
)
"""What such a key adds to an inbox envelope (33 bytes)."""
