"""`grounded-planner demo` (what `make demo` runs) end to end: sample scene bag -> planner -> back-projection ->
executor on the simulator -> rollout, with the recorded plan and with a VLM server the test runs."""

import importlib.util
import json
import os
import subprocess

import pytest

from conftest import REPO, requires_ros
from helpers.bringup import CLI

pytestmark = [
    requires_ros,
    pytest.mark.ros,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)"),
]
VLM_VARS = ("GP_VLM_BASE_URL", "GP_VLM_MODEL", "GP_VLM_BACKEND", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


def run_demo(out_dir, ros_domain, **env_vars):
    env = {k: v for k, v in os.environ.items() if k not in VLM_VARS}
    env.update(env_vars)
    return subprocess.run(
        [*CLI, "demo", "--out", str(out_dir)], cwd=REPO, env=env, capture_output=True, text=True, timeout=240
    )


def test_demo_with_the_recorded_plan_puts_the_box_in_the_bowl(tmp_path, ros_domain):
    from grounded_planner.rollout.record import load_rollout

    proc = run_demo(tmp_path, ros_domain)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for stage in ("[1/6] sample scene", "[3/6] planning", "[4/6] back-projection", "[5/6] execution", "[6/6] rollout"):
        assert stage in out
    assert "REPLAY of a recorded plan" in out and "GP_VLM_BASE_URL=" in out, (
        "must say which planner and how to plug in a VLM"
    )
    assert "task done in the simulator: True" in out
    assert (tmp_path / "overlay.png").is_file() and (tmp_path / "scene" / "metadata.yaml").is_file()
    rollouts = sorted((tmp_path / "rollouts").iterdir())
    assert len(rollouts) == 1
    record = load_rollout(rollouts[0]).data
    assert record["status"] == "complete" and record["success"] is True and record["label_source"] == "simulator"
    assert [s["outcome"] for s in record["steps"]] == ["ok", "ok"] and record["targets"]["frame"] == "base_link"
    assert "Traceback" not in out
    # the client node used to be destroyed under the spinning executor: a future then held this error
    assert "never retrieved" not in out and "cannot use Destroyable" not in out, out


def test_demo_uses_the_configured_vlm(tmp_path, ros_domain):
    """GP_VLM_BASE_URL/GP_VLM_MODEL point the demo at a VLM server (here: the vlm layer's stand-in, scripted to
    answer the scene's ground-truth plan in Qwen3-VL's 0-1000 convention)."""
    first = run_demo(tmp_path / "replay", ros_domain)
    assert first.returncode == 0, first.stdout + first.stderr
    recorded = json.loads((tmp_path / "replay" / "recorded_plan.jsonl").read_text())["plan"]
    w, h = recorded["image_size"]
    rel = lambda xs: [round(v / s * 1000) for v, s in zip(xs, [w, h, w, h])]  # noqa: E731
    answer = {
        "actions": [
            {"type": "grasp", "object": "red box", "bbox_2d": rel(recorded["actions"][0]["bbox"])},
            {
                "type": "place",
                "object": "red box",
                "target": "blue bowl",
                "point_2d": rel(recorded["actions"][1]["point"]),
            },
        ],
        "reason": "",
    }
    from grounded_planner.vlm.fake_server import FakeVLMServer, Reply

    with FakeVLMServer() as vlm:
        vlm.script.append(Reply(content=json.dumps(answer)))
        proc = run_demo(tmp_path / "vlm", ros_domain, GP_VLM_BASE_URL=vlm.base_url, GP_VLM_MODEL="qwen3-vl-test")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert len(vlm.requests) == 1
    assert f"planner: openai model qwen3-vl-test at {vlm.base_url}" in out and "REPLAY" not in out
    assert "task done in the simulator: True" in out
