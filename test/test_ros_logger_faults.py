"""rollout_logger_node against the faults of a robot cell (issue 30.2 and 30.4), each staged for real:

- the rollout folder on a 32 MiB tmpfs that fills up mid-episode (mounted in a user+mount namespace with
  ``unshare -rm``; skipped with the reason where mounting is not permitted): one error per episode, the episode
  ``cut_short`` with the reason, a readable bag, the node keeps serving, /diagnostics says episodes are not being
  recorded, and the next episode is recorded once there is space again;
- an executor_node SIGKILLed during an episode: the episode ends ``cut_short`` (executor gone), and nothing more
  is written into it; an episode with no result within ``episode_timeout_s`` ends the same way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import requires_ros
from helpers.ros_wait import spin_until, start_node, stop_process
from helpers.sim_executor import start_sim_executor
from helpers.tabletop import scene_messages
from helpers.tmpfs import require_tmpfs_mount

pytestmark = [requires_ros, pytest.mark.ros]
REPO = Path(__file__).resolve().parents[1]

# Runs inside `unshare -rm`: mounts a 32 MiB tmpfs, starts rollout_logger_node with its log_dir there, and obeys
# commands on stdin (the test outside cannot see the mount): fill (the disk to its last byte), free, report
# (every episode's rollout.json and what a record-by-record read of its bag finds), stop.
HARNESS = textwrap.dedent("""
    import json, os, signal, subprocess, sys
    from grounded_planner.rollout.bag import scan_mcap
    root = sys.argv[1]
    mnt = os.path.join(root, "mnt")
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", mnt], check=True)
    log = open(os.path.join(root, "logger.log"), "w")
    logger = subprocess.Popen([sys.executable, "-m", "grounded_planner.ros.rollout_logger_node", "--ros-args",
                               "-p", "log_dir:=" + os.path.join(mnt, "rollouts"), *sys.argv[2:]],
                              stdout=log, stderr=subprocess.STDOUT)
    filler = os.path.join(mnt, "filler")

    def report():
        out = {"alive": logger.poll() is None, "episodes": []}
        base = os.path.join(mnt, "rollouts")
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            folder = os.path.join(base, name)
            ep = {"name": name}
            try:
                ep["json"] = json.load(open(os.path.join(folder, "rollout.json")))
            except (OSError, ValueError) as exc:
                ep["json_error"] = str(exc)
            bag = os.path.join(folder, "rollout.mcap")
            if os.path.exists(bag):
                scan = scan_mcap(bag, decode=False)
                ep["bag"] = {"messages": scan.message_count, "truncated_bytes": scan.truncated_bytes,
                             "complete": scan.complete, "size": os.path.getsize(bag)}
            out["episodes"].append(ep)
        return out

    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "fill":
            with open(filler, "ab", buffering=0) as f:
                for chunk in (65536, 4096, 1):
                    try:
                        while True:
                            f.write(b"x" * chunk)
                    except OSError:
                        pass
            print("filled", flush=True)
        elif cmd == "free":
            os.remove(filler)
            print("freed", flush=True)
        elif cmd == "report":
            print(json.dumps(report()), flush=True)
        elif cmd == "stop":
            logger.send_signal(signal.SIGINT)
            logger.wait(30)
            print(json.dumps(report()), flush=True)
            break
""")


class Harness:
    def __init__(self, root: Path, *params: str):
        require_tmpfs_mount(root)
        self.root = root
        self.proc = subprocess.Popen(
            ["unshare", "-rm", sys.executable, "-c", HARNESS, str(root), *params],
            cwd=REPO,
            env=os.environ.copy(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def ask(self, command: str):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        return json.loads(line) if line.startswith("{") else line

    def log(self) -> str:
        return (self.root / "logger.log").read_text(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.ask("stop")
            finally:
                self.proc.kill()
                self.proc.wait(10)


class Cell:
    """The test's side: a 10 Hz camera, and the planner's and executor's topics the logger records."""

    def __init__(self, context):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from sensor_msgs.msg import CameraInfo, Image
        from std_msgs.msg import String

        from grounded_planner_interfaces.msg import ExecutionResult, GroundedPlan as GroundedPlanMsg

        self.node = rclpy.create_node("cell_probe", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        qos = QoSProfile(depth=10)
        self.color, self.depth, self.info = scene_messages()
        self.pubs = {
            name: self.node.create_publisher(t, topic, qos)
            for name, t, topic in [
                ("color", Image, "/camera/camera/color/image_raw"),
                ("depth", Image, "/camera/camera/aligned_depth_to_color/image_raw"),
                ("info", CameraInfo, "/camera/camera/color/camera_info"),
                ("plan", GroundedPlanMsg, "/grounded_planner/last_plan"),
                ("result", ExecutionResult, "/grounded_planner/execution/result"),
            ]
        }
        self.node.create_timer(0.1, self.camera)
        self.closed: list[str] = []
        self.node.create_subscription(
            String,
            "/grounded_planner/rollout/closed",
            lambda m: self.closed.append(m.data),
            QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL),
        )
        self.health: list[tuple[int, str]] = []
        self.node.create_subscription(
            DiagnosticArray,
            "/diagnostics",
            lambda m: self.health.extend(
                (s.level, s.message) for s in m.status if s.name.endswith("rollout recording")
            ),
            qos,
        )

    def camera(self):
        stamp = self.node.get_clock().now().to_msg()
        for name, msg in (("color", self.color), ("depth", self.depth), ("info", self.info)):
            msg.header.stamp = stamp
            self.pubs[name].publish(msg)

    def wait_subscribed(self):
        spin_until(
            self.executor,
            lambda: all(p.get_subscription_count() > 0 for p in self.pubs.values()),
            60.0,
            "the logger to subscribe",
        )

    def plan(self, instruction: str):
        from grounded_planner.plan import GroundedAction, GroundedPlan
        from grounded_planner.ros.convert import plan_to_msg

        plan = GroundedPlan(
            instruction,
            (320, 240),
            [
                GroundedAction("grasp", "red cube", bbox=(80.0, 90.0, 120.0, 150.0)),
                GroundedAction("place", "red cube", "table", point=(240.0, 120.0)),
            ],
        )
        msg = plan_to_msg(plan)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.pubs["plan"].publish(msg)

    def result(self, instruction: str):
        from grounded_planner.execution.executor import ExecutionResult
        from grounded_planner.msgs.execution import execution_result_msg
        from grounded_planner.ros.msg_types import rclpy_type

        self.pubs["result"].publish(execution_result_msg(rclpy_type, ExecutionResult(True, "ok", []), instruction))

    def spin(self, seconds: float):
        end = time.monotonic() + seconds
        spin_until(self.executor, lambda: time.monotonic() > end, seconds + 5.0, "time to pass")

    def close(self):
        self.node.destroy_node()


def test_a_full_disk_cuts_one_episode_short_and_the_next_is_recorded(tmp_path, rclpy_context):
    from diagnostic_msgs.msg import DiagnosticStatus

    harness = Harness(tmp_path, "-p", "frame_rate_hz:=5.0", "-p", "close_delay_s:=0.0")
    cell = Cell(rclpy_context)
    try:
        cell.wait_subscribed()
        cell.plan("first")
        cell.spin(1.0)
        cell.result("first")
        spin_until(cell.executor, lambda: len(cell.closed) == 1, 60.0, "the first episode to close")

        cell.plan("second")

        def second_has_a_chunk_on_disk() -> bool:
            episodes = harness.ask("report")["episodes"]
            return len(episodes) >= 2 and episodes[1].get("bag", {}).get("messages", 0) > 0

        # mid-episode: once a chunk of it is on disk (a chunk closes within chunk_interval_s), so what it recorded
        # before the disk filled is there to read back
        spin_until(cell.executor, second_has_a_chunk_on_disk, 60.0, "a chunk of the second episode on disk")
        assert harness.ask("fill") == "filled"  # the disk fills mid-episode; 5 frames a second keep coming
        spin_until(
            cell.executor,
            lambda: cell.health and cell.health[-1][0] == DiagnosticStatus.ERROR,
            30.0,
            "/diagnostics to say episodes are not recorded",
        )
        assert "episodes are not being recorded" in cell.health[-1][1] and "No space left" in cell.health[-1][1]
        cell.spin(2.0)  # 10 more frames that cannot be written
        cell.result("second")  # the cut episode's late result goes nowhere, not into the next episode
        cell.plan("third")  # still full: this episode cannot start either
        cell.spin(1.0)
        full = harness.ask("report")
        assert full["alive"], harness.log()
        assert harness.ask("free") == "freed"
        cell.plan("fourth")  # space again: recorded
        cell.spin(1.5)
        cell.result("fourth")
        spin_until(
            cell.executor,
            lambda: cell.health and cell.health[-1][0] == DiagnosticStatus.OK,
            30.0,
            "/diagnostics to say episodes are recorded again",
        )
        spin_until(
            cell.executor,
            lambda: any(
                ep.get("json", {}).get("instruction") == "fourth" and ep["json"]["status"] == "complete"
                for ep in harness.ask("report")["episodes"]
            ),
            30.0,
            "the fourth episode to be recorded",
        )
        report = harness.ask("report")
    finally:
        cell.close()
        harness.close()
    log = harness.log()
    assert "Traceback" not in log, log
    episodes = {ep["json"]["instruction"]: ep for ep in report["episodes"] if "json" in ep}
    assert set(episodes) == {"first", "second", "fourth"}, report  # the third could not start: no folder left
    assert episodes["first"]["json"]["status"] == "complete"
    second = episodes["second"]
    assert second["json"]["status"] == "cut_short"
    assert "No space left on device" in second["json"]["error"]
    assert second["json"]["execution"] is None  # its late result did not land anywhere
    assert second["bag"]["truncated_bytes"] == 0 and second["bag"]["messages"] > 0  # readable to its last record
    fourth = episodes["fourth"]
    assert fourth["json"]["status"] == "complete" and fourth["json"]["execution"]["message"] == "ok"
    assert fourth["bag"]["complete"] and fourth["bag"]["messages"] > 0
    # one error per episode, however many frames failed: the second (cut short) and the third (not started)
    errors = [line for line in log.splitlines() if "[ERROR]" in line and "cut short" in line]
    assert len(errors) == 2, log
    assert "second" not in str(episodes["fourth"]["json"].get("execution"))


def test_an_episode_whose_executor_is_killed_ends_cut_short(tmp_path, rclpy_context):
    logger = start_node("rollout_logger_node", f"log_dir:={tmp_path / 'rollouts'}", "frame_rate_hz:=10.0")
    executor = start_sim_executor(tmp_path)
    cell = Cell(rclpy_context)
    try:
        cell.wait_subscribed()
        spin_until(
            cell.executor,
            lambda: cell.node.count_publishers("/grounded_planner/execute/_action/status") > 0,
            120.0,
            "the executor to join the graph",
        )
        cell.plan("orphaned")
        cell.spin(1.5)
        executor.send_signal(signal.SIGKILL)
        executor.wait(10)
        killed = time.monotonic()
        try:
            spin_until(cell.executor, lambda: len(cell.closed) == 1, 60.0, "the orphaned episode to close")
        except AssertionError:
            print(stop_process(logger))
            raise
        noticed_s = time.monotonic() - killed
        folder = Path(cell.closed[0])
        record = json.loads((folder / "rollout.json").read_text())
        size = (folder / "rollout.mcap").stat().st_size
        cell.spin(1.5)  # the camera goes on: nothing more is written into the closed episode
        assert (folder / "rollout.mcap").stat().st_size == size
    finally:
        cell.close()
        out = stop_process(logger)
        if executor.poll() is None:
            executor.kill()
    assert record["status"] == "cut_short", record
    assert "executor left the graph" in record["error"], record["error"]
    assert noticed_s < 40.0
    assert "Traceback" not in out, out


def test_an_episode_without_a_result_ends_at_episode_timeout_s(tmp_path, rclpy_context):
    logger = start_node("rollout_logger_node", f"log_dir:={tmp_path / 'rollouts'}", "episode_timeout_s:=2.0")
    cell = Cell(rclpy_context)
    try:
        cell.wait_subscribed()
        cell.plan("never executed")
        spin_until(cell.executor, lambda: len(cell.closed) == 1, 30.0, "the episode to time out")
        record = json.loads((Path(cell.closed[0]) / "rollout.json").read_text())
    finally:
        cell.close()
        out = stop_process(logger)
    assert record["status"] == "cut_short"
    assert record["error"] == "no execution result within episode_timeout_s (2 s)"
    assert "Traceback" not in out, out
