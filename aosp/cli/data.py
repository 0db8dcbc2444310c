"""Commands over single records: ``world create``, ``cas put|get|stat``, ``journal read``,
``inbox enqueue|read|drain`` and ``snapshot list|commit|promote``."""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO, Final

from aosp.cli import ids
from aosp.cli.console import (
    EXIT_OK,
    Refused,
    UsageError,
    clip,
    command_group,
    human_size,
    int_at_least,
    iso_time,
    print_fields,
    print_json,
    print_table,
    short_id,
)
from aosp.cli.store import (
    check_kernel,
    hash_id,
    inbox_seq,
    open_store,
    require_universe,
    world_id,
    world_options,
)
from persistence import cbor
from persistence.errors import (
    Backend,
    BaselineRegression,
    NotFound,
    ReceiptHorizonFence,
    Validation,
)
from persistence.ids import Hash, UniverseId, WorldId
from persistence.kernel import entry_kind
from persistence.plane import Plane
from persistence.records import (
    ControlIngress,
    DomainEventIngress,
    InboxIngress,
    InboxItem,
    IngressJournalRecord,
    ReceiptIngress,
    SnapshotJournalRecord,
    SnapshotRecord,
    TimerFiredIngress,
    decode_inbox_item,
    decode_journal_record,
)
from persistence.sizes import check_text

# --------------------------------------------------------------------------- world


def cmd_world_create(args: argparse.Namespace) -> int:
    """Create a world (a new universe and world id unless given)."""
    if args.handle is not None:  # before the store: a refused handle must create nothing
        check_text(args.handle, "handle")
    plane = open_store(args, create=True)
    universe = args.universe or UniverseId.new()
    world = args.world or WorldId.new()
    genesis = plane.create_world(universe, world, handle=args.handle)
    result = {"universe": str(universe), "world": str(world), "genesis": str(genesis.snapshot_ref)}
    print_json(result) if args.json else print_fields(result)
    return EXIT_OK


def cmd_world_list(args: argparse.Namespace) -> int:
    """The worlds of the store (or of ``--universe``), in store order, with their handles,
    heads and creation times; ``--handle`` keeps those whose handle starts with it (found
    in the index of handles, in handle order). At most ``--limit``; more is said, never cut
    silently."""
    plane = open_store(args)
    require_universe(plane, args.universe)
    universes = [args.universe] if args.universe is not None else plane.universes()
    rows: list[dict[str, Any]] = []
    more = False
    for universe in universes:
        # with --handle, the index of handles names the worlds: no read of every world
        named = (
            plane.worlds(universe)
            if args.handle is None
            else (world for _, world in plane.handles(universe, args.handle))
        )
        for world in named:
            meta = plane.world_meta(universe, world)
            if len(rows) == args.limit:
                more = True
                break
            rows.append(
                {
                    "universe": str(universe),
                    "world": str(world),
                    "handle": meta.handle,
                    "head": plane.head(universe, world),
                    "created": iso_time(meta.created_ns),
                }
            )
        if more:
            break
    if args.json:
        print_json({"worlds": rows, "more": more})
        return EXIT_OK
    print_table(
        [{**r, "universe": short_id(r["universe"]), "world": short_id(r["world"])} for r in rows],
        ["universe", "world", "handle", "head", "created"],
    )
    if more:
        print(f"(more worlds: the first {args.limit:,} are listed; raise --limit)")
    return EXIT_OK


COUNTED_WORLDS: Final = 10_000
"""The most worlds ``universe list`` counts in one universe (it reads their keys)."""


def cmd_universe_list(args: argparse.Namespace) -> int:
    """The universes of the store with their worlds counted, up to :data:`COUNTED_WORLDS`
    each (``worlds_more``: there are more), at most ``--limit`` universes."""
    plane = open_store(args)
    rows: list[dict[str, Any]] = []
    more = False
    for universe in plane.universes():
        if len(rows) == args.limit:
            more = True
            break
        counted = sum(1 for _ in itertools.islice(plane.worlds(universe), COUNTED_WORLDS + 1))
        rows.append(
            {
                "universe": str(universe),
                "worlds": min(counted, COUNTED_WORLDS),
                "worlds_more": counted > COUNTED_WORLDS,
            }
        )
    if args.json:
        print_json({"universes": rows, "more": more})
        return EXIT_OK
    table = [
        {
            "universe": short_id(r["universe"]),
            "worlds": f"{r['worlds']:,}{'+' if r['worlds_more'] else ''}",
        }
        for r in rows
    ]
    print_table(table, ["universe", "worlds"])
    if more:
        print(f"(more universes: the first {args.limit:,} are listed; raise --limit)")
    return EXIT_OK


# --------------------------------------------------------------------------- cas


def _input(name: str) -> BinaryIO:
    """The ``FILE`` of ``cas put`` opened for reading (``-``: stdin)."""
    if name == "-":
        return sys.stdin.buffer
    try:
        return Path(name).open("rb")
    except FileNotFoundError:
        raise NotFound(f"FILE {name}: no such file") from None
    except IsADirectoryError:
        raise Validation("FILE", f"{name} is a directory, not a file") from None
    except OSError as exc:
        raise Backend(f"FILE {name}: cannot read it: {exc.strerror}") from None


def cmd_cas_put(args: argparse.Namespace) -> int:
    """Store a file (or stdin) in the universe's CAS; print its hash."""
    source = _input(args.file)  # before the store: a wrong FILE must create nothing
    plane = open_store(args, create=True)
    with source:
        digest = plane.put_stream(args.universe, source, expected=args.expect)
    meta = plane.blob_meta(args.universe, digest)
    result = {"hash": str(digest), "size": meta.size, "storage": meta.storage}
    print_json(result) if args.json else print(digest)
    return EXIT_OK


def _output(name: str | None) -> Path | None:
    """The ``--output`` file of ``cas get`` (``None``: stdout), checked before any work."""
    if name in (None, "-"):
        return None
    out = Path(name)
    if out.is_dir():
        raise Validation("--output", f"{name} is a directory; name the file to write")
    if not out.parent.is_dir():
        raise NotFound(f"--output {name}: directory {out.parent} does not exist")
    return out


MAX_JSON_BODY: Final = 16 * 1024 * 1024
"""The largest body ``cas get --json`` prints in its JSON (larger ones go to ``--output``)."""


def body_json(digest: Hash, body: bytes) -> dict[str, Any]:
    """A body as ``cas get --json`` prints it: its hash, its size and the body itself, as
    ``text`` when it is UTF-8, else as ``base64``."""
    try:
        return {"hash": str(digest), "size": len(body), "text": body.decode("utf-8")}
    except UnicodeDecodeError:
        encoded = base64.b64encode(body).decode("ascii")
        return {"hash": str(digest), "size": len(body), "base64": encoded}


def cmd_cas_get(args: argparse.Namespace) -> int:
    """Write a body, verified against its hash, to a file or stdout; with ``--json``, print
    it in a JSON object (:func:`body_json`), or, with ``--output``, what was written."""
    output = _output(args.output)
    plane = open_store(args)
    if args.json and output is None:
        size = plane.blob_meta(args.universe, args.hash).size
        if size > MAX_JSON_BODY:
            raise UsageError(
                f"--json prints bodies up to {MAX_JSON_BODY:,} bytes, and this one is "
                f"{size:,}: write it with --output FILE (--json then prints its hash and size)"
            )
        print_json(body_json(args.hash, plane.get(args.universe, args.hash)))
        return EXIT_OK
    stream = plane.open_blob(args.universe, args.hash)
    with stream:
        if output is None:
            shutil.copyfileobj(stream, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            partial = Path(f"{output}.partial")
            try:
                with partial.open("wb") as out:
                    shutil.copyfileobj(stream, out)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(output)  # only a verified body gets the name
            if args.json:
                size = output.stat().st_size
                print_json({"hash": str(args.hash), "size": size, "output": str(output)})
    return EXIT_OK


def cmd_cas_stat(args: argparse.Namespace) -> int:
    """Print a body's size and where it is stored."""
    plane = open_store(args)
    meta = plane.blob_meta(args.universe, args.hash)
    result = {
        "hash": str(args.hash),
        "size": meta.size,
        "storage": meta.storage,
        "object_key": meta.object_key,
    }
    if args.json:
        print_json(result)
    else:
        print_fields({**result, "size": f"{human_size(meta.size)} ({meta.size:,} bytes)"})
    return EXIT_OK


# --------------------------------------------------------------------------- journal


def _preview(data: bytes, width: int = 48) -> str:
    text = data[:width].hex()
    return text + ("…" if len(data) > width else "")


def decoded_entry(entry: bytes) -> dict[str, Any] | None:
    """A journal entry the plane wrote, decoded to JSON-safe values (a drained item with
    its payload decoded too); ``None`` for an entry in a caller's own format."""
    record = decode_journal_record(entry)
    if record is None:
        return None
    out: dict[str, Any] = _plain(record.to_map())
    if isinstance(record, IngressJournalRecord):
        out["item"] = _plain(decode_inbox_item(record.item).to_map())
    return out


def cmd_journal_read(args: argparse.Namespace) -> int:
    """Print entries from a height (stitched from segments and the hot tail); say when
    more follow than ``--limit`` showed."""
    if args.raw and args.decode:
        raise UsageError("--raw writes the entries' bytes; --decode shows them decoded: not both")
    if args.raw and args.json:
        raise UsageError("--raw writes the entries' bytes; --json prints them as JSON: not both")
    plane = open_store(args)
    rows = plane.read_range(args.universe, args.world, args.start, args.limit)
    head = plane.head(args.universe, args.world)  # read after: heads only grow
    last = rows[-1][0] if rows else args.start - 1
    more = last < head
    if args.raw:
        for _, entry in rows:
            sys.stdout.buffer.write(len(entry).to_bytes(4, "big") + entry)
        sys.stdout.buffer.flush()
    elif args.json:
        out = [
            {"height": h, "size": len(e), "kind": entry_kind(e), "entry_hex": e.hex()}
            | ({"record": decoded_entry(e)} if args.decode else {})
            for h, e in rows
        ]
        next_from = last + 1 if more else None
        print_json({"head": head, "entries": out, "more": more, "next_from": next_from})
    elif args.decode:
        table = [{"height": h, "kind": entry_kind(e), "record": _record_text(e)} for h, e in rows]
        print_table(table, ["height", "kind", "record"])
    else:
        table = [
            {"height": h, "size": len(e), "kind": entry_kind(e), "entry": _preview(e)}
            for h, e in rows
        ]
        print_table(table, ["height", "size", "kind", "entry"])
    if more and not args.json:
        sys.stdout.flush()  # the hint follows the entries on a terminal
        print(f"(more entries after height {last}: --from {last + 1} shows them)", file=sys.stderr)
    return EXIT_OK


def _record_text(entry: bytes) -> str:
    record = decoded_entry(entry)
    return _preview(entry) if record is None else json.dumps(record, sort_keys=True)


# --------------------------------------------------------------------------- inbox

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


def _plain(value: Any) -> Any:
    """A record map made JSON-safe: CBOR payloads decoded, other bytes and hashes as hex."""
    if isinstance(value, dict):
        return {k: _plain(cbor.decode(v) if k.endswith("_cbor") else v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Hash):
        return str(value)
    return value


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
        {"seq": str(seq), "kind": type(item).KIND, "item": _plain(item.to_map())}
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


# --------------------------------------------------------------------------- snapshots


def cmd_snapshot_list(args: argparse.Namespace) -> int:
    """List the snapshot index, marking the active baseline."""
    plane = open_store(args)
    baseline = plane.active_baseline(args.universe, args.world)
    rows: list[dict[str, Any]] = [
        {
            "height": s.height,
            "baseline": s == baseline,
            "snapshot_ref": str(s.snapshot_ref),
            "logical_time_ns": s.logical_time_ns,
            "receipt_horizon": s.receipt_horizon_height,
        }
        for s in plane.list_snapshots(args.universe, args.world)
    ]
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            r["baseline"] = "*" if r["baseline"] else ""
        print_table(rows, ["height", "baseline", "snapshot_ref", "receipt_horizon"])
    return EXIT_OK


def _snapshot_at(plane: Plane, args: argparse.Namespace, height: int) -> SnapshotRecord | None:
    found = [s for s in plane.list_snapshots(args.universe, args.world) if s.height == height]
    return found[0] if found else None


def promote_command(args: argparse.Namespace, height: int) -> str:
    """The ``aosp snapshot promote`` command line that promotes the snapshot at ``height``
    of the command's world in the command's store (full ids, quoted for a shell)."""
    store = (
        ["--data-dir", str(args.data_dir)]
        if args.kv is None
        else ["--kv", str(args.kv), "--objects", str(args.objects)]
    )
    words = ["aosp", "snapshot", "promote", *store]
    words += ["-u", str(args.universe), "-w", str(args.world), "--height", str(height)]
    return shlex.join(words)


def _snapshot_summary(
    plane: Plane, args: argparse.Namespace, record: SnapshotRecord, indexed: bool
) -> int:
    """What ``snapshot commit`` did, and what comes next: the snapshot's height (the state
    after that journal entry; the commit's own journal record is one above it, at the
    head), whether the fences let it be promoted, and the command that promotes it."""
    baseline = plane.active_baseline(args.universe, args.world)
    head = plane.head(args.universe, args.world)
    fenced = record.receipt_horizon_height != record.height
    promotable = not fenced and record.height > baseline.height
    result = {
        "height": record.height,
        "snapshot_ref": str(record.snapshot_ref),
        "receipt_horizon": record.receipt_horizon_height,
        "indexed": indexed,
        "baseline": baseline.height,
        "head": head,
        "promotable": promotable,
    }
    if args.json:
        print_json(result)
        return EXIT_OK
    if baseline == record:
        step = "none: it is the active baseline"
    elif fenced:
        step = (
            "none: the receipt-horizon fence refuses it (its horizon is not its height); "
            "commit a snapshot with --receipts-complete (and --promote) to make a baseline"
        )
    elif not promotable:
        step = f"none: the active baseline is at height {baseline.height}, above it"
    else:
        step = promote_command(args, record.height)
    state = "genesis" if record.height == 0 else f"the state after entry {record.height}"
    print_fields(
        {
            "snapshot height": f"{record.height} ({state})",
            "snapshot_ref": result["snapshot_ref"],
            "receipt horizon": (
                "none (committed without --receipts-complete)"
                if record.receipt_horizon_height is None
                else record.receipt_horizon_height
            ),
            "indexed": "yes" if indexed else "no (already indexed at this height)",
            "baseline height": baseline.height,
            "journal head": head
            if head == record.height
            else f"{head} (the commit's journal record is above the snapshot: not its height)",
            "to promote": step,
        }
    )
    return EXIT_OK


def cmd_snapshot_commit(args: argparse.Namespace) -> int:
    """Snapshot the kernel's state at the head (Protocol E); optionally promote it to the
    baseline, which lets ``segments export`` move the history below it."""
    from segments.restore import restore

    if args.promote and not args.receipts_complete:
        raise UsageError(
            "--promote needs --receipts-complete: the receipt-horizon fence promotes only a "
            "snapshot whose receipt horizon is its height"
        )
    kernel = check_kernel(args.kernel)
    plane = open_store(args)
    state = restore(plane, args.universe, args.world, kernel)
    existing = _snapshot_at(plane, args, state.head)
    if existing is not None:  # nothing journaled since: the index at this height is immutable
        record, indexed = existing, False
        if args.promote:
            _promote(plane, args, record)
    else:
        record, outcome = plane.snapshot_commit(
            args.universe,
            args.world,
            state.state,
            height=state.head,
            logical_time_ns=time.time_ns(),
            receipt_horizon_height=state.head if args.receipts_complete else None,
            promote_baseline=args.promote,
        )
        indexed = outcome.indexed
    return _snapshot_summary(plane, args, record, indexed)


def _promote(
    plane: Plane, args: argparse.Namespace, record: SnapshotRecord, option: str = ""
) -> None:
    """Promote ``record``; the fence's refusal as :class:`Refused` saying what would pass
    (``option``: the option that named the snapshot, which the message starts with)."""
    try:
        plane.promote_baseline(args.universe, args.world, record)
    except ReceiptHorizonFence as exc:
        horizon = exc.receipt_horizon_height
        raise Refused(
            f"{option}the receipt-horizon fence refuses the snapshot at height {exc.height}: its "
            + (
                "receipt horizon is none (it was committed without --receipts-complete)"
                if horizon is None
                else f"receipt horizon is {horizon}"
            )
            + f", and promotion needs it equal to the height ({exc.height}). The index is "
            "immutable, so no retry changes this: commit a new snapshot with "
            "`aosp snapshot commit --receipts-complete --promote`"
        ) from None


def _missing_snapshot(plane: Plane, args: argparse.Namespace, height: int) -> NotFound:
    """``NotFound`` for ``--height`` naming no snapshot: the heights that have one (the
    nearest, if there are many), and, if ``height`` holds the journal record of a snapshot
    commit (the head just after ``snapshot commit``), the snapshot's own height."""
    heights = [s.height for s in plane.list_snapshots(args.universe, args.world)]
    below = [h for h in heights if h < height]
    above = [h for h in heights if h > height]
    if len(heights) <= MAX_LISTED_HEIGHTS:
        where = f"snapshots are indexed at heights {', '.join(map(str, heights))}"
    else:
        near = [*below[-1:], *above[:1]]
        where = (
            f"{len(heights):,} snapshots are indexed; the nearest at heights "
            f"{' and '.join(map(str, near))}"
        )
    hint = ""
    head = plane.head(args.universe, args.world)
    entry = plane.read_range(args.universe, args.world, height, 1) if 1 <= height <= head else []
    if entry:
        record = decode_journal_record(entry[0][1])
        if isinstance(record, SnapshotJournalRecord):
            hint = (
                f"; height {height} is the journal record of the snapshot committed at height "
                f"{record.height}: its --height is {record.height}"
            )
    return NotFound(
        f"--height {height}: no snapshot is indexed at {height} in world {args.world} "
        f"({where}; `aosp snapshot list` shows them){hint}"
    )


MAX_LISTED_HEIGHTS: Final = 10
"""The most snapshot heights a ``--height`` naming no snapshot lists (else the nearest)."""


def cmd_snapshot_promote(args: argparse.Namespace) -> int:
    """Promote the snapshot indexed at ``--height`` to the active baseline."""
    plane = open_store(args)
    record = _snapshot_at(plane, args, args.height)
    if record is None:
        raise _missing_snapshot(plane, args, args.height)
    try:
        _promote(plane, args, record, f"--height {args.height}: ")
    except BaselineRegression as exc:  # the baseline never moves down: no retry helps
        raise Refused(
            f"--height {args.height}: below the active baseline at height {exc.current}, and "
            "a baseline never moves down; promote a snapshot at or above it"
        ) from None
    baseline = plane.active_baseline(args.universe, args.world)
    result = {
        "height": args.height,
        "baseline": baseline.height,
        "head": plane.head(args.universe, args.world),
    }
    print_json(result) if args.json else print_fields(result)
    return EXIT_OK


# --------------------------------------------------------------------------- registration

HASH_HELP: Final = (
    "the body's sha256 (64 hex digits), or a unique prefix of one in the universe's CAS"
)


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``world``, ``cas``, ``journal``, ``inbox`` and ``snapshot``."""
    one_world = world_options(required=True)
    group = command_group(sub, "world", "create and list worlds")
    listing = group.add_parser(
        "list", parents=[common, store], help="worlds with their handles and heads"
    )
    listing.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        help="only this universe (its id or a prefix)",
    )
    listing.add_argument("--handle", help="only worlds whose handle starts with this")
    listing.add_argument(
        "--limit", type=int_at_least(1), default=100, help="worlds at most (default 100)"
    )
    listing.set_defaults(run=cmd_world_list)
    universes = command_group(sub, "universe", "list universes")
    universe_listing = universes.add_parser(
        "list", parents=[common, store], help="universes with their worlds counted"
    )
    universe_listing.add_argument(
        "--limit", type=int_at_least(1), default=100, help="universes at most (default 100)"
    )
    universe_listing.set_defaults(run=cmd_universe_list)
    create = group.add_parser(
        "create", parents=[common, store], help="create a world (creating the store if needed)"
    )
    create.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        help="universe: its id or a unique prefix of an existing one (default: new)",
    )
    create.add_argument("--world", "-w", type=world_id, help="world (default: new)")
    create.add_argument("--handle", help="a human-readable name stored with the world")
    create.set_defaults(run=cmd_world_create)

    cas = command_group(
        sub, "cas", "a universe's content-addressed store: put, get and stat bodies"
    )
    universe_only = argparse.ArgumentParser(add_help=False)
    universe_only.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        required=True,
        help="the universe whose CAS holds the body: its id or a unique prefix of it (4 hex "
        "digits or more)",
    )
    put = cas.add_parser(
        "put", parents=[common, store, universe_only], help="store a file or stdin; print hash"
    )
    put.add_argument("file", metavar="FILE", help="file to store, or - for stdin")
    put.add_argument(
        "--expect",
        type=hash_id,
        metavar="HASH",
        help="refuse the body unless its sha256 is this (64 hex digits)",
    )
    put.set_defaults(run=cmd_cas_put, option_fields={"expected_hash": "--expect"})
    get = cas.add_parser(
        "get",
        parents=[common, store, universe_only],
        help="write a verified body out",
        description="Writes the body, verified against its hash, to --output or stdout. With "
        "--json, stdout gets {hash, size, text} (a UTF-8 body) or {hash, size, base64} (any "
        f"other) for bodies up to {MAX_JSON_BODY // 1024 // 1024} MiB, or, with --output, "
        "{hash, size, output}.",
    )
    get.add_argument("hash", type=ids.hash_selector, metavar="HASH", help=HASH_HELP)
    get.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="file to write, named only once the body is verified (default: stdout; with "
        "--json, the JSON says hash, size and file)",
    )
    get.set_defaults(run=cmd_cas_get)
    stat = cas.add_parser("stat", parents=[common, store, universe_only], help="size and location")
    stat.add_argument("hash", type=ids.hash_selector, metavar="HASH", help=HASH_HELP)
    stat.set_defaults(run=cmd_cas_stat)

    journal = command_group(sub, "journal", "read a world's journal")
    read = journal.add_parser(
        "read", parents=[common, store, one_world], help="entries from a height (stitched)"
    )
    read.add_argument(
        "--from", dest="start", type=int, default=1, help="the first height to read (default 1)"
    )
    read.add_argument("--limit", type=int, default=100, help="entries at most (default 100)")
    read.add_argument(
        "--raw", action="store_true", help="write entries to stdout as u32 length + bytes"
    )
    read.add_argument(
        "--decode",
        action="store_true",
        help="show the plane's records decoded (drained items with their payloads)",
    )
    read.set_defaults(run=cmd_journal_read, option_fields={"from_inclusive": "--from"})

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

    snapshot = command_group(sub, "snapshot", "list, commit and promote a world's snapshots")
    listing = snapshot.add_parser(
        "list", parents=[common, store, one_world], help="the index; * marks the baseline"
    )
    listing.set_defaults(run=cmd_snapshot_list)
    commit = snapshot.add_parser(
        "commit",
        parents=[common, store, one_world],
        help="snapshot the kernel's state at the head (optionally promote it)",
        description="Restores the world through --kernel, stores the state as a snapshot at "
        "the head and indexes it; with --promote it becomes the active baseline, below "
        "which `segments export` moves history to cold segments.",
    )
    commit.add_argument(
        "--kernel",
        default="persistence.kernel:ReferenceKernel",
        help="kernel as module:Class (default: the reference kernel)",
    )
    commit.add_argument(
        "--receipts-complete",
        action="store_true",
        help="assert that every receipt of effects up to the head is journaled: records the "
        "receipt horizon at the snapshot's height (promotion needs it)",
    )
    commit.add_argument("--promote", action="store_true", help="make it the active baseline")
    commit.set_defaults(run=cmd_snapshot_commit)
    promote = snapshot.add_parser(
        "promote",
        parents=[common, store, one_world],
        help="make an indexed snapshot the active baseline",
        description="The receipt-horizon fence and non-regression are checked: a snapshot "
        "without a complete receipt horizon, or below the baseline, is refused (exit 1: no "
        "retry changes it).",
    )
    promote.add_argument(
        "--height",
        type=int_at_least(0),
        required=True,
        help="height of the snapshot (its `snapshot height`, not the journal head after the "
        "commit; `snapshot list` shows them)",
    )
    promote.set_defaults(run=cmd_snapshot_promote)
