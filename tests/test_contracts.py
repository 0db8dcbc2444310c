"""The contracts are real: the plane and the conformance suite's oracle implement the
surface ``persistence/contracts.py`` states. The type checker proves it (the functions
below are checked by mypy with the suite: a method that drifts from its contract fails
it); at run time the protocols' members are all present."""

from __future__ import annotations

from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from conformance.model import ContractModel
from conformance.model_values import JournalEntry, SeqRef
from persistence import contracts
from persistence.ids import InboxSeq
from persistence.plane import Plane


def the_plane(plane: Plane) -> contracts.PlaneContract:
    return plane


def the_plane_as_the_model_is(plane: Plane) -> contracts.Contract[InboxSeq, bytes]:
    return plane


def the_model(model: ContractModel) -> contracts.Contract[SeqRef, JournalEntry]:
    return model


def test_the_plane_and_the_model_have_every_member_of_their_contracts() -> None:
    plane = Plane(MemoryEngine(), MemoryObjectStore())
    assert isinstance(the_plane(plane), contracts.PlaneContract)
    assert isinstance(the_plane_as_the_model_is(plane), contracts.Contract)
    assert isinstance(the_model(ContractModel()), contracts.Contract)
