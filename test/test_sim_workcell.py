"""The simulated workcell in MuJoCo: IK against the model's own kinematics, the RGB-D camera against its
calibration, and the `sim` backend's grasp/place/drawer physics driven directly (the executor tests are in
test_sim_execution.py)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import grounded_planner.sim  # noqa: E402,F401  (picks the headless GL backend before MuJoCo is first imported)

pytest.importorskip("mujoco")

from grounded_planner.execution.backend import MotionStoppedError, NotConnectedError, UnreachableError  # noqa: E402
from grounded_planner.geometry.camera import CameraModel  # noqa: E402
from grounded_planner.geometry.extrinsics import Extrinsics  # noqa: E402
from grounded_planner.sim import SimBackend, SimWorkcell  # noqa: E402
from grounded_planner.sim.backend import SimBackendConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BOX_IN_BOWL = REPO / "config" / "scenarios" / "box_in_bowl.yaml"
OPEN_DRAWER = REPO / "config" / "scenarios" / "open_drawer.yaml"


@pytest.fixture(scope="module")
def workcell():
    with SimWorkcell.from_scenario(BOX_IN_BOWL, seed=None) as cell:
        yield cell


def test_ik_matches_mujoco_forward_kinematics(workcell):
    import mujoco

    rng = np.random.default_rng(0)
    data = mujoco.MjData(workcell.model)
    for _ in range(50):
        r, azimuth = rng.uniform(0.2, 0.75), rng.uniform(-1.2, 1.2)  # the table in front of the arm
        target = np.array([r * math.cos(azimuth), r * math.sin(azimuth), rng.uniform(0.0, 0.35)])
        yaw = rng.uniform(-math.pi, math.pi)
        q = workcell.solve_ik(target, yaw)
        data.qpos[workcell._arm_qadr] = q
        mujoco.mj_kinematics(workcell.model, data)
        tcp = data.site_xpos[workcell._tcp_site]
        R = data.site_xmat[workcell._tcp_site].reshape(3, 3)
        np.testing.assert_allclose(tcp, target, atol=1e-6)
        np.testing.assert_allclose(R[:, 2], [0, 0, -1], atol=1e-6)  # tool points straight down
        closing = R[:, 1]  # yaw 0 = fingers close along base y; the gripper is symmetric (yaw ~ yaw + pi)
        assert abs(abs(closing @ [-math.sin(yaw), math.cos(yaw), 0]) - 1) < 1e-6


def test_ik_refuses_out_of_reach(workcell):
    from grounded_planner.sim import IKError

    with pytest.raises(IKError, match="out of the arm's reach"):
        workcell.solve_ik([1.5, 0.0, 0.1], 0.0)


def test_camera_depth_matches_calibration(workcell):
    rgb, depth_m = workcell.render(noise=False)
    cam = workcell.scenario.camera
    assert rgb.shape == (cam.height, cam.width, 3) and rgb.dtype == np.uint8
    assert depth_m.shape == (cam.height, cam.width) and depth_m.dtype == np.float32
    points = workcell.extrinsics.transform_points(workcell.camera_model.deproject_image(depth_m).reshape(-1, 3))
    points = points.reshape(depth_m.shape + (3,))
    masks = workcell.object_masks()
    box = masks["red_box"]
    table = (~box) & (~masks["blue_bowl"]) & (np.abs(points[..., 0] - 0.45) < 0.3) & (np.abs(points[..., 1]) < 0.3)
    # table pixels back-project onto z = 0, the box's top onto its height, within a millimetre
    assert np.abs(np.median(points[..., 2][table])) < 1e-3
    assert abs(np.percentile(points[..., 2][box], 95) - 0.045) < 1e-3
    lo, hi = workcell.body_aabb("obj:red_box")
    top = box & (points[..., 2] > 0.0445)
    np.testing.assert_allclose(np.median(points[top][:, :2], axis=0), 0.5 * (lo + hi)[:2], atol=0.003)


def test_projection_agrees_with_segmentation(workcell):
    lo, hi = workcell.body_aabb("obj:red_box")
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    uv = workcell.project(corners)
    cols = np.nonzero(workcell.object_masks()["red_box"].any(axis=0))[0]
    rows = np.nonzero(workcell.object_masks()["red_box"].any(axis=1))[0]
    # pixel centres (integers) covered by the projected box: within one pixel of its edges (rasterisation)
    for lo_px, hi_px, proj in ((cols[0], cols[-1], uv[:, 0]), (rows[0], rows[-1], uv[:, 1])):
        assert proj.min() - 0.05 <= lo_px <= proj.min() + 1.0
        assert proj.max() - 1.05 <= hi_px <= proj.max() + 0.05


def test_calibration_files_round_trip(workcell, tmp_path):
    ext_path, info_path = workcell.write_calibration(tmp_path)
    ext = Extrinsics.load(ext_path)
    assert (ext.parent_frame, ext.child_frame) == ("base_link", "camera_color_optical_frame")
    np.testing.assert_allclose(ext.matrix, workcell.cam2base, atol=1e-9)
    info = CameraModel.from_camera_info_yaml(info_path)
    np.testing.assert_allclose(info.K, workcell.camera_model.K)
    assert (info.width, info.height) == (640, 480)
    assert abs(info.K[0, 0] - 615.0) < 1e-9


def test_depth_noise_holes_and_millimetres(workcell):
    clean = workcell.render(noise=False)[1]
    workcell.scenario.camera.depth_hole_fraction = 0.1
    try:
        noisy = workcell.render(noise=True)[1]
        depth_mm = workcell.render_depth_mm(noise=True)
    finally:
        workcell.scenario.camera.depth_hole_fraction = 0.0
    valid = (clean > 0) & (noisy > 0)
    holes = ((clean > 0) & (noisy == 0)).mean() / (clean > 0).mean()
    assert 0.08 < holes < 0.12
    err = (noisy - clean)[valid]
    # D435-like: zero-mean, a few millimetres at ~0.9 m, quantised to 1 mm
    assert abs(np.mean(err)) < 5e-4 and 5e-4 < np.std(err) < 5e-3
    np.testing.assert_allclose(noisy[valid] * 1000, np.round(noisy[valid] * 1000), atol=1e-3)
    assert depth_mm.dtype == np.uint16 and 700 < np.median(depth_mm[depth_mm > 0]) < 1300


def _top_down_pick_place(backend: SimBackend, grasp_xyz, yaw, place_xyz) -> float:
    backend.gripper_open()
    backend.move_to_pose(grasp_xyz + np.array([0, 0, 0.12]), yaw, 0.5)
    backend.move_to_pose(grasp_xyz, yaw, 0.2)
    width = backend.gripper_close(20.0)
    backend.move_to_pose(grasp_xyz + np.array([0, 0, 0.15]), yaw, 0.5)
    backend.move_to_pose(place_xyz + np.array([0, 0, 0.15]), 0.0, 0.5)
    backend.move_to_pose(place_xyz + np.array([0, 0, 0.06]), 0.0, 0.2)
    backend.gripper_open()
    backend.move_to_pose(place_xyz + np.array([0, 0, 0.2]), 0.0, 0.5)
    return width


def test_backend_puts_box_in_bowl_from_true_poses():
    with SimWorkcell.from_scenario(BOX_IN_BOWL, seed=3) as cell, SimBackend(cell) as backend:
        assert not cell.success()
        pos, rot = cell.object_pose("red_box")
        yaw = math.atan2(rot[1, 0], rot[0, 0])
        bowl, _ = cell.object_pose("blue_bowl")
        width = _top_down_pick_place(backend, cell.grasp_point("red_box"), yaw, bowl)
        assert abs(width - 0.045) < 0.003  # closed on the 45 mm box
        cell.step(300)
        assert cell.success(), cell.evaluate()
        assert cell.held_body is None


def test_reset_scene_puts_a_solved_scene_and_a_held_object_back_where_they_started():
    with SimWorkcell.from_scenario(BOX_IN_BOWL, seed=3) as cell, SimBackend(cell) as backend:
        box0, q0, width0 = cell.object_pose("red_box")[0], cell.arm_q(), cell.gripper_width()
        pos, rot = cell.object_pose("red_box")
        bowl, _ = cell.object_pose("blue_bowl")
        _top_down_pick_place(backend, cell.grasp_point("red_box"), math.atan2(rot[1, 0], rot[0, 0]), bowl)
        cell.step(300)
        assert cell.success()
        t_solved = cell.time_s
        backend.reset_scene()
        assert not cell.success(), cell.evaluate()
        np.testing.assert_allclose(cell.object_pose("red_box")[0], box0, atol=1e-6)
        np.testing.assert_allclose(cell.arm_q(), q0, atol=1e-9)
        assert cell.time_s >= t_solved  # the clock goes on: stamps never run backwards
        yaw = math.atan2(rot[1, 0], rot[0, 0])

        def grasp_and_lift():
            backend.gripper_open()
            backend.move_to_pose(cell.grasp_point("red_box") + [0, 0, 0.12], yaw, 0.5)
            backend.move_to_pose(cell.grasp_point("red_box"), yaw, 0.2)
            backend.gripper_close(20.0)
            backend.move_to_pose(cell.grasp_point("red_box") + [0, 0, 0.15], yaw, 0.5)
            assert cell.held_body == "obj:red_box" and cell.object_pose("red_box")[0][2] > box0[2] + 0.1

        # a box held in the hand is let go and put back on the table where it began; it stays there
        grasp_and_lift()
        backend.reset_scene()
        cell.step(500)
        assert cell.held_body is None and abs(cell.gripper_width() - width0) < 1e-3
        np.testing.assert_allclose(cell.object_pose("red_box")[0], box0, atol=1e-3)
        np.testing.assert_allclose(cell.arm_q(), q0, atol=1e-3)
        # a slip under way (its fingers still to close again) does not close the gripper of the reset scene
        grasp_and_lift()
        assert cell.slip() == "obj:red_box"
        backend.reset_scene()
        backend.move_to_pose(cell.grasp_point("red_box") + [0, 0, 0.12], yaw, 0.5)  # control ticks run
        assert abs(cell.gripper_width() - width0) < 1e-3, cell.gripper_width()


def test_closing_on_empty_space_holds_nothing():
    with SimWorkcell.from_scenario(BOX_IN_BOWL, seed=0) as cell, SimBackend(cell) as backend:
        before, _ = cell.object_pose("red_box")
        backend.gripper_open()
        backend.move_to_pose([0.55, 0.3, 0.03], 0.0, 0.5)
        width = backend.gripper_close()
        assert width < 0.002 and cell.held_body is None
        backend.move_to_pose([0.55, 0.3, 0.2], 0.0, 0.5)
        np.testing.assert_allclose(cell.object_pose("red_box")[0], before, atol=1e-3)


def test_backend_opens_the_drawer():
    with SimWorkcell.from_scenario(OPEN_DRAWER, seed=0) as cell, SimBackend(cell) as backend:
        assert not cell.success()
        handle = cell.grasp_point("cabinet")
        _, rot = cell.object_pose("cabinet")
        pull = -rot[:, 0]  # the drawer slides out along the cabinet's -x
        yaw = math.atan2(pull[1], pull[0]) + math.pi / 2  # fingers close across the bar
        backend.gripper_open(0.04)
        backend.move_to_pose(handle + [0, 0, 0.1], yaw, 0.5)
        backend.move_to_pose(handle, yaw, 0.2)
        assert backend.gripper_close() > 0.01
        backend.move_to_pose(handle + 0.14 * pull, yaw, 0.2)
        backend.gripper_open(0.04)
        backend.move_to_pose(handle + 0.14 * pull + [0, 0, 0.12], yaw, 0.5)
        assert abs(cell.drawer_opening_m("cabinet") - 0.14) < 0.01
        assert cell.success(), cell.evaluate()


def test_backend_closes_an_open_drawer():
    with (
        SimWorkcell.from_scenario(REPO / "config" / "scenarios" / "close_drawer.yaml", seed=0) as cell,
        SimBackend(cell) as backend,
    ):
        assert abs(cell.drawer_opening_m("cabinet") - 0.12) < 0.005 and not cell.success()
        handle = cell.grasp_point("cabinet")  # follows the drawer: 12 cm out
        _, rot = cell.object_pose("cabinet")
        push = rot[:, 0]
        yaw = math.atan2(push[1], push[0]) + math.pi / 2
        backend.gripper_open(0.04)
        backend.move_to_pose(handle + [0, 0, 0.1], yaw, 0.5)
        backend.move_to_pose(handle, yaw, 0.2)
        assert backend.gripper_close() > 0.01
        backend.move_to_pose(handle + 0.12 * push, yaw, 0.2)
        backend.gripper_open(0.04)
        backend.move_to_pose(handle + 0.12 * push + [0, 0, 0.12], yaw, 0.5)  # rise clear of the handle first
        assert cell.drawer_opening_m("cabinet") < 0.005
        assert cell.success(), cell.evaluate()


def test_unreachable_pose_moves_nothing():
    with SimWorkcell.from_scenario(BOX_IN_BOWL, seed=0) as cell, SimBackend(cell) as backend:
        q0 = cell.arm_q()
        with pytest.raises(UnreachableError, match="out of the arm's reach"):
            backend.move_to_pose([1.4, 0.0, 0.1], 0.0, 0.5)
        np.testing.assert_allclose(cell.arm_q(), q0)
        assert backend.check_reachable([1.4, 0.0, 0.1], 0.0) is not None
        assert backend.check_reachable([0.4, 0.0, 0.1], 0.0) is None


def test_stop_from_another_thread_ends_the_motion():
    with (
        SimWorkcell.from_scenario(BOX_IN_BOWL, seed=0) as cell,
        SimBackend(cell, SimBackendConfig(realtime_factor=1.0)) as backend,
    ):
        errors: list[Exception] = []

        def move():
            try:
                backend.move_to_pose([0.6, -0.3, 0.1], 0.0, 0.1)  # ~6 s at real-time pace
            except Exception as exc:  # collected for the assertion below
                errors.append(exc)

        thread = threading.Thread(target=move)
        thread.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        backend.stop()
        thread.join(timeout=2)
        assert time.monotonic() - t0 < backend.stop_timeout_s
        assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], MotionStoppedError)
        # the arm stands still where it stopped, short of the goal
        pos, _ = cell.tcp_pose()
        q = cell.arm_q()
        cell.step(100)
        np.testing.assert_allclose(cell.arm_q(), q, atol=2e-3)
        assert np.linalg.norm(pos - [0.6, -0.3, 0.1]) > 0.05
        # and it takes the next command
        cell.realtime_factor = 0.0
        backend.move_to_pose([0.4, 0.0, 0.2], 0.0, 1.0)
        assert np.linalg.norm(cell.tcp_pose()[0] - [0.4, 0.0, 0.2]) < 0.003


def test_commands_need_a_connection():
    backend = SimBackend(config=SimBackendConfig(scenario=str(BOX_IN_BOWL)))
    with pytest.raises(NotConnectedError):
        backend.gripper_width()
    with backend:
        assert backend.is_connected and backend.gripper_width() > 0.07
    assert not backend.is_connected


def test_camera_thread_renders_while_the_arm_moves():
    # a ROS camera node renders from its own thread while the executor's thread steps the physics
    # paced at 3x real time so the motions last long enough for several frames
    with (
        SimWorkcell.from_scenario(BOX_IN_BOWL, seed=0) as cell,
        SimBackend(cell, SimBackendConfig(realtime_factor=3.0)) as backend,
    ):
        frames: list[np.ndarray] = []
        errors: list[Exception] = []
        moving = threading.Event()

        def camera():
            try:
                while moving.is_set() or not frames:
                    frames.append(cell.render()[0])
            except Exception as exc:  # collected for the assertion below
                errors.append(exc)

        moving.set()
        thread = threading.Thread(target=camera)
        thread.start()
        deadline = time.monotonic() + 60
        while not frames and time.monotonic() < deadline:  # the first frame also creates the GL context
            time.sleep(0.01)
        try:
            for target in ([0.4, 0.2, 0.3], [0.5, -0.2, 0.1], [0.3, 0.0, 0.4]):
                backend.move_to_pose(target, 0.0, 0.3)
        finally:
            moving.clear()
            thread.join(timeout=10)
        assert not errors and len(frames) >= 2  # the first one before, at least one during the motions
        assert np.linalg.norm(cell.tcp_pose()[0] - [0.3, 0.0, 0.4]) < 0.003
        # the arm moved between the first and the last frame the camera thread saw
        assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 1.0


def test_renders_even_when_mujoco_was_imported_first():
    # another layer (or a test) may import MuJoCo before grounded_planner.sim sets MUJOCO_GL: rendering must
    # still come up headless. Run in a fresh interpreter, since this process has MuJoCo loaded already.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    code = (
        "import mujoco\n"
        "from grounded_planner.sim.workcell import SimWorkcell\n"
        f"cell = SimWorkcell.from_scenario({str(BOX_IN_BOWL)!r})\n"
        "rgb, depth = cell.render()\n"
        "cell.close()\n"
        "print(rgb.shape, float(depth.max()) > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(480, 640, 3) True" in out.stdout
