"""The collection of orphaned CAS bodies: objects under ``cas/<universe>/sha256/`` that no
metadata names (a put that failed or crashed after its upload), found by listing the object
store and removed through the transactions of :mod:`persistence.protocols.cas_bodies` (whose
docstring states the protocol: pins, dooms, and the three phases of a doom)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from persistence import fdbtuple, kv
from persistence.errors import CorruptRecord
from persistence.futures import drive
from persistence.ids import Hash, UniverseId
from persistence.keyspace import UniverseKeys
from persistence.objects import ObjectInfo, ObjectStore
from persistence.protocols import cas_bodies
from persistence.records import CasDoom, decode_record


def new_token() -> bytes:
    """A collector attempt's token."""
    return os.urandom(16)


def delete_doomed(
    engine: kv.Engine,
    objects: ObjectStore,
    keys: UniverseKeys,
    hash: Hash,
    object_key: str,
    token: bytes,
    started: float,
    now_ns: Callable[[], int],
) -> bool:
    """Delete the body this collector doomed and clear its doom, or keep it to settle
    (``started``:
    ``time.monotonic()`` before :func:`decide`); ``False``, deleting nothing, if the doom is
    no longer its own or the deadline passed by either clock."""
    doom = drive(cas_bodies.own_doom(engine, keys, hash, token))
    deadline = cas_bodies.DELETE_DEADLINE_SECONDS
    if doom is None or time.monotonic() - started >= deadline:
        return False
    if now_ns() - doom.at_ns >= deadline * cas_bodies.NS:
        return False
    objects.delete(object_key)
    late = objects.late_delete_seconds
    drive(
        cas_bodies.mark_deleted(
            engine, keys, hash, token, now_ns() + round(late * cas_bodies.NS) if late > 0 else None
        )
    )
    return True


def collect_body(
    engine: kv.Engine,
    objects: ObjectStore,
    keys: UniverseKeys,
    hash: Hash,
    object_key: str,
    now_ns: Callable[[], int],
    grace_ns: int,
) -> cas_bodies.Decision:
    """Decide about the body of ``hash`` and, if doomed, delete it."""
    token = new_token()
    started = time.monotonic()
    decision = drive(cas_bodies.decide(engine, keys, hash, object_key, now_ns(), grace_ns, token))
    if decision != "doomed":
        return decision
    deleted = delete_doomed(engine, objects, keys, hash, object_key, token, started, now_ns)
    return "doomed" if deleted else "abandoned"


@dataclass(slots=True)
class CasCollection:
    """What a collection pass over one universe's bodies found and did."""

    listed: int = 0
    referenced: int = 0
    pinned: int = 0
    collecting: int = 0
    """Bodies another collector's doom covers (deciding, or deleted and settling)."""
    collected: int = 0
    collected_bytes: int = 0
    """Listed bodies deleted (their size as listed)."""
    abandoned: int = 0
    """Bodies doomed but not deleted (the deadline passed): their doom's lease runs out."""
    foreign: int = 0
    """Objects under the prefix whose key is not a body's key: left alone."""
    pins_expired: int = 0
    """Pins older than the grace, cleared (puts that crashed, or stalled: they pin again)."""
    dooms_resumed: int = 0
    """Stale dooms of crashed collectors whose objects were gone from the listing, taken
    over (their DELETE sent again) and cleared or left to settle."""
    dooms_settled: int = 0
    """Settled dooms cleared (a dry run: stale dooms left after the listing)."""

    def __iadd__(self, other: CasCollection) -> CasCollection:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def collect(
    engine: kv.Engine,
    objects: ObjectStore,
    universe: UniverseId,
    now_ns: Callable[[], int],
    grace_seconds: float = cas_bodies.DEFAULT_GRACE_SECONDS,
    *,
    dry_run: bool = False,
) -> CasCollection:
    """One pass over the bodies of ``universe``: delete each that no metadata names and no
    put younger than ``grace_seconds`` pins (with ``dry_run``, only count them; nothing is
    written). Dooms left by crashed collectors are taken over once stale."""
    keys = UniverseKeys(universe)
    grace_ns = round(grace_seconds * cas_bodies.NS)
    prefix = cas_bodies.bodies_prefix(universe)
    done = CasCollection()
    done.pins_expired = _sweep_pins(engine, keys, now_ns, grace_ns, dry_run)
    page: list[tuple[Hash, ObjectInfo]] = []
    for info in objects.list(prefix):
        done.listed += 1
        hash = _hash_of(info.key[len(prefix) :])
        if hash is None or cas_bodies.object_key(universe, hash) != info.key:
            done.foreign += 1
            continue
        page.append((hash, info))
        if len(page) == cas_bodies.SWEEP_PAGE:
            _collect_page(engine, objects, keys, page, now_ns, grace_ns, dry_run, done)
            page = []
    _collect_page(engine, objects, keys, page, now_ns, grace_ns, dry_run, done)
    # Dooms the listing did not settle: a crashed collector's whose object is gone (or
    # whose DELETE may still land), and settled ones. A dry run only counts them.
    for stale in _stale_dooms(engine, keys, now_ns()):
        if dry_run or drive(cas_bodies.clear_settled(engine, keys, stale, now_ns())):
            done.dooms_settled += 1
        else:
            key = cas_bodies.object_key(universe, stale)
            if collect_body(engine, objects, keys, stale, key, now_ns, grace_ns) == "doomed":
                done.dooms_resumed += 1
    return done


def _collect_page(
    engine: kv.Engine,
    objects: ObjectStore,
    keys: UniverseKeys,
    page: list[tuple[Hash, ObjectInfo]],
    now_ns: Callable[[], int],
    grace_ns: int,
    dry_run: bool,
    done: CasCollection,
) -> None:
    """Collect a page of listed bodies: one read for their metadata, then a decision for
    each that none names."""
    named = (
        drive(cas_bodies.referenced(engine, keys, [(h, info.key) for h, info in page]))
        if page
        else []
    )
    for (hash, info), referenced in zip(page, named, strict=True):
        if referenced:
            decision: cas_bodies.Decision = "referenced"
        elif dry_run:
            decision = drive(cas_bodies.preview(engine, keys, hash, info.key, now_ns(), grace_ns))
        else:
            decision = collect_body(engine, objects, keys, hash, info.key, now_ns, grace_ns)
        if decision == "doomed":
            done.collected += 1
            done.collected_bytes += info.size
        else:
            setattr(done, decision, getattr(done, decision) + 1)


def _sweep_pins(
    engine: kv.Engine,
    keys: UniverseKeys,
    now_ns: Callable[[], int],
    grace_ns: int,
    dry_run: bool,
) -> int:
    """Clear every pin older than the grace (``dry_run``: count them), a page per
    transaction; return how many. Always safe: a put finding its pin gone at its metadata
    commit pins and uploads again."""
    cleared = 0
    begin, end = keys.cas_pins()
    while True:
        count, after = drive(
            cas_bodies.sweep_pins_page(engine, begin, end, now_ns(), grace_ns, dry_run)
        )
        cleared += count
        if after is None:
            return cleared
        begin = after


def _stale_dooms(engine: kv.Engine, keys: UniverseKeys, now_ns: int) -> list[Hash]:
    """The hashes whose doom may be taken over or cleared (see :func:`doom_is_stale`)."""
    stale: list[Hash] = []
    begin, end = keys.cas_dooms()
    while True:
        rows = drive(cas_bodies.dooms_page(engine, begin, end))
        for key, raw in rows:
            if cas_bodies.doom_is_stale(decode_record(CasDoom, raw, "cas doom"), now_ns):
                stale.append(_hash_in_key(key, len(keys.cas_dooms()[0]) - 1))
        if len(rows) < cas_bodies.SWEEP_PAGE:
            return stale
        begin = rows[-1][0] + b"\x00"


def _hash_in_key(key: bytes, prefix_len: int) -> Hash:
    try:
        items = fdbtuple.unpack(key, prefix_len)
    except ValueError:
        items = ()
    if len(items) != 1 or not isinstance(items[0], bytes) or len(items[0]) != 32:
        raise CorruptRecord("cas doom key", f"{key.hex()} does not end with a sha256")
    return Hash(items[0])


def _hash_of(name: str) -> Hash | None:
    if len(name) != 64:
        return None
    try:
        return Hash(bytes.fromhex(name))
    except ValueError:
        return None
