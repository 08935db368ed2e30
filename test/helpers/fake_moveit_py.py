"""Test double of moveit_py (``moveit.planning``), mirroring moveit2 ``jazzy`` (moveit_py 2.12.4), awkward parts kept.

moveit_py needs a ROS distribution with MoveIt, so the backend tests run against this double, installed as the
``moveit.planning`` module. What it keeps of the real thing (moveit_py/src/moveit/moveit_ros/moveit_cpp/*.cpp,
moveit_ros/planning/moveit_cpp, planning_pipeline_interfaces):

- ``MoveItPy(node_name="moveit_py", name_space="", launch_params_filepaths=<the process's --params-file
  arguments>, config_dict=None, provide_planning_service=True, remappings=None)``: ``config_dict`` wins over the
  files; a params file applies to the node under ``/**``, its name or its full name. Start-up throws
  ``RuntimeError`` as MoveItCpp does: no robot_description/_semantic -> "Unable to configure planning scene
  monitor"; no complete robot state on ``<name_space>/joint_states`` (relative to the node's namespace) within
  ``planning_scene_monitor_options.wait_for_initial_state_timeout`` -> the same, after that wait, spent holding the
  GIL (moveit2 main 8fcb5d2, moveit_cpp.cpp loadPlanningSceneMonitor); no ``planning_pipelines.pipeline_names`` -> "Failed to load planning pipelines from parameter server";
  a named pipeline without ``<name>.planning_plugins`` -> "Planning plugin name is empty or not defined in
  namespace '<name>'".
- ``PlanRequestParameters(moveit, ns)`` (positional, no default) reads ``<ns>.plan_request_params.*`` and
  ``plan_request_params.*`` for ``ns == ""``; missing values fall back to '' / 1.0 s / 5 attempts / 1.0; a value of
  another ROS type (``planning_time: 1``, an integer, where a double is read) raises ``RuntimeError`` ("has invalid
  type: expected [double] got [integer]"), as rclcpp's typed ``get_parameter`` does through pybind11.
- ``plan(single_plan_parameters=...)`` keeps the GIL for as long as it plans (no ``gil_scoped_release``): here a
  libc ``usleep`` through ``ctypes.PyDLL``, which does not release it either. A reachable goal is solved after
  ``solve_s`` (TIMED_OUT when the slice is shorter); an unreachable one uses the whole planning_time and answers
  PLANNING_FAILED; a pipeline name that is not loaded answers FAILURE ("No planning pipeline available for name").
- ``execute(robot_trajectory, controllers)`` (both required) releases the GIL and is stopped by
  ``get_trajectory_execution_manager().stop_execution()``; with no controller configured it answers ABORTED
  ("No active controllers configured for group", MoveItCpp::execute).
- ``get_planning_component(name)`` throws "Could not find joint model group 'NAME'." for a group the SRDF lacks.
- ``set_goal_state(pose_stamped_msg=, pose_link=)`` accepts any link name and returns True
  (``PlanningComponent::setGoal`` only builds the constraints); ``plan()`` then answers INVALID_GOAL_CONSTRAINTS for a
  link the robot model (``robot_description``'s ``<link>``s) lacks, as OMPL's ``setGoalConstraints`` does once
  ``KinematicConstraintSet`` has dropped the constraints on the unknown link.

``HumbleMoveItPy`` mirrors moveit2 ``humble`` (moveit_py 2.5.9): ``PlanRequestParameters(moveit)``,
``plan(parameters=)``, ``execute(group_name, robot_trajectory, blocking=True)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import yaml

MIRRORS = "moveit_py 2.12.4 (moveit2 jazzy)"
REPO = Path(__file__).resolve().parents[2]
# what MoveItConfigsBuilder("fr3", package_name="franka_fr3_moveit_config") contributes besides our
# config/moveit_py_franka.yaml (abridged: the robot, kinematics, and OMPL planner configs without pipeline plugins)
#: the links of franka_description's fr3 with a Franka Hand (fr3_link0..8, the hand, its TCP and fingers), abridged
FR3_LINKS = [f"fr3_link{i}" for i in range(9)] + ["fr3_hand", "fr3_hand_tcp", "fr3_leftfinger", "fr3_rightfinger"]
FR3_URDF_LINKS = "".join(f"<link name='{name}'/>" for name in FR3_LINKS)
CONFIG_PACKAGE_PARAMS = {
    "robot_description": f"<robot name='fr3'>{FR3_URDF_LINKS}</robot>",
    "robot_description_semantic": "<robot name='fr3'><group name='fr3_arm'/></robot>",
    "robot_description_kinematics": {"fr3_arm": {"kinematics_solver": "kdl_kinematics_plugin/KDLKinematicsPlugin"}},
    "planning_pipelines": ["ompl"],
    "default_planning_pipeline": "ompl",
    "ompl": {"planner_configs": {"RRTConnectkConfigDefault": {"type": "geometric::RRTConnect"}}},
    # franka_fr3_moveit_config's fr3_controllers.yaml, as the simple controller manager's block (real.launch.py)
    "moveit_controller_manager": "moveit_simple_controller_manager/MoveItSimpleControllerManager",
    "moveit_simple_controller_manager": {
        "controller_names": ["fr3_arm_controller"],
        "fr3_arm_controller": {
            "type": "FollowJointTrajectory",
            "action_ns": "follow_joint_trajectory",
            "default": True,
            "joints": [f"fr3_joint{i}" for i in range(1, 8)],
        },
    },
}
REACH_M = 0.85
SHOULDER = np.array([0.0, 0.0, 0.333])
SUCCESS, FAILURE, PLANNING_FAILED, TIMED_OUT, INVALID_GOAL_CONSTRAINTS = 1, 99999, -1, -6, -16
_usleep_holding_the_gil = ctypes.PyDLL(None).usleep  # PyDLL: the call does not release the GIL


def flatten(data: dict, prefix: str = "") -> dict:
    """Nested YAML keys as ROS parameter names (``a: {b: 1}`` -> ``a.b``)."""
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def params_from_files(paths, node_name: str, name_space: str = "") -> dict:
    full = "/" + "/".join(p for p in (name_space.strip("/"), node_name) if p)
    params: dict = {}
    for path in paths:
        doc = yaml.safe_load(Path(path).read_text()) or {}
        for key, section in doc.items():
            if key in ("/**", node_name, full, f"/**/{node_name}") and isinstance(section, dict):
                params.update(flatten(section.get("ros__parameters", {})))
    return params


def get_launch_params_filepaths(cli_args=None):  # moveit/utils.py
    cli_args = sys.argv if cli_args is None else cli_args
    return [cli_args[i + 1] for i, v in enumerate(cli_args[:-1]) if v == "--params-file"]


class ErrorCode:
    def __init__(self, val: int):
        self.val = val


class MotionPlanResponse:
    def __init__(self, code: int, trajectory=None, planning_time: float = 0.0):
        self.error_code, self.trajectory, self.planning_time = ErrorCode(code), trajectory, planning_time

    def __bool__(self) -> bool:
        return self.error_code.val == SUCCESS


class ExecutionStatus:
    def __init__(self, status: str):
        self.status = status

    def __bool__(self) -> bool:
        return self.status == "SUCCEEDED"


class PlanRequestParameters:
    """moveit_py's PlanRequestParameters (jazzy binding: ``py::init(moveit_cpp, const std::string& ns)``)."""

    def __init__(self, moveit, ns, /):
        if not isinstance(ns, str):
            raise TypeError("__init__(): incompatible constructor arguments")
        prefix = f"{ns}.plan_request_params." if ns else "plan_request_params."
        p = moveit.params

        def typed(name, kind, default):
            # rclcpp's node->get_parameter(name, double&) on an integer parameter (YAML `planning_time: 1`) throws
            # InvalidParameterTypeException, which pybind11 hands to Python as RuntimeError
            value = p.get(prefix + name, default)
            seen = {bool: "bool", int: "integer", float: "double", str: "string"}.get(type(value), "other")
            if seen != {float: "double", int: "integer", str: "string"}[kind]:
                raise RuntimeError(
                    f"parameter '{prefix + name}' has invalid type: expected "
                    f"[{ {float: 'double', int: 'integer', str: 'string'}[kind] }] got [{seen}]"
                )
            return value

        self.planner_id = typed("planner_id", str, "")
        self.planning_pipeline = typed("planning_pipeline", str, "")
        self.planning_time = typed("planning_time", float, 1.0)
        self.planning_attempts = typed("planning_attempts", int, 5)
        self.max_velocity_scaling_factor = typed("max_velocity_scaling_factor", float, 1.0)
        self.max_acceleration_scaling_factor = typed("max_acceleration_scaling_factor", float, 1.0)


class PlanningComponent:
    def __init__(self, group: str, moveit: "MoveItPy"):
        self.group, self.moveit = group, moveit
        self._goal = None
        self._own_parameters = PlanRequestParameters(moveit, "")  # PlanningComponent loads the default block

    def set_start_state_to_current_state(self) -> None:
        pass

    def set_goal_state(
        self,
        configuration_name=None,
        robot_state=None,
        pose_stamped_msg=None,
        pose_link=None,
        motion_plan_constraints=None,
    ):
        if (pose_stamped_msg is None) != (pose_link is None):
            raise ValueError("Must specify both message and corresponding link")
        # PlanningComponent::setGoal(pose, link_name) builds the goal constraints and returns true: the link is not
        # looked up here (planning_component.cpp, jazzy); an unknown one fails at plan()
        self._goal = (pose_stamped_msg, pose_link)
        return True

    def plan(
        self,
        single_plan_parameters=None,
        multi_plan_parameters=None,
        planning_scene=None,
        solution_selection_function=None,
        stopping_criterion_callback=None,
    ):
        params = single_plan_parameters or self._own_parameters
        fake = self.moveit
        fake.plan_calls.append(params.planning_time)
        if params.planning_pipeline not in fake.pipelines:  # "No planning pipeline available for name ''"
            return MotionPlanResponse(FAILURE)
        msg, link = self._goal
        if link not in self.moveit.links:
            # the goal's position/orientation constraints name a link the robot model lacks: KinematicConstraintSet
            # drops them ("Position constraint link model ... not found"), and OMPL's setGoalConstraints, left with
            # no goal, answers INVALID_GOAL_CONSTRAINTS ("No goal constraints specified. There is no problem to solve")
            return MotionPlanResponse(INVALID_GOAL_CONSTRAINTS)
        p = msg.pose.position
        goal = np.array([p.x, p.y, p.z])
        reachable = np.linalg.norm(goal - SHOULDER) <= REACH_M
        took = fake.solve_s if reachable and fake.solve_s <= params.planning_time else params.planning_time
        if fake.on_plan is not None:  # test hook, called before plan() takes hold of the GIL
            fake.on_plan()
        _usleep_holding_the_gil(int(took * 1e6))
        if not reachable:
            return MotionPlanResponse(PLANNING_FAILED, planning_time=took)
        if fake.solve_s > params.planning_time:
            return MotionPlanResponse(TIMED_OUT, planning_time=took)
        fake.goals.append((msg, link, params, params.planning_pipeline, params.max_velocity_scaling_factor))
        q = msg.pose.orientation
        trajectory = (goal, np.array([q.x, q.y, q.z, q.w]), params.max_velocity_scaling_factor)
        return MotionPlanResponse(SUCCESS, trajectory, took)


class MoveItPy:
    """moveit_py's MoveItPy (see the module docstring); the robot moves its TCP in straight lines. The robot's
    joint states are on ``robot_joint_states`` (FakeMoveItModule(robot_namespace=...) moves them)."""

    robot_joint_states = "/joint_states"

    def __init__(
        self,
        node_name="moveit_py",
        name_space="",
        launch_params_filepaths=None,
        config_dict=None,
        provide_planning_service=True,
        remappings=None,
    ):
        if launch_params_filepaths is None:
            launch_params_filepaths = get_launch_params_filepaths()
        self.node_name = node_name
        self.params = (
            flatten(config_dict)
            if config_dict is not None
            else params_from_files(launch_params_filepaths, node_name, name_space)
        )
        if not self.params.get("robot_description") or not self.params.get("robot_description_semantic"):
            raise RuntimeError("Unable to configure planning scene monitor")
        # MoveItCpp::loadPlanningSceneMonitor: the state monitor listens to "joint_states" (relative: in name_space)
        # and waits wait_for_initial_state_timeout for a complete state, holding the GIL (the constructor has no
        # gil_scoped_release); without one the constructor throws
        listening = "/" + "/".join(part for part in (name_space.strip("/"), "joint_states") if part)
        wait_s = float(self.params.get("planning_scene_monitor_options.wait_for_initial_state_timeout", 0.0))
        if listening != self.robot_joint_states and wait_s > 0.0:
            _usleep_holding_the_gil(int(wait_s * 1e6))
            raise RuntimeError("Unable to configure planning scene monitor")
        names = list(self.params.get("planning_pipelines.pipeline_names") or [])
        for name in names:
            if not self.params.get(f"{name}.planning_plugins"):
                raise RuntimeError(f"Planning plugin name is empty or not defined in namespace '{name}'")
        if not names:
            raise RuntimeError("Failed to load planning pipelines from parameter server")
        self.pipelines = names
        self.links = re.findall(r"<link name=['\"]([^'\"]+)['\"]", str(self.params.get("robot_description", "")))
        self.solve_s = 0.02
        self.seconds_per_m = 0.2
        self.execute_status = "SUCCEEDED"
        self.position = np.array([0.3, 0.0, 0.5])
        self.quaternion = np.array([1.0, 0.0, 0.0, 0.0])
        self.goals: list = []
        self.plan_calls: list = []  # planning_time of every plan() call
        self.executed: list = []
        self.execute_calls = 0
        self.on_plan = None
        self.stop_calls = 0
        self.shut_down = False
        self._stop = threading.Event()

    def get_planning_component(self, planning_component_name):
        # PlanningComponent's constructor (planning_component.cpp) throws for a group the SRDF does not define
        groups = re.findall(r"<group name=['\"]([^'\"]+)['\"]", str(self.params.get("robot_description_semantic", "")))
        if planning_component_name not in groups:
            raise RuntimeError(f"Could not find joint model group '{planning_component_name}'.")
        return PlanningComponent(planning_component_name, self)

    def execute(self, robot_trajectory, controllers):
        self.execute_calls += 1
        # MoveItCpp::execute: "Execution failed! No active controllers configured for group" -> ABORTED
        if not self.params.get("moveit_simple_controller_manager.controller_names"):
            return ExecutionStatus("ABORTED")
        goal, quaternion, velocity_scale = robot_trajectory
        self._stop.clear()
        duration = np.linalg.norm(goal - self.position) * self.seconds_per_m / velocity_scale
        start, begin = self.position.copy(), time.monotonic()
        while time.monotonic() - begin < duration:
            if self._stop.wait(0.002):
                self.position = start + (goal - start) * (time.monotonic() - begin) / duration
                return ExecutionStatus("PREEMPTED")
        self.position, self.quaternion = goal, quaternion
        self.executed.append(goal)
        return ExecutionStatus(self.execute_status)

    def get_trajectory_execution_manager(self):
        fake = self

        class TrajectoryExecutionManager:
            def stop_execution(self, auto_clear=True):
                fake.stop_calls += 1
                fake._stop.set()

        return TrajectoryExecutionManager()

    def get_planning_scene_monitor(self):
        from geometry_msgs.msg import Pose

        fake = self

        class PlanningSceneMonitor:
            @contextlib.contextmanager
            def read_only(self):
                pose = Pose()
                pose.position.x, pose.position.y, pose.position.z = (float(v) for v in fake.position)
                (pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w) = (
                    float(v) for v in fake.quaternion
                )
                yield types.SimpleNamespace(current_state=types.SimpleNamespace(get_pose=lambda link: pose))

        return PlanningSceneMonitor()

    def shutdown(self) -> None:
        self.shut_down = True


class HumblePlanRequestParameters(PlanRequestParameters):
    """moveit_py 2.5.9 (humble): ``py::init(moveit_cpp)`` only."""

    def __init__(self, moveit, /):
        super().__init__(moveit, "")


class HumbleMoveItPy(MoveItPy):
    """moveit_py 2.5.9 (humble): ``execute(group_name, robot_trajectory, blocking=True)``."""

    def execute(self, group_name, robot_trajectory, blocking=True):  # noqa: D102
        return super().execute(robot_trajectory, [])


def moveit_params(**overrides) -> dict:
    """The config package's parameters with config/moveit_py_franka.yaml merged in, as real.launch.py merges them."""
    from grounded_planner.execution.backends.moveit_backend import merge_parameters

    shipped = yaml.safe_load((REPO / "config" / "moveit_py_franka.yaml").read_text())
    return merge_parameters(merge_parameters(CONFIG_PACKAGE_PARAMS, shipped), overrides)


def moveit_params_file(directory=None, **overrides) -> Path:
    from grounded_planner.execution.backends.moveit_backend import write_params_file

    return Path(write_params_file(moveit_params(**overrides), directory=None if directory is None else str(directory)))


class FakeGripper:
    """Test double of the franka_gripper client (ros/franka_gripper.py; the real one meets a live server in
    test_ros_franka_gripper.py): closes on an object of ``object_width_m`` (None: nothing); a grasp is answered as
    libfranka 0.15.0 answers it (helpers/franka_hand.py), its refusal in ``last_error`` as franka_gripper puts it."""

    def __init__(self, object_width_m: float | None = None):
        self.object_width_m = object_width_m
        self._width = 0.08
        self.calls: list = []
        self.last_error = ""

    def move(self, width_m, speed_mps, timeout_s):
        self.calls.append(("move", width_m))
        self._width = width_m
        return True

    def grasp(self, width_m, speed_mps, force_n, epsilon_inner_m, epsilon_outer_m, timeout_s):
        from helpers.franka_hand import grasp_held, grasp_refusal

        self.calls.append(("grasp", width_m, force_n, epsilon_inner_m, epsilon_outer_m))
        self.last_error = grasp_refusal(width_m, epsilon_inner_m, epsilon_outer_m, self.max_width())
        if self.last_error:
            return False
        self._width = self.object_width_m or 0.0  # closes until it meets the object (or the other finger)
        return grasp_held(width_m, epsilon_inner_m, epsilon_outer_m, self._width)

    def homing(self, timeout_s):
        self.calls.append(("homing",))
        return True

    def width(self):
        return self._width

    def max_width(self):
        return 0.08

    def cancel(self):
        self.calls.append(("cancel",))

    def close(self):
        self.calls.append(("close",))


class FakeMoveItModule(list):
    """The MoveItPy instances the double made (a list), its ``moveit.planning`` module, and the backend arguments
    that put the double where ros/moveit.py's ``moveit_backend_args()`` puts the real moveit_py."""

    def __init__(self, humble: bool = False, robot_namespace: str = ""):
        super().__init__()
        base = HumbleMoveItPy if humble else MoveItPy
        joint_states = "/" + "/".join(part for part in (robot_namespace.strip("/"), "joint_states") if part)
        cls = type(base.__name__, (base,), {"robot_joint_states": joint_states})  # where franka_ros2 publishes

        def factory(*args, **kwargs):
            self.append(cls(*args, **kwargs))
            return self[-1]

        self.planning = types.ModuleType("moveit.planning")
        self.planning.MoveItPy = factory
        self.planning.PlanRequestParameters = HumblePlanRequestParameters if humble else PlanRequestParameters

    def backend_args(self, gripper_factory) -> dict:
        from geometry_msgs.msg import PoseStamped

        return {
            "moveit_loader": lambda: self.planning,
            "pose_stamped_type": PoseStamped,
            "gripper_factory": gripper_factory,
        }
