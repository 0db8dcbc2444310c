"""eventsourcing's tracking and process recorders over the plane: a tracking record is the
universe's tracking position of an upstream application, written with the events it
accompanies in one transaction (see ``docs/eventsourcing.md``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.persistence import (
    ProcessRecorder,
    StoredEvent,
    Tracking,
    TrackingRecorder,
    WaitInterruptedError,
)

from aos_eventsourcing import codec
from aos_eventsourcing.recorders import PlaneApplicationRecorder, PlaneRecorder
from persistence.errors import PersistError, Validation
from persistence.plane import MAX_WAIT_SECONDS


class PlaneTrackingRecorder(PlaneRecorder, TrackingRecorder):
    """eventsourcing's ``TrackingRecorder``: a tracking record is the universe's tracking
    position of the upstream application (``Plane.append_sequenced`` with no entries)."""

    def insert_tracking(
        self, tracking: Tracking, app_data: Mapping[bytes, bytes | None] | None = None
    ) -> None:
        """Record that ``tracking``'s notification was processed (``IntegrityError`` if one
        at or above it was), and ``app_data`` -- the application's own data that
        processing it derived (a projection's view) -- in the same transaction: both or
        neither."""
        position = (tracking.application_name, tracking.notification_id)
        try:
            self.plane.append_sequenced(self.universe, [], [], tracking=position, app_data=app_data)
        except PersistError as exc:
            raise codec.translate(exc) from exc

    def max_tracking_id(self, application_name: str) -> int | None:
        """The last notification id of ``application_name`` recorded as processed."""
        try:
            return self.plane.tracking_position(self.universe, application_name)
        except PersistError as exc:
            raise codec.translate(exc) from exc

    def wait(
        self,
        application_name: str,
        notification_id: int | None,
        timeout: float = 1.0,
        interrupt: threading.Event | None = None,
    ) -> None:
        """Block until ``notification_id`` of ``application_name`` is recorded as
        processed (at once if it is ``None``): ``TimeoutError`` after ``timeout`` seconds,
        ``WaitInterruptedError`` once ``interrupt`` is set. Woken by the tracking record's
        change (``Plane.wait_tracking``), where eventsourcing's default polls every 0.1 to
        0.8 s."""
        if notification_id is None:
            return
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout != timeout:
            problem = f"a number of seconds (inf: no limit), not {timeout!r}"
            raise codec.translate(Validation("timeout", problem))
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = min(max(0.0, deadline - time.monotonic()), MAX_WAIT_SECONDS)
                position = self.plane.wait_tracking(
                    self.universe, application_name, notification_id, left, interrupt=interrupt
                )
                if position is not None and position >= notification_id:
                    return
                if interrupt is not None and interrupt.is_set():
                    raise WaitInterruptedError
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"Timed out waiting for notification {notification_id} "
                        f"from application '{application_name}' to be processed"
                    )
        except PersistError as exc:
            raise codec.translate(exc) from exc


class PlaneProcessRecorder(PlaneTrackingRecorder, PlaneApplicationRecorder, ProcessRecorder):
    """eventsourcing's ``ProcessRecorder``: events and the tracking record in one
    transaction."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        """Record ``stored_events`` and the ``tracking`` keyword's record atomically; their
        notification ids (``IntegrityError`` if a version or the tracking id is taken)."""
        tracking = kwargs.get("tracking")
        if tracking is not None and not isinstance(tracking, Tracking):
            raise TypeError(f"tracking must be a Tracking, not {type(tracking).__name__}")
        app_data = self.app_data(stored_events, **kwargs)
        return self._insert(stored_events, tracking, sequenced=True, app_data=app_data)
