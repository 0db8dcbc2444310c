"""eventsourcing on the plane: the persistence module of ``PERSISTENCE_MODULE=aos_eventsourcing``.

An eventsourcing application selects it, and names its store, with environment variables::

    PERSISTENCE_MODULE=aos_eventsourcing
    AOSP_KV_URL=sqlite:///var/lib/app/aos.db        # or fdb:///etc/foundationdb/fdb.cluster
    AOSP_OBJECTS_URL=file:///var/lib/app/objects    # or s3://bucket/prefix?...

Each application is a universe, each aggregate a world, each stored event a journal entry;
notification ids are positions of the universe's log. See ``docs/eventsourcing.md``.

**The universe follows the application's name** (its class name unless it sets ``name``)
unless ``AOSP_UNIVERSE`` pins it: rename the class and the application opens an empty
universe, its history hidden (not lost) under the old name's. Pin ``BANK_AOSP_UNIVERSE``
in production.
"""

from persistence.errors import MissingDependency

try:
    import eventsourcing  # noqa: F401
except ImportError:
    raise MissingDependency(
        "aos_eventsourcing needs eventsourcing: pip install 'aos-persistence[eventsourcing]'"
    ) from None

from aos_eventsourcing.dcb import PlaneDCBRecorder
from aos_eventsourcing.factory import PlaneFactory
from aos_eventsourcing.recorders import (
    PlaneAggregateRecorder,
    PlaneApplicationRecorder,
    PlaneClosedError,
    PlaneSnapshotRecorder,
    PlaneSubscription,
)
from aos_eventsourcing.tracking import PlaneProcessRecorder, PlaneTrackingRecorder

__all__ = [
    "PlaneAggregateRecorder",
    "PlaneApplicationRecorder",
    "PlaneClosedError",
    "PlaneDCBRecorder",
    "PlaneFactory",
    "PlaneProcessRecorder",
    "PlaneSnapshotRecorder",
    "PlaneSubscription",
    "PlaneTrackingRecorder",
]
