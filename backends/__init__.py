"""Layer 1: engines (:mod:`backends.kv`) and object stores (:mod:`backends.objects`), opened
by URL.

Both openers dispatch on the URL's scheme through a :class:`Schemes` registry and share the
URL checks: a malformed URL, path or option is ``Validation`` naming the URL (``kv url`` or
``objects url``) and the option, before anything is opened or created.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Generic, TypeVar
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from persistence.errors import NotFound, Validation

Maker = TypeVar("Maker", bound=Callable[..., object])
Opened = TypeVar("Opened")


class Schemes(Generic[Maker]):
    """The URL schemes of one kind of store and each one's *maker*: the function that
    checks a URL of its scheme and returns the call that opens the store (importing its
    backend only then, so that a missing extra is named when its scheme is used)."""

    def __init__(self, field: str, kind: str) -> None:
        self.field = field
        """What a mistake names: ``kv url`` or ``objects url``."""
        self.kind = kind
        """What the stores are, for the unknown-scheme message."""
        self._makers: dict[str, Maker] = {}

    def add(self, scheme: str) -> Callable[[Maker], Maker]:
        """Register the decorated function as the maker of ``scheme``."""

        def register(maker: Maker) -> Maker:
            if scheme in self._makers:
                raise ValueError(f"scheme {scheme!r} registered twice")
            self._makers[scheme] = maker
            return maker

        return register

    @property
    def names(self) -> tuple[str, ...]:
        """The registered schemes, in the order they were registered."""
        return tuple(self._makers)

    def maker(self, parts: SplitResult, url: str) -> Maker:
        """The maker of ``url``'s scheme; ``Validation`` naming the known ones if none."""
        maker = self._makers.get(parts.scheme)
        if maker is None:
            known = ", ".join(f"{scheme}://" for scheme in self.names)
            raise Validation(
                self.field,
                f"unknown {self.kind} scheme {parts.scheme!r} in {url!r} (known: {known})",
            )
        return maker


def in_memory(
    parts: SplitResult, url: str, field: str, create: bool, store: Callable[[], Opened]
) -> Callable[[], Opened]:
    """The opener of a ``memory://`` URL: ``store``, a new and empty store, so only with
    ``create`` (``NotFound`` without: there is no existing one to open); no path or
    options."""
    if parts.netloc or parts.path or parts.query:
        raise Validation(field, f"memory:// takes no path or options: {url!r}")
    if not create:
        raise NotFound(f"{url!r} names a new, empty store: there is no existing one to open")
    return store


def split_url(url: object, field: str) -> SplitResult:
    """``url`` split, if it is text without control characters or a fragment."""
    if not isinstance(url, str):
        raise Validation(field, f"expected a URL (text), got {type(url).__name__}")
    if not url.isprintable():
        raise Validation(field, f"a control or unprintable character in {url!r}")
    if url != url.strip():  # a trailing blank became part of a path: 'aos.db ', 'objects  '
        raise Validation(field, f"blanks around the URL {url!r}")
    if "#" in url:
        raise Validation(field, f"a fragment ('#...') means nothing here (write # as %23): {url!r}")
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise Validation(field, f"not a URL ({exc}): {url!r}") from None


def url_path(parts: SplitResult, field: str) -> str:
    """The file-system path of a ``scheme://path`` URL, percent-decoded (an escaped byte
    that is not UTF-8 stays that byte, as :func:`os.fsencode` reads it); no NUL."""
    path = unquote(parts.netloc + parts.path, errors="surrogateescape")
    if "\x00" in path:
        raise Validation(field, f"a NUL byte in the path {path!r}")
    return path


def url_options(parts: SplitResult, field: str, allowed: Collection[str]) -> dict[str, str]:
    """The ``name=value`` options of ``parts``: each one of ``allowed``, given once."""
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True, errors="strict")
    except ValueError as exc:  # UnicodeDecodeError included
        raise Validation(field, f"options are name=value pairs joined by '&' ({exc})") from None
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            accepted = ", ".join(sorted(allowed)) or "none"
            raise Validation(field, f"unknown option {name!r} (accepted: {accepted})")
        if name in options:
            raise Validation(field, f"option {name} given twice")
        if not value.isprintable():
            raise Validation(field, f"option {name}: a control character in {value!r}")
        options[name] = value
    return options


def url_flag(options: dict[str, str], name: str, default: bool, field: str) -> bool:
    """The option ``name`` as ``0`` (false) or ``1`` (true); ``default`` when absent."""
    text = options.get(name)
    if text is None:
        return default
    if text not in ("0", "1"):
        raise Validation(field, f"{name} must be 0 or 1, not {text!r}")
    return text == "1"


def check_path(value: object, field: str) -> str:
    """``value`` (text or a path object) as text, if the operating system can take it as a
    path: no NUL byte, no lone surrogate that is not an escaped byte."""
    if not isinstance(value, str | os.PathLike):
        raise Validation(field, f"expected a path, got {type(value).__name__}")
    try:
        text = os.fspath(value)
        encoded = os.fsencode(text)
    except (TypeError, UnicodeEncodeError) as exc:
        raise Validation(field, f"not a file-system path ({exc})") from None
    if not isinstance(text, str):
        raise Validation(field, f"expected a text path, got {type(text).__name__}")
    if b"\x00" in encoded:
        raise Validation(field, f"a NUL byte in the path {text!r}")
    return text


def resolve_path(text: str, field: str) -> Path:
    """The absolute path ``text`` names, symlinks followed; a symlink loop on the way is
    ``Validation`` naming ``field`` (Python raises ``RuntimeError`` or ``ELOOP`` for it)."""
    try:
        return Path(text).resolve()
    except RuntimeError:
        pass
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    raise Validation(field, f"{text!r} leads into a symlink loop")
