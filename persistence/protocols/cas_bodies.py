"""External CAS bodies: their object keys, and the collection of orphaned ones -- objects
under ``cas/<universe>/sha256/`` that no metadata names (a put that failed or crashed after
its upload).

Bodies are content-addressed and create-only, so a new put of the same body finds the old
object "already there" and commits metadata naming it: "no metadata" alone does not make a
body garbage. The put protocol (``plane/cas.py``) and the collector agree through two keys:

* **pins** ``cas/pin/<hash>/<put_id>`` (``CasPin``): a put writes one before it uploads and
  removes it in the transaction that commits the metadata, which it does only if its pin is
  still there;
* **dooms** ``cas/doomed/<hash>`` (``CasDoom``): the collector's decision, taken in one
  transaction that reads the metadata (none names the object), the hash's pins (none
  younger than the grace; older ones are cleared with it) and writes the doom. A put does not
  pin while a doom stands; it waits until the doom is cleared, then uploads anew.

Both transactions read what the other writes, so they serialise: a pinned put makes the
collector skip the body, and a doomed body makes the put wait; a put whose pin outlived the
grace (stalled, or crashed) finds it gone at its metadata commit and starts again.

The one thing no transaction can order is the object store's DELETE, which may land after
the call that sent it returned (a retried request), or be sent by a collector that stalled.
So a doom lives through three phases. **Deciding**: the collector deletes only while its
doom is its own (re-read just before) and, by its monotonic clock from before the decision
and by the wall clock of the doom, younger than :data:`DELETE_DEADLINE_SECONDS`.
**Settling**: once the DELETE call returned, the doom is cleared -- unless the store says a
request of the call may still land (``ObjectStore.late_delete_seconds``: S3, not a local
directory), and then it records until when and stays, so that no put uploads the body while
one may. **Stale**: a doom never marked deleted (its collector crashed or gave up) is taken
over, by the next pass or by a put waiting for it, only after :data:`DOOM_LEASE_SECONDS`.
The assumptions, stated in docs/protocols.md: a DELETE request reaches the store within the
lease minus the deadline after the collector's re-read (the client's whole retrying
included), and within ``late_delete_seconds`` after its call returned; hosts' clocks agree
to well within both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final, Literal

from persistence import kv
from persistence.ids import Hash, UniverseId
from persistence.keyspace import UniverseKeys
from persistence.records import CasDoom, CasMeta, CasPin, decode_record

DELETE_DEADLINE_SECONDS: Final = 60.0
"""A collector sends the DELETE of a body it doomed only this soon after it began deciding."""
DOOM_LEASE_SECONDS: Final = 900.0
"""How long an undeleted doom belongs to its collector; after it, another may take over.
Its margin over the deadline (14 minutes) bounds a DELETE call's retries (the S3 store's: 5
attempts of at most 70 s, with backoff) and its requests' time in flight."""
DEFAULT_GRACE_SECONDS: Final = 3_600.0
"""A put's pin protects its body this long: the longest an upload may take."""
AWAIT_MAX_SLEEP_SECONDS: Final = 1.0
"""The longest pause of a put waiting for a doom of its hash to be cleared."""
NS: Final = 1_000_000_000

Decision = Literal["referenced", "pinned", "collecting", "doomed", "abandoned"]
"""What a collector found: metadata names the body; a put in flight pins it; another
collector's doom stands; it doomed and deleted the body; or it doomed it but gave up before
the DELETE (past its deadline, or its doom was taken over): the lease then runs out."""


async def read_doom(tr: kv.Transaction, keys: UniverseKeys, hash: Hash) -> CasDoom | None:
    """The doom of ``hash``, if any."""
    raw = await tr.get(keys.cas_doom(hash))
    return None if raw is None else decode_record(CasDoom, raw, f"cas doom {hash}")


def doom_is_stale(doom: CasDoom, now_ns: int) -> bool:
    """Whether ``doom`` may be taken over (undeleted, lease run out) or cleared (deleted,
    settled) at ``now_ns``."""
    if doom.settled_ns is not None:
        return now_ns >= doom.settled_ns
    return now_ns - doom.at_ns >= DOOM_LEASE_SECONDS * NS


def _names(raw: bytes | None, hash: Hash, object_key: str) -> bool:
    """Whether the metadata ``raw`` of ``hash`` names ``object_key`` (an inline body, put
    by a host with a higher inline threshold, leaves the object unreferenced)."""
    return raw is not None and decode_record(CasMeta, raw, f"cas meta {hash}").object_key == (
        object_key
    )


async def _judge(
    tr: kv.Transaction,
    keys: UniverseKeys,
    hash: Hash,
    object_key: str,
    now_ns: int,
    grace_ns: int,
    token: bytes | None,
) -> tuple[Decision, list[bytes] | None]:
    """What a collector with ``token`` decides about the body (see :func:`decide`) and,
    when it is to write a doom, the expired pins it clears with it (``None``: nothing to
    write, also when its own doom stands already); reads only."""
    if _names(await tr.get(keys.cas_meta(hash)), hash, object_key):
        return "referenced", None
    doom = await read_doom(tr, keys, hash)
    if doom is not None and doom.token == token:
        return "doomed", None
    if doom is not None and not doom_is_stale(doom, now_ns):
        return "collecting", None
    expired = []
    for key, raw in await tr.get_range(*keys.cas_pins(hash)):
        if now_ns - decode_record(CasPin, raw, f"cas pin {hash}").at_ns < grace_ns:
            return "pinned", None
        expired.append(key)
    return "doomed", expired


@kv.transactional
async def decide(
    tr: kv.Transaction,
    keys: UniverseKeys,
    hash: Hash,
    object_key: str,
    now_ns: int,
    grace_ns: int,
    token: bytes,
) -> Decision:
    """Doom the body of ``hash`` at ``object_key`` if no metadata names it and no pin
    younger than ``grace_ns`` protects it (clearing the expired pins), also replacing a
    stale doom. A retry whose first attempt committed finds its own token."""
    decision, expired = await _judge(tr, keys, hash, object_key, now_ns, grace_ns, token)
    if expired is None:
        return decision
    for key in expired:
        tr.clear(key)
    tr.set(keys.cas_doom(hash), CasDoom(now_ns, token).to_cbor())
    return decision


@kv.transactional
async def own_doom(
    tr: kv.Transaction, keys: UniverseKeys, hash: Hash, token: bytes
) -> CasDoom | None:
    doom = await read_doom(tr, keys, hash)
    return doom if doom is not None and doom.token == token and doom.settled_ns is None else None


@kv.transactional
async def mark_deleted(
    tr: kv.Transaction, keys: UniverseKeys, hash: Hash, token: bytes, settled_ns: int | None
) -> None:
    """The DELETE call of this collector's doom returned: clear the doom, or keep it until
    ``settled_ns`` (a request of the call may land until then)."""
    doom = await read_doom(tr, keys, hash)
    if doom is None or doom.token != token or doom.settled_ns is not None:
        return
    if settled_ns is None:
        tr.clear(keys.cas_doom(hash))
    else:
        tr.set(keys.cas_doom(hash), replace(doom, settled_ns=settled_ns).to_cbor())


@kv.transactional
async def clear_settled(tr: kv.Transaction, keys: UniverseKeys, hash: Hash, now_ns: int) -> bool:
    """Clear the doom of ``hash`` if it was deleted and has settled; whether the hash has
    no doom now (also when a retry finds its first attempt's clear)."""
    doom = await read_doom(tr, keys, hash)
    if doom is None:
        return True
    if doom.settled_ns is None or not doom_is_stale(doom, now_ns):
        return False
    tr.clear(keys.cas_doom(hash))
    return True


def object_key(universe: UniverseId, hash: Hash) -> str:
    """Object-store key of an external body."""
    return f"cas/{universe}/sha256/{hash.hex}"


def bodies_prefix(universe: UniverseId) -> str:
    """The prefix of every external body of ``universe``."""
    return f"cas/{universe}/sha256/"


@kv.transactional
async def preview(
    tr: kv.Transaction,
    keys: UniverseKeys,
    hash: Hash,
    object_key: str,
    now_ns: int,
    grace_ns: int,
) -> Decision:
    """What :func:`decide` would decide, without writing (``"doomed"``: collectable)."""
    return (await _judge(tr, keys, hash, object_key, now_ns, grace_ns, None))[0]


@kv.transactional
async def referenced(
    tr: kv.Transaction, keys: UniverseKeys, bodies: list[tuple[Hash, str]]
) -> list[bool]:
    """Whether metadata names each body (snapshot reads: a hint; :func:`decide` rechecks)."""
    return [_names(await tr.get(keys.cas_meta(h), snapshot=True), h, key) for h, key in bodies]


SWEEP_PAGE: Final = 500
"""Pins or dooms read per transaction of a sweep."""


@kv.transactional
async def sweep_pins_page(
    tr: kv.Transaction, begin: bytes, end: bytes, now_ns: int, grace_ns: int, dry_run: bool
) -> tuple[int, bytes | None]:
    """A page of pins, read without conflicts (puts of other bodies pin and unpin all the
    time); only each pin cleared conflicts, with its own put."""
    rows = await tr.get_range(begin, end, limit=SWEEP_PAGE, snapshot=True)
    count = 0
    for key, raw in rows:
        if now_ns - decode_record(CasPin, raw, "cas pin").at_ns >= grace_ns:
            if not dry_run:
                tr.add_read_conflict_key(key)
                tr.clear(key)
            count += 1
    return count, (rows[-1][0] + b"\x00" if len(rows) == SWEEP_PAGE else None)


@kv.transactional
async def dooms_page(tr: kv.Transaction, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    return await tr.get_range(begin, end, limit=SWEEP_PAGE, snapshot=True)
