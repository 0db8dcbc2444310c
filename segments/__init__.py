"""Cold history: the segment format, export (Protocol F), stitched reads and restore.

:func:`open_plane` is the usual way to get a :class:`~persistence.plane.Plane`: it wires the
engine and object store (instances, or URLs as :func:`backends.kv.open_engine` and
:func:`backends.objects.open_object_store` take them) with the reader of cold segments, so
journal reads stitch exported history and the hot tail.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from persistence.hooks import NO_HOOKS, StepHooks
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane import Plane, PlaneConfig


def open_plane(
    engine: Engine | str,
    objects: ObjectStore | str,
    config: PlaneConfig | None = None,
    *,
    hooks: StepHooks = NO_HOOKS,
    create: bool = True,
    clock: Callable[[], int] = time.time_ns,
) -> Plane:
    """A plane over ``engine`` and ``objects`` that reads cold segments from ``objects``.

    ``create`` applies to what is given as a URL: without it only existing stores open
    (``NotFound`` otherwise) and nothing is created -- what reading tools and jobs use.
    ``clock`` is the plane's wall clock (see :class:`Plane`)."""
    from backends.kv import open_engine
    from backends.objects import open_object_store
    from segments.cold import ObjectStoreSegments

    kv = open_engine(engine, create=create) if isinstance(engine, str) else engine
    store: ObjectStore | None = None
    try:
        store = open_object_store(objects, create=create) if isinstance(objects, str) else objects
        return Plane(kv, store, config, ObjectStoreSegments(store), hooks=hooks, clock=clock)
    except BaseException:
        # what was opened here is not the caller's to close
        if store is not None and store is not objects:
            store.close()
        if kv is not engine:
            kv.close()
        raise
