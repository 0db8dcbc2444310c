"""Protocol A's transactions: a CAS entry's metadata, and the pin a put of an external body
holds while it uploads (the body's lifecycle: ``plane/cas.py``; collection of orphaned
bodies: :mod:`persistence.protocols.cas_bodies`)."""

from __future__ import annotations

from typing import Literal

from persistence import kv
from persistence.errors import CorruptRecord, Validation
from persistence.fdbtuple import unpack
from persistence.ids import Hash
from persistence.keyspace import UniverseKeys
from persistence.protocols import cas_bodies
from persistence.records import CasDoom, CasMeta, CasPin, decode_record


@kv.transactional
async def read_meta(tr: kv.Transaction, keys: UniverseKeys, hash: Hash) -> CasMeta | None:
    """The metadata of ``hash`` in this universe, if any."""
    raw = await tr.get(keys.cas_meta(hash))
    return None if raw is None else decode_record(CasMeta, raw, f"cas meta {hash}")


@kv.transactional
async def hashes_from(
    tr: kv.Transaction, keys: UniverseKeys, digest_prefix: bytes, limit: int
) -> list[Hash]:
    """Up to ``limit`` hashes of the universe's CAS whose digest starts with
    ``digest_prefix``, in digest order (one snapshot range read)."""
    begin, end = keys.cas_metas_from(digest_prefix)
    prefix = len(keys.cas_meta_range()[0]) - 1
    rows = await tr.get_range(begin, end, limit=limit, snapshot=True)
    try:
        return [Hash(unpack(key, prefix)[0]) for key, _ in rows]  # type: ignore[arg-type]
    except (ValueError, IndexError, Validation) as exc:
        raise CorruptRecord("cas meta key", str(exc)) from None


@kv.transactional
async def put_meta(tr: kv.Transaction, keys: UniverseKeys, hash: Hash, meta: CasMeta) -> bool:
    """Write the metadata unless present (duplicate puts are no-ops); ``True`` if written."""
    if await tr.get(keys.cas_meta(hash)) is not None:
        return False
    tr.set(keys.cas_meta(hash), meta.to_cbor())
    return True


@kv.transactional
async def pin(
    tr: kv.Transaction, keys: UniverseKeys, hash: Hash, put_id: bytes, now_ns: int
) -> Literal["present", "pinned"] | CasDoom:
    """A put's first step: ``"present"`` if the metadata exists (its pin, if an earlier
    round wrote one, is dropped), the doom if a collector is deleting the body, else pin
    the hash for this put. The commit need not be durable on its own (a machine crash that
    loses the pin also ends the put; the body it may have published is then an orphan that
    collection removes), so it skips its sync where the engine can: the metadata commit that
    follows makes it durable."""
    tr.relax_durability()
    pin = keys.cas_pin(hash, put_id)
    if await tr.get(keys.cas_meta(hash)) is not None:
        if await tr.get(pin, snapshot=True) is not None:
            tr.clear(pin)
        return "present"
    doom = await cas_bodies.read_doom(tr, keys, hash)
    if doom is not None:
        return doom
    if await tr.get(pin) is None:  # else a retry whose first attempt committed
        tr.set(pin, CasPin(now_ns).to_cbor())
    return "pinned"


@kv.transactional
async def unpin(tr: kv.Transaction, keys: UniverseKeys, hash: Hash, put_id: bytes) -> None:
    pin = keys.cas_pin(hash, put_id)
    if await tr.get(pin, snapshot=True) is not None:
        tr.clear(pin)


@kv.transactional
async def commit_meta(
    tr: kv.Transaction, keys: UniverseKeys, hash: Hash, put_id: bytes, meta: CasMeta
) -> bool:
    """A put's last step: drop its pin and write the metadata unless present; ``False``
    (nothing written) if the pin is gone -- a collector expired it -- and no metadata
    names the body."""
    pin = keys.cas_pin(hash, put_id)
    pinned = await tr.get(pin) is not None
    if await tr.get(keys.cas_meta(hash)) is not None:
        if pinned:
            tr.clear(pin)
        return True
    if not pinned:
        return False
    tr.clear(pin)
    tr.set(keys.cas_meta(hash), meta.to_cbor())
    return True
