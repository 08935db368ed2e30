"""The launch files' own code run with the launch/launch_ros stand-ins of helpers/fake_moveit_configs.py (launch and
launch_ros are not installable here; test_ros_launch_real.py runs them for real where they are): namespace:= puts
every node of a stack in it, the camera topics follow realsense-ros's camera_namespace/camera_name, and a bad
argument stops the launch with a message naming it."""

from __future__ import annotations

import sys

import pytest

from conftest import REPO
from grounded_planner.ros.launch_args import LaunchArgumentError
from helpers.launch_files import FRANKA_ROS2, load_launch

pytest.importorskip("ament_index_python")


def test_real_launch_in_a_namespace_with_its_own_camera_names(tmp_path, monkeypatch):
    defaults, make_nodes, nodes = load_launch("real.launch.py", tmp_path, monkeypatch)
    make_nodes(
        {
            **defaults,
            "namespace": "robot2",
            "model": "Qwen/Qwen3-VL-8B-Instruct",
            "camera_name": "d435",
            "dry_run": "true",
        }
    )
    assert sorted(node["name"] for node in nodes) == [
        "backprojection",
        "camera",
        "executor",
        "planner",
        "rollout_logger",
    ]
    assert {node["namespace"] for node in nodes} == {"robot2"}  # relative: under a pushed namespace too
    by_name = {node["name"]: node["parameters"][1] for node in nodes}
    assert by_name["camera"]["camera_namespace"] == "camera/d435"  # relative: /robot2/camera/d435/color/image_raw
    for name in ("planner", "rollout_logger"):
        assert by_name[name]["color_topic"] == "camera/d435/color/image_raw"
    assert by_name["backprojection"]["depth_topic"] == "camera/d435/aligned_depth_to_color/image_raw"
    assert by_name["executor"]["dry_run"] is True
    assert by_name["rollout_logger"]["log_dir"].endswith("/.ros/grounded_planner/rollouts")


@pytest.mark.parametrize(
    "overrides,words",
    [
        ({"model": ""}, "model:= is required with planner_backend:=openai"),
        ({"dry_run": "yes please"}, "dry_run:=yes please is not a boolean"),
        ({"config": "/missing.yaml"}, "config:=/missing.yaml: no such file"),
        ({"robot": "ur5"}, "robot:=ur5 must be one of franka | so101"),
        ({"robot": "so101", "executor_backend": "moveit"}, "robot:=so101 needs moveit_config:=PACKAGE"),
        ({"namespace": "robot 2"}, "namespace:=robot 2"),
    ],
)
def test_real_launch_refuses_bad_arguments_by_name(tmp_path, monkeypatch, overrides, words):
    defaults, make_nodes, nodes = load_launch("real.launch.py", tmp_path, monkeypatch)
    with pytest.raises(LaunchArgumentError) as info:
        make_nodes({**defaults, "model": "m", **overrides})
    assert words in str(info.value)
    assert not nodes


def test_real_launch_without_moveit_says_what_to_install(tmp_path, monkeypatch):
    defaults, make_nodes, nodes = load_launch("real.launch.py", tmp_path, monkeypatch)
    monkeypatch.setitem(sys.modules, "moveit_configs_utils", None)  # import fails as without MoveIt
    with pytest.raises(LaunchArgumentError, match=r"executor_backend:=moveit needs MoveIt 2 .*apt install ros-"):
        make_nodes({**defaults, "model": "m", "executor_backend": "moveit"})


def test_replay_launch_of_the_demos_bag_uses_the_calibration_beside_it(tmp_path, monkeypatch):
    defaults, make_nodes, nodes = load_launch("replay.launch.py", tmp_path, monkeypatch)
    bag = tmp_path / "demo" / "scene"
    bag.mkdir(parents=True)
    (bag / "metadata.yaml").write_text("{}\n")
    plans = tmp_path / "demo" / "recorded_plan.jsonl"
    plans.write_text("{}\n")
    with pytest.raises(LaunchArgumentError, match="no calibration is stored beside it"):
        make_nodes({**defaults, "bag": str(bag), "planner_backend": "replay", "replay_file": str(plans)})
    calibration = tmp_path / "demo" / "calibration" / "extrinsics.yaml"
    calibration.parent.mkdir()
    calibration.write_text("x: 1\n")
    with pytest.raises(LaunchArgumentError, match=r"rate:=fast must be a number > 0"):
        make_nodes(
            {**defaults, "bag": str(bag), "rate": "fast", "planner_backend": "replay", "replay_file": str(plans)}
        )
    with pytest.raises(LaunchArgumentError, match=r"loop:=sometimes is not a boolean"):
        make_nodes(
            {**defaults, "bag": str(bag), "loop": "sometimes", "planner_backend": "replay", "replay_file": str(plans)}
        )
    make_nodes(
        {
            **defaults,
            "bag": str(bag),
            "planner_backend": "replay",
            "replay_file": str(plans),
            "namespace": "robot1",
            "rate": "2",
            "loop": "false",
        }
    )
    assert {node["namespace"] for node in nodes} == {"robot1"}
    by_name = {node["name"]: node["parameters"][-1] for node in nodes}
    assert by_name["planner"]["extrinsics_file"] == str(calibration) == by_name["backprojection"]["extrinsics_file"]
    assert by_name["bag_player"]["rate"] == 2.0 and by_name["bag_player"]["loop"] is False


def test_franka_ros2_before_v3_4_0_is_refused_naming_the_version(tmp_path, monkeypatch):
    """franka_bringup/urdf/franka_arm.urdf.xacro exists from franka_ros2 v3.4.0 on; MoveIt's builder only warns
    when it is missing (the double does too), and moveit_py then waited 10 s for a robot description."""
    import logging

    from helpers.fake_moveit_configs import MoveItConfigsBuilder

    defaults, make_nodes, nodes = load_launch(
        "real.launch.py", tmp_path, monkeypatch, {"grounded_planner": REPO, **FRANKA_ROS2}
    )
    urdf = tmp_path / "ament_prefix" / "share" / "franka_bringup" / "urdf" / "franka_arm.urdf.xacro"
    urdf.unlink()  # a v3.3 layout
    monkeypatch.setattr(logging, "warning", lambda *args: warned.append(args))
    warned: list = []
    builder = MoveItConfigsBuilder("fr3", package_name="franka_fr3_moveit_config")
    builder.robot_description(file_path=str(urdf))
    assert warned and builder._parts["robot_description"] == {}  # no robot_description is written
    with pytest.raises(LaunchArgumentError, match=r"franka_ros2 v3\.4\.0"):
        make_nodes({**defaults, "model": "m", "executor_backend": "moveit"})
    assert not nodes
