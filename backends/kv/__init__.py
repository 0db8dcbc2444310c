"""Transactional ordered key-value engines, opened by URL.

=========================================  ===============================================
URL                                        engine
=========================================  ===============================================
``memory://``                              :class:`~backends.kv.memory.MemoryEngine` (new,
                                           empty, in this process)
``sqlite:///abs/path/aos.db``              :class:`~backends.kv.sqlite.SqliteEngine`
``sqlite://relative/path.db``              (query: ``synchronous=FULL|NORMAL|OFF``,
                                           ``busy_timeout=<seconds>``)
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
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from persistence.errors import NotFound, Validation
from persistence.kv import Engine


def _options(query: str) -> dict[str, str]:
    parsed = parse_qs(query, keep_blank_values=True, strict_parsing=False)
    return {name: values[-1] for name, values in parsed.items()}


def open_engine(url: str, *, create: bool = True) -> Engine:
    """Open the engine named by ``url`` (see the module docstring for the forms). Without
    ``create`` only an existing store opens; nothing is created."""
    if url.startswith("faults+"):
        from backends.kv.faults import FaultInjector, FaultyEngine

        inner = open_engine(url.removeprefix("faults+"), create=create)
        return FaultyEngine(inner, FaultInjector())
    parts = urlsplit(url)
    options = _options(parts.query)
    path = unquote(parts.netloc + parts.path)
    if parts.scheme == "memory":
        from backends.kv.memory import MemoryEngine

        if not create:
            raise NotFound(f"{url!r} names a new, empty store: there is no existing one to open")
        return MemoryEngine()
    if parts.scheme == "sqlite":
        from backends.kv.sqlite import SqliteEngine

        if not path:
            raise Validation("kv url", f"sqlite URL needs a file path: {url!r}")
        unknown = set(options) - {"synchronous", "busy_timeout"}
        if unknown:
            raise Validation("kv url", f"unknown sqlite option(s) {sorted(unknown)}")
        busy_timeout = options.get("busy_timeout", "60")
        try:
            seconds = float(busy_timeout)
        except ValueError:
            raise Validation("kv url", f"busy_timeout is not seconds: {busy_timeout!r}") from None
        try:
            return SqliteEngine(
                path,
                synchronous=options.get("synchronous", "FULL"),
                busy_timeout=seconds,
                create=create,
            )
        except Validation as exc:
            raise Validation("kv url", f"{exc.field} must be {exc.problem}") from None
    if parts.scheme == "fdb":
        from backends.kv.fdb import FdbEngine, FdbOptions

        integers = {"api_version", "timeout_ms", "retry_limit", "size_limit"}
        unknown = set(options) - integers - {"client_library"}
        if unknown:
            raise Validation("kv url", f"unknown fdb option(s) {sorted(unknown)}")
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
        return FdbEngine(path or None, settings)
    raise Validation("kv url", f"unknown engine scheme {parts.scheme!r} in {url!r}")
