"""Cold segments' stored records: the index record of each immutable segment object, the
export marker (the durable progress of a world's segment export, Protocol F) and the cold
horizon export may reach without a baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from persistence.errors import Validation
from persistence.records import BYTES, TEXT, U64, Codec, Record, optional, required


@dataclass(frozen=True, slots=True)
class SegmentIndexRecord(Record):
    """``segments/<world>/<end>``: one immutable cold segment object."""

    start: int = required(U64)
    end: int = required(U64)
    object_key: str = required(TEXT)
    checksum_algorithm: str = required(TEXT)
    checksum: bytes = required(BYTES)
    entry_count: int = required(U64)
    byte_size: int = required(U64)

    def __post_init__(self) -> None:
        Record.__post_init__(self)
        if not 1 <= self.start <= self.end:
            raise Validation("SegmentIndexRecord", f"bad range {self.start}-{self.end}")
        if self.entry_count != self.end - self.start + 1:
            raise Validation("SegmentIndexRecord.entry_count", "does not match the range")


@dataclass(frozen=True, slots=True)
class ColdHorizon(Record):
    """``export/horizon``: heights at or below ``height`` may be exported to cold segments
    whatever the active baseline (set by the world's owner; only rises)."""

    height: int = required(U64)


EXPORT_STATES: Final = ("copy_started", "copy_finished", "delete_started", "delete_finished")


def _export_state(value: Any, where: str) -> str:
    if value not in EXPORT_STATES:
        raise Validation(where, f"unknown export state {value!r}")
    return str(value)


EXPORT_STATE: Final = Codec("export_state", _export_state)


@dataclass(frozen=True, slots=True)
class ExportMarker(Record):
    """``w/<world>/export/marker``: the durable progress of the world's segment export
    (Protocol F), in the spirit of Kafka tiered storage's segment states. ``checksum`` and
    ``byte_size`` are known from ``copy_finished`` on; ``deleted_through`` is the highest
    height whose hot keys are gone."""

    state: str = required(EXPORT_STATE)
    start: int = required(U64)
    end: int = required(U64)
    object_key: str = required(TEXT)
    checksum: bytes | None = optional(BYTES)
    byte_size: int | None = optional(U64)
    deleted_through: int | None = optional(U64)
