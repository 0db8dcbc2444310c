"""Searchable timestamps: a parcel's state at any past moment.

Each event of a parcel is recorded, in the transaction that stores it, with an entry of the
application's own data (``Plane``'s ``app_data``) keyed by the parcel and the event's time,
holding the parcel's version then: ``at/<parcel id>/<microseconds since the epoch,
big-endian>``. The version at a moment is then one reverse range read, and the parcel as
it was is the repository's ``get`` at that version::

    os.environ["PERSISTENCE_MODULE"] = "aos_eventsourcing"
    parcels = TimestampedParcels()
    parcel_id = parcels.register("Rotterdam")
    parcels.parcel_at(parcel_id, some_datetime).location
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import Recording, StoredEvent

from aos_eventsourcing.recorders import PlaneApplicationRecorder


class Parcel(Aggregate):
    """A parcel on its way."""

    class Registered(Aggregate.Created):
        location: str

    class Moved(Aggregate.Event):
        location: str

    @event(Registered)
    def __init__(self, location: str) -> None:
        self.location = location

    @event(Moved)
    def move(self, location: str) -> None:
        self.location = location


class Parcels(Application[UUID]):
    """Registers parcels and moves them."""

    def register(self, location: str) -> UUID:
        parcel = Parcel(location)
        self.save(parcel)
        return parcel.id

    def move(self, parcel_id: UUID, location: str) -> None:
        parcel: Parcel = self.repository.get(parcel_id)
        parcel.move(location)
        self.save(parcel)


def micros(moment: datetime) -> int:
    """Microseconds since the epoch of an aware ``moment``."""
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def at_prefix(parcel_id: UUID) -> bytes:
    return b"at/" + parcel_id.bytes + b"/"


class TimestampsRecorder(PlaneApplicationRecorder):
    """The parcels' events, and for each an entry of the version at its time."""

    def app_data(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Mapping[bytes, bytes | None] | None:
        stamps: list[tuple[UUID, datetime, int]] = kwargs.get("timestamps", [])
        return {
            at_prefix(parcel_id) + micros(moment).to_bytes(8, "big"): version.to_bytes(8, "big")
            for parcel_id, moment, version in stamps
        } or None

    def version_at(self, parcel_id: UUID, moment: datetime) -> int | None:
        """The parcel's version at ``moment`` (``None``: it was not registered yet)."""
        prefix = at_prefix(parcel_id)
        if micros(moment) < 0:  # before the epoch: before any event
            return None
        end = prefix + (micros(moment) + 1).to_bytes(8, "big")
        rows = self.read_app_range(prefix, end, limit=1, reverse=True)
        return int.from_bytes(rows[0][1], "big") if rows else None


class TimestampedParcels(Parcels):
    """Parcels whose every event is findable by its time (:class:`TimestampsRecorder`)."""

    env: ClassVar[dict[str, str]] = {"APPLICATION_RECORDER_TOPIC": f"{__name__}:TimestampsRecorder"}

    def _record(self, processing_event: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        processing_event.saved_kwargs["timestamps"] = [
            (e.originator_id, e.timestamp, e.originator_version)
            for e in processing_event.events
            if isinstance(e, Parcel.Event)
        ]
        return super()._record(processing_event)

    def parcel_at(self, parcel_id: UUID, moment: datetime) -> Parcel:
        """The parcel as it was at ``moment`` (``AggregateNotFoundError`` before it was
        registered)."""
        version = cast(TimestampsRecorder, self.recorder).version_at(parcel_id, moment)
        if version is None:
            raise AggregateNotFoundError(parcel_id)
        return cast(Parcel, self.repository.get(parcel_id, version=version))
