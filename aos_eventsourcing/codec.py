"""How eventsourcing's records become plane records: aggregate ids to worlds, stored events
to journal entries, plane errors to eventsourcing's errors.

A journal entry is the CBOR array ``[version, topic, state]``, or ``[version, topic, state,
id]`` for an aggregate whose id is text (a UUID id *is* the world id, a text id is hashed
into one with :func:`uuid.uuid5` and kept in every entry so that reads give it back), or
``[version, topic, state, id or null, true]`` once the journal's versions are out of order
at or below it (a snapshot taken below a later one: every entry from the first version
stored out of order on carries the mark)."""

from __future__ import annotations

import uuid
from typing import Final, NamedTuple

import cbor2
from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InternalError,
    OperationalError,
)

from persistence.errors import (
    Backend,
    Conflict,
    Corruption,
    NotFound,
    PersistError,
    Validation,
)
from persistence.ids import WorldId

NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_URL, "https://aos-persistence/eventsourcing")
"""The namespace of every name-derived id of this package (universes of applications)."""
TEXT_IDS: Final = uuid.uuid5(NAMESPACE, "originator_id")
"""The namespace that hashes text aggregate ids into world ids."""


class Entry(NamedTuple):
    """One stored event as its journal entry holds it (a named tuple: one is made for every
    event a read returns)."""

    version: int
    topic: str
    state: bytes
    text_id: str | None
    unsorted: bool = False
    """The journal's versions are out of order at or below this entry."""


def world_of(originator_id: object) -> tuple[WorldId, str | None]:
    """The world of an aggregate id, and the id itself if it is text (``DataError`` for
    anything but a ``uuid.UUID`` or ``str``)."""
    if isinstance(originator_id, uuid.UUID):
        if type(originator_id) is not uuid.UUID:  # a subclass: the plane takes only UUIDs
            originator_id = uuid.UUID(int=originator_id.int)
        return WorldId(originator_id), None
    if isinstance(originator_id, str):
        text = check_text(originator_id, "originator_id")
        return WorldId(uuid.uuid5(TEXT_IDS, text)), text
    raise DataError(f"originator_id must be a UUID or text, not {type(originator_id).__name__}")


def check_text(value: object, name: str) -> str:
    """``value`` if it is text that UTF-8 can encode (``DataError`` naming ``name``
    otherwise: another type, or a lone surrogate)."""
    if not isinstance(value, str):
        raise DataError(f"{name} must be text, not {type(value).__name__}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise DataError(f"{name} {value!r} is not encodable as UTF-8: {exc.reason}") from None
    return value


def check_int(value: object, name: str, *, optional: bool = False) -> None:
    """``DataError`` naming ``name`` unless ``value`` is an int (not a bool), or ``None``
    where ``optional``."""
    if (value is not None or not optional) and type(value) is not int:
        raise DataError(f"{name} must be an int, not {type(value).__name__}")


def encode(
    version: object, topic: object, state: object, text_id: str | None, unsorted: bool = False
) -> bytes:
    """The journal entry of one stored event (``DataError`` if a field has the wrong type);
    ``unsorted`` marks it (see the module docstring)."""
    if type(version) is not int:
        raise DataError(f"originator_version must be an int, not {type(version).__name__}")
    if not isinstance(topic, str):
        raise DataError(f"topic must be text, not {type(topic).__name__}")
    if not isinstance(state, bytes):
        raise DataError(f"state must be bytes, not {type(state).__name__}")
    try:
        if unsorted:
            return cbor2.dumps([version, topic, state, text_id, True])
        if text_id is None:
            return cbor2.dumps([version, topic, state])
        return cbor2.dumps([version, topic, state, text_id])
    except (ValueError, cbor2.CBOREncodeError) as exc:  # text with a lone surrogate
        raise DataError(f"stored event not encodable: {exc}") from None


def decode(entry: bytes, *where: object) -> Entry:
    """The stored event of a journal entry (``InternalError`` if it is not one of ours,
    saying where it is: ``where``'s parts, joined only then)."""
    try:
        item = cbor2.loads(entry)
    except (ValueError, cbor2.CBORDecodeError):
        item = None
    if type(item) is list:
        size = len(item)
        if size == 3:  # most entries
            version, topic, state = item
            if type(version) is int and type(topic) is str and type(state) is bytes:
                return Entry(version, topic, state, None)
        elif (
            (size == 4 or size == 5)
            and type(item[0]) is int
            and type(item[1]) is str
            and type(item[2]) is bytes
            and (type(item[3]) is str or (size == 5 and item[3] is None))
            and (size == 4 or item[4] is True)
        ):
            return Entry(item[0], item[1], item[2], item[3], size == 5)
    raise InternalError(f"{' '.join(map(str, where))} is not a stored event of this module")


def mark_unsorted(entry: bytes) -> bytes:
    """``entry`` (one this module encoded) marked as out of order (see the module
    docstring)."""
    item = decode(entry, "entry")
    return encode(item.version, item.topic, item.state, item.text_id, unsorted=True)


def translate(exc: PersistError) -> Exception:
    """The eventsourcing error for a plane error: a conflict is ``IntegrityError``, refused
    input ``DataError``, an unavailable or failing backend ``OperationalError``, damaged
    records ``InternalError``."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, Conflict):
        return IntegrityError(message)
    if isinstance(exc, Validation):
        return DataError(message)
    if isinstance(exc, Corruption):
        return InternalError(message)
    if isinstance(exc, (Backend, NotFound)):
        return OperationalError(message)
    return DatabaseError(message)
