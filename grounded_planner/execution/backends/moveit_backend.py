"""The `moveit` backend: a Franka FR3/Panda through moveit_py (Jazzy and later) and the franka_gripper actions.

For ROS installs (moveit_py is not on PyPI). What the real moveit_py does, and how this module deals with it
(read against moveit2 ``jazzy``, moveit_py 2.12; see docs/franka_moveit.md):

- ``MoveItPy(node_name, launch_params_filepaths=..., config_dict=...)`` starts MoveIt from ROS parameters and throws
  when they are missing ("Unable to configure planning scene monitor", "Failed to load planning pipelines ...").
  The parameters come from ``config_dict`` (e.g. ``MoveItConfigsBuilder(...).to_dict()``), from
  ``backends.moveit.params_files`` (what ``real.launch.py moveit_config:=...`` writes), or, as MoveIt's own default,
  from the ``--params-file`` arguments of the process.
- ``PlanRequestParameters(moveit, ns)`` reads ``<ns>.plan_request_params.*`` (``plan_request_params.*`` for
  ``ns == ""``): the namespace names the block that *holds* ``plan_request_params``.
- ``PlanningComponent.plan()`` keeps the GIL for the whole planning time (no ``gil_scoped_release`` in the
  binding) and moveit_py binds no way to interrupt it, so no Python thread, ``stop()`` included, runs meanwhile.
  Plans are therefore asked for in slices of ``plan_slice_s`` of the ``planning_time_s`` budget; a stop waits at
  most one slice, and a plan that comes back after a stop is dropped, never executed.
- ``execute(trajectory, controllers=[])`` releases the GIL (moveit_py >= 2.9); the trajectory execution manager's
  ``stop_execution()`` halts it. Humble's (2.5) and Iron's (2.7/2.8) moveit_py have other signatures and an
  ``execute`` that keeps the GIL: :func:`check_moveit_py_version` refuses them by name.

No ROS import here (layers): what a ROS install provides arrives as arguments, gathered by ``ros/moveit.py``
(``moveit_backend_args()``, used by the executor node and the CLI): the loader of ``moveit.planning``, the
``geometry_msgs/PoseStamped`` class of the goals and the franka_gripper action client factory.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import yaml

from grounded_planner.execution.backend import (
    BackendFault,
    GraspFailedError,
    MotionStoppedError,
    MotionTimeoutError,
    RobotBackend,
    UnreachableError,
    check_pose_args,
)
from grounded_planner.execution.backends._common import grasp_failed_message, grasp_window, nearest_equivalent_yaw
from grounded_planner.execution.backends.franky_backend import yaw_from_rotation, yaw_to_quaternion
from grounded_planner.execution.config import ConfigError, SafetyConfig, check_positive

log = logging.getLogger(__name__)
# the hand's joint_states (franka_gripper: 15-50 Hz) silent this long: the robot is gone, seconds
STATE_STALE_S = 1.0

POLL_S = 0.01
#: after a plan, the planning thread sleeps this long so threads blocked on the GIL meanwhile (a stop) run first
GIL_HANDOFF_S = 2 * sys.getswitchinterval()
#: first moveit_py whose ``execute`` releases the GIL (2.9.0, moveit2 #2573) and whose ``PlanRequestParameters``
#: takes a namespace and ``plan()`` ``single_plan_parameters`` (2.7); Jazzy ships 2.10 and later
MIN_MOVEIT_PY = (2, 9, 0)
#: moveit_py releases per ROS distribution, for the refusal message
MOVEIT_PY_DISTROS = {
    (2, 5): "Humble",
    (2, 7): "Iron",
    (2, 8): "Iron",
    (2, 10): "Jazzy",
    (2, 11): "Jazzy",
    (2, 12): "Jazzy",
    (2, 13): "Kilted",
    (2, 14): "Kilted",
}
OLD_DISTROS = ("foxy", "galactic", "humble", "iron")

# moveit_msgs/MoveItErrorCodes values a plan() can answer with
PLANNING_FAILED, TIMED_OUT = -1, -6
ERROR_NAMES = {
    1: "SUCCESS",
    99999: "FAILURE",
    -1: "PLANNING_FAILED",
    -2: "INVALID_MOTION_PLAN",
    -6: "TIMED_OUT",
    -7: "PREEMPTED",
    -10: "START_STATE_IN_COLLISION",
    -11: "START_STATE_VIOLATES_PATH_CONSTRAINTS",
    -12: "GOAL_IN_COLLISION",
    -13: "GOAL_VIOLATES_PATH_CONSTRAINTS",
    -14: "GOAL_CONSTRAINTS_VIOLATED",
    -15: "INVALID_GROUP_NAME",
    -16: "INVALID_GOAL_CONSTRAINTS",
    -17: "INVALID_ROBOT_STATE",
    -18: "INVALID_LINK_NAME",
    -21: "FRAME_TRANSFORM_FAILURE",
    -22: "COLLISION_CHECKING_UNAVAILABLE",
    -23: "ROBOT_STATE_STALE",
    -26: "START_STATE_INVALID",
    -27: "GOAL_STATE_INVALID",
    -31: "NO_IK_SOLUTION",
}
#: answers meaning "this pose cannot be reached from here" (outcome unreachable); any other failure is a fault
UNREACHABLE_CODES = {-1, -6, -12, -13, -14, -27, -31}
#: answers worth another slice while the planning budget lasts (the planner ran out of its slice)
RETRY_CODES = {PLANNING_FAILED, TIMED_OUT}
#: answers to a goal on a link the robot model lacks: set_goal_state accepts any link name (PlanningComponent::setGoal
#: only builds the constraints), KinematicConstraintSet drops the constraints on it, and OMPL answers
#: INVALID_GOAL_CONSTRAINTS (other planners may answer INVALID_LINK_NAME)
LINK_CODES = {-16, -18}

# franka_ros2 releases: up to v1.x the gripper node was `<arm_id>_gripper` in the root namespace; from v2.0.0
# (Humble) and v3.x (Jazzy) it is `franka_gripper` in the launch `namespace` (default none). The node serves
# ~/homing, ~/move, ~/grasp, ~/gripper_action and publishes ~/joint_states (franka_gripper/src/gripper_action_server.cpp).
FRANKA_ROS2_NODE_RENAMED = 2


def franka_gripper_namespace(franka_ros2_version: str = "3", robot_namespace: str = "", arm_id: str = "fr3") -> str:
    """The franka_gripper node's name, under which its actions live (``<this>/grasp`` etc.), for a franka_ros2
    release (``"3"``, ``"2.0.1"``, ``"v1.1.0"``; the major version decides).

    >>> franka_gripper_namespace("3"), franka_gripper_namespace("1.1.0"), franka_gripper_namespace("2", "left")
    ('/franka_gripper', '/fr3_gripper', '/left/franka_gripper')
    """
    match = re.fullmatch(r"v?(\d+)(\.\d+){0,2}", str(franka_ros2_version).strip())
    if not match:
        raise ConfigError(
            f"backends.moveit.franka_ros2_version must look like 3, 2.0 or v1.1.0, got {franka_ros2_version!r}"
        )
    ns = "/" + str(robot_namespace).strip("/") if str(robot_namespace).strip("/") else ""
    if int(match.group(1)) < FRANKA_ROS2_NODE_RENAMED:
        return f"/{arm_id}_gripper"  # v0.x/v1.x: name=[arm_id, '_gripper'], no namespace argument
    return f"{ns}/franka_gripper"


@dataclass
class MoveItConfig:
    """Settings of the `moveit` backend (``backends.moveit`` in the YAML)."""

    planning_group: str = "fr3_arm"  # MoveIt planning group of the arm (panda_arm for a Panda)
    end_effector_link: str = "fr3_hand_tcp"  # link whose pose the goals set
    base_frame: str = "fr3_link0"  # frame of the targets (the robot base)
    # franka_ros2 release serving the gripper: "3" (Jazzy) and "2" (Humble) name the actions /franka_gripper/...,
    # "1"/"0" (up to v1.1) /<arm_id>_gripper/...
    franka_ros2_version: str = "3"
    robot_namespace: str = ""  # the `namespace` franka_ros2 (>= 2) was launched with; '' = none
    arm_id: str = "fr3"  # arm id (fr3 | fp3 | fer); names the v0/v1 gripper node
    gripper_action_namespace: str = ""  # explicit gripper node name (e.g. /my_gripper); '' = from the three above
    gripper_speed_mps: float = 0.05  # finger speed, m/s
    default_force_n: float = 20.0  # grasp force when the executor gives none, N
    # how far the fingers may stop short of / beyond the object's expected width (the grasp target's width) for the
    # grasp to count (libfranka's epsilon_inner/outer, its defaults 0.005 m); perception's width is a few mm off, m
    grasp_epsilon_inner_m: float = 0.01
    grasp_epsilon_outer_m: float = 0.01
    gripper_homing_timeout_s: float = 30.0  # homing at connect takes a few seconds on a real Hand, s
    planning_time_s: float = 5.0  # total time the planner may take per goal, s
    # longest single plan() call, s: moveit_py keeps the GIL while planning, so a stop waits up to this long;
    # must be below safety.stop_timeout_s
    plan_slice_s: float = 0.5
    # prefix of MoveIt's planner settings: PlanRequestParameters reads <ns>.plan_request_params.* ('' =
    # plan_request_params.*); name the block that holds plan_request_params, not plan_request_params itself
    plan_request_namespace: str = ""
    # ROS parameter files with the robot's MoveIt configuration (robot_description, _semantic, kinematics, planning
    # pipelines, controllers, plan_request_params); [] = the process's --params-file arguments (MoveIt's default)
    params_files: list = field(default_factory=list)
    node_name: str = "grounded_planner_moveit"  # name of moveit_py's node (the params files' key, or /**)

    def __post_init__(self) -> None:
        for name in ("planning_group", "end_effector_link", "base_frame", "node_name", "arm_id"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"backends.moveit.{name} must be a non-empty string")
        for name in ("plan_request_namespace", "robot_namespace", "gripper_action_namespace"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"backends.moveit.{name} must be a string ('' for none)")
        self.franka_ros2_version = str(self.franka_ros2_version)
        franka_gripper_namespace(self.franka_ros2_version)  # raises for a malformed version
        last = self.plan_request_namespace.rstrip(".").rsplit(".", 1)[-1]
        if last == "plan_request_params":
            raise ConfigError(
                f"backends.moveit.plan_request_namespace {self.plan_request_namespace!r} ends in plan_request_params, "
                f"but MoveIt's PlanRequestParameters appends '.plan_request_params' itself and would read "
                f"{self.plan_request_namespace}.plan_request_params.*; use '' for plan_request_params.* or the name "
                f"of the block holding plan_request_params (e.g. ompl_rrtc)"
            )
        if not isinstance(self.params_files, (list, tuple)) or not all(isinstance(p, str) for p in self.params_files):
            raise ConfigError("backends.moveit.params_files must be a list of ROS parameter file paths")
        self.params_files = list(self.params_files)
        check_positive(
            self,
            (
                "gripper_speed_mps",
                "default_force_n",
                "planning_time_s",
                "plan_slice_s",
                "gripper_homing_timeout_s",
                "grasp_epsilon_inner_m",
                "grasp_epsilon_outer_m",
            ),
            where="backends.moveit",
        )
        for name in (
            "planning_time_s",
            "plan_slice_s",
            "gripper_speed_mps",
            "default_force_n",
            "grasp_epsilon_inner_m",
            "grasp_epsilon_outer_m",
        ):
            setattr(self, name, float(getattr(self, name)))

    @property
    def gripper_namespace(self) -> str:
        """Where the franka_gripper actions are: ``<this>/grasp``, ``<this>/move``, ``<this>/homing``."""
        if self.gripper_action_namespace:
            return "/" + self.gripper_action_namespace.strip("/")
        return franka_gripper_namespace(self.franka_ros2_version, self.robot_namespace, self.arm_id)


class GripperClient(Protocol):
    """What the backend needs from the franka_gripper action servers (``move``, ``grasp``, ``homing``).

    The calls block; they return the action's ``success``, keep its ``error`` in ``last_error``, raise
    ``TimeoutError`` when the server does not answer in time (the goal is cancelled) and ``ConnectionError``
    when no server serves the action."""

    last_error: str

    def move(self, width_m: float, speed_mps: float, timeout_s: float) -> bool: ...
    def grasp(
        self,
        width_m: float,
        speed_mps: float,
        force_n: float,
        epsilon_inner_m: float,
        epsilon_outer_m: float,
        timeout_s: float,
    ) -> bool: ...
    def homing(self, timeout_s: float) -> bool: ...
    def width(self) -> float: ...
    def max_width(self) -> float: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def installed_moveit_py_version(prefixes: Sequence[str] | None = None) -> tuple[int, ...] | None:
    """moveit_py's version from ``share/moveit_py/package.xml`` in the ament prefixes (None: not found)."""
    if prefixes is None:
        prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    for prefix in prefixes:
        xml = Path(prefix) / "share" / "moveit_py" / "package.xml"
        if xml.is_file():
            found = re.search(r"<version>\s*([\d.]+)\s*</version>", xml.read_text(errors="replace"))
            if found:
                return _version_tuple(found.group(1))
    return None


def check_moveit_py_version(version: tuple[int, ...] | None = None, ros_distro: str | None = None) -> None:
    """Refuse moveit_py releases older than :data:`MIN_MOVEIT_PY` (Humble, Iron) with a message naming them."""
    version = installed_moveit_py_version() if version is None else version
    ros_distro = os.environ.get("ROS_DISTRO", "") if ros_distro is None else ros_distro
    too_old = version is not None and version < MIN_MOVEIT_PY
    if too_old or (version is None and ros_distro.lower() in OLD_DISTROS):
        named = (
            f"moveit_py {'.'.join(map(str, version))} (ROS 2 {MOVEIT_PY_DISTROS.get(version[:2], ros_distro)})"
            if version is not None
            else f"moveit_py of ROS 2 {ros_distro.capitalize()}"
        )
        raise BackendFault(
            f"moveit: {named} is not supported: this backend needs moveit_py >= "
            f"{'.'.join(map(str, MIN_MOVEIT_PY))} (ROS 2 Jazzy or later), whose PlanRequestParameters(moveit, ns), "
            f"plan(single_plan_parameters=) and execute(trajectory, controllers=) it calls, and whose execute() "
            f"releases the GIL so that a stop can halt it; on Humble use the franky backend"
        )


def _params_file_args(argv: Sequence[str]) -> list[str]:
    """The ``--params-file`` paths of a command line (what moveit_py's ``get_launch_params_filepaths`` reads)."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--params-file"]


def _pose_stamped(pose_stamped_type: type, frame: str, position: np.ndarray, quaternion_xyzw: np.ndarray) -> Any:
    msg = pose_stamped_type()
    msg.header.frame_id = frame
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in position)
    (msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z, msg.pose.orientation.w) = (
        float(v) for v in quaternion_xyzw
    )
    return msg


def _quaternion_matrix(x: float, y: float, z: float, w: float) -> np.ndarray:
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _error_code(result: Any) -> int:
    code = getattr(result, "error_code", None)
    return int(getattr(code, "val", code if isinstance(code, int) else 0) or 0)


# how long connect() looks for the robot's joint states before starting MoveItPy (config/moveit_py_franka.yaml's
# planning_scene_monitor_options.wait_for_initial_state_timeout, which MoveItPy then waits with the GIL held), s
STATE_WAIT_S = 10.0


class MoveItBackend(RobotBackend):
    """Franka arm through moveit_py: every ``move_to_pose`` plans from the current state to a pose goal of
    ``end_effector_link`` (velocity/acceleration scaled within the safety caps) and executes it; execution runs
    in a worker thread so ``stop()`` can halt it through the trajectory execution manager.

    ``config_dict`` is MoveIt's configuration as a dict (``MoveItConfigsBuilder(...).to_dict()``), handed to
    ``MoveItPy(config_dict=...)``; without it ``config.params_files`` or the process's ``--params-file`` arguments
    are used. ``moveit_loader()`` returns the ``moveit.planning`` module (MoveItPy, PlanRequestParameters),
    ``pose_stamped_type`` is ``geometry_msgs.msg.PoseStamped`` and ``gripper_factory(config)`` builds the
    franka_gripper client: ``ros/moveit.py``'s ``moveit_backend_args()`` gives all three; tests pass doubles.
    ``state_probe(topic, timeout_s)`` (``ros/moveit.py``'s ``wait_for_joint_states``) says whether joint states
    arrive, before MoveItPy's constructor waits for them with the GIL held.
    """

    name = "moveit"

    def __init__(
        self,
        config: MoveItConfig | None = None,
        safety: SafetyConfig | None = None,
        moveit_loader: Callable[[], Any] | None = None,
        pose_stamped_type: type | None = None,
        gripper_factory: Callable[[MoveItConfig], GripperClient] | None = None,
        config_dict: Mapping[str, Any] | None = None,
        state_probe: Callable[[str, float], bool] | None = None,
    ):
        self.config = config or MoveItConfig()
        self.safety = safety or SafetyConfig()
        self.stop_timeout_s = float(self.safety.stop_timeout_s)
        if self.config.plan_slice_s >= self.stop_timeout_s:
            raise ConfigError(
                f"backends.moveit.plan_slice_s ({self.config.plan_slice_s} s) must be below "
                f"safety.stop_timeout_s ({self.stop_timeout_s} s): a stop waits up to one plan slice"
            )
        self._moveit_loader = moveit_loader
        self._state_probe = state_probe
        self._pose_stamped_type = pose_stamped_type
        self._gripper_factory = gripper_factory
        self._config_dict = dict(config_dict) if config_dict is not None else None
        self._moveit: Any = None
        self._arm: Any = None
        self._plan_request_parameters: Any = None
        self._gripper: GripperClient | None = None
        self._lock = threading.Lock()
        self._stop_requested = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------------
    def _start_moveit(self) -> tuple[Any, Any]:
        """``MoveItPy`` with the configuration, and ``PlanRequestParameters`` as the real binding reads them."""
        check_moveit_py_version()
        planning = self._moveit_loader()  # moveit.planning; BackendFault when moveit_py is not installed
        MoveItPy, PlanRequestParameters = planning.MoveItPy, planning.PlanRequestParameters  # noqa: N806
        # the namespace franka_ros2 runs in: MoveItCpp listens to "joint_states" relative to its node's namespace, and
        # without a complete state within wait_for_initial_state_timeout it throws "Unable to configure planning
        # scene monitor" (a namespaced bringup publishes /<ns>/joint_states, never /joint_states)
        robot_ns = str(self.config.robot_namespace).strip("/")
        kwargs: dict[str, Any] = {"node_name": self.config.node_name}
        if robot_ns:  # (Humble's MoveItPy has no name_space; the backend refuses Humble further on, by name)
            kwargs["name_space"] = f"/{robot_ns}"
        if self._config_dict is not None:
            kwargs["config_dict"] = self._config_dict
            source = "config_dict"
        elif self.config.params_files:
            missing = [p for p in self.config.params_files if not Path(p).is_file()]
            if missing:
                raise BackendFault(f"moveit: backends.moveit.params_files: {', '.join(missing)} not found")
            kwargs["launch_params_filepaths"] = list(self.config.params_files)
            source = f"params files {', '.join(self.config.params_files)}"
        elif _params_file_args(sys.argv):
            source = f"this process's --params-file {', '.join(_params_file_args(sys.argv))}"
        else:
            raise BackendFault(
                "moveit: no MoveIt configuration for moveit_py (robot_description, robot_description_semantic, "
                "kinematics, planning pipelines, controllers): launch with `real.launch.py executor_backend:=moveit "
                "moveit_config:=franka_fr3_moveit_config`, set backends.moveit.params_files, or pass config_dict "
                "(MoveItConfigsBuilder(...).to_dict()); see docs/franka_moveit.md"
            )
        where = f"/{robot_ns}/joint_states" if robot_ns else "/joint_states"
        # MoveItPy's constructor waits for a complete robot state holding the GIL (up to the planning scene monitor's
        # wait_for_initial_state_timeout, 10 s here): no Python thread, no Ctrl-C, no cancel runs meanwhile. Look for
        # joint states first, in Python, where a Ctrl-C ends the wait at once
        if self._state_probe is not None and not self._state_probe(where, STATE_WAIT_S):
            raise BackendFault(
                f"moveit: no joint states on {where} within {STATE_WAIT_S:g} s: is franka_ros2 running, "
                "and is backends.moveit.robot_namespace the namespace it was launched in? (MoveItPy not started: its constructor would wait for them holding the "
                "GIL)"
            )
        try:
            moveit = MoveItPy(**kwargs)
        except Exception as exc:
            raise BackendFault(
                f"moveit: MoveItPy did not start from {source}: {exc} (it reads the robot state on "
                f"{where}: backends.moveit.robot_namespace must be the namespace franka_ros2 was "
                f"launched in)"
            ) from exc
        ns = self.config.plan_request_namespace
        read = f"{ns}.plan_request_params" if ns else "plan_request_params"
        try:
            params = PlanRequestParameters(moveit, ns)
        except TypeError as exc:  # Humble's binding takes no namespace
            self._shutdown(moveit)
            raise BackendFault(
                f"moveit: this moveit_py has Humble's PlanRequestParameters(moveit) ({exc}); the "
                f"backend needs moveit_py >= {'.'.join(map(str, MIN_MOVEIT_PY))} (Jazzy)"
            ) from exc
        except RuntimeError as exc:  # rclcpp's typed get_parameter: `planning_time: 1` is an integer, not a double
            self._shutdown(moveit)
            raise BackendFault(
                f"moveit: MoveIt cannot read {read}.*: {exc} (write floats with a decimal point: "
                "planning_time: 1.0, not 1; planning_attempts is an integer)"
            ) from exc
        if not params.planning_pipeline:
            self._shutdown(moveit)
            raise BackendFault(
                f"moveit: {read}.planning_pipeline is not set in MoveIt's parameters, so every plan "
                f"would fail (\"No planning pipeline available for name ''\"); add a {read} block "
                f"with planning_pipeline (e.g. ompl) or set backends.moveit.plan_request_namespace"
            )
        return moveit, params

    def connect(self) -> None:
        if self._moveit is not None:
            return
        if self._moveit_loader is None or self._pose_stamped_type is None or self._gripper_factory is None:
            raise BackendFault(
                "moveit: moveit_py, PoseStamped and the franka_gripper client come from a ROS install: "
                "build this backend through the executor node or `grounded-planner execute` (they "
                "pass ros/moveit.py's moveit_backend_args()), or pass moveit_loader, "
                "pose_stamped_type and gripper_factory"
            )
        moveit, params = self._start_moveit()
        try:
            arm = moveit.get_planning_component(self.config.planning_group)
        except Exception as exc:
            self._shutdown(moveit)
            raise BackendFault(f"moveit: no planning group {self.config.planning_group!r}: {exc}") from exc
        where = self.config.gripper_namespace
        gripper = None
        try:
            gripper = self._gripper_factory(self.config)
            if not gripper.homing(timeout_s=self.config.gripper_homing_timeout_s):
                raise BackendFault(
                    f"moveit: franka_gripper homing ({where}/homing) failed: "
                    f"{getattr(gripper, 'last_error', '') or 'no reason given'}"
                )
        except Exception as exc:
            if gripper is not None:
                gripper.close()
            self._shutdown(moveit)
            if isinstance(exc, BackendFault):
                raise
            raise BackendFault(
                f"moveit: franka_gripper actions under {where} not usable (franka_ros2_version "
                f"{self.config.franka_ros2_version}): {exc}"
            ) from exc
        self._moveit, self._arm, self._plan_request_parameters, self._gripper = moveit, arm, params, gripper

    @staticmethod
    def _shutdown(moveit: Any) -> None:
        try:
            moveit.shutdown()
        except Exception as exc:  # noqa: BLE001 - moveit_py raises many kinds; shutting down goes on
            log.warning("moveit: shutdown failed: %s", exc)

    @property
    def is_connected(self) -> bool:
        return self._moveit is not None

    def disconnect(self) -> None:
        if self._moveit is None:
            return
        try:
            self.stop()
        finally:
            gripper, moveit = self._gripper, self._moveit
            self._moveit, self._arm, self._gripper, self._plan_request_parameters = None, None, None, None
            if gripper is not None:
                gripper.close()
            self._shutdown(moveit)

    # -- motion ------------------------------------------------------------------------------------
    def current_pose(self) -> tuple[np.ndarray, float]:
        self.require_connected()
        try:
            with self._moveit.get_planning_scene_monitor().read_only() as scene:
                pose = scene.current_state.get_pose(self.config.end_effector_link)
        except Exception as exc:
            raise BackendFault(f"moveit: cannot read the current state: {exc}") from exc
        q = pose.orientation
        rotation = _quaternion_matrix(q.x, q.y, q.z, q.w)
        return np.array([pose.position.x, pose.position.y, pose.position.z]), yaw_from_rotation(rotation)

    def read_state(self) -> None:
        """The arm's state from the planning scene and the hand's joint_states, which franka_gripper publishes
        while the robot answers: silent for longer than STATE_STALE_S, the robot is gone (BackendFault)."""
        self.current_pose()
        age_s = getattr(self._gripper, "state_age_s", None)
        if age_s is not None and age_s() > STATE_STALE_S:
            raise BackendFault(
                f"moveit: no {self.config.gripper_namespace}/joint_states for {age_s():.1f} s: "
                "the robot does not answer"
            )

    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        self.require_connected()
        with self._lock:
            self._stop_requested.clear()
            _, current_yaw = self.current_pose()
            yaw = nearest_equivalent_yaw(float(yaw_rad), current_yaw)
            goal = _pose_stamped(self._pose_stamped_type, self.config.base_frame, position, yaw_to_quaternion(yaw))
            try:
                self._arm.set_start_state_to_current_state()
                self._arm.set_goal_state(pose_stamped_msg=goal, pose_link=self.config.end_effector_link)
            except Exception as exc:
                raise BackendFault(f"moveit: cannot set the goal: {exc}") from exc
            result = self._plan(position, float(speed_scale))
            self._execute(result.trajectory)

    def _plan(self, position: np.ndarray, speed_scale: float) -> Any:
        """Plan in slices of ``plan_slice_s`` until a plan, a final answer, the budget's end or a stop."""
        params = self._plan_request_parameters
        params.max_velocity_scaling_factor = min(speed_scale, self.safety.max_velocity_scale)
        params.max_acceleration_scaling_factor = self.safety.max_acceleration_scale
        deadline = time.monotonic() + self.config.planning_time_s
        while True:
            if self._stop_requested.is_set():
                raise MotionStoppedError("moveit: stopped before planning")
            params.planning_time = max(0.01, min(self.config.plan_slice_s, deadline - time.monotonic()))
            try:
                result = self._arm.plan(single_plan_parameters=params)  # keeps the GIL up to planning_time
            except Exception as exc:
                raise BackendFault(f"moveit: planning failed with an error: {exc}") from exc
            if self._stop_requested.is_set():  # a plan that arrives after a stop is never executed
                raise MotionStoppedError("moveit: stopped while planning; the plan found is dropped")
            if result:
                # Hand the GIL to the threads that waited for it during plan(): CPython passes it on to a thread
                # that asked for it (forced switching), so a stop() called meanwhile runs before this check.
                time.sleep(GIL_HANDOFF_S)
                if self._stop_requested.is_set():
                    raise MotionStoppedError("moveit: stopped while planning; the plan found is dropped")
                return result
            code = _error_code(result)
            if code in RETRY_CODES and time.monotonic() < deadline - 0.01:
                continue
            name = ERROR_NAMES.get(code, str(code))
            if code in LINK_CODES:
                raise BackendFault(
                    f"moveit: planning answered {name} for the goal on link "
                    f"{self.config.end_effector_link!r}: is backends.moveit.end_effector_link a link "
                    f"of the robot model (robot_description)? e.g. fr3_hand_tcp, panda_hand_tcp"
                )
            if code in UNREACHABLE_CODES:
                raise UnreachableError(
                    f"moveit: no plan to {position.round(3).tolist()} within {self.config.planning_time_s} s ({name})"
                )
            raise BackendFault(
                f"moveit: planning failed with {name} (pipeline "
                f"{params.planning_pipeline!r}, group {self.config.planning_group!r})"
            )

    def _execute(self, trajectory: Any) -> None:
        outcome: dict[str, Any] = {}

        def run() -> None:
            if self._stop_requested.is_set():  # the last moment a stop can keep the trajectory from starting
                return
            try:
                outcome["status"] = self._moveit.execute(trajectory, controllers=[])
            except Exception as exc:  # noqa: BLE001 - surfaced in the calling thread
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="moveit-execute", daemon=True)
        worker.start()
        deadline = time.monotonic() + self.safety.motion_timeout_s
        while worker.is_alive():
            worker.join(POLL_S)
            if self._stop_requested.is_set() or time.monotonic() > deadline:
                self._moveit.get_trajectory_execution_manager().stop_execution(True)
                worker.join(self.stop_timeout_s)
                if self._stop_requested.is_set():
                    raise MotionStoppedError("moveit: execution stopped by stop()")
                raise MotionTimeoutError(f"moveit: execution not finished after {self.safety.motion_timeout_s} s")
        if not outcome and self._stop_requested.is_set():
            raise MotionStoppedError("moveit: stopped before execution started; the plan is dropped")
        if "error" in outcome:
            raise BackendFault(f"moveit: execution failed: {outcome['error']}")
        status = outcome.get("status")
        if status is not None and not bool(status):
            name = getattr(status, "status", status)
            hint = (
                " (MoveIt aborts at once when no active controller is configured for the planning group: "
                "moveit_simple_controller_manager.controller_names, see docs/franka_moveit.md)"
                if str(name) == "ABORTED"
                else ""
            )
            raise BackendFault(f"moveit: execution ended with status {name}{hint}")

    def stop(self) -> None:
        if self._moveit is None:
            return
        self._stop_requested.set()
        if self._gripper is not None:
            self._gripper.cancel()
        if not self._lock.acquire(timeout=self.stop_timeout_s):
            self._moveit.get_trajectory_execution_manager().stop_execution(True)
            raise BackendFault(f"moveit: the running command did not stop within {self.stop_timeout_s} s")
        self._lock.release()

    # -- gripper -----------------------------------------------------------------------------------
    def _gripper_call(self, what: str, call: Callable[[], bool]) -> bool:
        try:
            ok = call()
        except TimeoutError as exc:
            raise MotionTimeoutError(f"moveit: franka_gripper {what}: {exc}") from exc
        except Exception as exc:
            raise BackendFault(f"moveit: franka_gripper {what}: {exc}") from exc
        if self._stop_requested.is_set():
            raise MotionStoppedError(f"moveit: gripper {what} stopped by stop()")
        return ok

    def gripper_open(self, width_m: float | None = None) -> None:
        self.require_connected()
        assert self._gripper is not None
        gripper = self._gripper
        full = gripper.max_width()
        width = full if width_m is None else min(float(width_m), full)
        with self._lock:
            self._stop_requested.clear()
            if not self._gripper_call(
                "move",
                lambda: gripper.move(width, self.config.gripper_speed_mps, timeout_s=self.safety.motion_timeout_s),
            ):
                raise BackendFault(
                    f"moveit: franka_gripper move to {width:.3f} m failed: "
                    f"{getattr(gripper, 'last_error', '') or 'no reason given'}"
                )

    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        self.require_connected()
        assert self._gripper is not None
        gripper = self._gripper
        force = self.config.default_force_n if force_n is None else float(force_n)
        # libfranka's grasp succeeds when the fingers stop within (width - inner, width + outer); a window wider
        # than the hand's opening is refused ("Command failed!"), so it stays inside the homed width
        width, inner, outer = grasp_window(
            expected_width_m, gripper.max_width(), self.config.grasp_epsilon_inner_m, self.config.grasp_epsilon_outer_m
        )
        with self._lock:
            self._stop_requested.clear()
            held = self._gripper_call(
                "grasp",
                lambda: gripper.grasp(
                    width, self.config.gripper_speed_mps, force, inner, outer, timeout_s=self.safety.motion_timeout_s
                ),
            )
        error = getattr(gripper, "last_error", "")
        if error:  # libfranka threw (franka_gripper's result carries e.what()): the command itself failed
            raise BackendFault(
                f"moveit: franka_gripper grasp (width {width:.3f} m, epsilon inner {inner:.3f} / "
                f"outer {outer:.3f} m) failed: {error}"
            )
        closed = self.gripper_width()
        if expected_width_m is not None and not held:
            raise GraspFailedError(grasp_failed_message("moveit", closed, width, inner, outer))
        return closed

    def gripper_width(self) -> float:
        self.require_connected()
        assert self._gripper is not None
        try:
            return float(self._gripper.width())
        except Exception as exc:
            raise BackendFault(f"moveit: franka_gripper width unknown: {exc}") from exc


def merge_parameters(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict:
    """``base`` with ``extra`` merged in, nested dicts key by key (``MoveItConfigs.to_dict()`` merges only the
    top level, which would drop e.g. a config package's ``ompl.planner_configs`` when ``ompl`` gets one more key)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_parameters(merged[key], value)
        else:
            merged[key] = value
    return merged


def write_params_file(params: Mapping[str, Any], node: str = "/**", directory: str | None = None) -> str:
    """Write ``params`` as a ROS 2 parameters file for ``node`` (default: every node) and return its path."""
    with tempfile.NamedTemporaryFile(
        "w", prefix="moveit_params_", suffix=".yaml", dir=directory, delete=False
    ) as handle:
        yaml.safe_dump({node: {"ros__parameters": _plain(params)}}, handle, default_flow_style=False)
        return handle.name


def _plain(value: Any) -> Any:
    """YAML-safe copy: launch substitutions and ParameterValue objects cannot be written; tuples become lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ConfigError(
        f"MoveIt parameter value {value!r} ({type(value).__name__}) is not a plain value; build the "
        f"MoveIt configuration with string xacro mappings so that it is resolved when the file is written"
    )
