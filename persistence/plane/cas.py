"""Protocol A, metadata path: ``cas/meta/<hash>`` is written once, after the body."""

from __future__ import annotations

from persistence import kv
from persistence.ids import Hash
from persistence.keyspace import UniverseKeys
from persistence.records import CasMeta, decode_record


@kv.transactional
def read_meta(tr: kv.Transaction, keys: UniverseKeys, hash: Hash) -> CasMeta | None:
    """The metadata of ``hash`` in this universe, if any."""
    raw = tr.get(keys.cas_meta(hash))
    return None if raw is None else decode_record(CasMeta, raw, f"cas meta {hash}")


@kv.transactional
def put_meta(tr: kv.Transaction, keys: UniverseKeys, hash: Hash, meta: CasMeta) -> bool:
    """Write the metadata unless present (duplicate puts are no-ops); ``True`` if written."""
    if tr.get(keys.cas_meta(hash)) is not None:
        return False
    tr.set(keys.cas_meta(hash), meta.to_cbor())
    return True
