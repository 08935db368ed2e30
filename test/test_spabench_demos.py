"""`spabench demos`: the oracle's id executions written by LeRobot's own writer, read back by LeRobot, and `v2gp
segment` finds every grasp the oracle made (the loop from the benchmark's ID cells to V2GP training data)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("mujoco")
pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="LeRobot is installed by make setup")

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos") / "spabench_demos"
    proc = _cli(
        "spabench",
        "demos",
        "--tasks",
        "ordinal_position,counting",
        "--episodes",
        "1",
        "--first-seed",
        "1",
        "--robot",
        "so101",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


def test_lerobot_reads_the_demos(demos):
    out, report = demos
    assert report["per_task"] == {"ordinal_position": 1, "counting": 1}
    dataset = LeRobotDataset(repo_id="local/spabench_demos", root=out)
    assert dataset.meta.total_episodes == 2 and dataset.meta.robot_type == "so101_follower"
    assert dataset.meta.features["observation.state"]["names"][-1] == "gripper.pos"
    tasks = set(dataset.meta.tasks.index) if hasattr(dataset.meta.tasks, "index") else set(dataset.meta.tasks)
    assert any("block" in t and "bowl" in t for t in tasks)  # the instructions are the tasks
    frame = dataset[0]
    assert frame["observation.images.front"].shape[0] == 3  # a camera frame (C, H, W)


def test_v2gp_segment_finds_every_grasp(demos):
    out, report = demos
    proc = _cli("v2gp", "segment", "--dataset", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    segments = json.loads(proc.stdout)["episodes"]
    assert [len(segments[str(i)]) for i in range(report["episodes"])] == report["grasps"]
    assert all(g >= 1 for g in report["grasps"])


def test_an_existing_folder_is_refused(tmp_path):
    proc = _cli("spabench", "demos", "--tasks", "counting", "--episodes", "1", "--out", str(tmp_path))
    assert proc.returncode == 2 and "exists already" in proc.stderr
