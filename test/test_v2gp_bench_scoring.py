"""The real-data bench's scoring (benchmarks/bench_v2gp_real.py `right`): the figures in docs/v2gp.md count an
episode right only when every truth segment is found inside its windows and nothing else is; a truth segment the
raw signal cannot tell from a closure on nothing (`optional`) is right found or not found, and the bench's strict
counts require it or forbid it."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_v2gp_real.py"
spec = importlib.util.spec_from_file_location("bench_v2gp_real", BENCH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

GRASP = {"start": [100, 120], "end": [150, 170]}
EMPTY = {"start": [10, 20], "end": [30, 60], "optional": True}


def test_a_segment_counts_only_inside_both_windows_and_with_slack_on_top():
    assert bench.right([[110, 160]], [GRASP], 0)
    assert not bench.right([[95, 160]], [GRASP], 0)  # starts before the last open frame
    assert bench.right([[98, 160]], [GRASP], 2)
    assert not bench.right([[110, 175]], [GRASP], 2)  # ends past the first fully open frame
    assert not bench.right([], [GRASP], 0)  # a missed grasp
    assert not bench.right([[110, 160], [200, 220]], [GRASP], 0)  # a segment the truth does not hold


def test_an_optional_truth_segment_is_right_found_or_not_and_the_strict_counts_tell_them_apart():
    truth = [EMPTY, GRASP]
    assert bench.right([[110, 160]], truth, 0)
    assert bench.right([[15, 40], [110, 160]], truth, 0)
    assert not bench.right([[70, 90], [110, 160]], truth, 0)  # found, but outside the optional one's windows
    assert not bench.right([[110, 160]], truth, 0, "required")
    assert bench.right([[15, 40], [110, 160]], truth, 0, "required")
    assert bench.right([[110, 160]], truth, 0, "absent")
    assert not bench.right([[15, 40], [110, 160]], truth, 0, "absent")
