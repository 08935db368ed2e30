"""Rollout statistics: Wilson intervals against published values, McNemar, summary and labelling through the CLI."""

from __future__ import annotations

import io
import json
import math
import sys

import pytest

pytest.importorskip("rosbags")

from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.rollout.label import label_rollouts  # noqa: E402
from grounded_planner.rollout.record import RolloutRecorder, find_rollouts, load_rollout  # noqa: E402
from grounded_planner.rollout.stats import (  # noqa: E402
    StatsError,
    format_rate,
    mcnemar_exact,
    paired_comparisons,
    summarize,
    wilson_interval,
)


# (successes, n) -> interval in percent, one decimal, as printed in Spa-Bench's tables (and the example)
PUBLISHED = {
    (82, 120): (59.6, 76.0),
    (17, 20): (64.0, 94.8),
    (0, 50): (0.0, 7.1),
    (20, 20): (83.9, 100.0),
    (3, 20): (5.2, 36.0),
    (0, 20): (0.0, 16.1),
    (42, 60): (57.5, 80.1),
    (21, 50): (29.4, 55.8),
    (64, 100): (54.2, 72.7),
}


@pytest.mark.parametrize("successes,n", sorted(PUBLISHED))
def test_wilson_matches_published_intervals(successes, n):
    lo, hi = wilson_interval(successes, n)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == PUBLISHED[(successes, n)]


def test_wilson_properties_and_errors():
    assert format_rate(82, 120) == "82/120; 68.3% (59.6–76.0)"
    lo, hi = wilson_interval(5, 10, z=2.576)  # 99%: wider than 95%
    lo95, hi95 = wilson_interval(5, 10)
    assert lo < lo95 and hi > hi95 and math.isclose(lo + hi, 1.0)
    for bad in [(1, 0), (5, 4), (-1, 3)]:
        with pytest.raises(StatsError):
            wilson_interval(*bad)


def test_mcnemar_exact_against_binomial_values():
    assert mcnemar_exact(10, 2) == pytest.approx(158 / 4096)  # 2 * P(X <= 2), X ~ Bin(12, 1/2)
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0


# -- rollouts with known outcomes -----------------------------------------------------------------
def _record(root, name, task, condition, scene, success, mode=None, trial=0, label=True):
    with RolloutRecorder(
        root / name, instruction=f"{task} in {scene}", task=task, condition=condition, scene_id=scene, trial=trial
    ) as rec:
        if label:
            rec.set_label(success, mode, source="human")


@pytest.fixture
def rollout_tree(tmp_path):
    """Task 'placement', 12 scenes under 'original' and 'paraphrased'; task 'counting', 5 rollouts."""
    root = tmp_path / "rollouts"
    original = [True] * 9 + [False] * 3  # 9/12
    paraphrased = [True] * 4 + [False] * 5 + [True] * 3  # 7/12
    modes = ["wrong_object", "grasp_failure", "incorrect_spatial_outcome", "premature_release", "wrong_instance"]
    k = 0
    for i, (a, b) in enumerate(zip(original, paraphrased)):
        _record(root, f"o{i:02d}", "placement", "original", f"s{i}", a, None if a else modes[k % 5])
        k += 0 if a else 1
        _record(root, f"p{i:02d}", "placement", "paraphrased", f"s{i}", b, None if b else modes[k % 5])
        k += 0 if b else 1
    for i, s in enumerate([True, False, False, True, True]):
        _record(root / "counting", f"c{i}", "counting", "original", f"c{i}", s, None if s else "no_action")
    _record(root, "unlabelled", "counting", "original", "c9", None, label=False)
    return root


def test_summary_json_over_known_outcomes(rollout_tree, capsys):
    assert main(["rollouts", "summary", str(rollout_tree), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rollouts"] == 30
    groups = {(g["task"], g["condition"]): g for g in out["groups"]}
    orig, para = groups[("placement", "original")], groups[("placement", "paraphrased")]
    assert (orig["successes"], orig["n"]) == (9, 12) and (para["successes"], para["n"]) == (7, 12)
    assert orig["ci95"] == pytest.approx(wilson_interval(9, 12))
    assert orig["cell"] == "9/12; 75.0% (46.8–91.1)"
    assert sum(orig["failure_modes"].values()) == 3 and sum(para["failure_modes"].values()) == 5
    assert sum(para["failure_mode_fractions"].values()) == pytest.approx(1.0)
    counting = groups[("counting", "original")]
    assert (counting["successes"], counting["n"], counting["unlabelled"]) == (3, 5, 1)
    assert counting["failure_modes"] == {"no_action": 2}
    assert (out["overall"]["successes"], out["overall"]["n"]) == (19, 29)

    # paired: s0-s3 both succeed, s4-s8 only original, s9-s11 both fail... known table
    (pair,) = [p for p in out["paired"] if p["task"] == "placement"]
    assert (pair["condition_a"], pair["condition_b"]) == ("original", "paraphrased")
    assert (pair["pairs"], pair["both"], pair["a_only"], pair["b_only"], pair["neither"]) == (12, 4, 5, 3, 0)
    assert pair["mcnemar_exact_p"] == pytest.approx(mcnemar_exact(5, 3))
    assert pair["difference"] == pytest.approx(7 / 12 - 9 / 12)


def test_summary_text_and_plot(rollout_tree, tmp_path, capsys):
    plot = tmp_path / "summary.png"
    assert main(["rollouts", "summary", str(rollout_tree), "--by", "task", "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "16/24; 66.7% (46.7–82.0)" in text  # placement over both conditions
    assert "paired comparisons" in text and "original 75.0% vs paraphrased 58.3% on 12 pairs" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    # a recording that never finished is reported as such, not counted
    RolloutRecorder(rollout_tree / "killed", instruction="x", task="placement", condition="original")
    assert main(["rollouts", "summary", str(rollout_tree), "--by", "task"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("placement"))
    assert "16/24" in row and "1 (1 cut short)" in row


def test_summary_errors_are_one_line(tmp_path, capsys):
    assert main(["rollouts", "summary", str(tmp_path)]) == 1
    assert "no rollout folders" in capsys.readouterr().err
    _record(tmp_path, "a", "t", "c", "s", True)
    assert main(["rollouts", "summary", str(tmp_path), "--by", "colour"]) == 2
    assert "cannot group by 'colour'" in capsys.readouterr().err


def test_duplicate_scene_trial_is_left_out_of_pairs_with_warning():
    rows = [
        dict(task="t", condition="a", scene_id="s1", trial=0, success=True),
        dict(task="t", condition="a", scene_id="s1", trial=0, success=False),
        dict(task="t", condition="b", scene_id="s1", trial=0, success=True),
        dict(task="t", condition="a", scene_id="s2", trial=0, success=True),
        dict(task="t", condition="b", scene_id="s2", trial=0, success=False),
    ]
    warnings: list[str] = []
    (pair,) = paired_comparisons(rows, ("task",), warnings)
    assert pair.pairs == 1 and pair.a_only == 1
    assert "ran more than once" in warnings[0]
    assert summarize(rows)["warnings"]


# -- labelling ------------------------------------------------------------------------------------------
def test_labelling_round_trip_through_stdin(tmp_path, monkeypatch, capsys):
    for i in range(4):
        _record(tmp_path, f"ep{i}", "placement", "original", f"s{i}", None, label=False)
    _record(tmp_path, "done", "placement", "original", "s9", True)  # already labelled: not asked
    # ep0: success; ep1: bad answer then failure by number (2 = wrong_object) with notes; ep2: skip; ep3: by name
    answers = "y\n\nmaybe\nn\n2\nknocked the cup\ns\nn\npremature_release\n\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(answers))
    assert main(["rollouts", "label", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "please answer y, n, s or q" in out and "labelled 3, skipped 1, already labelled 1" in out
    got = {
        r.episode_id: (r.success, r.failure_mode, r.data["notes"], r.data["label_source"])
        for r in find_rollouts([tmp_path])
    }
    assert got["ep0"] == (True, None, "", "human")
    assert got["ep1"] == (False, "wrong_object", "knocked the cup", "human")
    assert got["ep2"][0] is None
    assert got["ep3"][:2] == (False, "premature_release")
    assert got["done"][0] is True

    # the labels feed the summary
    assert main(["rollouts", "summary", str(tmp_path), "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["groups"][0]
    assert (g["successes"], g["n"], g["unlabelled"]) == (2, 4, 1)
    assert g["failure_modes"] == {"wrong_object": 1, "premature_release": 1}


def test_labelling_stops_cleanly_at_end_of_input(tmp_path):
    for i in range(2):
        _record(tmp_path, f"ep{i}", "t", "c", f"s{i}", None, label=False)
    out = io.StringIO()
    counts = label_rollouts(find_rollouts([tmp_path]), io.StringIO("n\nnot_a_mode\n5\n"), out)
    # input ends at the (optional) notes of ep0: its label is complete and kept; ep1 is never asked
    assert counts.quit and counts.labelled == 1
    assert "not a failure mode: 'not_a_mode'" in out.getvalue()
    assert (load_rollout(tmp_path / "ep0").success, load_rollout(tmp_path / "ep0").failure_mode) == (
        False,
        "incorrect_spatial_outcome",
    )
    assert load_rollout(tmp_path / "ep1").success is None


def test_hand_written_records_are_read_and_bad_ones_named(tmp_path, capsys):
    """A checker may write rollout.json by hand: only the fields the summary uses are needed."""
    for i, (success, mode) in enumerate([(True, None), (False, "wrong_object"), (False, "wrong_object")]):
        (tmp_path / "ok" / f"r{i}").mkdir(parents=True)
        (tmp_path / "ok" / f"r{i}" / "rollout.json").write_text(
            json.dumps({"task": "t", "condition": "c", "success": success, "failure_mode": mode})
        )
    assert main(["rollouts", "summary", str(tmp_path / "ok"), "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["groups"][0]
    assert (g["successes"], g["n"], g["failure_modes"]) == (1, 3, {"wrong_object": 2})
    bad = tmp_path / "bad" / "r"
    bad.mkdir(parents=True)
    for content, message in [
        ({"success": "yes"}, "'success' must be true, false or null"),
        ({"success": False, "failure_mode": "oops"}, "unknown failure mode 'oops'"),
        ({"format": "other/1"}, "is not a rollout record"),
        ({"status": "weird"}, "unknown status"),
    ]:
        (bad / "rollout.json").write_text(json.dumps(content))
        assert main(["rollouts", "summary", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert message in err and str(bad / "rollout.json") in err and err.count("\n") == 1


def test_failure_without_mode_counts_as_unlabelled_for_the_labeller(tmp_path):
    """A simulator's bare 'failed' still needs a person to say how it failed."""
    with RolloutRecorder(tmp_path / "sim_fail", instruction="x") as rec:
        rec.set_label(False, source="simulator")
    with RolloutRecorder(tmp_path / "sim_fail_grasp", instruction="x") as rec:
        rec.log_result({"success": False, "steps": [{"index": 0, "type": "grasp", "outcome": "grasp_failed"}]})
        rec.set_label(False, source="simulator")
    assert load_rollout(tmp_path / "sim_fail_grasp").failure_mode == "grasp_failure"  # the executor knew why
    assert load_rollout(tmp_path / "sim_fail_grasp").labelled
    out = io.StringIO()
    counts = label_rollouts(find_rollouts([tmp_path]), io.StringIO("n\n6\ndropped near the bowl\n"), out)
    assert (counts.labelled, counts.already) == (1, 1)
    assert "label so far (simulator): failure" in out.getvalue()
    record = load_rollout(tmp_path / "sim_fail")
    assert (record.failure_mode, record.data["notes"]) == ("premature_release", "dropped near the bowl")
