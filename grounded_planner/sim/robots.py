"""Arm models of the simulated workcell: names the workcell drives, gripper command mapping, inverse kinematics.

``gp5`` is the simple arm defined in :mod:`grounded_planner.sim.scene` (analytic IK, always available).
``fr3`` is the Franka Research 3 MJCF that franky-sim ships (meshes, the Franka hand on a tendon), attached to
the scene with MjSpec; its 7-joint IK is numeric (damped least squares with a posture term).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from grounded_planner.sim.scene import ARM, ARM_JOINTS, ARM_LIMITS, FINGER_JOINTS, HAND_BODY


class IKError(ValueError):
    """No joint solution for a tool pose (out of reach or beyond a joint limit); the message says which."""


def top_down_rotation(yaw_rad: float) -> np.ndarray:
    """Tool rotation (3x3, columns = tool axes in the base frame): z straight down, the fingers' closing axis
    (tool y) at ``yaw_rad`` about base z (0 = along base y)."""
    c, s = math.cos(yaw_rad), math.sin(yaw_rad)
    y = np.array([-s, c, 0.0])
    z = np.array([0.0, 0.0, -1.0])
    return np.column_stack([np.cross(y, z), y, z])


@dataclass(frozen=True)
class RobotSpec:
    """What the workcell needs to know of an arm model (names as in the compiled MuJoCo model)."""

    name: str
    arm_joints: tuple[str, ...]  # in actuator order
    arm_actuators: tuple[str, ...]  # position actuators of the arm joints, same order
    finger_joints: tuple[str, str]  # slide joints; the opening is their sum, metres
    finger_bodies: tuple[str, str]  # bodies whose geoms count as "finger touches object"
    gripper_actuators: tuple[str, ...]
    max_opening_m: float = 0.08  # full opening between the fingers, metres
    hand_body: str = "hand"  # held objects are welded to this body
    tcp_site: str = "tcp"  # tool centre point, 1 cm above the fingertips, z along the tool


GP5 = RobotSpec("gp5", ARM_JOINTS, tuple(f"a_{j[2:]}" for j in ARM_JOINTS), FINGER_JOINTS,
                ("finger_left", "finger_right"), tuple(f"a_{j[2:]}" for j in FINGER_JOINTS),
                max_opening_m=2 * ARM.finger_travel_m)
FR3_PREFIX = "fr3/"  # every name of the attached FR3 model starts with it
FR3 = RobotSpec("fr3", tuple(f"{FR3_PREFIX}fr3_joint{i}" for i in range(1, 8)),
                tuple(f"{FR3_PREFIX}fr3_joint{i}" for i in range(1, 8)),
                (f"{FR3_PREFIX}finger_joint1", f"{FR3_PREFIX}finger_joint2"),
                (f"{FR3_PREFIX}left_finger", f"{FR3_PREFIX}right_finger"), (f"{FR3_PREFIX}hand",),
                max_opening_m=0.08, hand_body=HAND_BODY["fr3"], tcp_site=f"{FR3_PREFIX}tcp")
ROBOT_SPECS = {"gp5": GP5, "fr3": FR3}

# The FR3's usual ready pose (rad): hand down above the table, elbow up, clear of the camera's view of the table.
FR3_HOME_Q = np.array([0.0, -0.6, 0.0, -2.4, 0.0, 1.8, math.pi / 4])
# The Franka hand's tendon actuator: force = gain * ctrl - 100 * length, so at rest length = ctrl * gain / 100,
# and the tendon length is half the opening (each finger enters with coefficient 0.5).
_FR3_GRIPPER_GAIN = 0.01568627451
_FR3_GRIPPER_STIFFEN = 5.0
_FR3_TCP_IN_HAND_M = 0.1034  # flange-to-TCP of the Franka hand, 1 cm above the fingertips


def gripper_ctrl(robot: RobotSpec, width_m: float) -> list[float]:
    """Actuator set-points that open the gripper to ``width_m``."""
    if robot.name == "fr3":
        return [0.5 * width_m * 100.0 / _FR3_GRIPPER_GAIN]
    return [width_m / 2, width_m / 2]


def gripper_force_range(robot: RobotSpec, force_n: float) -> list[float]:
    """Actuator force limits that squeeze with ``force_n`` per finger."""
    if robot.name == "fr3":
        return [2.0 * force_n]  # the tendon splits its force between the two fingers
    return [force_n, force_n]


def franky_sim_assets() -> Path:
    """Folder of franky-sim's FR3 model; raises :class:`FileNotFoundError` with the install hint."""
    import importlib.util

    spec = importlib.util.find_spec("franky_sim")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("robot: fr3 needs franky-sim's FR3 model: pip install 'grounded_planner[execution]' "
                                "(franky-sim), or use robot: gp5")
    assets = Path(spec.origin).parent / "assets"
    if not (assets / "fr3.xml").is_file():
        raise FileNotFoundError(f"franky-sim is installed but has no {assets / 'fr3.xml'}; use robot: gp5")
    return assets


def attach_fr3(scene_spec) -> None:
    """Attach franky-sim's FR3 (with its hand) at the base-frame origin of an MjSpec, gravity-compensated, with
    a ``tcp`` site on the hand."""
    import mujoco

    assets = franky_sim_assets()
    fr3 = mujoco.MjSpec.from_file(str(assets / "fr3.xml"))
    fr3.meshdir = str(assets / "meshes")
    for body in fr3.bodies:
        body.gravcomp = 1  # like libfranka's gravity compensation: the position loop only tracks
    # the menagerie-style hand actuator squeezes with only 100 N/m * gap (~2 N on a 45 mm box), too weak to centre
    # an object between the coupled fingers: 5x stiffer with the same set-point mapping (stiffer still, the pads
    # dig into thin cup walls and snag them)
    hand = fr3.actuator("hand")
    hand.gainprm[0] *= _FR3_GRIPPER_STIFFEN
    hand.biasprm[1] *= _FR3_GRIPPER_STIFFEN
    hand.biasprm[2] = -20.0
    fr3.body("hand").add_site(name="tcp", pos=[0, 0, _FR3_TCP_IN_HAND_M], size=[0.004, 0, 0], rgba=[1, 0, 1, 0])
    scene_spec.option.integrator = fr3.option.integrator  # both implicitfast: no attach conflict to warn about
    frame = scene_spec.worldbody.add_frame(pos=[0, 0, 0])
    frame.attach_body(fr3.body("base"), FR3_PREFIX, "")


def gp5_ik(tcp_xyz: Sequence[float], yaw_rad: float, roll_hint: float | None = None) -> np.ndarray:
    """Analytic IK of the gp5 arm for a top-down tool pose.

    Parameters
    ----------
    tcp_xyz : (3,) tool centre point in the base frame, metres.
    yaw_rad : rotation of the fingers' closing axis about base z (0 = closing along base y). The gripper is
        symmetric, so yaw and yaw + pi are the same grasp; the wrist roll nearest ``roll_hint`` is taken.

    Returns
    -------
    q : (5,) joint angles in ``ARM_JOINTS`` order, radians (elbow-up branch).

    Raises :class:`IKError` when the point is out of reach or a joint limit is exceeded.
    """
    x, y, z = (float(v) for v in tcp_xyz)
    a = ARM
    psi = math.atan2(y, x) if math.hypot(x, y) > 1e-9 else 0.0
    r = math.hypot(x, y)
    h = z + a.tool_m - a.base_height_m  # wrist pitch axis height above the shoulder axis
    l1, l2 = a.upper_arm_m, a.forearm_m
    c2 = (r * r + h * h - l1 * l1 - l2 * l2) / (2 * l1 * l2)
    if abs(c2) > 1.0:
        raise IKError(f"tool point {np.round([x, y, z], 3).tolist()} m is out of the arm's reach "
                      f"(wrist at {math.hypot(r, h):.3f} m from the shoulder, reach {l1 + l2:.2f} m)")
    best = None
    for q2 in (math.acos(c2), -math.acos(c2)):
        alpha1 = math.atan2(h, r) - math.atan2(l2 * math.sin(q2), l1 + l2 * math.cos(q2))
        elbow_z = l1 * math.sin(alpha1)
        if best is None or elbow_z > best[0]:
            best = (elbow_z, alpha1, q2)
    _, alpha1, q2 = best
    theta1 = math.pi / 2 - alpha1  # link angles are measured from +z towards the arm's reach direction
    theta2 = -q2
    theta3 = math.pi - theta1 - theta2  # tool axis straight down
    # the hand's y axis (closing axis) sits at base yaw psi; rolling about the downward tool axis by rho turns
    # it to psi - rho
    rho = _wrap_pi(psi - yaw_rad)
    lo, hi = ARM_LIMITS[4]
    candidates = [c for c in (rho, rho - math.pi, rho + math.pi) if lo <= c <= hi]
    hint = 0.0 if roll_hint is None else roll_hint
    rho = min(candidates, key=lambda c: abs(c - hint))
    q = np.array([psi, theta1, theta2, _wrap_pi(theta3), rho])
    for i, (lo, hi) in enumerate(ARM_LIMITS):
        if not lo - 1e-9 <= q[i] <= hi + 1e-9:
            raise IKError(f"tool point {np.round([x, y, z], 3).tolist()} m needs {ARM_JOINTS[i]} = "
                          f"{q[i]:.2f} rad, beyond its limit [{lo}, {hi}]")
    return q


def _wrap_pi(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


class NumericIK:
    """Damped-least-squares IK on a scratch copy of the model's kinematics (the simulation state is untouched).

    Solves position and full orientation of the TCP site; a small posture term pulls redundant joints towards
    ``home_q`` so that repeated solves along a path stay on one branch.
    """

    def __init__(self, model, robot: RobotSpec, home_q: np.ndarray, tolerance_m: float = 1e-4,
                 tolerance_rad: float = 1e-3, max_iterations: int = 300, damping: float = 1e-3):
        import mujoco

        self.mujoco = mujoco
        self.model = model
        self.data = mujoco.MjData(model)
        ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in robot.arm_joints]
        self.qadr = np.array([model.jnt_qposadr[i] for i in ids])
        self.dadr = np.array([model.jnt_dofadr[i] for i in ids])
        self.limits = np.array([model.jnt_range[i] for i in ids])
        self.site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, robot.tcp_site)
        self.home_q = np.asarray(home_q, float)
        self.tolerance_m, self.tolerance_rad = tolerance_m, tolerance_rad
        self.max_iterations, self.damping = max_iterations, damping
        self.names = robot.arm_joints

    def solve(self, tcp_xyz: Sequence[float], yaw_rad: float, q_start: np.ndarray, flip: bool = True) -> np.ndarray:
        """Joint angles (n,) putting the TCP at ``tcp_xyz`` pointing down with ``yaw_rad``; raises IKError.

        ``flip`` also tries the hand turned by pi (the same grasp) and keeps the solution nearer ``q_start``;
        path waypoints, warm-started from their neighbour, skip it.
        """
        target = np.asarray(tcp_xyz, float)
        best = None
        for yaw in (yaw_rad, yaw_rad + math.pi) if flip else (yaw_rad,):  # a parallel gripper is symmetric
            q, err_p, err_r = self._solve(target, top_down_rotation(yaw), np.asarray(q_start, float))
            if err_p <= self.tolerance_m and err_r <= self.tolerance_rad:
                cost = float(np.abs(q - q_start).sum())
                if best is None or cost < best[0]:
                    best = (cost, q)
        if best is None:
            raise IKError(f"no joint solution puts the tool at {np.round(target, 3).tolist()} m pointing down "
                          f"(yaw {math.degrees(yaw_rad):.0f} deg) within the joint limits: out of reach")
        return best[1]

    def _solve(self, target: np.ndarray, rot: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float, float]:
        mj, d = self.mujoco, self.data
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        q = np.clip(q.copy(), self.limits[:, 0], self.limits[:, 1])
        err_p = err_r = math.inf
        for _ in range(self.max_iterations):
            d.qpos[self.qadr] = q
            mj.mj_kinematics(self.model, d)
            mj.mj_comPos(self.model, d)
            pos = d.site_xpos[self.site]
            cur = d.site_xmat[self.site].reshape(3, 3)
            e_pos = target - pos
            e_rot = 0.5 * sum(np.cross(cur[:, k], rot[:, k]) for k in range(3))  # small-angle rotation error
            err_p, err_r = float(np.linalg.norm(e_pos)), float(np.linalg.norm(e_rot))
            if err_p <= self.tolerance_m and err_r <= self.tolerance_rad:
                break
            mj.mj_jacSite(self.model, d, jacp, jacr, self.site)
            J = np.vstack([jacp[:, self.dadr], jacr[:, self.dadr]])
            e = np.concatenate([e_pos, e_rot])
            JJt = J @ J.T + self.damping * np.eye(6)
            dq = J.T @ np.linalg.solve(JJt, e)
            if err_p > 10 * self.tolerance_m or err_r > 10 * self.tolerance_rad:
                # posture, while still far: drift in the Jacobian's null space towards home (elbow up, away from
                # the limits); off for the last digits, where the damped null space is not exact enough
                null = np.eye(len(q)) - J.T @ np.linalg.solve(JJt, J)
                dq += 0.05 * null @ (self.home_q - q)
            step = float(np.abs(dq).max())
            if step > 0.2:
                dq *= 0.2 / step
            q = np.clip(q + dq, self.limits[:, 0], self.limits[:, 1])
        return q, err_p, err_r
