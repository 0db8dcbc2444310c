"""docs/cli.md's first-hour transcript is what the tool prints (``tests/cli/transcript.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.transcript import check, same


def test_the_first_hour_transcript_is_true(tmp_path: Path) -> None:
    problems = check(tmp_path)
    assert not problems, "\n\n".join(problems) + "\n(python -m tests.cli.transcript --write)"


def test_ids_must_stand_for_the_same_ids_throughout() -> None:
    ids: dict[str, str] = {}
    assert same("universe 4fc943a2  world b5bf86f5", "universe 11111111  world 22222222", ids)
    assert same("-u 4fc943a2", "-u 11111111", ids)
    assert not same("-u 4fc943a2", "-u 22222222", ids)  # 4fc943a2 was 11111111
    assert not same("head 23", "head 24", ids)  # figures are not ids
    assert same("at 2026-11-28T22:18:56Z, 32.1 items/s", "at 2027-01-01T00:00:00Z, 9 items/s", ids)
