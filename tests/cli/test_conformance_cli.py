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


def test_conformance_list_shows_whole_first_sentences() -> None:
    """Each case's first sentence, whole, wrapped at word boundaries to the terminal's width
    (it was its docstring's first line, cut mid-sentence)."""
    from conformance.suite import CASES

    listed = aosp("conformance", "--list", "--json").json()
    assert [row["case"] for row in listed] == list(CASES)
    for row in listed:
        assert row["what"].endswith("."), row
        assert "\n" not in row["what"] and "``" not in row["what"]
    faults = next(row["what"] for row in listed if row["case"].startswith("faults1"))
    assert "1031" in faults and faults.endswith("the outcomes the fault-free twin reported.")

    text = aosp("conformance", "--list", env={"COLUMNS": "80"}).text
    lines = text.splitlines()
    assert lines[0].split() == ["case", "what"]
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    indent = lines[1].index(listed[0]["what"].split()[0])
    joined: dict[str, str] = {}
    for line in lines[1:]:
        name = line[:indent].strip()
        if name:
            joined[name] = line[indent:]
        else:
            joined[list(joined)[-1]] += " " + line[indent:]
    assert joined == {row["case"]: row["what"] for row in listed}


def test_first_sentence_ends_at_the_sentence_not_at_the_line() -> None:
    from aosp.cli.jobs import first_sentence

    doc = """Case 9: a check of this, e.g. that
    one, and ``that`` too. More here.

    Details."""
    assert first_sentence(doc) == "Case 9: a check of this, e.g. that one, and `that` too."
    assert first_sentence(None) == ""


def test_conformance_data_dir_refuses_a_file_that_is_no_store(tmp_path: Path) -> None:
    """As the store commands do: an empty database file is damage, left untouched."""
    data = tmp_path / "store"
    data.mkdir()
    (data / "aos.db").write_bytes(b"")
    result = aosp(
        "conformance",
        *("--data-dir", str(data), "--case", QUICK_CASE, "--report", str(tmp_path / "r")),
    )
    assert result.code == 3
    assert "an empty file (0 bytes), not a store" in result.err
    assert (data / "aos.db").read_bytes() == b""
