"""Test doubles for running real.launch.py's MoveIt path without a ROS install: ``moveit_configs_utils``'
MoveItConfigsBuilder (mirroring moveit2 ``jazzy``, moveit_configs_utils/moveit_configs_builder.py), the few
``launch``/``launch_ros`` names the launch file uses, and an ament prefix with franka_ros2 v3.x's (jazzy) file
layout: franka_fr3_moveit_config/config/{kinematics,fr3_joint_limits,ompl_planning,fr3_controllers}.yaml,
franka_bringup/urdf/franka_arm.urdf.xacro, franka_description/robots/fr3/fr3.srdf.xacro (contents abridged).

What the builder double keeps: files are looked up relative to the config package's share folder (absolute paths
as given); xacro mappings are plain strings substituted for ``$(arg name)``; ``planning_pipelines(pipelines=)``
gives ``planning_pipelines`` as a *list* and each pipeline's YAML from the package (``ompl_planning.yaml``) with no
pipeline plugins in it when the package has none; ``trajectory_execution()`` loads the controllers file flat at the
top level; ``to_dict()`` merges the parts one level deep, in the real order.
"""

from __future__ import annotations

import logging
import re
import types
from pathlib import Path

import yaml

from ament_index_python.packages import get_package_share_directory
from helpers.fake_moveit_py import FR3_URDF_LINKS

FRANKA_FILES = {
    "franka_fr3_moveit_config/config/kinematics.yaml": "fr3_arm:\n  kinematics_solver: kdl_kinematics_plugin/KDLKinematicsPlugin\n",
    "franka_fr3_moveit_config/config/fr3_joint_limits.yaml": "joint_limits:\n  fr3_joint1:\n    has_acceleration_limits: true\n    max_acceleration: 3.75\n",
    "franka_fr3_moveit_config/config/ompl_planning.yaml": "planner_configs:\n  RRTConnectkConfigDefault:\n    type: geometric::RRTConnect\n"
    "fr3_arm:\n  planner_configs: [RRTConnectkConfigDefault]\n",
    "franka_fr3_moveit_config/config/fr3_controllers.yaml": "controller_names:\n  - fr3_arm_controller\n  - fr3_gripper\nfr3_arm_controller:\n"
    "  action_ns: follow_joint_trajectory\n  type: FollowJointTrajectory\n  default: true\n"
    "  joints: [fr3_joint1, fr3_joint2, fr3_joint3, fr3_joint4, fr3_joint5, fr3_joint6, fr3_joint7]\n",
    "franka_fr3_moveit_config/config/fr3_ros_controllers.yaml": "controller_manager: {}\n",
    "franka_bringup/urdf/franka_arm.urdf.xacro": "<robot name='$(arg robot_type)'><!-- hand $(arg hand), ee $(arg ee_id) -->"
    + FR3_URDF_LINKS
    + "</robot>\n",
    "franka_description/robots/fr3/fr3.srdf.xacro": "<robot name='fr3'><group name='fr3_arm'/><!-- hand $(arg hand) --></robot>\n",
}


def write_ament_prefix(prefix: Path, packages: dict[str, Path | None]) -> Path:
    """An ament prefix where each package is registered; a package's share is a copy of ``FRANKA_FILES`` for it,
    or a link to the given folder."""
    index = prefix / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True, exist_ok=True)
    for name, target in packages.items():
        (index / name).write_text("")
        share = prefix / "share" / name
        if target is not None:
            share.symlink_to(target)
            continue
        for rel, text in FRANKA_FILES.items():
            if rel.startswith(name + "/"):
                path = prefix / "share" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    return prefix


def _load_xacro(path: Path, mappings: dict | None) -> str:
    text = path.read_text()
    missing = set(re.findall(r"\$\(arg (\w+)\)", text)) - set(mappings or {})
    if missing:
        raise RuntimeError(f"xacro {path}: no value for {sorted(missing)}")
    return re.sub(r"\$\(arg (\w+)\)", lambda m: str(mappings[m.group(1)]), text)


def _load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


class MoveItConfigsBuilder:
    """moveit_configs_utils.MoveItConfigsBuilder as jazzy has it (the calls real.launch.py makes)."""

    def __init__(self, robot_name: str, robot_description: str = "robot_description", package_name: str | None = None):
        self._package_path = Path(get_package_share_directory(package_name or robot_name + "_moveit_config"))
        self._robot_name, self._rd = robot_name, robot_description
        self._parts: dict[str, dict] = {}

    def robot_description(self, file_path=None, mappings=None):
        path = self._package_path / (file_path or f"config/{self._robot_name}.urdf")
        if not path.is_file():  # as jazzy's builder: ParameterBuilderFileNotFoundError is only logged as a warning
            logging.warning("File %s doesn't exist", path)
            self._parts["robot_description"] = {}  # and no robot_description is written
            return self
        self._parts["robot_description"] = {self._rd: _load_xacro(path, mappings)}
        return self

    def robot_description_semantic(self, file_path=None, mappings=None):
        path = self._package_path / (file_path or f"config/{self._robot_name}.srdf")
        self._parts["robot_description_semantic"] = {self._rd + "_semantic": _load_xacro(path, mappings)}
        return self

    def robot_description_kinematics(self, file_path=None):
        path = self._package_path / (file_path or "config/kinematics.yaml")
        self._parts["robot_description_kinematics"] = {self._rd + "_kinematics": _load_yaml(path)}
        return self

    def joint_limits(self, file_path=None):
        path = self._package_path / (file_path or "config/joint_limits.yaml")
        self._parts["joint_limits"] = {self._rd + "_planning": _load_yaml(path)}
        return self

    def planning_pipelines(self, default_planning_pipeline=None, pipelines=None, load_all=True):
        pipelines = list(pipelines or ["ompl"])
        part = {"planning_pipelines": pipelines, "default_planning_pipeline": default_planning_pipeline or pipelines[0]}
        for pipeline in pipelines:
            part[pipeline] = _load_yaml(self._package_path / "config" / f"{pipeline}_planning.yaml")
        self._parts["planning_pipelines"] = part
        return self

    def trajectory_execution(self, file_path=None, moveit_manage_controllers=True):
        part = {"moveit_manage_controllers": moveit_manage_controllers}
        if file_path is None:
            names = sorted(
                p.name[: -len("_controllers.yaml")] for p in (self._package_path / "config").glob("*_controllers.yaml")
            )
            chosen = (
                names[0]
                if len(names) == 1
                else next((n for n in ("moveit", "moveit2", self._robot_name) if n in names), None)
            )
            if chosen is None:
                raise RuntimeError(f"trajectory_execution: Unable to guess which parameter file to load: {names}")
            file_path = f"config/{chosen}_controllers.yaml"
        part.update(_load_yaml(self._package_path / file_path))
        self._parts["trajectory_execution"] = part
        return self

    def to_moveit_configs(self):
        for name in (
            "robot_description",
            "robot_description_semantic",
            "robot_description_kinematics",
            "planning_pipelines",
            "trajectory_execution",
            "joint_limits",
        ):
            if name not in self._parts:
                getattr(self, name)()
        parts = self._parts
        order = (
            "robot_description",
            "robot_description_semantic",
            "robot_description_kinematics",
            "planning_pipelines",
            "trajectory_execution",
            "joint_limits",
        )

        def to_dict():
            params: dict = {}
            for name in order:
                params.update(parts[name])
            return params

        return types.SimpleNamespace(to_dict=to_dict, **parts)


def launch_modules(nodes: list) -> dict[str, types.ModuleType]:
    """Stand-ins for the ``launch``/``launch_ros`` names real.launch.py imports; ``Node(...)`` records its kwargs in
    ``nodes``; ``LaunchConfiguration(name).perform(context)`` reads ``context[name]``."""
    launch = types.ModuleType("launch")
    launch.LaunchDescription = lambda entities: list(entities)
    actions = types.ModuleType("launch.actions")
    actions.DeclareLaunchArgument = lambda name, default_value="", description="": (name, default_value)
    actions.OpaqueFunction = lambda function: function
    substitutions = types.ModuleType("launch.substitutions")

    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return context[self.name]

    substitutions.LaunchConfiguration = LaunchConfiguration
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")
    ros_actions.Node = lambda **kwargs: nodes.append(kwargs) or kwargs
    utils = types.ModuleType("moveit_configs_utils")
    utils.MoveItConfigsBuilder = MoveItConfigsBuilder
    return {
        "launch": launch,
        "launch.actions": actions,
        "launch.substitutions": substitutions,
        "launch_ros": launch_ros,
        "launch_ros.actions": ros_actions,
        "moveit_configs_utils": utils,
    }
