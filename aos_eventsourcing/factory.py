"""The infrastructure factory eventsourcing constructs for ``PERSISTENCE_MODULE=aos_eventsourcing``.

Configured through the application's environment, as eventsourcing's own factories are (a
variable prefixed with the application's name in upper case, ``BANK_AOSP_KV_URL``, wins
over the plain one for that application):

``AOSP_KV_URL``
    the engine, required: ``sqlite:///path/aos.db``, ``fdb:///etc/foundationdb/fdb.cluster``,
    or ``memory://`` for a store lost at exit (the forms :func:`backends.kv.open_engine`
    takes; the ``aosp`` CLI's ``--kv``). Unset, the factory refuses (``OSError``), as
    eventsourcing's SQLite module refuses a missing ``SQLITE_DBNAME``.
``AOSP_OBJECTS_URL``
    the object store: ``file:///dir``, ``s3://bucket/prefix?...``, ``memory://``
    (:func:`backends.objects.open_object_store`; the CLI's ``--objects``). Unset, it is
    ``memory://`` beside a ``memory://`` engine and refused (``OSError``) beside a durable
    one: large bodies and cold segments would be lost at exit.
``AOSP_UNIVERSE``
    the application's universe id (default: derived from the application's name with
    :func:`uuid.uuid5`, so every process of an application finds the same one). Give it per
    application (``BANK_AOSP_UNIVERSE``): applications sharing a universe share one
    notification log. **Unset, the store follows the application's name -- its class name
    unless it sets ``name``: renaming the class (or ``name``) starts an empty universe and
    hides the application's history** (still stored, under the old name's universe). Pin
    ``AOSP_UNIVERSE`` in production.
``AOSP_COLD_AT_SNAPSHOTS``
    ``y`` (eventsourcing's true values: ``y``, ``yes``, ``t``, ``true``, ``on``, ``1``): each
    snapshot the application takes lets its aggregate's events at or below the snapshot's
    version go cold (:class:`~aos_eventsourcing.recorders.PlaneSnapshotRecorder`), for
    segment export to move to the object store; default ``n``.

``AOSP_LOG_SEQUENCING``
    how a save's events take notification ids (``PlaneConfig.log_sequencing``): ``adaptive``
    (the default: in the save's transaction while saves do not overlap, queued and settled
    in a second transaction while they do), ``inline`` or ``queued``.

eventsourcing's own settings of its SQLite and PostgreSQL modules:

``CREATE_TABLE``
    honoured: true (the default) creates the store on first use; false (``n``, ``no``,
    ...) opens only an existing one and creates nothing: ``OSError`` naming it if the
    SQLite file or object directory is missing (on FoundationDB, an empty keyspace refuses
    the first write); refused with ``memory://`` (always new).
``ORIGINATOR_ID_TYPE``
    ``uuid`` or ``text`` (``OSError`` otherwise), as eventsourcing's SQLite module checks it;
    either way this module stores both kinds of id and gives each back as it was stored.
``SQLITE_LOCK_TIMEOUT``
    seconds (an int, as eventsourcing reads it) an SQLite store waits for its write lock:
    the ``busy_timeout`` of ``AOSP_KV_URL`` (an ``OSError`` if the URL gives another, or
    if the store is not SQLite: it has no meaning there).
"""

from __future__ import annotations

import dataclasses
import threading
import urllib.parse
import uuid
from typing import Final, TypeVar

from eventsourcing.dcb.persistence import DCBInfrastructureFactory
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment, EnvType, resolve_topic, strtobool

from aos_eventsourcing import codec
from aos_eventsourcing.dcb import PlaneDCBRecorder
from aos_eventsourcing.recorders import (
    CLOSED,
    PlaneAggregateRecorder,
    PlaneApplicationRecorder,
    PlaneClosedError,
    PlaneSnapshotRecorder,
)
from aos_eventsourcing.tracking import PlaneProcessRecorder, PlaneTrackingRecorder
from persistence.errors import NotFound, PersistError, Validation
from persistence.ids import UniverseId
from persistence.plane import Plane, PlaneConfig
from segments import open_plane

MEMORY_URL: Final = "memory://"
R = TypeVar("R")


def _is_number(text: str) -> bool:
    """Whether ``text`` is a decimal number of seconds (as a URL's ``busy_timeout``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


class PlaneFactory(
    InfrastructureFactory[PlaneTrackingRecorder], DCBInfrastructureFactory[PlaneTrackingRecorder]
):
    """Recorders of one application over the plane of ``AOSP_KV_URL`` and
    ``AOSP_OBJECTS_URL``, opened at the first recorder and closed by :meth:`close`; also
    the infrastructure of eventsourcing's ``DCBApplication`` (:meth:`dcb_recorder`)."""

    AOSP_KV_URL: Final = "AOSP_KV_URL"
    AOSP_OBJECTS_URL: Final = "AOSP_OBJECTS_URL"
    AOSP_UNIVERSE: Final = "AOSP_UNIVERSE"
    AOSP_COLD_AT_SNAPSHOTS: Final = "AOSP_COLD_AT_SNAPSHOTS"
    AOSP_LOG_SEQUENCING: Final = "AOSP_LOG_SEQUENCING"
    CREATE_TABLE: Final = "CREATE_TABLE"
    ORIGINATOR_ID_TYPE: Final = "ORIGINATOR_ID_TYPE"
    SQLITE_LOCK_TIMEOUT: Final = "SQLITE_LOCK_TIMEOUT"

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        kv_url = self._setting(self.AOSP_KV_URL)
        if kv_url is None:
            keys = ", ".join(self.env.create_keys(self.AOSP_KV_URL))
            raise OSError(
                f"{self.AOSP_KV_URL} not set (looked for {keys}): set it to the store's URL "
                "(sqlite:///path/aos.db, fdb:///etc/foundationdb/fdb.cluster), or to "
                f"{MEMORY_URL} for an in-memory store that is lost at exit"
            )
        self.kv_url = self._lock_timeout(kv_url)
        """The engine's URL (with ``SQLITE_LOCK_TIMEOUT`` as its ``busy_timeout``)."""
        objects_url = self._setting(self.AOSP_OBJECTS_URL)
        if objects_url is None and urllib.parse.urlsplit(kv_url).scheme != "memory":
            keys = ", ".join(self.env.create_keys(self.AOSP_OBJECTS_URL))
            raise OSError(
                f"{self.AOSP_OBJECTS_URL} not set (looked for {keys}) beside the durable "
                f"{self.AOSP_KV_URL}={kv_url!r}: set it to a durable object store "
                "(file:///var/lib/app/objects, s3://bucket/prefix?...); large bodies and "
                f"cold segments in {MEMORY_URL} would be lost at exit"
            )
        self.objects_url = objects_url or MEMORY_URL
        """The object store's URL (``memory://`` only beside a ``memory://`` engine, unless
        set)."""
        cold = self._setting(self.AOSP_COLD_AT_SNAPSHOTS) or "n"
        try:
            self.cold_at_snapshots = bool(strtobool(cold))
            """Whether snapshots let their aggregates' older events go cold."""
        except ValueError:
            raise OSError(f"{self.AOSP_COLD_AT_SNAPSHOTS}={cold!r}: not a yes or no") from None
        sequencing = self._setting(self.AOSP_LOG_SEQUENCING) or "adaptive"
        if sequencing not in ("adaptive", "inline", "queued"):
            raise OSError(f"{self.AOSP_LOG_SEQUENCING}={sequencing!r}: adaptive, inline or queued")
        self.config = PlaneConfig(log_sequencing=sequencing)  # type: ignore[arg-type]
        """The plane's settings (``AOSP_LOG_SEQUENCING``)."""
        create = self.env.get(self.CREATE_TABLE) or "y"
        try:
            self.create = bool(strtobool(create))
            """Whether the store is created if missing (``CREATE_TABLE``)."""
        except ValueError:
            raise OSError(f"{self.CREATE_TABLE}={create!r}: not a yes or no") from None
        if not self.create and self.kv_url == MEMORY_URL:
            raise OSError(
                f"{self.CREATE_TABLE}={create!r}: {self.AOSP_KV_URL}={self.kv_url!r} is a new, "
                "empty store every time, never an existing one"
            )
        id_type = self.env.get(self.ORIGINATOR_ID_TYPE) or "uuid"
        if id_type.lower() not in ("uuid", "text"):
            raise OSError(
                f"{self.ORIGINATOR_ID_TYPE}={id_type!r}: must be 'uuid' or 'text' (this "
                "module stores either kind of id whatever it says)"
            )
        self._lock = threading.Lock()
        self._plane: Plane | None = None
        self._closed = threading.Event()  # shared with the recorders: set, they all fail

    def _setting(self, variable: str) -> str | None:
        """The value of ``variable`` (the application's prefixed one first), ``None`` if
        unset; an ``OSError`` naming the variable if it is set but empty or has blanks
        around it -- set by mistake, it must not silently mean the default (or, for
        ``AOSP_KV_URL``, be read as unset)."""
        for key in self.env.create_keys(variable):
            value = dict.get(self.env, key)  # this key only (``Environment.get`` prefixes)
            if value is None:
                continue
            if not value.strip():
                hint = "" if variable == self.AOSP_KV_URL else " (unset it for the default)"
                raise OSError(f"{key}={value!r}: empty{hint}")
            if value != value.strip():
                raise OSError(f"{key}={value!r}: blanks around the value")
            return value
        return None

    def _lock_timeout(self, kv_url: str) -> str:
        """``kv_url`` with ``SQLITE_LOCK_TIMEOUT``, if set, as its ``busy_timeout``
        (``OSError`` naming it if it is not a whole number of seconds, if the URL gives
        another ``busy_timeout``, or if ``kv_url`` is not an SQLite store's)."""
        text = (self.env.get(self.SQLITE_LOCK_TIMEOUT) or "").strip()
        if not text:
            return kv_url
        setting = f"{self.SQLITE_LOCK_TIMEOUT}={text!r}"
        if not (text.isascii() and text.isdigit()):
            raise OSError(f"{setting}: not a whole number of seconds")
        parts = urllib.parse.urlsplit(kv_url)
        if parts.scheme != "sqlite":
            raise OSError(
                f"{setting}: applies to an SQLite store only, and {self.AOSP_KV_URL} is "
                f"{kv_url!r} (unset it for this application)"
            )
        seconds = int(text)
        given = urllib.parse.parse_qs(parts.query).get("busy_timeout")
        if given is None:
            query = f"{parts.query}&" if parts.query else ""
            return urllib.parse.urlunsplit(parts._replace(query=f"{query}busy_timeout={seconds}"))
        if not all(_is_number(value) and float(value) == seconds for value in given):
            raise OSError(f"{setting}: {self.AOSP_KV_URL}={kv_url!r} gives another busy_timeout")
        return kv_url

    @property
    def plane(self) -> Plane:
        """The plane (opened, creating the store if need be, on first use;
        :class:`~aos_eventsourcing.recorders.PlaneClosedError` once :meth:`close` closed
        it, as eventsourcing's own factories refuse a closed datastore)."""
        with self._lock:
            if self._closed.is_set():
                raise PlaneClosedError(CLOSED)
            if self._plane is None:
                try:
                    self._plane = open_plane(
                        self.kv_url, self.objects_url, self.config, create=self.create
                    )
                except NotFound as exc:
                    if self.create:
                        raise codec.translate(exc) from exc
                    raise OSError(
                        f"{self.CREATE_TABLE}=false: the store does not exist, and it is "
                        f"created only when {self.CREATE_TABLE} is unset or true: {exc}"
                    ) from None
                except Validation as exc:
                    raise OSError(
                        f"{self.AOSP_KV_URL}={self.kv_url!r} or {self.AOSP_OBJECTS_URL}="
                        f"{self.objects_url!r}: {exc}"
                    ) from None
                except PersistError as exc:
                    raise codec.translate(exc) from exc
            return self._plane

    def universe(self, purpose: str = "events") -> UniverseId:
        """The universe of the application's ``purpose`` records: ``AOSP_UNIVERSE`` or the
        one named by the application; snapshots (any purpose but events) in a universe
        derived from it."""
        text = self._setting(self.AOSP_UNIVERSE)
        if text is not None:
            try:
                universe = UniverseId.parse(text)
            except Validation as exc:
                raise OSError(f"{self.AOSP_UNIVERSE}={text!r}: {exc.problem}") from None
        else:
            universe = UniverseId(uuid.uuid5(codec.NAMESPACE, self.env.name))
        if purpose == "events":
            return universe
        return UniverseId(uuid.uuid5(universe.uuid, codec.check_text(purpose, "purpose")))

    def aggregate_recorder(self, purpose: str = "events") -> PlaneAggregateRecorder:
        """A recorder of ``purpose`` records (eventsourcing asks for ``snapshots``; with
        ``AOSP_COLD_AT_SNAPSHOTS``, theirs lets the events they summarize go cold)."""
        closed = self._closed
        if purpose == "snapshots" and self.cold_at_snapshots:
            events = PlaneAggregateRecorder(self.plane, self.universe(), closed=closed)
            return PlaneSnapshotRecorder(self.plane, self.universe(purpose), events, closed=closed)
        return PlaneAggregateRecorder(self.plane, self.universe(purpose), closed=closed)

    def application_recorder(self) -> PlaneApplicationRecorder:
        """The application's recorder (``APPLICATION_RECORDER_TOPIC`` names a subclass),
        after settling its notification log (:meth:`_settled`)."""
        cls = self._class(self.APPLICATION_RECORDER_TOPIC, PlaneApplicationRecorder)
        return cls(self._settled(self.universe()), self.universe(), closed=self._closed)

    def _settled(self, universe: UniverseId) -> Plane:
        """The plane, once the notification log of ``universe`` has given ids to the events
        of saves whose process stopped between recording them and settling their ids (a
        queued save, ``AOSP_LOG_SEQUENCING``): a restarted application's followers see them
        without waiting for its next save. Reads only, unless such events are queued."""
        plane = self.plane
        try:
            plane.settle_log(universe)
        except PersistError as exc:
            raise codec.translate(exc) from exc
        return plane

    def tracking_recorder(
        self, tracking_recorder_class: type[PlaneTrackingRecorder] | None = None
    ) -> PlaneTrackingRecorder:
        """A tracking recorder (``tracking_recorder_class`` or ``TRACKING_RECORDER_TOPIC``
        names a subclass)."""
        cls = tracking_recorder_class or self._class(
            self.TRACKING_RECORDER_TOPIC, PlaneTrackingRecorder
        )
        return cls(self.plane, self.universe(), closed=self._closed)

    def dcb_recorder(self) -> PlaneDCBRecorder:
        """A DCB application's recorder: its store in the universe derived for ``"dcb"``
        (:mod:`aos_eventsourcing.dcb`), on a plane that sequences inline whatever
        ``AOSP_LOG_SEQUENCING`` says: a DCB store's positions are its world's heights, so its
        appends serialize on that world's head, and queuing their log records (which only
        wake subscriptions) would add a transaction to each and spare them no conflict."""
        plane = self.plane
        inline = Plane(
            plane.engine,
            plane.objects,
            dataclasses.replace(plane.config, log_sequencing="inline"),
            plane.segments,
        )
        recorder = PlaneDCBRecorder(inline, self.universe("dcb"), closed=self._closed)
        recorder.settle()  # what a writer stopped between its two steps left queued
        return recorder

    def process_recorder(self) -> PlaneProcessRecorder:
        """A process application's recorder (``PROCESS_RECORDER_TOPIC`` names a subclass)."""
        cls = self._class(self.PROCESS_RECORDER_TOPIC, PlaneProcessRecorder)
        return cls(self._settled(self.universe()), self.universe(), closed=self._closed)

    def _class(self, variable: str, default: type[R]) -> type[R]:
        """The class the topic in ``variable`` names (a subclass of ``default``), else
        ``default``."""
        topic = self.env.get(variable)
        if not topic:
            return default
        cls: object = resolve_topic(topic)
        if not (isinstance(cls, type) and issubclass(cls, default)):
            raise OSError(f"{variable}={topic!r} is not a subclass of {default.__name__}")
        return cls

    def close(self) -> None:
        """Close the plane's engine and object store (if opened); every recorder of the
        factory fails after it, on every engine (``PlaneClosedError``: eventsourcing's
        ``ConnectionPoolClosedError``, and an ``OperationalError``)."""
        with self._lock:
            self._closed.set()
            plane, self._plane = self._plane, None
        if plane is not None:
            try:
                plane.engine.close()
            finally:
                plane.objects.close()
