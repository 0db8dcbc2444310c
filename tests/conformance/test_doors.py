"""The doors a conformance run reaches the plane through: the asyncio door awaits every
operation on the plane's ``AsyncPlane`` from the process's event loop thread, with the
plane's store, settings and hooks; unknown doors and planes it would bypass are refused."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from conformance.doors import DOORS, AsyncioDriven, plane_class, through
from persistence.errors import HeadAdvanced, Validation
from persistence.ids import UniverseId, WorldId
from persistence.plane import OPERATIONS, Plane, PlaneConfig
from segments import open_plane


class Threads:
    """Hooks that note the thread every protocol step is reached on."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def reached(self, step: str) -> None:
        self.seen.add(threading.current_thread().name)


def test_every_operation_of_the_asyncio_door_runs_on_the_event_loop_thread() -> None:
    hooks = Threads()
    config = PlaneConfig(inbox_retention_seconds=30.0)
    plane = open_plane(MemoryEngine(), MemoryObjectStore(), config, hooks=hooks)
    driven = through("asyncio", plane)
    assert type(driven) is AsyncioDriven
    assert (driven.engine, driven.objects, driven.config, driven.hooks) == (
        plane.engine,
        plane.objects,
        config,
        hooks,
    )
    assert all(name in vars(driven) for name in OPERATIONS)  # each one replaced
    u, w = UniverseId.new(), WorldId.new()
    driven.create_world(u, w)
    assert driven.append_batch(u, w, 0, [b"a", b"b"]) == 1  # the first new height
    with pytest.raises(HeadAdvanced):  # errors cross from the loop to the caller, typed
        driven.append_batch(u, w, 0, [b"c"])
    assert hooks.seen == {"asyncio-door"}
    assert plane.read_range(u, w, 1, 5) == [(1, b"a"), (2, b"b")]  # one store


def test_the_blocking_door_is_the_plane_as_given() -> None:
    plane = open_plane(MemoryEngine(), MemoryObjectStore())
    assert through("blocking", plane) is plane
    driven = through("asyncio", plane)
    assert through("asyncio", driven) is driven
    assert [plane_class(door) for door in DOORS] == [Plane, AsyncioDriven]


def test_an_unknown_door_is_refused_naming_the_doors() -> None:
    with pytest.raises(Validation, match=r"door.*blocking, asyncio.*'threads'"):
        plane_class("threads")


def test_the_asyncio_door_refuses_a_plane_whose_operations_it_would_bypass() -> None:
    class Changed(Plane):
        def head(self, *args: Any, **kwargs: Any) -> int:
            return 7

    plane = Changed(MemoryEngine(), MemoryObjectStore())
    assert through("blocking", plane) is plane
    with pytest.raises(Validation, match=r"door.*Changed changes them"):
        through("asyncio", plane)
