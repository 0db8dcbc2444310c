"""``aosp conformance`` as an operator meets it: the store options every command takes, and
``--list``."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import aosp

QUICK_CASE = "case1_cas_put_get_has"


def test_conformance_runs_on_memory_unless_a_store_is_named(tmp_path: Path) -> None:
    """Not on ``$AOSP_DATA_DIR`` or ``./aosp-data``: the cases leave their universes behind."""
    result = aosp(
        "conformance",
        "--case",
        QUICK_CASE,
        "--report",
        str(tmp_path / "report"),
        "--json",
        cwd=tmp_path,
        env={"AOSP_DATA_DIR": str(tmp_path / "operator-store")},
    )
    assert result.code == 0, result.err
    summary = result.json()
    assert (summary["kv"], summary["objects"]) == ("memory://", "memory://")
    assert not (tmp_path / "operator-store").exists() and not (tmp_path / "aosp-data").exists()


def test_conformance_takes_data_dir_as_the_store_commands_do(tmp_path: Path) -> None:
    """``--data-dir DIR`` is DIR/aos.db and DIR/objects/ (created), its engine wrapped for
    fault injection so that the fault case can run on it too."""
    data = tmp_path / "store"
    result = aosp(
        "conformance",
        "--data-dir",
        str(data),
        "--case",
        QUICK_CASE,
        "--report",
        str(tmp_path / "report"),
        "--json",
    )
    assert result.code == 0, result.err
    summary = result.json()
    assert summary["kv"] == f"faults+sqlite://{data}/aos.db"
    assert summary["objects"] == f"file://{data}/objects"
    assert summary["passed"] == 1
    assert (data / "aos.db").is_file() and (data / "objects").is_dir()
    # the store is one the other commands open
    assert aosp("universe", "list", "--data-dir", str(data), "--json").code == 0


def test_conformance_data_dir_or_urls_not_both(tmp_path: Path) -> None:
    result = aosp(
        "conformance",
        "--data-dir",
        str(tmp_path / "store"),
        "--kv",
        "memory://",
        "--report",
        str(tmp_path / "report"),
    )
    assert result.code == 2
    assert result.one_line_error() == "aosp: usage error: --data-dir or --kv/--objects, not both"
    assert not (tmp_path / "store").exists() and not (tmp_path / "report").exists()
