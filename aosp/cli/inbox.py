"""The inbox's commands: ``inbox enqueue|read|drain``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from aosp.cli.console import (
    EXIT_OK,
    UsageError,
    clip,
    command_group,
    print_fields,
    print_json,
    print_table,
)
from aosp.cli.data import plain_json
from aosp.cli.store import (
    hash_id,
    inbox_seq,
    open_store,
    world_options,
)
from persistence import cbor
from persistence.inbox_records import (
    ControlIngress,
    DomainEventIngress,
    InboxIngress,
    InboxItem,
    ReceiptIngress,
    TimerFiredIngress,
)

ITEM_KINDS: Final = ("domain_event", "receipt", "inbox", "timer_fired", "control")
"""``inbox enqueue --kind``: the record kinds of inbox items (``kind`` in ``inbox read``)."""
KIND_ALIASES: Final = {"domain-event": "domain_event", "timer": "timer_fired"}
"""Earlier spellings of ``--kind`` that are still taken."""


def item_kind(text: str) -> str:
    """argparse ``type=`` of ``--kind``: a record kind, or an earlier spelling of one."""
    return KIND_ALIASES.get(text, text)


ITEM_OPTIONS: Final = {
    "schema": "--schema",
    "key": "--key",
    "intent_hash": "--intent-hash",
    "effect_kind": "--effect-kind",
    "adapter_id": "--adapter-id",
    "signature": "--signature-hex",
    "inbox_name": "--inbox-name",
    "headers": "--header",
    "timer_id": "--timer-id",
    "cmd": "--cmd",
    "value_cbor": "--payload",
    "payload_cbor": "--payload",
}
"""The option of ``inbox enqueue`` that gives each field of the inbox item records."""


def _payload(text: str) -> bytes:
    try:
        return cbor.encode(json.loads(text))
    except RecursionError:
        raise UsageError("--payload nests too deeply to decode") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--payload is not JSON a CBOR payload can hold: {exc}") from None


def _headers(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    headers = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--header takes NAME=VALUE, not {pair!r}")
        headers[name] = value
    return headers


def _signature(text: str | None) -> bytes:
    try:
        return bytes.fromhex(text or "")
    except ValueError:
        raise UsageError(f"--signature-hex is not hexadecimal bytes: {text!r}") from None


def _need(args: argparse.Namespace, *names: str) -> None:
    missing = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is None]
    if missing:
        raise UsageError(f"--kind {args.kind} needs {', '.join(missing)}")


KIND_OPTIONS: Final = {
    "domain_event": ("schema", "key"),
    "receipt": ("intent_hash", "effect_kind", "adapter_id", "signature_hex"),
    "inbox": ("inbox_name", "header"),
    "timer_fired": ("timer_id",),
    "control": ("cmd",),
}
"""The ``inbox enqueue`` options (``dest``) that give the fields of each ``--kind``."""


def _refuse_other_kinds(args: argparse.Namespace) -> None:
    """``UsageError`` naming the options given that belong to another ``--kind`` (the item
    has no field for them: they would be dropped)."""
    foreign = [
        f"--{dest.replace('_', '-')} (of --kind {kind})"
        for kind, dests in KIND_OPTIONS.items()
        if kind != args.kind
        for dest in dests
        if getattr(args, dest) is not None
    ]
    if foreign:
        raise UsageError(f"--kind {args.kind} does not take {', '.join(foreign)}")


def build_item(args: argparse.Namespace) -> InboxItem:
    """The inbox item the ``inbox enqueue`` arguments describe (payloads are JSON, stored
    as canonical CBOR); options of another kind are a ``UsageError``."""
    _refuse_other_kinds(args)
    payload = _payload(args.payload)
    if args.kind == "domain_event":
        _need(args, "schema")
        key = None if args.key is None else args.key.encode()
        return DomainEventIngress(args.schema, payload, key=key)
    if args.kind == "receipt":
        _need(args, "intent_hash", "effect_kind", "adapter_id")
        signature = _signature(args.signature_hex)
        return ReceiptIngress(
            args.intent_hash, args.effect_kind, args.adapter_id, payload, signature
        )
    if args.kind == "inbox":
        _need(args, "inbox_name")
        return InboxIngress(args.inbox_name, payload, headers=_headers(args.header))
    if args.kind == "timer_fired":
        _need(args, "timer_id")
        return TimerFiredIngress(args.timer_id, payload)
    _need(args, "cmd")
    return ControlIngress(args.cmd, payload)


def cmd_inbox_enqueue(args: argparse.Namespace) -> int:
    """Enqueue one item; print its sequence. A repeat under the same idempotency key
    prints the first item's sequence and says, on stderr, that nothing was stored."""
    item = build_item(args)
    plane = open_store(args)
    keys = None if args.idempotency_key is None else [args.idempotency_key.encode()]
    (out,) = plane.enqueue_outcomes(args.universe, args.world, [item], idempotency_keys=keys)
    if args.json:
        print_json({"seq": str(out.seq), "repeat": out.repeat})
        return EXIT_OK
    print(out.seq)
    if out.repeat:
        print(
            f"a repeat: idempotency key {args.idempotency_key!r} already held this item "
            "(the sequence is the first enqueue's); nothing was stored",
            file=sys.stderr,
        )
    return EXIT_OK


ITEM_WIDTH: Final = 80
"""The widest item cell of ``inbox read`` without ``--full`` (a longer one ends in ``…``)."""


def cmd_inbox_read(args: argparse.Namespace) -> int:
    """Print pending items (after the cursor, or after ``--after``); say when there are
    more than ``--limit``."""
    plane = open_store(args)
    after = args.after if args.after is not None else plane.inbox_cursor(args.universe, args.world)
    items = plane.read_after(args.universe, args.world, after, args.limit)
    last = items[-1][0] if items else after
    more = len(items) == args.limit and bool(plane.read_after(args.universe, args.world, last, 1))
    rows = [
        {"seq": str(seq), "kind": type(item).KIND, "item": plain_json(item.to_map())}
        for seq, item in items
    ]
    if args.json:
        print_json(
            {
                "after": None if after is None else str(after),
                "items": rows,
                "more": more,
                "next_after": str(last) if more and last is not None else None,
            }
        )
        return EXIT_OK
    width = None if args.full else ITEM_WIDTH
    table = [{**r, "item": _item_text(r["item"], width)} for r in rows]
    print_table(table, ["seq", "kind", "item"])
    if more:
        sys.stdout.flush()  # the hint follows the items on a terminal
        where = (
            ": raise --limit" if last is None else f" after seq {last}: --after {last} shows them"
        )
        print(f"(more items{where})", file=sys.stderr)
    return EXIT_OK


def _item_text(item: dict[str, Any], width: int | None) -> str:
    """An item's JSON in one cell: whole, or clipped to ``width`` with an ellipsis."""
    text = json.dumps(item)
    return text if width is None else clip(text, width)


def cmd_inbox_drain(args: argparse.Namespace) -> int:
    """Move up to ``--max-items`` pending items into the journal (exactly once)."""
    plane = open_store(args)
    result = plane.drain_inbox_to_journal(args.universe, args.world, max_items=args.max_items)
    out = {
        "drained": result.count,
        "first_height": result.first_height if result.count else None,
        "cursor": None if result.cursor is None else str(result.cursor),
    }
    print_json(out) if args.json else print_fields(out)
    return EXIT_OK


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``inbox``."""
    one_world = world_options(required=True)
    inbox = command_group(sub, "inbox", "enqueue, read and drain a world's inbox")
    enqueue = inbox.add_parser(
        "enqueue", parents=[common, store, one_world], help="enqueue one item; print its seq"
    )
    enqueue.add_argument(
        "--kind",
        type=item_kind,
        choices=ITEM_KINDS,
        required=True,
        help="the item's record kind, as `inbox read` shows it (domain-event and timer are "
        "taken for domain_event and timer_fired)",
    )
    enqueue.add_argument(
        "--payload",
        default="null",
        metavar="JSON",
        help="the payload as JSON, stored as canonical CBOR: fills value_cbor of a "
        "domain_event, payload_cbor of the other kinds (default null)",
    )
    enqueue.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="enqueue at most once per key: a repeat of the item prints the first item's "
        "sequence (the plane does not say whether this call stored it)",
    )
    fields = enqueue.add_argument_group(
        "item fields",
        "Each option fills the record field it is named after (older spellings after it).",
    )
    fields.add_argument("--schema", help="domain_event: fills schema (the event's schema name)")
    fields.add_argument("--key", help="domain_event: fills key (partition key, as UTF-8 bytes)")
    fields.add_argument(
        "--intent-hash",
        "--intent",
        type=hash_id,
        metavar="HASH",
        help="receipt: fills intent_hash (64 hex digits)",
    )
    fields.add_argument("--effect-kind", help="receipt: fills effect_kind")
    fields.add_argument("--adapter-id", "--adapter", metavar="ID", help="receipt: fills adapter_id")
    fields.add_argument(
        "--signature-hex",
        metavar="HEX",
        help="receipt: fills signature, given in hex (default: empty)",
    )
    fields.add_argument("--inbox-name", "--source", metavar="NAME", help="inbox: fills inbox_name")
    fields.add_argument(
        "--header",
        action="append",
        metavar="NAME=VALUE",
        help="inbox: one entry of headers (repeatable)",
    )
    fields.add_argument("--timer-id", metavar="ID", help="timer_fired: fills timer_id")
    fields.add_argument("--cmd", "--command-name", metavar="CMD", help="control: fills cmd")
    enqueue.set_defaults(
        run=cmd_inbox_enqueue,
        option_fields={**ITEM_OPTIONS, "idempotency_keys[0]": "--idempotency-key"},
    )
    inbox_read = inbox.add_parser(
        "read", parents=[common, store, one_world], help="pending items after the cursor"
    )
    inbox_read.add_argument(
        "--after",
        type=inbox_seq,
        metavar="SEQ",
        help="read the items after this sequence (default: after the cursor, the pending ones)",
    )
    inbox_read.add_argument("--limit", type=int, default=100, help="items at most (default 100)")
    inbox_read.add_argument(
        "--full",
        action="store_true",
        help=f"print whole items (default: an item longer than {ITEM_WIDTH} characters is "
        "cut, ending in …)",
    )
    inbox_read.set_defaults(run=cmd_inbox_read, option_fields={"after_exclusive": "--after"})
    drain = inbox.add_parser(
        "drain", parents=[common, store, one_world], help="move pending items to the journal"
    )
    drain.add_argument(
        "--max-items", type=int, default=1_000, help="items drained at most (default 1000)"
    )
    drain.set_defaults(run=cmd_inbox_drain)
