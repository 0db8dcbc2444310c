"""Cold history: the segment format, export (Protocol F), stitched reads and restore.

:func:`open_plane` is the usual way to get a :class:`~persistence.plane.Plane`: it wires the
engine and object store (instances, or URLs as :func:`backends.kv.open_engine` and
:func:`backends.objects.open_object_store` take them) with the reader of cold segments, so
journal reads stitch exported history and the hot tail.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TypeVar, cast

from persistence.errors import NotFound, Validation
from persistence.hooks import NO_HOOKS, StepHooks
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane import Plane, PlaneConfig
from persistence.sizes import check_bool

_T = TypeVar("_T")


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
    (``NotFound`` otherwise) and nothing is created -- what reading tools and jobs use --
    and the plane writes nothing on opening (:class:`Plane`'s ``create``).
    ``clock`` is the plane's wall clock (see :class:`Plane`)."""
    from backends.kv import engine_opener
    from backends.objects import object_store_opener
    from segments.cold import ObjectStoreSegments
    from segments.inputs import require_callable

    # Every argument is checked before either store is opened: a refused call creates nothing.
    check_bool(create, "create")
    open_kv = _opener(engine, Engine, engine_opener, create, "engine")
    open_objects = _opener(objects, ObjectStore, object_store_opener, create, "objects")
    if config is not None and not isinstance(config, PlaneConfig):
        raise Validation("config", f"a PlaneConfig, not {type(config).__name__}")
    require_callable(getattr(hooks, "reached", None), "hooks")
    require_callable(clock, "clock")
    # An engine the URL names is opened only if it exists, until the object store has
    # opened: a refused object store leaves no new database behind.
    open_new_kv = open_kv
    if create and isinstance(engine, str):
        with contextlib.suppress(NotFound):  # memory:// names no existing store, ever
            open_kv = _opener(engine, Engine, engine_opener, False, "engine")
    kv: Engine | None
    try:
        kv = open_kv()
    except NotFound:
        if open_kv is open_new_kv:
            raise
        kv = None
    store: ObjectStore | None = None
    try:
        store = open_objects()
        if kv is None:
            kv = open_new_kv()
        return Plane(
            kv, store, config, ObjectStoreSegments(store), hooks=hooks, clock=clock, create=create
        )
    except BaseException:
        # what was opened here is not the caller's to close
        if store is not None and store is not objects:
            store.close()
        if kv is not None and kv is not engine:
            kv.close()
        raise


def _opener(
    given: object,
    kind: type,
    open_url: Callable[..., Callable[[], _T]],
    create: bool,
    field: str,
) -> Callable[[], _T]:
    """How to open ``given``: a URL checked now and opened later, or what the caller
    opened (``Validation`` naming ``field`` for anything else)."""
    if isinstance(given, str):
        return open_url(given, create=create)
    if isinstance(given, kind):
        return lambda: cast(_T, given)
    raise Validation(field, f"an {kind.__name__} or a URL, not {type(given).__name__}")
