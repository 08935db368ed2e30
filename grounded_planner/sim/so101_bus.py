"""`sim so101-bus`: the simulated workcell's SO-101 driven through six simulated STS3215 servos on a pty.

The servos answer LeRobot's own ``FeetechMotorsBus`` (see :mod:`grounded_planner.sim.feetech`); a physics
thread steps MuJoCo in real time, turns each servo's goal position into its joint's position set-point (or lets
the joint go limp when torque is off) and posts the present position, speed and load back into the servo's
registers. The servos' calibration (homing offsets drawn from the seed, ranges from the joint limits) is written
as a LeRobot calibration file, so a host connects with ``calibrate=False`` like on a calibrated arm.

Unit mapping, the one LeRobot's degree calibration and the ``so101_new_calib`` model share: joint angle 0 rad =
the middle of the calibrated range; ``present = mid + deg * 4095 / 360`` (``mid = (range_min + range_max) / 2``),
and the servo reads ``actual = present + homing_offset`` on its encoder. The gripper (LeRobot's 0..100 range)
spans the jaw's joint range.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grounded_planner.errors import RunFailure
from grounded_planner.sim.feetech import ADDR, RESOLUTION, FeetechBus, PtyBusServer
from grounded_planner.sim.workcell import CONTROL_DT_S, SimWorkcell

log = logging.getLogger(__name__)

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")  # ids 1..6
STEPS_PER_RAD = (RESOLUTION - 1) / (2 * math.pi)  # LeRobot's degree conversion uses max_res = 4095
MID = 2047  # present position at the middle of each calibrated range (LeRobot's half-turn homing)
STALL_TORQUE_NM = 3.35  # STS3215 at 12 V (the MJCF's actuator force range)
FACTORY_P_COEFFICIENT = 32  # the STS3215's factory P, which the MJCF's position gain stands for
SIM_ROBOT_ID = "so101_sim"  # the calibration file's name: <calibration dir>/so101_sim.json


@dataclass(frozen=True)
class JointCalibration:
    """One servo's calibration and the joint it drives (what a LeRobot calibration file holds, plus the mapping)."""

    name: str
    servo_id: int
    homing_offset: int  # Homing_Offset register: actual encoder steps at present position 0
    range_min: int  # Min_Position_Limit (present-position steps)
    range_max: int  # Max_Position_Limit
    center_rad: float  # joint angle at the middle of the range

    def steps_to_rad(self, present: float) -> float:
        return self.center_rad + (present - (self.range_min + self.range_max) / 2) / STEPS_PER_RAD

    def rad_to_steps(self, q_rad: float) -> float:
        return (self.range_min + self.range_max) / 2 + (q_rad - self.center_rad) * STEPS_PER_RAD

    def to_lerobot(self) -> dict:
        return {
            "id": self.servo_id,
            "drive_mode": 0,
            "homing_offset": self.homing_offset,
            "range_min": self.range_min,
            "range_max": self.range_max,
        }


def make_calibration(joint_ranges_rad: dict[str, tuple[float, float]], seed: int | None) -> list[JointCalibration]:
    """Calibrations as ``lerobot-calibrate`` would leave them on this arm: a homing offset per servo (drawn from
    ``seed``: where each horn happened to be mounted), a symmetric range around the middle for the body joints
    (the full turn for wrist_roll, as LeRobot records it) and the jaw's own range for the gripper."""
    rng = np.random.default_rng(seed if seed is not None else 0)
    out = []
    for i, name in enumerate(MOTORS):
        lo, hi = joint_ranges_rad[name]
        offset = int(rng.integers(-400, 401))
        if name == "wrist_roll":
            range_min, range_max, center = 0, RESOLUTION - 1, 0.0
        elif name == "gripper":
            half = int(round((hi - lo) / 2 * STEPS_PER_RAD))
            range_min, range_max, center = MID - half, MID + half, (lo + hi) / 2
        else:
            half = int(math.ceil(max(abs(lo), abs(hi)) * STEPS_PER_RAD))
            range_min, range_max, center = MID - half, MID + half, 0.0
        out.append(JointCalibration(name, i + 1, offset, range_min, range_max, center))
    return out


class So101BusSim:
    """A SimWorkcell with the SO-101, six STS3215 servos on a :class:`FeetechBus` and a pty server.

    ``start()`` opens the pty and the physics thread; ``close()`` stops both. ``port`` and
    ``calibration_path`` are what a LeRobot host needs. Answers come as late as a real bus's
    (:func:`grounded_planner.sim.feetech.reply_delay_s`: 1-5 ms) unless ``reply_delay`` is False.
    """

    def __init__(
        self,
        scenario_path: str | Path,
        seed: int | None = 0,
        calibration_dir: str | Path | None = None,
        realtime_factor: float = 1.0,
        reply_delay: bool = True,
    ):
        self.cell = SimWorkcell.from_scenario(scenario_path, seed=seed, robot="so101")
        self.control_dt_s = CONTROL_DT_S
        self.realtime_factor = realtime_factor
        self.reply_delay = bool(reply_delay)
        mj, model = self.cell.mujoco, self.cell.model
        joints = [*self.cell.robot.arm_joints, self.cell.robot.finger_joints[0]]
        ids = [mj.mj_name2id(model, mj.mjtObj.mjOBJ_JOINT, j) for j in joints]
        self._qadr = np.array([model.jnt_qposadr[i] for i in ids])
        self._dadr = np.array([model.jnt_dofadr[i] for i in ids])
        self._act = np.array([mj.mj_name2id(model, mj.mjtObj.mjOBJ_ACTUATOR, j) for j in joints])
        self._gain = model.actuator_gainprm[self._act, 0].copy()
        self._bias = model.actuator_biasprm[self._act, :3].copy()
        ranges = {name: tuple(model.jnt_range[i]) for name, i in zip(MOTORS, ids)}
        self.calibration = make_calibration(ranges, seed)
        self.bus = FeetechBus([c.servo_id for c in self.calibration])
        with self.cell.lock:
            q = self.cell.data.qpos[self._qadr].copy()
        for cal, q_i in zip(self.calibration, q):
            servo = self.bus.servos[cal.servo_id]
            servo.set_word("Homing_Offset", cal.homing_offset)
            servo.set_word("Min_Position_Limit", cal.range_min)
            servo.set_word("Max_Position_Limit", cal.range_max)
            present = int(round(cal.rad_to_steps(q_i)))
            servo.set_word("Goal_Position", present)
            servo.set_present(present + cal.homing_offset, 0.0, 0.0)
            # powered up holding where the previous session left it (torque on), so the arm does not drop before
            # the host has even connected; LeRobot's configure() switches torque off and on again anyway
            servo.mem[ADDR["Torque_Enable"]] = 1
        self.calibration_dir = Path(calibration_dir) if calibration_dir else None
        self.calibration_path: Path | None = None
        self.server: PtyBusServer | None = None
        self._stop = threading.Event()
        self._physics: threading.Thread | None = None
        self.physics_error: str | None = None

    @property
    def port(self) -> str:
        if self.server is None:
            raise RunFailure("start() the bus first")
        return self.server.port

    def write_calibration(self, directory: str | Path) -> Path:
        """Write ``<directory>/so101_sim.json`` in LeRobot's calibration format; returns its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{SIM_ROBOT_ID}.json"
        path.write_text(json.dumps({c.name: c.to_lerobot() for c in self.calibration}, indent=4) + "\n")
        return path

    def start(self) -> "So101BusSim":
        if self.calibration_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="so101-bus-")
            self.calibration_dir = Path(self._tmp.name)
        self.calibration_path = self.write_calibration(self.calibration_dir)
        self.server = PtyBusServer(self.bus, reply_delay=self.reply_delay)
        self._physics = threading.Thread(target=self._run_physics, name="so101-physics", daemon=True)
        self._physics.start()
        return self

    # -- physics ----------------------------------------------------------------------------------------
    def _run_physics(self) -> None:
        n_steps = int(round(self.control_dt_s / self.cell.model.opt.timestep))
        wall0, sim0 = time.monotonic(), self.cell.time_s
        try:
            while not self._stop.is_set():
                self._apply_servos()
                self.cell.step(n_steps)
                self._post_state()
                self._watch_grasp()
                if self.realtime_factor > 0:
                    ahead = (self.cell.time_s - sim0) / self.realtime_factor - (time.monotonic() - wall0)
                    if ahead > 0:
                        self._stop.wait(ahead)
        except Exception as exc:  # the bus keeps answering with the last state; the final line says why
            log.exception("so101-bus: physics stopped")
            self.physics_error = f"{type(exc).__name__}: {exc}"

    def _apply_servos(self) -> None:
        model, data = self.cell.model, self.cell.data
        with self.bus.lock:
            state = [
                (
                    servo.torque_enabled,
                    servo.goal_steps(),
                    servo.mem[ADDR["P_Coefficient"]],
                    min(servo.word("Torque_Limit"), servo.word("Max_Torque_Limit")),
                )
                for servo in (self.bus.servos[c.servo_id] for c in self.calibration)
            ]
        with self.cell.lock:
            for k, (cal, (torque, goal_actual, p_gain, torque_limit)) in enumerate(zip(self.calibration, state)):
                act = self._act[k]
                if torque:
                    # the servo's position loop as LeRobot sets it: stiffness follows P_Coefficient (the model's
                    # gain is the factory P of 32; LeRobot's configure() writes 16, so a loaded joint sags twice as
                    # far short of its goal) and the force is capped by the torque limit (0.1 % of stall)
                    scale = p_gain / FACTORY_P_COEFFICIENT
                    model.actuator_gainprm[act, 0] = self._gain[k] * scale
                    model.actuator_biasprm[act, :3] = self._bias[k] * (1.0, scale, 1.0)
                    limit_nm = STALL_TORQUE_NM * torque_limit / 1000.0
                    model.actuator_forcerange[act] = (-limit_nm, limit_nm)
                    data.ctrl[act] = cal.steps_to_rad(goal_actual - cal.homing_offset)
                else:  # limp: no servo force at all, the joint follows gravity and contacts
                    model.actuator_gainprm[act, 0] = 0.0
                    model.actuator_biasprm[act, :3] = 0.0

    def _post_state(self) -> None:
        with self.cell.lock:
            q = self.cell.data.qpos[self._qadr].copy()
            qd = self.cell.data.qvel[self._dadr].copy()
            force = self.cell.data.actuator_force[self._act].copy()
        with self.bus.lock:
            for cal, q_i, qd_i, f_i in zip(self.calibration, q, qd, force):
                self.bus.servos[cal.servo_id].set_present(
                    cal.rad_to_steps(q_i) + cal.homing_offset, qd_i * STEPS_PER_RAD, f_i / STALL_TORQUE_NM * 1000
                )

    def _watch_grasp(self) -> None:
        """The workcell's weld-on-contact grasp, triggered by the jaw servo instead of a close_gripper() call:
        closing with both jaws on one object holds it; opening past the held width lets go."""
        cell = self.cell
        gripper = self.calibration[-1]
        with self.bus.lock:
            servo = self.bus.servos[gripper.servo_id]
            goal_rad = gripper.steps_to_rad(servo.goal_steps() - gripper.homing_offset)
            torque = servo.torque_enabled
        with cell.lock:
            jaw_rad = float(cell.data.qpos[self._qadr[-1]])
        if cell.held_body is None:
            if torque and goal_rad < jaw_rad - 0.02 and cell.gripper_width() > 0.004:
                left, right = cell.finger_contacts()
                common = left & right
                if common:
                    cell.attach(sorted(common)[0])
        elif not torque or goal_rad > jaw_rad + 0.05:
            cell.release()

    # -- reporting --------------------------------------------------------------------------------------
    def set_status_error(self, motor: str, bits: int) -> None:
        """Make servo ``motor`` report status error ``bits`` (feetech.ERRBIT_OVERLOAD, ERRBIT_VOLTAGE, ...) in every
        answer from now on (0 clears them). LeRobot raises on them in single reads and writes ("[RxPacketError]
        Overload error!"); its sync reads ignore them."""
        with self.bus.lock:
            self.bus.servos[MOTORS.index(motor) + 1].error = int(bits)

    def joints_deg(self) -> dict[str, float]:
        with self.cell.lock:
            q = self.cell.data.qpos[self._qadr].copy()
        return {name: round(math.degrees(float(v)), 2) for name, v in zip(MOTORS, q)}

    def final_report(self) -> dict:
        """The last JSON line: joint positions (deg), torque on/off per servo, the scenario's task check, bus
        statistics (packets, bad checksums, answers dropped as too late)."""
        evaluated = self.cell.evaluate()
        with self.bus.lock:
            torque = {c.name: self.bus.servos[c.servo_id].torque_enabled for c in self.calibration}
        report = {
            "joints_deg": self.joints_deg(),
            "torque": torque,
            "success": all(r.ok for r in evaluated),
            "predicates": [r.to_dict() for r in evaluated],
            "held": self.cell.held_body,
            "packets": self.bus.stats.packets,
            "bad_checksums": self.bus.stats.bad_checksums,
            "late_dropped": self.bus.stats.late_dropped,  # answers the host had given up on (see feetech.py)
            "sim_time_s": round(self.cell.time_s, 3),
        }
        if self.physics_error:
            report["physics_error"] = self.physics_error
        return report

    def close(self) -> None:
        self._stop.set()
        if self._physics is not None:
            self._physics.join(timeout=5.0)
        if self.server is not None:
            self.server.close()
        self.cell.close()
        if getattr(self, "_tmp", None) is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "So101BusSim":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
