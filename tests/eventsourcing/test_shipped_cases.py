"""eventsourcing 9.5's own test cases (shipped in its wheel) against this module, on the
memory engine, on SQLite files and on FoundationDB (the test session's cluster): every
recorder, the infrastructure factory, and applications selecting the module with
``PERSISTENCE_MODULE``."""

from __future__ import annotations

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, ProcessRecorder
from eventsourcing.tests import application as app_cases
from eventsourcing.tests import persistence as cases
from eventsourcing.utils import Environment, get_topic

from aos_eventsourcing import (
    PlaneAggregateRecorder,
    PlaneApplicationRecorder,
    PlaneFactory,
    PlaneProcessRecorder,
    PlaneTrackingRecorder,
)
from tests.eventsourcing import stores


class CustomTrackingRecorder(PlaneTrackingRecorder):
    """A subclass the factory case asks for by class and by topic."""


class FactoryExpectations:
    """What ``InfrastructureFactoryTestCase`` expects the factory to make."""

    def expected_factory_class(self) -> type[PlaneFactory]:
        return PlaneFactory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        return PlaneAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        return PlaneApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[PlaneTrackingRecorder]:
        return PlaneTrackingRecorder

    def tracking_recorder_subclass(self) -> type[PlaneTrackingRecorder]:
        return CustomTrackingRecorder

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        return PlaneProcessRecorder


# ---------------------------------------------------------------------------- memory engine


class TestAggregateRecorderMemory(stores.Memory, cases.AggregateRecorderTestCase):
    def create_recorder(self) -> PlaneAggregateRecorder:
        return self.recorder(PlaneAggregateRecorder)


class TestAggregateRecorderFromVersion0Memory(TestAggregateRecorderMemory):
    """Aggregates whose versions start at 0."""

    INITIAL_VERSION = 0


class TestApplicationRecorderMemory(
    stores.Memory, cases.ApplicationRecorderTestCase[PlaneApplicationRecorder]
):
    def create_recorder(self) -> PlaneApplicationRecorder:
        return self.recorder(PlaneApplicationRecorder)

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestApplicationRecorderFromVersion0Memory(TestApplicationRecorderMemory):
    """Aggregates whose versions start at 0."""

    INITIAL_VERSION = 0


class TestNonInterleavingNotificationIdsMemory(
    stores.Memory, cases.NonInterleavingNotificationIDsBaseCase
):
    def create_recorder(self) -> PlaneApplicationRecorder:
        return self.recorder(PlaneApplicationRecorder)


class TestTrackingRecorderMemory(stores.Memory, cases.TrackingRecorderTestCase):
    def create_recorder(self) -> PlaneTrackingRecorder:
        return self.recorder(PlaneTrackingRecorder)


class TestProcessRecorderMemory(stores.Memory, cases.ProcessRecorderTestCase):
    def create_recorder(self) -> PlaneProcessRecorder:
        return self.recorder(PlaneProcessRecorder)


class TestInfrastructureFactoryMemory(
    FactoryExpectations, stores.Memory, cases.InfrastructureFactoryTestCase[PlaneFactory]
):
    def setUp(self) -> None:
        self.env = Environment("TestCase", self.environ())
        super().setUp()


class TestApplicationMemory(stores.Memory, app_cases.ApplicationTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.set_environ()


class TestExampleApplicationMemory(stores.Memory, app_cases.ExampleApplicationTestCase):
    expected_factory_topic = get_topic(PlaneFactory)

    def setUp(self) -> None:
        super().setUp()
        self.set_environ()


# ---------------------------------------------------------------------------- SQLite files


class TestAggregateRecorderSqlite(stores.Sqlite, cases.AggregateRecorderTestCase):
    def create_recorder(self) -> PlaneAggregateRecorder:
        return self.recorder(PlaneAggregateRecorder)


class TestApplicationRecorderSqlite(
    stores.Sqlite, cases.ApplicationRecorderTestCase[PlaneApplicationRecorder]
):
    def create_recorder(self) -> PlaneApplicationRecorder:
        return self.recorder(PlaneApplicationRecorder)

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestNonInterleavingNotificationIdsSqlite(
    stores.Sqlite, cases.NonInterleavingNotificationIDsBaseCase
):
    def create_recorder(self) -> PlaneApplicationRecorder:
        return self.recorder(PlaneApplicationRecorder)


class TestTrackingRecorderSqlite(stores.Sqlite, cases.TrackingRecorderTestCase):
    def create_recorder(self) -> PlaneTrackingRecorder:
        return self.recorder(PlaneTrackingRecorder)


class TestProcessRecorderSqlite(stores.Sqlite, cases.ProcessRecorderTestCase):
    def create_recorder(self) -> PlaneProcessRecorder:
        return self.recorder(PlaneProcessRecorder)


class TestInfrastructureFactorySqlite(
    FactoryExpectations, stores.Sqlite, cases.InfrastructureFactoryTestCase[PlaneFactory]
):
    def setUp(self) -> None:
        self.env = Environment("TestCase", self.environ())
        super().setUp()


class TestApplicationSqlite(stores.Sqlite, app_cases.ApplicationTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.set_environ()


class TestExampleApplicationSqlite(stores.Sqlite, app_cases.ExampleApplicationTestCase):
    expected_factory_topic = get_topic(PlaneFactory)

    def setUp(self) -> None:
        super().setUp()
        self.set_environ()


# ---------------------------------------------------------------------------- FoundationDB


class TestAggregateRecorderFdb(stores.Fdb, cases.AggregateRecorderTestCase):
    def create_recorder(self) -> PlaneAggregateRecorder:
        return self.recorder(PlaneAggregateRecorder)


class TestApplicationRecorderFdb(
    stores.Fdb, cases.ApplicationRecorderTestCase[PlaneApplicationRecorder]
):
    def create_recorder(self) -> PlaneApplicationRecorder:
        return self.recorder(PlaneApplicationRecorder)

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestNonInterleavingNotificationIdsFdb(
    stores.Fdb, cases.NonInterleavingNotificationIDsBaseCase
):
    def create_recorder(self) -> PlaneApplicationRecorder:
        return self.recorder(PlaneApplicationRecorder)


class TestTrackingRecorderFdb(stores.Fdb, cases.TrackingRecorderTestCase):
    def create_recorder(self) -> PlaneTrackingRecorder:
        return self.recorder(PlaneTrackingRecorder)


class TestProcessRecorderFdb(stores.Fdb, cases.ProcessRecorderTestCase):
    def create_recorder(self) -> PlaneProcessRecorder:
        return self.recorder(PlaneProcessRecorder)


class TestInfrastructureFactoryFdb(
    FactoryExpectations, stores.Fdb, cases.InfrastructureFactoryTestCase[PlaneFactory]
):
    def setUp(self) -> None:
        self.env = Environment("TestCase", self.environ())
        super().setUp()


class TestApplicationFdb(stores.Fdb, app_cases.ApplicationTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.set_environ()


class TestExampleApplicationFdb(stores.Fdb, app_cases.ExampleApplicationTestCase):
    expected_factory_topic = get_topic(PlaneFactory)

    def setUp(self) -> None:
        super().setUp()
        self.set_environ()
