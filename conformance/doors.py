"""The doors the suite runs its cases through: the blocking :class:`~persistence.plane.Plane`
as it is, or every operation awaited on :class:`~persistence.plane.AsyncPlane` from an event
loop (``asyncio``) -- the same protocol code under the asyncio driver, with the same
guarantees to prove.

:class:`AsyncioDriven` is a ``Plane`` whose operations are its ``AsyncPlane``'s, each run
on one event loop thread shared by the process and waited for by the calling thread. The
cases, the fault matrix (which builds its planes as ``type(ctx.plane)(...)``) and the crash
torture's processes call it as they call a ``Plane``: every call goes through
:func:`~persistence.futures.drive_async` -- FoundationDB's futures awaited from the loop,
SQLite's transactions in the loop's executor. (``universes``/``worlds`` iterate with the
blocking driver.)
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from persistence.errors import Validation
from persistence.plane import OPERATIONS, Plane

T = TypeVar("T")

DOORS: Final = ("blocking", "asyncio")
"""The doors a run may choose (``aosp conformance --door``)."""

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def event_loop() -> asyncio.AbstractEventLoop:
    """The process's loop for :class:`AsyncioDriven` planes, running on a daemon thread
    (started on first use)."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="asyncio-door", daemon=True).start()
            _loop = loop
        return _loop


def _through(
    loop: asyncio.AbstractEventLoop, operation: Callable[..., Coroutine[Any, Any, T]]
) -> Callable[..., T]:
    @functools.wraps(operation)
    def call(*args: Any, **kwargs: Any) -> T:
        return asyncio.run_coroutine_threadsafe(operation(*args, **kwargs), loop).result()

    return call


class AsyncioDriven(Plane):
    """A :class:`Plane` whose every operation is awaited on its ``AsyncPlane`` from the
    loop of :func:`event_loop`; constructed as a ``Plane`` is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        door, loop = self.asyncio(), event_loop()
        for name in OPERATIONS:
            self.__dict__[name] = _through(loop, getattr(door, name))


def plane_class(door: str) -> type[Plane]:
    """The plane class of ``door`` (one of :data:`DOORS`)."""
    if door not in DOORS:
        raise Validation("door", f"one of {', '.join(DOORS)}, not {door!r}")
    return AsyncioDriven if door == "asyncio" else Plane


def through(door: str, plane: Plane) -> Plane:
    """``plane`` behind ``door``: as it is for ``blocking``; for ``asyncio``, an
    :class:`AsyncioDriven` plane on its store with its settings and hooks. A subclass of
    ``Plane`` other than these two is refused there: its own operations would be bypassed."""
    cls = plane_class(door)
    if cls is Plane or type(plane) is cls:
        return plane
    if type(plane) is not Plane:
        raise Validation(
            "door", f"the asyncio door runs Plane's operations; {type(plane).__name__} changes them"
        )
    return cls(
        plane.engine,
        plane.objects,
        plane.config,
        plane.segments,
        hooks=plane.hooks,
        clock=plane.clock,
        create=False,
    )
