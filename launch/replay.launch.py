"""Replay: a rosbag2 recording (MCAP or sqlite3) instead of the camera; the executor dry-runs on the simulator.

ros2 launch grounded_planner replay.launch.py bag:=/path/to/session model:=... base_url:=...
ros2 launch grounded_planner replay.launch.py bag:=out/demo/scene planner_backend:=replay \
    replay_file:=out/demo/recorded_plan.jsonl namespace:=robot1     # the demo's recording, no model server
Every node reads config/replay.yaml; the arguments below override it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from grounded_planner.ros import launch_args
from grounded_planner.ros.launch_args import DEFAULT_LOG_DIR

SHARE = get_package_share_directory(launch_args.PACKAGE)

ARGUMENTS = [
    (
        "namespace",
        "",
        "ROS namespace of every node ('' = the root); the bag's topics play inside it "
        "(/camera/camera/... -> /NAMESPACE/camera/camera/...), so two replays share one graph",
    ),
    ("bag", "", "rosbag2 folder, .mcap or .db3 file to play (required)"),
    ("rate", "1.0", "playback speed relative to the recording (a number > 0)"),
    ("loop", "true", "true | false: start the bag again at its end"),
    *launch_args.PLANNER_ARGUMENTS,
    (
        "extrinsics_file",
        "",
        "camera -> robot base calibration YAML of the recorded cell ('' = the one stored "
        "beside the bag: BAG/extrinsics.yaml, or extrinsics.yaml or calibration/extrinsics.yaml next to it, as the "
        "demo writes; none there is an error)",
    ),
    (
        "log_dir",
        DEFAULT_LOG_DIR,
        "folder for rollout logs (~ is expanded; a relative path is relative to the directory ros2 launch runs in)",
    ),
    *launch_args.CONSOLE_ARGUMENTS,
    (
        "config",
        os.path.join(SHARE, "config", "replay.yaml"),
        "parameters file for every node (~ is expanded; a missing file is an error)",
    ),
]


def _nodes(context):
    arg = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    ns = launch_args.namespace(arg["namespace"])
    # launch_ros reads the parameters file itself: ~ must be expanded here (the nodes expand their own paths)
    config = launch_args.existing_file("config", arg["config"], "the parameters file for every node")
    if not arg["bag"]:
        raise launch_args.LaunchArgumentError("launch argument bag:= is required (a rosbag2 folder, .mcap or .db3)")
    bag = os.path.expanduser(arg["bag"])
    if not os.path.exists(bag):
        raise launch_args.LaunchArgumentError(f"launch argument bag:={arg['bag']}: no such file or folder")
    rate = launch_args.positive_number("rate", arg["rate"])
    loop = launch_args.boolean("loop", arg["loop"])
    planner = launch_args.planner(arg["planner_backend"], arg["model"], arg["replay_file"])
    extrinsics_file = (
        launch_args.existing_file("extrinsics_file", arg["extrinsics_file"], "camera -> base calibration YAML")
        if arg["extrinsics_file"]
        else launch_args.extrinsics_beside_bag(bag)
    )
    log_dir = launch_args.log_dir(arg["log_dir"])
    overrides = {
        "bag_player": {"bag": os.path.abspath(bag), "rate": rate, "loop": loop},
        "planner": {
            **planner,  # backend, model, replay_file
            "base_url": arg["base_url"],
            "extrinsics_file": extrinsics_file,
        },
        "backprojection": {"extrinsics_file": extrinsics_file},
        "executor": {},
        "rollout_logger": {"log_dir": log_dir},
        **launch_args.console(arg, log_dir),
    }
    return [Node(**kwargs) for kwargs in launch_args.nodes(ns, config, overrides)]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_nodes)]
    )
