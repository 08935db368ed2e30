"""The simulated workcell: a MuJoCo model of a scenario, stepped physics, the arm's IK and motions, the gripper
with its weld-on-contact grasp (the camera is in :mod:`~grounded_planner.sim.camera`, the success predicates in
:mod:`~grounded_planner.sim.predicates`)."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from grounded_planner.errors import InputError, RunFailure
from grounded_planner.geometry.transforms import fold_half_turn
from grounded_planner.sim.robots import IKError  # noqa: F401  (raised by solve_ik; importable from here too)
from grounded_planner.sim.robots import (
    ROBOT_SPECS,
    NumericIK,
    attach_model,
    gp5_ik,
    gripper_ctrl,
    gripper_force_range,
    gripper_opening,
)
from grounded_planner.sim.camera import BASE_FRAME, CAMERA_FRAME, SimError, WorkcellCamera  # noqa: F401  (re-exported)
from grounded_planner.sim.predicates import PredicateResult, evaluate_predicate  # noqa: F401  (re-exported)
from grounded_planner.sim.scenario import Scenario, ScenarioError, load_scenario
from grounded_planner.sim.scene import HOME_TCP_M, cabinet_handle_local, scene_mjcf
from grounded_planner.install_hints import install_hint

log = logging.getLogger(__name__)

CONTROL_DT_S = 0.02  # the arm/gripper set-points are updated at 50 Hz (every 10 physics steps)


class SimStopped(RunFailure):
    """A motion ended early because :meth:`SimWorkcell.request_stop` was called."""


class SimMotionTimeout(RunFailure):
    """The arm did not settle at its goal within the time limit (blocked by contact, e.g. a drawer at its stop)."""


def _import_mujoco():
    # Headless rendering needs a GL backend chosen before the first import; EGL works on CPU-only machines
    # with Mesa (libegl1 + libgl1-mesa-dri); set MUJOCO_GL=osmesa where EGL is missing.
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import mujoco  # lazy: optional SDK (mujoco), not in install_requires
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SimError(
            f"the simulated workcell needs MuJoCo: {install_hint('mujoco', 'sim', 'python3-mujoco-pip')}"
        ) from exc
    # MuJoCo picks its GL backend when it is first imported: if something imported it before MUJOCO_GL was set
    # (and before any OpenGL binding was loaded), pick again now, or offscreen rendering fails without a display
    gl = sys.modules.get("mujoco.rendering.classic.gl_context")
    wanted = os.environ["MUJOCO_GL"].lower().strip()
    if gl is not None and getattr(gl, "_MUJOCO_GL", wanted) != wanted and "OpenGL" not in sys.modules:
        importlib.reload(gl)
    return mujoco


class SimWorkcell(WorkcellCamera):
    """A scenario loaded into MuJoCo: physics, arm, gripper, camera and success checks.

    Thread-safety: every access to the MuJoCo state goes through ``self.lock`` in short slices, so a camera
    thread can :meth:`render` while the executor's thread is inside a motion.
    """

    def __init__(self, scenario: Scenario, seed: int | None = None, settle_s: float = 0.3):
        self.mujoco = _import_mujoco()
        mj = self.mujoco
        self.scenario = scenario.sample(seed)
        self.seed = seed
        self.robot = ROBOT_SPECS[self.scenario.robot]
        self.xml, self.holdable_bodies = scene_mjcf(self.scenario)
        try:
            if self.robot.model == "scene":
                self.model = mj.MjModel.from_xml_string(self.xml)
            else:
                spec = mj.MjSpec.from_string(self.xml)
                attach_model(self.robot, spec)
                self.model = spec.compile()
        except FileNotFoundError as exc:
            raise SimError(f"{scenario.source or scenario.name}: {exc}") from exc
        except ValueError as exc:
            raise ScenarioError(
                f"{scenario.source or scenario.name}: MuJoCo rejected the generated scene: {exc}"
            ) from exc
        self.data = mj.MjData(self.model)
        self.lock = threading.RLock()
        self._stop = threading.Event()
        #: called after every control tick with the sim time (s); used to record videos / publish state
        self.tick_listeners: list[Callable[[float], None]] = []
        self._pending: list[Callable[[float], None]] = []  # listeners of a perturbation still under way (slip)
        #: 0 runs as fast as the CPU allows; 1.0 paces the simulation to the wall clock (live demos)
        self.realtime_factor = 0.0
        self._rng = np.random.default_rng(seed if seed is not None else 0)
        self._id = lambda kind, name: mj.mj_name2id(self.model, kind, name)
        robot = self.robot
        joint = lambda name: self._id(mj.mjtObj.mjOBJ_JOINT, name)  # noqa: E731
        actuator = lambda name: self._id(mj.mjtObj.mjOBJ_ACTUATOR, name)  # noqa: E731
        self._arm_qadr = np.array([self.model.jnt_qposadr[joint(j)] for j in robot.arm_joints])
        self._arm_dadr = np.array([self.model.jnt_dofadr[joint(j)] for j in robot.arm_joints])
        self._finger_qadr = np.array([self.model.jnt_qposadr[joint(j)] for j in robot.finger_joints])
        self._finger_dadr = np.array([self.model.jnt_dofadr[joint(j)] for j in robot.finger_joints])
        self._arm_act = np.array([actuator(a) for a in robot.arm_actuators])
        self._gripper_act = np.array([actuator(a) for a in robot.gripper_actuators])
        self._tcp_site = self._id(mj.mjtObj.mjOBJ_SITE, robot.tcp_site)
        self._hand_body = self._id(mj.mjtObj.mjOBJ_BODY, robot.hand_body)
        finger_bodies = [self._id(mj.mjtObj.mjOBJ_BODY, b) for b in robot.finger_bodies]
        self._finger_geoms = tuple(
            {g for g in range(self.model.ngeom) if int(self.model.geom_bodyid[g]) == b} for b in finger_bodies
        )
        self._tool_bodies = {self._hand_body, *finger_bodies}
        self._holdable_ids = {self._id(mj.mjtObj.mjOBJ_BODY, b): b for b in self.holdable_bodies}
        self._weld_ids = {b: self._id(mj.mjtObj.mjOBJ_EQUALITY, f"grasp:{b}") for b in self.holdable_bodies}
        self._camera_id = self._id(mj.mjtObj.mjOBJ_CAMERA, "rgbd")
        self._init_camera(self._camera_id, self._rng)
        self.held_body: str | None = None
        home_q = np.array(robot.home_q) if robot.home_q else None
        self._ik = (
            NumericIK(self.model, robot, home_q, fallback_seeds=tuple(np.array(s) for s in robot.ik_fallback_seeds))
            if home_q is not None
            else None
        )
        # start at home with the gripper open, objects resting on the table
        q_home = home_q if home_q is not None else gp5_ik(HOME_TCP_M, 0.0)
        self.data.qpos[self._arm_qadr] = q_home
        self.data.ctrl[self._arm_act] = q_home
        self.data.qpos[self._finger_qadr] = (
            gripper_ctrl(robot, robot.max_opening_m)[0] if robot.gripper == "jaw" else robot.max_opening_m / 2
        )
        self.data.ctrl[self._gripper_act] = gripper_ctrl(robot, robot.max_opening_m)
        for obj in self.scenario.objects:  # drawers that start pulled out
            if obj.kind == "cabinet" and obj.drawer_open_m > 0:
                j = self._id(mj.mjtObj.mjOBJ_JOINT, f"obj:{obj.id}:drawer_slide")
                self.data.qpos[self.model.jnt_qposadr[j]] = obj.drawer_open_m
        mj.mj_forward(self.model, self.data)
        self.step(int(round(settle_s / self.model.opt.timestep)))
        # the settled start, for reset(): MuJoCo's own integration state (qpos, qvel, ctrl, eq_active, ...)
        self._start_state = self._get_state()
        self._start_forcerange = self.model.actuator_forcerange.copy()

    def _get_state(self) -> np.ndarray:
        mj, spec = self.mujoco, self.mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mj.mj_stateSize(self.model, spec))
        mj.mj_getState(self.model, self.data, state, spec)
        return state

    def reset(self) -> None:
        """Put the scene back as it was loaded and settled: arm at home, gripper open and empty, every object (and
        drawer) where the scenario placed it. The simulated clock goes on (stamps never run backwards). Call it
        between motions, not during one."""
        mj = self.mujoco
        with self.lock:
            now = self.data.time
            mj.mj_setState(self.model, self.data, self._start_state, mj.mjtState.mjSTATE_INTEGRATION)
            self.data.time = now
            self.model.actuator_forcerange[:] = self._start_forcerange
            self.held_body = None
            for listener in self._pending:  # a slip's re-close still to come: not on the reset scene
                self.tick_listeners.remove(listener)
            self._pending.clear()
            mj.mj_forward(self.model, self.data)
        self._stop.clear()
        log.info("scene reset to its start (%s)", self.scenario.name)

    @classmethod
    def from_scenario(
        cls, path: str | Path, seed: int | None = None, robot: str | None = None, **kwargs
    ) -> "SimWorkcell":
        """Load a scenario YAML (see config/scenarios/) with its randomisation drawn from ``seed``;
        ``robot`` (``gp5`` | ``fr3``) overrides the scenario's arm model."""
        scenario = load_scenario(path)
        if robot is not None:
            if robot not in ROBOT_SPECS:
                raise ScenarioError(f"robot: unknown arm {robot!r} (expected one of {', '.join(ROBOT_SPECS)})")
            scenario = dataclasses.replace(scenario, robot=robot)
        return cls(scenario, seed=seed, **kwargs)

    # -- physics ------------------------------------------------------------------------------------
    @property
    def time_s(self) -> float:
        return float(self.data.time)

    def step(self, n: int = 1) -> None:
        """Advance the physics ``n`` steps of ``model.opt.timestep`` (2 ms)."""
        if n <= 0:
            return
        with self.lock:
            self.mujoco.mj_step(self.model, self.data, nstep=int(n))

    def _tick(self, wall_start: float, sim_start: float) -> None:
        """One control period of physics, then the listeners; paces to the wall clock when asked."""
        self.step(int(round(CONTROL_DT_S / self.model.opt.timestep)))
        for listener in list(self.tick_listeners):
            listener(self.time_s)
        if self.realtime_factor > 0:
            ahead = (self.time_s - sim_start) / self.realtime_factor - (time.monotonic() - wall_start)
            if ahead > 0:
                time.sleep(ahead)

    def request_stop(self) -> None:
        """Make the motion in progress (if any) end at its next control tick with :class:`SimStopped`."""
        self._stop.set()

    def clear_stop(self) -> None:
        self._stop.clear()

    # -- kinematics ---------------------------------------------------------------------------------
    def solve_ik(
        self, tcp_xyz: Sequence[float], yaw_rad: float, q_hint: np.ndarray | None = None, continuous: bool = False
    ) -> np.ndarray:
        """Arm joint angles (n,) for a top-down tool pose; raises :class:`IKError` (out of reach, joint limits).

        ``tcp_xyz`` (3,) is the tool centre point in the base frame (m); ``yaw_rad`` the closing axis about base z
        (0 = along base y; yaw and yaw + pi are the same grasp). ``q_hint`` (default: the current joints) picks
        the solution nearest to it (gp5: wrist roll; fr3: the numeric solve starts there). ``continuous``: a
        path waypoint next to ``q_hint``, so the fr3 solve does not also try the hand turned by pi.
        """
        q_hint = self.arm_q() if q_hint is None else np.asarray(q_hint, float)
        if self._ik is None:
            return gp5_ik(tcp_xyz, yaw_rad, roll_hint=float(q_hint[4]))
        return self._ik.solve(tcp_xyz, yaw_rad, q_hint, flip=not continuous)

    def tcp_pose(self) -> tuple[np.ndarray, float]:
        """Measured tool centre point (3,) in m (base frame) and gripper yaw in rad, wrapped to (-pi/2, pi/2]."""
        with self.lock:
            pos = self.data.site_xpos[self._tcp_site].copy()
            closing_axis = self.data.site_xmat[self._tcp_site].reshape(3, 3)[:, 1]
        yaw = math.atan2(-closing_axis[0], closing_axis[1])  # yaw 0 = closing axis along base +y
        if yaw <= -math.pi / 2:
            yaw += math.pi
        elif yaw > math.pi / 2:
            yaw -= math.pi
        return pos, yaw

    def arm_q(self) -> np.ndarray:
        with self.lock:
            return self.data.qpos[self._arm_qadr].copy()

    def move_tcp(
        self,
        tcp_xyz: Sequence[float],
        yaw_rad: float,
        speed_mps: float = 0.4,
        settle_timeout_s: float = 2.0,
        tolerance_m: float = 0.003,
        guarded: bool = False,
    ) -> str:
        """Move the TCP along a straight line to a top-down pose (blocking; sim time).

        The whole path is solved first (raises :class:`IKError` before moving). Then the joint set-points follow
        a minimum-jerk profile at ``speed_mps`` and the arm is given ``settle_timeout_s`` to arrive within
        ``tolerance_m``; otherwise :class:`SimMotionTimeout`. :meth:`request_stop` ends it with :class:`SimStopped`.

        ``guarded`` (moves that mostly go down): when the hand or the held object touches down and the TCP falls
        behind its set-point by more than 4 mm, the arm holds where it is and the move ends (a guarded move, as a
        compliant arm's contact stop). Returns ``"arrived"`` or ``"touched_down"``.
        """
        goal = np.asarray(tcp_xyz, dtype=float)
        with self.lock:
            start = self.data.site_xpos[self._tcp_site].copy()
            closing_axis = self.data.site_xmat[self._tcp_site].reshape(3, 3)[:, 1].copy()
        # the hand's actual yaw, not folded into (-pi/2, pi/2]: the path must start from the hand as it is
        start_yaw = math.atan2(-closing_axis[0], closing_axis[1])
        q_start = self.arm_q()
        short_turn = fold_half_turn(yaw_rad - start_yaw)  # the shorter of the two equivalent turns of the gripper
        distance = float(np.linalg.norm(goal - start))
        self.solve_ik(goal, start_yaw + short_turn, q_start)  # unreachable: raise before anything moves
        # if the short turn runs a wrist joint into its limit on the way (a held yaw kept while the base pans turns
        # the wrist roll the other way), turn the other way round; a hand that keeps its yaw (no short turn) may
        # have to turn half a turn either way, whichever leaves the wrist roll inside its range
        sign = math.copysign(1.0, short_turn or 1.0)
        turns = (short_turn, short_turn - sign * math.pi, short_turn + sign * math.pi)
        for turn in turns:
            try:
                path = self._plan_path(start, goal, start_yaw, turn, q_start, distance, speed_mps)
                break
            except IKError:
                if turn == turns[-1]:
                    raise
        drop = float(start[2] - goal[2])
        # guard only moves that mostly go down (descend, place); a pull that also sinks a few mm is not one
        guarded = guarded and drop > 0.005 and float(np.linalg.norm((goal - start)[:2])) <= drop
        wall0, sim0 = time.monotonic(), self.time_s
        for point, q in path:
            self._check_stop()
            with self.lock:
                self.data.ctrl[self._arm_act] = q
            self._tick(wall0, sim0)
            if guarded and self._touched_down(point):
                return "touched_down"
        deadline = self.time_s + settle_timeout_s
        while True:
            self._check_stop()
            pos, _ = self.tcp_pose()
            with self.lock:
                qvel = np.abs(self.data.qvel[self._arm_dadr]).max()
            if np.linalg.norm(pos - goal) <= tolerance_m and qvel < 0.05:
                return "arrived"
            if guarded and self._touched_down(goal):
                return "touched_down"
            if self.time_s >= deadline:
                raise SimMotionTimeout(
                    f"the arm stopped {np.linalg.norm(pos - goal) * 1000:.1f} mm from its goal "
                    f"{np.round(goal, 3).tolist()} after {settle_timeout_s:.1f} s (blocked?)"
                )
            self._tick(wall0, sim0)

    def _plan_path(
        self,
        start: np.ndarray,
        goal: np.ndarray,
        start_yaw: float,
        turn: float,
        q_start: np.ndarray,
        distance: float,
        speed_mps: float,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Waypoints (TCP point, joint angles) every control tick along the line, yaw turning by ``turn``;
        minimum-jerk timing at ``speed_mps`` (and a wrist turn rate tied to it). Raises :class:`IKError`."""
        duration = max(distance / speed_mps, abs(turn) / (2.0 * speed_mps / 0.4), 0.1)
        n = max(int(math.ceil(duration / CONTROL_DT_S)), 1)
        path, q = [], q_start
        for k in range(1, n + 1):
            s = k / n
            s = 10 * s**3 - 15 * s**4 + 6 * s**5  # min-jerk: no velocity jumps at either end
            point = start + s * (goal - start)
            q = self.solve_ik(point, start_yaw + s * turn, q, continuous=True)  # from the previous waypoint
            path.append((point, q))
        return path

    def _touched_down(self, setpoint: np.ndarray, lag_m: float = 0.004) -> bool:
        """The TCP lags ``lag_m`` behind ``setpoint`` and the tool presses on something: hold here."""
        pos, _ = self.tcp_pose()
        if np.linalg.norm(pos - setpoint) <= lag_m or not self.touching_down():
            return False
        with self.lock:
            self.data.ctrl[self._arm_act] = self.data.qpos[self._arm_qadr]
        log.debug("guarded move: touched down %.1f mm above the set-point", (pos[2] - setpoint[2]) * 1000)
        return True

    def _check_stop(self) -> None:
        if self._stop.is_set():
            with self.lock:  # hold position where the arm is now
                self.data.ctrl[self._arm_act] = self.data.qpos[self._arm_qadr]
            raise SimStopped("motion stopped on request")

    # -- gripper ------------------------------------------------------------------------------------
    def gripper_width(self) -> float:
        """Distance between the fingers' inner faces, metres."""
        with self.lock:
            return gripper_opening(self.robot, self.data.qpos[self._finger_qadr])

    def set_gripper_force(self, force_n: float) -> None:
        limits = gripper_force_range(self.robot, force_n)
        with self.lock:
            for act, limit in zip(self._gripper_act, limits):
                self.model.actuator_forcerange[act] = [-limit, limit]

    def open_gripper(self, width_m: float | None = None, timeout_s: float = 1.0) -> float:
        """Release whatever is held and open to ``width_m`` (fully when None); returns the width reached."""
        full = self.robot.max_opening_m
        width = full if width_m is None else float(width_m)
        if not 0.0 <= width <= full + 1e-9:
            raise InputError(f"width_m must be in [0, {full:.3f}] m (the gripper's full opening), got {width_m!r}")
        self.release()
        with self.lock:
            self.data.ctrl[self._gripper_act] = gripper_ctrl(self.robot, width)
        self._run_gripper(timeout_s)
        return self.gripper_width()

    def close_gripper(self, force_n: float = 20.0, timeout_s: float = 1.0, min_hold_width_m: float = 0.004) -> float:
        """Close with ``force_n`` per finger until the fingers stop; returns the width after (m).

        When both fingers touch the same holdable body (a free object, a drawer) and the width is above
        ``min_hold_width_m``, the body is welded to the hand — the grasp holds it as friction would on a
        real gripper. Closing on nothing engages nothing and ends near width 0.
        """
        if force_n <= 0:
            raise InputError(f"force_n must be > 0 newtons, got {force_n!r}")
        self.set_gripper_force(force_n)
        with self.lock:
            self.data.ctrl[self._gripper_act] = gripper_ctrl(self.robot, 0.0)
        self._run_gripper(timeout_s)
        width = self.gripper_width()
        touched = self.finger_contacts()
        common = touched[0] & touched[1]
        if width > min_hold_width_m and common:
            self.attach(sorted(common)[0])
        return width

    def _run_gripper(self, timeout_s: float) -> None:
        wall0, sim0 = time.monotonic(), self.time_s
        end = self.time_s + timeout_s
        min_end = self.time_s + 0.1
        while self.time_s < end:
            self._check_stop()
            self._tick(wall0, sim0)
            with self.lock:
                moving = np.abs(self.data.qvel[self._finger_dadr]).max() > 1e-3
            if not moving and self.time_s >= min_end:
                return

    def finger_contacts(self) -> tuple[set[str], set[str]]:
        """Holdable bodies each finger (left, right) is touching now."""
        out: tuple[set[str], set[str]] = (set(), set())
        with self.lock:
            for i in range(self.data.ncon):
                c = self.data.contact[i]
                for side, finger in enumerate(self._finger_geoms):
                    if c.geom1 in finger or c.geom2 in finger:
                        other = c.geom2 if c.geom1 in finger else c.geom1
                        body = int(self.model.geom_bodyid[other])
                        if body in self._holdable_ids:
                            out[side].add(self._holdable_ids[body])
        return out

    def touching_down(self) -> bool:
        """True when the hand or the held object presses on something else (the table, a container)."""
        mj = self.mujoco
        with self.lock:
            tool = set(self._tool_bodies)
            if self.held_body is not None:
                held = self._id(mj.mjtObj.mjOBJ_BODY, self.held_body)
                tool |= {b for b in range(self.model.nbody) if self._is_descendant(b, held)}
            for i in range(self.data.ncon):
                c = self.data.contact[i]
                b1, b2 = int(self.model.geom_bodyid[c.geom1]), int(self.model.geom_bodyid[c.geom2])
                if (b1 in tool) != (b2 in tool):
                    return True
        return False

    def attach(self, body_name: str) -> None:
        """Weld ``body_name`` to the hand at their current relative pose."""
        mj = self.mujoco
        with self.lock:
            eq = self._weld_ids[body_name]
            b = self._id(mj.mjtObj.mjOBJ_BODY, body_name)
            hand_pos, hand_quat = self.data.xpos[self._hand_body], self.data.xquat[self._hand_body]
            obj_pos, obj_quat = self.data.xpos[b], self.data.xquat[b]
            inv = np.zeros(4)
            mj.mju_negQuat(inv, hand_quat)
            rel_pos = np.zeros(3)
            mj.mju_rotVecQuat(rel_pos, obj_pos - hand_pos, inv)
            rel_quat = np.zeros(4)
            mj.mju_mulQuat(rel_quat, inv, obj_quat)
            # weld data: anchor (3), body2 pose in body1's frame (pos 3, quat 4), torque scale
            self.model.eq_data[eq, 0:3] = 0.0
            self.model.eq_data[eq, 3:6] = rel_pos
            self.model.eq_data[eq, 6:10] = rel_quat
            self.model.eq_data[eq, 10] = 1.0
            self.data.eq_active[eq] = 1
            self.held_body = body_name
        log.debug("grasp: welded %s to the hand", body_name)

    def release(self) -> None:
        with self.lock:
            for eq in self._weld_ids.values():
                self.data.eq_active[eq] = 0
            self.held_body = None

    def slip(self, drop_s: float = 0.12) -> str | None:
        """Let the held object slip out of the hand (a perturbation): the grasp lets go, the fingers spring open
        for ``drop_s`` sim seconds so the object falls clear, then close again on nothing. Returns its body name.

        Call from a tick listener (inside a motion): the re-closing happens on the following ticks.
        """
        with self.lock:
            body = self.held_body
            if body is None:
                return None
            self.release()
            self.data.ctrl[self._gripper_act] = gripper_ctrl(self.robot, self.robot.max_opening_m)
        reclose_at = self.time_s + drop_s

        def reclose(time_s: float) -> None:
            if time_s >= reclose_at:
                with self.lock:
                    self.data.ctrl[self._gripper_act] = gripper_ctrl(self.robot, 0.0)
                    self.tick_listeners.remove(reclose)
                    self._pending.remove(reclose)

        self.tick_listeners.append(reclose)
        self._pending.append(reclose)  # a reset() before it fired drops it (it would close the reset gripper)
        log.info("perturbation: %s slipped out of the gripper", body)
        return body

    def move_object(self, object_id: str, dxy_m: Sequence[float]) -> None:
        """Shift a free object on the table by (dx, dy) metres (someone moved it) and let it settle."""
        spec = self.scenario.object(object_id)
        if spec.kind not in ("box", "cylinder", "cup", "bowl", "plate"):
            raise SimError(f"object {object_id!r} is a {spec.kind}: only free objects can be moved")
        mj = self.mujoco
        with self.lock:
            body = self._id(mj.mjtObj.mjOBJ_BODY, f"obj:{object_id}")
            adr = self.model.jnt_qposadr[self.model.body_jntadr[body]]
            dadr = self.model.jnt_dofadr[self.model.body_jntadr[body]]
            self.data.qpos[adr : adr + 2] += np.asarray(dxy_m, float)[:2]
            self.data.qvel[dadr : dadr + 6] = 0.0
            mj.mj_forward(self.model, self.data)
        log.info("perturbation: %s moved by (%.3f, %.3f) m", object_id, *np.asarray(dxy_m, float)[:2])

    # -- objects and success ------------------------------------------------------------------------
    def body_aabb(self, body_name: str) -> tuple[np.ndarray, np.ndarray]:
        """World axis-aligned box (lo (3,), hi (3,)) around every geom of a body and its children."""
        mj = self.mujoco
        root = self._id(mj.mjtObj.mjOBJ_BODY, body_name)
        if root < 0:
            raise SimError(f"no body named {body_name!r} in the scene")
        with self.lock:
            bodies = {root} | {b for b in range(self.model.nbody) if self._is_descendant(b, root)}
            corners = []
            signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
            for g in range(self.model.ngeom):
                if int(self.model.geom_bodyid[g]) not in bodies:
                    continue
                center, half = self.model.geom_aabb[g, :3], self.model.geom_aabb[g, 3:]
                local = center + signs * half
                corners.append(local @ self.data.geom_xmat[g].reshape(3, 3).T + self.data.geom_xpos[g])
        pts = np.vstack(corners)
        return pts.min(axis=0), pts.max(axis=0)

    def _is_descendant(self, body: int, root: int) -> bool:
        while body > 0:
            if body == root:
                return True
            body = int(self.model.body_parentid[body])
        return False

    def object_pose(self, object_id: str) -> tuple[np.ndarray, np.ndarray]:
        """Position (3,) and 3x3 rotation of an object's body in the base frame."""
        self.scenario.object(object_id)  # names the bad id
        b = self._id(self.mujoco.mjtObj.mjOBJ_BODY, f"obj:{object_id}")
        with self.lock:
            return self.data.xpos[b].copy(), self.data.xmat[b].reshape(3, 3).copy()

    def drawer_opening_m(self, cabinet_id: str) -> float:
        """How far a cabinet's drawer is pulled out, metres."""
        spec = self.scenario.object(cabinet_id)
        if spec.kind != "cabinet":
            raise SimError(f"object {cabinet_id!r} is a {spec.kind}, not a cabinet")
        j = self._id(self.mujoco.mjtObj.mjOBJ_JOINT, f"obj:{cabinet_id}:drawer_slide")
        with self.lock:
            return float(self.data.qpos[self.model.jnt_qposadr[j]])

    def evaluate(self) -> list[PredicateResult]:
        """Every success predicate of the scenario on the current state."""
        return [evaluate_predicate(self, p) for p in self.scenario.success]

    def success(self) -> bool:
        """True when every success predicate holds (nothing held in the gripper counts as 'placed')."""
        return all(r.ok for r in self.evaluate())

    def grasp_point(self, object_id: str) -> np.ndarray:
        """Where the TCP should go to hold an object (base frame, m): its centre for free objects,
        the handle for a cabinet's drawer."""
        spec = self.scenario.object(object_id)
        if spec.kind == "cabinet":
            pos, rot = self.object_pose(object_id)
            return pos + rot @ (cabinet_handle_local(spec) + np.array([-self.drawer_opening_m(object_id), 0, 0]))
        lo, hi = self.body_aabb(f"obj:{object_id}")
        center = 0.5 * (lo + hi)
        # the TCP sits 1 cm above the fingertips: keep the tips >= 8 mm above the table
        return np.array([center[0], center[1], max(center[2], 0.018)])

    def close(self) -> None:
        """Free the camera's GL contexts (see :meth:`WorkcellCamera._close_camera`)."""
        self._close_camera()

    def __enter__(self) -> "SimWorkcell":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
