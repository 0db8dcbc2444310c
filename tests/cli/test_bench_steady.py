"""``aosp bench steady``'s options are checked before any suite runs (the run itself is
tested at a tiny size on a simulated clock in ``tests/plane/test_steady_state.py``)."""

from __future__ import annotations

import pytest

from tests.cli.conftest import aosp


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--steady-worlds", "0"], "--steady-worlds"),
        (["--steady-seconds", "-5"], "--steady-seconds"),
        (["--steady-rate", "0"], "--steady-rate"),
        (["--steady-seconds", "20"], "SteadyConfig.seconds"),  # under 4 windows: no plateau
    ],
    ids=["worlds", "seconds", "rate", "too-short"],
)
def test_bad_steady_options_are_usage_errors(options: list[str], named: str) -> None:
    result = aosp("bench", "engine", *options, "--seconds", "0.05", "--quiet")
    assert result.code == 2, result.err
    line = result.err.strip().splitlines()[-1]
    assert line.startswith("aosp: ") and named in line, line


def test_a_plot_directory_that_cannot_be_made_is_refused_before_the_runs() -> None:
    result = aosp("bench", "steady", "--plot", "/proc/aosp-test/steady.png", "--quiet")
    line = result.err.strip().splitlines()[-1]
    assert result.code == 3 and line.startswith("aosp: backend error: --plot"), result.err
    assert result.text == ""  # no run started


def test_the_steady_suite_is_listed() -> None:
    result = aosp("bench", "--help")
    assert result.code == 0 and "steady" in result.text and "--plot" in result.text
