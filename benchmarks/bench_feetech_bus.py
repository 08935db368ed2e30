"""How late the simulated SO-101's Feetech bus (`sim so101-bus`) answers LeRobot 0.4.4 when its reply delay is held
by a sleep (the shipped PtyBusServer), by a spin (no second wake-up) and not at all, optionally under a CPU load.

The bus runs in a process of its own (as in the tests and as a real arm is); this process is the host: LeRobot's
own FeetechMotorsBus, configured as SOFollower configures it (Return_Delay_Time 0), doing what the lerobot backend
does each control period: a sync read of Present_Position and a sync write of Goal_Position. Printed per mode:
round trips of the sync read (p50/p99/p99.9/max), the reads that missed LeRobot's 50 ms packet timeout and the
answers the bus dropped as too late (see grounded_planner/sim/feetech.py).

Run under the exclusive lock (it measures time, and --load starts busy processes):
  flock -x /work/helpers/quiet.lock .venv/bin/python benchmarks/bench_feetech_bus.py --seconds 30 --load 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

MODES = ("sleep", "spin", "off")
NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def spin_until(deadline: float) -> None:
    """The alternative to PtyBusServer's sleep: wait on the CPU, without a second wake-up per transaction."""
    while time.monotonic() < deadline:
        pass


def serve(mode: str) -> int:
    """The bus process: `sim so101-bus` with the reply delay held as ``mode`` says."""
    from grounded_planner.cli.main import main
    from grounded_planner.sim.feetech import PtyBusServer

    if mode == "spin":
        PtyBusServer._hold_until = staticmethod(spin_until)
    elif mode == "off":
        PtyBusServer._hold_until = staticmethod(lambda deadline: None)
    return main(["sim", "so101-bus"])


def measure(mode: str, seconds: float, period_s: float) -> dict:
    from lerobot.motors import Motor, MotorNormMode
    from lerobot.motors.feetech import FeetechMotorsBus

    env = {**os.environ, "PYTHONPATH": str(REPO), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    bus = subprocess.Popen([sys.executable, __file__, "--serve", mode], stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = json.loads(bus.stdout.readline())["port"]
        motors = {
            name: Motor(i + 1, "sts3215", MotorNormMode.RANGE_0_100 if name == "gripper" else MotorNormMode.DEGREES)
            for i, name in enumerate(NAMES)
        }
        host = FeetechMotorsBus(port, motors)
        misses = 0
        for attempt in range(3):  # as the lerobot backend does (bus_retries): a packet lost in the handshake
            try:
                host.connect()
                break
            except ConnectionError:
                misses += 1
                host.port_handler.closePort()  # a fresh connection, torque untouched
                if attempt == 2:
                    raise
        host.configure_motors()  # as SOFollower.configure(): Return_Delay_Time 0 on every servo
        trips = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            tick = time.monotonic()
            try:
                present = host.sync_read("Present_Position", normalize=False)
                trips.append(time.monotonic() - tick)
                host.sync_write("Goal_Position", present, normalize=False)
            except ConnectionError:
                misses += 1
            time.sleep(max(0.0, period_s - (time.monotonic() - tick)))
        host.disconnect(disable_torque=False)
    finally:
        bus.send_signal(signal.SIGINT)
        try:
            out, _ = bus.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            bus.kill()
            out, _ = bus.communicate()
    dropped = json.loads(out.strip().splitlines()[-1]).get("late_dropped", 0) if out.strip() else -1
    trips.sort()

    def pct(q: float) -> float:
        return trips[min(len(trips) - 1, int(q * len(trips)))] * 1e3 if trips else float("nan")

    return {
        "reads": len(trips) + misses,
        "p50": pct(0.5),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "max": trips[-1] * 1e3 if trips else float("nan"),
        "over_25ms": sum(t > 0.025 for t in trips),
        "misses": misses,
        "dropped": dropped,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=30.0, help="host loop per mode, s")
    parser.add_argument("--period", type=float, default=0.02, help="control period of the host loop, s")
    parser.add_argument("--load", type=int, default=0, help="busy processes running meanwhile (a loaded machine)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    import lerobot

    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"lerobot {lerobot.__version__}; load average before: {os.getloadavg()[0]:.2f}; "
        f"{args.load} busy processes; {args.seconds:.0f} s per mode, a sync read + sync write every "
        f"{args.period * 1e3:.0f} ms"
    )
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        for mode in args.modes.split(","):
            r = measure(mode, args.seconds, args.period)
            print(
                f"  {mode:5s}: {r['reads']} sync reads, round trip p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms, "
                f"p99.9 {r['p999']:.2f} ms, max {r['max']:.1f} ms; over 25 ms: {r['over_25ms']}; "
                f"missed LeRobot's 50 ms: {r['misses']} (the bus dropped {r['dropped']} as too late); "
                f"load average now {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
