"""Ctrl-C in a terminal under `ros2 launch`: the terminal's SIGINT and launch's forwarded one arrive a few ms apart.
A node already shutting down ignores the second, exits 0 and closes what it had open (a rollout, a bag)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, requires_ros, spawn_python
from helpers.bringup import stop_bringup, wait_running

pytestmark = [requires_ros, pytest.mark.ros]
GAP_S = 0.005  # the two SIGINTs 5 ms apart


def _double_sigint(child: subprocess.Popen) -> str:
    return stop_bringup(child, 40.0, again_after_s=GAP_S)


def _kill_if_running(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
        child.communicate()


def _wait_for_node(executor, node, name: str, child: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if name in node.get_node_names():
            executor.spin_once(timeout_sec=0.3)  # a moment more: past its constructor, spinning
            return
        if child.poll() is not None:
            pytest.fail(f"{name} ended before it was up:\n{child.communicate()[0][-3000:]}")
        executor.spin_once(timeout_sec=0.1)
    child.kill()
    pytest.fail(f"{name} never joined the graph:\n{child.communicate()[0][-3000:]}")


def _assert_clean(out: str, child: subprocess.Popen, what: str) -> None:
    assert child.returncode == 0, f"{what} exited {child.returncode}:\n{out[-3000:]}"
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, f"{what}:\n{out[-3000:]}"


def _bag(tmp_path):
    from grounded_planner.ros.bags import write_bag
    from grounded_planner.ros.convert import numpy_to_image

    frame = numpy_to_image(np.zeros((60, 80, 3), np.uint8), "rgb8")
    return write_bag(tmp_path / "bag", [("/camera/camera/color/image_raw", i * 10_000_000, frame) for i in range(100)])


def _recording(tmp_path):
    pytest.importorskip("pyrealsense2")
    from helpers.software_camera_node import record_pattern

    return record_pattern(tmp_path / "session.db3", frames=10)


NODES = {
    "camera": lambda tmp: ["-p", f"playback_file:={_recording(tmp)}", "-p", "loop_playback:=true"],
    "bag_player": lambda tmp: ["-p", f"bag:={_bag(tmp)}", "-p", "loop:=true"],
    "planner": lambda tmp: ["-p", "backend:=openai", "-p", "model:=m", "-p", "base_url:=http://127.0.0.1:9/v1"],
    "backprojection": lambda tmp: [],
    "executor": lambda tmp: ["-p", "backend:=sim", "-p", "base_frame:=base_link"],
    "rollout_logger": lambda tmp: ["-p", f"log_dir:={tmp / 'rollouts'}"],
    "console": lambda tmp: ["-p", "port:=0", "-p", f"rollouts_dir:={tmp}"],  # port 0: any free one
}


@pytest.mark.parametrize("name", sorted(NODES))
def test_two_sigints_5ms_apart_end_every_node_with_exit_0(name, tmp_path, rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    params = NODES[name](tmp_path)
    child = spawn_python(["-m", f"grounded_planner.ros.{name}_node", "--ros-args", "-r", f"__node:={name}", *params])
    node = rclpy.create_node("ctrl_c_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    try:
        _wait_for_node(executor, node, name, child)
        out = _double_sigint(child)
    finally:
        _kill_if_running(child)
        node.destroy_node()
    _assert_clean(out, child, name)


def test_the_rollout_logger_closes_its_open_rollout_on_two_sigints(tmp_path, rclpy_context):
    """An episode open when Ctrl-C comes is closed (status aborted, its reason written), not left half-written."""
    import json

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile

    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.ros import names
    from grounded_planner.ros.convert import plan_to_msg
    from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg

    child = spawn_python(
        ["-m", "grounded_planner.ros.rollout_logger_node", "--ros-args", "-p", f"log_dir:={tmp_path / 'rollouts'}"]
    )
    node = rclpy.create_node("ctrl_c_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    pub = node.create_publisher(
        GroundedPlanMsg, "/" + names.LAST_PLAN, QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    )
    try:
        _wait_for_node(executor, node, "rollout_logger", child)
        plan = GroundedPlan("pick up the cube", (320, 240), [GroundedAction("grasp", "cube", bbox=[10, 10, 40, 40])])
        pub.publish(plan_to_msg(plan))
        deadline = time.monotonic() + 30.0
        while not list((tmp_path / "rollouts").glob("*/rollout.json")) and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        opened = [path.parent for path in (tmp_path / "rollouts").glob("*/rollout.json")]
        assert opened, "the logger never opened a rollout for the plan"
        assert json.loads((opened[0] / "rollout.json").read_text())["status"] == "in_progress"
        out = _double_sigint(child)
    finally:
        _kill_if_running(child)
        node.destroy_node()
    _assert_clean(out, child, "rollout_logger")
    record = json.loads((opened[0] / "rollout.json").read_text())
    assert record["status"] == "aborted" and "shut down" in record["error"], (record, out)


def test_two_sigints_5ms_apart_end_bringup_with_exit_0(tmp_path, ros_domain):
    profile = tmp_path / "graph.yaml"
    profile.write_text(
        f"/**/rollout_logger:\n  ros__parameters:\n    log_dir: {tmp_path / 'rollouts'}\n"
        f"/**/bag_player:\n  ros__parameters:\n    bag: {_bag(tmp_path)}\n    loop: true\n"
        "/**/backprojection:\n  ros__parameters: {}\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "grounded_planner.cli.main", "bringup", "--config", str(profile)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_running(child)
        time.sleep(0.5)
        out = _double_sigint(child)
    finally:
        _kill_if_running(child)
    _assert_clean(out, child, "bringup")


@pytest.mark.parametrize("how", ["console_script", "module"])
def test_sigints_while_a_node_is_still_importing_end_it_quietly(how):
    """ros2 launch stopped early (or Ctrl-C right after start) sends SIGINT while a node is still importing rclpy
    and its modules: that was a KeyboardInterrupt traceback out of an import and exit -2."""
    from pathlib import Path

    command = (
        [str(Path(sys.executable).with_name("executor_node"))]
        if how == "console_script"
        else [sys.executable, "-m", "grounded_planner.ros.executor_node"]
    )
    if how == "console_script" and not Path(command[0]).exists():
        pytest.skip("the console script is not installed beside this interpreter")
    child = subprocess.Popen(
        [*command, "--ros-args", "-p", "backend:=sim", "-p", "base_frame:=base_link"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(0.3)  # importing (rclpy, numpy, the executor's modules take seconds here)
    out = _double_sigint(child)
    _assert_clean(out, child, f"executor_node ({how}) stopped while importing")


# An executor_node whose backend takes a while to connect, as an SDK does (MuJoCo's import, a robot's handshake),
# and behaves as such libraries do when a KeyboardInterrupt lands inside them: it is folded into an error of their
# own (MuJoCo's import failed with "needs MuJoCo", a ctypes call with "argument 1: KeyboardInterrupt").
_SLOW_CONNECT = """
import sys, time
from grounded_planner.ros.executor_node import ExecutorNode, _make_backend
from grounded_planner.ros.node_main import run_node

def factory(name, config):
    backend = _make_backend(name, config)
    connect = backend.connect
    def slow_connect():
        print("connecting", flush=True)
        try:
            time.sleep(2.0)
        except BaseException as exc:
            raise RuntimeError(f"the SDK's handshake failed: {type(exc).__name__}") from None
        connect()
        print("connected", flush=True)
    backend.connect = slow_connect
    return backend

run_node(lambda: ExecutorNode(backend_factory=factory), "executor_node", num_threads=4, args=sys.argv)
"""


def test_sigints_while_a_node_configures_end_it_quietly_once_configure_is_through():
    """Ctrl-C while the executor connects its backend (configure): the connect is not cut short (a library would
    turn the KeyboardInterrupt into an error and the node would log a failed configure and exit 1); the process
    ends with exit 0 right after, without an error."""
    child = spawn_python(
        ["-c", _SLOW_CONNECT, "--ros-args", "-p", "backend:=sim", "-p", "base_frame:=base_link"], bufsize=1
    )
    try:
        said = []
        line = child.stdout.readline()
        while line and "connecting" not in line:
            said.append(line)
            line = child.stdout.readline()
        assert "connecting" in line, f"the node never reached configure:\n{''.join(said)[-3000:]}"
        started = time.monotonic()
        out = _double_sigint(child)
        took_s = time.monotonic() - started
    finally:
        _kill_if_running(child)
    _assert_clean(out, child, "executor_node stopped while configuring")
    assert "connected" in out, f"the connect was cut short:\n{out[-3000:]}"
    assert "configure failed" not in out and "handshake failed" not in out, out[-3000:]
    assert took_s < 20.0, f"it took {took_s:.1f} s to end after Ctrl-C"
