"""Replay: a rosbag2 recording (MCAP or sqlite3) instead of the camera; the executor dry-runs on the simulator.

ros2 launch grounded_planner replay.launch.py bag:=/path/to/session model:=... base_url:=...
Every node reads config/replay.yaml; the arguments below override it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "grounded_planner"
SHARE = get_package_share_directory(PACKAGE)

ARGUMENTS = [
    ("bag", "", "rosbag2 folder, .mcap or .db3 file to play (required)"),
    ("rate", "1.0", "playback speed relative to the recording"),
    ("loop", "true", "start the bag again at its end"),
    ("planner_backend", "openai", "openai | gemini | transformers | replay"),
    ("model", "", "VLM model name as the server knows it"),
    ("base_url", "http://localhost:8000/v1", "OpenAI-compatible server root including /v1"),
    ("replay_file", "", "JSONL of recorded plans for planner_backend:=replay (~ is expanded)"),
    ("extrinsics_file", os.path.join(SHARE, "calibration", "realsense_d435_eye_to_hand.yaml"),
     "camera -> robot base calibration YAML of the recorded cell"),
    ("log_dir", "rollouts", "folder for rollout logs (~ is expanded)"),
    ("config", os.path.join(SHARE, "config", "replay.yaml"), "parameters file for every node (~ is expanded)"),
]


def _nodes(context):
    arg = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    # launch_ros reads the parameters file itself: ~ must be expanded here (the nodes expand their own paths)
    arg["config"] = os.path.expanduser(arg["config"])
    if not arg["bag"]:
        raise RuntimeError("bag:=PATH is required (a rosbag2 folder, .mcap or .db3)")
    config = arg["config"]
    return [
        Node(package=PACKAGE, executable="bag_player_node", name="bag_player", output="screen",
             parameters=[config, {"bag": arg["bag"], "rate": float(arg["rate"]),
                                  "loop": arg["loop"].lower() in ("true", "1", "yes")}]),
        Node(package=PACKAGE, executable="planner_node", name="planner", output="screen",
             parameters=[config, {"backend": arg["planner_backend"], "model": arg["model"],
                                  "base_url": arg["base_url"], "extrinsics_file": arg["extrinsics_file"],
                                  "replay_file": arg["replay_file"]}]),
        Node(package=PACKAGE, executable="backprojection_node", name="backprojection", output="screen",
             parameters=[config, {"extrinsics_file": arg["extrinsics_file"]}]),
        Node(package=PACKAGE, executable="executor_node", name="executor", output="screen",
             parameters=[config]),
        Node(package=PACKAGE, executable="rollout_logger_node", name="rollout_logger", output="screen",
             parameters=[config, {"log_dir": arg["log_dir"]}]),
    ]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_nodes)])
