"""The steady-state benchmark (``aosp bench steady``) at a tiny size, on a simulated clock.

Five worlds receive 5 items/s for 120 simulated seconds with a 10 s retention window, once
with compaction and once without, through the benchmark's own loop; the clock (the loop's and
the plane's: call ids, compaction) advances only when the loop waits, so nothing sleeps and
every run is the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aos_bench import steady
from backends.kv.memory import MemoryEngine
from backends.objects.memory import MemoryObjectStore
from segments import open_plane

NS = 1_000_000_000
CONFIG = steady.SteadyConfig(
    worlds=5,
    seconds=120.0,
    rate=5.0,
    window_seconds=10.0,
    call_record_seconds=5.0,
    sample_seconds=5.0,
    snapshot_seconds=15.0,
    segment_entries=10,
    tick_seconds=0.25,
)


class SimulatedClock:
    """Time moves only when the loop sleeps."""

    def __init__(self) -> None:
        self.ns = 1_800_000_000 * NS

    def now_ns(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.ns += round(seconds * NS)


Runs = tuple[steady.SteadyRun, steady.SteadyRun, dict[str, bool], dict[str, bool]]
"""The run with compaction, the one without, and their checks."""


@pytest.fixture(scope="module")
def runs() -> Runs:
    """Both runs, each on its own memory store, and their checks."""
    done = []
    for compaction in (True, False):
        clock = SimulatedClock()
        plane = open_plane(
            MemoryEngine(), MemoryObjectStore(), CONFIG.plane_config(), clock=clock.now_ns
        )
        run = steady.run_once(plane, CONFIG, compaction=compaction, clock=clock)
        done.append((run, steady.verify(plane, run)))
    (with_, with_checks), (without, without_checks) = done
    return with_, without, with_checks, without_checks


def _inbox(sample: steady.Sample) -> tuple[int, int, int]:
    """Consumed items, pending items and idempotency entries of every world."""
    f = sample.families
    return f["inbox_consumed"][0], f["inbox_pending"][0], f["idempotency"][0]


def test_nothing_is_lost_and_restore_equals_replay(runs: Runs) -> None:
    with_, without, with_checks, without_checks = runs
    assert with_checks == without_checks == dict.fromkeys(with_checks, True)
    # the same ingress in both runs: the same items to the same worlds
    assert with_.enqueued == without.enqueued == CONFIG.items == 600
    assert with_.sent == without.sent
    assert with_.snapshots > 0 and with_.segments > 0


def test_compaction_bounds_consumed_items_and_idempotency_entries(runs: Runs) -> None:
    with_, _, _, _ = runs
    # An item consumed at t is under a consumed mark by the first pass whose newest mark
    # is a sixteenth of the window old (passes fall on ticks: at most 2 passes + a tick
    # later) and removed by the first pass a window after that mark (a pass + a tick):
    # what is kept is at most the items of the last window + 3 passes + 2 ticks.
    kept = CONFIG.window_seconds + 3 * CONFIG.pass_seconds + 2 * CONFIG.tick_seconds
    assert with_.longest_pass_gap_seconds <= CONFIG.pass_seconds + CONFIG.tick_seconds
    bound = int(CONFIG.rate * kept) + 1
    half = [s for s in with_.samples if s.seconds >= CONFIG.seconds / 2]
    for s in with_.samples:
        consumed, pending, entries = _inbox(s)
        assert consumed + pending <= bound, s
        # entries go with their items: never one left behind, never one removed early
        assert entries == consumed + pending, s
    # it is a plateau, not a lull: the last half keeps at least the last window's items
    assert all(_inbox(s)[0] >= CONFIG.rate * CONFIG.window_seconds - 1 for s in half)
    final = with_.samples[-1]
    consumed, pending, _ = _inbox(final)
    assert pending == 0 and consumed + with_.removed == with_.enqueued
    assert with_.throughput > 0


def test_without_compaction_hot_state_grows_with_the_items(runs: Runs) -> None:
    _, without, _, _ = runs
    for s in without.samples:
        consumed, pending, entries = _inbox(s)
        assert consumed + pending == entries == s.items
    assert _inbox(without.samples[-1])[0] == without.enqueued == 600
    assert without.removed == 0 and without.compaction_passes == 0


def index_slope(run: steady.SteadyRun) -> float:
    """Keys per world per minute that the snapshot and segment indexes grew by."""
    return run.slope(families=("snapshots", "segment_index"))


def test_hot_keys_plateau_with_compaction_only(runs: Runs, tmp_path: Path) -> None:
    with_, without, _, _ = runs
    figures = {f.unit: f for f in steady.figures(CONFIG, with_, without)}
    slope, bounded = figures["keys/min"], figures["keys/min, compactable"]
    # Without compaction two keys per item stay (item + idempotency entry): 2 x 60 items/min
    # per world; with it, what grows is the snapshot and segment indexes, one key each per
    # snapshot and per segment, and nothing else.
    assert slope.baseline_value >= 2 * 60 * CONFIG.rate / CONFIG.worlds - 5
    assert bounded.baseline_value == pytest.approx(
        slope.baseline_value - index_slope(without) - without.slope(families=("call_records",)),
        abs=0.02,
    )
    # flat: within 1% of the growth without compaction, either way (a sawtooth's tilt)
    assert bounded.target is not None
    assert abs(bounded.value) <= bounded.target * bounded.baseline_value, bounded
    records = with_.slope(families=("call_records",))
    assert slope.value == pytest.approx(index_slope(with_) + bounded.value + records, abs=0.02)
    # call records, bounded by their own window in both runs: flat as the whole is (a leak
    # of them would grow by every call, several keys per world per second)
    assert abs(records) <= 0.1 * bounded.baseline_value
    assert abs(without.slope(families=("call_records",))) <= 0.1 * bounded.baseline_value
    # one snapshot per world every snapshot_seconds, one segment per segment_entries items
    per_minute = (
        60 / CONFIG.snapshot_seconds + 60 * CONFIG.rate / CONFIG.worlds / CONFIG.segment_entries
    )
    assert index_slope(with_) <= per_minute + 1
    assert figures["keys"].value < figures["keys"].baseline_value / 2
    assert figures["items"].value == figures["items"].baseline_value == 600
    path = tmp_path / "docs" / "steady.png"
    steady.plot([with_, without], CONFIG, path)
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_config_refuses_a_run_too_short_for_a_plateau() -> None:
    from persistence.errors import Validation

    with pytest.raises(Validation, match=r"SteadyConfig\.seconds.*4 windows"):
        steady.SteadyConfig(seconds=30.0, window_seconds=10.0)
    with pytest.raises(Validation, match=r"SteadyConfig\.worlds"):
        steady.SteadyConfig(worlds=0)
