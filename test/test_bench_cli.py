"""`grounded-planner bench score|report` as a user runs them: one JSON object, a Table I layout, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bench"
EPISODES, PREDICTIONS = SAMPLE / "episodes.jsonl", SAMPLE / "predictions.jsonl"


def gp(*args, cwd=None):
    exe = Path(sys.executable).with_name("grounded-planner")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_score_json_prints_exactly_one_object_with_the_documented_shape():
    out = gp("bench", "score", "--episodes", EPISODES, "--predictions", PREDICTIONS, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # fails on anything besides one JSON document
    assert set(result) == {"overall", "groups"}
    assert result["overall"]["episodes"] == 12
    # 3 of the 12 sample predictions are right (ep-01, ep-02, ep-08)
    assert result["overall"]["tsr"] == 25.0
    for key in ("tsr", "arr", "precision"):
        assert 0 <= result["overall"][key] <= 100
    assert list(result["groups"]) == [
        "explicit/short",
        "explicit/medium",
        "explicit/long",
        "implicit/short",
        "implicit/medium",
        "implicit/long",
    ]
    assert result["groups"]["explicit/long"] == {**result["groups"]["explicit/long"], "episodes": 1, "tsr": 100.0}
    assert sum(g["episodes"] for g in result["groups"].values()) == 12


def test_score_table_has_the_table_one_layout():
    out = gp("bench", "score", "--episodes", EPISODES, "--predictions", PREDICTIONS)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Task Success Rate (TSR)" in lines[0] and "Action Recall Rate (ARR)" in lines[0]
    assert lines[1].split() == ["Explicit", "Implicit", "Explicit", "Implicit"]
    assert lines[2].split() == ["short", "medium", "long"] * 4
    row = lines[3].split()
    assert row[0] == "predictions" and len(row) == 13
    assert row[3] == "100.0"  # explicit/long TSR
    assert "overall: 12 episodes, TSR 25.0%" in out.stdout


def test_missing_predictions_warn_on_stderr_but_json_stays_clean(tmp_path):
    first = PREDICTIONS.read_text().splitlines()[0]
    partial = tmp_path / "p.jsonl"
    partial.write_text(first + "\n" + json.dumps({"id": "stray", "plan": None}) + "\n")
    out = gp("bench", "score", "--episodes", EPISODES, "--predictions", partial, "--json")
    assert out.returncode == 0
    result = json.loads(out.stdout)
    assert result["overall"]["missing_predictions"] == 11 and result["overall"]["unknown_predictions"] == 1
    assert "11 episode(s) have no prediction" in out.stderr and "1 prediction id(s)" in out.stderr


def test_bad_episode_file_is_one_line_error(tmp_path):
    bad = tmp_path / "e.jsonl"
    bad.write_text('{"id": "x", "image": "a.png", "instruction": "i", "instruction_type": "odd", "actions": []}\n')
    out = gp("bench", "score", "--episodes", bad, "--predictions", PREDICTIONS)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "instruction_type" in out.stderr and f"{bad}:1" in out.stderr


def test_report_writes_one_html_file(tmp_path):
    out = gp("bench", "report", "--episodes", EPISODES, "--predictions", PREDICTIONS, "--out", tmp_path / "r.html")
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "r.html").read_text()
    assert "ep-12" in html and "data:image/png;base64," in html
    assert list(tmp_path.iterdir()) == [tmp_path / "r.html"]


def perfect_predictions(path):
    """Predictions equal to the GT (place point at the centre of the GT place box)."""
    lines = []
    for line in EPISODES.read_text().splitlines():
        ep = json.loads(line)
        actions = [
            dict(a, point=[(a["bbox"][0] + a["bbox"][2]) / 2, (a["bbox"][1] + a["bbox"][3]) / 2])
            if a["type"] == "place"
            else a
            for a in ep["actions"]
        ]
        for a in actions:
            if a["type"] == "place":
                del a["bbox"]
        lines.append(json.dumps({"id": ep["id"], "plan": {"image_size": [320, 240], "actions": actions}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_several_prediction_files_give_one_row_each_and_a_paired_test(tmp_path):
    perfect = perfect_predictions(tmp_path / "oracle.jsonl")
    out = gp("bench", "score", "--episodes", EPISODES, "--predictions", PREDICTIONS, perfect)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[3:5]}
    assert rows["oracle"] == ["100.0"] * 12
    assert rows["predictions"][2] == "100.0" and len(rows["predictions"]) == 12
    # 3 sample predictions succeed, all 12 oracle ones do: 9 discordant, all one way -> p = 2 / 2**9
    assert "differs in 9 (predictions only 0, oracle only 9); exact McNemar p = 0.00391" in out.stdout
    refused = gp("bench", "score", "--episodes", EPISODES, "--predictions", PREDICTIONS, perfect, "--json")
    assert refused.returncode == 2 and "one predictions file" in refused.stderr


def test_per_episode_file_lists_success_arr_and_failure_reasons(tmp_path):
    per = tmp_path / "per.jsonl"
    out = gp("bench", "score", "--episodes", EPISODES, "--predictions", PREDICTIONS, "--json", "--per-episode", per)
    assert out.returncode == 0, out.stderr
    rows = {r["id"]: r for r in map(json.loads, per.read_text().splitlines())}
    assert len(rows) == 12
    assert rows["ep-01"]["success"] is True and rows["ep-01"]["failures"] == []
    assert rows["ep-05"]["failures"] == ["place outside target"] and rows["ep-05"]["arr"] == pytest.approx(400 / 6)
    # the per-episode means are the overall figures
    overall = json.loads(out.stdout)["overall"]
    assert sum(r["arr"] for r in rows.values()) / 12 == pytest.approx(overall["arr"])
