"""The `moveit` backend: a Franka FR3/Panda through moveit_py (pose goals, plan, execute) and the franka_gripper actions.

For ROS installs (moveit_py is not on PyPI). moveit_py's pose goals are ``geometry_msgs/PoseStamped``, so this
module builds that one message type, lazily, inside the call that needs it (the SDK's own argument type); the
franka_gripper action client, which needs an rclpy node, lives in :mod:`grounded_planner.ros.franka_gripper`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from grounded_planner.execution.backend import (BackendFault, MotionStoppedError, MotionTimeoutError,
                                                RobotBackend, UnreachableError, check_pose_args)
from grounded_planner.execution.backends._common import nearest_equivalent_yaw
from grounded_planner.execution.backends.franky_backend import yaw_from_rotation, yaw_to_quaternion
from grounded_planner.execution.config import ConfigError, SafetyConfig, check_positive

log = logging.getLogger(__name__)

POLL_S = 0.01


@dataclass
class MoveItConfig:
    """Settings of the `moveit` backend (``backends.moveit`` in the YAML)."""

    planning_group: str = "fr3_arm"  # MoveIt planning group of the arm (panda_arm for a Panda)
    end_effector_link: str = "fr3_hand_tcp"  # link whose pose the goals set
    base_frame: str = "fr3_link0"  # frame of the targets (the robot base)
    gripper_action_namespace: str = "/fr3_gripper"  # franka_gripper actions <ns>/move, <ns>/grasp, <ns>/homing
    gripper_speed_mps: float = 0.05  # finger speed, m/s
    default_force_n: float = 20.0  # grasp force when the executor gives none, N
    planning_time_s: float = 5.0  # time the planner may take per goal, s
    plan_request_namespace: str = "plan_request_params"  # moveit_py parameter namespace of the planner settings
    node_name: str = "grounded_planner_moveit"  # name of moveit_py's node

    def __post_init__(self) -> None:
        for name in ("planning_group", "end_effector_link", "base_frame", "gripper_action_namespace", "node_name",
                     "plan_request_namespace"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"backends.moveit.{name} must be a non-empty string")
        check_positive(self, ("gripper_speed_mps", "default_force_n", "planning_time_s"), where="backends.moveit")


class GripperClient(Protocol):
    """What the backend needs from the franka_gripper action servers (``move``, ``grasp``, ``homing``)."""

    def move(self, width_m: float, speed_mps: float, timeout_s: float) -> bool: ...
    def grasp(self, width_m: float, speed_mps: float, force_n: float, epsilon_inner_m: float,
              epsilon_outer_m: float, timeout_s: float) -> bool: ...
    def homing(self, timeout_s: float) -> bool: ...
    def width(self) -> float: ...
    def max_width(self) -> float: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...


def _make_moveit_py(config: MoveItConfig) -> Any:
    try:
        from moveit.planning import MoveItPy
    except ImportError as exc:
        raise BackendFault("the moveit backend needs moveit_py (a ROS 2 install with MoveIt 2); it is not "
                           "importable here") from exc
    return MoveItPy(node_name=config.node_name)


def _make_gripper(config: MoveItConfig) -> GripperClient:
    from grounded_planner.ros.franka_gripper import FrankaGripperClient

    return FrankaGripperClient(config.gripper_action_namespace)


def _pose_stamped(frame: str, position: np.ndarray, quaternion_xyzw: np.ndarray) -> Any:
    from geometry_msgs.msg import PoseStamped  # moveit_py's pose goal type

    msg = PoseStamped()
    msg.header.frame_id = frame
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in position)
    (msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z,
     msg.pose.orientation.w) = (float(v) for v in quaternion_xyzw)
    return msg


def _quaternion_matrix(x: float, y: float, z: float, w: float) -> np.ndarray:
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


class MoveItBackend(RobotBackend):
    """Franka arm through moveit_py: every ``move_to_pose`` plans from the current state to a pose goal of
    ``end_effector_link`` (velocity/acceleration scaled within the safety caps) and executes it; execution runs
    in a worker thread so ``stop()`` can halt it through the trajectory execution manager.

    ``moveit_factory`` and ``gripper_factory`` build the moveit_py instance and the gripper client (defaults:
    ``MoveItPy`` and the franka_gripper action client); tests pass doubles there.
    """

    name = "moveit"
    stop_timeout_s = 1.0

    def __init__(self, config: MoveItConfig | None = None, safety: SafetyConfig | None = None,
                 moveit_factory: Callable[[MoveItConfig], Any] | None = None,
                 gripper_factory: Callable[[MoveItConfig], GripperClient] | None = None):
        self.config = config or MoveItConfig()
        self.safety = safety or SafetyConfig()
        self._moveit_factory = moveit_factory or _make_moveit_py
        self._gripper_factory = gripper_factory or _make_gripper
        self._moveit: Any = None
        self._arm: Any = None
        self._gripper: GripperClient | None = None
        self._lock = threading.Lock()
        self._stop_requested = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------------
    def connect(self) -> None:
        if self._moveit is not None:
            return
        try:
            moveit = self._moveit_factory(self.config)
            arm = moveit.get_planning_component(self.config.planning_group)
        except BackendFault:
            raise
        except Exception as exc:
            raise BackendFault(f"moveit: cannot start moveit_py for group {self.config.planning_group!r}: {exc}") from exc
        try:
            gripper = self._gripper_factory(self.config)
            if not gripper.homing(timeout_s=30.0):
                raise BackendFault("moveit: franka_gripper homing failed")
        except BackendFault:
            raise
        except Exception as exc:
            raise BackendFault(f"moveit: franka_gripper actions under {self.config.gripper_action_namespace} "
                               f"not available: {exc}") from exc
        self._moveit, self._arm, self._gripper = moveit, arm, gripper

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
            self._moveit, self._arm, self._gripper = None, None, None
            if gripper is not None:
                gripper.close()
            try:
                moveit.shutdown()
            except Exception as exc:
                log.warning("moveit: shutdown failed: %s", exc)

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

    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        self.require_connected()
        with self._lock:
            self._stop_requested.clear()
            _, current_yaw = self.current_pose()
            yaw = nearest_equivalent_yaw(float(yaw_rad), current_yaw)
            goal = _pose_stamped(self.config.base_frame, position, yaw_to_quaternion(yaw))
            try:
                self._arm.set_start_state_to_current_state()
                self._arm.set_goal_state(pose_stamped_msg=goal, pose_link=self.config.end_effector_link)
                params = self._plan_parameters(float(speed_scale))
                result = self._arm.plan(single_plan_parameters=params)
            except Exception as exc:
                raise BackendFault(f"moveit: planning failed with an error: {exc}") from exc
            if not result:
                raise UnreachableError(f"moveit: no plan to {position.round(3).tolist()} within "
                                       f"{self.config.planning_time_s} s")
            self._execute(result.trajectory)

    def _plan_parameters(self, speed_scale: float) -> Any:
        from moveit.planning import PlanRequestParameters

        params = PlanRequestParameters(self._moveit, self.config.plan_request_namespace)
        params.planning_time = self.config.planning_time_s
        params.max_velocity_scaling_factor = min(speed_scale, self.safety.max_velocity_scale)
        params.max_acceleration_scaling_factor = self.safety.max_acceleration_scale
        return params

    def _execute(self, trajectory: Any) -> None:
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["status"] = self._moveit.execute(trajectory, controllers=[])
            except Exception as exc:  # surfaced in the calling thread
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
        if "error" in outcome:
            raise BackendFault(f"moveit: execution failed: {outcome['error']}")
        status = outcome.get("status")
        if status is not None and not bool(status):
            raise BackendFault(f"moveit: execution ended with status {getattr(status, 'status', status)}")

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
    def gripper_open(self, width_m: float | None = None) -> None:
        self.require_connected()
        assert self._gripper is not None
        full = self._gripper.max_width()
        width = full if width_m is None else min(float(width_m), full)
        with self._lock:
            self._stop_requested.clear()
            if not self._gripper.move(width, self.config.gripper_speed_mps, timeout_s=self.safety.motion_timeout_s):
                if self._stop_requested.is_set():
                    raise MotionStoppedError("moveit: gripper stopped by stop()")
                raise BackendFault(f"moveit: franka_gripper move to {width:.3f} m failed")

    def gripper_close(self, force_n: float | None = None) -> float:
        self.require_connected()
        assert self._gripper is not None
        force = self.config.default_force_n if force_n is None else float(force_n)
        with self._lock:
            self._stop_requested.clear()
            # grasp "width 0 within the whole stroke": the action succeeds whatever is held; the width decides
            self._gripper.grasp(0.0, self.config.gripper_speed_mps, force, 0.0, self._gripper.max_width() + 0.01,
                                timeout_s=self.safety.motion_timeout_s)
            if self._stop_requested.is_set():
                raise MotionStoppedError("moveit: gripper stopped by stop()")
        return self.gripper_width()

    def gripper_width(self) -> float:
        self.require_connected()
        assert self._gripper is not None
        return float(self._gripper.width())
