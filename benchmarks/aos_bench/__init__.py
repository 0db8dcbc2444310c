"""Benchmarks run by ``aosp bench``: each figure is measured next to its peer or limit in the
same run and reported as a ratio (see :class:`Figure`).

They are their own distribution (``aos-persistence-bench``, the ``benchmarks/`` folder of a
source checkout), not part of the runtime package; :mod:`aos_bench.command` plugs the
command into ``aosp``."""

from __future__ import annotations

import importlib.util
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from persistence.errors import MissingDependency

INSTALL: Final = {
    "spark": "pip install 'aos-persistence[spark]'",
    "bench": "pip install -c constraints.txt -e ./benchmarks (in a source checkout)",
}
"""The install line of what brings a suite's packages: the ``spark`` extra, or this
distribution's own dependencies (``bench``)."""


def require(what: str, extra: str, *modules: str) -> None:
    """``MissingDependency`` naming the first of ``modules`` that is not installed, what
    it is for, and the install line that brings it (:data:`INSTALL` of ``extra``)."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise MissingDependency(f"{name} is not installed (for {what}): {INSTALL[extra]}")


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure and the baseline it is compared with.

    ``ratio`` is the median of ``round_ratios`` when the figure was measured in rounds
    (each round's ratio of the two sides), else ``value / baseline_value``; ``better`` says
    whether a higher or a lower ratio is better; ``target`` is the ratio the issue asks for
    (``None`` if it asks only for the figure).
    """

    name: str
    value: float
    unit: str
    baseline: str
    baseline_value: float
    target: float | None
    better: Literal["higher", "lower"]
    round_ratios: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        """The median per-round ratio, else ``value / baseline_value`` (0 for a 0 baseline)."""
        if self.round_ratios:
            return statistics.median(self.round_ratios)
        return self.value / self.baseline_value if self.baseline_value else 0.0

    @property
    def spread(self) -> tuple[float, float] | None:
        """The lowest and highest per-round ratio, if measured in rounds."""
        if not self.round_ratios:
            return None
        return min(self.round_ratios), max(self.round_ratios)

    @property
    def met(self) -> bool | None:
        """Whether the target is met (``None`` without a target)."""
        if self.target is None:
            return None
        return self.ratio >= self.target if self.better == "higher" else self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        """The machine-readable form printed by ``aosp bench --json``."""
        out = asdict(self)
        out["ratio"] = round(self.ratio, 4)
        out["round_ratios"] = [round(r, 4) for r in self.round_ratios]
        spread = self.spread
        out["ratio_min"], out["ratio_max"] = (
            (None, None) if spread is None else (round(spread[0], 4), round(spread[1], 4))
        )
        return out
