"""`grounded-planner bench score|report` as a user runs them: one JSON object, a Table I layout, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert list(result["groups"]) == ["explicit/short", "explicit/medium", "explicit/long",
                                      "implicit/short", "implicit/medium", "implicit/long"]
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
