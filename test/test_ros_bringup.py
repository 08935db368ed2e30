"""`grounded-planner bringup --config config/replay.yaml` in a child process: the profile's nodes in one process
serve a client in another (bag as camera, planner against a local VLM server, back-projection from the bag's depth)."""

import subprocess

import pytest

from conftest import REPO, requires_ros
from helpers.bringup import CLI, start_replay_bringup, stop_bringup
from helpers.ros_wait import spin_until
from helpers.tabletop import CUBE_M, INSTRUCTION, SCENE_COLORS, base_point

pytestmark = [requires_ros, pytest.mark.ros]


def test_replay_profile_serves_plans_from_the_bag(tmp_path, rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.ros.client import GroundedPlannerClient
    from grounded_planner.vlm.fake_server import FakeVLMServer

    with FakeVLMServer(SCENE_COLORS) as vlm:
        child = start_replay_bringup(tmp_path, vlm.base_url)
        node = rclpy.create_node("bringup_probe", context=rclpy_context)
        try:
            executor = SingleThreadedExecutor(context=rclpy_context)
            executor.add_node(node)
            client = GroundedPlannerClient(node, executor=executor)
            planned = client.plan(INSTRUCTION, backproject=True, timeout_s=60.0, service_wait_s=60.0)
            assert planned.succeeded, client.last_error
            grasp = planned.plan.actions[0].target_3d
            assert grasp.frame == "fr3_link0" and grasp.method and grasp.width
            assert list(grasp.position) == pytest.approx(base_point(100.5, 120.5, CUBE_M), abs=0.01)
            dry = client.execute(planned.plan, dry_run=True, server_wait_s=30.0, timeout_s=60.0)
            assert dry.succeeded and dry.step_outcomes == ["ok", "ok"], client.last_error
            spin_until(
                executor,
                lambda: node.count_subscribers("/grounded_planner/plan_pixels") > 0,
                30.0,
                "backprojection node",
            )
        finally:
            node.destroy_node()
            out = stop_bringup(child)
    assert child.returncode == 0, out
    assert "bringup: rollout_logger, bag_player, planner, backprojection, executor, console running" in out
    assert "Traceback" not in out, out


def test_bringup_reports_a_bad_profile_in_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("planner:\n  ros__parameters: {backend: openai, modle: x}\n")
    proc = subprocess.run(
        [*CLI, "bringup", "--config", str(tmp_path / "bad.yaml")], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "grounded-planner bringup: node 'planner' has no parameter 'modle'"
    ), proc.stderr
