"""Records round-trip through canonical CBOR; malformed stored bytes and bad input are refused."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import uuid

import cbor2
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from persistence import cbor
from persistence.errors import CorruptRecord, Validation
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.inbox_records import (
    ControlIngress,
    DomainEventIngress,
    InboxEnvelope,
    InboxIngress,
    InboxItem,
    ReceiptIngress,
    TimerFiredIngress,
    decode_inbox_item,
    encode_inbox_item,
    envelope_bytes,
    envelope_item,
    envelope_parts,
)
from persistence.journal_records import (
    BaselineSnapshotJournalRecord,
    IngressJournalRecord,
    SnapshotJournalRecord,
    decode_journal_record,
    ingress_bytes,
)
from persistence.log_records import LogRecord, _log_record_head, decode_log_record, log_records
from persistence.records import CasMeta, Record, SnapshotRecord, WorldMeta, decode_record
from persistence.segment_records import EXPORT_STATES, SegmentIndexRecord

H1 = Hash.of(b"one")
H2 = Hash.of(b"two")
PAYLOAD = cbor.encode({"n": 1})
SEQ = InboxSeq(bytes(range(12)))
SNAP = SnapshotRecord(H1, 10, 1_000, H2, receipt_horizon_height=10)

PLAIN_RECORDS: list[Record] = [
    CasMeta(size=3, inline_bytes=b"abc"),
    CasMeta(size=100_000, object_key="cas/u/sha256/ab"),
    SNAP,
    SnapshotRecord(H1, 0, 0, H2),
    SegmentIndexRecord(1, 100, "segments/u/w/1-100.log", "blake3", b"\x01" * 32, 100, 4096),
    WorldMeta(created_ns=5),
    WorldMeta(created_ns=5, handle="shop-7"),
]
INBOX_ITEMS: list[InboxItem] = [
    DomainEventIngress("demo/Added@1", PAYLOAD),
    DomainEventIngress("demo/Added@1", PAYLOAD, key=b"k"),
    ReceiptIngress(H1, "http.request", "adapter-1", PAYLOAD, b"sig"),
    InboxIngress("orders", PAYLOAD),
    InboxIngress("orders", PAYLOAD, headers={"b": "2", "a": "1"}),
    TimerFiredIngress("t-1", PAYLOAD),
    ControlIngress("pause", PAYLOAD),
]
JOURNAL_RECORDS: list[Record] = [
    SnapshotJournalRecord.of(SNAP),
    BaselineSnapshotJournalRecord.of(SNAP),
    IngressJournalRecord(SEQ, encode_inbox_item(DomainEventIngress("shop/Order@1", PAYLOAD))),
]


@pytest.mark.parametrize("record", PLAIN_RECORDS, ids=lambda r: type(r).__name__)
def test_plain_records_round_trip(record: Record) -> None:
    data = record.to_cbor()
    assert decode_record(type(record), data) == record
    assert cbor.decode(data) == record.to_map()


@pytest.mark.parametrize("item", INBOX_ITEMS, ids=lambda r: type(r).__name__)
def test_inbox_items_round_trip_with_kind(item: InboxItem) -> None:
    data = encode_inbox_item(item)
    assert decode_inbox_item(data) == item
    assert cbor.decode(data)["kind"] == type(item).KIND


@pytest.mark.parametrize("record", JOURNAL_RECORDS, ids=lambda r: type(r).__name__)
def test_journal_records_round_trip(record: Record) -> None:
    assert decode_journal_record(record.to_cbor()) == record


def test_foreign_journal_entries_are_not_plane_records() -> None:
    assert decode_journal_record(b"opaque bytes") is None
    assert decode_journal_record(cbor.encode({"kind": "app/event", "x": 1})) is None
    assert decode_journal_record(cbor.encode([1, 2])) is None


def test_known_journal_kind_with_bad_fields_is_corrupt() -> None:
    with pytest.raises(CorruptRecord):
        decode_journal_record(cbor.encode({"kind": "snapshot", "height": 1}))


def test_optional_fields_are_omitted_not_null() -> None:
    assert "receipt_horizon_height" not in SnapshotRecord(H1, 1, 1, H2).to_map()
    assert "key" not in DomainEventIngress("s", PAYLOAD).to_map()


def test_headers_are_order_independent() -> None:
    a = InboxIngress("o", PAYLOAD, headers={"x": "1", "y": "2"})
    b = InboxIngress("o", PAYLOAD, headers={"y": "2", "x": "1"})
    assert a.to_cbor() == b.to_cbor()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: SnapshotRecord(H1, -1, 0, H2), "SnapshotRecord.height"),
        (lambda: SnapshotRecord(H1, 2**64, 0, H2), "SnapshotRecord.height"),
        (lambda: SnapshotRecord("ab", 1, 0, H2), "SnapshotRecord.snapshot_ref"),  # type: ignore[arg-type]
        (lambda: DomainEventIngress("s", b"\x18\x01"), "DomainEventIngress.value_cbor"),
        (lambda: DomainEventIngress("", PAYLOAD), "DomainEventIngress.schema"),
        (lambda: ReceiptIngress(H1, "k", "a", PAYLOAD, "sig"), "ReceiptIngress.signature"),  # type: ignore[arg-type]
        (lambda: InboxIngress("o", PAYLOAD, headers={"a": 1}), "InboxIngress.headers"),  # type: ignore[dict-item]
        (lambda: CasMeta(size=3), "CasMeta"),
        (lambda: CasMeta(size=3, inline_bytes=b"ab"), "CasMeta.size"),
        (lambda: CasMeta(size=3, inline_bytes=b"abc", object_key="k"), "CasMeta"),
        (
            lambda: SegmentIndexRecord(5, 4, "k", "blake3", b"", 0, 0),
            "SegmentIndexRecord",
        ),
        (
            lambda: SegmentIndexRecord(1, 10, "k", "blake3", b"", 9, 0),
            "SegmentIndexRecord.entry_count",
        ),
    ],
)
def test_bad_input_is_validation_naming_field(make: object, field: str) -> None:
    with pytest.raises(Validation) as err:
        make()  # type: ignore[operator]
    assert err.value.field == field


def test_encode_inbox_item_refuses_non_items() -> None:
    with pytest.raises(Validation):
        encode_inbox_item(SNAP)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        {"snapshot_ref": H1.digest, "height": 1, "logical_time_ns": 0},  # missing manifest_hash
        {**SNAP.to_map(), "extra": 1},  # unknown field
        {**SNAP.to_map(), "height": "1"},  # wrong type
        {**SNAP.to_map(), "snapshot_ref": b"short"},  # bad hash length
        [1, 2, 3],  # not a map
    ],
)
def test_strict_decode_of_stored_snapshot(value: object) -> None:
    with pytest.raises(CorruptRecord):
        SnapshotRecord.from_cbor(cbor.encode(value))


def test_non_canonical_stored_bytes_are_corrupt() -> None:
    data = bytearray(SNAP.to_cbor())
    data.append(0)  # trailing byte
    with pytest.raises(CorruptRecord):
        SnapshotRecord.from_cbor(bytes(data))


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "nope", "cmd": "x", "payload_cbor": PAYLOAD},
        {"cmd": "x", "payload_cbor": PAYLOAD},
        {"kind": "control", "cmd": "x"},
        {"kind": "control", "cmd": "x", "payload_cbor": b"\xff"},
    ],
)
def test_strict_decode_of_stored_inbox_items(value: object) -> None:
    with pytest.raises(CorruptRecord):
        decode_inbox_item(cbor.encode(value))


EDGES = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**63, 2**64 - 2]


@pytest.mark.parametrize("first", EDGES)
def test_log_records_are_the_records_encoded_one_by_one(first: int) -> None:
    world = WorldId.new()
    tags = ["t", "t", "é" * 30, "t", "x"][: 2**64 - first]
    built = log_records(world, first, tags)
    assert built == [LogRecord(world, first + i, tag).to_cbor() for i, tag in enumerate(tags)]
    assert [decode_record(LogRecord, b, "log") for b in built] == [
        LogRecord(world, first + i, tag) for i, tag in enumerate(tags)
    ]
    with pytest.raises(Validation, match=r"LogRecord\.tag"):  # validated as the record is
        log_records(world, first, ["t", ""])


@pytest.mark.parametrize(
    "tag", ["t", "x" * 23, "x" * 24, "é" * 127 + "x", "x" * 256, "é" * 600, "x" * 65_536]
)
def test_a_log_records_bytes_before_its_height_are_built_as_the_record_encodes_them(
    tag: str,
) -> None:
    """Text heads of every width (the length in the head, in one byte, in two), multibyte
    text; built without a record for each world, equal to the record's encoding."""
    for world in (WorldId.new(), WorldId(uuid.UUID(int=0)), WorldId(uuid.UUID(int=2**128 - 1))):
        head = _log_record_head(world, tag)
        assert head + cbor.unsigned(7) == LogRecord(world, 7, tag).to_cbor()


def test_a_log_record_head_for_a_tag_or_world_the_record_refuses_is_refused() -> None:
    with pytest.raises(Validation, match=r"LogRecord\.tag"):
        _log_record_head(WorldId.new(), "")
    for world in (UniverseId.new(), uuid.uuid4(), None):  # not a world: as the record says
        with pytest.raises(Validation, match=r"LogRecord\.world"):
            log_records(world, 1, ["t"])  # type: ignore[arg-type]


@pytest.mark.parametrize("first", EDGES)
def test_a_log_record_read_at_its_places_is_the_strict_decoders(first: int) -> None:
    world = WorldId.new()
    tags = ["t", "é" * 30, "x" * 300, "Dog.TrickAdded"][: 2**64 - first]
    for raw, tag in zip(log_records(world, first, tags), tags, strict=False):
        assert decode_log_record(raw, "log") == decode_record(LogRecord, raw, "log")
        assert decode_log_record(raw, "log").tag == tag


def test_a_log_record_not_as_written_goes_to_the_strict_decoder() -> None:
    """Every byte changed, cut or added, and the same fields encoded otherwise (a longer
    integer head, a longer text head, keys in another order): decoded as the strict
    decoder decodes it, or its ``CorruptRecord``; read after the record itself, whose head
    the fast decoder then keeps."""
    world = WorldId.new()
    (raw,) = log_records(world, 300, ["topic"])
    assert decode_log_record(raw, "log") == LogRecord(world, 300, "topic")
    variants = [raw[:cut] for cut in range(len(raw))] + [raw + b"\x00"]
    variants += [
        raw[:i] + bytes([raw[i] ^ bit]) + raw[i + 1 :] for i in range(len(raw)) for bit in (1, 0x80)
    ]
    variants.append(raw[:-3] + b"\x1a\x00\x00\x01\x2c")  # 300 with a 4-byte head
    variants.append(raw.replace(b"\x65topic", b"\x78\x05topic"))  # a 1-byte length for 5
    variants.append(cbor2.dumps({"world": world.uuid.bytes, "tag": "topic", "height": 300}))
    for variant in variants:
        try:
            strict: object = decode_record(LogRecord, variant, "log")
        except CorruptRecord as exc:
            with pytest.raises(CorruptRecord) as raised:
                decode_log_record(variant, "log")
            assert str(raised.value) == str(exc)
        else:
            assert decode_log_record(variant, "log") == strict


def test_unsigned_is_cbors_shortest_head() -> None:
    for value in [*EDGES, 2**64 - 1]:
        assert cbor.unsigned(value) == cbor.encode(value)
    for bad in (-1, 2**64):
        with pytest.raises(cbor.NotCanonical):
            cbor.unsigned(bad)


@pytest.mark.parametrize("item", INBOX_ITEMS, ids=lambda i: type(i).__name__)
@pytest.mark.parametrize("key", [None, b"", b"k", bytes(256)])
def test_envelope_bytes_are_the_envelope_records_encoding(
    item: InboxItem, key: bytes | None
) -> None:
    encoded = encode_inbox_item(item)
    assert envelope_bytes(encoded, key) == InboxEnvelope(encoded, key).to_cbor()
    assert decode_record(InboxEnvelope, envelope_bytes(encoded, key)) == InboxEnvelope(encoded, key)


@pytest.mark.parametrize("item", INBOX_ITEMS, ids=lambda i: type(i).__name__)
def test_ingress_bytes_are_the_ingress_records_encoding(item: InboxItem) -> None:
    encoded = encode_inbox_item(item)
    assert ingress_bytes(SEQ, encoded) == IngressJournalRecord(SEQ, encoded).to_cbor()


@pytest.mark.parametrize("size", [0, 10, 200, 300, 70_000])
def test_ingress_bytes_of_items_of_every_head_size(size: int) -> None:
    """Items whose bytes take a 1-, 2-, 3- and 5-byte length head in the ingress record."""
    encoded = encode_inbox_item(DomainEventIngress("s/E@1", cbor.encode(b"x" * size)))
    assert ingress_bytes(SEQ, encoded) == IngressJournalRecord(SEQ, encoded).to_cbor()


@pytest.mark.parametrize("key", [None, b"k"])
@pytest.mark.parametrize("item", INBOX_ITEMS, ids=lambda i: type(i).__name__)
def test_envelope_item_decodes_as_the_envelope_record_then_its_item(
    item: InboxItem, key: bytes | None
) -> None:
    encoded = encode_inbox_item(item)
    stored = InboxEnvelope(encoded, key).to_cbor()
    assert envelope_item(stored, "x") == item
    # an explicit null key: not what the plane writes, but the record decodes it
    with_null = cbor.encode({"item": encoded, "idempotency_key": None})
    assert envelope_item(with_null, "x") == item
    # with the item's bytes, as the default normalizer's entries are built from
    assert envelope_parts(stored, "x") == envelope_parts(with_null, "x") == (item, encoded)
    absent = [f.name for f in dataclasses.fields(item) if getattr(item, f.name) is None]
    for name in absent:  # a null item field decodes to the same item, whose bytes omit it
        item_with_null = cbor.encode({**item.to_map(), name: None})
        assert envelope_parts(InboxEnvelope(item_with_null, key).to_cbor(), "x") == (item, encoded)


ITEM = encode_inbox_item(INBOX_ITEMS[0])


@pytest.mark.parametrize(
    "stored",
    [
        cbor.encode({"item": ITEM, "other": 1}),
        cbor.encode({"idempotency_key": b"k"}),
        cbor.encode({"item": "text"}),
        cbor.encode({"item": ITEM, "idempotency_key": 5}),
        cbor.encode([ITEM]),
        cbor.encode({"item": ITEM[:-1]}),  # the item damaged
        cbor.encode({"item": b"\x18\x05"}),  # the item not canonical
        cbor.encode({"item": cbor.encode({"kind": "domain_event"})}),  # fields missing
        cbor.encode({"item": cbor.encode({"kind": "nope"})}),
        b"\xa1",  # truncated
    ],
)
def test_envelope_item_refuses_what_the_record_refuses(stored: bytes) -> None:
    with pytest.raises(CorruptRecord) as by_record:
        decode_inbox_item(decode_record(InboxEnvelope, stored, "inbox entry").item)
    with pytest.raises(CorruptRecord) as directly:
        envelope_item(stored, "inbox entry")
    assert (directly.value.what, str(directly.value)) == (
        by_record.value.what,
        str(by_record.value),
    )


# --------------------------------------------------------------------------- direct encoding

_RECORD_MODULES = (
    "persistence.records",
    "persistence.inbox_records",
    "persistence.journal_records",
    "persistence.log_records",
    "persistence.segment_records",
)


def _record_classes() -> list[type[Record]]:
    for name in _RECORD_MODULES:
        importlib.import_module(name)
    found: list[type[Record]] = []
    pending = list(Record.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        module = sys.modules.get(cls.__module__)
        # the plane's own (not a test's), and not a class that a slots dataclass replaced
        if cls.__module__ in _RECORD_MODULES and getattr(module, cls.__name__, None) is cls:
            found.append(cls)
    return sorted(set(found), key=lambda cls: cls.__name__)


_TEXT = st.text(min_size=1, max_size=40).filter(
    lambda t: not any(0xD800 <= ord(c) < 0xE000 for c in t)
)
_SIZES = st.sampled_from([0, 1, 23, 24, 255, 256, 65_535, 65_536])
_VALUES: dict[str, st.SearchStrategy[object]] = {
    "u64": st.one_of(
        st.sampled_from([0, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**64 - 1]),
        st.integers(0, 2**64 - 1),
    ),
    "bool": st.booleans(),
    "bytes": st.one_of(st.binary(max_size=40), _SIZES.map(bytes)),
    "text": _TEXT,
    "cbor": st.sampled_from([PAYLOAD, cbor.encode([1, "x", b"y"]), cbor.encode({})]),
    "hash": st.binary(min_size=32, max_size=32).map(Hash),
    "seq": st.binary(min_size=12, max_size=12).map(InboxSeq),
    "world": st.uuids().map(WorldId),
    "text_map": st.dictionaries(_TEXT, _TEXT, max_size=3),
    "export_state": st.sampled_from(EXPORT_STATES),
}


@given(st.data())
@settings(max_examples=400)
def test_records_written_directly_are_cbor2s_canonical_encoding(data: st.DataObject) -> None:
    """``Record.to_cbor`` writes most records without cbor2; the bytes are what cbor2's
    canonical encoder writes for the record's map, for every record class and field value
    (lengths and integers at each head-size edge, text beyond ASCII, absent optionals)."""
    cls = data.draw(st.sampled_from(_record_classes()))
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # every record is a dataclass
        codec = f.metadata["codec"].name
        required = f.default is dataclasses.MISSING
        if required or data.draw(st.booleans()):
            values[f.name] = data.draw(_VALUES[codec], label=f"{cls.__name__}.{f.name}")
    try:
        record = cls(**values)
    except Validation:  # values the record refuses together (each one is valid alone)
        assume(False)
    assert record.to_cbor() == cbor.encode(record.to_map())
    assert type(record).from_cbor(record.to_cbor()) == record
