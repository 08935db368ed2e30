"""CameraModel: camera_info YAML loading, deprojection and projection checked against OpenCV and librealsense."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from grounded_planner.geometry import CameraModel, CameraModelError

REPO = Path(__file__).resolve().parents[1]
K = [[615.3, 0.0, 322.1], [0.0, 614.8, 238.7], [0.0, 0.0, 1.0]]
PLUMB_BOB = [-0.055, 0.068, 0.0011, -0.0007, -0.021]
RATIONAL = [0.42, -0.31, 0.0009, -0.0004, 0.05, 0.78, -0.22, 0.11]


def _pixels(camera: CameraModel, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.uniform(0, camera.width - 1, n), rng.uniform(0, camera.height - 1, n)


def test_loads_the_ros_camera_calibration_yaml():
    camera = CameraModel.from_camera_info_yaml(REPO / "calibration" / "realsense_d435_color_1280x720.yaml")
    assert (camera.width, camera.height) == (1280, 720)
    assert camera.fx == pytest.approx(909.15) and camera.cy == pytest.approx(358.31)
    assert camera.distortion_model == "plumb_bob" and camera.D.shape == (5,)
    assert camera.frame_id == "camera_color_optical_frame"


def test_loads_a_camera_info_message_dump_and_round_trips_its_own_yaml(tmp_path):
    # What `ros2 topic echo --once .../camera_info > cam.yaml` writes (lower-case k, d, header.frame_id).
    dump = {
        "header": {"stamp": {"sec": 1, "nanosec": 0}, "frame_id": "cam_optical"},
        "height": 480,
        "width": 640,
        "distortion_model": "rational_polynomial",
        "d": RATIONAL,
        "k": sum(K, []),
        "r": [1, 0, 0, 0, 1, 0, 0, 0, 1],
        "p": [0] * 12,
    }
    (tmp_path / "msg.yaml").write_text(yaml.safe_dump(dump))
    camera = CameraModel.from_camera_info_yaml(tmp_path / "msg.yaml")
    assert camera.frame_id == "cam_optical" and camera.distortion_model == "rational_polynomial"
    np.testing.assert_allclose(camera.D, RATIONAL)
    camera.save_yaml(tmp_path / "calib.yaml")
    again = CameraModel.from_camera_info_yaml(tmp_path / "calib.yaml")
    np.testing.assert_allclose(again.K, camera.K)
    np.testing.assert_allclose(again.D, camera.D)
    assert again.frame_id == "cam_optical"


@pytest.mark.parametrize("model, D", [("plumb_bob", PLUMB_BOB), ("rational_polynomial", RATIONAL)])
def test_undistortion_matches_opencv(model, D):
    cv2 = pytest.importorskip("cv2")
    camera = CameraModel.from_camera_info(K, D, 640, 480, model)
    u, v = _pixels(camera)
    x, y = camera.normalized(u, v)
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 500, 1e-15)
    ref = cv2.undistortPointsIter(np.stack([u, v], 1).reshape(-1, 1, 2), camera.K, camera.D, None, None, criteria)
    np.testing.assert_allclose(np.stack([x, y], 1), ref.reshape(-1, 2), atol=1e-9)


@pytest.mark.parametrize("model, D", [("plumb_bob", PLUMB_BOB), ("rational_polynomial", RATIONAL)])
def test_deproject_then_project_returns_the_pixel_and_projection_matches_opencv(model, D):
    cv2 = pytest.importorskip("cv2")
    camera = CameraModel.from_camera_info(K, D, 640, 480, model)
    u, v = _pixels(camera)
    depth_m = np.random.default_rng(1).uniform(0.2, 3.0, u.size)
    points = camera.deproject(u, v, depth_m)
    assert points.shape == (u.size, 3)
    np.testing.assert_allclose(points[:, 2], depth_m)
    np.testing.assert_allclose(camera.project(points), np.stack([u, v], 1), atol=1e-7)
    ref, _ = cv2.projectPoints(points, np.zeros(3), np.zeros(3), camera.K, camera.D)
    np.testing.assert_allclose(camera.project(points), ref.reshape(-1, 2), atol=1e-7)


def test_deprojection_agrees_with_librealsense():
    rs = pytest.importorskip("pyrealsense2")
    camera = CameraModel.from_camera_info(K, [], 640, 480)
    intr = rs.intrinsics()
    intr.width, intr.height = 640, 480
    intr.fx, intr.fy, intr.ppx, intr.ppy = camera.fx, camera.fy, camera.cx, camera.cy
    intr.model = rs.distortion.none
    intr.coeffs = [0.0] * 5
    u, v = _pixels(camera, 500)
    depth_m = np.random.default_rng(2).uniform(0.2, 3.0, u.size)
    ref = np.array(
        [rs.rs2_deproject_pixel_to_point(intr, [float(a), float(b)], float(d)) for a, b, d in zip(u, v, depth_m)]
    )
    np.testing.assert_allclose(camera.deproject(u, v, depth_m), ref, atol=1e-6)


def test_whole_image_deprojection_matches_opencv_per_pixel():
    # 320x240 = 76800 pixels: more than one undistortion block.
    cv2 = pytest.importorskip("cv2")
    camera = CameraModel.from_camera_info(K, PLUMB_BOB, 320, 240)
    depth_m = np.random.default_rng(3).uniform(0.3, 2.0, (240, 320))
    cloud = camera.deproject_image(depth_m)
    v, u = np.mgrid[0:240, 0:320]
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 500, 1e-15)
    ref = cv2.undistortPointsIter(
        np.stack([u.ravel(), v.ravel()], 1).astype(float).reshape(-1, 1, 2), camera.K, camera.D, None, None, criteria
    ).reshape(240, 320, 2)
    np.testing.assert_allclose(cloud[..., :2], ref * depth_m[..., None], atol=1e-9)
    np.testing.assert_allclose(cloud[..., 2], depth_m)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("camera_matrix"), "no 'camera_matrix'"),
        (lambda d: d.pop("image_width"), "missing field 'image_width'"),
        (lambda d: d["camera_matrix"].update(data=[1, 2, 3]), "3x3 but has 3 values"),
        (lambda d: d.update(distortion_model="fisheye"), "distortion_model 'fisheye' is not supported"),
        (lambda d: d["camera_matrix"]["data"].__setitem__(0, -5.0), "focal lengths fx, fy must be positive"),
        (
            lambda d: d["distortion_coefficients"].update(rows=1, cols=6, data=[0.1] * 6),
            "at most 5 distortion coefficients",
        ),
        (lambda d: d["camera_matrix"]["data"].__setitem__(2, float("nan")), "must be finite"),
    ],
)
def test_bad_camera_files_give_a_typed_error_naming_the_file_and_field(tmp_path, mutate, message):
    data = yaml.safe_load((REPO / "calibration" / "realsense_d435_color_1280x720.yaml").read_text())
    mutate(data)
    path = tmp_path / "cam.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CameraModelError, match=message) as info:
        CameraModel.from_camera_info_yaml(path)
    assert str(path) in str(info.value)


def test_unreadable_camera_files_give_a_typed_error(tmp_path):
    with pytest.raises(CameraModelError, match="cannot read camera info file"):
        CameraModel.from_camera_info_yaml(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("camera_matrix: [unclosed")
    with pytest.raises(CameraModelError, match="not valid YAML"):
        CameraModel.from_camera_info_yaml(tmp_path / "bad.yaml")
