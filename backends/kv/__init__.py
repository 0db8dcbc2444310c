"""Transactional ordered key-value engines, opened by URL.

=========================================  ===============================================
URL                                        engine
=========================================  ===============================================
``memory://``                              :class:`~backends.kv.memory.MemoryEngine` (new,
                                           empty, in this process)
``sqlite:///abs/path/aos.db``              :class:`~backends.kv.sqlite.SqliteEngine`
``sqlite://relative/path.db``              (query: ``synchronous=OFF|NORMAL|FULL|EXTRA``,
                                           ``busy_timeout=<seconds>``, digits as ``60``
                                           or ``0.5``)
``fdb://`` or ``fdb:///etc/fdb/fdb.cluster``  :class:`~backends.kv.fdb.FdbEngine` (default
                                           cluster file when no path; query:
                                           ``api_version``, ``timeout_ms``,
                                           ``retry_limit``, ``size_limit``,
                                           ``client_library``: see
                                           :class:`~backends.kv.fdb.FdbOptions`)
``faults+<url>``, e.g. ``faults+sqlite://…``  the engine of ``<url>`` inside a
                                           :class:`~backends.kv.faults.FaultyEngine` that
                                           injects nothing by itself: it lets the
                                           conformance suite's fault case run on it
=========================================  ===============================================

Backends are imported lazily, so ``fdb://`` without the bindings fails with a message
naming the pip extra rather than at import time.

``open_engine(url, create=False)`` is how reading tools open a store: it never creates one.
A missing SQLite file is ``NotFound`` and an empty or foreign one ``StoreFormatError`` (see
:class:`~backends.kv.sqlite.SqliteEngine`); ``memory://`` is ``NotFound`` (it always names a
new, empty store); ``fdb://`` connects to a cluster, which creates nothing.

A URL is checked whole before anything is opened (:func:`engine_opener`): bytes, control
characters, a fragment, a NUL in the path, an unknown, repeated or malformed option are
``Validation`` naming ``kv url`` and the option.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final
from urllib.parse import SplitResult

from backends import Schemes, in_memory, split_url, url_options, url_path
from persistence.errors import Validation
from persistence.kv import Engine
from persistence.sizes import check_bool

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
"""``busy_timeout``: a decimal number of seconds."""
FAULTS: Final = "faults+"
"""The prefix that wraps any engine URL's engine in a ``FaultyEngine``."""

EngineMaker = Callable[[SplitResult, str, bool], Callable[[], Engine]]
"""A scheme's maker: the URL's parts, the URL, ``create``; the call that opens it."""
SCHEMES: Final[Schemes[EngineMaker]] = Schemes("kv url", "engine")
"""The engine schemes (each ``faults+`` too)."""


def open_engine(url: str, *, create: bool = True) -> Engine:
    """Open the engine named by ``url`` (see the module docstring for the forms). Without
    ``create`` only an existing store opens; nothing is created."""
    return engine_opener(url, create=create)()


def engine_opener(url: str, *, create: bool = True) -> Callable[[], Engine]:
    """Check ``url`` and return the call that opens its engine. Every mistake in the URL is
    ``Validation`` naming ``kv url`` and the option, raised here: before anything is opened
    or created (so that a caller opening several stores can check them all first)."""
    parts = split_url(url, "kv url")
    check_bool(create, "create")
    if parts.scheme.startswith(FAULTS):
        from backends.kv.faults import FaultInjector, FaultyEngine

        inner = engine_opener(url[len(FAULTS) :], create=create)
        return lambda: FaultyEngine(inner(), FaultInjector())
    return SCHEMES.maker(parts, url)(parts, url, create)


@SCHEMES.add("memory")
def _memory_opener(parts: SplitResult, url: str, create: bool) -> Callable[[], Engine]:
    from backends.kv.memory import MemoryEngine

    return in_memory(parts, url, "kv url", create, MemoryEngine)


@SCHEMES.add("sqlite")
def _sqlite_opener(parts: SplitResult, url: str, create: bool) -> Callable[[], Engine]:
    from backends.kv.sqlite import MAX_BUSY_TIMEOUT, SYNCHRONOUS_MODES, SqliteEngine

    options = url_options(parts, "kv url", {"synchronous", "busy_timeout"})
    path = url_path(parts, "kv url")
    if not path:
        raise Validation("kv url", f"sqlite URL needs a file path: {url!r}")
    synchronous = options.get("synchronous", "FULL")
    if synchronous.upper() not in SYNCHRONOUS_MODES:
        raise Validation(
            "kv url", f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}"
        )
    busy_timeout = options.get("busy_timeout", "60")
    if not _SECONDS.fullmatch(busy_timeout) or float(busy_timeout) > MAX_BUSY_TIMEOUT:
        raise Validation(
            "kv url",
            f"busy_timeout must be seconds from 0 to {MAX_BUSY_TIMEOUT:g} (e.g. 60 or 0.5), "
            f"not {busy_timeout!r}",
        )

    def open_sqlite() -> Engine:
        try:
            return SqliteEngine(
                path, synchronous=synchronous, busy_timeout=float(busy_timeout), create=create
            )
        except Validation as exc:
            raise Validation("kv url", f"{exc.field} must be {exc.problem}") from None

    return open_sqlite


@SCHEMES.add("fdb")
def _fdb_opener(parts: SplitResult, url: str, create: bool) -> Callable[[], Engine]:
    """``fdb://``: connecting creates nothing, so ``create`` changes nothing."""
    from backends.kv.fdb import FdbEngine, FdbOptions

    integers = {"api_version", "timeout_ms", "retry_limit", "size_limit"}
    options = url_options(parts, "kv url", integers | {"client_library"})
    path = url_path(parts, "kv url")
    defaults = FdbOptions()

    def number(name: str) -> int:
        text = options.get(name)
        if text is None:
            return int(getattr(defaults, name))
        if not (text.isascii() and text.isdigit()):
            raise Validation("kv url", f"fdb {name} must be an integer, not {text!r}")
        return int(text)

    settings = FdbOptions(
        api_version=number("api_version"),
        timeout_ms=number("timeout_ms"),
        retry_limit=number("retry_limit"),
        size_limit=number("size_limit"),
        client_library=options.get("client_library"),
    )
    return lambda: FdbEngine(path or None, settings)
