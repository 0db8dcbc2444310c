"""``aosp bench export-load`` at its smallest size: it runs its rounds, checks every export
and the foreground journal, and gives both figures with per-round ratios. Windows of two
appends: what the machine's speed makes of the figures is not asserted (on a busy machine a
window of the default 100 appends can outlast its export, which the figures then say)."""

from __future__ import annotations

import pytest

from aos_bench import export_load


@pytest.mark.slow
def test_the_export_load_benchmark_gives_both_figures_per_round() -> None:
    figures = export_load.run(seconds=0.1, min_appends=2)  # MIN_ENTRIES per export world
    assert [f.unit for f in figures] == ["ms", "appends/s"]
    for figure in figures:
        assert len(figure.round_ratios) == export_load.ROUNDS
        assert figure.value > 0 and figure.baseline_value > 0 and figure.target is not None
    assert "49,999" not in figures[0].name and "9,999 x 1 KiB" in figures[0].name
