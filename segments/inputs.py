"""Checks of what callers hand the public entry points of ``segments`` (and the jobs above
it): a wrong type or a malformed value is ``Validation`` naming the field, before any work."""

from __future__ import annotations

from typing import TypeVar

from persistence.errors import Validation
from persistence.ids import UniverseId, WorldId

T = TypeVar("T")


def require(value: object, kind: type[T], field: str) -> T:
    """``value`` if it is a ``kind``, else ``Validation`` naming ``field``."""
    if not isinstance(value, kind):
        raise Validation(field, f"a {kind.__name__}, not {type(value).__name__}")
    return value


def require_ids(universe: object, world: object) -> tuple[UniverseId, WorldId]:
    """``universe`` and ``world`` if they are a ``UniverseId`` and a ``WorldId``."""
    return require(universe, UniverseId, "universe"), require(world, WorldId, "world")


def require_callable(value: object, field: str) -> None:
    """Refuse ``value`` unless it can be called."""
    if not callable(value):
        raise Validation(field, f"a function, not {type(value).__name__}")
