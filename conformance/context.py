"""What every conformance case gets and uses: the run's :class:`Profile` (and its SIGKILL
torture's :class:`TortureSize`), the :class:`Context` of the store under test, the
outcomes a case reports (passed by returning, :class:`ConformanceFailure`,
:class:`CaseSkipped`) and the helpers cases share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from persistence import cbor, contracts
from persistence.errors import PersistError
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.plane import Plane

if TYPE_CHECKING:
    from conformance.torture.servers import ServerFaults


class ConformanceFailure(AssertionError):
    """The backend broke a guarantee; the message says which and how."""


class CaseSkipped(Exception):
    """The case cannot run against this backend; the message says why."""


@dataclass(frozen=True, slots=True)
class TortureSize:
    """Sizes of the SIGKILL crash torture (:mod:`conformance.torture`): OS processes on the
    shared store, and how long and how often they are killed."""

    worlds: int
    writers: int
    drainers: int
    seconds: float
    """How long processes run and are killed (the final checks come after)."""
    mean_kill_interval: float
    """Mean seconds between two kills (exponentially distributed)."""
    appenders: int = 1
    """Processes appending straight to the journal at the head they read."""
    server_kill_interval: float = 2.0
    """With server faults: mean seconds between two server kills (exponentially
    distributed); each killed server is restarted after a random part of that."""
    compaction_retention_seconds: float = 16.0
    """The run's inbox window (``PlaneConfig.inbox_retention_seconds`` of every plane the
    torture opens): consumed items are compacted this long after they were consumed, while
    ``compactors`` processes run passes among the others.

    It must exceed the longest a writer takes to redo a call whose outcome it lost, counted
    from the first attempt's start (the item was consumed after that attempt committed, and
    is removed at least the window after it was consumed): the first attempt (milliseconds
    on SQLite; on FoundationDB up to its 10 s transaction timeout plus the runner's 1 s when
    it meets a recovery) + the kill and restart (the fleet restarts at once, forking from a
    server that imported the worker: milliseconds, then opening the plane) + the kills of
    that writer while it opens the plane again (each process is killed every
    ``mean_kill_interval`` times the processes seconds on average; the killer spares a
    process that has not opened its log yet, ``Fleet.started``, which would test nothing of
    the store) + the redo (again up to a timeout, and redone after ``Backend`` once the
    cluster has recovered).
    Without server kills, on a 2-core machine at a load of 9 (six CPU burners), the slowest
    redo took 1.0-1.3 s on either engine and door. When each restart started a new
    interpreter (2-3 s of imports at that load), runs beside two other test suites saw
    16.3 s and 19.1 s: a writer killed twice while it redid one call. 16 s leaves room for
    a loaded machine (with server kills see
    ``server_kills_retention_seconds``); a run compacts after the window, so a test that
    wants compaction runs longer than it (``compaction_due``). Every run measures it
    (``slowest_redo_seconds``) and reports a redo later than the window as a ``window``
    violation: a derivation that fails is a failed run, never a duplicate blamed on the
    store."""
    server_kills_retention_seconds: float = 20.0
    """The window instead of ``compaction_retention_seconds`` while server processes are
    killed too: a first attempt can meet a recovery and time out (11 s), then the restarts
    (forks: milliseconds, then opening the plane) and the redo (seconds: a server is killed
    only once the cluster has healed from the last kill, so the redo does not wait out a
    second timeout), about 13 s."""
    compactors: int = 1
    """Compactor processes (more than one run concurrent passes over the same worlds)."""
    floors: tuple[tuple[str, int], ...] = ()
    """Figures the run must reach (``("kills", 40)``, ...): past ``seconds`` it goes on, its
    processes still killed, until the figures it can read while running (kills, what the
    workers' logs acknowledge, monitor samples) reach them, or ``max_seconds``. So a test's
    floors do not depend on how fast a loaded machine runs."""
    max_seconds: float = 0.0
    """The longest a run with ``floors`` goes on (at least ``seconds``)."""

    def retention_seconds(self, server_kills: bool) -> float:
        """The run's inbox window (see ``compaction_retention_seconds``)."""
        if server_kills:
            return self.server_kills_retention_seconds
        return self.compaction_retention_seconds


@dataclass(frozen=True, slots=True)
class Profile:
    """Sizes of one run. ``quick`` is for CI, ``full`` for nightly runs."""

    name: str
    writers: int
    items_per_writer: int
    sparse_worlds: int
    active_worlds: int
    ingress_seconds: float
    export_entries: int
    torture: TortureSize
    fault_seeds: int
    """Seeded random fault-and-crash runs of the fault matrix, after the systematic ones."""


PROFILES = {
    "quick": Profile(
        "quick",
        4,
        40,
        1_000,
        100,
        3.0,
        3_000,
        TortureSize(2, 2, 1, 4.0, 0.4, appenders=1, server_kill_interval=1.0),
        fault_seeds=0,
    ),
    "full": Profile(
        "full",
        8,
        250,
        10_000,
        1_000,
        20.0,
        30_000,
        TortureSize(4, 4, 2, 30.0, 0.3, appenders=2, server_kill_interval=2.0, compactors=2),
        fault_seeds=24,
    ),
}


@dataclass
class Context:
    """What a case gets: the plane under test and the run's profile.

    ``kv_url`` and ``objects_url`` open the same store in another process (the crash
    torture starts OS processes on it); ``None`` means the URL the engine and the object
    store report about themselves."""

    plane: Plane
    profile: Profile
    progress: Callable[[str], None] = lambda _: None
    notes: dict[str, Any] = field(default_factory=dict)
    kv_url: str | None = None
    objects_url: str | None = None
    servers: ServerFaults | None = None
    """How to kill and restart the store's own server processes (crash 2), if given."""
    door: str = "blocking"
    """The door ``plane`` is reached through (:mod:`conformance.doors`); the crash
    torture's processes use it too."""

    def store_urls(self) -> tuple[str, str]:
        """URLs that open the store under test from another process."""
        return (
            self.kv_url if self.kv_url is not None else self.plane.engine.url,
            self.objects_url if self.objects_url is not None else self.plane.objects.url,
        )

    @property
    def store(self) -> contracts.PlaneContract:
        """The store under test as its contract states it: what a case that checks the
        contract (not how the plane implements it over its backend) calls."""
        return self.plane

    def new_world(self) -> tuple[UniverseId, WorldId]:
        """A world in a fresh universe."""
        universe, world = UniverseId.new(), WorldId.new()
        self.plane.create_world(universe, world)
        return universe, world


def check(condition: bool, message: str) -> None:
    """Fail the case with ``message`` unless ``condition``."""
    if not condition:
        raise ConformanceFailure(message)


def expect_error(kind: type[PersistError], call: Callable[[], object], what: str) -> Any:
    """Run ``call``; it must raise ``kind``. Returns the error."""
    try:
        call()
    except kind as exc:
        return exc
    except PersistError as exc:
        raise ConformanceFailure(
            f"{what}: raised {type(exc).__name__}, expected {kind.__name__}"
        ) from exc
    raise ConformanceFailure(f"{what}: no error, expected {kind.__name__}")


def event(n: int, tag: str = "") -> DomainEventIngress:
    """A small, recognisable inbox item."""
    return DomainEventIngress("conformance/Event@1", cbor.encode({"n": n, "tag": tag}))


def run_threads(count: int, target: Callable[[int], None]) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads started together; return their errors."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # reported to the case
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def journal_items(
    store: contracts.PlaneContract, universe: UniverseId, world: WorldId
) -> list[IngressJournalRecord]:
    """The ingress records of a world's journal, in height order."""
    head = store.head(universe, world)
    records = [decode_journal_record(e) for _, e in store.read_range(universe, world, 1, head)]
    return [r for r in records if isinstance(r, IngressJournalRecord)]
