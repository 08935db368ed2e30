"""The lerobot backend for real: LeRobot 0.4.4's own SOFollower -> a pty -> the simulated STS3215 bus of the MuJoCo
SO-101 (`grounded-planner sim so101-bus`, its own process as a real arm is). Connect with the bus's calibration
file, placo IK, a grasp -> place that the scenario's success check confirms, a cancel mid-move, a servo that stops
answering, and what disconnect leaves behind (the bus's last JSON line after SIGINT)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot.robots.so_follower", reason="LeRobot is installed by make setup")
pytest.importorskip("mujoco")
pytest.importorskip("placo")

from grounded_planner.execution.backend import BackendFault  # noqa: E402
from grounded_planner.execution.backends.lerobot_backend import ARM_KEYS, LeRobotBackend, LeRobotConfig  # noqa: E402
from grounded_planner.execution.config import ExecutorConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.execution.outcomes import Outcome  # noqa: E402
from grounded_planner.sim.export import gt_plan, gt_targets  # noqa: E402
from grounded_planner.sim.workcell import SimWorkcell  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "config" / "scenarios" / "box_in_bowl_so101.yaml"
SO101_CONFIG = ROOT / "config" / "execution_so101.yaml"


ENV = {**os.environ, "PYTHONPATH": str(ROOT), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
CLI = [sys.executable, "-m", "grounded_planner.cli.main"]


class BusProcess:
    """`sim so101-bus` in a child process: ``port`` and ``calibration`` from its first line, ``finish()`` sends
    SIGINT and returns its last line."""

    def __init__(self, seed: int = 0, *args: str):
        self.proc = subprocess.Popen(
            [*CLI, "sim", "so101-bus", "--scenario", str(SCENARIO), "--seed", str(seed), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"so101-bus did not start: {self.proc.communicate(timeout=10)[1]}")
        first = json.loads(line)
        self.port, self.calibration = first["port"], first["calibration"]

    def finish(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def bus():
    proc = BusProcess(0, "--unplug-on-signal", "3")
    yield proc
    proc.kill()


def _plan_and_targets(seed: int = 0):
    """The scenario's GT plan and exact targets for the same scenario and seed as the bus (computed here)."""
    with SimWorkcell.from_scenario(SCENARIO, seed=seed) as cell:
        plan = gt_plan(cell)
        return plan, gt_targets(cell, plan)


def _backend(bus: BusProcess, **overrides) -> tuple[LeRobotBackend, ExecutorConfig]:
    config = ExecutorConfig.load(SO101_CONFIG)
    options = {**config.backend_options("lerobot"), "port": bus.port, "calibration": bus.calibration, **overrides}
    return LeRobotBackend(LeRobotConfig(**options), config.safety), config


def test_grasp_then_place_succeeds_in_the_simulated_scene(bus):
    plan, targets = _plan_and_targets()
    backend, config = _backend(bus, on_disconnect="hold")
    with backend:
        assert backend.is_connected
        result = Executor(backend, config).execute(plan, targets)
    assert result.success, result.to_dict()
    time.sleep(0.5)  # let the box settle in the bowl
    report = bus.finish()
    assert report["success"], report["predicates"]
    assert report["bad_checksums"] == 0 and report["packets"] > 100


def test_integer_max_relative_target_from_yaml_moves_the_arm(bus):
    backend, _ = _backend(bus, max_relative_target_deg=10, on_disconnect="hold")  # as YAML gives `10`
    with backend:
        start = backend.joints_deg()
        pos, yaw = backend.current_pose()
        backend.move_to_pose([pos[0], pos[1] + 0.03, pos[2]], yaw, 0.5)
        assert np.max(np.abs(backend.joints_deg() - start)) > 2.0


def test_cancel_mid_move_stops_the_arm_where_it_is(bus):
    plan, targets = _plan_and_targets()
    backend, config = _backend(bus, on_disconnect="hold", max_joint_speed_deg_s=20.0)
    cancel = threading.Event()
    with backend:
        timer = threading.Timer(1.5, cancel.set)
        timer.start()
        result = Executor(backend, config).execute(plan, targets, cancel=cancel)
        timer.cancel()
        assert result.steps[0].outcome is Outcome.CANCELLED, result.to_dict()
        held = backend.joints_deg()
        time.sleep(0.6)
        assert np.max(np.abs(backend.joints_deg() - held)) < 1.5  # holding still, torque on
    assert all(bus.finish()["torque"].values())


def test_a_servo_that_stops_answering_is_a_fault_naming_the_bus_error(bus):
    plan, targets = _plan_and_targets()
    backend, config = _backend(bus, on_disconnect="release")
    with backend:
        bus.proc.send_signal(signal.SIGUSR1)  # servo 3 (elbow_flex) stops answering
        time.sleep(0.3)
        result = Executor(backend, config).execute(plan, targets)
    step = result.steps[0]
    assert step.outcome is Outcome.FAULT, result.to_dict()
    assert "There is no status packet" in step.message and "lerobot" in step.message


def test_connect_refuses_a_calibration_that_does_not_match_the_servos(bus, tmp_path):
    data = json.loads(Path(bus.calibration).read_text())
    data["elbow_flex"]["homing_offset"] += 50  # another arm's file
    other = tmp_path / "other" / "so101_sim.json"
    other.parent.mkdir()
    other.write_text(json.dumps(data))
    backend, _ = _backend(bus)
    backend.config.calibration_dir = str(other.parent)
    with pytest.raises(BackendFault, match="not calibrated"):
        backend.connect()


def test_disconnect_parks_at_the_rest_pose_before_torque_goes_off(bus):
    backend, _ = _backend(bus, on_disconnect="rest")
    backend.connect()
    rest = backend.config.rest_pose_deg
    backend.disconnect()
    report = bus.finish()
    assert not any(report["torque"].values())  # LeRobot turned torque off after the move
    joints = report["joints_deg"]
    assert (
        abs(joints["shoulder_lift"] - rest["shoulder_lift"]) < 8 and abs(joints["elbow_flex"] - rest["elbow_flex"]) < 8
    )


def test_disconnect_with_hold_keeps_torque_on(bus):
    backend, _ = _backend(bus, on_disconnect="hold")
    backend.connect()
    before = backend.joints_deg()
    backend.disconnect()
    time.sleep(0.5)
    report = bus.finish()
    assert all(report["torque"].values())
    assert max(abs(report["joints_deg"][k] - before[i]) for i, k in enumerate(ARM_KEYS)) < 2.0


def test_cli_export_backproject_bus_and_execute_from_a_terminal(tmp_path):
    """What the checker does, all from a terminal: sim export the scenario, backproject its GT plan on the exported
    depth, sim so101-bus on the same scenario and seed, execute --backend lerobot -o port=... -o calibration=...,
    then the bus's last line after SIGINT."""
    seed, root = 1, tmp_path / "episodes"

    def cli(*args: str) -> str:
        done = subprocess.run([*CLI, *args], capture_output=True, text=True, env=ENV, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    cli("sim", "export", "--scenarios", str(SCENARIO), "--out", str(root), "--seeds", str(seed + 1))
    episode = [json.loads(line) for line in (root / "episodes.jsonl").read_text().splitlines()][seed]["sim"]
    assert episode["seed"] == seed
    (tmp_path / "plan.json").write_text(json.dumps(episode["plan"]))
    targets = json.loads(
        cli(
            "backproject",
            "--plan",
            str(tmp_path / "plan.json"),
            "--depth",
            str(root / episode["depth"]),
            "--camera-info",
            str(root / episode["camera_info"]),
            "--extrinsics",
            str(root / episode["extrinsics"]),
        )
    )
    assert targets["frame"] == "base_link" and [t["type"] for t in targets["targets"]] == ["grasp", "place"]
    (tmp_path / "targets.json").write_text(json.dumps(targets))
    bus = BusProcess(seed)
    try:
        assert bus.port.startswith("/dev/pts/") and Path(bus.calibration).is_file()
        run = subprocess.run(
            [
                *CLI,
                "execute",
                "--plan",
                str(tmp_path / "plan.json"),
                "--targets",
                str(tmp_path / "targets.json"),
                "--backend",
                "lerobot",
                "-o",
                f"port={bus.port}",
                "-o",
                f"calibration={bus.calibration}",
                "--compact",
            ],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=240,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert json.loads(run.stdout)["success"] is True
        time.sleep(0.5)
        last = bus.finish()
    finally:
        bus.kill()
    assert last["success"] is True, last
    assert set(last["joints_deg"]) == {*ARM_KEYS, "gripper"}
    # the shipped on_disconnect: rest: the arm was parked, then LeRobot turned torque off
    assert not any(last["torque"].values())


def test_a_bus_that_drops_out_is_noticed_and_reconnected_when_it_is_back(bus):
    """Issue 30.3: the SO-101's cable pulled (servo 3 silent) and plugged back in: a state read notices the lost
    link and names it, the backend stays connected but not reachable, and reconnect() brings the arm back."""
    backend, _ = _backend(bus, on_disconnect="hold")
    with backend:
        assert backend.check_link() and backend.is_reachable
        bus.proc.send_signal(signal.SIGUSR1)  # servo 3 (elbow_flex) stops answering
        deadline = time.monotonic() + 10.0
        while backend.check_link() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not backend.is_reachable and backend.is_connected
        assert "cannot read the servos" in backend.link_lost, backend.link_lost
        with pytest.raises(BackendFault):
            backend.reconnect()  # still unplugged: refused with the reason, still not reachable
        assert not backend.is_reachable
        bus.proc.send_signal(signal.SIGUSR2)  # plugged back in
        backend.reconnect()
        assert backend.is_reachable and backend.link_lost == ""
        start = backend.joints_deg()
        pos, yaw = backend.current_pose()
        backend.move_to_pose([pos[0], pos[1] + 0.03, pos[2]], yaw, 0.5)
        assert np.max(np.abs(backend.joints_deg() - start)) > 2.0  # the arm moves again
