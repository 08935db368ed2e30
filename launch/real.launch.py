"""Real cell: RealSense camera, VLM planner, back-projection, executor on the robot, rollout logger.

ros2 launch grounded_planner real.launch.py robot:=franka model:=Qwen/Qwen3-VL-8B-Instruct \
    base_url:=http://gpu-box:8000/v1 extrinsics_file:=/path/to/extrinsics.yaml
Every node reads config/real.yaml (keys /**/NODE, so they reach namespaced nodes); the arguments below override it.
A second robot on the same graph: namespace:=robot2 (its camera topics under /robot2/camera/camera/...).
With executor_backend:=moveit, the robot's MoveIt config package (moveit_config:=franka_fr3_moveit_config) is
read with moveit_configs_utils' MoveItConfigsBuilder, config/moveit_py_franka.yaml is merged over it, and the
result reaches moveit_py in the executor as a parameters file (docs/franka_moveit.md).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from grounded_planner.ros import launch_args, names
from grounded_planner.ros.launch_args import DEFAULT_LOG_DIR, LaunchArgumentError

SHARE = get_package_share_directory(launch_args.PACKAGE)
# robot -> (executor backend, base frame, executor config: safety envelope, speeds, backend options,
#           example extrinsics whose parent is that base frame)
ROBOTS = {
    "franka": (
        "franky",
        "panda_link0",
        os.path.join(SHARE, "config", "execution_franka.yaml"),
        os.path.join(SHARE, "calibration", "realsense_d435_eye_to_hand.yaml"),
    ),
    "so101": (
        "lerobot",
        "base_link",
        os.path.join(SHARE, "config", "execution_so101.yaml"),
        os.path.join(SHARE, "calibration", "so101_d435_eye_to_hand.yaml"),
    ),
}

# name, default, description (realsense-ros style table)
ARGUMENTS = [
    (
        "namespace",
        "",
        "ROS namespace of every node ('' = the root): robot1 gives /robot1/grounded_planner/plan, "
        "/robot1/camera/camera/color/image_raw, ... so that two robots share one graph",
    ),
    ("robot", "franka", "franka | so101: picks the executor backend and the base frame"),
    ("executor_backend", "", launch_args.EXECUTOR_BACKEND_HELP),
    ("dry_run", "false", "true: the executor validates and logs every plan but never moves the robot"),
    ("serial", "", "RealSense serial number ('' = first found)"),
    (
        "camera_namespace",
        "camera",
        "realsense-ros's camera_namespace: camera topics are "
        "CAMERA_NAMESPACE/CAMERA_NAME/color/image_raw, ... inside namespace",
    ),
    ("camera_name", "camera", "realsense-ros's camera_name (see camera_namespace)"),
    *launch_args.PLANNER_ARGUMENTS,
    (
        "extrinsics_file",
        "",
        "camera -> robot base calibration YAML ('' = the robot's example: "
        "calibration/realsense_d435_eye_to_hand.yaml for franka, calibration/so101_d435_eye_to_hand.yaml for so101)",
    ),
    (
        "log_dir",
        DEFAULT_LOG_DIR,
        "folder for rollout logs (~ is expanded; a relative path is relative to the directory ros2 launch runs in)",
    ),
    (
        "moveit_config",
        "",
        "executor_backend:=moveit: the robot's MoveIt config package ('' = franka: "
        "franka_fr3_moveit_config; the so101 has none, so it must be named)",
    ),
    ("moveit_robot_name", "", "executor_backend:=moveit: robot name for MoveItConfigsBuilder ('' = franka: fr3)"),
    (
        "moveit_py_config",
        os.path.join(SHARE, "config", "moveit_py_franka.yaml"),
        "executor_backend:=moveit: moveit_py settings merged over the config package's (pipelines, "
        "plan_request_params; ~ is expanded)",
    ),
    *launch_args.CONSOLE_ARGUMENTS,
    (
        "config",
        os.path.join(SHARE, "config", "real.yaml"),
        "parameters file for every node (~ is expanded; a missing file is an error)",
    ),
]


def _franka_fr3_moveit_layout(builder):
    """franka_fr3_moveit_config (franka_ros2 v3, Jazzy) is laid out for its own move_group launch file, not for
    MoveItConfigsBuilder: the robot comes from franka_bringup's xacro, the SRDF from franka_description, and
    config/fr3_controllers.yaml is the simple controller manager's block. Returns the builder and the parameters
    to merge over its output (what franka's moveit.launch.py passes to move_group)."""
    import yaml

    bringup = get_package_share_directory("franka_bringup")
    description = get_package_share_directory("franka_description")
    urdf = os.path.join(bringup, "urdf", "franka_arm.urdf.xacro")
    if not os.path.isfile(urdf):  # MoveItConfigsBuilder would only warn and leave robot_description out
        raise LaunchArgumentError(
            f"moveit_config:=franka_fr3_moveit_config needs {urdf}, which franka_bringup ships from franka_ros2 "
            "v3.4.0 on (earlier v3.x releases have no such file, and moveit_py would wait 10 s for a robot "
            "description that never comes): update franka_ros2 to v3.4.0 or later"
        )
    builder = (
        builder.robot_description(
            file_path=urdf,
            mappings={
                "robot_type": "fr3",
                "hand": "true",
                "ee_id": "franka_hand",
                "robot_ip": "",
                "use_fake_hardware": "false",
                "fake_sensor_commands": "false",
            },
        )
        .robot_description_semantic(
            file_path=os.path.join(description, "robots", "fr3", "fr3.srdf.xacro"),
            mappings={"hand": "true", "ee_id": "franka_hand"},
        )
        .joint_limits(file_path="config/fr3_joint_limits.yaml")
        .planning_pipelines(pipelines=["ompl"])
    )
    package = get_package_share_directory("franka_fr3_moveit_config")
    with open(os.path.join(package, "config", "fr3_controllers.yaml")) as handle:
        controllers = yaml.safe_load(handle)
    return builder, {
        "moveit_simple_controller_manager": controllers,
        "moveit_controller_manager": "moveit_simple_controller_manager/MoveItSimpleControllerManager",
        "moveit_manage_controllers": True,
        "trajectory_execution": {
            "allowed_execution_duration_scaling": 1.2,
            "allowed_goal_duration_margin": 0.5,
            "allowed_start_tolerance": 0.01,
        },
    }


# MoveIt config packages that need more than MoveItConfigsBuilder's defaults
MOVEIT_LAYOUTS = {"franka_fr3_moveit_config": _franka_fr3_moveit_layout}


def _moveit_params_file(package, robot_name, moveit_py_config):
    """The MoveIt configuration for moveit_py in the executor, as a ROS parameters file: the config package through
    MoveItConfigsBuilder (as MoveIt's own launch files read it), then moveit_py's settings merged over it."""
    import yaml

    try:
        from moveit_configs_utils import MoveItConfigsBuilder  # ros-jazzy-moveit-configs-utils (comes with MoveIt)
    except ImportError as exc:
        raise launch_args.moveit_missing(exc) from None

    from grounded_planner.execution.backends.moveit_backend import merge_parameters, write_params_file

    builder = MoveItConfigsBuilder(robot_name, package_name=package)
    extra = {}
    if package in MOVEIT_LAYOUTS:
        builder, extra = MOVEIT_LAYOUTS[package](builder)
    else:
        builder = builder.trajectory_execution()
    params = merge_parameters(builder.to_moveit_configs().to_dict(), extra)
    with open(moveit_py_config) as handle:
        params = merge_parameters(params, yaml.safe_load(handle) or {})
    return write_params_file(params)


def _nodes(context):
    arg = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    ns = launch_args.namespace(arg["namespace"])
    # launch_ros reads the parameters file itself: ~ must be expanded here (the nodes expand their own paths)
    config = launch_args.existing_file("config", arg["config"], "the parameters file for every node")
    robot = launch_args.choice("robot", arg["robot"], list(ROBOTS))
    backend, base_frame, executor_config, extrinsics = ROBOTS[robot]
    executor_backend = launch_args.executor_backend(arg["executor_backend"] or backend)
    planner = launch_args.planner(arg["planner_backend"], arg["model"], arg["replay_file"])
    extrinsics_file = (
        launch_args.existing_file("extrinsics_file", arg["extrinsics_file"], "camera -> base calibration YAML")
        if arg["extrinsics_file"]
        else extrinsics
    )
    dry_run = launch_args.boolean("dry_run", arg["dry_run"])
    camera = launch_args.namespace(f"{arg['camera_namespace']}/{arg['camera_name']}").lstrip("/")
    if not camera:
        raise LaunchArgumentError("launch arguments camera_namespace:= and camera_name:= are both empty")
    streams = names.camera_topics(camera)
    topics = {
        "color_topic": streams["color"],
        "depth_topic": streams["depth"],
        "camera_info_topic": streams["color_info"],
    }
    moveit_params_file = ""
    if executor_backend == "moveit":
        package, robot_name = launch_args.moveit_config(robot, arg["moveit_config"], arg["moveit_robot_name"])
        moveit_params_file = _moveit_params_file(
            package,
            robot_name,
            launch_args.existing_file("moveit_py_config", arg["moveit_py_config"], "moveit_py settings YAML"),
        )
    log_dir = launch_args.log_dir(arg["log_dir"])
    overrides = {
        "camera": {"serial": arg["serial"], "camera_namespace": camera},
        "planner": {
            **planner,  # backend, model, replay_file
            "base_url": arg["base_url"],
            "extrinsics_file": extrinsics_file,
            **topics,
        },
        "backprojection": {
            "extrinsics_file": extrinsics_file,
            "depth_topic": topics["depth_topic"],
            "camera_info_topic": topics["camera_info_topic"],
        },
        "executor": {
            "backend": executor_backend,
            "base_frame": base_frame,
            "dry_run": dry_run,
            "config_file": executor_config,
            "moveit_params_file": moveit_params_file,
        },
        "rollout_logger": {"log_dir": log_dir, **topics},
        **launch_args.console(arg, log_dir),
    }
    return [Node(**kwargs) for kwargs in launch_args.nodes(ns, config, overrides)]


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_nodes)]
    )
