"""Ids for people: ``--universe``/``-u`` takes a universe's id or a unique prefix of it, and
``--world``/``-w`` a world's id, its handle, or a unique prefix of its id, as git takes a
commit's; a ``HASH`` argument a sha256 or a unique prefix of one. The options are checked as
text by argparse (:func:`universe_selector`, ...) and resolved against the store once it is
open (:func:`resolve`): a prefix or handle that names nothing is ``NotFound`` naming the
option, a prefix that names several is ``Ambiguous`` listing them. A full id is taken as it
is, without a read (a universe or world that does not exist yet is what ``world create``
makes). A world's exact handle wins over a prefix of another world's id (handles cannot be
ids: ``create_world`` refuses them)."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

from aosp.cli.console import UsageError
from persistence.errors import NotFound, Validation
from persistence.ids import Hash, UniverseId, WorldId
from persistence.keyspace import CHECKSUM_LAYOUT
from persistence.plane import Plane
from persistence.sizes import MAX_NAME_CHARS

MIN_PREFIX: Final = 4
"""The fewest hex digits a prefix has (shorter ones name too much to be meant)."""
MAX_CANDIDATES: Final = 10
"""Candidates an ambiguous prefix lists."""
SCAN_HASHES: Final = 1_000
"""Hashes read for a prefix of a hash (its whole bytes; an odd last digit filters them)."""

Id = TypeVar("Id", UniverseId, WorldId, Hash)
Uuid = TypeVar("Uuid", UniverseId, WorldId)


class Ambiguous(Validation):
    """A prefix names several ids: the message lists them."""


def universe_selector(text: str) -> str:
    """argparse ``type=`` of ``-u``: a universe's id or a prefix of one (resolved once the
    store is open); anything else is a usage error before the store is opened."""
    if _full(UniverseId, text) is None and _prefix_or_none(text) is None:
        raise argparse.ArgumentTypeError(
            f"expected a universe id or a prefix of one ({MIN_PREFIX} to 31 hex digits)"
        )
    return text


def world_selector(text: str) -> str:
    """argparse ``type=`` of ``-w``: a world's id, a prefix of one or a handle -- what a
    handle may be (resolved once the store is open)."""
    if not text or len(text) > MAX_NAME_CHARS or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"expected an id, a prefix of one or a handle (1 to {MAX_NAME_CHARS:,} printable "
            "characters)"
        )
    return text


def hash_selector(text: str) -> str:
    """argparse ``type=`` of a ``HASH`` argument: a sha256 (64 hex digits) or a prefix of one
    (resolved once the store is open, in ``--universe``'s CAS)."""
    digits = text.lower()
    if not MIN_PREFIX <= len(digits) <= 64 or any(c not in "0123456789abcdef" for c in digits):
        raise argparse.ArgumentTypeError(
            f"expected a sha256 or a prefix of one ({MIN_PREFIX} to 64 hex digits)"
        )
    return digits


def unresolved(args: argparse.Namespace) -> str | None:
    """The option of ``args`` that names something only a store can resolve (a prefix or a
    handle, not a full id); ``None`` if every one is a full id or absent. A command that
    would create a store refuses such an option before creating it: in a new store it names
    nothing."""
    universe, world = getattr(args, "universe", None), getattr(args, "world", None)
    if isinstance(universe, str) and _full(UniverseId, universe) is None:
        return f"--universe {universe}"
    if isinstance(world, str) and _full(WorldId, world) is None:
        return f"--world {world}"
    digest = getattr(args, "hash", None)
    if isinstance(digest, str) and len(digest) != 64:
        return f"HASH {digest}"
    return None


def resolve(plane: Plane, args: argparse.Namespace) -> None:
    """Replace the text of ``args.universe``, ``args.world`` and ``args.hash`` (where the
    command has them as selectors) by the ids they name in ``plane``'s store."""
    universe = getattr(args, "universe", None)
    if isinstance(universe, str):
        args.universe = universe = resolve_universe(plane, universe)
    world = getattr(args, "world", None)
    if isinstance(world, str):
        if not isinstance(universe, UniverseId):
            raise UsageError("--world needs --universe")
        args.world = resolve_world(plane, universe, world)
    digest = getattr(args, "hash", None)
    if isinstance(digest, str) and isinstance(universe, UniverseId):
        args.hash = resolve_hash(plane, universe, digest)


def resolve_universe(plane: Plane, text: str) -> UniverseId:
    """The universe ``text`` names: its id, or the one universe of the store whose id starts
    with ``text`` (read from the first id the prefix allows: a few ids, not every one)."""
    full = _full(UniverseId, text)
    if full is not None:
        return full
    prefix = _hex_prefix(text, "--universe")
    after = _before(UniverseId, prefix)
    found = _starting(plane.universes(page=MAX_CANDIDATES + 1, after=after), prefix)
    return _one("--universe", text, found)


def resolve_world(plane: Plane, universe: UniverseId, text: str) -> WorldId:
    """The world of ``universe`` that ``text`` names: its id, its handle, or the one world
    of the universe whose id starts with ``text``. Handles are found in the universe's index
    of handles; in a store of layout 2 (written before the index), in the worlds' metas."""
    full = _full(WorldId, text)
    if full is not None:
        return full
    named = plane.world_of_handle(universe, text)
    if named is not None:
        return named
    prefix = _prefix_or_none(text)
    if prefix is not None:
        after = _before(WorldId, prefix)
        worlds = plane.worlds(universe, page=MAX_CANDIDATES + 1, after=after)
        found = list(_capped(_starting(worlds, prefix)))
        if found:
            return _one("--world", text, found, f"in universe {universe}")
    if plane.layout is not None and plane.layout < CHECKSUM_LAYOUT:
        legacy = (w for w in plane.worlds(universe) if plane.world_meta(universe, w).handle == text)
        return _one("--world", text, legacy, f"in universe {universe}")
    raise NotFound(f"--world {text}: names nothing in universe {universe}")


def resolve_hash(plane: Plane, universe: UniverseId, text: str) -> Hash:
    """The hash of ``universe``'s CAS that ``text`` (hex digits) names: a whole sha256 as it
    is, or the one stored hash that starts with ``text``."""
    if len(text) == 64:
        return Hash.parse(text)
    whole = bytes.fromhex(text[: len(text) // 2 * 2])
    found = (h for h in plane.hashes_from(universe, whole, SCAN_HASHES) if h.hex.startswith(text))
    return _one("HASH", text, found, f"in the CAS of universe {universe}")


def _full(kind: type[Uuid], text: str) -> Uuid | None:
    """The id ``text`` spells in full: its canonical form, or its 32 hex digits."""
    if len(text) == 32 and all(c in "0123456789abcdefABCDEF" for c in text):
        return kind(uuid.UUID(hex=text))
    try:
        return kind.parse(text)
    except Validation:
        return None


def _prefix_or_none(text: str) -> str | None:
    """``text`` as the hex digits of an id's prefix (dashes dropped, any case), or ``None``
    if it is not one of :data:`MIN_PREFIX` to 31 digits."""
    digits = text.replace("-", "").lower()
    if not MIN_PREFIX <= len(digits) < 32:
        return None
    if any(c not in "0123456789abcdef" for c in digits):
        return None
    return digits


def _hex_prefix(text: str, option: str) -> str:
    prefix = _prefix_or_none(text)
    if prefix is None:
        raise Validation(
            option,
            f"{text!r} is neither an id nor a prefix of one ({MIN_PREFIX} to 31 hex digits)",
        )
    return prefix


def _before(kind: Callable[[uuid.UUID], Uuid], prefix: str) -> Uuid | None:
    """The id just below the first one that starts with ``prefix`` (``None``: none is)."""
    low = int(prefix, 16) << (4 * (32 - len(prefix)))
    return None if low == 0 else kind(uuid.UUID(int=low - 1))


def _starting(ids: Iterator[Uuid], prefix: str) -> Iterator[Uuid]:
    """The ids of ``ids`` (in id order, from the first that may start with ``prefix``) that
    start with ``prefix``: they are contiguous, so the first that does not ends them."""
    for candidate in ids:
        if not candidate.uuid.hex.startswith(prefix):
            return
        yield candidate


def _capped(ids: Iterable[Id]) -> Iterator[Id]:
    for count, candidate in enumerate(ids):
        if count > MAX_CANDIDATES:
            return
        yield candidate


def _one(option: str, text: str, ids: Iterable[Id], where: str = "in the store") -> Id:
    found = list(_capped(ids))
    if not found:
        raise NotFound(f"{option} {text}: names nothing {where}")
    if len(found) > 1:
        listed = ", ".join(map(str, found[:MAX_CANDIDATES]))
        more = " and more" if len(found) > MAX_CANDIDATES else ""
        raise Ambiguous(option, f"{text!r} names {listed}{more} {where}: give more of the id")
    return found[0]
