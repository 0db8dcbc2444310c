"""The kernel protocol restore drives, and the deterministic reference kernel.

The plane never interprets a world's state: restore hands a kernel the baseline snapshot
bytes and then each journal entry, and asks it for its state bytes at the end. That keeps
the library backend-agnostic and the kernel free of storage concerns. A kernel must be
deterministic: the same snapshot bytes and the same entries give the same state bytes.

:class:`ReferenceKernel` ships with the library for tests, demos and the Spark jobs. Its
state is a pure function of the entry sequence: the height, a SHA-256 chain over every
entry, counts and bytes per record kind, and the last inbox sequence drained. Its snapshot
at height ``h`` therefore equals its state after replaying ``1..h`` from genesis, which is
exactly the property restore relies on.
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any, Protocol, runtime_checkable

from persistence import cbor
from persistence.errors import Corruption, CorruptRecord, Validation
from persistence.journal_records import IngressJournalRecord, decode_journal_record


@runtime_checkable
class Kernel(Protocol):
    """What restore needs from a world's kernel."""

    def hydrate(self, snapshot: bytes) -> None:
        """Load state from snapshot bytes (the genesis snapshot included). Raises
        ``Corruption`` if the bytes are not a snapshot of this kernel."""
        ...

    def apply(self, height: int, entry: bytes) -> None:
        """Apply the journal entry at ``height`` (called in height order, no gaps)."""
        ...

    def snapshot(self) -> bytes:
        """The current state as canonical bytes."""
        ...


def entry_kind(entry: bytes) -> str:
    """The record kind of a journal entry: the plane's own kinds, ``ingress:<item kind>``
    for drained items, ``opaque`` for a caller's own format. ``CorruptRecord`` for a
    record of the plane's that does not decode, an ingress record's item included (a
    canonical CBOR map with a text ``kind``)."""
    record = decode_journal_record(entry)
    if record is None:
        return "opaque"
    if isinstance(record, IngressJournalRecord):
        item = cbor.decode(record.item)  # canonical CBOR: the record's decoding checked it
        kind = item.get("kind") if isinstance(item, dict) else None
        if type(kind) is not str:
            raise CorruptRecord("ingress journal entry", "its item is not a map with a text kind")
        return f"ingress:{kind}"
    assert record.KIND is not None
    return record.KIND


class ReferenceKernel:
    """A deterministic kernel whose state summarises the journal it has seen."""

    GENESIS_DIGEST = b"\x00" * 32

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.height = 0
        self.digest = self.GENESIS_DIGEST
        self.kinds: dict[str, list[int]] = {}
        self.last_seq: bytes | None = None

    def hydrate(self, snapshot: bytes) -> None:
        try:
            state = cbor.decode(snapshot)
        except cbor.NotCanonical as exc:
            raise Corruption(f"reference kernel snapshot is not canonical CBOR: {exc}") from None
        if state is None:  # the plane's default genesis snapshot
            self._reset()
            return
        try:
            self.height = _uint(state["height"])
            self.digest = _bytes(state["digest"], 32)
            self.kinds = {str(k): [_uint(v[0]), _uint(v[1])] for k, v in state["kinds"].items()}
            self.last_seq = None if state["last_seq"] is None else _bytes(state["last_seq"], 12)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise Corruption(f"reference kernel snapshot has the wrong shape: {exc!r}") from None

    def apply(self, height: int, entry: bytes) -> None:
        if height != self.height + 1:
            raise Corruption(f"kernel at height {self.height} was given entry {height}")
        self.height = height
        self.digest = hashlib.sha256(self.digest + entry).digest()
        kind = entry_kind(entry)
        count = self.kinds.setdefault(kind, [0, 0])
        count[0] += 1
        count[1] += len(entry)
        record = decode_journal_record(entry)
        if isinstance(record, IngressJournalRecord):
            self.last_seq = record.seq.raw

    def snapshot(self) -> bytes:
        state: dict[str, Any] = {
            "height": self.height,
            "digest": self.digest,
            "kinds": {k: list(v) for k, v in self.kinds.items()},
            "last_seq": self.last_seq,
        }
        return cbor.encode(state)


def _uint(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an unsigned integer, got {value!r}")
    return value


def _bytes(value: object, size: int) -> bytes:
    if not isinstance(value, bytes) or len(value) != size:
        raise ValueError(f"expected {size} bytes")
    return value


def load_kernel(path: str) -> Kernel:
    """A new kernel from ``module:Class`` (constructed without arguments); ``Validation``
    naming the path if it cannot be loaded, constructed, or is not a kernel."""
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise Validation("kernel", f"expected module:Class, not {path!r}")
    try:
        kernel_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise Validation("kernel", f"cannot load {path!r}: {exc}") from None
    try:
        kernel = kernel_class()
    except Exception as exc:  # the constructor of a class we were merely named
        raise Validation("kernel", f"{path} cannot be constructed: {exc}") from None
    if not isinstance(kernel, Kernel):
        raise Validation(
            "kernel",
            f"{path} made a {type(kernel).__name__}, not a kernel "
            "(hydrate, apply and snapshot methods)",
        )
    return kernel
