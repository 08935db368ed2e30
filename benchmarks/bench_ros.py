"""Benchmark: /grounded_planner/plan round trip across processes with a 1280x720 image, and the camera path's CPU per frame.

1. planner_node runs in a child process against the vlm layer's stand-in OpenAI-compatible server (a third
   process; it answers as soon as it has found the objects by colour, no model). A client in this process calls /grounded_planner/plan with a 1280x720 image. Baselines measured in
   the same run: a bare std_srvs/Trigger round trip to a child process, and Planner.plan called directly in this
   process on the same server (image encoding + HTTP + parsing, no ROS).
2. The camera path: a pyrealsense2 software_device fed 1280x720 colour and 848x480 depth; per frame, the CPU
   time of librealsense's sync + align to colour, and of the message conversion + publishing of camera_node.
   Baseline: copying the same bytes once (memcpy).

Run: .venv/bin/python benchmarks/bench_ros.py [--requests 40] [--frames 60]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from grounded_planner.vlm.fake_server import start_process

REPO = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1280, 720
INSTRUCTION = "put the red cube on the table"

TRIGGER_SERVER = """
import rclpy
from rclpy.executors import ExternalShutdownException
from std_srvs.srv import Trigger
try:
    with rclpy.init():
        node = rclpy.create_node("trigger_server")
        node.create_service(Trigger, "/bench/trigger", lambda req, res: setattr(res, "success", True) or res)
        rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""


class _VLMProcess:
    """The stand-in server in its own process, so that its work (PNG decoding, colour search) competes with
    neither the planner node nor the in-process baseline for this process's GIL."""

    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc, self.url = proc, url

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def _start_vlm_process() -> _VLMProcess:
    return _VLMProcess(*start_process({"red cube": (220, 30, 30), "table": (200, 200, 200)}))


def _start_planner_node(url: str, env: dict) -> subprocess.Popen:
    """planner_node in a child process, planning with the stand-in server at ``url`` (openai backend, no retries)."""
    params = ["backend:=openai", f"base_url:={url}", "model:=qwen3-vl-bench", "max_retries:=0"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grounded_planner.ros.planner_node",
            "--ros-args",
            *[a for p in params for a in ("-p", p)],
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _percentiles(samples_s: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples_s)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   (n={len(ms)})"


def _stop(proc: subprocess.Popen) -> None:
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def bench_plan_round_trip(requests: int) -> None:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import Trigger

    from grounded_planner.ros.convert import numpy_to_image
    from grounded_planner.vlm.config import PlannerConfig
    from grounded_planner.vlm.factory import make_planner
    from grounded_planner_interfaces.srv import GetGroundedPlan

    # a table with a red cube, as a camera would see it (with sensor noise, so PNG encoding is not trivially cheap)
    rng = np.random.default_rng(0)
    image = np.clip(rng.normal(200, 6, (HEIGHT, WIDTH, 3)), 0, 255).astype(np.uint8)
    image[300:420, 500:580] = (220, 30, 30)
    server = _start_vlm_process()
    env = dict(
        os.environ, ROS_DOMAIN_ID=str(random.SystemRandom().randint(1, 200)), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST"
    )
    os.environ.update(ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    planner_proc = _start_planner_node(server.url, env)
    trigger_proc = subprocess.Popen(
        [sys.executable, "-c", TRIGGER_SERVER], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    context = Context()
    rclpy.init(context=context, domain_id=int(env["ROS_DOMAIN_ID"]))
    try:
        node = rclpy.create_node("bench_client", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)

        def timed_calls(client, make_request, n):
            if not client.wait_for_service(timeout_sec=60.0):
                raise RuntimeError(f"{client.srv_name} never came up")
            samples = []
            for i in range(n + 3):  # 3 warm-up calls (discovery, first HTTP connection, imports)
                start = time.perf_counter()
                future = client.call_async(make_request())
                executor.spin_until_future_complete(future, timeout_sec=60.0)
                if not future.done():
                    raise RuntimeError(f"{client.srv_name}: no response within 60 s")
                if i >= 3:
                    samples.append(time.perf_counter() - start)
            return samples, future.result()

        plan_client = node.create_client(GetGroundedPlan, "/grounded_planner/plan")
        image_msg = numpy_to_image(image, "rgb8")
        plan_samples, response = timed_calls(
            plan_client, lambda: GetGroundedPlan.Request(instruction=INSTRUCTION, image=image_msg), requests
        )
        if not response.success:
            raise RuntimeError(f"plan request failed: {response.message}")
        trigger_samples, _ = timed_calls(node.create_client(Trigger, "/bench/trigger"), Trigger.Request, requests)
    finally:
        rclpy.shutdown(context=context)
        _stop(planner_proc)
        _stop(trigger_proc)

    planner = make_planner(PlannerConfig(backend="openai", model="qwen3-vl-bench", base_url=server.url, max_retries=0))
    direct = []
    for i in range(requests + 3):
        start = time.perf_counter()
        planner.plan(image, INSTRUCTION)
        if i >= 3:
            direct.append(time.perf_counter() - start)
    planner.close()
    server.stop()

    overhead_ms = (statistics.median(plan_samples) - statistics.median(direct)) * 1000
    print(f"plan service, {WIDTH}x{HEIGHT} image, 2 processes : {_percentiles(plan_samples)}")
    print(f"  baseline Planner.plan in-process (no ROS) : {_percentiles(direct)}")
    print(f"  baseline std_srvs/Trigger, 2 processes    : {_percentiles(trigger_samples)}")
    print(
        f"  ROS overhead of the plan service (median plan service - median in-process plan): {overhead_ms:.2f} ms "
        f"for {WIDTH * HEIGHT * 3 / 1e6:.1f} MB of image"
    )


def bench_camera_path(frames: int) -> None:
    import rclpy
    from rclpy.context import Context

    from grounded_planner.ros.camera_node import CameraNode
    from grounded_planner.ros.realsense import SoftwareCamera

    rng = np.random.default_rng(0)
    color = rng.integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    depth = rng.integers(400, 1500, (480, 848), dtype=np.uint16)
    camera = SoftwareCamera((WIDTH, HEIGHT), (848, 480), fx_px=909.0, fps=30)
    source = camera.source()
    context = Context()
    rclpy.init(context=context, domain_id=random.SystemRandom().randint(1, 200))
    node = CameraNode(context=context, source_factory=lambda params: source)
    node.trigger_configure()
    node.trigger_activate()
    node._stop_thread()  # frames are read and published here, to time each part alone
    read_cpu, publish_cpu = [], []
    got = 0
    try:
        for _ in range(frames * 3):
            camera.push(color, depth)  # paced at 30 fps (sleeps, no CPU)
            t0 = time.process_time()
            aligned = source.read(0.2)
            t1 = time.process_time()
            if aligned is None:
                continue
            node.publish(aligned)
            t2 = time.process_time()
            read_cpu.append(t1 - t0)
            publish_cpu.append(t2 - t1)
            got += 1
            if got >= frames:
                break
    finally:
        node.trigger_deactivate()
        node.trigger_cleanup()
        node.destroy_node()
        rclpy.shutdown(context=context)
    buffer = np.empty(color.nbytes + WIDTH * HEIGHT * 2, np.uint8)
    flat = np.concatenate([color.reshape(-1), np.zeros(WIDTH * HEIGHT * 2, np.uint8)])
    copy_cpu = []
    for _ in range(frames):
        t0 = time.process_time()
        np.copyto(buffer, flat)
        copy_cpu.append(time.process_time() - t0)
    print(f"camera path, {WIDTH}x{HEIGHT} colour + 848x480 depth aligned to colour, {got} frames (CPU time per frame):")
    print(f"  librealsense sync + align + read   : {statistics.median(read_cpu) * 1000:7.2f} ms")
    print(f"  to sensor_msgs + publish (4 msgs)  : {statistics.median(publish_cpu) * 1000:7.2f} ms")
    print(f"  baseline: one memcpy of the bytes  : {statistics.median(copy_cpu) * 1000:7.2f} ms")
    total = statistics.median(read_cpu) + statistics.median(publish_cpu)
    print(f"  total {total * 1000:.2f} ms per frame = {total * 30 * 100:.0f}% of one core at 30 fps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40, help="timed service calls per measurement")
    parser.add_argument("--frames", type=int, default=60, help="timed camera frames")
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    bench_plan_round_trip(args.requests)
    bench_camera_path(args.frames)


if __name__ == "__main__":
    main()
