"""Searchable content: a wiki whose pages can be found by the words of their body.

Two ways to keep the search index, both in the application's own data (``Plane``'s
``app_data``: keys and values the plane stores in the application's universe, written in
the transaction of a group append):

* :class:`SearchableWiki` writes the index with the events that change a page, in their
  transaction (its recorder, :class:`SearchableWikiRecorder`, maps the ``pages`` the
  application's ``save`` passes to keys): a page is findable exactly when its events are
  stored.
* :class:`WikiSearchProjection` follows a :class:`Wiki`'s notification log and writes the
  index of its view, :class:`WikiSearchView`, with the tracking record of each event: the
  view is both or neither, so a projection restarted anywhere goes on exactly once.

The index: ``page/<id>`` holds a page's title and body (JSON), and ``word/<word>/<id>`` is
there for every word of its body (lower-case letters and digits)::

    os.environ["PERSISTENCE_MODULE"] = "aos_eventsourcing"
    wiki = SearchableWiki()
    page_id = wiki.create_page("Plants", "Ferns grow in shade")
    wiki.search("ferns")  # [page_id]
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.domain import Aggregate, DomainEventProtocol, MutableOrImmutableAggregate, event
from eventsourcing.persistence import Recording, StoredEvent, Tracking
from eventsourcing.projection import Projection
from eventsourcing.utils import get_topic

from aos_eventsourcing.recorders import PlaneApplicationRecorder
from aos_eventsourcing.tracking import PlaneTrackingRecorder

WORD = re.compile(r"[a-z0-9]+")


class Page(Aggregate):
    """A wiki page."""

    class Created(Aggregate.Created):
        title: str
        body: str

    class BodyUpdated(Aggregate.Event):
        body: str

    @event(Created)
    def __init__(self, title: str, body: str) -> None:
        self.title = title
        self.body = body

    @event(BodyUpdated)
    def update_body(self, body: str) -> None:
        self.body = body


class Wiki(Application[UUID]):
    """Creates and edits pages."""

    def create_page(self, title: str, body: str) -> UUID:
        page = Page(title, body)
        self.save(page)
        return page.id

    def update_body(self, page_id: UUID, body: str) -> None:
        page: Page = self.repository.get(page_id)
        page.update_body(body)
        self.save(page)

    def get_page(self, page_id: UUID) -> Page:
        return cast(Page, self.repository.get(page_id))


def words(text: str) -> set[str]:
    """The words a body is found by."""
    return set(WORD.findall(text.lower()))


def page_key(page_id: UUID) -> bytes:
    return b"page/" + page_id.bytes


def word_prefix(word: str) -> bytes:
    return b"word/" + word.encode() + b"/"


def index_changes(
    page_id: UUID, title: str, body: str, before: bytes | None
) -> dict[bytes, bytes | None]:
    """The writes that index ``page_id`` as ``title`` and ``body``, its index as it was
    being ``before`` (its stored ``page/<id>`` value, ``None`` if new)."""
    old = set() if before is None else words(json.loads(before)["body"])
    new = words(body)
    changes: dict[bytes, bytes | None] = {
        page_key(page_id): json.dumps({"title": title, "body": body}).encode()
    }
    for word in old - new:
        changes[word_prefix(word) + page_id.bytes] = None
    for word in new - old:
        changes[word_prefix(word) + page_id.bytes] = b""
    return changes


def search(recorder: PlaneApplicationRecorder | PlaneTrackingRecorder, word: str) -> list[UUID]:
    """The pages whose body has ``word``, by id."""
    prefix = word_prefix(word.lower())
    end = prefix[:-1] + b"0"  # "/" + 1: every key under the prefix
    rows = recorder.read_app_range(prefix, end, limit=10_000)
    return [UUID(bytes=key[len(prefix) :]) for key, _ in rows]


class SearchableWikiRecorder(PlaneApplicationRecorder):
    """The wiki's events, and the search index of the pages ``save`` names, in one
    transaction."""

    def app_data(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Mapping[bytes, bytes | None] | None:
        pages: list[tuple[UUID, str, str]] = kwargs.get("pages", [])
        changes: dict[bytes, bytes | None] = {}
        for page_id, title, body in pages:
            # The page's index as its last stored events left it: if another save of the
            # page commits first, this insert's events conflict and nothing is written.
            before = self.read_app_data(page_key(page_id))
            changes.update(index_changes(page_id, title, body, before))
        return changes or None


class SearchableWiki(Wiki):
    """A wiki whose saves index the pages they save (:class:`SearchableWikiRecorder`)."""

    env: ClassVar[dict[str, str]] = {
        "APPLICATION_RECORDER_TOPIC": f"{__name__}:SearchableWikiRecorder"
    }

    def save(
        self,
        *objs: MutableOrImmutableAggregate[UUID] | DomainEventProtocol[UUID] | None,
        **kwargs: Any,
    ) -> list[Recording[UUID]]:
        # only pages this save stores events of: their versions guard the index writes
        pages = [(o.id, o.title, o.body) for o in objs if isinstance(o, Page) and o.pending_events]
        return super().save(*objs, pages=pages, **kwargs)

    def search(self, word: str) -> list[UUID]:
        return search(cast(SearchableWikiRecorder, self.recorder), word)


class WikiSearchView(PlaneTrackingRecorder):
    """A projection's view of a wiki: the search index, each change of it recorded with
    the tracking record of the event it follows."""

    def index_page(self, page_id: UUID, title: str | None, body: str, tracking: Tracking) -> None:
        """Index ``page_id`` as ``body`` (and ``title``; ``None``: as before)."""
        before = self.read_app_data(page_key(page_id))
        if title is None:
            title = "" if before is None else json.loads(before)["title"]
        self.insert_tracking(tracking, app_data=index_changes(page_id, title, body, before))

    def search(self, word: str) -> list[UUID]:
        return search(self, word)


class WikiSearchProjection(Projection[WikiSearchView]):
    """Keeps :class:`WikiSearchView` up to date with a :class:`Wiki`'s pages."""

    name = "wikisearch"
    topics = (get_topic(Page.Created), get_topic(Page.BodyUpdated))

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register
    def _(self, domain_event: Page.Created, tracking: Tracking) -> None:
        event = domain_event
        self.view.index_page(event.originator_id, event.title, event.body, tracking)

    @process_event.register
    def _(self, domain_event: Page.BodyUpdated, tracking: Tracking) -> None:
        self.view.index_page(domain_event.originator_id, None, domain_event.body, tracking)
