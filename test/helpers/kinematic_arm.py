"""Test double of a robot backend: a kinematic arm that records every command and can be told to fail.

Named as a double on purpose: the executor's own rules (what is sent, in which order, what happens after a
fault or a cancel) are checked against it exactly; the real backends are tested against franky-sim, the sim
workcell and the SO-101 URDF in their own test files.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np

from grounded_planner.execution.backend import (
    BackendFault,
    MotionStoppedError,
    RobotBackend,
    UnreachableError,
    check_pose_args,
)


class KinematicArm(RobotBackend):
    """Moves take ``move_duration_s`` of wall time (interruptible by stop() every 5 ms), then the TCP is there.

    ``fail_on`` maps a command number (0-based, counting moves and gripper commands) to the exception it
    raises; ``closed_width_m`` is what gripper_close reports; ``unreachable_x_above`` makes poses beyond that x
    unreachable (for the reachability check and for moves).
    """

    name = "kinematic-double"
    stop_timeout_s = 0.2

    def __init__(
        self,
        move_duration_s: float = 0.0,
        closed_width_m: float = 0.03,
        fail_on: dict[int, Exception] | None = None,
        unreachable_x_above: float | None = None,
    ):
        self.move_duration_s = move_duration_s
        self.closed_width_m = closed_width_m
        self.fail_on = dict(fail_on or {})
        self.unreachable_x_above = unreachable_x_above
        self.calls: list[tuple] = []  # ("move", (x, y, z), yaw, speed) | ("open", width) | ("close", force)
        self.stops: list[float] = []  # monotonic times of stop() calls
        self.position = np.array([0.4, 0.0, 0.4])
        self.yaw = 0.0
        self.width = 0.08
        self._connected = False
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def connect(self) -> None:
        self._connected = True

    @property
    def is_connected(self) -> bool:
        return self._connected

    def disconnect(self) -> None:
        self._connected = False

    def _command(self, record: tuple) -> None:
        self.require_connected()
        number = len(self.calls)
        self.calls.append(record)
        if number in self.fail_on:
            raise self.fail_on[number]

    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        if self.check_reachable(position, yaw_rad):
            raise UnreachableError(f"x={position[0]:.3f} is beyond the double's reach")
        with self._lock:
            self._stop.clear()
            self._command(("move", tuple(float(v) for v in position), float(yaw_rad), float(speed_scale)))
            end = time.monotonic() + self.move_duration_s
            start = self.position.copy()
            while time.monotonic() < end:
                if self._stop.wait(0.005):
                    # stopped part-way: the arm stands where interpolation put it
                    frac = 1 - (end - time.monotonic()) / max(self.move_duration_s, 1e-9)
                    self.position = start + (position - start) * min(max(frac, 0.0), 1.0)
                    raise MotionStoppedError("double: stopped")
            self.position, self.yaw = position, float(yaw_rad)

    def stop(self) -> None:
        self.stops.append(time.monotonic())
        self._stop.set()
        if self._lock.acquire(timeout=self.stop_timeout_s):
            self._lock.release()

    def gripper_open(self, width_m: float | None = None) -> None:
        with self._lock:
            self._command(("open", width_m))
            self.width = 0.08 if width_m is None else width_m

    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        with self._lock:
            self._command(("close", force_n))
            self.width = self.closed_width_m
            return self.width

    def gripper_width(self) -> float:
        return self.width

    def current_pose(self) -> tuple[np.ndarray, float]:
        return self.position.copy(), self.yaw

    def check_reachable(self, position_xyz: Sequence[float], yaw_rad: float) -> str | None:
        if self.unreachable_x_above is not None and float(position_xyz[0]) > self.unreachable_x_above:
            return f"x={float(position_xyz[0]):.3f} m is beyond the double's reach"
        return None

    def moves(self) -> list[tuple]:
        return [c for c in self.calls if c[0] == "move"]


def fault(message: str = "double: injected controller reflex") -> BackendFault:
    return BackendFault(message)
