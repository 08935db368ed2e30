"""How often the first request of a fresh client process is lost to the DDS discovery race, with and without the
reachability probe of grounded_planner/ros/reach.py (the baseline: plain ``wait_for_service()`` then call, as
rclpy's tutorials do). Each client is a new process (a new DDS participant) calling a plain rclpy Trigger service
in another process, ``--together`` of them starting at once, while ``--load`` busy processes compete for the
CPUs, as on a loaded CI machine.

    python benchmarks/bench_discovery.py --clients 32 --together 4 --load 6
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SERVER = """
import rclpy
from rclpy.executors import ExternalShutdownException
from std_srvs.srv import Trigger
def answer(request, response):
    response.success = True
    return response
try:
    with rclpy.init():
        node = rclpy.create_node("bench_discovery_server")
        node.create_service(Trigger, "/bench_discovery/ping", answer)
        print("ready", flush=True)
        rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""

CLIENT = """
import sys, time, rclpy
from rclpy.executors import SingleThreadedExecutor
from std_srvs.srv import Trigger
from grounded_planner.ros.reach import Reachability, wait_spinning
with rclpy.init():
    node = rclpy.create_node("bench_discovery_client")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    wait = wait_spinning(executor)
    client = node.create_client(Trigger, "/bench_discovery/ping")
    reach = Reachability(node, wait)
    assert client.wait_for_service(timeout_sec=60.0)
    started = time.monotonic()
    if sys.argv[1] == "probe":
        reach.ensure("/bench_discovery/ping", 30.0)
    answered = wait(client.call_async(Trigger.Request()), float(sys.argv[2]))
    first_ms = (time.monotonic() - started) * 1e3
    later_ms = float("nan")  # what each later request pays: the check that the server is the one confirmed
    if sys.argv[1] == "probe" and answered:
        started = time.perf_counter()
        for _ in range(50):
            reach.ensure("/bench_discovery/ping", 30.0)
        later_ms = (time.perf_counter() - started) * 1e3 / 50
    print("ANSWERED" if answered else "LOST", f"{first_ms:.1f}", f"{later_ms:.3f}", flush=True)
"""


def run_clients(mode: str, count: int, answer_wait_s: float, env: dict) -> list[tuple[bool, float, float]]:
    """``count`` fresh client processes started together; of each: (answered, ms from the end of discovery to
    the first answer, ms of the reachability check on each later request (nan without the probe))."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, mode, str(answer_wait_s)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(count)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        line = next((ln for ln in out.splitlines() if ln.startswith(("ANSWERED", "LOST"))), "LOST nan nan")
        word, ms, later_ms = line.split()
        results.append((word == "ANSWERED", float(ms), float(later_ms)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=30, help="fresh client processes per mode")
    parser.add_argument("--together", type=int, default=4, help="client processes started at the same moment")
    parser.add_argument("--load", type=int, default=6, help="busy processes competing for the CPUs")
    parser.add_argument("--answer-wait", type=float, default=8.0, help="seconds a client waits for its answer")
    parser.add_argument(
        "--discovery-range",
        default="",
        choices=["", "LOCALHOST", "SUBNET"],
        help="ROS_AUTOMATIC_DISCOVERY_RANGE (default: as the environment says; ROS's default SUBNET)",
    )
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    env = dict(
        os.environ,
        ROS_DOMAIN_ID=str(random.randint(100, 200)),
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    if args.discovery_range:
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = args.discovery_range
    server = subprocess.Popen([sys.executable, "-c", SERVER], env=env, stdout=subprocess.PIPE, text=True)
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        assert server.stdout.readline().strip() == "ready"
        results = {"baseline (wait_for_service, call)": [], "probe (reach.confirm_reachable, call)": []}
        modes = dict(zip(results, ["plain", "probe"]))
        for _ in range(max(1, args.clients // args.together)):  # interleaved: both modes see the same load
            for label, mode in modes.items():
                results[label] += run_clients(mode, args.together, args.answer_wait, env)
        print(
            f"{len(results[next(iter(results))])} fresh client processes per mode, {args.together} at a time, "
            f"{args.load} busy processes, answer awaited "
            f"{args.answer_wait:g} s, discovery range {env.get('ROS_AUTOMATIC_DISCOVERY_RANGE', 'SUBNET (default)')}"
        )
        for label, runs in results.items():
            lost = sum(not ok for ok, _ms, _later in runs)
            times = sorted(ms for ok, ms, _later in runs if ok)
            median = times[len(times) // 2] if times else float("nan")
            print(f"  {label:40s} lost {lost:3d}/{len(runs)}   median first answer {median:7.1f} ms")
        later = sorted(ms for ok, _ms, ms in results["probe (reach.confirm_reachable, call)"] if ok)
        if later:
            print(
                f"  each later request of a probed client pays the check that the server is the one confirmed "
                f"(Reachability.ensure, a graph lookup): median {later[len(later) // 2]:.2f} ms"
            )
    finally:
        for proc in load:
            proc.kill()
        server.terminate()
        server.wait(timeout=10)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
