"""What :mod:`aosp.fsck` found: its findings and the report of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: how bad, where (area, universe, world, subject) and what."""

    severity: Severity
    area: str
    universe: str
    world: str | None
    subject: str
    message: str

    def to_json(self) -> dict[str, Any]:
        """A plain dict for reports."""
        return {
            "severity": self.severity,
            "area": self.area,
            "universe": self.universe,
            "world": self.world,
            "subject": self.subject,
            "message": self.message,
        }


@dataclass
class FsckReport:
    """Everything fsck looked at and found."""

    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        """Findings of severity ``error``."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        """Findings of severity ``warning``."""
        return [f for f in self.findings if f.severity == "warning"]

    def count(self, what: str, amount: int = 1) -> None:
        """Add ``amount`` to the tally of checked ``what``."""
        self.checked[what] = self.checked.get(what, 0) + amount

    @property
    def ok(self) -> bool:
        """No error finding, and something was checked: a run over a store without any
        universe checked nothing, and a check that checked nothing does not pass."""
        return not self.errors and self.checked.get("universes", 0) > 0

    @property
    def reason(self) -> str | None:
        """Why the check did not pass (``None`` when it did)."""
        if self.errors:
            return f"{len(self.errors)} error findings: damage or loss (see findings)"
        if not self.ok:
            return "the store has no universes: nothing was checked"
        return None

    def to_json(self) -> dict[str, Any]:
        """Counts and findings; ``reason`` says why when not ``ok``."""
        return {
            "ok": self.ok,
            "reason": self.reason,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "checked": dict(sorted(self.checked.items())),
            "findings": [f.to_json() for f in self.findings],
        }
