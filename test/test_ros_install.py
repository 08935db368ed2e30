"""What a ROS install user meets: per-robot extrinsics, launch arguments, ~ in paths, a camera that says why not."""

from __future__ import annotations

import os
import time

import pytest

from conftest import REPO, requires_ros, spawn_python
from helpers.launch_files import launch_table
from helpers.ros_wait import stop_process


@pytest.mark.parametrize("robot", ["franka", "so101"])
def test_each_robots_default_extrinsics_end_in_the_frame_its_executor_expects(robot):
    from grounded_planner.geometry.extrinsics import Extrinsics

    backend, base_frame, executor_config, extrinsics = launch_table("real.launch.py", "ROBOTS")[robot]
    calibration = Extrinsics.load(REPO / extrinsics)
    assert calibration.parent_frame == base_frame, (robot, extrinsics)
    assert calibration.child_frame == "camera_color_optical_frame"


@pytest.mark.parametrize("name", ["real.launch.py", "replay.launch.py"])
def test_launch_files_offer_replay_file_and_hand_it_to_the_planner(name, tmp_path, monkeypatch):
    pytest.importorskip("ament_index_python")
    from helpers.launch_files import EVERY_NODE, launched_nodes

    assert "replay_file" in {a[0] for a in launch_table(name, "ARGUMENTS")}
    plans = tmp_path / "plans.jsonl"
    plans.write_text("{}\n")
    chosen = {**EVERY_NODE[name], "planner_backend": "replay", "replay_file": str(plans)}
    planner = next(node for node in launched_nodes(name, chosen, tmp_path, monkeypatch) if node["name"] == "planner")
    assert planner["parameters"][1]["backend"] == "replay" and planner["parameters"][1]["replay_file"] == str(plans)
    # checked by launch_args.planner: a missing file is refused naming replay_file:=
    from grounded_planner.ros.launch_args import LaunchArgumentError

    with pytest.raises(LaunchArgumentError, match=r"replay_file:=/no/plans.jsonl: no such file"):
        launched_nodes(name, {**chosen, "replay_file": "/no/plans.jsonl"}, tmp_path, monkeypatch)


def test_tilde_paths_are_expanded_for_every_path_parameter(monkeypatch, tmp_path):
    from grounded_planner.ros.params import expand_path, resolve_data_path

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "cell.yaml").write_text("x: 1\n")
    assert resolve_data_path("~/cell.yaml") == str(tmp_path / "cell.yaml")
    assert expand_path("~/rollouts") == str(tmp_path / "rollouts")
    assert resolve_data_path("calibration/so101_d435_eye_to_hand.yaml").endswith(
        "calibration/so101_d435_eye_to_hand.yaml"
    )


@requires_ros
def test_rollout_logger_writes_under_the_home_folder_for_a_tilde_log_dir(monkeypatch, tmp_path, rclpy_context):
    from rclpy.parameter import Parameter

    from grounded_planner.ros.rollout_logger_node import RolloutLoggerNode

    monkeypatch.setenv("HOME", str(tmp_path))
    node = RolloutLoggerNode(
        context=rclpy_context, parameter_overrides=[Parameter("log_dir", Parameter.Type.STRING, "~/rollouts")]
    )
    try:
        assert node.log_dir == tmp_path / "rollouts"
    finally:
        node.destroy_node()


@requires_ros
def test_camera_node_says_why_it_cannot_start_when_pyrealsense2_is_missing(tmp_path, ros_domain):
    # a stand-in that fails to import the way a missing module does (pyrealsense2 is installed in this venv)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pyrealsense2.py").write_text("raise ModuleNotFoundError(\"No module named 'pyrealsense2'\")\n")
    os.environ["PYTHONPATH"] = f"{shim}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    try:
        child = spawn_python(["-m", "grounded_planner.ros.camera_node"])
    finally:
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]
    deadline = time.monotonic() + 10.0  # configure runs at startup (autostart): seconds, with slack
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    out = stop_process(child)
    assert "pyrealsense2 cannot be imported" in out and "python3-pyrealsense2-pip" in out, out
    assert "Traceback" not in out, out
