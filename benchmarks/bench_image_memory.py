"""Benchmark: CPU per frame of a node process subscribed to a 30 Hz 1280x720 rgb8 stream, glibc's malloc defaults
against the thresholds every node of ours sets at start (grounded_planner/ros/malloc.py, keep_image_buffers), and
a callback per frame against the images taken on demand (grounded_planner/ros/frames.py, LatestFrames).

A camera stand-in process publishes the frame at 30 Hz (as a RealSense driver does); one subscriber process at a
time counts what it receives for --seconds and reports its CPU time (user and kernel), its minor page faults per
frame and its peak resident memory. Baseline, in the same run: the same subscriber with glibc's defaults.
The subscriber alternates between the settings --rounds times, so the load of other jobs falls on all alike:
  default     a callback per frame, spin_once, glibc's malloc defaults (the baseline)
  keep        the same with keep_image_buffers
  keep_mt     the same on a MultiThreadedExecutor(4), as planner_node took every frame before LatestFrames took
              them on demand
  on_demand   LatestFrames on a MultiThreadedExecutor(4), as planner_node, backprojection_node and executor_node
              run now: the images wait in the middleware; a snapshot once a second stands for a plan request
For on_demand, the frames the middleware received are not counted one by one: CPU per frame divides by 30 Hz.

Run: .venv/bin/python benchmarks/bench_image_memory.py [--seconds 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys

from bench_latency import _start_camera_process
from bench_ros import REPO, _stop

SUBSCRIBER = r"""
import os, resource, sys, time
import rclpy
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Image
setting = sys.argv[1]
if setting != "default":
    from grounded_planner.ros.malloc import keep_image_buffers
    keep_image_buffers()
seconds = float(sys.argv[2])
rclpy.init()
node = rclpy.create_node("bench_subscriber")
count = [0]
TOPIC = "/camera/camera/color/image_raw"
if setting == "on_demand":
    from grounded_planner.ros.frames import LatestFrames
    latest = LatestFrames(node, TOPIC, "", "")
else:
    node.create_subscription(Image, TOPIC, lambda msg: count.__setitem__(0, count[0] + 1), QoSProfile(depth=2))
if setting in ("keep_mt", "on_demand"):
    import threading
    from rclpy.executors import MultiThreadedExecutor
    executor = MultiThreadedExecutor(4)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
if setting == "on_demand":
    def spin_for(s):
        end = time.monotonic() + s
        while time.monotonic() < end:
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            if latest.snapshot().color is not None:
                count[0] += 1
elif setting == "keep_mt":
    spin_for = time.sleep
else:
    def spin_for(s):
        end = time.monotonic() + s
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.1)
spin_for(3.0)  # discovery and warm-up
before, n0, t0 = resource.getrusage(resource.RUSAGE_SELF), count[0], time.monotonic()
spin_for(seconds)
after, frames, wall = resource.getrusage(resource.RUSAGE_SELF), count[0] - n0, time.monotonic() - t0
if setting == "on_demand":
    frames = round(30 * wall) if frames else 0  # the stream's rate: LatestFrames does not see every frame
print(frames, wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime,
      after.ru_minflt - before.ru_minflt, after.ru_maxrss / 1024, flush=True)
os._exit(0)  # executor threads still spinning
"""


def measure(setting: str, seconds: float, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SUBSCRIBER, setting, str(seconds)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"subscriber ({setting}) failed: {out.stderr[-2000:]}")
    frames, wall, user, system, faults, rss = map(float, out.stdout.split())
    if frames < 1:
        raise RuntimeError(f"subscriber ({setting}) received no frame in {seconds} s")
    return {
        "frames": frames,
        "fps": frames / wall,
        "cpu_ms": 1000 * (user + system) / frames,
        "kernel_ms": 1000 * system / frames,
        "faults": faults / frames,
        "rss_mb": rss,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per subscriber run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating")
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} (other jobs share these CPUs)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env = dict(
        clean, ROS_DOMAIN_ID=str(random.SystemRandom().randint(1, 200)), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST"
    )
    camera = _start_camera_process(env)
    runs: dict[str, list[dict]] = {"default": [], "keep": [], "keep_mt": [], "on_demand": []}
    try:
        for _ in range(args.rounds):
            for setting in runs:
                runs[setting].append(measure(setting, args.seconds, env))
    finally:
        _stop(camera)
    print(f"\na subscriber to 1280x720 rgb8 at 30 Hz, {args.rounds} run(s) of {args.seconds:.0f} s each (medians):")
    figures = {}
    for setting, label in (
        ("default", "callbacks, glibc defaults (baseline)"),
        ("keep", "callbacks, keep_image_buffers"),
        ("keep_mt", "callbacks, keep, 4 executor threads"),
        ("on_demand", "taken on demand (our nodes now)"),
    ):
        m = {key: statistics.median(r[key] for r in runs[setting]) for key in runs[setting][0]}
        figures[setting] = m
        print(
            f"  {label:38s} CPU {m['cpu_ms']:5.2f} ms/frame (kernel {m['kernel_ms']:5.2f}), "
            f"{m['faults']:6.0f} page faults/frame, {m['fps']:4.1f} frames/s, peak RSS {m['rss_mb']:.0f} MB"
        )
    ratio = figures["default"]["cpu_ms"] / figures["keep"]["cpu_ms"]
    print(
        f"CPU per frame: {ratio:.1f}x less with keep_image_buffers; at 30 Hz that is "
        f"{3 * figures['default']['cpu_ms']:.0f}% -> {3 * figures['keep']['cpu_ms']:.0f}% of one CPU"
    )
    print(
        f"taking the images on demand instead of a callback per frame (4 executor threads both): "
        f"{3 * figures['keep_mt']['cpu_ms']:.0f}% -> {3 * figures['on_demand']['cpu_ms']:.0f}% of one CPU"
    )


if __name__ == "__main__":
    main()
