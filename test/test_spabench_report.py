"""`spabench report`: the paper's tables from a trials.jsonl of synthetic trial records, with expected values
worked out by hand (Wilson cells as the paper prints them, McNemar from the binomial, chance by enumeration)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grounded_planner.cli.main import main as cli_main
from grounded_planner.spabench.report import (
    blind_success_probability,
    build_report,
    format_report,
    load_trials,
    poisson_binomial_interval,
    render_html,
    ReportError,
)
from grounded_planner.spabench.trial import TrialRecord, TrialSpec, pair_id

BOWL = {"bowl": (0.50, 0.00, 0.02)}


def record(
    task, condition, seed, success, mode=None, planner="gt", robot="gp5", expects_action=True, spec=None, positions=None
):
    if success is False and mode is None:
        mode = "wrong_object"
    spec = spec or TrialSpec(target="a", receptacle="bowl", receptacle_radius_m=0.08, distractors=("b",))
    positions = positions or {**BOWL, "a": (0.4, 0.1, 0.02), "b": (0.4, -0.1, 0.02)}
    return TrialRecord(
        task=task,
        condition=condition,
        seed=seed,
        robot=robot,
        planner=planner,
        instruction="place it",
        expects_action=expects_action,
        spec=spec,
        initial_positions=positions,
        pair_id=pair_id(task, condition, seed),
        final_positions=positions,
        grasp_attempted=True,
        success=success,
        failure_mode=None if success else mode,
        outcome_source="auto",
        started_at="2026-01-01T00:00:00Z",
        wall_s=1.0,
    ).to_dict()


def outcomes(task, condition, successes, n, first_seed=0, **kw):
    return [record(task, condition, first_seed + i, i < successes, **kw) for i in range(n)]


def write(folder: Path, records) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def test_aggregate_cells_match_the_papers_wilson_figures():
    # Table IV's pi0.5 row: 82/120 ID -> 68.3% (59.6-76.0); 122/300 all OOD -> 40.7% (35.3-46.3)
    records = []
    for i, task in enumerate(
        (
            "object_state",
            "relative_size",
            "referential_description",
            "relational_placement",
            "ordinal_position",
            "counting",
        )
    ):
        records += outcomes(task, "id", [14, 14, 14, 14, 13, 13][i], 20)
        records += outcomes(task, "ood", [21, 21, 20, 20, 20, 20][i], 50)
    rep = build_report(records)
    agg = {r["row"]: r for r in rep["policies"]["gt"]["aggregate"]}
    assert agg["ID"]["cell"] == "82/120; 68.3% (59.6–76.0)"
    assert agg["all OOD"]["cell"] == "122/300; 40.7% (35.3–46.3)"
    assert agg["matched OOD"]["n"] == 0  # no direct twins: nothing is matched
    by_id = {r["task"]: r["cell"] for r in rep["policies"]["gt"]["by_task"]["id"]}
    assert by_id["object_state"] == "14/20; 70.0% (48.1–85.5)"  # Table V, relational placement GR00T
    assert by_id["counting"] == "13/20; 65.0% (43.3–81.9)"


def test_matched_ood_and_direct_pairs_and_mcnemar():
    # 10 scenes of ordinal_position: OOD succeeds on seeds 0-2, direct on seeds 0, 3-8 (+ seed 9 direct missing)
    ood = [record("ordinal_position", "ood", s, s in (0, 1, 2)) for s in range(10)]
    ood += [record("ordinal_position", "ood", s, False) for s in (10, 11)]  # OOD scenes with no direct twin
    direct = [record("ordinal_position", "direct", s, s in (0, 3, 4, 5, 6, 7, 8)) for s in range(9)]
    rep = build_report(ood + direct)["policies"]["gt"]
    agg = {r["row"]: r for r in rep["aggregate"]}
    assert (agg["all OOD"]["k"], agg["all OOD"]["n"]) == (3, 12)
    assert (agg["matched OOD"]["k"], agg["matched OOD"]["n"]) == (3, 9)
    assert (agg["matched direct"]["k"], agg["matched direct"]["n"]) == (7, 9)
    m = rep["matched_ood_direct"]
    # concordance: both = seed 0; ood only = 1, 2; direct only = 3..8; neither = none of 0..8 left
    assert (m["pairs"], m["both"], m["a_only"], m["b_only"], m["neither"]) == (9, 1, 2, 6, 0)
    # exact McNemar: 2 * P(X <= 2), X ~ Bin(8, 1/2) = 2 * (1 + 8 + 28) / 256
    assert m["mcnemar_exact_p"] == pytest.approx(2 * 37 / 256)
    assert rep["matched_by_task"][0]["task"] == "ordinal_position"


def test_paraphrase_rows_pair_each_rewrite_with_its_original():
    # paraphrase seed s rewrites ood s (even s) or direct s (odd s) of the same scene
    recs = [record("counting", "ood", s, s in (0, 2)) for s in range(6)]
    recs += [record("counting", "direct", s, True) for s in range(6)]
    recs += [record("counting", "paraphrase", s, s in (0, 1)) for s in range(6)]
    rows = {r["row"]: r for r in build_report(recs)["policies"]["gt"]["paraphrase"]}
    # odd seeds 1, 3, 5 rewrote direct (all successes); paraphrased: only seed 1 succeeded
    assert (rows["original direct"]["k"], rows["original direct"]["n"]) == (3, 3)
    assert (rows["paraphrased direct"]["k"], rows["paraphrased direct"]["n"]) == (1, 3)
    # even seeds 0, 2, 4 rewrote OOD: originals 0 and 2 succeeded, paraphrase only 0
    assert (rows["original OOD spatial"]["k"], rows["paraphrased OOD spatial"]["k"]) == (2, 1)
    assert rows["paraphrased OOD spatial"]["a_only"] == 1 and rows["paraphrased OOD spatial"]["b_only"] == 0
    assert rows["paraphrased OOD spatial"]["mcnemar_exact_p"] == 1.0


def test_cross_task_and_action_gating_rows():
    recs = outcomes("object_state", "id", 17, 20) + outcomes("counting", "id", 12, 20)
    recs += outcomes("relative_size", "id", 20, 20)  # no cross-task trials: not in the standard row
    recs += outcomes("object_state", "cross_task_object", 11, 20) + outcomes("counting", "cross_task_object", 9, 20)
    recs += outcomes("counting", "no_intervention", 17, 20, expects_action=False)
    recs += outcomes("ordinal_position", "no_intervention", 0, 20, expects_action=False)
    # relational control: even seeds hold (no action expected), odd ones need correction
    recs += [
        record("relational_placement", "relational_control", s, s % 2 == 0 or s < 4, expects_action=s % 2 == 1)
        for s in range(20)
    ]
    rep = build_report(recs)["policies"]["gt"]
    cross = {r["row"]: r for r in rep["cross_task"]}
    assert cross["standard objects, 2-task ID"]["cell"] == "29/40; 72.5% (57.2–83.9)"
    assert (cross["cross-task objects, 2-task ID"]["k"], cross["cross-task objects, 2-task ID"]["n"]) == (20, 40)
    gate = {r["row"]: r for r in rep["action_gating"]}
    assert gate["counting: no intervention"]["cell"] == "17/20; 85.0% (64.0–94.8)"  # Table IX, GR00T
    assert gate["ordinal_position: no intervention"]["cell"] == "0/20; 0.0% (0.0–16.1)"
    assert (gate["2-task no-intervention aggregate"]["k"], gate["2-task no-intervention aggregate"]["n"]) == (17, 40)
    assert gate["relational control: relation already holds"]["cell"] == "10/10; 100.0% (72.2–100.0)"
    assert (gate["relational control: needs correction"]["k"], gate["relational control: needs correction"]["n"]) == (
        2,
        10,
    )
    pairs = rep["relational_control_pairs"]
    assert (pairs["pairs"], pairs["a_only"], pairs["b_only"]) == (10, 8, 0)
    assert pairs["mcnemar_exact_p"] == pytest.approx(2 / 256)  # 2 * (1/2)^8


def test_failure_mode_composition_is_normalised_within_each_task():
    recs = [
        record("object_state", "ood", s, False, mode=m)
        for s, m in enumerate(["wrong_instance"] * 3 + ["grasp_failure"])
    ]
    recs += outcomes("object_state", "ood", 2, 2, first_seed=10)
    recs += [record("counting", "ood", 0, False, mode="incorrect_spatial_outcome")]
    fm = {(f["task"], f["condition"]): f for f in build_report(recs)["policies"]["gt"]["failure_modes"]}
    assert fm[("object_state", "ood")]["failures"] == 4
    assert fm[("object_state", "ood")]["fractions"] == {"wrong_instance": 0.75, "grasp_failure": 0.25}
    assert fm[("counting", "ood")]["counts"] == {"incorrect_spatial_outcome": 1}


def test_unlabelled_trials_are_counted_apart_and_columns_split_by_planner_and_robot():
    recs = outcomes("counting", "id", 1, 2, planner="gt", robot="so101") + outcomes(
        "counting", "id", 0, 2, planner="blind", robot="gp5"
    )
    recs.append(record("counting", "id", 5, None, planner="gt", robot="so101"))
    rep = build_report(recs)
    assert rep["columns"] == ["blind (gp5)", "gt (so101)"]
    assert rep["unlabelled"] == 1
    idrow = rep["policies"]["gt (so101)"]["aggregate"][0]
    assert (idrow["k"], idrow["n"], idrow["unlabelled"]) == (1, 2, 1)


def test_blind_success_probability_by_task():
    two = TrialSpec(target="a", receptacle="bowl", receptacle_radius_m=0.08, distractors=("b", "c"))
    assert blind_success_probability(record("object_state", "ood", 0, True, spec=two)) == pytest.approx(1 / 3)
    rel = TrialSpec(target="a", reference="b", direction="left", direction_xy=(0.0, -1.0))
    assert blind_success_probability(record("relational_placement", "id", 0, True, spec=rel)) == 0.25
    # the category "block" names the reference block too: never a candidate to place beside itself
    blocks = TrialSpec(target="a", reference="b", direction="left", direction_xy=(0.0, -1.0), distractors=("b", "c"))
    assert blind_success_probability(record("relational_placement", "id", 0, True, spec=blocks)) == 0.125
    # relational control, relation already holds: the blind policy still moves, one side in four is right
    assert (
        blind_success_probability(
            record("relational_placement", "relational_control", 0, True, spec=rel, expects_action=False)
        )
        == 0.25
    )
    # no valid referent: whatever it moves is wrong
    none = TrialSpec(target=None, receptacle="bowl", receptacle_radius_m=0.08, distractors=("a", "b"))
    assert (
        blind_success_probability(record("object_state", "no_intervention", 0, True, spec=none, expects_action=False))
        == 0.0
    )
    # no object of the named category at all: it moves nothing, which is right where no action is expected
    empty = TrialSpec(target=None, reference="a", receptacle="bowl", receptacle_radius_m=0.08)
    assert (
        blind_success_probability(
            record("referential_description", "no_intervention", 0, True, spec=empty, expects_action=False)
        )
        == 1.0
    )
    # counting: one of three objects already in the bowl, two outside; 'exactly two' needs one more: it draws
    # 0, 1 or 2 objects to move, one draw in three is right
    count = TrialSpec(receptacle="bowl", receptacle_radius_m=0.08, count=2)
    pos = {**BOWL, "a": (0.52, 0.01, 0.03), "b": (0.4, 0.1, 0.02), "c": (0.4, -0.1, 0.02)}
    assert blind_success_probability(record("counting", "ood", 0, True, spec=count, positions=pos)) == pytest.approx(
        1 / 3
    )
    over = TrialSpec(receptacle="bowl", receptacle_radius_m=0.08, count=0)  # needs a removal: never by chance
    assert blind_success_probability(record("counting", "ood", 0, True, spec=over, positions=pos)) == 0.0


def test_poisson_binomial_interval_equals_the_binomial_quantiles():
    # Bin(10, 1/2): P(X <= 1) = 11/1024 < 0.025 <= P(X <= 2) = 56/1024; P(X <= 7) = 968/1024 < 0.975 <= 1013/1024
    assert poisson_binomial_interval([0.5] * 10) == (2, 8)
    assert poisson_binomial_interval([0.0] * 5) == (0, 0)
    assert poisson_binomial_interval([1.0, 1.0, 0.0]) == (2, 2)


def test_blind_chance_interval_is_stated_and_checked():
    spec = TrialSpec(target="a", receptacle="bowl", receptacle_radius_m=0.08, distractors=("b",))
    recs = [record("object_state", "ood", s, s < 5, planner="blind", spec=spec) for s in range(10)]
    ch = build_report(recs)["policies"]["blind"]["chance"]
    assert ch["overall"]["interval_k"] == [2, 8] and ch["overall"]["inside"] is True
    assert ch["overall"]["expected"] == pytest.approx(5.0)
    lucky = [record("object_state", "ood", s, True, planner="blind", spec=spec) for s in range(10)]
    assert build_report(lucky)["policies"]["blind"]["chance"]["overall"]["inside"] is False
    assert "chance" not in build_report(outcomes("object_state", "ood", 5, 10))["policies"]["gt"]


def test_text_and_html_report(tmp_path):
    recs = (
        outcomes("object_state", "id", 17, 20)
        + outcomes("object_state", "ood", 3, 5)
        + outcomes("object_state", "direct", 5, 5)
    )
    rep = build_report(recs, source="run")
    text = format_report(rep)
    assert "17/20; 85.0% (64.0–94.8)" in text and "Table IV" in text and "McNemar exact p" in text
    page = render_html(rep)
    assert (
        page.startswith("<!DOCTYPE html>")
        and "<svg" in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )  # self-contained: no CDN, no remote asset
    assert "17/20; 85.0% (64.0–94.8)" in page and page.count("<path d=") >= 3  # one whisker per bar


def test_report_cli_text_json_html(tmp_path, capsys):
    folder = write(tmp_path / "run", outcomes("counting", "id", 12, 20) + outcomes("counting", "ood", 0, 5))
    assert cli_main(["spabench", "report", str(folder)]) == 0
    assert "12/20; 60.0% (38.7–78.1)" in capsys.readouterr().out
    html_out = tmp_path / "report.html"
    assert cli_main(["spabench", "report", str(folder), "--json", "--html", str(html_out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["policies"]["gt"]["by_task"]["ood"][0]["cell"] == "0/5; 0.0% (0.0–43.4)"
    assert html_out.read_text(encoding="utf-8").count("<svg") >= 2


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"trial_id": "counting/id/0"\n', "line 1: not JSON"),
        ("[1, 2]\n", "line 1: expected a JSON object"),
    ],
)
def test_report_cli_bad_trials_file_is_one_line_exit_2(tmp_path, content, expected):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "trials.jsonl").write_text(content, encoding="utf-8")
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main", "spabench", "report", str(folder), "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and expected in proc.stderr
    assert not out.exists()  # nothing half-written


def test_report_names_the_unknown_task_and_the_duplicate(tmp_path):
    rec = outcomes("counting", "id", 1, 1)[0]
    bad = {**rec, "task": "stacking", "trial_id": "stacking/id/0"}
    write(tmp_path / "a", [bad])
    with pytest.raises(ReportError, match="stacking"):
        load_trials(tmp_path / "a")
    write(tmp_path / "b", [rec, rec])
    with pytest.raises(ReportError, match="appears twice"):
        load_trials(tmp_path / "b")
    with pytest.raises(ReportError, match="no such file"):
        load_trials(tmp_path)
