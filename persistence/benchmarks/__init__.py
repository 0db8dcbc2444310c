"""Benchmarks run by ``aosp bench``: each figure is measured next to its peer or limit in the
same run and reported as a ratio (see :class:`Figure`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure and the baseline it is compared with.

    ``ratio`` is ``value / baseline_value``; ``better`` says whether a higher or a lower
    ratio is better; ``target`` is the ratio the issue asks for (``None`` if it asks only
    for the figure).
    """

    name: str
    value: float
    unit: str
    baseline: str
    baseline_value: float
    target: float | None
    better: Literal["higher", "lower"]

    @property
    def ratio(self) -> float:
        """``value / baseline_value`` (0 when the baseline is 0)."""
        return self.value / self.baseline_value if self.baseline_value else 0.0

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
        return out
