"""Simulated workcell throughput on this machine (CPU, headless): physics steps/s, rendered RGB-D frames/s,
and a whole GT pick-and-place through the sim backend. Run: .venv/bin/python benchmarks/bench_sim.py"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import grounded_planner.sim  # noqa: E402  (chooses the headless GL backend before MuJoCo is imported)
from grounded_planner.sim import SimBackend, SimWorkcell  # noqa: E402

SCENARIOS = REPO / "config" / "scenarios"


def rate(fn, n: int) -> float:
    fn()  # warm-up (GL context, caches)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t0)


def main() -> int:
    import mujoco

    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, mujoco {mujoco.__version__}, MUJOCO_GL={os.environ.get('MUJOCO_GL')}")
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
            print(f"{name:12s} physics {steps_per_s:9.0f} steps/s ({steps_per_s * cell.model.opt.timestep:6.1f}x real "
                  f"time; bare mj_step {bare_per_s:9.0f} steps/s) | RGB-D 640x480 {rgbd_fps:5.1f} frames/s, "
                  f"with D435 noise {noisy_fps:5.1f}, segmentation {seg_fps:5.1f}")
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=0) as cell, SimBackend(cell) as arm:
        t0 = time.perf_counter()
        grasp = cell.grasp_point("red_box")
        _, rot = cell.object_pose("red_box")
        yaw = math.atan2(rot[1, 0], rot[0, 0])
        bowl, _ = cell.object_pose("blue_bowl")
        arm.gripper_open()
        for target, y, speed in ((grasp + [0, 0, 0.12], yaw, 0.3), (grasp, yaw, 0.1)):
            arm.move_to_pose(target, y, speed)
        arm.gripper_close()
        for target, speed in ((grasp + [0, 0, 0.15], 0.1), (bowl + [0, 0, 0.15], 0.3), (bowl + [0, 0, 0.06], 0.1)):
            arm.move_to_pose(target, 0.0, speed)
        arm.gripper_open()
        wall = time.perf_counter() - t0
        print(f"pick-and-place (6 motions, executor-like speeds): {cell.time_s:.1f} s simulated in {wall:.2f} s wall "
              f"({cell.time_s / wall:.0f}x real time), success={cell.success()}")
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
