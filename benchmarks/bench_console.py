"""Benchmark: the operator console's latencies, in a real browser (headless Chromium) against a real graph.

1. Approve click -> first motion command: the time the page's Approve button was clicked (the page's clock) to the
   stamp of the executor's first motion event (executor_node publishes it on /grounded_planner/execution/feedback
   just before it sends that motion to the robot backend; the sim backend here), with require_approval off (the
   console sends the goal) and on (the console sends the goal, the executor holds it, the console answers
   /grounded_planner/approve). Goal: <= 100 ms.
2. Camera frame -> shown in the browser at 1280x720: a camera stream at 30 Hz (stamped with the wall clock when
   published) to a console_node process of its own; the page records when each frame was decoded and on screen.
   Also the console process's CPU time per displayed frame (/proc/PID/stat), against the same process's CPU time
   over the same wall time with no page open (the baseline: nothing taken, nothing encoded). Goal: <= 150 ms.
3. What the console adds to a plan request: POST /api/plan (plan service, back-projected, plus the envelope's
   verdict per step and the push to every page) against GroundedPlannerClient.plan from this process on the same
   graph, interleaved. Goal: <= 2 ms.

Both clocks are this machine's wall clock (the browser's performance.timeOrigin + now() and the nodes' ROS clock).
Run: .venv/bin/python benchmarks/bench_console.py [--approvals 10] [--plans 20] [--frames-s 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))
from helpers.bringup import CLI  # noqa: E402
from helpers.browser import chromium, wait_until  # noqa: E402
from helpers.tabletop import CUBE_M, EXTRINSICS, INSTRUCTION, SCENE_COLORS, TABLE_M, base_point, scene_messages  # noqa: E402

from grounded_planner.ros import names  # noqa: E402
from grounded_planner.ros.bags import write_bag  # noqa: E402
from grounded_planner.ros.client import GroundedPlannerClient  # noqa: E402
from grounded_planner.ros.convert import numpy_to_image  # noqa: E402
from grounded_planner.vlm.fake_server import FakeVLMServer  # noqa: E402


def scene_yaml() -> str:
    """The simulated workcell holding what the recorded camera sees: the red cube where the bag shows it (through the
    tabletop's camera model and extrinsics), a tray where the planner places it ("the table" at the image centre)."""
    cube_x, cube_y, _ = base_point(100.5, 120.5, CUBE_M)  # the centre of the cube's box in the image
    tray_x, tray_y, _ = base_point(160.5, 120.5, TABLE_M)
    return f"""name: tabletop_cube
instruction: put the red cube on the table
objects:
  - {{id: red_cube, kind: box, name: red cube, size_m: [0.04, 0.04, 0.05], position_m: [{cube_x:.4f}, {cube_y:.4f}], color: red}}
  - {{id: tray, kind: bowl, name: tray, size_m: [0.085, 0.03], position_m: [{tray_x:.4f}, {tray_y:.4f}], color: blue}}
plan:
  - {{type: grasp, object: red_cube}}
  - {{type: place, target: tray}}
success:
  - {{type: inside, object: red_cube, target: tray}}
"""


CONSOLE_URL = re.compile(r"console on (http://[\d.]+:\d+/)")
FRAME_TOPIC = "/bench/camera/color/image_raw"
WIDTH, HEIGHT, FPS = 1280, 720, 30
PLAN_GAP_S = 0.5  # between plan requests: the planner's and the logger's work after an answer is done by then


def stats_ms(samples_ms: list[float]) -> str:
    ms = sorted(samples_ms)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   max {ms[-1]:7.2f} ms   (n={len(ms)})"


class Child:
    """A child process whose output is read on a thread (to wait for a line while it runs)."""

    def __init__(self, command: list[str]):
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    def wait_for(self, pattern: re.Pattern, timeout_s: float) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = pattern.search("".join(self.lines))
            if match:
                return match
            time.sleep(0.05)
        raise SystemExit(f"no {pattern.pattern!r} in:\n{''.join(self.lines)[-3000:]}")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(2)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def set_parameter(node, executor, target: str, name: str, value) -> None:
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient

    client = AsyncParameterClient(node, target)
    client.wait_for_services(timeout_sec=20.0)
    future = client.set_parameters([Parameter(name, value=value)])
    executor.spin_until_future_complete(future, timeout_sec=20.0)


def approve_to_motion(driver, url: str, node, executor, events: list, runs: int) -> list[float]:
    """Plan in the page, click Approve, and time the click to the executor's first motion event."""
    driver.get(url)
    wait_until(
        lambda: driver.execute_script("return document.getElementById('conn').textContent") == "online",
        20,
        "the page to connect",
    )
    out = []
    for _ in range(runs):
        before = driver.find_element("id", "plan-title").text
        box = driver.find_element("id", "instruction")
        box.clear()
        box.send_keys(INSTRUCTION)
        driver.find_element("id", "plan-btn").click()
        wait_until(
            lambda: (
                driver.find_element("id", "plan-title").text not in ("", before)
                and not driver.find_element("id", "approve-btn").get_attribute("disabled")
            ),
            60,
            "a plan to approve",
        )
        events.clear()
        driver.execute_script(
            "document.getElementById('approve-btn').addEventListener('click', "
            "() => { window.gpClick = performance.timeOrigin + performance.now(); }, "
            "{capture: true, once: true});"
        )
        driver.find_element("id", "approve-btn").click()
        click_ms = driver.execute_script("return window.gpClick")

        def motions() -> list:  # this plan's motion events (the last plan's late ones are older than the click)
            return [e for e in events if e[1] != "awaiting_approval" and e[0] / 1e6 > click_ms]

        deadline = time.monotonic() + 30
        while not motions() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        out.append(motions()[0][0] / 1e6 - click_ms)
        # let the plan finish (or end) before the next one: the executor takes one goal at a time
        wait_until(lambda: driver.find_element("id", "exec-badge").text == "executor: idle", 60, "the executor idle")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--approvals", type=int, default=10)
    parser.add_argument("--plans", type=int, default=20)
    parser.add_argument("--frames-s", type=float, default=10.0)
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    os.environ.update(
        ROS_DOMAIN_ID=str(random.SystemRandom().randint(1, 200)),
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        RMW_IMPLEMENTATION="rmw_fastrtps_cpp",
        PYTHONPATH=str(REPO),
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench_console_"))
    color, depth, info = scene_messages(stamp_s=1_700_000_000)  # stamped: the player moves stamps to playback time
    topics = (
        "/camera/camera/color/image_raw",
        "/camera/camera/aligned_depth_to_color/image_raw",
        "/camera/camera/color/camera_info",
    )
    bag = write_bag(
        tmp / "bag", [(t, i * 100_000_000, m) for i in range(3) for t, m in zip(topics, (color, depth, info))]
    )
    (tmp / "extrinsics.yaml").write_text(EXTRINSICS)
    (tmp / "scene.yaml").write_text(scene_yaml())
    (tmp / "executor.yaml").write_text(f"backends:\n  sim:\n    seed: null\n    scenario: {tmp / 'scene.yaml'}\n")
    context = Context()
    rclpy.init(context=context, domain_id=int(os.environ["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("bench_console", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    events: list[tuple[int, str]] = []
    from grounded_planner_interfaces.msg import ExecutionEvent

    node.create_subscription(
        ExecutionEvent,
        names.EXECUTION_FEEDBACK,
        lambda m: events.append((m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec, m.state)),
        QoSProfile(depth=50),
    )
    driver = chromium()
    children = []
    try:
        with FakeVLMServer(SCENE_COLORS) as vlm:
            sets = {
                "bag_player.bag": bag,
                "planner.base_url": vlm.base_url,
                "planner.model": "qwen3-vl-test",
                "planner.extrinsics_file": tmp / "extrinsics.yaml",
                "executor.dry_run": "false",
                "executor.config_file": tmp / "executor.yaml",
                "rollout_logger.log_dir": tmp / "rollouts",
                "console.port": 0,
                "console.rollouts_dir": tmp / "rollouts",
                "console.executor_config_file": tmp / "executor.yaml",
            }
            graph = Child(
                [
                    *CLI,
                    "bringup",
                    "--config",
                    "config/replay.yaml",
                    *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")],
                ]
            )
            children.append(graph)
            url = graph.wait_for(CONSOLE_URL, 90).group(1)

            # 1. approve click -> first motion command
            for require_approval in (False, True):
                set_parameter(node, executor, "executor", "require_approval", require_approval)
                samples = approve_to_motion(driver, url, node, executor, events, args.approvals)
                print(
                    f"approve click -> first motion command, require_approval {str(require_approval).lower():5}: "
                    f"{stats_ms(samples)}"
                )

            # 3. what the console adds to a plan request (no page open: a browser redrawing on this 2-core machine
            # would take CPU from whichever request it follows; each request after the last one's aftermath settled),
            # the console inside the bringup process (sharing its GIL with the planner) and in a process of its own
            driver.get("about:blank")
            own = Child([*CLI, "console", "--port", "0", "--rollouts-dir", str(tmp / "rollouts")])
            children.append(own)
            own_url = own.wait_for(CONSOLE_URL, 60).group(1)
            client = GroundedPlannerClient(node, executor=executor)
            client.wait_until_ready(30.0, execute=False)
            paths = {
                "GroundedPlannerClient (baseline)": None,
                "console in the bringup": httpx.Client(base_url=url, timeout=60.0),
                "console in its own process": httpx.Client(base_url=own_url, timeout=60.0),
            }
            times: dict[str, list[float]] = {k: [] for k in paths}
            order = list(paths)
            for i in range(args.plans + 2):
                for which in order[i % 3 :] + order[: i % 3]:  # rotate which goes first
                    time.sleep(PLAN_GAP_S)
                    t0 = time.perf_counter()
                    if paths[which] is None:
                        assert client.plan(INSTRUCTION, backproject=True, timeout_s=60.0).succeeded, client.last_error
                    else:
                        assert paths[which].post("/api/plan", json={"instruction": INSTRUCTION}).status_code == 200
                    if i >= 2:  # warm-up
                        times[which].append((time.perf_counter() - t0) * 1000)
            base = times[order[0]]
            for which, samples in times.items():
                # each round's console request against the same round's direct one (the machine's load drifts)
                paired = [c - d for c, d in zip(samples, base)]
                extra = (
                    ""
                    if paths[which] is None
                    else f"\n    adds: median of paired differences {statistics.median(paired):+.2f} ms"
                )
                print(f"plan request, {which:33}: {stats_ms(samples)}{extra}")

        # 2. camera frame -> shown, 1280x720 at 30 Hz, to a console of its own
        cam = Child(
            [
                sys.executable,
                "-m",
                "grounded_planner.ros.console_node",
                "--ros-args",
                "-p",
                "port:=0",
                "-p",
                f"color_topic:={FRAME_TOPIC}",
                "-p",
                f"rollouts_dir:={tmp / 'rollouts'}",
            ]
        )
        children.append(cam)
        cam_url = cam.wait_for(CONSOLE_URL, 60).group(1)
        publisher = node.create_publisher(
            type(numpy_to_image(np.zeros((2, 2, 3), np.uint8), "rgb8")), FRAME_TOPIC, QoSProfile(depth=2)
        )
        rng = np.random.default_rng(0)
        base = rng.integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)  # noise: a JPEG of a real scene's size class
        stop = threading.Event()

        def stream() -> None:
            k = 0
            while not stop.is_set():
                frame = np.roll(base, k * 8, axis=1)
                msg = numpy_to_image(frame, "rgb8")
                now = time.time_ns()
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now, 1_000_000_000)
                msg.header.frame_id = "camera_color_optical_frame"
                publisher.publish(msg)
                k += 1
                stop.wait(1.0 / FPS)

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        time.sleep(2.0)
        idle0 = cam.cpu_s()
        time.sleep(args.frames_s)
        idle_cpu = cam.cpu_s() - idle0  # the baseline: the stream published, no page open
        driver.get(cam_url)
        wait_until(lambda: driver.execute_script("return window.gpShown.length") > 5, 30, "frames in the page")
        time.sleep(1.0)
        shown0 = driver.execute_script("return window.gpShown.length")
        cpu0 = cam.cpu_s()
        time.sleep(args.frames_s)
        cpu = cam.cpu_s() - cpu0
        shown = driver.execute_script("return window.gpShown")
        stop.set()
        window = shown[-(len(shown) - shown0) :] if len(shown) > shown0 else []
        latency = [s["shown_ms"] - int(s["stamp_ns"]) / 1e6 for s in window]
        print(f"camera frame (1280x720, {FPS} Hz published) -> shown in the browser: {stats_ms(latency)}")
        print(
            f"  displayed {len(window) / args.frames_s:.1f} frames/s; console process CPU "
            f"{cpu / max(1, len(window)) * 1000:.1f} ms per displayed frame "
            f"({cpu / args.frames_s * 100:.0f} % of a core; with no page open: {idle_cpu / args.frames_s * 100:.1f} %)"
        )
    finally:
        driver.quit()
        for child in reversed(children):
            child.stop()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
