"""The robot backend base class every arm driver implements, and the typed errors backends raise."""

from __future__ import annotations

import abc
import logging
import math
from types import TracebackType
from typing import Sequence

import numpy as np

from grounded_planner.errors import InputError, RunFailure

log = logging.getLogger(__name__)


class BackendError(RunFailure):
    """Base class of every error a robot backend raises."""


class BackendFault(BackendError):
    """The robot or its driver failed (controller reflex, lost connection, SDK exception): outcome ``fault``."""


class NotConnectedError(BackendFault):
    """A command was sent to a backend that is not connected (call ``connect()`` or use ``with backend:``)."""


class UnreachableError(BackendError):
    """The pose has no IK solution or no motion plan: outcome ``unreachable``. Nothing was moved."""


class MotionTimeoutError(BackendError):
    """A motion or gripper command did not finish within its limit: outcome ``timeout``. The arm was stopped."""


class MotionStoppedError(BackendError):
    """A motion ended early because ``stop()`` was called (e.g. on cancel): outcome ``cancelled``."""


class GraspFailedError(BackendError):
    """The gripper closed, but not on the expected object: the fingers stopped outside the tolerance around the
    object's expected width (libfranka's grasp returned false): outcome ``grasp_failed``."""


def check_pose_args(position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> np.ndarray:
    """Validate ``move_to_pose`` arguments; return the position as a float (3,) array in metres.

    Raises ``ValueError`` naming the bad argument (a caller bug, not a robot fault).
    """
    position = np.asarray(position_xyz, dtype=float).reshape(-1)
    if position.shape != (3,) or not np.all(np.isfinite(position)):
        raise InputError(f"position_xyz must be 3 finite numbers in metres (base frame), got {position_xyz!r}")
    if not math.isfinite(float(yaw_rad)):
        raise InputError(f"yaw_rad must be a finite angle in radians, got {yaw_rad!r}")
    if not (0.0 < float(speed_scale) <= 1.0):
        raise InputError(f"speed_scale must be in (0, 1] (fraction of the configured maximum), got {speed_scale!r}")
    return position


class RobotBackend(abc.ABC):
    """An arm with a parallel gripper, commanded by Cartesian end-effector poses in the robot base frame.

    Poses are top-down grasps: the tool points straight down (-z of the base frame) and ``yaw_rad`` is the
    rotation of the gripper's closing axis about the base z axis (0 = fingers close along base y). A parallel
    gripper is symmetric, so ``yaw_rad`` and ``yaw_rad + pi`` are the same grasp. (Geometry targets measure
    their ``yaw`` from base x; the executor converts: backend yaw = target yaw - pi/2.)
    ``position_xyz`` is the tool centre point (between the fingertips) in metres.

    Contract every implementation keeps:
    - ``move_to_pose`` blocks until the motion finished; it raises :class:`UnreachableError` before moving
      when there is no solution, :class:`MotionTimeoutError`, :class:`MotionStoppedError` after ``stop()``,
      and :class:`BackendFault` for anything the robot reports.
    - ``stop()`` may be called from any thread while another thread is inside a command; it returns within
      ``stop_timeout_s`` and leaves the arm standing still where it is and the gripper as it was.
    - Commands on a backend that is not connected raise :class:`NotConnectedError`.
    """

    #: short name used by ``make_backend`` and in logs
    name: str = "base"
    #: how long ``stop()`` may take before the arm is guaranteed still, seconds
    stop_timeout_s: float = 1.0
    #: True when ``check_reachable`` answers without a connection (IK on a model): dry runs say whether
    #: reachability was checked
    checks_reachability_offline: bool = False

    # -- lifecycle --------------------------------------------------------------------------------
    @abc.abstractmethod
    def connect(self) -> None:
        """Open the connection to the robot (idempotent). Raises :class:`BackendFault` if it cannot."""

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool:
        """True between a successful ``connect()`` and ``disconnect()``."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Release the robot (idempotent); a moving arm is stopped first."""

    # -- motion ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        """Move the tool centre point to ``position_xyz`` (m, base frame) with the gripper yaw ``yaw_rad`` (rad).

        ``speed_scale`` in (0, 1] scales the backend's configured maximum velocity and acceleration.
        """

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop any motion now (thread-safe, bounded by ``stop_timeout_s``); an in-flight command raises
        :class:`MotionStoppedError`."""

    # -- gripper -----------------------------------------------------------------------------------
    @abc.abstractmethod
    def gripper_open(self, width_m: float | None = None) -> None:
        """Open the gripper to ``width_m`` (metres between the fingers), fully when None."""

    @abc.abstractmethod
    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        """Close the gripper with ``force_n`` (newtons, backend default when None); return the width after (m).

        ``expected_width_m`` is the width of the object to hold (the grasp target's ``width``; None: unknown). A
        backend whose gripper checks a grasp against it (the Franka Hand) raises :class:`GraspFailedError` when the
        fingers stop outside its tolerance; the others may ignore it."""

    @abc.abstractmethod
    def gripper_width(self) -> float:
        """Current distance between the fingers, metres."""

    # -- optional ---------------------------------------------------------------------------------
    def current_pose(self) -> tuple[np.ndarray, float] | None:
        """Measured tool position (3,) in m and yaw in rad, or None when the backend cannot tell.

        The executor uses it to retreat straight up from wherever the arm stopped.
        """
        return None

    def check_reachable(self, position_xyz: Sequence[float], yaw_rad: float) -> str | None:
        """Dry-run reachability check: None when the pose can be reached, else the reason.

        The default cannot tell and answers None; backends with IK override it.
        """
        return None

    # -- the link to the robot ---------------------------------------------------------------------
    #: why the link to the robot was lost ("" while it holds): a state read that failed on a connected backend
    link_lost: str = ""

    def scene_success(self) -> bool | None:
        """Whether the scene's task is done, for a backend that can tell (the simulator can); None: it cannot."""
        return None

    def reset_scene(self) -> None:
        """Put the scene back as it started, for a backend that can (the simulator); a robot's cannot: raises
        :class:`BackendError` saying so, nothing changed."""
        raise BackendError(
            f"{self.name}: a real robot's scene is set back by a person, not by the stack; nothing changed"
        )

    def read_state(self) -> None:
        """Read the robot's state once (raises :class:`BackendFault` when the robot does not answer).

        The default reads the gripper width; backends override it with their cheapest full state read."""
        self.gripper_width()

    def check_link(self) -> bool:
        """Is the robot reachable? One state read; a failed read marks the link lost (:attr:`link_lost`)."""
        if not self.is_connected:
            return False
        try:
            self.read_state()
        except BackendFault as exc:
            self.lose_link(str(exc))
            return False
        return not self.link_lost

    def lose_link(self, reason: str) -> None:
        """Note that the robot stopped answering (logged once per loss); :meth:`reconnect` brings it back."""
        if not self.link_lost:
            log.error("%s: lost the link to the robot: %s", self.name, reason)
        self.link_lost = reason or "the robot does not answer"

    @property
    def is_reachable(self) -> bool:
        """Connected and the last state read answered."""
        return self.is_connected and not self.link_lost

    def reconnect(self) -> None:
        """Drop the old connection and open a new one; :class:`BackendFault` when the robot is still away.

        Brings back a robot that dropped out (a restarted controller, a network that came back) without
        rebuilding the backend."""
        try:
            self.disconnect()
        except BackendError as exc:  # the old link is gone anyway
            log.warning("%s: disconnecting the lost link failed: %s", self.name, exc)
        self.connect()
        self.read_state()  # connected is not answering: a BackendFault here leaves the link lost
        if self.link_lost:
            log.info("%s: the robot is back (%s)", self.name, "reconnected")
        self.link_lost = ""

    def require_connected(self) -> None:
        """Raise :class:`NotConnectedError` unless connected (call at the top of every command)."""
        if not self.is_connected:
            raise NotConnectedError(f"{self.name} backend is not connected: call connect() or use 'with backend:'")

    # -- context manager ---------------------------------------------------------------------------
    def __enter__(self) -> "RobotBackend":
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.is_connected:
                self.stop()
        except BackendError as err:  # still disconnect; the original exception (if any) matters more
            log.warning("%s: stop() on exit failed: %s", self.name, err)
        finally:
            self.disconnect()
