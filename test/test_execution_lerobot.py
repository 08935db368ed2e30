"""The lerobot (SO-101) backend at LeRobot's boundary, with FakeSOFollower, a test double of SOFollower.

FakeSOFollower mirrors LeRobot 0.4.4's ``lerobot.robots.so_follower.SOFollower`` for the cases the simulated bus
(test_execution_lerobot_sim.py, the real SOFollower over a pty) makes slow or cannot stage: an object that stalls
the gripper at a chosen position, a bus error after N commands, an uncalibrated arm. It keeps SOFollower's
interface (``connect(calibrate)``, ``is_connected``, ``is_calibrated``, ``get_observation() -> {"<joint>.pos":
deg}``, ``send_action(dict) -> dict sent``, ``disconnect()``; signatures checked against the installed class
below) and its awkward parts: it is built from the same SOFollowerRobotConfig keyword arguments, clips with
``ensure_safe_goal_position``'s rule (which raises TypeError unless the cap is a float or a dict), raises when
used unconnected or connected twice, and ``disconnect()`` turns torque off unless
``disable_torque_on_disconnect`` is False, after which the unpowered arm sags under gravity.
The IK in between is the real one on the SO-101 URDF.
"""

from __future__ import annotations

import inspect

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("placo")

from grounded_planner.execution.backend import BackendFault, UnreachableError  # noqa: E402
from grounded_planner.execution.backends.lerobot_backend import (
    ARM_KEYS,
    LeRobotBackend,
    LeRobotConfig,  # noqa: E402
    so_follower_config_kwargs,
)
from grounded_planner.execution.so101_kinematics import KinematicsError, default_so101_urdf  # noqa: E402
from grounded_planner.execution.config import ExecutorConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.execution.outcomes import Outcome  # noqa: E402
from grounded_planner.geometry.targets import TargetSet  # noqa: E402
from grounded_planner.plan import GroundedAction, GroundedPlan  # noqa: E402
from helpers.stopping import stop_during_move  # noqa: E402

try:
    default_so101_urdf()
except KinematicsError as exc:  # pragma: no cover - make setup installs it
    pytest.skip(f"SO-101 URDF not installed: {exc}", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
REST_DEG = {
    "shoulder_pan": 0.0,
    "shoulder_lift": -30.0,
    "elbow_flex": 40.0,
    "wrist_flex": 70.0,
    "wrist_roll": 0.0,
    "gripper": 10.0,
}


class _Bus:
    """FeetechMotorsBus's port_handler (scservo_sdk PortHandler): is_open, closePort(). Closing the port leaves the
    servos' torque as it is; SOFollower.is_connected is the port's is_open."""

    def __init__(self, robot: "FakeSOFollower"):
        self.port_handler = self
        self._robot = robot

    @property
    def is_open(self) -> bool:
        return self._robot.is_connected

    def closePort(self) -> None:  # noqa: N802 - scservo_sdk's name
        self._robot.is_connected = False


class FakeSOFollower:
    """Test double of LeRobot 0.4.4's SOFollower: servos approach their goals at ``speed_deg_s``; the gripper stops
    at ``object_pos`` (gripper units 0..100) when closing on an object, or at 0 on nothing. ``follower_kwargs``
    are SOFollowerRobotConfig's (what the backend's make_so_follower passes)."""

    def __init__(
        self,
        follower_kwargs: dict,
        speed_deg_s: float = 600.0,
        calibrated: bool = True,
        object_pos: float | None = None,
        fail_after_sends: int | None = None,
        calibration_read_failures: int = 0,
    ):
        self.follower_kwargs = follower_kwargs
        self.max_relative_target = follower_kwargs["max_relative_target"]
        self.disable_torque_on_disconnect = follower_kwargs.get("disable_torque_on_disconnect", True)
        self.torque = True
        self.speed_deg_s = speed_deg_s
        self.calibrated = calibrated
        # LeRobot 0.4.4's is_calibrated is a property that reads 18 registers (homing offset, min and max of six
        # servos, FeetechMotorsBus.read_calibration): a lost status packet raises ConnectionError out of it
        self.calibration_read_failures = calibration_read_failures
        self.calibration_reads = 0
        self.observations = 0  # get_observation calls, refused ones included
        self.port_lost = False
        self.bus = _Bus(self)  # what the backend closes without LeRobot's disconnect(): bus.port_handler
        self.object_pos = object_pos
        self.fail_after_sends = fail_after_sends
        self.present = dict(REST_DEG)
        self.goal = dict(REST_DEG)
        self.sent: list[dict[str, float]] = []
        self.is_connected = False
        self._t = time.monotonic()
        self._lock = threading.Lock()

    @property
    def is_calibrated(self) -> bool:
        self.calibration_reads += 1
        if self.calibration_read_failures > 0:
            self.calibration_read_failures -= 1
            raise ConnectionError(
                "Failed to sync read 'Homing_Offset' on ids=[1, 2, 3, 4, 5, 6] after 1 tries. "
                "[TxRxResult] There is no status packet!"
            )
        return self.calibrated

    def connect(self, calibrate: bool = True) -> None:
        if self.is_connected:
            raise RuntimeError("FakeSOFollower is already connected")  # DeviceAlreadyConnectedError in LeRobot
        assert calibrate is False, "the backend must never start LeRobot's interactive calibration"
        self.is_connected = True
        # SOFollower.connect evaluates `not self.is_calibrated and calibrate`: the registers are read even with
        # calibrate=False (and may raise); then configure() turns torque on
        self.is_calibrated  # noqa: B018 - the property's read is the point
        self.torque = True

    def disconnect(self):
        if not self.is_connected:
            raise RuntimeError("FakeSOFollower is not connected")  # DeviceNotConnectedError in LeRobot
        self._advance()
        if self.disable_torque_on_disconnect:  # bus.disconnect(disable_torque=True): the arm goes limp
            self.torque = False
            self.present["shoulder_lift"] = min(self.present["shoulder_lift"] + 40.0, 100.0)  # sags forward
            self.goal = dict(self.present)
        self.is_connected = False

    def _advance(self) -> None:
        now = time.monotonic()
        step = self.speed_deg_s * (now - self._t)
        self._t = now
        for k, goal in self.goal.items():
            if k == "gripper" and self.object_pos is not None and goal < self.object_pos:
                goal = self.object_pos  # the jaws close on the object
            d = goal - self.present[k]
            self.present[k] += float(np.clip(d, -step, step))

    def get_observation(self) -> dict[str, float]:
        self.observations += 1
        if self.port_lost:  # the port went away between the backend's is_connected check and this read
            self.is_connected = False
        if not self.is_connected:  # LeRobot's check_if_not_connected: DeviceNotConnectedError, a ConnectionError
            from lerobot.utils.errors import DeviceNotConnectedError

            raise DeviceNotConnectedError(f"{self} is not connected.")
        with self._lock:
            self._advance()
            return {f"{k}.pos": v for k, v in self.present.items()}

    def send_action(self, action: dict[str, float]) -> dict[str, float]:
        if not self.is_connected:
            raise RuntimeError("FakeSOFollower is not connected")
        if not isinstance(self.max_relative_target, (float, dict)):  # ensure_safe_goal_position's check
            raise TypeError(self.max_relative_target)
        if self.fail_after_sends is not None and len(self.sent) >= self.fail_after_sends:
            raise ConnectionError("[TxRxResult] There is no status packet!")
        with self._lock:
            self._advance()
            sent = {}
            for key, value in action.items():
                joint = key.removesuffix(".pos")
                # LeRobot's max_relative_target clipping
                limit = self.max_relative_target
                value = float(np.clip(value, self.present[joint] - limit, self.present[joint] + limit))
                self.goal[joint] = value
                sent[key] = value
            self.sent.append(sent)
            return sent


def make(
    double: FakeSOFollower | None = None, **cfg_overrides
) -> tuple[LeRobotBackend, FakeSOFollower, ExecutorConfig]:
    cfg = ExecutorConfig.load(ROOT / "config" / "execution_so101.yaml")
    options = LeRobotConfig(**{**cfg.backend_options("lerobot"), **cfg_overrides})
    holder: dict[str, FakeSOFollower] = {}

    def factory(config: LeRobotConfig) -> FakeSOFollower:
        holder["robot"] = double or FakeSOFollower(so_follower_config_kwargs(config))
        return holder["robot"]

    backend = LeRobotBackend(options, cfg.safety, robot_factory=factory)
    backend.connect()
    return backend, holder["robot"], cfg


def test_move_to_pose_reaches_the_goal_in_small_clipped_steps():
    backend, robot, cfg = make()
    goal = np.array([0.22, 0.05, 0.04])
    backend.move_to_pose(goal, 0.3, 0.5)
    position, yaw = backend.current_pose()
    # the servos stop within arrive_tolerance_deg of the IK goal: a few mm at the tip
    assert np.linalg.norm(position - goal) < 0.006
    arm_steps = [s for s in robot.sent if "shoulder_pan.pos" in s]
    assert len(arm_steps) > 3
    # no command asked for more than LeRobot's max_relative_target of motion
    prev = np.array([REST_DEG[k] for k in ARM_KEYS])
    for step in arm_steps:
        now = np.array([step[f"{k}.pos"] for k in ARM_KEYS])
        assert np.max(np.abs(now - prev)) <= backend.config.max_relative_target_deg + 1e-9
        prev = now


def test_unreachable_goal_sends_no_command():
    backend, robot, _ = make()
    with pytest.raises(UnreachableError, match="mm from the goal"):
        backend.move_to_pose((0.3, 0.0, 0.3), 0.0, 0.5)
    assert robot.sent == []


def test_stop_from_another_thread_halts_within_the_bound():
    backend, robot, _ = make(max_joint_speed_deg_s=20.0)
    stopped, stopped_in = stop_during_move(backend, (0.25, -0.08, 0.03), after_s=0.5)
    assert stopped, "the move must end with MotionStoppedError"
    assert stopped_in < backend.stop_timeout_s
    # the last command holds the arm where it was, and it stays there
    held = np.array([robot.sent[-1][f"{k}.pos"] for k in ARM_KEYS])
    time.sleep(0.2)
    np.testing.assert_allclose(backend.joints_deg(), held, atol=1.0)


def test_gripper_width_tells_an_object_from_nothing():
    backend, robot, _ = make(FakeSOFollower(so_follower_config_kwargs(LeRobotConfig()), object_pos=50.0))
    backend.gripper_open()
    width = backend.gripper_close(20.0)
    assert width == pytest.approx(0.5 * backend.config.gripper_max_width_m, abs=0.002)
    empty, _, _ = make()
    empty.gripper_open()
    assert empty.gripper_close() < 0.002


def test_grasp_and_place_through_the_executor():
    backend, robot, cfg = make(
        FakeSOFollower(so_follower_config_kwargs(LeRobotConfig()), object_pos=40.0), max_joint_speed_deg_s=300.0
    )
    plan = GroundedPlan(
        "put it down",
        (640, 480),
        [
            GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0)),
            GroundedAction("place", "cube", "tray", point=(5.0, 5.0)),
        ],
    )
    targets = TargetSet.from_dict(
        {
            "frame": "base_link",
            "warnings": [],
            "targets": [
                {
                    "index": 0,
                    "type": "grasp",
                    "object": "cube",
                    "position": [0.22, 0.05, 0.03],
                    "yaw": 0.2,
                    "width": 0.025,
                },
                {"index": 1, "type": "place", "object": "cube", "position": [0.24, -0.08, 0.0]},
            ],
        }
    )
    result = Executor(backend, cfg).execute(plan, targets)
    assert result.success, result.to_dict()
    position, _ = backend.current_pose()
    np.testing.assert_allclose(position, [0.24, -0.08, cfg.retreat_height_m], atol=0.006)


def test_dry_run_reports_unreachable_without_a_robot():
    cfg = ExecutorConfig.load(ROOT / "config" / "execution_so101.yaml")
    backend = LeRobotBackend(
        LeRobotConfig(**cfg.backend_options("lerobot")),
        cfg.safety,
        robot_factory=lambda c: pytest.fail("a dry run must not open the robot"),
    )
    plan = GroundedPlan("x", (640, 480), [GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0))])
    # inside the box, but straight above the shoulder: the arm cannot point down there
    targets = TargetSet.from_dict(
        {
            "frame": "base_link",
            "warnings": [],
            "targets": [{"index": 0, "type": "grasp", "object": "cube", "position": [0.125, 0.14, 0.08], "yaw": 0.0}],
        }
    )
    result = Executor(backend, cfg).execute(plan, targets, dry_run=True)
    assert [s.outcome for s in result.steps] == [Outcome.UNREACHABLE]
    assert "mm from the goal" in result.steps[0].message or "tilt" in result.steps[0].message


def test_servo_error_mid_motion_is_a_fault():
    backend, robot, cfg = make(FakeSOFollower(so_follower_config_kwargs(LeRobotConfig()), fail_after_sends=3))
    with pytest.raises(BackendFault, match="no status packet"):
        backend.move_to_pose((0.22, 0.05, 0.04), 0.0, 0.5)


def test_uncalibrated_arm_is_refused_without_prompting():
    with pytest.raises(BackendFault, match="lerobot-calibrate"):
        make(FakeSOFollower(so_follower_config_kwargs(LeRobotConfig()), calibrated=False))


def test_stop_during_a_move_keeps_a_held_object_squeezed():
    backend, robot, _ = make(
        FakeSOFollower(so_follower_config_kwargs(LeRobotConfig()), object_pos=40.0), max_joint_speed_deg_s=20.0
    )
    backend.gripper_open()
    backend.gripper_close()
    squeeze_goal = robot.goal["gripper"]
    assert squeeze_goal < 40.0  # the jaws are told to close further than the object lets them

    stopped, _ = stop_during_move(backend, (0.25, -0.08, 0.03))
    assert stopped, "the move must have been stopped"
    assert robot.goal["gripper"] == squeeze_goal


def test_double_matches_the_installed_sofollower():
    """The double's methods take what LeRobot's own SOFollower takes, and the keyword arguments the backend builds
    are accepted by the real SOFollowerRobotConfig (so neither can drift from the installed LeRobot)."""
    so_follower = pytest.importorskip("lerobot.robots.so_follower", reason="LeRobot is installed by make setup")
    real = so_follower.SOFollower
    for name in ("connect", "disconnect", "get_observation", "send_action"):
        real_params = list(inspect.signature(getattr(real, name)).parameters.values())
        fake_params = list(inspect.signature(getattr(FakeSOFollower, name)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in fake_params] == [
            (p.name, p.kind, p.default) for p in real_params
        ], name
    for name in ("is_connected", "is_calibrated"):
        assert isinstance(inspect.getattr_static(real, name), property)
    kwargs = so_follower_config_kwargs(LeRobotConfig(max_relative_target_deg=10, calibration_dir="/tmp/gp-so101-cal"))
    config = so_follower.SOFollowerRobotConfig(**kwargs)
    assert isinstance(config.max_relative_target, float) and config.disable_torque_on_disconnect is True
    assert so_follower_config_kwargs(LeRobotConfig(on_disconnect="hold"))["disable_torque_on_disconnect"] is False


def test_integer_max_relative_target_from_yaml_is_a_float_for_lerobot():
    backend, robot, _ = make(max_relative_target_deg=10)  # YAML `10`: an int would make LeRobot raise TypeError
    assert isinstance(robot.max_relative_target, float)
    backend.move_to_pose((0.22, 0.05, 0.06), 0.3, 0.5)


def test_disconnect_parks_before_torque_off_unless_told_to_hold():
    backend, robot, _ = make()  # on_disconnect: rest (the shipped default)
    backend.disconnect()
    assert robot.torque is False
    assert robot.sent[-1]["gripper.pos"] == pytest.approx(backend.config.rest_pose_deg["gripper"])
    rest_steps = [s for s in robot.sent if "shoulder_pan.pos" in s]
    assert rest_steps[-1]["elbow_flex.pos"] == pytest.approx(backend.config.rest_pose_deg["elbow_flex"])
    backend, robot, _ = make(on_disconnect="hold")
    backend.disconnect()
    assert robot.torque is True and robot.sent == []


def test_calibration_file_option_and_the_older_so101_follower_folder(tmp_path, monkeypatch):
    from grounded_planner.execution.backends.lerobot_backend import find_calibration_dir
    from grounded_planner.execution.config import ConfigError

    config = LeRobotConfig(calibration=str(tmp_path / "arms" / "my_arm.json"))
    assert (config.calibration_dir, config.robot_id) == (str(tmp_path / "arms"), "my_arm")
    with pytest.raises(ConfigError, match="calibration"):
        LeRobotConfig(calibration=str(tmp_path / "my_arm.yaml"))
    old = tmp_path / "cal" / "robots" / "so101_follower"
    old.mkdir(parents=True)
    (old / "blue.json").write_text("{}")
    assert find_calibration_dir(LeRobotConfig(robot_id="blue"), tmp_path / "cal") == old
    new = tmp_path / "cal" / "robots" / "so_follower"
    new.mkdir(parents=True)
    (new / "blue.json").write_text("{}")
    assert find_calibration_dir(LeRobotConfig(robot_id="blue"), tmp_path / "cal") == new  # LeRobot 0.4's own first
    assert find_calibration_dir(LeRobotConfig(robot_id="red"), tmp_path / "cal") == new  # none: LeRobot's folder
    with pytest.raises(ConfigError, match="on_disconnect"):
        LeRobotConfig(on_disconnect="drop")
