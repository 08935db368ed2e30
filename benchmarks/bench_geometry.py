"""Benchmark: 3D targets of a 26-step plan on a 1280x720 depth image, against librealsense's per-pixel deprojection.

Reference: a Python loop over ``pyrealsense2.rs2_deproject_pixel_to_point`` with the same intrinsics (the way
RealSense samples deproject pixels), over the same pixels. Prints the machine, the timings, the time ratio, the
agreement of the deprojected points, and the targets' errors against the scene's true geometry.

Run: .venv/bin/python benchmarks/bench_geometry.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import numpy as np

from grounded_planner.geometry import CameraModel, compute_targets
from grounded_planner.geometry.synthetic import Box, Cylinder, Scene, add_holes, look_at, to_depth_units
from grounded_planner.plan import GroundedAction, GroundedPlan

WIDTH, HEIGHT = 1280, 720
# D435-like colour intrinsics with real-looking Brown-Conrady distortion (librealsense's brown_conrady is
# the ROS plumb_bob model).
K = [[909.15, 0.0, 639.82], [0.0, 908.48, 358.31], [0.0, 0.0, 1.0]]
D = [-0.055, 0.068, 0.0011, -0.0007, -0.021]


def build_scene(seed: int = 0):
    """13 objects on a 4x4 grid (3 cells left as place spots), seen from 0.95 m at 55 deg elevation."""
    rng = np.random.default_rng(seed)
    camera = CameraModel.from_camera_info(K, D, WIDTH, HEIGHT, "plumb_bob", "camera_color_optical_frame")
    cam2base = look_at([-0.55, 0.0, 0.78], [0.0, 0.0, 0.0], parent_frame="panda_link0")
    cells = [(x, y) for x in (-0.24, -0.08, 0.08, 0.24) for y in (-0.24, -0.08, 0.08, 0.24)]
    objects = []
    for k, (x, y) in enumerate(cells[:13]):
        xy = (x + rng.uniform(-0.01, 0.01), y + rng.uniform(-0.01, 0.01))
        if k % 4 == 3:
            objects.append(Cylinder(f"can{k}", xy, rng.uniform(0.02, 0.035), rng.uniform(0.05, 0.1)))
        else:
            objects.append(
                Box(
                    f"box{k}",
                    xy,
                    (rng.uniform(0.06, 0.1), rng.uniform(0.025, 0.04), rng.uniform(0.03, 0.07)),
                    rng.uniform(-math.pi, math.pi),
                )
            )
    scene = Scene(camera, cam2base, objects)
    clean, labels = scene.render()
    depth_m = to_depth_units(add_holes(clean, rng, 60, 8), rng, 0.001) * 0.001
    free = [np.array([x, y, 0.0]) for x, y in cells[13:]]
    actions = []
    for k, obj in enumerate(objects):
        actions.append(GroundedAction("grasp", obj.name, bbox=scene.bbox_of(k, labels)))
        # Place pixels from the undistorted model are only used as plan input; truth is taken from the result.
        actions.append(GroundedAction("place", obj.name, point=_pixel(camera, cam2base, free[k % len(free)])))
    plan = GroundedPlan("tidy the table", (WIDTH, HEIGHT), actions).validate()
    return scene, depth_m, plan, free


def _pixel(camera: CameraModel, cam2base, point_base: np.ndarray) -> tuple[float, float]:
    p = cam2base.inverse().transform_points(point_base)
    u, v = camera.project(p)[0]
    return float(u) + 0.5, float(v) + 0.5


def plan_pixels(plan: GroundedPlan, depth_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every valid-depth pixel inside the plan's boxes (what the grasp targets deproject)."""
    us, vs = [], []
    for a in plan.actions:
        if a.bbox is None:
            continue
        x1, y1, x2, y2 = a.bbox
        v, u = np.mgrid[math.ceil(y1 - 0.5) : math.floor(y2 - 0.5) + 1, math.ceil(x1 - 0.5) : math.floor(x2 - 0.5) + 1]
        ok = depth_m[v, u] > 0
        us.append(u[ok])
        vs.append(v[ok])
    return np.concatenate(us), np.concatenate(vs)


def realsense_intrinsics(rs, camera: CameraModel):
    intr = rs.intrinsics()
    intr.width, intr.height = camera.width, camera.height
    intr.fx, intr.fy, intr.ppx, intr.ppy = camera.fx, camera.fy, camera.cx, camera.cy
    intr.model = rs.distortion.brown_conrady
    intr.coeffs = [float(c) for c in camera.D]
    return intr


def timed(fn, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions (median reported)")
    args = parser.parse_args()
    import pyrealsense2 as rs

    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, numpy {np.__version__}, pyrealsense2 {rs.__version__}"
    )
    scene, depth_m, plan, free = build_scene()
    camera, cam2base = scene.camera, scene.cam2world
    print(
        f"input: {WIDTH}x{HEIGHT} depth (1 mm units, holes, 1 mm noise), plumb_bob distortion, "
        f"{len(plan.actions)}-step plan ({len(plan.actions) // 2} grasp/place pairs)"
    )

    # 1. The whole 26-step plan -> targets (plane fits, blobs, top surfaces, yaw, ray-plane), cold camera.
    def run_targets():
        return compute_targets(
            plan,
            depth_m,
            CameraModel.from_camera_info(K, D, WIDTH, HEIGHT, "plumb_bob", "camera_color_optical_frame"),
            cam2base,
        )

    t_targets, targets = timed(run_targets, args.repeats)

    # 2. Deprojection of the same box pixels: vectorised CameraModel vs the librealsense per-pixel loop.
    u, v = plan_pixels(plan, depth_m)
    z = depth_m[v, u]
    t_ours, ours = timed(lambda: camera.deproject(u, v, z), args.repeats)
    intr = realsense_intrinsics(rs, camera)

    def rs_loop():
        return np.array(
            [rs.rs2_deproject_pixel_to_point(intr, [float(a), float(b)], float(c)) for a, b, c in zip(u, v, z)]
        )

    t_rs, ref = timed(rs_loop, max(1, args.repeats // 2))
    diff = np.abs(ours - ref)

    # 3. Full frame: every pixel.
    vv, uu = np.mgrid[0:HEIGHT, 0:WIDTH]
    zz = np.where(depth_m > 0, depth_m, 1.0)
    t_full, full = timed(lambda: camera.deproject(uu.ravel(), vv.ravel(), zz.ravel()), max(1, args.repeats // 2))
    t0 = time.perf_counter()
    full_ref = np.array(
        [
            rs.rs2_deproject_pixel_to_point(intr, [float(a), float(b)], float(c))
            for a, b, c in zip(uu.ravel(), vv.ravel(), zz.ravel())
        ]
    )
    t_full_rs = time.perf_counter() - t0
    full_diff = np.abs(full - full_ref)

    print("\n| what | ours (s) | librealsense loop (s) | ratio | max abs diff (m) |")
    print("|---|---|---|---|---|")
    print(
        f"| 26-step plan -> targets vs deprojecting its {u.size} box pixels | {t_targets:.4f} | {t_rs:.3f} | "
        f"{t_rs / t_targets:.1f}x | - |"
    )
    print(
        f"| deproject the {u.size} box pixels | {t_ours:.4f} | {t_rs:.3f} | {t_rs / t_ours:.0f}x | {diff.max():.2e} |"
    )
    print(
        f"| deproject all {WIDTH * HEIGHT} pixels | {t_full:.4f} | {t_full_rs:.3f} | {t_full_rs / t_full:.0f}x | "
        f"{full_diff.max():.2e} |"
    )
    agree = full_diff.max() <= 1e-6 and diff.max() <= 1e-6
    print(f"\nagreement to 1e-6 m: {'yes' if agree else 'NO'} (librealsense computes in float32)")

    grasp_err = [
        np.linalg.norm(targets.for_index(2 * k).position - obj.top_center(0.0)) * 1000
        for k, obj in enumerate(scene.objects)
    ]
    place_err = [abs(targets.for_index(2 * k + 1).position[2]) * 1000 for k in range(len(scene.objects))]
    methods = sorted({t.method for t in targets.targets})
    print(
        f"targets vs true geometry: grasp point error median {np.median(grasp_err):.2f} mm, max "
        f"{max(grasp_err):.2f} mm; place height above the table max {max(place_err):.2f} mm; methods {methods}; "
        f"{len(targets.warnings)} warnings"
    )
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
