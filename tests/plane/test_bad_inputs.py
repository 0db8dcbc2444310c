"""The bad-input matrix: every public entry point refuses bad input with a typed error that
names the argument, and a refused call writes nothing.

Each case is one bad value for one argument of one call (the other arguments good), run on
four stores: the memory engine with memory objects, SQLite with ``file://`` objects, SQLite
inside the fault-injecting wrapper (``faults+sqlite://``) with memory objects, and SQLite with
S3 on a moto server. One store per backend is set up once with a world holding blobs (inline
and external), journal entries, an inbox item, snapshots (complete, incomplete, foreign) and
an effect and a timer; every case then asserts

* the error is the expected ``PersistError`` subclass (never ``TypeError``, ``ValueError``,
  ``OSError`` ...) and its message names the argument, and
* every key and value of the engine and every object key and body are byte-identical to
  what they were before the case.

Calls: ids (construction and parse), every public method of :class:`Plane`, ``PlaneConfig``,
the object store's methods, the engine transaction's, and cold history's entry points: the
exporter and its config, restore, the full and the checked replay, ``load_root``, the segment
check, orphan collection and fsck.

Opening a store is a matrix of its own (no store to compare, so none of the four): bad URLs
for ``open_engine``, ``open_object_store`` and ``open_plane``, and bad arguments of the
constructors behind them, each run in an empty directory (also the working directory) that
must still be empty afterwards.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from aosp.fsck import Fsck
from backends.kv import open_engine
from backends.kv.sqlite import SqliteEngine
from backends.objects import open_object_store
from backends.objects.local import LocalObjectStore
from backends.objects.s3 import S3ObjectStore
from persistence import cbor, kv
from persistence.errors import (
    BaselineRegression,
    CursorAdvanced,
    EngineError,
    HeadAdvanced,
    NotFound,
    PersistError,
    ReceiptHorizonFence,
    RootIncomplete,
    SnapshotMismatch,
    StoreFormatError,
    Validation,
    WorldExists,
    WorldNotFound,
)
from persistence.ids import Hash, InboxSeq, SegmentId, UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, InboxIngress
from persistence.kernel import ReferenceKernel
from persistence.objects import ObjectStore
from persistence.plane import AppTransaction, Plane, PlaneConfig
from persistence.records import EffectDispatchItem, SnapshotRecord, TimerDueItem
from persistence.segment_records import SegmentIndexRecord
from persistence.sizes import (
    MAX_APP_KEY_BYTES,
    MAX_APP_VALUE_BYTES,
    MAX_NAME_CHARS,
    MAX_OBJECT_KEY_BYTES,
)
from segments import open_plane
from segments.collect import collect_world
from segments.export import ExportConfig, Exporter
from segments.format import SegmentHeader, SegmentWriter, segment_key
from segments.restore import check_replay, full_replay, load_root, replay, restore
from segments.verify import check_segments
from tests.objects.servers import S3Server

STORE_KINDS = ["memory", "sqlite+file", "faults+sqlite", "sqlite+s3"]

U = UniverseId(uuid.UUID(int=0xA1))
W = WorldId(uuid.UUID(int=0xB1))
OTHER_U = UniverseId(uuid.UUID(int=0xA2))
OTHER_W = WorldId(uuid.UUID(int=0xB2))
UNKNOWN_W = WorldId(uuid.UUID(int=0xB3))
NEW_W = WorldId(uuid.UUID(int=0xB4))
INTENT = Hash.of(b"intent")
ABSENT = Hash.of(b"absent from every CAS")
ITEM = DomainEventIngress("test/Event@1", cbor.encode({"n": 1}))
TIMER = TimerDueItem(W, INTENT, 1_000, cbor.encode("tick"))
EFFECT = EffectDispatchItem(W, INTENT, "http", cbor.encode(1))


@dataclass
class Store:
    """One backend's plane, the fixtures the cases name, and the dump they compare."""

    kind: str
    plane: Plane
    engine: kv.Engine
    objects: ObjectStore
    seq: InboxSeq
    effect_seq: InboxSeq
    small: Hash
    foreign: Hash
    lower: SnapshotRecord
    incomplete: SnapshotRecord
    foreign_root: SnapshotRecord
    not_a_manifest: SnapshotRecord
    not_indexed: SnapshotRecord
    segment: SegmentIndexRecord
    """Heights 1-1 of ``W`` uploaded at their canonical key, not indexed."""
    state: tuple[object, ...] = field(default=())

    def dump(self) -> tuple[object, ...]:
        """Every key and value of the engine and every object key and body."""
        rows = kv.run(self.engine, lambda tr: tr.get_range(b"", b"\xff"))
        bodies = [(info.key, self.objects.get(info.key)) for info in self.objects.list()]
        return tuple(rows), tuple(bodies)


def _snapshot(plane: Plane, height: int, manifest: list[Hash], promote: bool) -> SnapshotRecord:
    record, _ = plane.snapshot_commit(
        U,
        W,
        b"kernel state at %d" % height,
        height=height,
        logical_time_ns=height,
        manifest=manifest,
        receipt_horizon_height=height,
        promote_baseline=promote,
    )
    return record


def _populate(kind: str, plane: Plane) -> Store:
    plane.create_world(U, W, handle="main")
    plane.create_world(OTHER_U, OTHER_W)
    small = plane.put_verified(U, b"small blob")
    plane.put_verified(U, b"L" * 40_000)  # over the inline threshold: an object
    foreign = plane.put_verified(OTHER_U, b"only in the other universe")
    plane.append_batch(U, W, 0, [b"e1", b"e2"])
    (seq,) = plane.enqueue_batch(U, W, [ITEM])
    _snapshot(plane, 2, [small], promote=True)  # the baseline; the head is now 4
    lower = _snapshot(plane, 1, [small], promote=False)
    incomplete = _snapshot(plane, 3, [ABSENT], promote=False)
    foreign_root = _snapshot(plane, 4, [foreign], promote=False)
    ref = plane.put_verified(U, b"kernel state at 5")
    not_a_manifest = SnapshotRecord(ref, 5, 5, small, receipt_horizon_height=5)
    plane.index_snapshot(U, W, not_a_manifest)
    not_indexed = SnapshotRecord(ref, 6, 6, lower.manifest_hash, receipt_horizon_height=6)
    effect_seq = plane.dispatch_effect(U, EFFECT)
    plane.schedule_timer(U, TIMER)
    out = io.BytesIO()
    writer = SegmentWriter(out, SegmentHeader(U, W, 1, 1))
    writer.add(1, plane.read_range(U, W, 1, 1)[0][1])
    checksum = writer.finish()
    segment = SegmentIndexRecord(1, 1, segment_key(U, W, 1, 1), "blake3", checksum, 1, writer.size)
    plane.objects.put(segment.object_key, out.getvalue())
    store = Store(
        kind,
        plane,
        plane.engine,
        plane.objects,
        seq,
        effect_seq,
        small,
        foreign,
        lower,
        incomplete,
        foreign_root,
        not_a_manifest,
        not_indexed,
        segment,
    )
    store.state = store.dump()
    return store


@pytest.fixture(scope="module", params=STORE_KINDS)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    kind: str = request.param
    tmp: Path = tmp_path_factory.mktemp(kind.replace("+", "-"))
    sqlite = f"sqlite://{tmp}/kv.db?synchronous=OFF"
    objects: ObjectStore
    if kind == "memory":
        engine, objects = open_engine("memory://"), open_object_store("memory://")
    elif kind == "sqlite+file":
        engine, objects = open_engine(sqlite), open_object_store(f"file://{tmp}/objects?fsync=0")
    elif kind == "faults+sqlite":
        engine, objects = open_engine(f"faults+{sqlite}"), open_object_store("memory://")
    else:
        server: S3Server = request.getfixturevalue("moto_s3")
        bucket = server.create_bucket()
        objects = open_object_store(
            f"s3://{bucket}/matrix?endpoint_url={server.endpoint_url}&region={server.region}",
            credentials={
                "aws_access_key_id": server.access_key,
                "aws_secret_access_key": server.secret_key,
            },
        )
        engine = open_engine(sqlite)
    yield _populate(kind, open_plane(engine, objects))
    engine.close()
    objects.close()


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """``call`` must raise ``error`` whose message contains ``names`` (or ``names(store)``)."""

    id: str
    call: Callable[[Store], object]
    error: type[PersistError]
    names: str | Callable[[Store], str]


CASES: list[Case] = []


def case(
    id: str,
    call: Callable[[Store], object],
    error: type[PersistError] = Validation,
    names: str | Callable[[Store], str] = "",
) -> None:
    CASES.append(Case(id, call, error, names or id.split(":")[0].split(".")[-1]))


Args = Callable[[Store], dict[str, Any]]


def without_store(
    fn: Callable[..., object], *args: Any, **kwargs: Any
) -> Callable[[Store], object]:
    """A case call that needs no store: ``fn(*args, **kwargs)``."""
    return lambda s: fn(*args, **kwargs)


def on_objects(method: str, *args: Any, **kwargs: Any) -> Callable[[Store], object]:
    """A case call of the store's object store (a listing is consumed)."""

    def call(s: Store) -> object:
        result = getattr(s.objects, method)(*args, **kwargs)
        return list(result) if isinstance(result, Iterator) else result

    return call


Target = Callable[[Store], Callable[..., object]]
"""What a case calls, given the store (by default ``Plane.<method>``)."""


def bad_args(
    method: str,
    good: Args,
    argument: str,
    values: list[Any],
    error: type[PersistError] = Validation,
    names: str = "",
    on: Target | None = None,
) -> None:
    """One case per value of ``values`` for ``argument`` of ``Plane.<method>`` (or of what
    ``on`` gives: then ``method`` is only the case's name)."""
    target = on or (lambda s: getattr(s.plane, method))
    for index, value in enumerate(values):

        def call(s: Store, value: Any = value) -> object:
            result = target(s)(**{**good(s), argument: value})
            return list(result) if isinstance(result, Iterator) else result

        case(f"{method}.{argument}:{index}:{_label(value)}", call, error, names or argument)


def _label(value: object) -> str:
    text = repr(value) if not isinstance(value, bytes | str) or len(value) < 24 else "long"
    return f"{type(value).__name__}({text[:24]})"


UNIVERSES: list[Any] = [
    None,
    str(U),
    U.uuid,
    WorldId(U.uuid),
    7,
    U.uuid.bytes,
]
WORLDS: list[Any] = [None, str(W), W.uuid, UniverseId(W.uuid), 8]
HASHES: list[Any] = [None, INTENT.hex, INTENT.digest, 0]
SEQS: list[Any] = [None, "00" * 12, bytes(12), 12, b"\xff" * 10 + b"\x00\x00"]
HEIGHTS: list[Any] = [-1, 2**64, True, 1.5, "1", None]
LIMITS: list[Any] = [-1, 2**31, 2**64, True, 2.0, "5", None]
BYTES: list[Any] = [None, "text", bytearray(b"x"), memoryview(b"x"), 3, [b"x"]]
TEXTS: list[Any] = ["", None, 5, b"worker", "\ud800", "x" * (MAX_NAME_CHARS + 1)]
NOT_RECORDS: list[Any] = [None, "record", b"\xa0", TIMER]


def world_args(extra: Args) -> Args:
    return lambda s: {"universe": U, "world": W, **extra(s)}


def universe_args(extra: Args) -> Args:
    return lambda s: {"universe": U, **extra(s)}


def ids_of(method: str, good: Args, *, world: bool = True, on: Target | None = None) -> None:
    """Bad universe (and world) ids for ``method``."""
    bad_args(method, good, "universe", UNIVERSES, on=on)
    if world:
        bad_args(method, good, "world", WORLDS, on=on)


def unknown_world(method: str, good: Args, on: Target | None = None) -> None:
    bad_args(method, good, "world", [UNKNOWN_W], WorldNotFound, str(UNKNOWN_W), on=on)


# ids ------------------------------------------------------------------------------------

NON_CANONICAL = [
    "",
    "not-a-uuid",
    "{" + str(U) + "}",
    "urn:uuid:" + str(U),
    U.uuid.hex,
    str(U)[:-1],
    str(U) + "\n",
    " " + str(U),
    "\uff11" * 8 + str(U)[8:],
    str(U).replace("-", "_"),
]
value: Any
for index, text in enumerate(NON_CANONICAL):
    case(f"UniverseId.parse:{index}", without_store(UniverseId.parse, text), names="universe")
    case(f"WorldId.parse:{index}", without_store(WorldId.parse, text), names="world")
for index, value in enumerate([str(U), None, 1, U.uuid.bytes, U]):
    case(f"UniverseId():{index}", without_store(UniverseId, value), names="universe")
    case(f"WorldId():{index}", without_store(WorldId, value), names="world")
for index, value in enumerate([b"", b"x" * 31, "00" * 32, bytearray(32)]):
    case(f"Hash():{index}", without_store(Hash, value), names="hash")
for index, value in enumerate(["sha256:" + "0" * 63, "\uff10" * 64, " " + "0" * 63, None]):
    case(f"Hash.parse:{index}", without_store(Hash.parse, value), names="hash")
for index, value in enumerate([b"\xff" * 10 + b"\x00\x01", b"x" * 11, "00" * 12, None]):
    case(f"InboxSeq():{index}", without_store(InboxSeq, value), names="inbox_seq")
case("InboxSeq.parse:incomplete", lambda s: InboxSeq.parse("ff" * 10 + "0000"), names="inbox_seq")
for index, value in enumerate(["01-2", "\uff11-2", "1-2 ", "0-1", "2-1", "1--2", None]):
    case(f"SegmentId.parse:{index}", without_store(SegmentId.parse, value), names="segment")

# records: text that cannot be stored (a lone surrogate) is refused at construction ---------

SURROGATE_RECORDS: list[tuple[str, Callable[[], object], str]] = [
    ("DomainEventIngress.schema", lambda: DomainEventIngress("\ud800", cbor.encode(1)), "schema"),
    (
        "EffectDispatchItem.effect_kind",
        lambda: EffectDispatchItem(W, INTENT, "\ud800", cbor.encode(1)),
        "effect_kind",
    ),
    (
        "InboxIngress.headers:key",
        lambda: InboxIngress("in", cbor.encode(1), {"\ud800": "v"}),
        "headers",
    ),
    (
        "InboxIngress.headers:value",
        lambda: InboxIngress("in", cbor.encode(1), {"k": "\udfff"}),
        "headers",
    ),
]
for name, make, names in SURROGATE_RECORDS:
    case(f"records.{name}:surrogate", without_store(make), names=names)

# the Plane and its config -----------------------------------------------------------------

case("Plane.engine", lambda s: Plane(None, s.objects), names="engine")  # type: ignore[arg-type]
case("Plane.objects", lambda s: Plane(s.engine, "memory://"), names="objects")  # type: ignore[arg-type]
case("Plane.config", lambda s: Plane(s.engine, s.objects, {}), names="config")  # type: ignore[arg-type]
case("Plane.clock", lambda s: Plane(s.engine, s.objects, clock=5), names="clock")  # type: ignore[arg-type]
case("Plane.hooks", lambda s: Plane(s.engine, s.objects, hooks=5), names="hooks")  # type: ignore[arg-type]
case("Plane.segments", lambda s: Plane(s.engine, s.objects, None, "s3://x"), names="segments")  # type: ignore[arg-type]
for i, bad_clock in enumerate([lambda: -1, lambda: 1.5, lambda: 2**64, lambda: None]):
    case(
        f"Plane.clock:{i}",
        lambda s, c=bad_clock: Plane(s.engine, s.objects, clock=c).append_batch(  # type: ignore[misc]
            U, W, 0, [b"x"]
        ),
        names="clock",
    )
for index, (name, value) in enumerate(
    [
        ("inline_threshold", 10**6),
        ("inline_threshold", -1),
        ("max_entry_bytes", True),
        ("read_page_entries", 2**63),
        ("verify_reads", "often"),
        ("log_sequencing", "lazy"),
        ("log_sequencing", None),
        ("verify_sample_rate", float("nan")),
        ("verify_sample_rate", True),
        ("call_record_seconds", float("inf")),
        ("call_record_seconds", 0),
        ("call_record_seconds", 10**30),
        ("inbox_retention_seconds", 0),
        ("inbox_retention_seconds", float("nan")),
        ("inbox_retention_seconds", True),
        ("inbox_retention_seconds", 1e-10),
        ("inbox_retention_seconds", 10**30),
    ]
):
    case(
        f"PlaneConfig.{name}:{index}",
        without_store(PlaneConfig, **{name: value}),
        names=f"PlaneConfig.{name}",
    )

# CAS ------------------------------------------------------------------------------------

PUT = universe_args(lambda s: {"data": b"never stored"})
ids_of("put_verified", PUT, world=False)
bad_args("put_verified", PUT, "data", BYTES)

STREAM = universe_args(lambda s: {"stream": io.BytesIO(b"never stored"), "expected": None})
ids_of("put_stream", STREAM, world=False)
bad_args("put_stream", STREAM, "stream", [None, b"bytes", io.StringIO("text"), 5])
bad_args("put_stream", STREAM, "expected", ["00" * 32, bytes(32), 5, Hash.of(b"other")])

for method in ("get", "open_blob", "blob_meta", "has", "require_blob"):
    GOOD = universe_args(lambda s: {"hash": s.small})
    ids_of(method, GOOD, world=False)
    bad_args(method, GOOD, "hash", HASHES)

# worlds ---------------------------------------------------------------------------------

CREATE = world_args(lambda s: {"world": NEW_W, "genesis_state": b"genesis", "handle": "h"})
ids_of("create_world", CREATE)
bad_args("create_world", CREATE, "genesis_state", BYTES)
bad_args("create_world", CREATE, "handle", [t for t in TEXTS if t is not None])
bad_args("create_world", CREATE, "world", [W], WorldExists, str(W))

META = world_args(lambda s: {})
for method in (
    "world_meta",
    "head",
    "inbox_cursor",
    "active_baseline",
    "list_snapshots",
):
    ids_of(method, META)
    unknown_world(method, META)

bad_args("create_world", CREATE, "handle", [str(NEW_W), NEW_W.uuid.hex, "a\tb", "\n"])

bad_args("universes", lambda s: {}, "page", [0, *LIMITS])
bad_args("universes", lambda s: {}, "after", [str(U), U.uuid, W, 5])
bad_args("asyncio", lambda s: {}, "executor", ["pool", 4, object()])
PAGE = universe_args(lambda s: {})
ids_of("worlds", PAGE, world=False)
bad_args("worlds", PAGE, "page", [0, *LIMITS])
bad_args("worlds", PAGE, "after", [str(W), W.uuid, U, 5])
HANDLE = universe_args(lambda s: {"handle": "h"})
ids_of("world_of_handle", HANDLE, world=False)
bad_args("world_of_handle", HANDLE, "handle", [t for t in TEXTS if t is not None])
ids_of("handles", PAGE, world=False)
bad_args("handles", PAGE, "prefix", [None, 5, b"h"])
bad_args("handles", PAGE, "page", [0, *LIMITS])
PREFIX = universe_args(lambda s: {"digest_prefix": b"\xab"})
ids_of("hashes_from", PREFIX, world=False)
bad_args("hashes_from", PREFIX, "digest_prefix", [None, "ab", bytearray(b"x"), b"x" * 33, 5])
bad_args("hashes_from", PREFIX, "limit", [0, *LIMITS])

# journal --------------------------------------------------------------------------------

APPEND_ENTRIES: list[Any] = [
    None,
    b"abc",
    [],
    ["text"],
    [b"x", None],
    (e for e in [b"x"]),
    [b"x" * (4 * 1024 * 1024 + 1)],
    [b""] * 10_001,
]
for method in ("append_batch", "retry_append_batch"):
    APPEND = world_args(lambda s: {"expected_head": 8, "entries": [b"never appended"]})
    ids_of(method, APPEND)
    unknown_world(method, APPEND)
    bad_args(method, APPEND, "expected_head", HEIGHTS)
    bad_args(method, APPEND, "entries", APPEND_ENTRIES)
    bad_args(method, APPEND, "expected_head", [2**64 - 1])
    bad_args(method, APPEND, "expected_head", [0], HeadAdvanced, "head")

GROUP = universe_args(lambda s: {"batches": [(W, 8, [b"never appended"])]})
ids_of("append_batches", GROUP, world=False)
bad_args("append_batches", GROUP, "batches", [None, [], "batches", (W, 8, [b"x"]), [None]])
bad_args("append_batches", GROUP, "create_missing", [1, None, "yes"])


def group_case(
    label: str, batches: list[Any], error: type[PersistError] = Validation, names: str = ""
) -> None:
    """A bad group for ``append_batches`` (by ``label``), the error naming ``names``."""
    call = lambda s: s.plane.append_batches(U, batches)  # noqa: E731
    case(f"append_batches.batches:{label}", call, error, names)


group_case("pair", [(W, 8)], names="batches[0]")
group_case("quadruple", [[W, 8, [b"x"], 1]], names="batches[0]")
for index, world in enumerate(["w", None, W.uuid]):
    group_case(f"world:{index}", [(world, 8, [b"x"])], names="batches[0].world")
group_case("twice", [(W, 8, [b"x"]), (W, 9, [b"y"])], names="batches[1].world")
for index, head in enumerate([*HEIGHTS, 2**64 - 1]):
    group_case(
        f"head:{index}", [(W, 8, [b"x"]), (NEW_W, head, [b"y"])], names="batches[1].expected_head"
    )
for index, entries in enumerate(APPEND_ENTRIES):
    group_case(
        f"entries:{index}", [(OTHER_W, 0, [b"x"]), (W, 8, entries)], names="batches[1].entries"
    )
group_case("over entries", [(W, 8, [b"x"] * 5_000), (NEW_W, 0, [b"y"] * 5_001)], names="batches")
group_case("missing", [(W, 8, [b"x"]), (NEW_W, 0, [b"x"])], WorldNotFound, str(NEW_W))
group_case("moved", [(W, 7, [b"x"])], HeadAdvanced, str(W))

SEQUENCED = universe_args(lambda s: {"batches": [(W, 8, [b"never appended"])], "tags": [["t"]]})
ids_of("append_sequenced", SEQUENCED, world=False)
bad_args("append_sequenced", SEQUENCED, "batches", [None, [], "batches"])
bad_args("append_sequenced", SEQUENCED, "tags", [None, [], "t", [["t"], ["u"]]])
bad_args("append_sequenced", SEQUENCED, "tags", [[[]], [["t", "u"]], ["t"]], names="tags[0]")
bad_args("append_sequenced", SEQUENCED, "tags", [[[""]], [[None]], [[b"t"]]], names="tags[0][0]")
bad_args("append_sequenced", SEQUENCED, "tracking", [["n", 1], ("n",), "n"])
bad_args("append_sequenced", SEQUENCED, "tracking", [("", 1), (None, 1)], names="tracking.name")
bad_args(
    "append_sequenced", SEQUENCED, "tracking", [("n", 0), ("n", 2**64)], names="tracking.position"
)
bad_args("append_sequenced", SEQUENCED, "create_missing", [1, None])
APP_DATA: list[Any] = [
    [(b"k", b"v")],
    "data",
    {"k": b"v"},
    {b"": b"v"},
    {b"k" * (MAX_APP_KEY_BYTES + 1): b"v"},
    {1: b"v"},
]
APP_VALUES: list[Any] = [{b"k": "v"}, {b"k": 1}, {b"k": b"v" * (MAX_APP_VALUE_BYTES + 1)}]
for method, args in (("append_batches", GROUP), ("append_sequenced", SEQUENCED)):
    bad_args(method, args, "app_data", APP_DATA)
    bad_args(method, args, "app_data", APP_VALUES, names="app_data[b'k']")
APP_KEY = universe_args(lambda s: {"key": b"k"})
ids_of("read_app_data", APP_KEY, world=False)
bad_args("read_app_data", APP_KEY, "key", [b"", b"k" * (MAX_APP_KEY_BYTES + 1), *BYTES])
APP_RANGE = universe_args(lambda s: {"begin": b"a", "end": b"z"})
ids_of("read_app_range", APP_RANGE, world=False)
bad_args("read_app_range", APP_RANGE, "begin", [b"k" * (MAX_APP_KEY_BYTES + 2), *BYTES])
bad_args("read_app_range", APP_RANGE, "end", [b"k" * (MAX_APP_KEY_BYTES + 2), "z", 3, [b"z"]])
bad_args("read_app_range", APP_RANGE, "limit", LIMITS)
bad_args("read_app_range", APP_RANGE, "reverse", [1, None, "yes"])


async def _writes_a_key(tr: AppTransaction) -> None:
    tr.set(b"k", b"v")


APP_TRANSACT = universe_args(lambda s: {"body": _writes_a_key})
for method in ("transact_app", "transact_app_stamped"):
    ids_of(method, APP_TRANSACT, world=False)
    bad_args(method, APP_TRANSACT, "body", [None, b"body", 3])
    bad_args(method, APP_TRANSACT, "eager", [1, None, "yes"])
ids_of("log_head", universe_args(lambda s: {}), world=False)
ids_of("settle_log", universe_args(lambda s: {}), world=False)
TRACKING = universe_args(lambda s: {"name": "consumer"})
ids_of("tracking_position", TRACKING, world=False)
bad_args("tracking_position", TRACKING, "name", TEXTS)
WAIT = universe_args(lambda s: {"after": 0, "timeout": 0.0})
ids_of("wait_log", WAIT, world=False)
bad_args("wait_log", WAIT, "after", HEIGHTS)
bad_args("wait_log", WAIT, "timeout", [-1.0, float("nan"), float("inf"), "1", None, 86_401.0])
bad_args("wait_log", WAIT, "interrupt", [True, "stop", 1])
WAIT_TRACKING = universe_args(lambda s: {"name": "up", "at_least": 1, "timeout": 0.0})
ids_of("wait_tracking", WAIT_TRACKING, world=False)
bad_args("wait_tracking", WAIT_TRACKING, "name", TEXTS)
bad_args("wait_tracking", WAIT_TRACKING, "at_least", HEIGHTS)
bad_args("wait_tracking", WAIT_TRACKING, "timeout", [-1.0, float("nan"), float("inf"), "1", None])
bad_args("wait_tracking", WAIT_TRACKING, "interrupt", [True, "stop", 1])
LOG = universe_args(lambda s: {"first": 1, "limit": 10})
ids_of("read_log", LOG, world=False)
bad_args("read_log", LOG, "first", [0, *HEIGHTS])
bad_args("read_log", LOG, "limit", LIMITS)
bad_args("read_log", LOG, "last", [-1, 2**64, 1.5, "1"])
bad_args("read_log", LOG, "tags", ["topic", b"topic", 5, [""], [None]])

HOT = world_args(lambda s: {"from_inclusive": 1, "limit": 10})
ids_of("read_hot", HOT)
unknown_world("read_hot", HOT)
bad_args("read_hot", HOT, "from_inclusive", [0, *HEIGHTS])
bad_args("read_hot", HOT, "limit", LIMITS)
LAST = world_args(lambda s: {"limit": 10})
ids_of("read_last", LAST)
unknown_world("read_last", LAST)
bad_args("read_last", LAST, "limit", LIMITS)

HORIZON = world_args(lambda s: {"height": 1})
ids_of("set_cold_horizon", HORIZON)
unknown_world("set_cold_horizon", HORIZON)
bad_args("set_cold_horizon", HORIZON, "height", [*HEIGHTS, 9, 2**64 - 1])

SEGMENTS = world_args(lambda s: {"from_height": 1})
ids_of("list_segments", SEGMENTS)
bad_args("list_segments", SEGMENTS, "from_height", HEIGHTS)

# inbox ----------------------------------------------------------------------------------

HUGE_ITEM = DomainEventIngress("test/Big@1", cbor.encode(b"x" * 200_000))


class _LooseEvent(DomainEventIngress):
    """An item of a subclass that encodes itself outside the canonical model (a float):
    the plane builds envelopes from an item's bytes unchecked only for its own classes."""

    __slots__ = ()

    def to_map(self) -> dict[str, Any]:
        return {**super().to_map(), "extra": 1.5}


LOOSE_ITEM = _LooseEvent("test/Event@1", cbor.encode({"n": 1}))
ITEMS: list[Any] = [None, b"\xa0", "item", EFFECT, HUGE_ITEM, LOOSE_ITEM]

ENQUEUE = world_args(lambda s: {"item": ITEM, "idempotency_key": b"never-enqueued"})
ids_of("enqueue", ENQUEUE)
unknown_world("enqueue", ENQUEUE)
bad_args("enqueue", ENQUEUE, "item", ITEMS)
bad_args("enqueue", ENQUEUE, "idempotency_key", [b"", b"k" * 257, "key", 5, bytearray(b"k")])

BATCH = world_args(lambda s: {"items": [ITEM], "idempotency_keys": [b"never-enqueued"]})
for batch in ("enqueue_batch", "enqueue_outcomes"):  # one checked path: the same refusals
    ids_of(batch, BATCH)
    unknown_world(batch, BATCH)
    bad_args(batch, BATCH, "items", [None, [], ITEM, "items", [ITEM] * 10_001])
    bad_args(batch, BATCH, "items", [[ITEM, None], [b"\xa0"], [ITEM, LOOSE_ITEM]], names="items[")
    bad_args(
        batch,
        BATCH,
        "idempotency_keys",
        [[], [b"a", b"b"], [None], [b""], ["k"], b"k", "k", [b"k" * 257]],
    )
    bad_args(
        batch,
        lambda s: {"universe": U, "world": W, "items": [ITEM, ITEM]},
        "idempotency_keys",
        [[b"same", b"same"]],
    )

AFTER = world_args(lambda s: {"after_exclusive": None, "limit": 10})
ids_of("read_after", AFTER)
unknown_world("read_after", AFTER)
bad_args("read_after", AFTER, "after_exclusive", SEQS[1:])
bad_args("read_after", AFTER, "limit", LIMITS)

FAR_SEQ = InboxSeq(b"\x7f" + b"\x00" * 11)
"""A sequence after every real one, of no inbox item and no effect."""
CURSOR = world_args(lambda s: {"old_cursor": None, "new_cursor": s.seq})
ids_of("commit_cursor", CURSOR)
unknown_world("commit_cursor", CURSOR)
bad_args("commit_cursor", CURSOR, "old_cursor", SEQS[1:])
bad_args("commit_cursor", CURSOR, "new_cursor", SEQS)
bad_args("commit_cursor", CURSOR, "new_cursor", [FAR_SEQ])  # no such item
case(
    "commit_cursor.new_cursor:backwards",
    lambda s: s.plane.commit_cursor(U, W, s.seq, s.seq),
    names="new_cursor",
)
case(
    "commit_cursor.old_cursor:moved",
    lambda s: s.plane.commit_cursor(U, W, s.seq, FAR_SEQ),
    CursorAdvanced,
    "cursor",
)


def _raises(seq: InboxSeq, item: object) -> bytes:
    raise ValueError("a normalizer bug")


def _key_error(seq: InboxSeq, item: object) -> bytes:
    missing: dict[str, bytes] = {}
    return missing["absent"]


COMPACT = world_args(lambda s: {"max_items": 10})
ids_of("compact_inbox", COMPACT)
unknown_world("compact_inbox", COMPACT)
bad_args("compact_inbox", COMPACT, "max_items", [0, -1, True, 10**9, "1", None, 1.0])
bad_args(
    "compact_inbox",
    COMPACT,
    "now_ns",
    [5, "now", lambda: -1, lambda: 1.5, lambda: 2**64, lambda: None],
)

DRAIN = world_args(lambda s: {"max_items": 10, "max_bytes": 1024})
ids_of("drain_inbox_to_journal", DRAIN)
unknown_world("drain_inbox_to_journal", DRAIN)
bad_args("drain_inbox_to_journal", DRAIN, "max_items", [0, -1, True, 10**9, "1", None, 1.0])
bad_args("drain_inbox_to_journal", DRAIN, "max_bytes", [0, True, 10**12, "1", None])
bad_args(
    "drain_inbox_to_journal",
    DRAIN,
    "normalize",
    [
        None,
        5,
        "normalize",
        lambda seq, item: "text",
        lambda seq, item: None,
        lambda seq, item: b"x" * (4 * 1024 * 1024 + 1),
        _raises,
        _key_error,
    ],
)

DRAIN_WORLDS = universe_args(lambda s: {"worlds": [W], "max_items": 10, "max_bytes": 1024})
ids_of("drain_worlds", DRAIN_WORLDS, world=False)
bad_args("drain_worlds", DRAIN_WORLDS, "worlds", [None, [], "worlds", W, [W] * 1_001])
BAD_WORLD_LISTS: list[list[Any]] = [[None], [str(W)], [W.uuid], [W, U], [W, NEW_W, W]]
for index, bad_worlds in enumerate(BAD_WORLD_LISTS):
    case(
        f"drain_worlds.worlds:{index}:entries",
        lambda s, bad=bad_worlds: s.plane.drain_worlds(U, bad),  # type: ignore[misc]
        names=f"worlds[{len(bad_worlds) - 1}]",
    )
bad_args("drain_worlds", DRAIN_WORLDS, "worlds", [[W, UNKNOWN_W]], WorldNotFound, str(UNKNOWN_W))
bad_args("drain_worlds", DRAIN_WORLDS, "max_items", [0, -1, True, 10**9, "1", None, 1.0])
bad_args("drain_worlds", DRAIN_WORLDS, "max_bytes", [0, True, 10**12, "1", None])
TWO_WORLDS = universe_args(lambda s: {"worlds": [W, NEW_W]})
bad_args("drain_worlds", TWO_WORLDS, "max_items", [5_001])  # 2 x 5,001 > max_batch_entries
bad_args("drain_worlds", TWO_WORLDS, "max_bytes", [4 * 1024 * 1024 + 1])
bad_args(
    "drain_worlds",
    DRAIN_WORLDS,
    "normalize",
    [None, 5, lambda seq, item: None, lambda seq, item: b"x" * (4 * 1024 * 1024 + 1), _raises],
)

# snapshots ------------------------------------------------------------------------------


def _commit_args(s: Store) -> dict[str, Any]:
    return {
        "universe": U,
        "world": W,
        "snapshot_bytes": b"never stored",
        "height": 8,
        "logical_time_ns": 8,
        "manifest": [s.small],
        "receipt_horizon_height": 8,
        "promote_baseline": True,
    }


ids_of("snapshot_commit", _commit_args)
unknown_world("snapshot_commit", _commit_args)
bad_args("snapshot_commit", _commit_args, "snapshot_bytes", BYTES)
bad_args("snapshot_commit", _commit_args, "height", HEIGHTS)
case(
    "snapshot_commit.height:above-head",
    lambda s: s.plane.snapshot_commit(
        U,
        W,
        b"never stored",
        height=10**6,
        logical_time_ns=1,
        manifest=[s.small],
        receipt_horizon_height=10**6,
        promote_baseline=True,
    ),
    names="above the journal head",
)
bad_args("snapshot_commit", _commit_args, "logical_time_ns", [-1, 2**64, True, "1", None])
bad_args("snapshot_commit", _commit_args, "manifest", [None, INTENT, b"\x00" * 32, "m"])
bad_args(
    "snapshot_commit",
    _commit_args,
    "manifest",
    [[INTENT.digest], [INTENT.hex], [None], [INTENT, 5]],
    names="manifest[",
)
bad_args("snapshot_commit", _commit_args, "receipt_horizon_height", [-1, 2**64, True, "1"])
bad_args(
    "snapshot_commit",
    _commit_args,
    "receipt_horizon_height",
    [None, 7],
    ReceiptHorizonFence,
    "receipt horizon",
)
bad_args("snapshot_commit", _commit_args, "promote_baseline", ["yes", 1, None])
bad_args("snapshot_commit", _commit_args, "manifest", [[ABSENT]], RootIncomplete, ABSENT.hex)
case(
    "snapshot_commit.manifest:foreign",
    lambda s: s.plane.snapshot_commit(
        U,
        W,
        b"x",
        height=8,
        logical_time_ns=8,
        manifest=[s.small, s.foreign],
        receipt_horizon_height=8,
        promote_baseline=True,
    ),
    RootIncomplete,
    lambda s: f"manifest[1] names blob {s.foreign.hex}",
)
case(
    "snapshot_commit.height:mismatch",
    lambda s: s.plane.snapshot_commit(
        U,
        W,
        b"x",
        height=1,
        logical_time_ns=1,
        manifest=[s.small],
        receipt_horizon_height=1,
        promote_baseline=True,
    ),
    SnapshotMismatch,  # another record is indexed at height 1
    "height 1",
)
case(
    "snapshot_commit.height:below-baseline",
    lambda s: s.plane.snapshot_commit(
        U,
        W,
        b"kernel state at 1",
        height=1,
        logical_time_ns=1,
        manifest=[s.small],
        receipt_horizon_height=1,
        promote_baseline=True,
    ),
    BaselineRegression,
    "baseline may not regress",
)

INDEX = world_args(lambda s: {"record": s.lower})
ids_of("index_snapshot", INDEX)
unknown_world("index_snapshot", INDEX)
bad_args("index_snapshot", INDEX, "record", NOT_RECORDS)
case(
    "index_snapshot.record:above-head",
    lambda s: s.plane.index_snapshot(U, W, SnapshotRecord(s.small, 10**6, 0, s.small)),
    names="height",
)
case(
    "index_snapshot.record:not-in-cas",
    lambda s: s.plane.index_snapshot(U, W, SnapshotRecord(ABSENT, 6, 0, s.small)),
    NotFound,
    ABSENT.hex,
)
case(
    "index_snapshot.record:mismatch",
    lambda s: s.plane.index_snapshot(U, W, SnapshotRecord(s.small, 1, 0, s.small)),
    SnapshotMismatch,
    "height 1",
)

PROMOTE = world_args(lambda s: {"record": s.not_indexed})
ids_of("promote_baseline", PROMOTE)
# as the conformance model has it: no world, so the record is not indexed
bad_args("promote_baseline", PROMOTE, "world", [UNKNOWN_W], NotFound, "not indexed")
bad_args("promote_baseline", PROMOTE, "record", NOT_RECORDS)
case(
    "promote_baseline.record:incomplete",
    lambda s: s.plane.promote_baseline(U, W, s.incomplete),
    RootIncomplete,
    f"manifest[0] names blob {ABSENT.hex}",
)
case(
    "promote_baseline.record:foreign",
    lambda s: s.plane.promote_baseline(U, W, s.foreign_root),
    RootIncomplete,
    lambda s: f"manifest[0] names blob {s.foreign.hex}",
)
case(
    "promote_baseline.record:not-a-manifest",
    lambda s: s.plane.promote_baseline(U, W, s.not_a_manifest),
    names="record.manifest_hash",
)
case(
    "promote_baseline.record:manifest-absent",
    lambda s: s.plane.promote_baseline(
        U, W, SnapshotRecord(s.small, 4, 4, ABSENT, receipt_horizon_height=4)
    ),
    RootIncomplete,
    f"manifest_hash names blob {ABSENT.hex}",
)
case(
    "promote_baseline.record:snapshot-absent",
    lambda s: s.plane.promote_baseline(
        U, W, SnapshotRecord(ABSENT, 4, 4, s.small, receipt_horizon_height=4)
    ),
    RootIncomplete,
    f"snapshot_ref names blob {ABSENT.hex}",
)
case(
    "promote_baseline.record:fence",
    lambda s: s.plane.promote_baseline(
        U, W, SnapshotRecord(s.lower.snapshot_ref, 1, 1, s.lower.manifest_hash)
    ),
    ReceiptHorizonFence,
    "receipt horizon",
)
case(
    "promote_baseline.record:regression",
    lambda s: s.plane.promote_baseline(U, W, s.lower),
    BaselineRegression,
    "baseline may not regress",
)
case(
    "promote_baseline.record:not-indexed",
    lambda s: s.plane.promote_baseline(U, W, s.not_indexed),
    NotFound,
    "not indexed at height 6",
)

# effects and timers ---------------------------------------------------------------------

HUGE_EFFECT = EffectDispatchItem(W, Hash.of(b"huge"), "http", cbor.encode(b"x" * 99_000))
DISPATCH = universe_args(lambda s: {"item": EffectDispatchItem(W, ABSENT, "h", b"\xa0")})
ids_of("dispatch_effect", DISPATCH, world=False)
bad_args("dispatch_effect", DISPATCH, "item", [*NOT_RECORDS, HUGE_EFFECT])

for method in ("pending_effects", "inflight_effects"):
    LISTING = universe_args(lambda s: {"limit": 10})
    ids_of(method, LISTING, world=False)
    bad_args(method, LISTING, "limit", LIMITS)

CLAIM = universe_args(lambda s: {"seq": s.effect_seq, "worker": "worker-1"})
ids_of("claim_effect", CLAIM, world=False)
bad_args("claim_effect", CLAIM, "seq", SEQS)
bad_args("claim_effect", CLAIM, "seq", [FAR_SEQ], NotFound, str(FAR_SEQ))
bad_args("claim_effect", CLAIM, "worker", TEXTS)

COMPLETE = universe_args(lambda s: {"seq": s.effect_seq, "intent": INTENT})
ids_of("complete_effect", COMPLETE, world=False)
bad_args("complete_effect", COMPLETE, "seq", SEQS)
bad_args("complete_effect", COMPLETE, "intent", [*HASHES, ABSENT])

HUGE_TIMER = TimerDueItem(W, INTENT, 5, cbor.encode(b"x" * 100_000))
SCHEDULE = universe_args(lambda s: {"item": TIMER})
ids_of("schedule_timer", SCHEDULE, world=False)
bad_args("schedule_timer", SCHEDULE, "item", [*NOT_RECORDS[:3], EFFECT, HUGE_TIMER])

DUE = universe_args(lambda s: {"until_ns": 10**9, "limit": 10})
ids_of("due_timers", DUE, world=False)
bad_args("due_timers", DUE, "until_ns", [-1, 2**64, True, "1", None, 1.5])
bad_args("due_timers", DUE, "limit", LIMITS)

REMOVE = universe_args(lambda s: {"item": TIMER})
ids_of("remove_timer", REMOVE, world=False)
bad_args("remove_timer", REMOVE, "item", [*NOT_RECORDS[:3], EFFECT])

# cold history: stitched reads, the segment index, export, restore, checks, fsck -----------

RANGE = world_args(lambda s: {"from_inclusive": 1, "limit": 10})
ids_of("read_range", RANGE)
unknown_world("read_range", RANGE)
bad_args("read_range", RANGE, "from_inclusive", [0, *HEIGHTS])
bad_args("read_range", RANGE, "limit", LIMITS)

SEGMENT = world_args(lambda s: {"record": s.segment})
ids_of("put_segment", SEGMENT)
case(
    "put_segment.world:unknown",
    lambda s: s.plane.put_segment(
        U, UNKNOWN_W, replace(s.segment, object_key=segment_key(U, UNKNOWN_W, 1, 1))
    ),
    WorldNotFound,
    str(UNKNOWN_W),
)
bad_args("put_segment", SEGMENT, "record", [*NOT_RECORDS, {"start": 1}])
BAD_SEGMENTS: list[tuple[str, Callable[[SegmentIndexRecord], SegmentIndexRecord], str]] = [
    ("escape", lambda r: replace(r, object_key="../../../etc/passwd"), "record.object_key"),
    ("absolute", lambda r: replace(r, object_key="/etc/passwd"), "record.object_key"),
    ("other-world", lambda r: replace(r, object_key=segment_key(U, OTHER_W, 1, 1)), "object_key"),
    ("algorithm", lambda r: replace(r, checksum_algorithm="sha256"), "record.checksum_algorithm"),
    ("short-checksum", lambda r: replace(r, checksum=b"\x00" * 16), "record.checksum"),
    ("checksum", lambda r: replace(r, checksum=b"\x00" * 32), "record.checksum"),
    ("byte_size", lambda r: replace(r, byte_size=r.byte_size + 1), "record.byte_size"),
    (
        "above-head",
        lambda r: replace(r, end=10**6, entry_count=10**6, object_key=segment_key(U, W, 1, 10**6)),
        "record.end",
    ),
]
for label, change, names in BAD_SEGMENTS:
    case(
        f"put_segment.record:{label}",
        lambda s, change=change: s.plane.put_segment(U, W, change(s.segment)),  # type: ignore[misc]
        names=names,
    )

EXPORT_ON = ExportConfig(enabled=True)


def called(function: Callable[..., object]) -> Target:
    """A case target that is ``function`` itself (not a method of the plane)."""
    return lambda s: function


def of_exporter(method: str, config: ExportConfig = EXPORT_ON) -> Target:
    return lambda s: getattr(Exporter(s.plane, config), method)


NOT_PLANES: list[Any] = [None, "plane", 5, Plane]
NOT_CALLABLES: list[Any] = [None, 5, "progress"]
EXPORTER: Args = lambda s: {"plane": s.plane, "config": EXPORT_ON}  # noqa: E731
bad_args("Exporter", EXPORTER, "plane", NOT_PLANES, on=called(Exporter))
bad_args("Exporter", EXPORTER, "config", [None, {"enabled": True}, "on"], on=called(Exporter))
for name, values in (
    ("enabled", ["yes", 1, None, 0]),
    ("margin", [-1, True, "1", None, 2**64, 1.0]),
    ("target_entries", [0, True, "1", 2**31, 2.0]),
    ("target_bytes", [0, -1, False, "1", 2**63]),
    ("min_entries", [0, None, 1.5]),
    ("delete_chunk_entries", [0, 2**31, "2000"]),
    ("read_page_entries", [0, 2**31, True]),
    ("delete_chunk_bytes", [0, -1, True, "65536", 2**63, 1.5]),
    ("pause_ratio", [-0.5, float("nan"), float("inf"), True, "4", None, 100.5]),
):
    bad_args(
        "ExportConfig",
        lambda s: {},
        name,
        values,
        names=f"ExportConfig.{name}",
        on=called(ExportConfig),
    )
for method in ("plan", "export_once", "export_all"):
    EXPORT = world_args(lambda s: {})
    ids_of(f"Exporter.{method}", EXPORT, on=of_exporter(method))
    unknown_world(f"Exporter.{method}", EXPORT, on=of_exporter(method))
    if method != "plan":
        bad_args(f"Exporter.{method}", EXPORT, "progress", NOT_CALLABLES, on=of_exporter(method))
        case(
            f"Exporter.{method}.config:disabled",
            lambda s, m=method: of_exporter(m, ExportConfig())(s)(U, W),  # type: ignore[misc]
            names="disabled",
        )

NOT_KERNELS: list[Any] = [None, ReferenceKernel, object(), "kernel", lambda: ReferenceKernel()]
REPLAY: Args = lambda s: {"plane": s.plane, "universe": U, "world": W, "kernel": ReferenceKernel()}  # noqa: E731
FROM: Args = lambda s: {**REPLAY(s), "start": s.plane.list_snapshots(U, W)[0]}  # noqa: E731
for name, function, good in (
    ("restore", restore, REPLAY),
    ("full_replay", full_replay, REPLAY),
    ("replay", replay, FROM),
):
    bad_args(name, good, "plane", NOT_PLANES, on=called(function))
    ids_of(name, good, on=called(function))
    unknown_world(name, good, on=called(function))
    bad_args(name, good, "kernel", NOT_KERNELS, on=called(function))
    bad_args(name, good, "progress", NOT_CALLABLES, on=called(function))
bad_args("replay", FROM, "start", [None, "start", 5, TIMER], on=called(replay))

CHECK: Args = lambda s: {"plane": s.plane, "universe": U, "world": W, "kernel": ReferenceKernel}  # noqa: E731
bad_args("check_replay", CHECK, "plane", NOT_PLANES, on=called(check_replay))
ids_of("check_replay", CHECK, on=called(check_replay))
unknown_world("check_replay", CHECK, on=called(check_replay))
bad_args(
    "check_replay",
    CHECK,
    "kernel",
    [ReferenceKernel(), None, 5, "kernel", lambda: None, lambda: ReferenceKernel],
    on=called(check_replay),
)

ROOT: Args = lambda s: {"plane": s.plane, "universe": U, "record": s.lower}  # noqa: E731
bad_args("load_root", ROOT, "plane", NOT_PLANES, on=called(load_root))
ids_of("load_root", ROOT, world=False, on=called(load_root))
bad_args("load_root", ROOT, "record", NOT_RECORDS[:3], on=called(load_root))

VERIFY: Args = lambda s: {"plane": s.plane, "universe": U, "world": W, "head": 8}  # noqa: E731
bad_args("check_segments", VERIFY, "plane", NOT_PLANES, on=called(check_segments))
ids_of("check_segments", VERIFY, on=called(check_segments))
bad_args("check_segments", VERIFY, "head", HEIGHTS, on=called(check_segments))

COLLECT: Args = lambda s: {"plane": s.plane, "universe": U, "world": W, "dry_run": False}  # noqa: E731
bad_args("collect_world", COLLECT, "plane", NOT_PLANES, on=called(collect_world))
ids_of("collect_world", COLLECT, on=called(collect_world))
bad_args("collect_world", COLLECT, "dry_run", ["yes", 1, None], on=called(collect_world))

FSCK: Args = lambda s: {"plane": s.plane}  # noqa: E731
bad_args("Fsck", FSCK, "plane", NOT_PLANES, on=called(Fsck))
bad_args("Fsck", FSCK, "progress", [5, "progress"], on=called(Fsck))
bad_args("Fsck.run", lambda s: {}, "universes", [U, str(U), (U,)], on=lambda s: Fsck(s.plane).run)
BAD_UNIVERSE_LISTS: list[list[Any]] = [[None], [str(U)], [U, U.uuid], [W]]
for index, universes in enumerate(BAD_UNIVERSE_LISTS):
    case(
        f"Fsck.run.universes:{index}:entries",
        lambda s, bad=universes: Fsck(s.plane).run(bad),  # type: ignore[misc]
        names=f"universes[{len(universes) - 1}]",
    )

# the object store -----------------------------------------------------------------------

UNSAFE_KEYS: list[Any] = [None, 5, b"cas/x", "", "/abs", "a/../b", "a//b"]
"""Keys that could escape a store's root."""
UNPORTABLE_KEYS: list[Any] = [
    "tab\there",
    "del\x7f",
    "\ud800",
    "k/" * (MAX_OBJECT_KEY_BYTES // 2) + "k",
    "k" * (MAX_OBJECT_KEY_BYTES + 1),
]
"""Keys some store cannot hold. Both kinds are refused by
:func:`persistence.objects.check_object_key`, which every store calls."""
for kind, keys in (("key", UNSAFE_KEYS), ("unportable_key", UNPORTABLE_KEYS)):
    for index, key in enumerate(keys):
        label = f"{kind}:{index}:{_label(key)}"
        case(f"objects.put.{label}", on_objects("put", key, b"x"), names="object key")
        case(f"objects.open.{label}", on_objects("open", key), names="object key")
        case(f"objects.stat.{label}", on_objects("stat", key), names="object key")
        case(f"objects.delete.{label}", on_objects("delete", key), names="object key")
for index, data in enumerate([None, "text", 5, io.StringIO("text"), [b"x"]]):
    case(
        f"objects.put.data:{index}:{_label(data)}",
        on_objects("put", "matrix/never", data),
        names="data",
    )
for index, digest in enumerate([b"short", "00" * 32, 5, Hash.of(b"x").digest]):
    case(
        f"objects.put.sha256:{index}:{_label(digest)}",
        on_objects("put", "matrix/never", b"y", sha256=digest),
        names="sha256",
    )
for index, (start, length) in enumerate(
    [(-1, None), (True, None), ("0", None), (0, -1), (0, "1"), (0, 1.0)]
):
    case(
        f"objects.open.window:{index}",
        on_objects("open", "matrix/never", start, length),
        names="start" if index < 3 else "length",
    )
for index, (prefix, after) in enumerate([(5, None), (None, None), ("", 5), ("\ud800", None)]):
    case(
        f"objects.list:{index}",
        on_objects("list", prefix, after),
        names="prefix" if index != 2 else "start_after",
    )

# the engine -----------------------------------------------------------------------------

ENGINE_CALLS: list[tuple[str, Callable[[kv.Transaction], object], type[PersistError], str]] = [
    ("set.key", lambda tr: tr.set("k", b"v"), Validation, "key"),  # type: ignore[arg-type]
    ("set.value", lambda tr: tr.set(b"k", "v"), Validation, "value"),  # type: ignore[arg-type]
    ("set.system", lambda tr: tr.set(b"\xffk", b"v"), EngineError, "reserved"),
    ("set.key-size", lambda tr: tr.set(b"k" * 10_001, b"v"), EngineError, "key"),
    ("set.value-size", lambda tr: tr.set(b"k", b"v" * 100_001), EngineError, "value"),
    ("get.key", lambda tr: tr.get(None), Validation, "key"),  # type: ignore[arg-type]
    ("get_range.begin", lambda tr: tr.get_range("a", b"b"), Validation, "begin"),  # type: ignore[arg-type]
    ("get_range.end", lambda tr: tr.get_range(b"a", None), Validation, "end"),  # type: ignore[arg-type]
    ("get_range.limit", lambda tr: tr.get_range(b"a", b"b", limit="1"), Validation, "limit"),  # type: ignore[arg-type]
    ("get_range.bool", lambda tr: tr.get_range(b"a", b"b", limit=True), Validation, "limit"),
    ("get_range.huge", lambda tr: tr.get_range(b"a", b"b", limit=2**63), Validation, "limit"),
    ("get_range.negative", lambda tr: tr.get_range(b"a", b"b", limit=-1), EngineError, "limit"),
    ("clear.key", lambda tr: tr.clear("k"), Validation, "key"),  # type: ignore[arg-type]
    ("clear_range.begin", lambda tr: tr.clear_range(None, b"b"), Validation, "begin"),  # type: ignore[arg-type]
    ("clear_range.inverted", lambda tr: tr.clear_range(b"b", b"a"), EngineError, "begin"),
    ("add.key", lambda tr: tr.add(5, b"\x01"), Validation, "key"),  # type: ignore[arg-type]
    ("add.param", lambda tr: tr.add(b"k", 1), Validation, "value"),  # type: ignore[arg-type]
    ("vs_key.suffix", lambda tr: tr.set_versionstamped_key(b"ab", b"v"), EngineError, "suffix"),
    ("vs_key.type", lambda tr: tr.set_versionstamped_key("k" * 20, b"v"), Validation, "key"),  # type: ignore[arg-type]
    (
        "vs_value.offset",
        lambda tr: tr.set_versionstamped_value(b"k", b"abc\x00\x00\x00\x00"),
        EngineError,
        "offset",
    ),
    ("conflict.type", lambda tr: tr.add_read_conflict_range(b"a", "b"), Validation, "end"),  # type: ignore[arg-type]
]
for name, call, error, names in ENGINE_CALLS:

    def in_transaction(s: Store, call: Callable[[kv.Transaction], object] = call) -> object:
        tr = s.engine.create_transaction()
        try:
            return call(tr)
        finally:
            tr.commit().wait()  # whatever the refused call buffered would land now

    case(f"engine.{name}", in_transaction, error, names)


# --------------------------------------------------------------------------- opening by URL


@dataclass(frozen=True)
class Opening:
    """Opening a store (by URL or constructor) in the directory ``call`` is given must raise
    ``error`` naming ``names``, and leave that directory as it was."""

    id: str
    call: Callable[[str], object]
    names: str
    error: type[PersistError] = Validation


OPENINGS: list[Opening] = []
S3 = "s3://bucket/p?endpoint_url=http://127.0.0.1:9"
"""An S3 URL whose server is never asked: a bad option is refused first."""


def opening(
    label: str, call: Callable[[str], object], names: str, error: type[PersistError] = Validation
) -> None:
    OPENINGS.append(Opening(f"{label}:{len(OPENINGS)}", call, names, error))


def bad_urls(
    opener: Callable[..., object],
    urls: list[tuple[Any, str]],
    error: type[PersistError] = Validation,
    **kwargs: Any,
) -> None:
    """One opening per ``(url, names)``; ``{dir}`` in a URL is the case's directory."""
    for url, names in urls:
        label = f"{opener.__name__}({_label(url)})"
        if isinstance(url, str):
            call = lambda d, url=url: opener(url.format(dir=d), **kwargs)  # noqa: E731
        else:
            call = lambda d, url=url: opener(url, **kwargs)  # noqa: E731
        opening(label, call, names, error)


SQLITE = "sqlite://{dir}/aos.db"
bad_urls(
    open_engine,
    [
        (None, "kv url"),
        (5, "kv url"),
        (b"memory://", "kv url"),
        ("", "scheme"),
        ("aos.db", "scheme"),
        ("postgres://db", "scheme"),
        ("memory://?x=1", "memory://"),
        ("memory://host/path", "memory://"),
        ("faults+", "scheme"),
        ("faults+memory://x", "memory://"),
        ("sqlite://", "file path"),
        ("sqlite://{dir}/a\x00b.db", "control"),
        ("sqlite://{dir}/a%00b.db", "NUL"),
        ("sqlite://{dir}/\ud800.db", "unprintable"),
        ("sqlite://{dir}/aos.db\n", "control"),
        ("sqlite://{dir}/aos.db ", "blanks around"),  # once a file named 'aos.db '
        (" sqlite://{dir}/aos.db", "blanks around"),
        (SQLITE + "#x", "fragment"),
        ("sqlite://[::1/aos.db", "not a URL"),
        (SQLITE + "?synchronous=maybe", "synchronous"),
        (SQLITE + "?synchronous=", "synchronous"),
        (SQLITE + "?synchronous=%00", "synchronous"),
        (SQLITE + "?synchronous", "name=value"),
        (SQLITE + "?synchronous=OFF&synchronous=FULL", "synchronous given twice"),
        (SQLITE + "?bogus=1", "bogus"),
        *((f"{SQLITE}?busy_timeout={t}", "busy_timeout") for t in ("inf", "nan", "-1", "", "1e3")),
        *((f"{SQLITE}?busy_timeout={t}", "busy_timeout") for t in ("\uff11", " 1", "1_0", "9" * 9)),
        ("faults+" + SQLITE + "?busy_timeout=soon", "busy_timeout"),
        ("fdb://{dir}/fdb.cluster?timeout_ms=x", "timeout_ms"),
        ("fdb://{dir}/fdb.cluster?timeout_ms=\uff11", "timeout_ms"),
        ("fdb://?bogus=1", "bogus"),
        ("fdb://?retry_limit=1&retry_limit=2", "retry_limit given twice"),
        ("fdb://?client_library=%00", "client_library"),
    ],
)
bad_urls(
    open_engine,
    [("sqlite://{dir}/missing/aos.db", "does not exist"), ("sqlite://{dir}", "not a regular file")],
    StoreFormatError,
)
bad_urls(open_engine, [(SQLITE, "create")], create="yes")
bad_urls(
    open_object_store,
    [
        (None, "objects url"),
        (5, "objects url"),
        (b"file:///tmp", "objects url"),
        ("", "scheme"),
        ("objects", "scheme"),
        ("memory://?x=1", "memory://"),
        ("file://", "directory"),
        ("file://{dir}/a%00b", "NUL"),
        ("file://{dir}/o\x00", "control"),
        ("file://{dir}/o#x", "fragment"),
        *(
            (f"file://{{dir}}/o?fsync={v}", "fsync must be 0 or 1")
            for v in ("maybe", "", "yes", "2")
        ),
        ("file://{dir}/o?fsync=0&fsync=1", "fsync given twice"),
        ("file://{dir}/o?bogus=1", "bogus"),
        ("s3://", "bucket"),
        ("s3:///prefix", "bucket"),
        ("s3://b%20c/p", "bucket"),
        ("s3://b/../p", "'..'"),
        *(
            (f"s3://bucket/p?endpoint_url={e}", "endpoint_url")
            for e in ("notaurl", "ftp://host", "http://[::1", "http://host:99999", "", "http://")
        ),
        *((f"{S3}&region={r}", "region") for r in ("bad%20region", "", "-east", "123", "x" * 64)),
        *((f"{S3}&multipart={v}", "multipart must be 0 or 1") for v in ("abc", "", "true")),
        (S3 + "&multipart=0&multipart=1", "multipart given twice"),
        (S3 + "&endpoint=http://x", "endpoint"),
        (S3 + "&region=us-east-1%0A", "region"),
    ],
)
bad_urls(open_object_store, [("memory://", "create")], create=1)
bad_urls(open_object_store, [(S3, "credentials")], credentials=5)
bad_urls(open_object_store, [(S3, "aws_access_key_id")], credentials={"aws_access_key_id": 5})
bad_urls(open_object_store, [(S3, "token")], credentials={"token": "x"})
bad_urls(open_object_store, [(S3, "credentials")], credentials={"aws_secret_access_key": "a\nb"})

# the constructors behind the URLs, and the plane opened from two URLs


def bad_opener_args(
    opener: Callable[..., object],
    good: Callable[[str], dict[str, Any]],
    argument: str,
    values: list[Any],
    names: str = "",
) -> None:
    """One opening per value of ``argument`` (``{dir}`` in a text value is the directory)."""
    for value in values:

        def call(d: str, value: Any = value) -> object:
            given = value.format(dir=d) if isinstance(value, str) else value
            return opener(**{**good(d), argument: given})

        opening(f"{opener.__qualname__}.{argument}({_label(value)})", call, names or argument)


DB: Callable[[str], dict[str, Any]] = lambda d: {"path": f"{d}/aos.db"}  # noqa: E731
bad_opener_args(SqliteEngine, DB, "path", [None, 5, "{dir}/a\x00b.db", "{dir}/\ud800.db"])
bad_opener_args(SqliteEngine, DB, "synchronous", [5, None, "sometimes"])
bad_opener_args(SqliteEngine, DB, "busy_timeout", ["60", True, -1, float("nan"), 10**7])
bad_opener_args(SqliteEngine, DB, "cache_mib", ["16", 0, 2.0])
bad_opener_args(SqliteEngine, DB, "size_limit", [0, 10**8, None])
bad_opener_args(SqliteEngine, DB, "create", ["no", 1, None])
ROOT_DIR: Callable[[str], dict[str, Any]] = lambda d: {"root": f"{d}/objects"}  # noqa: E731
bad_opener_args(LocalObjectStore, ROOT_DIR, "root", [None, 5, "{dir}/o\x00", "{dir}/\ud800"])
bad_opener_args(LocalObjectStore, ROOT_DIR, "fsync", ["no", 0, None])
bad_opener_args(LocalObjectStore, ROOT_DIR, "create", ["yes", 1])
FILE_URL: Callable[[str], dict[str, Any]] = lambda d: {"url": f"file://{d}/objects"}  # noqa: E731
bad_opener_args(
    LocalObjectStore.from_url,
    FILE_URL,
    "url",
    [5, "s3://b", "file://{dir}/o?fsync=no"],
    "objects url",
)
BUCKET: Callable[[str], dict[str, Any]] = lambda d: {"bucket": "bucket", "region": "us-east-1"}  # noqa: E731
bad_opener_args(S3ObjectStore, BUCKET, "bucket", [None, "", "b c", "b:9000", "b/c"], "bucket")
bad_opener_args(S3ObjectStore, BUCKET, "prefix", [5, "a/../b"], "")
bad_opener_args(S3ObjectStore, BUCKET, "endpoint_url", ["notaurl", "ftp://h", "http://h:0x", 5])
bad_opener_args(S3ObjectStore, BUCKET, "region", ["bad region", "", "-x", 5])
bad_opener_args(S3ObjectStore, BUCKET, "multipart", ["0", None])
bad_opener_args(S3ObjectStore, BUCKET, "part_size", ["8", 1, 2**40])
bad_opener_args(S3ObjectStore, BUCKET, "max_attempts", [0, "5"])
bad_opener_args(S3ObjectStore, BUCKET, "retry_base_delay", [-1.0, float("inf"), "0.1"])
bad_opener_args(S3ObjectStore, BUCKET, "list_page_size", [0, 1_001, "10"])
bad_opener_args(S3ObjectStore, BUCKET, "credentials", [5, {"key": "x"}], "credentials")
URLS: Callable[[str], dict[str, Any]] = lambda d: {  # noqa: E731
    "engine": f"sqlite://{d}/aos.db",
    "objects": f"file://{d}/objects",
}
BAD_OBJECT_URLS: list[Any] = ["file://{dir}/o?fsync=no", "s3://b?region=-"]
bad_opener_args(open_plane, URLS, "objects", BAD_OBJECT_URLS, "objects url")
bad_opener_args(open_plane, URLS, "objects", [5, None, b"memory://"])
BAD_ENGINE_URLS: list[Any] = ["sqlite://{dir}/a.db?busy_timeout=x", "sqlite://"]
bad_opener_args(open_plane, URLS, "engine", BAD_ENGINE_URLS, "kv url")
bad_opener_args(open_plane, URLS, "engine", [None, 5, b"memory://"])
bad_opener_args(open_plane, URLS, "config", [{}, "config"])
bad_opener_args(open_plane, URLS, "hooks", [5, None])
bad_opener_args(open_plane, URLS, "clock", [5, None])
bad_opener_args(open_plane, URLS, "create", [0, "yes"])


# --------------------------------------------------------------------------- the test


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_a_typed_error_and_writes_nothing(store: Store, bad: Case) -> None:
    try:
        bad.call(store)
    except Exception as exc:
        error: Exception | None = exc
    else:
        error = None
    before, store.state = store.state, store.dump()  # the next case is judged on its own
    assert error is not None, "accepted"
    assert isinstance(error, PersistError), f"untyped: {type(error).__name__}: {error}"
    assert isinstance(error, bad.error), f"{type(error).__name__}: {error}"
    names = bad.names if isinstance(bad.names, str) else bad.names(store)
    assert names in str(error), f"{error!s} does not name {names!r}"
    assert store.state == before, f"changed the store: {_difference(before, store.state)}"


def _difference(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    """The engine keys and object keys added, removed or changed."""
    changes = []
    for what, old, new in zip(("engine", "objects"), before, after, strict=True):
        old_map, new_map = dict(old), dict(new)
        for key in sorted(old_map.keys() | new_map.keys(), key=repr):
            if key not in new_map:
                changes.append(f"{what} {key!r} removed")
            elif old_map.get(key) != new_map[key]:
                changes.append(f"{what} {key!r} {'changed' if key in old_map else 'added'}")
    return "; ".join(changes[:10])


def test_the_matrix_is_large_and_covers_every_plane_method() -> None:
    """At least 200 distinct bad inputs, over every public Plane method."""
    assert len({c.id for c in CASES}) == len(CASES) >= 200
    public = {
        name for name in dir(Plane) if not name.startswith("_") and callable(getattr(Plane, name))
    } - {"new_call"}  # it takes no argument
    covered = {c.id.split(".")[0].split(":")[0] for c in CASES}
    assert public <= covered, sorted(public - covered)


@pytest.mark.parametrize("bad", OPENINGS, ids=[o.id for o in OPENINGS])
def test_bad_url_is_a_typed_error_and_creates_nothing(
    bad: Opening, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path would land here
    before = sorted(tmp_path.rglob("*"))
    try:
        opened = bad.call(str(tmp_path))
    except Exception as exc:
        error: Exception | None = exc
    else:
        error = None
        close = getattr(opened, "close", None)
        if callable(close):
            close()
    assert error is not None, "accepted"
    assert isinstance(error, PersistError), f"untyped: {type(error).__name__}: {error}"
    assert isinstance(error, bad.error), f"{type(error).__name__}: {error}"
    assert bad.names in str(error), f"{error!s} does not name {bad.names!r}"
    assert sorted(tmp_path.rglob("*")) == before, "created something"
