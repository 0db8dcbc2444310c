"""The scheme registries of the two openers (``backends.Schemes``)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import SplitResult

import pytest

from backends import Schemes, split_url
from backends.kv import SCHEMES as ENGINE_SCHEMES
from backends.kv import engine_opener
from backends.objects import SCHEMES as STORE_SCHEMES
from backends.objects import object_store_opener
from persistence.errors import Validation


def test_an_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(Validation, match=r"kv url: .*known: memory://, sqlite://, fdb://\)"):
        engine_opener("postgres://db")
    with pytest.raises(Validation, match=r"objects url: .*known: memory://, file://, s3://\)"):
        object_store_opener("gs://bucket")


def test_a_registered_scheme_is_what_the_registry_dispatches_to() -> None:
    schemes: Schemes[Callable[[SplitResult, str], str]] = Schemes("thing url", "thing")

    @schemes.add("demo")
    def demo(parts: SplitResult, url: str) -> str:
        return f"{parts.netloc} from {url}"

    url = "demo://here"
    assert schemes.maker(split_url(url, "thing url"), url)(split_url(url, "thing url"), url) == (
        "here from demo://here"
    )
    with pytest.raises(ValueError, match="'demo' registered twice"):
        schemes.add("demo")(demo)
    with pytest.raises(Validation, match=r"thing url: unknown thing scheme 'x' .*demo://"):
        schemes.maker(split_url("x://", "thing url"), "x://")


def test_the_openers_registries_hold_each_documented_scheme_once() -> None:
    assert ENGINE_SCHEMES.names == ("memory", "sqlite", "fdb")
    assert STORE_SCHEMES.names == ("memory", "file", "s3")
