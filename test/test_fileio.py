"""fileio.append_line, the one append of trials.jsonl's three writers (`spabench run`, `spabench session`, the
console's evaluation session): a file whose last line lost its newline (an editor that strips it) must not have the
next trial run into that line, which would make both unreadable to `spabench report`."""

from __future__ import annotations

import json

from grounded_planner.fileio import append_line
from grounded_planner.spabench.report import load_trials, trials_path
from grounded_planner.spabench.trial import TrialRecord, TrialSpec


def trial(seed: int) -> str:
    record = TrialRecord(
        task="relational_placement",
        condition="id",
        seed=seed,
        robot="gp5",
        planner="p",
        instruction="put the red cube in the tray",
        expects_action=True,
        spec=TrialSpec(target="red_cube", receptacle="tray", receptacle_radius_m=0.085),
        initial_positions={"red_cube": (0.3, 0.0, 0.025), "tray": (0.5, 0.0, 0.015)},
    )
    return json.dumps({**record.to_dict(), "success": True})


def test_a_line_appended_after_a_last_line_with_no_newline_is_a_line_of_its_own(tmp_path):
    path = trials_path(tmp_path)
    path.write_text(trial(0))  # its newline stripped by an editor
    written = append_line(path, trial(1))
    assert written == len(trial(1)) + 2  # the newline the last line lacked, then the line and its own
    assert [r["seed"] for r in load_trials(tmp_path)] == [0, 1]
    assert path.read_text().endswith("\n")


def test_a_first_line_starts_the_file_and_the_next_follows_it_with_nothing_between(tmp_path):
    path = trials_path(tmp_path)
    assert append_line(path, trial(0)) == len(trial(0)) + 1
    assert append_line(path, trial(1)) == len(trial(1)) + 1
    assert path.read_text() == trial(0) + "\n" + trial(1) + "\n"
