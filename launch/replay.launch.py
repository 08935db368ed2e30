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

PACKAGE = "grounded_planner"
SHARE = get_package_share_directory(PACKAGE)

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
    ("planner_backend", "openai", "openai | gemini | transformers | replay | decoupled"),
    (
        "model",
        "",
        "VLM model name as the server knows it (required by openai, transformers and decoupled; "
        "gemini defaults to gemini-2.5-flash; replay needs none)",
    ),
    ("base_url", "http://localhost:8000/v1", "OpenAI-compatible server root including /v1"),
    ("replay_file", "", "JSONL of recorded plans for planner_backend:=replay (~ is expanded)"),
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
    (
        "console",
        "false",
        "true: also start the operator console (console_node), a web page to watch, instruct, approve, stop and label",
    ),
    ("console_host", "127.0.0.1", "console: address to listen on (any but loopback requires a token)"),
    ("console_port", "8080", "console: TCP port"),
    ("console_token", "", "console: token for a non-loopback host ('' there = generated and printed once)"),
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
    console = launch_args.boolean("console", arg["console"])
    console_port = int(launch_args.positive_number("console_port", arg["console_port"])) if console else 0
    nodes = [
        Node(
            package=PACKAGE,
            executable="bag_player_node",
            name="bag_player",
            namespace=ns,
            output="screen",
            parameters=[config, {"bag": os.path.abspath(bag), "rate": rate, "loop": loop}],
        ),
        Node(
            package=PACKAGE,
            executable="planner_node",
            name="planner",
            namespace=ns,
            output="screen",
            parameters=[
                config,
                {
                    "backend": planner["backend"],
                    "model": planner["model"],
                    "base_url": arg["base_url"],
                    "extrinsics_file": extrinsics_file,
                    "replay_file": planner["replay_file"],
                },
            ],
        ),
        Node(
            package=PACKAGE,
            executable="backprojection_node",
            name="backprojection",
            namespace=ns,
            output="screen",
            parameters=[config, {"extrinsics_file": extrinsics_file}],
        ),
        Node(
            package=PACKAGE,
            executable="executor_node",
            name="executor",
            namespace=ns,
            output="screen",
            parameters=[config],
        ),
        Node(
            package=PACKAGE,
            executable="rollout_logger_node",
            name="rollout_logger",
            namespace=ns,
            output="screen",
            parameters=[config, {"log_dir": log_dir}],
        ),
    ]
    if console:
        nodes.append(
            Node(
                package=PACKAGE,
                executable="console_node",
                name="console",
                namespace=ns,
                output="screen",
                parameters=[
                    config,
                    {
                        "host": arg["console_host"],
                        "port": console_port,
                        "token": arg["console_token"],
                        "rollouts_dir": log_dir,
                    },
                ],
            )
        )
    return nodes


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_nodes)]
    )
