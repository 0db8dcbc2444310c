"""Ids for people: ``--universe``/``-u`` takes a universe's id or a unique prefix of it, and
``--world``/``-w`` a world's id, a unique prefix of it, or its handle, as git takes a
commit's. The options are parsed as text (:func:`selector`) and resolved against the store
once it is open (:func:`resolve`): a prefix or handle that names nothing is ``NotFound``
naming the option, one that names several is ``Ambiguous`` listing them. A full id is taken
as it is, without a read (a universe or world that does not exist yet is what ``world
create`` makes)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Final, TypeVar

from aosp.cli.console import UsageError
from persistence.errors import NotFound, Validation
from persistence.ids import Hash, UniverseId, WorldId
from persistence.plane import Plane
from persistence.sizes import MAX_NAME_CHARS

MIN_PREFIX: Final = 4
"""The fewest hex digits a prefix has (shorter ones name too much to be meant)."""
MAX_SELECTOR: Final = 1_024
"""The longest text an id option takes (a handle's longest)."""
MAX_CANDIDATES: Final = 10
"""Candidates an ambiguous prefix lists."""
SCAN_HASHES: Final = 1_000
"""Hashes read for a prefix of a hash (its whole bytes; an odd last digit filters them)."""

Id = TypeVar("Id", UniverseId, WorldId, Hash)


class Ambiguous(Validation):
    """A prefix or handle names several ids: the message lists them."""


def universe_selector(text: str) -> str:
    """argparse ``type=`` of ``-u``: a universe's id or a prefix of one (resolved once the
    store is open); anything else is a usage error before the store is opened."""
    if _full(UniverseId, text) is None and _prefix_or_none(text) is None:
        raise argparse.ArgumentTypeError(
            f"expected a universe id or a prefix of one ({MIN_PREFIX} to 32 hex digits)"
        )
    return text


def world_selector(text: str) -> str:
    """argparse ``type=`` of ``-w``: a world's id, a prefix of one or a handle -- non-empty
    printable text (resolved once the store is open)."""
    if not text or len(text) > MAX_SELECTOR or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"expected an id, a prefix of one or a handle (1 to {MAX_SELECTOR:,} printable "
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


def resolve_hash(plane: Plane, universe: UniverseId, text: str) -> Hash:
    """The hash of ``universe``'s CAS that ``text`` (hex digits) names: a whole sha256 as it
    is, or the one stored hash that starts with ``text``."""
    if len(text) == 64:
        return Hash.parse(text)
    whole = bytes.fromhex(text[: len(text) // 2 * 2])
    found = (h for h in plane.hashes_from(universe, whole, SCAN_HASHES) if h.hex.startswith(text))
    return _one("HASH", text, found, f" in the CAS of universe {universe}")


def resolve_universe(plane: Plane, text: str) -> UniverseId:
    """The universe ``text`` names: its id, or the one universe of the store whose id starts
    with ``text``."""
    full = _full(UniverseId, text)
    if full is not None:
        return full
    prefix = _hex_prefix(text, "--universe")
    return _one("--universe", text, (u for u in plane.universes() if u.uuid.hex.startswith(prefix)))


def resolve_world(plane: Plane, universe: UniverseId, text: str) -> WorldId:
    """The world of ``universe`` that ``text`` names: its id, its handle, or the one world
    of the universe whose id starts with ``text``. Handles are found in the universe's index
    of handles, and, for worlds created before it, in the worlds' metas."""
    full = _full(WorldId, text)
    if full is not None:
        return full
    named = plane.world_of_handle(universe, text) if len(text) <= MAX_NAME_CHARS else None
    found = {named} if named is not None else set()
    prefix = _prefix_or_none(text)
    if prefix is not None:
        found.update(w for w in plane.worlds(universe) if w.uuid.hex.startswith(prefix))
    if not found:  # a handle given before handles were indexed
        found = {w for w in plane.worlds(universe) if plane.world_meta(universe, w).handle == text}
    return _one("--world", text, sorted(found, key=str), f" in universe {universe}")


def _full(kind: type[Id], text: str) -> Id | None:
    try:
        return kind.parse(text)
    except Validation:
        return None


def _prefix_or_none(text: str) -> str | None:
    """``text`` as the hex digits of an id's prefix (dashes dropped, any case), or ``None``
    if it is not one of at least :data:`MIN_PREFIX` digits."""
    digits = text.replace("-", "").lower()
    if len(digits) < MIN_PREFIX or len(digits) > 32:
        return None
    if any(c not in "0123456789abcdef" for c in digits):
        return None
    return digits


def _hex_prefix(text: str, option: str) -> str:
    prefix = _prefix_or_none(text)
    if prefix is None:
        raise Validation(
            option,
            f"{text!r} is neither an id nor a prefix of one ({MIN_PREFIX} to 32 hex digits)",
        )
    return prefix


def _one(option: str, text: str, ids: Iterable[Id], where: str = "") -> Id:
    found = []
    for candidate in ids:
        found.append(candidate)
        if len(found) > MAX_CANDIDATES:
            break
    if not found:
        raise NotFound(f"{option} {text}: names nothing {where.strip() or 'in the store'}")
    if len(found) > 1:
        listed = ", ".join(map(str, found[:MAX_CANDIDATES]))
        more = " and more" if len(found) > MAX_CANDIDATES else ""
        raise Ambiguous(option, f"{text!r} names {listed}{more}{where}: give more of the id")
    return found[0]
