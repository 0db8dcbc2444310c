"""The import contract, module by module (docs/architecture.md draws it).

Rooms, lowest first; a module imports modules of its own room and of the rooms below it,
never above or beside it::

    aos_bench                  (the benchmarks: a distribution of their own, benchmarks/)
    aosp, aos_eventsourcing
    conformance | spark_connectors
    segments
    backends
    persistence.workers        (the drain worker, the compactor: above the facade)
    persistence.plane          (the facade: its parts and its two doors)
    persistence.contracts      (the surface the plane and the oracle implement)
    persistence.protocols      (every transaction, written once)
    persistence vocabulary     (ids, errors, records, keyspace, futures, kv, objects, ...)

``conformance`` and ``spark_connectors`` do not import each other; nothing imports
``aos_eventsourcing``, which eventsourcing loads by name. Outside ``persistence``, the
protocols are reached through the stated interface: :data:`OUTSIDE_PROTOCOLS` lists each
module allowed to import a protocol module, and why. No two modules import each other,
directly or around a circle. Every import counts, the lazy ones inside functions too; the
check reads the source with ``ast``, nothing is imported to run it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGES: Final = (
    "persistence",
    "backends",
    "segments",
    "conformance",
    "spark_connectors",
    "aosp",
    "aos_eventsourcing",
    "benchmarks/aos_bench",
)
"""Each package's folder, from the checkout's root."""
ROOMS: Final[tuple[tuple[str, ...], ...]] = (
    ("persistence",),  # the vocabulary: every persistence module not in a room above
    ("persistence.protocols",),
    ("persistence.contracts",),
    ("persistence.plane",),
    ("persistence.workers",),
    ("backends",),
    ("segments",),
    ("conformance", "spark_connectors"),
    ("aosp", "aos_eventsourcing"),
    ("aos_bench",),
)
"""Module-name prefixes of each room, lowest first (the longest matching prefix decides)."""

OUTSIDE_PROTOCOLS: Final[dict[str, dict[str, str]]] = {
    "segments.export": {"export": "Protocol F's steps: the exporter is the worker that runs them"},
    "segments.collect": {"export": "an orphaned segment is one no export marker will index"},
    "segments.format": {"segment_index": "the segment key and checksum rules the index checks"},
    "segments.cold": {"segment_index": "a cold read checks the record it follows"},
    "segments.verify": {"segment_index": "the index audit: every bad record, not the first"},
    "spark_connectors.listing": {
        "segment_index": "the index audit, as segments verify; a strict page of it for a byte cap",
        "journal": "where a run of missing heights ends, as fsck finds it",
    },
    "spark_connectors.source": {"segment_index": "the record check a listed segment passed"},
    "spark_connectors.stream": {"journal": "a byte cap sizes hot entries before they are read"},
    "aosp.fsck": {
        "worlds": "fsck reads the records themselves: what the facade hides is what it checks",
        "compaction": "... the consumed marks",
        "cas_bodies": "... the CAS bodies' keys and dooms",
        "journal": "... where a run of missing heights ends",
        "log": "... the universe log's records, its queue and the queue's counter",
    },
    "aosp.cli.compact": {
        "compaction": "the preview of a pass (what it would remove)",
        "cas_bodies": "orphaned CAS bodies' grace",
    },
    "aosp.cli.inspect": {"hot_state": "hot keys by family"},
    "aosp.cli.status": {"status": "backlog, hot journal, exports, marks: snapshot reads"},
    "aosp.cli.store": {"worlds": "whether a store is new (no layout record) before it opens"},
    "aos_bench.cas": {"cas_bodies": "the body's object key, to plant an orphan"},
    "aos_bench.fdb_raw": {"checksums": "the raw baseline stores entries as the plane does"},
    "aos_bench.eventsourcing_app": {"checksums": "the read floor opens entries as the plane does"},
    "aos_bench.spark_floor": {"checksums": "the sqlite3 floor cuts the seal the plane appends"},
    "aos_bench.steady": {
        "hot_state": "hot keys by family, the figure it plots",
        "compaction": "the mark spacing its window is derived from",
    },
    "conformance.model_core": {
        "budget": "the oracle's budget: FoundationDB's transaction size less the plane's reserve",
    },
    "conformance.model_journal": {
        "budget": "the oracle predicts a refusal as the plane counts FoundationDB's bytes",
        "journal": "... and a creation's records",
    },
    "conformance.model_inbox": {"budget": "... likewise for an enqueue and a drain"},
    "conformance.cases": {
        "journal": "two raw transactions racing at one head; a retried append call",
        "drain": "a retried drain call",
        "calls": "... with the same call id",
        "cas_bodies": "objects planted and removed where a body lives",
    },
    "conformance.fault_matrix_state": {
        "inbox": "the ready marks it checks after every fault",
        "compaction": "the consumed marks, likewise",
        "export": "the export marker, likewise",
        "log": "the universe log queue's counter, likewise",
    },
    "conformance.torture.reads": {
        "inbox": "the checker reads the store's records to verify every invariant: the ready marks",
    },
    "conformance.torture.orphan_checks": {
        "cas_bodies": "... and the final collection pass's clock, as the protocol counts it",
    },
    "conformance.torture.figures": {"compaction": "the marks per window: when compaction is due"},
    "conformance.torture.worker": {
        "calls": "the call records' replays it reports",
        "compaction": "the window its compactor runs with",
        "cas_bodies": "the pins of its own puts, for the orphan collector",
    },
}
"""Who, outside ``persistence``, imports which protocol module, and why (the stated
interface's users; a new one fails the test until it is added here, with its reason)."""


def modules(root: Path) -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        top = root / package
        for path in sorted(top.rglob("*.py")):
            parts = path.relative_to(top.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every absolute import in ``path`` of a known module (``from
    package import submodule`` is the submodule)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    yield node.lineno, sub
                elif node.module in known:
                    yield node.lineno, node.module


def room(module: str) -> tuple[int, str]:
    """The rank of ``module``'s room and the prefix that put it there."""
    best = (-1, "")
    for rank, prefixes in enumerate(ROOMS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best[1]):
                best = (rank, prefix)
    return best


def violations(root: Path) -> list[str]:
    """Every import that goes up or sideways, reaches a protocol from outside without a
    stated reason, or closes a circle."""
    known = modules(root)
    found = []
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        rank, prefix = room(name)
        for line, target in imports(path, known):
            if target == name:
                continue
            graph[name].add(target)
            where = f"{path.relative_to(root)}:{line}: {name}"
            target_rank, target_prefix = room(target)
            if target_rank > rank or (target_rank == rank and target_prefix != prefix):
                found.append(f"{where} ({prefix}) imports {target} ({target_prefix})")
            if target.startswith("persistence.protocols.") and not name.startswith("persistence."):
                protocol = target.split(".")[2]
                if protocol not in OUTSIDE_PROTOCOLS.get(name, {}):
                    found.append(f"{where} imports {target}: not in its stated interface")
    found.extend(f"circle: {' -> '.join(cycle)}" for cycle in circles(graph))
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """A circle through each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_module_imports_a_room_above_or_beside_it_or_closes_a_circle() -> None:
    assert violations(ROOT) == []


def test_every_stated_reason_is_still_used() -> None:
    """An entry of :data:`OUTSIDE_PROTOCOLS` that no import needs any more goes."""
    known = modules(ROOT)
    used = {
        (name, target.split(".")[2])
        for name, path in known.items()
        for _, target in imports(path, known)
        if target.startswith("persistence.protocols.")
    }
    stated = {(name, p) for name, reasons in OUTSIDE_PROTOCOLS.items() for p in reasons}
    assert stated <= used, sorted(stated - used)


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_reports_upward_and_sideways_imports_outside_access_and_circles(
    tmp_path: Path,
) -> None:
    for package in PACKAGES:
        _package(tmp_path, package, {"__init__.py": ""})
    _package(
        tmp_path,
        "persistence",
        {
            "protocols/__init__.py": "",
            "protocols/journal.py": "from persistence.plane import Plane\n",
            "protocols/log.py": "def late():\n    from persistence.protocols import drain\n",
            "protocols/drain.py": "from persistence.protocols import log\n",
            "plane/__init__.py": "from persistence.protocols import journal\n",
        },
    )
    _package(tmp_path, "spark_connectors", {"jobs.py": "import conformance\n"})
    _package(tmp_path, "aosp", {"tool.py": "from persistence.protocols.journal import x\n"})
    assert violations(tmp_path) == [
        "persistence/protocols/journal.py:1: persistence.protocols.journal "
        "(persistence.protocols) imports persistence.plane (persistence.plane)",
        "spark_connectors/jobs.py:1: spark_connectors.jobs (spark_connectors) imports "
        "conformance (conformance)",
        "aosp/tool.py:1: aosp.tool imports persistence.protocols.journal: not in its stated "
        "interface",
        "circle: persistence.plane -> persistence.protocols.journal",
        "circle: persistence.protocols.drain -> persistence.protocols.log",
    ]


def test_every_package_is_a_regular_typed_package() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package
        assert (ROOT / package / "py.typed").is_file(), package
