"""Commands over single records: ``world create|list``, ``universe list``,
``cas put|get|stat`` and ``journal read`` (the inbox's are in :mod:`aosp.cli.inbox`, the
snapshots' in :mod:`aosp.cli.snapshots`)."""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import shutil
import sys
from pathlib import Path
from typing import Any, BinaryIO, Final

from aosp.cli import ids
from aosp.cli.console import (
    EXIT_OK,
    UsageError,
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
    hash_id,
    open_store,
    require_universe,
    world_id,
    world_options,
)
from persistence import cbor
from persistence.errors import (
    Backend,
    NotFound,
    Validation,
)
from persistence.ids import Hash, UniverseId, WorldId
from persistence.inbox_records import decode_inbox_item
from persistence.journal_records import IngressJournalRecord, decode_journal_record
from persistence.kernel import entry_kind
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


def plain_json(value: Any) -> Any:
    """A record map made JSON-safe: CBOR payloads decoded, other bytes and hashes as hex."""
    if isinstance(value, dict):
        return {
            k: plain_json(cbor.decode(v) if k.endswith("_cbor") else v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Hash):
        return str(value)
    return value


def _preview(data: bytes, width: int = 48) -> str:
    text = data[:width].hex()
    return text + ("…" if len(data) > width else "")


def decoded_entry(entry: bytes) -> dict[str, Any] | None:
    """A journal entry the plane wrote, decoded to JSON-safe values (a drained item with
    its payload decoded too); ``None`` for an entry in a caller's own format."""
    record = decode_journal_record(entry)
    if record is None:
        return None
    out: dict[str, Any] = plain_json(record.to_map())
    if isinstance(record, IngressJournalRecord):
        out["item"] = plain_json(decode_inbox_item(record.item).to_map())
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


# --------------------------------------------------------------------------- registration

HASH_HELP: Final = (
    "the body's sha256 (64 hex digits), or a unique prefix of one in the universe's CAS"
)


def register(sub: Any, common: argparse.ArgumentParser, store: argparse.ArgumentParser) -> None:
    """Add ``world``, ``universe``, ``cas`` and ``journal``."""
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
