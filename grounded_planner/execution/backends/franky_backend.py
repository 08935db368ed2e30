"""The `franky` backend: a Franka FR3/Panda over libfranka through franky-control (Cartesian motions, Franka Hand)."""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.execution.backend import (
    BackendError,
    BackendFault,
    GraspFailedError,
    MotionStoppedError,
    MotionTimeoutError,
    RobotBackend,
    check_pose_args,
)
from grounded_planner.execution.backends._common import grasp_failed_message, grasp_window, nearest_equivalent_yaw
from grounded_planner.execution.config import ConfigError, SafetyConfig, check_positive
from grounded_planner.install_hints import install_hint

log = logging.getLogger(__name__)

POLL_S = 0.01  # how often a blocking command checks for stop(); bounds the stop latency
# After a stop the arm counts as standing still once no joint's MEASURED position (libfranka's q) spread more than
# STILL_RAD over the last STILL_WINDOW_S (5e-4 rad in 0.1 s: under 0.3 deg/s, about 4 mm/s at full reach).
# libfranka ends the Move ("Move command preempted!") before the arm has come to rest, so join_motion() returning says
# nothing about the arm; neither do the reported Cartesian pose and joint velocities of franky-sim (see _wait_still()).
STILL_WINDOW_S = 0.1
STILL_RAD = 5e-4
STOP_MARGIN_S = 0.05  # the command thread gives up on stillness this long before stop() gives up on the command


@dataclass
class FrankyConfig:
    """Connection and gripper settings of the `franky` backend (``backends.franky`` in the YAML)."""

    hostname: str = "172.16.0.2"  # the robot's FCI address (franky-sim prints its loopback address)
    realtime: bool = True  # enforce a real-time kernel (a real robot needs one); False for simulators/dev PCs
    gripper_speed_mps: float = 0.05  # finger speed for open/close, m/s
    default_force_n: float = 20.0  # grasp force when the executor passes none, N (Franka Hand: up to 70)
    # how far the fingers may stop short of / beyond the object's expected width (the grasp target's width) for the
    # grasp to count (libfranka's epsilon_inner/outer, its defaults 0.005 m); perception's width is a few mm off, m
    grasp_epsilon_inner_m: float = 0.01
    grasp_epsilon_outer_m: float = 0.01
    gripper_timeout_s: float = 5.0  # an open/close that has not finished by then is stopped: MotionTimeoutError
    max_reach_m: float = 0.855  # reach check: a flange farther than this from the shoulder is unreachable, m
    tcp_to_flange_m: float = 0.2104  # flange height above the TCP with the hand pointing down (Franka Hand), m

    def __post_init__(self) -> None:
        if not isinstance(self.hostname, str) or not self.hostname:
            raise ConfigError(f"backends.franky.hostname must be a non-empty host name, got {self.hostname!r}")
        check_positive(
            self,
            (
                "gripper_speed_mps",
                "default_force_n",
                "gripper_timeout_s",
                "max_reach_m",
                "tcp_to_flange_m",
                "grasp_epsilon_inner_m",
                "grasp_epsilon_outer_m",
            ),
            where="backends.franky",
        )
        self.grasp_epsilon_inner_m = float(self.grasp_epsilon_inner_m)
        self.grasp_epsilon_outer_m = float(self.grasp_epsilon_outer_m)


SHOULDER_M = np.array([0.0, 0.0, 0.333])  # FR3/Panda joint 2 axis height above the base, m


def _diagonal_factor(delta_m: np.ndarray) -> float:
    """Scale for a straight move along ``delta_m`` so its speed (the norm) stays within the per-axis limit.

    franky limits each Cartesian axis separately and synchronises them, so a diagonal move would be up to
    sqrt(3) times faster than the limit; scaling by max|d_i| / |d| keeps the TCP speed itself within it.
    """
    norm = float(np.linalg.norm(delta_m))
    return 1.0 if norm < 1e-9 else max(float(np.max(np.abs(delta_m))) / norm, 1e-3)


# Ruckig's result codes (ruckig/result.hpp), which franky's waypoint motions report as "Motion planner failed with
# error code N" when the trajectory generator gives up during a motion (franky 2.0.0, motion/waypoint_motion.hpp)
_RUCKIG_RESULTS = {
    -1: "an unclassified error",
    -100: "invalid input",
    -101: "a trajectory duration past its numerical limits",
    -102: "positional limits",
    -104: "zero limits",
    -110: "its execution-time calculation (step 1)",
    -111: "its synchronization calculation (step 2)",
}
_PLANNER_FAILED = re.compile(r"Motion planner failed with error code (-?\d+)")


def fault_message(exc: BaseException) -> str:
    """What a franky exception during a motion tells the user. A trajectory-generator failure gets Ruckig's meaning of
    its code and a known cause: when control ticks were missed (the control callback came late), franky extrapolates
    the motion's state, and Ruckig can fail on the extrapolated state; the motion ends where the arm is."""
    text = f"franky: {type(exc).__name__}: {exc}"
    found = _PLANNER_FAILED.search(str(exc))
    if found is None:
        return text
    meaning = _RUCKIG_RESULTS.get(int(found.group(1)), "an error code this backend does not know")
    return (
        f"{text} (Ruckig, franky's trajectory generator, failed in {meaning}; a known cause is a control loop "
        "that missed ticks, after which franky extrapolates the motion: run on a real-time kernel with realtime: "
        "true and nothing else loading the CPUs, then move again from where the arm stopped)"
    )


def yaw_to_quaternion(yaw_rad: float) -> np.ndarray:
    """Top-down Franka Hand orientation with the closing axis (hand y) at ``yaw_rad`` from base y, as [x, y, z, w].

    R = Rz(yaw) Rx(pi): the hand's z points down.
    """
    return np.array([math.cos(yaw_rad / 2), math.sin(yaw_rad / 2), 0.0, 0.0])


def yaw_from_rotation(rotation: np.ndarray) -> float:
    """Inverse of :func:`yaw_to_quaternion` for a (3, 3) rotation, from the hand's y axis projected on the floor."""
    y_axis = rotation[:, 1]
    return math.atan2(y_axis[0], -y_axis[1])


def keeps_caller_scheduling(method):
    """Put the calling thread's scheduling back after a backend call that went through franky.

    libfranka raises the thread that connects or starts a control loop to SCHED_FIFO 99 whenever the process may
    (root, or an rtprio limit), whatever the RealtimeConfig: Ignore only keeps a refusal from being an error
    (libfranka 0.21.2 as franky-control 2.0.0 bundles it), and it never puts the thread back. Measured here
    against franky-sim 1.0.4: after ``connect()``, and after ``move(asynchronous=True)``, the caller's thread is
    FIFO 99 — the executor's thread, and every process it starts afterwards inherits that; a busy one starves
    the machine. franky's own control thread keeps the priority libfranka gives it."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        policy, priority = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
        try:
            return method(*args, **kwargs)
        finally:
            if (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) != (policy, priority):
                os.sched_setscheduler(0, policy, os.sched_param(priority))

    return wrapper


class FrankyBackend(RobotBackend):
    """A Franka arm and Franka Hand through ``franky`` (libfranka). Motions are Cartesian, in the robot base frame,
    for the end-effector frame configured on the robot (the Franka Hand TCP by default)."""

    name = "franky"
    checks_reachability_offline = True

    def __init__(self, config: FrankyConfig | None = None, safety: SafetyConfig | None = None):
        self.config = config or FrankyConfig()
        self.safety = safety or SafetyConfig()
        # a stop returns within safety.stop_timeout_s with the arm standing still (measured joints), or says it is not
        self.stop_timeout_s = float(self.safety.stop_timeout_s)
        self._stop_at = 0.0  # time.monotonic() of the last stop()
        self._robot: Any = None
        self._gripper: Any = None
        self._franky: Any = None
        self._errors: tuple[type[BaseException], ...] = (RuntimeError,)
        self._lock = threading.Lock()  # held by the thread running a command
        self._stop_requested = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------------
    @keeps_caller_scheduling
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

    @keeps_caller_scheduling
    def disconnect(self) -> None:
        if self._robot is None:
            return
        try:
            self.stop()
        finally:
            # franky closes the connections when the objects go away
            self._robot, self._gripper = None, None

    # -- motion ------------------------------------------------------------------------------------
    @keeps_caller_scheduling
    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        self.require_connected()
        franky = self._franky
        with self._lock:
            self._stop_requested.clear()
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
                        note = self._halt(self._stop_at + self.stop_timeout_s - STOP_MARGIN_S, "stop()")
                        raise MotionStoppedError(f"franky: motion stopped by stop(){note}")
                    if time.monotonic() > deadline:
                        note = self._halt(time.monotonic() + self.stop_timeout_s, "the time limit")
                        raise MotionTimeoutError(
                            f"franky: motion not finished after {self.safety.motion_timeout_s} s, stopped{note}"
                        )
            except BackendError:
                raise  # ours (a RuntimeError too): it already says what happened
            except self._errors as exc:
                if not self._stop_requested.is_set():
                    raise BackendFault(fault_message(exc)) from exc
                # our stop() raced the join (which raised the preempted Move before the loop saw the flag), or stop()
                # stopped the robot itself: stop and wait for the arm as any stop does
                note = self._halt(self._stop_at + self.stop_timeout_s - STOP_MARGIN_S, "stop()")
                raise MotionStoppedError(f"franky: motion stopped by stop() ({exc}){note}") from exc

    def _halt(self, deadline: float, why: str) -> str:
        """Stop the running motion and return once the arm stands still by its measured joints (BackendFault when it
        does not by ``deadline``); returns what franky said about the ended motion, for the message.

        robot.stop() sends libfranka's StopMove: the running Move then ends with the ControlException "Move command
        preempted!", raised by the join. That is the stop we asked for, not a fault; but the Move ends while the arm
        is still braking, so the join says nothing about the arm: its measured joints do.
        """
        said = []
        try:
            self._robot.stop()  # first, always: the waits below never delay the stop itself
        except self._errors as exc:
            said.append(f"stop: {exc}")
        try:
            self._robot.join_motion(max(0.0, deadline - time.monotonic()))
        except self._errors as exc:
            said.append(f"libfranka: {exc}")
        self._wait_still(deadline, why)
        return f" ({'; '.join(said)})" if said else ""

    def _wait_still(self, deadline: float, why: str) -> None:
        """Block until no measured joint position spreads more than STILL_RAD over STILL_WINDOW_S.

        The measured joints (libfranka's q), never the reported joint velocities or end-effector pose: in franky-sim
        1.0.4 (MuJoCo) with franky-control 2.0.0 these do not show a braking arm. Its O_T_EE is the pose of the
        *commanded* joints (BaseSimulator.kinematics returns pinocchio's data.oMf by reference, which the next
        forward kinematics, that of q_d, overwrites), and after a stop its dq stayed ~0.08 rad/s after q had stopped
        changing, while q itself moved 0.03 rad (joint 7) for ~0.6 s after the preempted Move had ended.
        """
        samples: list[tuple[float, np.ndarray]] = []
        while True:
            now = time.monotonic()
            try:
                q = np.asarray(self._robot.current_joint_positions, dtype=float)
            except self._errors as exc:
                raise BackendFault(
                    f"franky: stopped on {why}, but cannot read the joints to see the arm stand still: {exc}"
                ) from exc
            samples.append((now, q))
            while len(samples) > 1 and samples[1][0] <= now - STILL_WINDOW_S:
                samples.pop(0)  # keep one sample at least STILL_WINDOW_S old
            window = np.array([sample for _, sample in samples])
            spread = window.max(axis=0) - window.min(axis=0)
            if now - samples[0][0] >= STILL_WINDOW_S and float(spread.max()) < STILL_RAD:
                return
            if now >= deadline:
                joint = int(np.argmax(spread))
                raise BackendFault(
                    f"franky: stopped on {why}, but the arm was still moving {self.stop_timeout_s:.2f} s later: "
                    f"joint {joint + 1} moved {spread[joint]:.4f} rad in the last {now - samples[0][0]:.2f} s "
                    f"(still means under {STILL_RAD} rad in {STILL_WINDOW_S} s); check the arm before going on"
                )
            time.sleep(POLL_S)

    @keeps_caller_scheduling
    def stop(self) -> None:
        if self._robot is None:
            return
        self._stop_at = time.monotonic()
        self._stop_requested.set()
        # the commanding thread sees the flag within POLL_S and stops the robot itself
        if self._lock.acquire(timeout=self.stop_timeout_s):
            self._lock.release()
        else:
            # the command is stuck (in a franky call, or still waiting for the arm): stop the robot from here, and
            # say so; whether the arm stands still is not known here, so this is never a quiet success
            try:
                self._robot.stop()
            except self._errors as exc:
                raise BackendFault(f"franky: stop failed: {exc}") from exc
            raise BackendFault(
                f"franky: the running command did not stop within {self.stop_timeout_s:.2f} s; robot.stop() sent "
                "directly: check that the arm stands still"
            )

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
                        # within stop()'s own wait for this command
                        future.wait(max(0.0, self.stop_timeout_s - STOP_MARGIN_S - POLL_S))
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

    @keeps_caller_scheduling
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

    @keeps_caller_scheduling
    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        force = self.config.default_force_n if force_n is None else float(force_n)
        self.require_connected()
        # libfranka's Gripper::grasp succeeds when the fingers stop within (width - inner, width + outer); a window
        # wider than the hand's opening is refused ("Command failed!"), so it stays inside the homed width. On a
        # failed grasp the Hand stops squeezing (libfranka #13, franka_ros #16): the object is not held.
        width, inner, outer = grasp_window(
            expected_width_m, self._max_width(), self.config.grasp_epsilon_inner_m, self.config.grasp_epsilon_outer_m
        )
        held = self._gripper_call(
            "close",
            lambda: self._gripper.grasp_async(
                width, self.config.gripper_speed_mps, force, epsilon_inner=inner, epsilon_outer=outer
            ),
        )
        closed = self.gripper_width()
        if expected_width_m is not None and not held:
            raise GraspFailedError(grasp_failed_message("franky", closed, width, inner, outer))
        return closed

    def gripper_width(self) -> float:
        self.require_connected()
        try:
            return float(self._gripper.width)
        except self._errors as exc:
            raise BackendFault(f"franky: cannot read the gripper width: {exc}") from exc
