"""What a recorder knows of each aggregate's world (:mod:`aos_eventsourcing.recorders`):
a head it saw, the version there, how far versions are contiguous, whose events the world
holds. Bounded and thread-safe; entries never change, so what it learnt stays true below
the head it saw."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from persistence.ids import WorldId

CACHE_SIZE: Final = 100_000
"""Aggregates a recorder remembers (least recently used forgotten first)."""


@dataclass(frozen=True, slots=True)
class Known:
    """What a recorder saw of an aggregate's world: ``height`` is a head it had (never above
    its head now) and ``last_version`` the version there (``None`` at height 0); heights 1 to
    ``contiguous`` hold ``first_version``, ``first_version + 1``, ... (entries never change,
    so that stays true); ``owner`` is the aggregate whose events the world holds, by the
    text id its entries carry (``None``: a UUID id, the world's own); ``unsorted``: the
    entry at ``height`` is marked out of order (``last_version`` is then not the highest).

    A text id and the UUID it hashes to (:data:`aos_eventsourcing.codec.TEXT_IDS`) share a
    world: whichever appends first owns it, and an insert of the other is refused
    (``IntegrityError``)."""

    height: int
    last_version: int | None
    first_version: int | None
    contiguous: int
    owner: str | None
    unsorted: bool = False


class WorldCache:
    """Per world, what the recorder knows (:class:`Known`); thread-safe, bounded."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._lock = threading.Lock()
        self._known: dict[WorldId, Known] = {}
        self._size = size

    def get(self, world: WorldId) -> Known | None:
        """What is known of ``world``."""
        with self._lock:
            return self._known.get(world)

    def forget(self, world: WorldId) -> None:
        """Forget ``world`` (it does not exist)."""
        with self._lock:
            self._known.pop(world, None)

    def seen(
        self,
        world: WorldId,
        first_height: int,
        versions: Sequence[int],
        owner: str | None,
        unsorted: bool = False,
    ) -> Known:
        """Learn that heights ``first_height, ...`` hold ``versions`` of ``owner`` (read, or
        appended), the last entry marked out of order if ``unsorted``."""
        with self._lock:
            old = self._known.get(world)
            first = None if old is None else old.first_version
            if first is None and first_height == 1:
                first = versions[0]
            contiguous = 0 if old is None else old.contiguous
            last_height = first_height + len(versions) - 1
            # (out of order, the versions may not increase: nothing more is known contiguous)
            if (
                not unsorted
                and first is not None
                and first_height <= contiguous + 1 < last_height + 1
            ):
                if versions[-1] == first + last_height - 1:  # increasing: all between too
                    contiguous = last_height
                else:
                    height = contiguous + 1
                    while height <= last_height and versions[height - first_height] == (
                        first + height - 1
                    ):
                        height += 1
                    contiguous = height - 1
            if old is not None and old.height >= last_height:
                known = Known(old.height, old.last_version, first, contiguous, owner, old.unsorted)
            else:
                known = Known(last_height, versions[-1], first, contiguous, owner, unsorted)
            self._put(world, known)
            return known

    def refreshed(
        self,
        world: WorldId,
        head: int,
        version: int | None,
        owner: str | None,
        unsorted: bool = False,
    ) -> Known:
        """Learn that ``world``'s head is ``head``, holding ``version`` of ``owner`` (marked
        out of order if ``unsorted``)."""
        with self._lock:
            old = self._known.get(world)
            first = None if old is None else old.first_version
            contiguous = 0 if old is None else min(old.contiguous, head)
            if head == 1:
                first = version
            if not unsorted and first is not None and version == first + head - 1:
                contiguous = head
            known = Known(head, version, first, contiguous, owner, unsorted)
            self._put(world, known)
            return known

    def _put(self, world: WorldId, known: Known) -> None:
        self._known.pop(world, None)
        self._known[world] = known
        if len(self._known) > self._size:
            del self._known[next(iter(self._known))]
