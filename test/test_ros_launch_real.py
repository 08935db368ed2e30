"""real.launch.py under the real `launch`/`launch_ros` (as `ros2 launch` drives them), on a colcon install.

Runs where a ROS user has them: `launch_ros` importable and `grounded_planner` in the ament index (a sourced
colcon workspace). Elsewhere it skips. Checked: robot:=so101 hands the planner the SO-101 example extrinsics
(parent base_link, the executor's base frame), replay_file reaches the planner, ~ in paths is expanded, and a
camera that cannot start says why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import requires_ros
from helpers.ros_wait import output_of

launch_ros = pytest.importorskip("launch_ros")
pytestmark = [requires_ros, pytest.mark.ros, pytest.mark.slow]


def _share() -> str:
    try:
        from ament_index_python.packages import get_package_share_directory

        return get_package_share_directory("grounded_planner")
    except (ImportError, LookupError, ValueError):
        pytest.skip("grounded_planner is not installed in an ament prefix (source a colcon workspace)")


DRIVER = textwrap.dedent("""
    import sys
    from launch import LaunchDescription, LaunchService
    from launch.actions import IncludeLaunchDescription, Shutdown, TimerAction
    from launch.launch_description_sources import PythonLaunchDescriptionSource

    path, seconds, *assignments = sys.argv[1:]
    service = LaunchService(argv=assignments)
    service.include_launch_description(LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(path),
                                 launch_arguments=[a.split(":=", 1) for a in assignments]),
        TimerAction(period=float(seconds), actions=[Shutdown(reason="test over")]),
    ]))
    sys.exit(service.run())
""")


def _parameter(node, executor, target: str, name: str):
    from rcl_interfaces.srv import GetParameters

    from helpers.ros_wait import call

    client = node.create_client(GetParameters, f"/{target}/get_parameters")
    reply = call(executor, client, GetParameters.Request(names=[name]), 30.0, f"{target}'s parameter {name}")
    return reply.values[0].string_value


def test_real_launch_for_so101_under_ros2_launch(tmp_path, rclpy_context, monkeypatch):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.geometry.extrinsics import Extrinsics

    share = _share()
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "plans.jsonl").write_text("")
    child = subprocess.Popen(
        [sys.executable, "-c", DRIVER, os.path.join(share, "launch", "real.launch.py"), "60",
         "robot:=so101", "log_dir:=~/so101_rollouts", "planner_backend:=replay", "replay_file:=~/plans.jsonl"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node = rclpy.create_node("launch_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        extrinsics = _parameter(node, executor, "planner", "extrinsics_file")
        replay_file = _parameter(node, executor, "planner", "replay_file")
        backprojection_extrinsics = _parameter(node, executor, "backprojection", "extrinsics_file")
    finally:
        node.destroy_node()
        out = output_of(child, 120.0)
    assert Extrinsics.load(extrinsics).parent_frame == "base_link", extrinsics
    assert backprojection_extrinsics == extrinsics
    assert replay_file == "~/plans.jsonl"  # as given; the node expands it when it builds the planner
    assert f"logging rollouts under {tmp_path / 'so101_rollouts'}" in out, out
    assert not (tmp_path / "~").exists()
    assert "camera" in out and "configure failed" in out, out  # no RealSense here: the camera says why


def test_replay_launch_on_a_compressed_equidistant_real_bag_answers_plans(tmp_path, rclpy_context, monkeypatch):
    """The replay launch file with image_transport topics in the user's own parameters file."""
    import rclpy
    import yaml
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.ros.convert import plan_from_msg
    from helpers.realdata import (COLOR_COMPRESSED, DEPTH_COMPRESSED, ask_every_plan, real_frame,
                                  write_compressed_equidistant_bag, write_replay_file)

    pytest.importorskip("pyrealsense2")
    share = _share()
    monkeypatch.setenv("HOME", str(tmp_path))
    bag = write_compressed_equidistant_bag(tmp_path / "bag", real_frame())
    write_replay_file(tmp_path / "plans.jsonl")
    config = yaml.safe_load(open(os.path.join(share, "config", "replay.yaml")))
    config["planner"]["ros__parameters"].update(color_topic=COLOR_COMPRESSED, depth_topic=DEPTH_COMPRESSED, frame_wait_s=30.0)
    config["backprojection"]["ros__parameters"].update(depth_topic=DEPTH_COMPRESSED)
    config["rollout_logger"]["ros__parameters"].update(color_topic=COLOR_COMPRESSED, depth_topic=DEPTH_COMPRESSED)
    (tmp_path / "compressed.yaml").write_text(yaml.safe_dump(config))
    child = subprocess.Popen(
        [sys.executable, "-c", DRIVER, os.path.join(share, "launch", "replay.launch.py"), "60", "bag:=~/bag",
         "config:=~/compressed.yaml", "planner_backend:=replay", "replay_file:=~/plans.jsonl", "log_dir:=~/rollouts"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node = rclpy.create_node("launch_replay_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        for response in ask_every_plan(node, executor).values():
            assert response.success, response.message
            targets = plan_from_msg(response.plan).target_set()
            assert len(targets.targets) == 2 and targets.frame  # both actions got a 3D target
        assert {"bag_player", "planner", "backprojection", "rollout_logger"} <= set(node.get_node_names())
    finally:
        node.destroy_node()
        out = output_of(child, 120.0)
    assert "Traceback" not in out, out
    for name in ("bag_player_node", "planner_node", "backprojection_node", "executor_node", "rollout_logger_node"):
        assert f"[{name}-" in out and f"[ERROR] [{name}-" not in out, out  # started, and not one died
    assert (tmp_path / "rollouts").is_dir()  # log_dir:=~/rollouts, expanded
