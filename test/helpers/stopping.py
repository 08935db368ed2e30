"""Stop a backend from a second thread while its first thread is inside move_to_pose (backend stop tests)."""

from __future__ import annotations

import threading
import time
from typing import Sequence

from grounded_planner.execution.backend import MotionStoppedError, RobotBackend


def stop_during_move(
    backend: RobotBackend,
    position_xyz: Sequence[float],
    yaw_rad: float = 0.0,
    speed_scale: float = 0.5,
    after_s: float = 0.3,
) -> tuple[bool, float]:
    """Start a move, call ``stop()`` after ``after_s``; return (the move ended with MotionStoppedError,
    seconds ``stop()`` took). Fails if the move thread is still running 2 s after the stop."""
    stopped: list[MotionStoppedError] = []

    def move() -> None:
        try:
            backend.move_to_pose(position_xyz, yaw_rad, speed_scale)
        except MotionStoppedError as exc:
            stopped.append(exc)

    worker = threading.Thread(target=move)
    worker.start()
    time.sleep(after_s)
    asked = time.monotonic()
    backend.stop()
    took = time.monotonic() - asked
    worker.join(2.0)
    assert not worker.is_alive(), "the move did not return after stop()"
    return bool(stopped), took
