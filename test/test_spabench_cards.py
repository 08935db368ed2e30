"""`spabench cards`: one PNG per trial, a printable HTML sheet, and cards.jsonl lines that are the trial record up to
initial_positions plus the card's own keys (what `spabench session` and the console read); bad names exit 2 with
nothing written."""

from __future__ import annotations

import json
import subprocess
import sys

from PIL import Image

from grounded_planner.spabench.cards import trial_keys
from grounded_planner.spabench.trial import CARD_ONLY_KEYS, CARD_RECORD_KEYS, TrialRecord


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main", *args], capture_output=True, text=True, timeout=240, cwd=cwd
    )


def test_cards_folder(tmp_path):
    out = tmp_path / "cards"
    proc = _cli(
        "spabench",
        "cards",
        "--tasks",
        "relational_placement,counting",
        "--conditions",
        "id,relational_control,no_intervention",
        "--trials",
        "2",
        "--first-seed",
        "4",
        "--robot",
        "so101",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (out / "cards.jsonl").read_text().splitlines()]
    # counting has no relational_control: 3 + 2 conditions x 2 seeds, in run order
    expected = trial_keys(["relational_placement", "counting"], ["id", "relational_control", "no_intervention"], 2, 4)
    assert [c["trial_id"] for c in lines] == [f"{t}/{c}/{s}" for t, c, s in expected]
    assert len(lines) == 10
    for card in lines:
        assert list(card) == [*CARD_RECORD_KEYS, *CARD_ONLY_KEYS]
        record = TrialRecord.from_dict(card)
        assert record.success is None and record.initial_positions
        png = out / card["card_png"]
        assert png.is_file() and Image.open(png).size[0] > 400
        assert {o["id"] for o in card["objects"]} == set(card["initial_positions"])
        assert card["success_rule"]
    sheet = (out / "cards.html").read_text()
    assert all(card["instruction"].replace("'", "&#x27;") in sheet for card in lines)
    assert sheet.count("class='card'") == 10
    # a relational-control pair: the same instruction, one expecting action and one not
    pair = [c for c in lines if c["condition"] == "relational_control"]
    assert {c["expects_action"] for c in pair} == {True, False} and len({c["pair_id"] for c in pair}) == 1


def test_bad_names_exit_2_and_write_nothing(tmp_path):
    out = tmp_path / "cards"
    proc = _cli("spabench", "cards", "--tasks", "juggling", "--out", str(out))
    assert proc.returncode == 2 and "--tasks: unknown task 'juggling'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = _cli("spabench", "cards", "--tasks", "relative_size", "--conditions", "no_intervention", "--out", str(out))
    assert proc.returncode == 2 and "no trials" in proc.stderr
    assert not out.exists()
