"""The PostgreSQL comparator is real: a server of its own (the distribution's binaries, a new
cluster on loopback, durable commits) running eventsourcing's own PostgreSQL module, as the
``eventsourcing-scale`` benchmark runs it; skipped, saying why, where PostgreSQL's server is
not installed."""

from __future__ import annotations

from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.dcb.api import DCBAppendCondition, DCBEvent, DCBQuery, DCBQueryItem
from eventsourcing.dcb.application import DCBApplication
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from eventsourcing.postgres import PostgresApplicationRecorder

from aos_bench import pg_local

pytestmark = pytest.mark.skipif(
    pg_local.binaries() is None,
    reason="PostgreSQL's server is not installed (Debian: apt-get install postgresql)",
)


def test_eventsourcing_postgres_runs_on_a_durable_server_of_its_own() -> None:
    with pg_local.running() as server:
        settings = server.settings()
        assert (settings["fsync"], settings["synchronous_commit"]) == ("on", "on")
        app = Application[UUID](env=server.environ())
        try:
            assert isinstance(app.recorder, PostgresApplicationRecorder)
            item = Aggregate()
            app.save(item)
            assert app.repository.get(item.id).version == 1
            assert app.recorder.max_notification_id() == 1
        finally:
            app.close()
        env = {**server.environ(), "PERSISTENCE_MODULE": "eventsourcing.dcb.postgres_tt"}
        dcb = DCBApplication(env=env)
        try:
            query = DCBQuery([DCBQueryItem(tags=["seat"])])
            dcb.recorder.append([DCBEvent("Booked", b"1", ["seat"])])
            with pytest.raises(IntegrityError):
                dcb.recorder.append([DCBEvent("Booked", b"2", ["seat"])], DCBAppendCondition(query))
        finally:
            dcb.close()
    assert not server.home.exists()  # the cluster's directory is removed
