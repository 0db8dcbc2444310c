"""Canonical CBOR: RFC 8949 section 4.2.1 core deterministic encoding, and its strict decoder.

Every record the plane stores is encoded here, so the same value always gives the same
bytes (and so the same hashes, keys and segment bytes) whatever the dict insertion order.

The data model is deliberately small -- what records need and nothing that has more than
one encoding:

* ``None``, ``bool``, integers in ``[-2**64, 2**64 - 1]`` (CBOR major types 0/1, no bignums),
  ``bytes``, ``str``, lists/tuples, and maps.
* Map keys are all text strings or all unsigned integers within one map. For keys of one
  major type, RFC 7049's "length-first" order (what cbor2's ``canonical`` mode sorts by)
  is identical to RFC 8949's bytewise order of the encoded keys; mixing types is where
  they differ, so it is refused.
* No floats, tags, indefinite lengths or simple values other than false/true/null.

Decoding is strict: a document is accepted only if it is well formed, within the model,
has no trailing bytes, and re-encodes to exactly the input bytes (shortest integer heads,
sorted keys, no duplicates).
"""

from __future__ import annotations

from typing import Any, Final

import cbor2

from persistence.errors import CorruptRecord, Validation

_INT_MIN: Final = -(2**64)
_INT_MAX: Final = 2**64 - 1
_MAX_DEPTH: Final = 64


class NotCanonical(ValueError):
    """The value or document is outside the canonical data model."""


def _check(value: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise NotCanonical(f"nesting deeper than {_MAX_DEPTH}")
    kind = type(value)
    if value is None or kind is bool or kind is bytes:
        return
    if kind is str:
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                raise NotCanonical("text holds a lone surrogate (not UTF-8)") from None
        return
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise NotCanonical(f"integer {value} outside the 64-bit CBOR range")
        return
    if kind is list or kind is tuple:
        for item in value:
            _check(item, depth + 1)
        return
    if kind is dict:
        key_kinds = {type(k) for k in value}
        if key_kinds and key_kinds != {str} and key_kinds != {int}:
            raise NotCanonical("map keys must be all text or all unsigned integers")
        if key_kinds == {int} and min(value) < 0:
            raise NotCanonical("integer map keys must be unsigned")
        for key, item in value.items():
            _check(key, depth + 1)
            _check(item, depth + 1)
        return
    raise NotCanonical(f"type {kind.__name__} is not in the canonical data model")


def encode(value: Any) -> bytes:
    """Encode ``value`` deterministically; raise :class:`NotCanonical` outside the model."""
    _check(value, 0)
    return bytes(cbor2.dumps(value, canonical=True))


def unsigned(value: int) -> bytes:
    """The encoding of the unsigned integer ``value`` (major type 0, shortest head), built
    directly: for a record whose other fields' bytes are already known (a log record's
    height: ``records.log_records``)."""
    if not 0 <= value <= _INT_MAX:
        raise NotCanonical(f"{value} is not an unsigned 64-bit integer")
    if value < 24:
        return _SHORT_HEADS[0][value]
    if value < 0x100:
        return b"\x18" + value.to_bytes(1, "big")
    if value < 0x10000:
        return b"\x19" + value.to_bytes(2, "big")
    if value < 0x100000000:
        return b"\x1a" + value.to_bytes(4, "big")
    return b"\x1b" + value.to_bytes(8, "big")


_SHORT_HEADS: Final = [
    [bytes((major << 5 | argument,)) for argument in range(24)] for major in range(8)
]
"""The one-byte heads, by major type and argument."""


def head(major: int, argument: int) -> bytes:
    """The head of a data item of major type ``major`` (2: bytes, 3: text, 5: map, ...)
    whose argument (a length, a count) is ``argument``, in its shortest form."""
    if 0 <= argument < 24:
        return _SHORT_HEADS[major][argument]
    if argument < 0x100:
        return bytes((major << 5 | 24, argument))
    if argument < 0x10000:
        return bytes((major << 5 | 25,)) + argument.to_bytes(2, "big")
    if argument < 0x100000000:
        return bytes((major << 5 | 26,)) + argument.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + argument.to_bytes(8, "big")


def scalar(value: Any) -> bytes | None:
    """The canonical encoding of an unsigned integer, a bool, bytes or text, built
    directly; ``None`` for any other value (the caller encodes it with cbor2)."""
    kind = type(value)
    if kind is int:
        return unsigned(value) if 0 <= value <= _INT_MAX else None
    if kind is bytes:
        data: bytes = value
        return head(2, len(data)) + data
    if kind is str:
        data = value.encode()
        return head(3, len(data)) + data
    if kind is bool:
        return b"\xf5" if value else b"\xf4"
    return None


def map_order(encoded_key: bytes) -> tuple[int, bytes]:
    """Where a map key (given encoded) sorts in canonical CBOR: shorter encodings first,
    then bytewise (RFC 7049 section 3.9, as cbor2's ``canonical`` writes)."""
    return len(encoded_key), encoded_key


def encode_checked(value: Any) -> bytes:
    """Encode a value already known to be inside the model (a record whose fields were
    validated on construction) without walking it again: a scalar or a flat map of text
    keys built directly, anything else by cbor2."""
    direct = _direct(value)
    return bytes(cbor2.dumps(value, canonical=True)) if direct is None else direct


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode a canonical document strictly; raise :class:`NotCanonical` otherwise.

    A scalar, or a map of text keys to scalars (most stored records), is checked by
    building its canonical encoding directly (:func:`scalar`) and comparing it with the
    input; anything else by walking it (:func:`_check`) and encoding it with cbor2."""
    raw = bytes(data)
    try:
        value = cbor2.loads(
            raw, allow_indefinite=False, allow_duplicate_keys=False, max_depth=_MAX_DEPTH
        )
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise NotCanonical(f"malformed CBOR: {exc}") from None
    try:
        direct = _direct(value)
    except UnicodeEncodeError:  # text that is not UTF-8: the walk names it
        direct = None
    if direct is None:
        _check(value, 0)
        direct = bytes(cbor2.dumps(value, canonical=True))
    if direct != raw:
        raise NotCanonical(
            "not in canonical form (non-shortest heads, key order or trailing bytes)"
        )
    return value


def _direct(value: Any) -> bytes | None:
    """The canonical encoding of a scalar or of a map of text keys to scalars, built
    directly; ``None`` for any other value. Encoded text keys sort bytewise in the
    length-first order (their head holds the length), so the entries sort as they are."""
    if type(value) is not dict:
        return scalar(value)
    entries = []
    for key, item in value.items():
        encoded = scalar(item)
        if type(key) is not str or encoded is None:
            return None
        key_bytes = _text_keys.get(key)
        if key_bytes is None:
            key_bytes = _text_key(key)
        entries.append((key_bytes, encoded))
    entries.sort()
    return head(5, len(entries)) + b"".join([key + item for key, item in entries])


_text_keys: dict[str, bytes] = {}
"""Encoded map keys met so far (records' field names), up to :data:`_TEXT_KEYS` of them."""
_TEXT_KEYS: Final = 1_024


def _text_key(key: str) -> bytes:
    """The encoding of the text ``key``, kept in :data:`_text_keys` while there is room."""
    data = key.encode()
    encoded = head(3, len(data)) + data
    if len(_text_keys) < _TEXT_KEYS and len(data) <= 64:
        _text_keys[key] = encoded
    return encoded


def decode_stored(data: bytes | bytearray | memoryview, what: str) -> Any:
    """Decode a stored record; a bad document is :class:`~persistence.errors.CorruptRecord`."""
    try:
        return decode(data)
    except NotCanonical as exc:
        raise CorruptRecord(what, str(exc)) from None


def check_canonical(data: object, field: str) -> bytes:
    """Validate caller-supplied CBOR bytes; a bad document is a ``Validation`` error."""
    if not isinstance(data, bytes):
        raise Validation(field, f"expected CBOR bytes, got {type(data).__name__}")
    try:
        decode(data)
    except NotCanonical as exc:
        raise Validation(field, str(exc)) from None
    return data
