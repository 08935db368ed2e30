"""Benchmark: planning-and-check time per step in dry run; grasp->place on franky-sim against its motion time.

1. Dry run of a 26-step plan (13 grasp/place pairs, targets inside the Franka and SO-101 workspaces): time per
   step with the envelope checks only (the baseline), with the Franka reach check, and with the SO-101 IK
   (placo on the SO-101 URDF) checking every waypoint.
2. On franky-sim (MuJoCo, libfranka protocol on localhost, real time): wall time of complete grasp->place pairs
   moving a 4 cm cube back and forth, next to the sum of the durations of the robot commands inside them
   (moves and gripper actions); the difference is what the executor adds (planning, checks, bookkeeping).

Run: .venv/bin/python benchmarks/bench_execution.py [--pairs 3] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))  # the franky-sim scene server helper

from grounded_planner.execution.backends import make_backend  # noqa: E402
from grounded_planner.execution.config import ExecutorConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.geometry.targets import TargetSet  # noqa: E402
from grounded_planner.plan import GroundedAction, GroundedPlan  # noqa: E402


def pair_plan(pairs: int) -> GroundedPlan:
    actions = []
    for i in range(pairs):
        actions.append(GroundedAction("grasp", f"obj{i}", bbox=(10.0, 10.0, 50.0, 50.0)))
        actions.append(GroundedAction("place", f"obj{i}", "spot", point=(300.0, 200.0)))
    return GroundedPlan("bench", (640, 480), actions)


def random_targets(pairs: int, lo, hi, seed: int = 0) -> TargetSet:
    rng = np.random.default_rng(seed)
    targets = []
    for i in range(2 * pairs):
        position = [rng.uniform(lo[0], hi[0]), rng.uniform(lo[1], hi[1]), rng.uniform(lo[2], hi[2])]
        kind = "grasp" if i % 2 == 0 else "place"
        targets.append(
            {
                "index": i,
                "type": kind,
                "object": f"obj{i // 2}",
                "position": position,
                "yaw": float(rng.uniform(-1.5, 1.5)) if kind == "grasp" else None,
            }
        )
    return TargetSet.from_dict({"frame": "base", "targets": targets, "warnings": []})


def time_dry_run(executor: Executor, plan, targets, repeats: int) -> tuple[float, int]:
    times, ok = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        result = executor.execute(plan, targets, dry_run=True)
        times.append(time.perf_counter() - start)
        ok = sum(s.outcome.value == "ok" for s in result.steps)
    return statistics.median(times) / len(plan.actions), ok


class TimedBackend:
    """Delegates to a backend and adds up the wall time spent inside its robot commands."""

    COMMANDS = ("move_to_pose", "gripper_open", "gripper_close")

    def __init__(self, inner):
        self._inner = inner
        self.command_s = 0.0

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in self.COMMANDS:
            return attr

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.command_s += time.perf_counter() - start

        return timed


def bench_dry_run(repeats: int) -> None:
    print("\n1. dry run, 26-step plan (13 grasp/place pairs), median of", repeats, "runs")
    plan = pair_plan(13)
    franka = ExecutorConfig.load(ROOT / "config" / "execution_franka.yaml")
    so101 = ExecutorConfig.load(ROOT / "config" / "execution_so101.yaml")
    f_targets = random_targets(13, (0.35, -0.3, 0.02), (0.7, 0.3, 0.15))
    s_targets = random_targets(13, (0.16, -0.08, 0.0), (0.26, 0.08, 0.04))
    rows = [
        ("envelope only, Franka config (baseline)", Executor(None, franka), f_targets),
        ("envelope + Franka reach check (franky)", Executor(make_backend("franky", franka), franka), f_targets),
        ("envelope only, SO-101 config (baseline)", Executor(None, so101), s_targets),
    ]
    lerobot = make_backend("lerobot", so101)
    start = time.perf_counter()
    lerobot.kinematics  # noqa: B018  (load the URDF once, outside the timing)
    load_s = time.perf_counter() - start
    rows.append(("envelope + SO-101 IK on every waypoint (placo)", Executor(lerobot, so101), s_targets))
    base = None
    for name, executor, targets in rows:
        per_step, ok = time_dry_run(executor, plan, targets, repeats)
        if "baseline" in name:
            base = per_step
        ratio = f"  ({per_step / base:.1f}x the baseline)" if base and "baseline" not in name else ""
        print(f"   {name:50s} {per_step * 1e3:8.3f} ms/step  [{ok}/26 steps ok]{ratio}")
    print(f"   (SO-101 URDF load for the IK, once: {load_s * 1e3:.0f} ms)")


def bench_franky_sim(pairs: int) -> None:
    try:
        from helpers.franky_server import franky_sim_server
    except ImportError as exc:  # pragma: no cover
        print(f"\n2. franky-sim: skipped ({exc})")
        return
    print(f"\n2. franky-sim (MuJoCo, real time): {pairs} grasp->place pairs moving a 4 cm cube")
    cfg = ExecutorConfig.load(ROOT / "config" / "execution_franka.yaml")
    a, b = (0.5, 0.1), (0.55, -0.15)
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_franky_{os.getpid()}.json"
    with franky_sim_server(cubes=[(a[0], a[1], 0.02, 0.04)], state_path=str(state)) as host:
        cfg.backends["franky"].update(hostname=host, realtime=False)
        backend = make_backend("franky", cfg)
        with backend:
            timed = TimedBackend(backend)
            executor = Executor(timed, cfg)  # type: ignore[arg-type]
            totals, commands, ok = [], [], 0
            for i in range(pairs):
                src, dst = (a, b) if i % 2 == 0 else (b, a)
                plan = pair_plan(1)
                targets = TargetSet.from_dict(
                    {
                        "frame": "fr3_link0",
                        "warnings": [],
                        "targets": [
                            {
                                "index": 0,
                                "type": "grasp",
                                "object": "obj0",
                                "position": [src[0], src[1], 0.04],
                                "yaw": 0.0,
                            },
                            {"index": 1, "type": "place", "object": "obj0", "position": [dst[0], dst[1], 0.0]},
                        ],
                    }
                )
                timed.command_s = 0.0
                start = time.perf_counter()
                result = executor.execute(plan, targets)
                totals.append(time.perf_counter() - start)
                commands.append(timed.command_s)
                ok += result.success
        cube = json.loads(state.read_text())["cubes"][0]
    state.unlink(missing_ok=True)
    for i, (t, c) in enumerate(zip(totals, commands)):
        print(
            f"   pair {i}: {t:6.2f} s total, {c:6.2f} s in robot commands, executor overhead "
            f"{(t - c) * 1e3:6.1f} ms ({(t - c) / t * 100:.2f} %)"
        )
    print(
        f"   median: {statistics.median(totals):.2f} s per pair, {statistics.median(commands):.2f} s of motion; "
        f"{ok}/{pairs} pairs succeeded; cube ended at ({cube[0]:.3f}, {cube[1]:.3f}, {cube[2]:.3f}) m"
    )
    print(
        f"   (speeds: travel {cfg.speed(cfg.travel_speed_scale):.2f}, fine {cfg.speed(cfg.fine_speed_scale):.2f} of "
        f"max, acceleration cap {cfg.safety.max_acceleration_scale:.2f}: the shipped Franka config)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="grasp->place pairs on franky-sim")
    parser.add_argument("--repeats", type=int, default=5, help="dry-run repetitions (median)")
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    bench_dry_run(args.repeats)
    bench_franky_sim(args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
