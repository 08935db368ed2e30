"""`spabench session` against a real bringup in another process (the replay profile: a bag as the camera, the planner
against a local VLM server, the executor dry-running on the simulator): the operator's answers at the terminal
prompts label each trial, the session stops at 'q' and resumes where it stopped, and `spabench report` reads the
folder like a simulated run."""

from __future__ import annotations

import json

import pytest

from conftest import requires_ros
from helpers.bringup import start_replay_bringup, stop_bringup
from helpers.tabletop import INSTRUCTION, SCENE_COLORS

from grounded_planner.spabench.report import build_report, load_trials
from grounded_planner.spabench.session import Session, TerminalOperator
from grounded_planner.spabench.trial import TrialSpec

pytestmark = [requires_ros, pytest.mark.ros]


def card(seed: int, expects_action: bool = True) -> dict:
    condition = "id" if expects_action else "no_intervention"
    return {
        "trial_id": f"object_state/{condition}/{seed}",
        "task": "object_state",
        "condition": condition,
        "seed": seed,
        "robot": "fr3",
        "planner": "",
        "instruction": INSTRUCTION,
        "expects_action": expects_action,
        "pair_id": None,
        "cell": None,
        "spec": TrialSpec(target="red_cube", receptacle=None, distractors=()).to_dict(),
        "initial_positions": {"red_cube": [0.5, 0.0, 0.02]},
        "objects": [],
        "success_rule": "on the table",
        "card_png": f"cards/object_state_{condition}_{seed}.png",
        "card_html": "cards.html",
    }


class Answers:
    """The operator's typed lines, in order; the prompts they answered are kept to check."""

    def __init__(self, lines):
        self.lines = list(lines)
        self.prompts = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.lines.pop(0)


def test_session_labels_stops_and_resumes_on_a_live_graph(tmp_path, rclpy_context):
    from rclpy.executors import SingleThreadedExecutor
    import rclpy

    from grounded_planner.ros.spabench_stack import RosStack
    from grounded_planner.vlm.fake_server import FakeVLMServer

    cards_dir = tmp_path / "cards"
    cards_dir.mkdir()
    (cards_dir / "cards.jsonl").write_text(
        "".join(json.dumps(c) + "\n" for c in [card(0), card(1), card(2, expects_action=False)])
    )
    with FakeVLMServer(SCENE_COLORS) as vlm:
        child = start_replay_bringup(tmp_path, vlm.base_url)
        node = rclpy.create_node("spabench_session_probe", context=rclpy_context)
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        stack = RosStack(node, executor=executor, plan_timeout_s=60.0, execute_timeout_s=60.0, frame_wait_s=60.0)
        try:
            # card 0: run, confirm the suggestion is wrong -> failure, mode 4 (grasp_failure), a note;
            # card 1: run, then q at the verdict: nothing recorded for it
            first = Answers(["", "n", "4", "cube slid away", "", "q"])
            summary = Session(cards_dir, stack, TerminalOperator(ask=first), planner="qwen3-vl-test").run()
            assert summary.recorded == ["object_state/id/0"] and summary.stopped and summary.remaining == 2
            assert not first.lines
            rec = load_trials(cards_dir)[0]
            assert (rec["success"], rec["failure_mode"], rec["outcome_source"]) == (False, "grasp_failure", "operator")
            assert rec["planner"] == "qwen3-vl-test" and rec["final_positions"] is None
            rollout = json.loads((cards_dir / rec["rollout"] / "rollout.json").read_text())
            assert rollout["label_source"] == "operator" and rollout["notes"] == "cube slid away"
            assert rollout["plan"]["actions"][0]["type"] == "grasp"  # the live planner's plan was recorded
            assert [s["outcome"] for s in rollout["steps"]] == ["ok", "ok"]  # the executor's dry run
            # resume: card 1 runs again (success), card 2 (no action expected; the arm acts) -> the stack suggests
            # wrong_object, the operator takes the suggestion with Enter
            second = Answers(["", "y", "", "n", "", ""])
            summary = Session(cards_dir, stack, TerminalOperator(ask=second), planner="qwen3-vl-test").run()
            assert summary.recorded == ["object_state/id/1", "object_state/no_intervention/2"]
            assert summary.remaining == 0 and not summary.stopped
            assert any("(Enter = 2)" in p for p in second.prompts)  # wrong_object offered as the default
        finally:
            stack.destroy()
            node.destroy_node()
            out = stop_bringup(child)
    assert "Traceback" not in out, out
    records = load_trials(cards_dir)
    assert [(r["trial_id"], r["success"], r["failure_mode"]) for r in records] == [
        ("object_state/id/0", False, "grasp_failure"),
        ("object_state/id/1", True, None),
        ("object_state/no_intervention/2", False, "wrong_object"),
    ]
    rows = {r["row"]: r for r in build_report(records)["policies"]["qwen3-vl-test"]["aggregate"]}
    assert (rows["ID"]["k"], rows["ID"]["n"]) == (1, 2)


def test_terminal_operator_insists_on_a_valid_answer():
    from grounded_planner.spabench.session import Suggestion

    import io

    ask = Answers(["x", "s"])
    out = io.StringIO()
    op = TerminalOperator(ask=ask, out=out)
    assert op.stage(card(0), 1, 3) == "skip"
    assert "'x': answer Enter, s or q" in out.getvalue()
    ask.lines = ["maybe", "n", "99", "", "3", ""]
    label = op.confirm(card(0), Suggestion(None, None, "cannot tell"))
    assert (label.success, label.failure_mode, label.notes) == (False, "wrong_instance", "")


def test_session_cli_without_cards_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    proc = subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main", "spabench", "session", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cards.jsonl: no such file" in proc.stderr
    assert not (tmp_path / "trials.jsonl").exists()
