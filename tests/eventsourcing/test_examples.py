"""The module's own examples of an application's own data (``aos_eventsourcing/examples``):
a wiki searchable by the words of its pages, indexed with the events or by a projection
with its tracking records, and parcels readable as they were at any moment; on the memory
engine, SQLite files and FoundationDB."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError, Tracking
from eventsourcing.projection import ProjectionRunner

from aos_eventsourcing.examples.parcels import TimestampedParcels
from aos_eventsourcing.examples.wiki import (
    SearchableWiki,
    Wiki,
    WikiSearchProjection,
    WikiSearchView,
    page_key,
)
from tests.eventsourcing import stores


def now() -> datetime:
    """The time now, returned once the clock has moved past it: an event made after this
    call is timestamped later than the moment it returns."""
    moment = datetime.now(UTC)
    while datetime.now(UTC) <= moment:
        pass
    return moment


class ExampleCases(stores.Store):
    def test_a_page_is_found_by_the_words_its_events_store(self) -> None:
        self.set_environ()
        wiki = SearchableWiki()
        ferns = wiki.create_page("Plants", "Ferns grow in shade")
        oaks = wiki.create_page("Trees", "Oaks grow slowly; FERNS below")
        assert sorted(wiki.search("ferns")) == sorted([ferns, oaks])
        assert wiki.search("oaks") == [oaks] and wiki.search("pines") == []
        wiki.update_body(oaks, "Oaks grow slowly")
        assert wiki.search("ferns") == [ferns] and wiki.search("slowly") == [oaks]
        assert wiki.get_page(oaks).body == "Oaks grow slowly"

    def test_a_save_refused_for_a_taken_version_indexes_nothing(self) -> None:
        self.set_environ()
        wiki = SearchableWiki()
        page_id = wiki.create_page("Plants", "ferns")
        stale = wiki.get_page(page_id)
        wiki.update_body(page_id, "mosses")
        stale.update_body("lichens")
        with pytest.raises(IntegrityError):
            wiki.save(stale)
        assert wiki.search("lichens") == [] and wiki.search("mosses") == [page_id]
        assert wiki.search("ferns") == []
        # a stale copy saved with no events of its own writes nothing either
        loaded = wiki.get_page(page_id)
        wiki.update_body(page_id, "ivy")
        wiki.save(loaded)
        assert wiki.search("ivy") == [page_id] and wiki.search("mosses") == []

    def test_a_projection_indexes_with_its_tracking_records(self) -> None:
        self.set_environ()
        with ProjectionRunner(
            application_class=Wiki,
            projection_class=WikiSearchProjection,
            view_class=WikiSearchView,
        ) as runner:
            wiki = runner.app
            page_id = wiki.create_page("Greeting", "hello world")
            wiki.update_body(page_id, "hello there")
            last = wiki.recorder.max_notification_id()
            runner.wait(last)
            view = runner.view
            assert view.search("hello") == [page_id] and view.search("there") == [page_id]
            assert view.search("world") == []
            assert view.max_tracking_id(wiki.name) == last
            # a notification processed already: the tracking record and the data are refused
            # together
            before = view.read_app_data(page_key(page_id))
            with pytest.raises(IntegrityError):
                view.index_page(page_id, None, "goodbye", Tracking(wiki.name, last))
            assert view.read_app_data(page_key(page_id)) == before
            assert view.search("goodbye") == []

    def test_a_parcel_is_read_as_it_was_at_a_moment(self) -> None:
        self.set_environ()
        parcels = TimestampedParcels()
        before = now()
        parcel_id = parcels.register("Rotterdam")
        registered = now()
        parcels.move(parcel_id, "Dallas")
        moved = now()
        parcels.move(parcel_id, "Melbourne")
        with pytest.raises(AggregateNotFoundError):
            parcels.parcel_at(parcel_id, before)
        with pytest.raises(AggregateNotFoundError):
            parcels.parcel_at(parcel_id, datetime(1960, 1, 1, tzinfo=UTC))
        assert parcels.parcel_at(parcel_id, registered).location == "Rotterdam"
        assert parcels.parcel_at(parcel_id, moved).location == "Dallas"
        assert parcels.parcel_at(parcel_id, now()).location == "Melbourne"


class TestExamplesMemory(stores.Memory, ExampleCases):
    pass


class TestExamplesSqlite(stores.Sqlite, ExampleCases):
    pass


class TestExamplesFdb(stores.Fdb, ExampleCases):
    pass


del ExampleCases
