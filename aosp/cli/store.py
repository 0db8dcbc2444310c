"""Which store a command works on: ``--kv URL --objects URL``, or the embedded default
(SQLite file ``aos.db`` and object directory ``objects/`` under ``--data-dir``).

Only the commands that exist to make things (``world create``, ``cas put``) open a store
with ``create``; every other command opens it with ``create=False``, so whatever URL form a
mistake takes, it is an error naming what is missing and never a new, empty store."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from aosp.cli import ids
from aosp.cli.console import UsageError
from aosp.fsck_reads import universe_exists
from backends import resolve_path
from persistence.errors import Backend, NotFound, PersistError, Validation, WorldNotFound
from persistence.futures import drive
from persistence.ids import Hash, InboxSeq, UniverseId, WorldId
from persistence.kernel import Kernel, load_kernel
from persistence.kv import Engine
from persistence.plane import Plane, PlaneConfig
from persistence.protocols import worlds
from segments import open_plane

T = TypeVar("T")

DEFAULT_DATA_DIR = os.environ.get("AOSP_DATA_DIR", "aosp-data")
"""``--data-dir`` when none is given: ``$AOSP_DATA_DIR``, else ``./aosp-data`` (parsed as
the option is: :func:`data_dir`)."""


def data_dir(text: str) -> Path:
    """``--data-dir`` (or ``$AOSP_DATA_DIR``): a directory's path. An empty one is refused:
    it would put the store in the working directory, unasked."""
    if not text:
        raise argparse.ArgumentTypeError(
            "an empty path names no directory (from --data-dir, or $AOSP_DATA_DIR set empty)"
        )
    return Path(text)


DB_FILE = "aos.db"
OBJECTS_DIR = "objects"


class _GivenDataDir(argparse.Action):
    """``--data-dir``, noting that it was given (``data_dir_given``): the default, or
    ``$AOSP_DATA_DIR``, does not conflict with ``--kv``/``--objects``; the option does."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.data_dir_given = True


def store_options() -> argparse.ArgumentParser:
    """Options naming the store (a parent parser for every command that opens one)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("store")
    group.add_argument(
        "--data-dir",
        type=data_dir,
        default=DEFAULT_DATA_DIR,
        action=_GivenDataDir,
        help=f"embedded store directory (default: $AOSP_DATA_DIR or {DEFAULT_DATA_DIR}); "
        "not with --kv/--objects",
    )
    group.add_argument("--kv", metavar="URL", help="engine URL (memory://, sqlite:///…, fdb://…)")
    group.add_argument(
        "--objects", metavar="URL", help="object store URL (file:///…, s3://bucket/prefix?…)"
    )
    parser.set_defaults(data_dir_given=False)
    return parser


def check_store_options(args: argparse.Namespace) -> None:
    """``UsageError`` unless the options name one store: ``--kv`` and ``--objects``
    together, or neither; ``--data-dir`` not with them (it would be ignored). Run before
    the command does anything (commands without the store options pass)."""
    if not hasattr(args, "data_dir_given"):
        return
    if (args.kv is None) != (args.objects is None):
        raise UsageError("--kv and --objects go together (or neither, for --data-dir)")
    if args.kv is not None and args.data_dir_given:
        raise UsageError(
            "--data-dir names the embedded store, --kv/--objects another: give one or the "
            "other, not both"
        )


def store_urls(args: argparse.Namespace) -> tuple[str, str]:
    """The engine and object-store URLs the arguments name (checked by
    :func:`check_store_options`)."""
    check_store_options(args)
    if args.kv is not None:
        return str(args.kv), str(args.objects)
    root = resolve_path(str(args.data_dir), "--data-dir")
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


def command_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The options of the command ``args`` ran (``parser`` is ``aosp``'s): each ``dest``
    with the name ``--help`` shows for it (its first long form)."""
    command = parser
    while True:
        sub = next((a for a in command._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or getattr(args, sub.dest, None) is None:
            break
        command = sub.choices[getattr(args, sub.dest)]
    names = {}
    for action in command._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs:
            names[action.dest] = longs[0]
    return names


def named_for_cli(
    error: PersistError, args: argparse.Namespace, options: dict[str, str]
) -> PersistError:
    """``error`` in the command's terms (the one-line message names options, not the
    library's parameters): a ``Validation`` of a parameter the command has an option of the
    same name for names the option, and so does one of a field the command's
    ``option_fields`` maps (by its name, qualified or not: ``from_inclusive`` to ``--from``,
    ``ExportConfig.margin`` by ``margin`` to ``--margin``); a world that does not exist
    names ``--universe`` and ``--world``; an engine's or object store's ``Backend`` error
    names the option of that store (``--kv``, ``--objects``, or ``--data-dir`` for the
    embedded store)."""
    if isinstance(error, WorldNotFound):
        return named_world(error, args)
    if isinstance(error, Validation):
        # A plain field is a parameter the command passed, so the option of the same name
        # gave it; a record's or config's (``Class.field``) is named only as the command
        # says (``--steady-seconds`` gives ``SteadyConfig.seconds``, not ``--seconds``).
        renamed: dict[str, str] = getattr(args, "option_fields", None) or {}
        name = error.field.rsplit(".", 1)[-1]
        option = renamed.get(error.field) or renamed.get(name)
        if option is None and "." not in error.field:
            option = options.get(error.field)
        return error if option is None else Validation(option, error.problem)
    if isinstance(error, Backend):
        option = _store_option(error, args, options)
        if option is not None and not str(error).startswith(option):
            return Backend(f"{option}: {error}")
    return error


def _store_option(
    error: BaseException, args: argparse.Namespace, options: dict[str, str]
) -> str | None:
    """The option naming the store whose backend raised ``error``: the innermost frame of
    its traceback in an engine (``backends.kv``) or an object store (``backends.objects``)
    says which, whichever plane operation called it."""
    store = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith("backends.kv"):
            store = "kv"
        elif module.startswith("backends.objects"):
            store = "objects"
    if store is None:
        return None
    if getattr(args, "kv", None) is None and "data_dir" in options:
        return options["data_dir"]
    return options.get(store)


def open_store(
    args: argparse.Namespace, *, create: bool = False, config: PlaneConfig | None = None
) -> Plane:
    """Open the store's plane (with ``config``, default ``PlaneConfig()``), and resolve the
    ids ``--universe``/``--world`` name in it (prefixes, handles: :mod:`aosp.cli.ids`). Only
    with ``create`` (commands that make things) may the store, its database or its
    directories be created, and a store created says so on stderr; otherwise whatever is
    missing is ``NotFound`` naming the option, and nothing is created."""
    from backends.kv import engine_opener
    from backends.objects import object_store_opener

    kv_url, objects_url = checked_store_urls(args, create=create)
    embedded = args.kv is None
    kv_option = "--data-dir" if embedded else "--kv"
    objects_option = "--data-dir" if embedded else "--objects"
    # Both URLs are checked, then the existing stores opened, before anything is created:
    # a command refused for its --objects creates no --kv database, and the other way round.
    with _naming(kv_option):
        open_existing, open_new = engine_opener(kv_url, create=False), None
        if create:
            open_new = engine_opener(kv_url, create=True)
    with _naming(objects_option):
        open_objects_store = object_store_opener(objects_url, create=create)
    engine: Engine | None = None
    with _naming(kv_option):
        try:
            # An existing file must be a store, for commands that create too: an empty
            # (0-byte) database is damage to report, not a store to start afresh.
            engine = open_existing()
        except NotFound:
            if open_new is None:
                raise
    new_objects = create and _missing_directory(objects_url)
    try:
        new_store = engine is None or drive(worlds.read_layout(engine)) is None
        if new_store and (option := ids.unresolved(args)) is not None:
            # a prefix or handle names nothing in a store that does not exist yet
            raise NotFound(f"{option}: names nothing (there is no store yet to look in)")
        with _naming(objects_option):
            objects = open_objects_store()
        if engine is None:
            assert open_new is not None
            with _naming(kv_option):
                engine = open_new()
    except BaseException:
        if engine is not None:
            engine.close()
        raise
    plane = open_plane(engine, objects, config, create=create)
    if create and new_store:  # never by surprise: the one line that says where it now is
        where = f"in {args.data_dir}" if embedded else f"at --kv {kv_url} --objects {objects_url}"
        print(f"aosp: created a new store {where}", file=sys.stderr)
    elif new_objects:
        print(f"aosp: created a new object store at --objects {objects_url}", file=sys.stderr)
    try:
        ids.resolve(plane, args)
    except BaseException:
        plane.engine.close()
        raise
    return plane


def _missing_directory(objects_url: str) -> bool:
    """Whether ``objects_url`` is a local object store whose directory does not exist (an
    opening with ``create`` makes it)."""
    parsed = urllib.parse.urlsplit(objects_url)
    return parsed.scheme == "file" and not Path(urllib.parse.unquote(parsed.path)).exists()


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


world_id = _id_type(WorldId.parse)
"""argparse ``type=`` for a world id (a bad one is a usage error naming it): a new world's,
which no prefix can name (``-u``/``-w`` of existing ones: :mod:`aosp.cli.ids`)."""
hash_id = _id_type(Hash.parse)
"""argparse ``type=`` for a sha256 hash (64 hex digits)."""


def world_options(*, required: bool) -> argparse.ArgumentParser:
    """``--universe``/``--world``: one world when ``required``, else a filter (omit both for
    every world in the store, ``--universe`` alone for every world of one universe)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("world")
    group.add_argument(
        "--universe",
        "-u",
        type=ids.universe_selector,
        required=required,
        help="universe: its id or a unique prefix of it (4 hex digits or more)",
    )
    group.add_argument(
        "--world",
        "-w",
        type=ids.world_selector,
        required=required,
        help="world (of --universe): its id, a unique prefix of it, or its handle",
    )
    return parser


def require_universe(plane: Plane, universe: UniverseId | None) -> None:
    """``NotFound`` naming ``--universe`` if the store holds nothing of it (no world, no CAS
    body: a mistyped id), so that a command never passes or runs on an empty selection."""
    if universe is not None and not universe_exists(plane, universe):
        raise NotFound(
            f"--universe {universe}: the store has nothing of this universe (no world, no CAS body)"
        )


def selected_worlds(
    plane: Plane, args: argparse.Namespace, *, worldless: bool = False
) -> list[tuple[UniverseId, WorldId]]:
    """The worlds ``--universe``/``--world`` select, in store order. A ``--universe`` without
    worlds (a mistyped id) is ``NotFound`` naming it, never an empty selection that a check
    would pass; with ``worldless`` (commands that also act on a universe's CAS) only one
    with nothing in the store is."""
    if args.world is not None:
        if args.universe is None:
            raise UsageError("--world needs --universe")
        plane.world_meta(args.universe, args.world)  # WorldNotFound, named by main, if absent
        return [(args.universe, args.world)]
    if args.universe is None:
        return [(u, w) for u in plane.universes() for w in plane.worlds(u)]
    selected = [(args.universe, w) for w in plane.worlds(args.universe)]
    if not selected and not (worldless and universe_exists(plane, args.universe)):
        raise NotFound(f"--universe {args.universe}: the store has no world in this universe")
    return selected


def named_world(error: WorldNotFound, args: argparse.Namespace) -> PersistError:
    """``error`` reworded with the options' names when it is about the world the command
    was given (``--universe``/``--world``)."""
    if error.universe == getattr(args, "universe", None) and error.world == getattr(
        args, "world", None
    ):
        return NotFound(f"--world {args.world}: no such world in --universe {args.universe}")
    return error


inbox_seq = _id_type(InboxSeq.parse)
"""argparse ``type=`` for an inbox sequence (24 hex digits)."""
