"""An event-sourced application's old events, let go cold and exported, are rows of the
``aos_segments`` Spark source: one per event, its entry the module's CBOR array
``[version, topic, state]`` (docs/eventsourcing.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.system import SingleThreadedRunner

from aos_eventsourcing import PlaneApplicationRecorder
from aos_eventsourcing.codec import NAMESPACE
from aosp.cli import main as aosp_main
from persistence import cbor
from tests.eventsourcing.bank import Bank, system


def test_spark_reads_an_applications_exported_events(spark: Any, tmp_path: Path) -> None:
    env = {
        "PERSISTENCE_MODULE": "aos_eventsourcing",
        "AOSP_KV_URL": f"sqlite://{tmp_path}/aos.db",
        "AOSP_OBJECTS_URL": f"file://{tmp_path}/objects",
    }
    with SingleThreadedRunner[UUID](system, env=env) as runner:
        bank = runner.get(Bank)
        alice, bob = bank.open_account("Alice"), bank.open_account("Bob")
        for amount in (10, 20, 30):
            bank.deposit(alice, amount)
        bank.deposit(bob, 5)
        recorder = bank.recorder
        assert isinstance(recorder, PlaneApplicationRecorder)
        recorder.set_cold_version(alice, 3)  # opened and two deposits go cold
        recorder.set_cold_version(bob, 2)
    store = ["--kv", env["AOSP_KV_URL"], "--objects", env["AOSP_OBJECTS_URL"]]
    assert aosp_main(["segments", "export", *store, "--quiet"]) == 0
    rows = (
        spark.read.format("aos_segments")
        .options(
            kv=env["AOSP_KV_URL"],
            objects=env["AOSP_OBJECTS_URL"],
            universe=str(uuid5(NAMESPACE, "Bank")),
            columns="world,height,entry",
        )
        .load()
        .collect()
    )
    events = sorted((UUID(r.world), r.height, *cbor.decode(bytes(r.entry))[:2]) for r in rows)
    assert [(world, height, version) for world, height, version, _ in events] == sorted(
        [(alice, 1, 1), (alice, 2, 2), (alice, 3, 3), (bob, 1, 1), (bob, 2, 2)]
    )
    topics = {topic.rsplit(".", 1)[-1] for *_, topic in events}
    assert topics == {"Opened", "Deposited"}
