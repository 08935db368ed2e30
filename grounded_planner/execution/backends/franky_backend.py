"""The `franky` backend: a Franka FR3/Panda over libfranka through franky-control (Cartesian motions, Franka Hand)."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.execution.backend import (
    BackendFault,
    MotionStoppedError,
    MotionTimeoutError,
    RobotBackend,
    check_pose_args,
)
from grounded_planner.execution.backends._common import nearest_equivalent_yaw
from grounded_planner.execution.config import ConfigError, SafetyConfig, check_positive
from grounded_planner.install_hints import install_hint

log = logging.getLogger(__name__)

POLL_S = 0.01  # how often a blocking command checks for stop(); bounds the stop latency


@dataclass
class FrankyConfig:
    """Connection and gripper settings of the `franky` backend (``backends.franky`` in the YAML)."""

    hostname: str = "172.16.0.2"  # the robot's FCI address (franky-sim prints its loopback address)
    realtime: bool = True  # enforce a real-time kernel (a real robot needs one); False for simulators/dev PCs
    gripper_speed_mps: float = 0.05  # finger speed for open/close, m/s
    default_force_n: float = 20.0  # grasp force when the executor passes none, N (Franka Hand: up to 70)
    gripper_timeout_s: float = 5.0  # an open/close that has not finished by then is stopped: MotionTimeoutError
    max_reach_m: float = 0.855  # reach check: a flange farther than this from the shoulder is unreachable, m
    tcp_to_flange_m: float = 0.2104  # flange height above the TCP with the hand pointing down (Franka Hand), m

    def __post_init__(self) -> None:
        if not isinstance(self.hostname, str) or not self.hostname:
            raise ConfigError(f"backends.franky.hostname must be a non-empty host name, got {self.hostname!r}")
        check_positive(
            self,
            ("gripper_speed_mps", "default_force_n", "gripper_timeout_s", "max_reach_m", "tcp_to_flange_m"),
            where="backends.franky",
        )


SHOULDER_M = np.array([0.0, 0.0, 0.333])  # FR3/Panda joint 2 axis height above the base, m


def _diagonal_factor(delta_m: np.ndarray) -> float:
    """Scale for a straight move along ``delta_m`` so its speed (the norm) stays within the per-axis limit.

    franky limits each Cartesian axis separately and synchronises them, so a diagonal move would be up to
    sqrt(3) times faster than the limit; scaling by max|d_i| / |d| keeps the TCP speed itself within it.
    """
    norm = float(np.linalg.norm(delta_m))
    return 1.0 if norm < 1e-9 else max(float(np.max(np.abs(delta_m))) / norm, 1e-3)


def yaw_to_quaternion(yaw_rad: float) -> np.ndarray:
    """Top-down Franka Hand orientation with the closing axis (hand y) at ``yaw_rad`` from base y, as [x, y, z, w].

    R = Rz(yaw) Rx(pi): the hand's z points down.
    """
    return np.array([math.cos(yaw_rad / 2), math.sin(yaw_rad / 2), 0.0, 0.0])


def yaw_from_rotation(rotation: np.ndarray) -> float:
    """Inverse of :func:`yaw_to_quaternion` for a (3, 3) rotation, from the hand's y axis projected on the floor."""
    y_axis = rotation[:, 1]
    return math.atan2(y_axis[0], -y_axis[1])


class FrankyBackend(RobotBackend):
    """A Franka arm and Franka Hand through ``franky`` (libfranka). Motions are Cartesian, in the robot base frame,
    for the end-effector frame configured on the robot (the Franka Hand TCP by default)."""

    name = "franky"
    checks_reachability_offline = True
    stop_timeout_s = 0.5

    def __init__(self, config: FrankyConfig | None = None, safety: SafetyConfig | None = None):
        self.config = config or FrankyConfig()
        self.safety = safety or SafetyConfig()
        self._robot: Any = None
        self._gripper: Any = None
        self._franky: Any = None
        self._errors: tuple[type[BaseException], ...] = (RuntimeError,)
        self._lock = threading.Lock()  # held by the thread running a command
        self._stop_requested = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------------
    def connect(self) -> None:
        if self._robot is not None:
            return
        try:
            import franky  # lazy: optional SDK (franky), not in install_requires
        except ImportError as exc:
            raise BackendFault(
                f"franky backend needs franky-control: {install_hint('franky-control', 'execution')}"
            ) from exc
        self._franky = franky
        # franky raises its own exception types, and plain RuntimeError for network failures ("Net Exception")
        self._errors = (franky.Exception, franky.GripperException, RuntimeError)
        rt = franky.RealtimeConfig.Enforce if self.config.realtime else franky.RealtimeConfig.Ignore
        try:
            robot = franky.Robot(self.config.hostname, realtime_config=rt)
            # franky's recoverFromErrors(): automaticErrorRecovery(), then `return !hasErrors()` (franky robot.cpp):
            # False means the arm is still in error (a reflex or a safety stop that needs the user)
            if not robot.recover_from_errors():
                raise BackendFault(
                    f"franky: the robot at {self.config.hostname} still reports errors after automatic "
                    "error recovery: clear them on the robot (Desk: unlock, release the stop) and "
                    "connect again"
                )
            # the global factor holds the acceleration/jerk cap; velocity is set per motion (speed_scale, capped)
            acc = self.safety.max_acceleration_scale
            robot.relative_dynamics_factor = franky.RelativeDynamicsFactor(1.0, acc, acc)
            gripper = franky.Gripper(self.config.hostname)
        except self._errors as exc:
            raise BackendFault(f"franky: cannot connect to the robot at {self.config.hostname}: {exc}") from exc
        self._robot, self._gripper = robot, gripper
        log.info("franky: connected to %s", self.config.hostname)

    @property
    def is_connected(self) -> bool:
        return self._robot is not None

    def disconnect(self) -> None:
        if self._robot is None:
            return
        try:
            self.stop()
        finally:
            # franky closes the connections when the objects go away
            self._robot, self._gripper = None, None

    # -- motion ------------------------------------------------------------------------------------
    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        self.require_connected()
        franky = self._franky
        with self._lock:
            self._stop_requested.clear()
            timed_out = False
            try:
                current, current_yaw = self.current_pose()  # type: ignore[misc]
                yaw = nearest_equivalent_yaw(float(yaw_rad), current_yaw)
                target = franky.Affine(position, yaw_to_quaternion(yaw))
                # speed_scale is a fraction of the robot's maximum velocity, never above the safety cap
                velocity = min(float(speed_scale), self.safety.max_velocity_scale)
                velocity *= _diagonal_factor(position - current)
                motion = franky.CartesianMotion(
                    target, franky.ReferenceType.Absolute, franky.RelativeDynamicsFactor(velocity, 1.0, 1.0)
                )
                self._robot.move(motion, asynchronous=True)
                deadline = time.monotonic() + self.safety.motion_timeout_s
                while not self._robot.join_motion(POLL_S):
                    if self._stop_requested.is_set():
                        self._robot.stop()
                        self._robot.join_motion(self.stop_timeout_s)
                        raise MotionStoppedError("franky: motion stopped by stop()")
                    if time.monotonic() > deadline:
                        timed_out = True
                        self._robot.stop()
                        self._robot.join_motion(self.stop_timeout_s)
                        raise MotionTimeoutError(f"franky: motion not finished after {self.safety.motion_timeout_s} s")
            except self._errors as exc:
                # robot.stop() sends libfranka's StopMove: the running Move then ends with the ControlException
                # "Move command preempted!", raised by the join after our own stop. That is the stop or the
                # timeout we asked for, not a fault of the robot.
                if self._stop_requested.is_set():
                    raise MotionStoppedError(f"franky: motion stopped by stop() ({exc})") from exc
                if timed_out:
                    raise MotionTimeoutError(
                        f"franky: motion not finished after {self.safety.motion_timeout_s} s, stopped ({exc})"
                    ) from exc
                raise BackendFault(f"franky: {type(exc).__name__}: {exc}") from exc

    def stop(self) -> None:
        if self._robot is None:
            return
        self._stop_requested.set()
        # the commanding thread sees the flag within POLL_S and stops the robot itself
        if self._lock.acquire(timeout=self.stop_timeout_s):
            self._lock.release()
        else:
            log.warning(
                "franky: the running command did not stop within %.2f s; stopping directly", self.stop_timeout_s
            )
            try:
                self._robot.stop()
            except self._errors as exc:
                raise BackendFault(f"franky: stop failed: {exc}") from exc

    def current_pose(self) -> tuple[np.ndarray, float]:
        self.require_connected()
        try:
            pose = self._robot.current_cartesian_state.pose.end_effector_pose
            matrix = np.asarray(pose.matrix, dtype=float)
        except self._errors as exc:
            raise BackendFault(f"franky: cannot read the robot state: {exc}") from exc
        return matrix[:3, 3].copy(), yaw_from_rotation(matrix[:3, :3])

    def read_state(self) -> None:
        self.current_pose()  # libfranka reads the robot state over UDP: "UDP receive: Timeout" when it is gone

    def check_reachable(self, position_xyz: Sequence[float], yaw_rad: float) -> str | None:
        # a top-down TCP puts the flange straight above it; the arm's reach is measured shoulder -> flange
        flange = np.asarray(position_xyz, dtype=float) + [0.0, 0.0, self.config.tcp_to_flange_m]
        distance = float(np.linalg.norm(flange - SHOULDER_M))
        if distance > self.config.max_reach_m:
            return (
                f"flange {distance:.3f} m from the shoulder, beyond the arm's reach of {self.config.max_reach_m:.3f} m"
            )
        return None

    # -- gripper -----------------------------------------------------------------------------------
    def _gripper_call(self, what: str, start: Any) -> bool:
        """Run an async gripper command, polling for stop() and the time limit."""
        self.require_connected()
        with self._lock:
            self._stop_requested.clear()
            try:
                future = start()
                deadline = time.monotonic() + self.config.gripper_timeout_s
                while not future.wait(POLL_S):
                    if self._stop_requested.is_set() or time.monotonic() > deadline:
                        self._gripper.stop()
                        future.wait(self.stop_timeout_s)
                        if self._stop_requested.is_set():
                            raise MotionStoppedError(f"franky: gripper {what} stopped by stop()")
                        raise MotionTimeoutError(
                            f"franky: gripper {what} not finished after {self.config.gripper_timeout_s} s"
                        )
                return bool(future.get())
            except self._errors as exc:
                raise BackendFault(f"franky: gripper {what}: {exc}") from exc

    def _max_width(self) -> float:
        try:
            return float(self._gripper.max_width)
        except self._errors as exc:
            raise BackendFault(f"franky: cannot read the gripper: {exc}") from exc

    def gripper_open(self, width_m: float | None = None) -> None:
        self.require_connected()
        full = self._max_width()
        width = full if width_m is None else float(width_m)
        if width > full:
            log.info("franky: opening %.3f m clipped to the gripper's maximum %.3f m", width, full)
            width = full
        if width <= 0:
            raise InputError(f"width_m must be positive, got {width_m!r}")
        if not self._gripper_call("open", lambda: self._gripper.move_async(width, self.config.gripper_speed_mps)):
            raise BackendFault(f"franky: gripper could not open to {width:.3f} m")

    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        force = self.config.default_force_n if force_n is None else float(force_n)
        # grasp "an object of width 0 within +-max width": succeeds whatever is held; the width says what it is
        self.require_connected()
        full = self._max_width()
        self._gripper_call(
            "close",
            lambda: self._gripper.grasp_async(
                0.0, self.config.gripper_speed_mps, force, epsilon_inner=0.0, epsilon_outer=full + 0.01
            ),
        )
        return self.gripper_width()

    def gripper_width(self) -> float:
        self.require_connected()
        try:
            return float(self._gripper.width)
        except self._errors as exc:
            raise BackendFault(f"franky: cannot read the gripper width: {exc}") from exc
