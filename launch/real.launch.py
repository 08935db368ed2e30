"""Real cell: RealSense camera, VLM planner, back-projection, executor on the robot, rollout logger.

ros2 launch grounded_planner real.launch.py robot:=franka model:=Qwen/Qwen3-VL-8B-Instruct \
    base_url:=http://gpu-box:8000/v1 extrinsics_file:=/path/to/extrinsics.yaml
Every node reads config/real.yaml; the arguments below override it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "grounded_planner"
SHARE = get_package_share_directory(PACKAGE)
# robot -> (executor backend, base frame, executor config: safety envelope, speeds, backend options,
#           example extrinsics whose parent is that base frame)
ROBOTS = {"franka": ("franky", "panda_link0", os.path.join(SHARE, "config", "execution_franka.yaml"),
                     os.path.join(SHARE, "calibration", "realsense_d435_eye_to_hand.yaml")),
          "so101": ("lerobot", "base_link", os.path.join(SHARE, "config", "execution_so101.yaml"),
                    os.path.join(SHARE, "calibration", "so101_d435_eye_to_hand.yaml"))}

# name, default, description (realsense-ros style table)
ARGUMENTS = [
    ("robot", "franka", "franka | so101: picks the executor backend and the base frame"),
    ("executor_backend", "", "override the backend the robot implies (franky | moveit | lerobot | sim)"),
    ("serial", "", "RealSense serial number ('' = first found)"),
    ("planner_backend", "openai", "openai | gemini | transformers | replay"),
    ("model", "", "VLM model name as the server knows it"),
    ("base_url", "http://localhost:8000/v1", "OpenAI-compatible server root including /v1"),
    ("replay_file", "", "JSONL of recorded plans for planner_backend:=replay (~ is expanded)"),
    ("extrinsics_file", "", "camera -> robot base calibration YAML ('' = the robot's example: "
     "calibration/realsense_d435_eye_to_hand.yaml for franka, calibration/so101_d435_eye_to_hand.yaml for so101)"),
    ("log_dir", "rollouts", "folder for rollout logs (~ is expanded)"),
    ("config", os.path.join(SHARE, "config", "real.yaml"), "parameters file for every node (~ is expanded)"),
]


def _nodes(context):
    arg = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    # launch_ros reads the parameters file itself: ~ must be expanded here (the nodes expand their own paths)
    arg["config"] = os.path.expanduser(arg["config"])
    if arg["robot"] not in ROBOTS:
        raise RuntimeError(f"robot must be one of {', '.join(ROBOTS)}, got {arg['robot']!r}")
    backend, base_frame, executor_config, extrinsics = ROBOTS[arg["robot"]]
    arg["extrinsics_file"] = arg["extrinsics_file"] or extrinsics
    config = arg["config"]
    return [
        Node(package=PACKAGE, executable="camera_node", name="camera", output="screen",
             parameters=[config, {"serial": arg["serial"]}]),
        Node(package=PACKAGE, executable="planner_node", name="planner", output="screen",
             parameters=[config, {"backend": arg["planner_backend"], "model": arg["model"],
                                  "base_url": arg["base_url"], "extrinsics_file": arg["extrinsics_file"],
                                  "replay_file": arg["replay_file"]}]),
        Node(package=PACKAGE, executable="backprojection_node", name="backprojection", output="screen",
             parameters=[config, {"extrinsics_file": arg["extrinsics_file"]}]),
        Node(package=PACKAGE, executable="executor_node", name="executor", output="screen",
             parameters=[config, {"backend": arg["executor_backend"] or backend, "base_frame": base_frame,
                                  "config_file": executor_config}]),
        Node(package=PACKAGE, executable="rollout_logger_node", name="rollout_logger", output="screen",
             parameters=[config, {"log_dir": arg["log_dir"]}]),
    ]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_nodes)])
