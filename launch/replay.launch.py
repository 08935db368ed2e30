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
    ("console", "false", "true: also start the operator console (console_node), a web page to watch, instruct, "
     "approve, stop and label"),
    ("console_host", "127.0.0.1", "console: address to listen on (any but loopback requires a token)"),
    ("console_port", "8080", "console: TCP port"),
    ("console_token", "", "console: token for a non-loopback host ('' there = generated and printed once)"),
    ("config", os.path.join(SHARE, "config", "replay.yaml"), "parameters file for every node (~ is expanded)"),
]


def _nodes(context):
    arg = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    # launch_ros reads the parameters file itself: ~ must be expanded here (the nodes expand their own paths)
    arg["config"] = os.path.expanduser(arg["config"])
    if not arg["bag"]:
        raise RuntimeError("bag:=PATH is required (a rosbag2 folder, .mcap or .db3)")
    config = arg["config"]
    nodes = [
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
    if arg["console"].lower() in ("true", "1", "yes"):
        nodes.append(Node(package=PACKAGE, executable="console_node", name="console", output="screen",
                          parameters=[config, {"host": arg["console_host"], "port": int(arg["console_port"]),
                                               "token": arg["console_token"], "rollouts_dir": arg["log_dir"]}]))
    return nodes


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_nodes)])
