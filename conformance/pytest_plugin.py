"""Run the conformance suite inside your own pytest run.

Subclass :class:`ConformanceTests` in a test module and provide the ``conformance_plane``
fixture (a :class:`~persistence.plane.Plane` over your engine and object store)::

    from conformance.pytest_plugin import ConformanceTests

    class TestMyBackend(ConformanceTests):
        @pytest.fixture
        def conformance_plane(self):
            return segments.open_plane(MyEngine(...), MyObjectStore(...))

Every case becomes one test, named after the case; skips keep their reasons. Set
``conformance_profile`` (a class attribute) to ``"full"`` for the nightly sizes.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from conformance.context import PROFILES
from conformance.runner import run_case
from conformance.suite import CASES
from persistence.plane import Plane


class ConformanceTests:
    """One test per conformance case, against ``conformance_plane``."""

    conformance_profile: ClassVar[str] = "quick"

    @pytest.fixture
    def conformance_plane(self) -> Plane:
        """Override: the plane under test."""
        raise NotImplementedError("provide a conformance_plane fixture")

    @pytest.mark.parametrize("case", list(CASES))
    def test_conformance(self, case: str, conformance_plane: Plane) -> None:
        """The case ``case``."""
        from conformance.context import Context

        result = run_case(case, Context(conformance_plane, PROFILES[self.conformance_profile]))
        if result.outcome == "skipped":
            pytest.skip(result.message)
        assert result.outcome == "passed", result.message
