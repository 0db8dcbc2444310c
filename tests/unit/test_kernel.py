"""load_kernel: a named kernel loads, or Validation says why; nothing else escapes."""

from __future__ import annotations

import pytest

from persistence import cbor
from persistence.errors import CorruptRecord, Validation
from persistence.ids import InboxSeq
from persistence.journal_records import IngressJournalRecord
from persistence.kernel import Kernel, ReferenceKernel, entry_kind, load_kernel


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("no config")


def test_the_reference_kernel_loads() -> None:
    assert isinstance(load_kernel("persistence.kernel:ReferenceKernel"), Kernel)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("persistence.kernel", "module:Class"),
        (":ReferenceKernel", "module:Class"),
        ("no_such_module_xyz:K", "cannot load"),
        ("persistence.kernel:NoSuchClass", "cannot load"),
        ("tests.unit.test_kernel:Broken", "cannot be constructed: no config"),
        ("os:getcwd", "not a kernel"),
        ("builtins:dict", "not a kernel"),
    ],
)
def test_a_bad_kernel_path_is_validation_naming_it(path: str, says: str) -> None:
    with pytest.raises(Validation) as raised:
        load_kernel(path)
    assert raised.value.field == "kernel"
    assert says in str(raised.value)


def _ingress(item: bytes) -> bytes:
    """An ingress record of ``item`` (bytes the record's own constructor may refuse)."""
    return cbor.encode({"item": item, "kind": "ingress", "seq": bytes(12)})


def test_an_ingress_entry_is_of_its_items_kind() -> None:
    entry = _ingress(cbor.encode({"kind": "timer_fired", "at": 3}))
    assert (
        entry
        == IngressJournalRecord(
            InboxSeq(bytes(12)), cbor.encode({"kind": "timer_fired", "at": 3})
        ).to_cbor()
    )
    assert entry_kind(entry) == "ingress:timer_fired"
    assert entry_kind(b"a caller's own bytes") == "opaque"


@pytest.mark.parametrize(
    "item",
    [
        cbor.encode(5),
        cbor.encode([1, 2]),
        cbor.encode("ingress"),
        cbor.encode({"at": 3}),
        cbor.encode({"kind": 7}),
        b"\xa1\x61k",  # cut short
        b"\x18\x05",  # 5 not in its shortest form
    ],
)
def test_an_ingress_entry_whose_item_is_no_item_is_a_corrupt_record(item: bytes) -> None:
    """Not ``TypeError``/``KeyError``: readers that list kinds (``aos_journal``'s ``kind``
    column, ``aosp``) report such an entry as corrupt, and the reference kernel refuses it."""
    entry = _ingress(item)
    with pytest.raises(CorruptRecord, match="ingress"):
        entry_kind(entry)
    with pytest.raises(CorruptRecord):
        ReferenceKernel().apply(1, entry)
