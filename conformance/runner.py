"""Running the conformance cases and reporting: JUnit XML and a JSON summary."""

from __future__ import annotations

import json
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from conformance.context import CaseSkipped, ConformanceFailure, Context, Profile
from conformance.doors import through
from conformance.suite import CASES
from conformance.torture.servers import ServerFaults
from persistence.plane import Plane

Outcome = Literal["passed", "failed", "error", "skipped"]


@dataclass
class CaseResult:
    """The verdict on one case."""

    name: str
    outcome: Outcome
    seconds: float
    message: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunReport:
    """A whole run: which backend, which profile, which door, every case's result."""

    kv_url: str
    objects_url: str
    profile: str
    door: str = "blocking"
    results: list[CaseResult] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        """How many cases ended with ``outcome``."""
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def ok(self) -> bool:
        """Some case passed and none failed or errored (a run where nothing ran is not ok)."""
        return self.count("passed") > 0 and self.count("failed") == 0 and self.count("error") == 0

    @property
    def reason(self) -> str | None:
        """Why the run is not ``ok`` (``None`` when it is): the cases that failed or
        errored, else that none passed (the skip reasons when every case was skipped)."""
        failed = [r.name for r in self.results if r.outcome in ("failed", "error")]
        if failed:
            return f"{len(failed)} cases failed or errored: {', '.join(failed)}"
        if self.ok:
            return None
        if not self.results:
            return "no case ran"
        why = sorted({r.message for r in self.results if r.outcome == "skipped" and r.message})
        return f"no case passed: {len(self.results)} skipped" + (
            f" ({'; '.join(why)})" if why else ""
        )

    def summary(self) -> dict[str, Any]:
        """The JSON summary (``reason``: why it is not ``ok``)."""
        return {
            "kv": self.kv_url,
            "objects": self.objects_url,
            "profile": self.profile,
            "door": self.door,
            "cases": len(self.results),
            "passed": self.count("passed"),
            "failed": self.count("failed") + self.count("error"),
            "skipped": self.count("skipped"),
            "seconds": round(sum(r.seconds for r in self.results), 3),
            "ok": self.ok,
            "reason": self.reason,
            "results": [asdict(r) for r in self.results],
        }

    def junit(self) -> ET.ElementTree:
        """The JUnit XML document (one testsuite, one testcase per case)."""
        suite = ET.Element(
            "testsuite",
            name=f"aos-persistence conformance ({self.profile})",
            tests=str(len(self.results)),
            failures=str(self.count("failed")),
            errors=str(self.count("error")),
            skipped=str(self.count("skipped")),
            time=f"{sum(r.seconds for r in self.results):.3f}",
        )
        props = ET.SubElement(suite, "properties")
        properties = (("kv", self.kv_url), ("objects", self.objects_url), ("door", self.door))
        for name, value in properties:
            ET.SubElement(props, "property", name=name, value=value)
        for result in self.results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname="conformance",
                name=result.name,
                time=f"{result.seconds:.3f}",
            )
            if result.outcome == "failed":
                ET.SubElement(case, "failure", message=result.message.splitlines()[0][:500])
            elif result.outcome == "error":
                ET.SubElement(
                    case, "error", message=result.message.splitlines()[0][:500]
                ).text = result.message
            elif result.outcome == "skipped":
                ET.SubElement(case, "skipped", message=result.message)
        return ET.ElementTree(suite)

    def write(self, directory: Path) -> tuple[Path, Path]:
        """Write ``junit.xml`` and ``summary.json`` into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        junit, summary = directory / "junit.xml", directory / "summary.json"
        self.junit().write(junit, encoding="utf-8", xml_declaration=True)
        summary.write_text(json.dumps(self.summary(), indent=2) + "\n")
        return junit, summary


def run_case(name: str, ctx: Context) -> CaseResult:
    """Run one case and classify how it ended."""
    start = time.perf_counter()
    ctx.notes = {}
    try:
        CASES[name](ctx)
        outcome: Outcome = "passed"
        message = ""
    except CaseSkipped as exc:
        outcome, message = "skipped", str(exc)
    except ConformanceFailure as exc:
        outcome, message = "failed", str(exc)
    except Exception as exc:  # a crash of the backend or the case: an error, with its trace
        outcome = "error"
        message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    return CaseResult(name, outcome, time.perf_counter() - start, message, dict(ctx.notes))


def run_suite(
    plane: Plane,
    profile: Profile,
    *,
    kv_url: str,
    objects_url: str,
    cases: Iterable[str] | None = None,
    servers: ServerFaults | None = None,
    progress: Callable[[str], None] = lambda _: None,
    door: str = "blocking",
    tally: Callable[[int, int], None] = lambda done, total: None,
) -> RunReport:
    """Run ``cases`` (default: all) against ``plane`` and return the report.

    ``kv_url`` and ``objects_url`` name the store in the report and must open it from
    another process: the crash torture starts OS processes on them (and skips, saying why,
    when they name a store that lives inside this process, such as ``memory://``).
    ``servers`` kills and restarts the store's server processes (crash 2; skipped without).
    ``door`` is how every case reaches the plane (:data:`conformance.doors.DOORS`):
    ``"asyncio"`` runs each operation on ``plane``'s :class:`~persistence.plane.AsyncPlane`.
    ``progress`` gets a line as each case starts and ends, ``tally`` the cases done of all."""
    plane = through(door, plane)
    report = RunReport(kv_url, objects_url, profile.name, door)
    names = list(cases) if cases is not None else list(CASES)
    ctx = Context(
        plane, profile, progress, kv_url=kv_url, objects_url=objects_url, servers=servers, door=door
    )
    for index, name in enumerate(names, 1):
        tally(index - 1, len(names))
        progress(f"[{index}/{len(names)}] {name}")
        result = run_case(name, ctx)
        report.results.append(result)
        progress(f"[{index}/{len(names)}] {name}: {result.outcome} ({result.seconds:.1f}s)")
    tally(len(names), len(names))
    return report


def skipped_report(
    kv_url: str, objects_url: str, profile: Profile, reason: str, door: str = "blocking"
) -> RunReport:
    """A report in which every case is skipped for ``reason`` (backend unavailable)."""
    report = RunReport(kv_url, objects_url, profile.name, door)
    report.results = [CaseResult(name, "skipped", 0.0, reason) for name in CASES]
    return report
