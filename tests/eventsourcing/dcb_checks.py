"""What the DCB fault tests check of a store at their end, after a settle."""

from __future__ import annotations

from eventsourcing.dcb.api import DCBSequencedEvent

from aos_eventsourcing.dcb import PlaneDCBRecorder


def placed(
    recorder: PlaneDCBRecorder, returned: dict[bytes, tuple[int, int]]
) -> tuple[list[DCBSequencedEvent], dict[bytes, list[int]]]:
    """Settle, then check that positions are dense and that each call in ``returned``
    (its events' data -> its last position and its count) holds exactly those positions;
    the stored events, and the positions of each data."""
    recorder.settle()
    stored = list(recorder.read())
    assert [e.position for e in stored] == list(range(1, len(stored) + 1))
    where: dict[bytes, list[int]] = {}
    for event in stored:
        where.setdefault(event.event.data, []).append(event.position)
    for data, (position, count) in returned.items():
        assert where[data] == list(range(position - count + 1, position + 1))
    return stored, where
