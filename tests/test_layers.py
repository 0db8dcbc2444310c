"""The import contract: one direction of imports between the packages.

    aosp, aos_eventsourcing  ->  conformance, spark_connectors  ->  segments  ->  backends
        ->  persistence

A package may import itself and the packages below it, never one above it or beside it
(``conformance`` and ``spark_connectors`` do not import each other; nothing imports
``aos_eventsourcing``, which eventsourcing loads by name through ``PERSISTENCE_MODULE``).
Every import counts, including the lazy ones inside functions. The check reads the source
with ``ast``; nothing is imported to run it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
LAYERS: Final = {
    "persistence": 0,
    "backends": 1,
    "segments": 2,
    "conformance": 3,
    "spark_connectors": 3,
    "aosp": 4,
    "aos_eventsourcing": 4,
}


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, top-level package)`` of every absolute import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def violations(root: Path) -> list[str]:
    """Every import in ``root``'s packages that goes up or sideways."""
    found = []
    for package, rank in LAYERS.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, target in imports(path):
                if target == package or target not in LAYERS:
                    continue
                if LAYERS[target] >= rank:
                    where = path.relative_to(root)
                    found.append(f"{where}:{line}: {package} (layer {rank}) imports {target}")
    return found


def test_no_package_imports_a_package_above_or_beside_it() -> None:
    assert violations(ROOT) == []


def test_the_check_reports_an_upward_import(tmp_path: Path) -> None:
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "persistence" / "plane.py").write_text(
        "def cold():\n    from segments.cold import ObjectStoreSegments\n"
    )
    (tmp_path / "spark_connectors" / "jobs.py").write_text("import conformance.cases\n")
    (tmp_path / "aosp" / "cli.py").write_text("from persistence import kv\n")  # downward: fine
    assert violations(tmp_path) == [
        "persistence/plane.py:2: persistence (layer 0) imports segments",
        "spark_connectors/jobs.py:1: spark_connectors (layer 3) imports conformance",
    ]


def test_every_package_is_a_regular_typed_package() -> None:
    for package in LAYERS:
        assert (ROOT / package / "__init__.py").is_file(), package
        assert (ROOT / package / "py.typed").is_file(), package
