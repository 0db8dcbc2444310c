"""eventsourcing's DCB (dynamic consistency boundary) on the plane: its shipped recorder test
cases on the memory engine, SQLite files and FoundationDB; a ``DCBApplication`` selecting the
module; conditions checked against every append that commits first; bad input refused."""

from __future__ import annotations

import threading

import pytest
from eventsourcing.dcb.api import DCBAppendCondition, DCBEvent, DCBQuery, DCBQueryItem
from eventsourcing.dcb.application import DCBApplication
from eventsourcing.dcb.tests import DCBRecorderTestCase
from eventsourcing.persistence import DataError, IntegrityError, ProgrammingError

from aos_eventsourcing.dcb import MAX_TAG_BYTES, PlaneDCBRecorder
from persistence.ids import UniverseId
from tests.eventsourcing import stores


class ShippedCases(DCBRecorderTestCase, stores.Store):
    def test_append_read(self) -> None:
        self._test_append_read(self.recorder(PlaneDCBRecorder))

    def test_append_subscribe(self) -> None:
        self._test_append_subscribe(self.recorder(PlaneDCBRecorder))

    def test_a_dcb_application_selects_the_module(self) -> None:
        self.set_environ()
        app = DCBApplication()
        try:
            assert isinstance(app.recorder, PlaneDCBRecorder)
            self._test_append_read(app.recorder)
        finally:
            app.close()


class TestShippedCasesMemory(stores.Memory, ShippedCases):
    pass


class TestShippedCasesSqlite(stores.Sqlite, ShippedCases):
    pass


class TestShippedCasesFdb(stores.Fdb, ShippedCases):
    pass


del ShippedCases


class TestConditions(stores.Sqlite):
    def test_a_condition_sees_every_append_that_commits_before_it(self) -> None:
        """Writers append to one boundary (tag ``seat``) from threads, each conditioned on
        no ``seat`` event after what it read: exactly one append per read position wins,
        so the boundary's events follow each other without two reading the same state."""
        plane = self.open_plane()
        universe = UniverseId.new()
        recorders = [PlaneDCBRecorder(plane, universe) for _ in range(4)]
        seat = DCBQuery([DCBQueryItem(tags=["seat"])])
        won: list[tuple[int, int]] = []
        lock = threading.Lock()

        def book(recorder: PlaneDCBRecorder, n: int) -> None:
            for _ in range(n):
                while True:
                    read = recorder.read(seat)
                    seen = read.head or 0
                    event = DCBEvent("Booked", str(seen).encode(), ["seat"])
                    try:
                        position = recorder.append([event], DCBAppendCondition(seat, after=seen))
                    except IntegrityError:
                        continue
                    with lock:
                        won.append((seen, position))
                    break

        threads = [threading.Thread(target=book, args=(r, 15)) for r in recorders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        events = list(recorders[0].read(seat))
        assert [e.position for e in events] == list(range(1, 61))
        # each append was conditioned on the state just before it: its data says so
        assert [int(e.event.data) for e in events] == list(range(0, 60))
        assert sorted(won) == [(p - 1, p) for p in range(1, 61)]

    def test_disjoint_boundaries_do_not_refuse_each_other(self) -> None:
        recorder = self.recorder(PlaneDCBRecorder)
        a, b = (DCBQuery([DCBQueryItem(tags=[tag])]) for tag in ("a", "b"))
        recorder.append([DCBEvent("E", b"1", ["a"])])
        seen_b = recorder.read(b).head or 0
        recorder.append([DCBEvent("E", b"2", ["a"])])
        assert recorder.append([DCBEvent("E", b"3", ["b"])], DCBAppendCondition(b, seen_b)) == 3
        with pytest.raises(IntegrityError):
            recorder.append([DCBEvent("E", b"4", ["a"])], DCBAppendCondition(a, seen_b))
        # a type-and-tags item matches only events with the type and every tag
        both = DCBQuery([DCBQueryItem(types=["E"], tags=["a", "b"])])
        assert list(recorder.read(both)) == []
        recorder.append([DCBEvent("E", b"5", ["a", "b"]), DCBEvent("F", b"6", ["a", "b"])])
        assert [e.event.data for e in recorder.read(both)] == [b"5"]
        assert [e.position for e in recorder.read(both, after=3)] == [4]
        assert list(recorder.read(both, after=4)) == []
        assert recorder.read(both, limit=0).head is None

    def test_bad_input_is_refused_before_anything_is_written(self) -> None:
        recorder = self.recorder(PlaneDCBRecorder)
        bad_events = [
            DCBEvent("", b"x"),
            DCBEvent(5, b"x"),  # type: ignore[arg-type]
            DCBEvent("E", "text"),  # type: ignore[arg-type]
            DCBEvent("E", b"x", ["ok", 7]),  # type: ignore[list-item]
            DCBEvent("E", b"x", ["t" * (MAX_TAG_BYTES + 1)]),
            DCBEvent("E", b"x", ["\ud800"]),
        ]
        for event in bad_events:
            with pytest.raises(DataError):
                recorder.append([DCBEvent("E", b"ok"), event])
        with pytest.raises(ProgrammingError):
            recorder.append([])
        with pytest.raises(DataError):
            recorder.append([DCBEvent("E", b"x")], DCBAppendCondition(after=-1))
        for args in ({"after": "1"}, {"limit": -1}, {"limit": True}):
            with pytest.raises(DataError):
                recorder.read(**args)
        assert list(recorder.read()) == [] and recorder.read().head is None
