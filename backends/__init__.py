"""Layer 1: engines (:mod:`backends.kv`) and object stores (:mod:`backends.objects`), opened
by URL.

The URL checks both openers share: a malformed URL, path or option is ``Validation`` naming
the URL (``kv url`` or ``objects url``) and the option, before anything is opened or created.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Collection
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from persistence.errors import Validation


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
