"""Which store a command works on: ``--kv URL --objects URL``, or the embedded default
(SQLite file ``aos.db`` and object directory ``objects/`` under ``--data-dir``).

Only the commands that exist to make things (``world create``, ``cas put``) open a store
with ``create``; every other command opens it with ``create=False``, so whatever URL form a
mistake takes, it is an error naming what is missing and never a new, empty store."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from aosp.cli.console import UsageError
from persistence.errors import Backend, NotFound, Validation
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.kernel import Kernel, load_kernel
from persistence.kv import Engine
from persistence.objects import ObjectStore
from persistence.plane import Plane, PlaneConfig
from segments import open_plane

T = TypeVar("T")

DEFAULT_DATA_DIR = Path(os.environ.get("AOSP_DATA_DIR", "aosp-data"))
"""``--data-dir`` when none is given: ``$AOSP_DATA_DIR``, else ``./aosp-data``."""
DB_FILE = "aos.db"
OBJECTS_DIR = "objects"


def store_options() -> argparse.ArgumentParser:
    """Options naming the store (a parent parser for every command that opens one)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("store")
    group.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"embedded store directory (default: $AOSP_DATA_DIR or {DEFAULT_DATA_DIR})",
    )
    group.add_argument("--kv", metavar="URL", help="engine URL (memory://, sqlite:///…, fdb://…)")
    group.add_argument(
        "--objects", metavar="URL", help="object store URL (file:///…, s3://bucket/prefix?…)"
    )
    return parser


def store_urls(args: argparse.Namespace) -> tuple[str, str]:
    """The engine and object-store URLs the arguments name."""
    if (args.kv is None) != (args.objects is None):
        raise UsageError("--kv and --objects go together (or neither, for --data-dir)")
    if args.kv is not None:
        return str(args.kv), str(args.objects)
    root = Path(args.data_dir).resolve()
    return f"sqlite://{root / DB_FILE}", f"file://{root / OBJECTS_DIR}"


def checked_store_urls(args: argparse.Namespace, *, create: bool = False) -> tuple[str, str]:
    """:func:`store_urls`, after checking that an embedded store exists. It is created only
    when ``create`` (commands that write); reading commands refuse a missing one, so a
    mistyped ``--data-dir`` is an error rather than a new empty store."""
    urls = store_urls(args)
    if args.kv is None:
        data_dir = Path(args.data_dir)
        if data_dir.exists() and not data_dir.is_dir():
            raise Validation("--data-dir", f"{data_dir} is a file, not a directory")
        if not (data_dir / DB_FILE).exists():
            if not create:
                raise NotFound(
                    f"no store in {data_dir} (no {DB_FILE}); run `aosp demo` to create one, "
                    "or name one with --data-dir or --kv/--objects"
                )
            make_directory(data_dir, "--data-dir")
    return urls


def make_directory(path: Path, option: str) -> None:
    """Create the directory ``option`` names (and its parents), as a typed error naming the
    option if the system refuses."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise Validation(option, f"{path} is a file, not a directory") from None
    except OSError as exc:
        raise Backend(f"{option} {path}: cannot create it: {exc.strerror}") from None


@contextlib.contextmanager
def _naming(option: str) -> Iterator[None]:
    """Errors of opening what ``option`` names, reworded with the option's name."""
    try:
        yield
    except Validation as exc:
        raise Validation(option, exc.problem) from None
    except NotFound as exc:
        raise NotFound(f"{option}: {exc}") from None


def open_objects(url: str, *, create: bool) -> ObjectStore:
    """The object store ``url`` names; without ``create`` it must already exist."""
    from backends.objects import open_object_store

    return open_object_store(url, create=create)


def open_store(
    args: argparse.Namespace, *, create: bool = False, config: PlaneConfig | None = None
) -> Plane:
    """Open the store's plane (with ``config``, default ``PlaneConfig()``). Only with
    ``create`` (commands that make things) may the store, its database or its directories
    be created; otherwise whatever is missing is ``NotFound`` naming the option, and
    nothing is created."""
    from backends.kv import open_engine

    kv_url, objects_url = checked_store_urls(args, create=create)
    embedded = args.kv is None
    with _naming("--data-dir" if embedded else "--kv"):
        engine: Engine = open_engine(kv_url, create=create)
    try:
        with _naming("--data-dir" if embedded else "--objects"):
            objects = open_objects(objects_url, create=create)
    except BaseException:
        engine.close()
        raise
    return open_plane(engine, objects, config)


def check_kernel(path: str) -> Kernel:
    """The ``--kernel module:Class`` kernel, or ``Validation`` naming the option."""
    try:
        return load_kernel(path)
    except Validation as exc:
        raise Validation("--kernel", exc.problem) from None


def _id_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    def parse_argument(text: str) -> T:
        try:
            return parse(text)
        except Validation as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse_argument.__name__ = parse.__name__
    return parse_argument


universe_id = _id_type(UniverseId.parse)
"""argparse ``type=`` for a universe id (a bad one is a usage error naming it)."""
world_id = _id_type(WorldId.parse)
"""argparse ``type=`` for a world id."""
hash_id = _id_type(Hash.parse)
"""argparse ``type=`` for a sha256 hash (64 hex digits)."""


def world_options(*, required: bool) -> argparse.ArgumentParser:
    """``--universe``/``--world``: one world when ``required``, else a filter (omit both for
    every world in the store, ``--universe`` alone for every world of one universe)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("world")
    group.add_argument("--universe", "-u", type=universe_id, required=required, help="universe id")
    group.add_argument("--world", "-w", type=world_id, required=required, help="world id")
    return parser


def selected_worlds(plane: Plane, args: argparse.Namespace) -> list[tuple[UniverseId, WorldId]]:
    """The worlds ``--universe``/``--world`` select, in store order."""
    if args.world is not None:
        if args.universe is None:
            raise UsageError("--world needs --universe")
        plane.world_meta(args.universe, args.world)  # NotFound, naming it, if absent
        return [(args.universe, args.world)]
    universes = [args.universe] if args.universe is not None else plane.universes()
    return [(u, w) for u in universes for w in plane.worlds(u)]


inbox_seq = _id_type(InboxSeq.parse)
"""argparse ``type=`` for an inbox sequence (24 hex digits)."""
