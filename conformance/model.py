"""An oracle of the plane's contracts in pure Python: what every backend must answer.

:class:`ContractModel` keeps, in plain dictionaries and lists, everything a caller of
:mod:`persistence.contracts` (and of :class:`persistence.plane.Plane`'s facade) can observe:
the CAS of each universe, each world's journal, inbox, idempotency keys, cursor, snapshot
index and active baseline. Each method takes the same arguments as the plane's and returns
the result the plane must return, or raises the :mod:`persistence.errors` exception (same
class, same distinguishing attributes) the plane must raise, checked in the same order.
A differential test drives a real backend and the model in lockstep and compares them.

The model cannot know versionstamps, so inbox sequences are abstract: a
:class:`~conformance.model_values.SeqRef` is a position in a world's inbox *order* (the
order of enqueue calls, which for a single caller is commit order). The test maps the real
sequences a backend returns onto positions by order of appearance, and compares order and
content, never sequence bytes. For the same reason journal entries written by the plane
itself are kept as :data:`~conformance.model_values.JournalEntry` values;
:meth:`ContractModel.expected_entry_bytes` renders one with the real sequences once the
test knows them.

Two things are modelled from the plane's documented storage choices rather than from the
contracts alone: a drain's ``max_bytes`` budget counts the stored inbox envelope of each
item (:func:`~conformance.model_values.envelope_size`), and the genesis snapshot is the
plane's default (``cbor.encode(None)`` with an empty manifest).

The model is put together from one part per area: :mod:`~conformance.model_core` (its
state, the CAS, world creation), :mod:`~conformance.model_journal`,
:mod:`~conformance.model_inbox` and :mod:`~conformance.model_snapshots`; the values it
speaks in are in :mod:`~conformance.model_values`.
"""

from __future__ import annotations

from conformance.model_inbox import InboxModel
from conformance.model_journal import JournalModel
from conformance.model_snapshots import SnapshotModel


class ContractModel(JournalModel, InboxModel, SnapshotModel):
    """The oracle: the plane's contracts over plain Python state.

    Method names, arguments and the order of checks mirror :class:`persistence.plane.Plane`;
    inbox sequences are :class:`~conformance.model_values.SeqRef` positions instead of
    versionstamps.
    """
