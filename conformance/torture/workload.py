"""What the torture's writers send (items, idempotency keys, call sizes and worlds), what
its appenders append and its exporter attaches, and the configuration every worker process
reads."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from conformance.context import CaseSkipped
from persistence import cbor
from persistence.ids import UniverseId, WorldId
from persistence.inbox_records import DomainEventIngress, decode_inbox_item
from persistence.plane import PlaneConfig

SCHEMA: Final = "conformance/TortureItem@1"
BATCH: Final = 3
MULTI_PROCESS_ENGINES: Final = ("sqlite", "fdb")
MULTI_PROCESS_OBJECT_STORES: Final = ("file", "s3")

APPEND_PREFIX: Final = b"torture-append/"
"""Entries appenders write straight to the journal start with this."""
ATTACHMENT_SIZES: Final = (20_000, 40_000)
"""An attachment's size is in ``[low, high)``: above the plane's 16 KiB inline threshold,
so that it is an external CAS body (an object the orphan collector lists)."""
DRAIN_WORKERS: Final = 2
"""Drain worker processes in a run (each drains its shard of the worlds)."""
ORPHAN_GRACE_SECONDS: Final = 1.0
"""The compactors' orphan collection grace: a put's pin protects its body this long. Short,
so that the pins of puts killed or stalled during the run expire while it runs (and puts
that outlive it pin and upload again)."""

ItemId = tuple[int, int]
"""An item: (writer, index). Its world, payload and idempotency key follow from it."""
AppendId = tuple[int, int]
"""A directly appended entry: (appender, index). Its world follows from it."""

# --------------------------------------------------------------------------- what is written


def call_size(n: int) -> int:
    """How many items the writer call starting at item ``n`` enqueues (1, or a batch)."""
    return BATCH if n % 5 == 2 else 1


def call_world(writer: int, n: int, worlds: int) -> int:
    """The world (index) the writer call starting at item ``n`` enqueues into."""
    return (writer + n) % worlds


def item(writer: int, n: int) -> DomainEventIngress:
    """Item ``n`` of ``writer``: its payload names both."""
    return DomainEventIngress(SCHEMA, cbor.encode({"w": writer, "n": n}))


def idempotency_key(writer: int, n: int) -> bytes:
    """The idempotency key of item ``n`` of ``writer`` (the same in every incarnation)."""
    return f"torture/{writer}/{n}".encode()


def item_id(data: bytes) -> ItemId | None:
    """The (writer, index) of a journaled item's bytes; ``None`` if not a torture item."""
    decoded = decode_inbox_item(data)
    if not isinstance(decoded, DomainEventIngress) or decoded.schema != SCHEMA:
        return None
    value = cbor.decode(decoded.value_cbor)
    if not isinstance(value, dict) or set(value) != {"w", "n"}:
        return None
    writer, n = value["w"], value["n"]
    if not isinstance(writer, int) or not isinstance(n, int):
        return None
    return writer, n


def append_world(appender: int, worlds: int) -> int:
    """The world (index) ``appender`` appends to."""
    return appender % worlds


def append_entry(appender: int, n: int) -> bytes:
    """Entry ``n`` of ``appender``: opaque bytes that name both."""
    return APPEND_PREFIX + b"%d/%d" % (appender, n)


def append_id(entry: bytes) -> AppendId | None:
    """The (appender, index) of a journal entry; ``None`` if it is not an appended one."""
    if not entry.startswith(APPEND_PREFIX):
        return None
    try:
        appender, n = entry[len(APPEND_PREFIX) :].split(b"/")
        return int(appender), int(n)
    except ValueError:
        return None


def attachment(world: int, height: int) -> bytes:
    """The attachment the exporter stores with its snapshot of world ``world`` (index) at
    ``height``: the same bytes in every incarnation, so a restarted exporter putting it again
    puts the same CAS body (the same hash) as the attempt it lost."""
    seed = b"torture-attachment/%d/%d" % (world, height)
    low, high = ATTACHMENT_SIZES
    size = low + int.from_bytes(hashlib.sha256(seed).digest()[:4], "big") % (high - low)
    return hashlib.shake_256(seed).digest(size)


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class TortureConfig:
    """Everything the workers need, written to ``config.json`` in the run's directory."""

    kv_url: str
    objects_url: str
    universe: UniverseId
    worlds: tuple[WorldId, ...]
    directory: Path
    seed: int
    inbox_retention_seconds: float
    """The run's inbox window: every plane of the run is opened with it
    (:meth:`plane_config`)."""
    writer_pause: float = 0.001
    """Seconds a writer sleeps between calls (so that drains keep up and logs stay small)."""
    export_target_entries: int = 25
    export_delete_chunk: int = 7
    orphan_grace_seconds: float = ORPHAN_GRACE_SECONDS
    """The grace of the compactors' orphan collection (``cas_bodies.collect``)."""
    drain_workers: int = DRAIN_WORKERS
    """Drain worker processes (``persistence.workers.drain_worker``), one per shard of that
    many: worker ``i`` runs shard ``i`` of ``drain_workers``."""
    door: str = "blocking"
    """The door every worker calls the plane through (:mod:`conformance.doors`)."""

    def save(self) -> Path:
        """Write ``config.json``; return its path."""
        path = self.directory / "config.json"
        data = asdict(self)
        data.update(
            universe=str(self.universe),
            worlds=[str(w) for w in self.worlds],
            directory=str(self.directory),
        )
        path.write_text(json.dumps(data, indent=1))
        return path

    def plane_config(self) -> PlaneConfig:
        """The plane configuration of every worker: the run's inbox window."""
        return PlaneConfig(inbox_retention_seconds=self.inbox_retention_seconds)

    @classmethod
    def load(cls, path: Path) -> TortureConfig:
        """Read ``config.json``."""
        data = json.loads(path.read_text())
        data.update(
            universe=UniverseId.parse(data["universe"]),
            worlds=tuple(WorldId.parse(w) for w in data["worlds"]),
            directory=Path(data["directory"]),
        )
        return cls(**data)


def check_shared_urls(kv_url: str, objects_url: str) -> None:
    """Raise ``CaseSkipped`` unless both URLs name a store other processes can open."""
    kv_scheme, objects_scheme = urlsplit(kv_url).scheme, urlsplit(objects_url).scheme
    if kv_scheme not in MULTI_PROCESS_ENGINES:
        raise CaseSkipped(
            f"crash torture needs an engine that several OS processes share (sqlite:///file "
            f"or fdb://); kv {kv_url!r} cannot be opened by another process"
        )
    if objects_scheme not in MULTI_PROCESS_OBJECT_STORES:
        raise CaseSkipped(
            f"crash torture needs an object store that several OS processes share (file:// or "
            f"s3://); objects {objects_url!r} cannot be opened by another process"
        )
