"""The `sim` robot backend: the executor's RobotBackend contract on top of a SimWorkcell (MuJoCo)."""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.execution.backend import (
    BackendFault,
    MotionStoppedError,
    MotionTimeoutError,
    NotConnectedError,
    RobotBackend,
    UnreachableError,
    check_pose_args,
)
from grounded_planner.sim.robots import IKError
from grounded_planner.sim.workcell import SimMotionTimeout, SimStopped, SimWorkcell

log = logging.getLogger(__name__)


def default_scenario_path(name: str = "box_in_bowl.yaml") -> Path:
    """A shipped scenario file: from the source tree (pip -e, checkouts) or the installed share folder
    (``<prefix>/share/grounded_planner/config/scenarios``, colcon and pip installs)."""
    candidates = [Path(__file__).resolve().parents[2] / "config" / "scenarios" / name]
    prefixes = [sys.prefix, *filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep))]
    candidates += [Path(p) / "share" / "grounded_planner" / "config" / "scenarios" / name for p in prefixes]
    for path in candidates:
        if path.is_file():
            return path
    return candidates[0]  # a missing file is reported by connect() with this path


DEFAULT_SCENARIO = default_scenario_path()


@dataclass
class SimBackendConfig:
    """Settings of the simulated arm (used by ``make_backend('sim', ...)`` and the CLI)."""

    scenario: str = str(DEFAULT_SCENARIO)  # scenario YAML loaded on connect() when no workcell is passed in
    seed: int | None = 0  # randomisation seed of that scenario (None: nominal poses)
    max_speed_mps: float = 1.0  # TCP speed at speed_scale 1.0, m/s
    default_force_n: float = 20.0  # gripping force per finger when gripper_close() gets None, N
    motion_timeout_s: float = 20.0  # simulated seconds a motion may take before MotionTimeoutError
    contact_tolerance_m: float = 0.015  # a motion stalled by contact this close to its goal counts as arrived, m
    # A downward move ends where the hand or the held object touches down (on the table, in a bowl) and the arm
    # falls behind its set-point, like a compliant arm's guarded move; False: pressing on until the timeout.
    guarded_descent: bool = True
    realtime_factor: float = 0.0  # 0: as fast as the CPU allows; 1: paced to the wall clock (live demos)

    def __post_init__(self) -> None:
        for name in ("max_speed_mps", "default_force_n", "motion_timeout_s", "contact_tolerance_m"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InputError(f"SimBackendConfig.{name} must be a positive number, got {value!r}")
        if not (isinstance(self.realtime_factor, (int, float)) and self.realtime_factor >= 0):
            raise InputError(f"SimBackendConfig.realtime_factor must be >= 0, got {self.realtime_factor!r}")


class SimBackend(RobotBackend):
    """The gp5 arm of a :class:`~grounded_planner.sim.workcell.SimWorkcell` as a robot backend.

    Pass a workcell to share it with a camera (the usual case); without one, ``connect()`` loads
    ``config.scenario``. Time limits are in simulated seconds: the simulation runs faster than real time
    unless ``realtime_factor`` paces it.
    """

    name = "sim"
    stop_timeout_s = 0.5

    def __init__(self, workcell=None, config: SimBackendConfig | None = None):
        self.config = config or SimBackendConfig()
        self.workcell = workcell
        self._connected = False
        self._command_lock = threading.Lock()
        self._fired: set[str] = set()  # perturbations that have happened (each happens once per run)

    # -- lifecycle ----------------------------------------------------------------------------------
    def connect(self) -> None:
        if self._connected:
            return
        if self.workcell is None:
            try:
                self.workcell = SimWorkcell.from_scenario(self.config.scenario, seed=self.config.seed)
            except Exception as exc:  # a bad scenario file or no MuJoCo: the robot cannot be brought up
                raise BackendFault(f"sim backend: cannot load scenario {self.config.scenario}: {exc}") from exc
        self.workcell.realtime_factor = self.config.realtime_factor
        self._connected = True

    @property
    def is_connected(self) -> bool:
        return self._connected

    def disconnect(self) -> None:
        self._connected = False

    # -- motion -------------------------------------------------------------------------------------
    def scene_success(self) -> bool | None:
        """The workcell's own check of the scenario's success predicates (None before a workcell is loaded)."""
        return None if self.workcell is None else bool(self.workcell.success())

    def reset_scene(self) -> None:
        """The workcell back at its start (arm home, gripper open and empty, objects where the scenario put them);
        the perturbations fire again in the next episode. Waits for a command in progress to end."""
        if self.workcell is None:
            raise NotConnectedError("sim backend: no scene loaded yet (connect first)")
        with self._command_lock:
            self.workcell.reset()
            self._fired.clear()

    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        self.require_connected()

        w = self.workcell
        with self._command_lock:
            w.clear_stop()
            try:
                w.solve_ik(position, yaw_rad)
            except IKError as exc:
                raise UnreachableError(f"sim: {exc}") from exc
            self._perturb_before_move(position)
            try:
                ended = w.move_tcp(
                    position,
                    yaw_rad,
                    speed_mps=self.config.max_speed_mps * speed_scale,
                    settle_timeout_s=min(2.0, self.config.motion_timeout_s),
                    guarded=self.config.guarded_descent,
                )
                if ended == "touched_down":
                    log.info(
                        "sim: downward move touched down %.0f mm above its goal; stopped there",
                        (w.tcp_pose()[0][2] - position[2]) * 1000,
                    )
            except SimStopped as exc:
                raise MotionStoppedError("sim: motion stopped by stop()") from exc
            except SimMotionTimeout as exc:
                # a position-controlled arm pressing on an object (placing into a bowl) stops a little short:
                # accept that as arrival, like an impedance controller would; anything further is a timeout
                reached, _ = w.tcp_pose()
                error_m = float(np.linalg.norm(reached - position))
                if error_m <= self.config.contact_tolerance_m:
                    log.debug("sim: motion stalled by contact %.1f mm short of its goal", error_m * 1000)
                    return
                raise MotionTimeoutError(f"sim: {exc}") from exc
            except IKError as exc:  # a waypoint on the straight line left the reachable set
                raise UnreachableError(f"sim: straight-line path leaves the reachable set: {exc}") from exc

    # -- perturbations (scenario ``perturbations:``) ----------------------------------------------------
    def _perturb_before_move(self, goal: np.ndarray) -> None:
        """Arm the scenario's perturbations that belong to the move about to start (each fires once)."""
        w = self.workcell
        scenario = w.scenario
        if not scenario.perturbations:
            return
        start, _ = w.tcp_pose()
        held = w.held_body[len("obj:") :] if w.held_body else None
        moved = next((p for p in scenario.perturbations if p.type == "moved" and p.active), None)
        if moved is not None and "moved" not in self._fired and held is None:
            # someone moves the object just as the arm sets off for it: after the plan's frame, before the grasp
            self._fired.add("moved")
            w.move_object(
                moved.object, [moved.amount_m * math.cos(moved.angle_rad), moved.amount_m * math.sin(moved.angle_rad)]
            )
        slip = scenario.perturbation("slip", held) if held else None
        horizontal, vertical = float(np.hypot(*(goal - start)[:2])), abs(float(goal[2] - start[2]))
        if slip is not None and "slip" not in self._fired and horizontal > vertical:  # a carry, not the lift
            self._fired.add("slip")
            fire_at = w.time_s + slip.after_s

            def slip_now(time_s: float) -> None:
                if time_s >= fire_at:
                    w.tick_listeners.remove(slip_now)
                    w.slip()

            w.tick_listeners.append(slip_now)

    def stop(self) -> None:
        if self.workcell is not None:
            self.workcell.request_stop()
        # the in-flight command holds the lock until it has stopped at its next 20 ms control tick
        if self._command_lock.acquire(timeout=self.stop_timeout_s):
            self._command_lock.release()

    def current_pose(self) -> tuple[np.ndarray, float] | None:
        self.require_connected()
        return self.workcell.tcp_pose()

    def check_reachable(self, position_xyz: Sequence[float], yaw_rad: float) -> str | None:
        try:
            self.workcell.solve_ik(position_xyz, yaw_rad) if self.workcell is not None else None
        except IKError as exc:
            return str(exc)
        return None

    # -- gripper ------------------------------------------------------------------------------------
    def gripper_open(self, width_m: float | None = None) -> None:
        self.require_connected()

        full = self.workcell.robot.max_opening_m
        # wider requests are clipped to the hardware's full opening, as real grippers do; say so in the log
        if width_m is not None and width_m > full:
            log.info("sim: gripper opening %.3f m clipped to the full opening %.3f m", width_m, full)
            width_m = full
        with self._command_lock:
            self.workcell.clear_stop()
            try:
                self.workcell.open_gripper(width_m)
            except SimStopped as exc:
                raise MotionStoppedError("sim: gripper stopped by stop()") from exc

    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        self.require_connected()

        force = self.config.default_force_n if force_n is None else float(force_n)
        with self._command_lock:
            self.workcell.clear_stop()
            try:
                return self.workcell.close_gripper(force)
            except SimStopped as exc:
                raise MotionStoppedError("sim: gripper stopped by stop()") from exc

    def gripper_width(self) -> float:
        self.require_connected()
        return self.workcell.gripper_width()
