"""msgs.camera_info and the camera models: plumb_bob, rational_polynomial, equidistant, librealsense's names."""

import numpy as np
import pytest

from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.errors import CameraModelError
from grounded_planner.msgs.camera_info import (
    UnsupportedDistortionError,
    camera_model_from_msg,
    camera_model_to_msg,
    raw_calibration,
    same_calibration,
)

K = np.array([[286.0, 0.0, 421.0], [0.0, 286.5, 401.0], [0.0, 0.0, 1.0]])
FISHEYE_D = [-0.0066, 0.0424, -0.0399, 0.0071]  # a T265-like Kannala-Brandt lens


def _info(model="plumb_bob", d=(), k=K, size=(848, 800)):
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    header = store.types["std_msgs/msg/Header"](
        stamp=store.types["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id="camera_fisheye1_optical_frame"
    )
    camera = CameraModel(size[0], size[1], np.asarray(k), distortion_model="plumb_bob")
    msg = camera_model_to_msg(camera, store.types["sensor_msgs/msg/CameraInfo"], header)
    msg.distortion_model = model
    msg.d = np.asarray(d, dtype=np.float64)
    return msg


def test_equidistant_matches_opencv_fisheye_both_ways():
    cv2 = pytest.importorskip("cv2")
    camera = camera_model_from_msg(_info("equidistant", FISHEYE_D))
    rng = np.random.default_rng(0)
    points = np.c_[rng.uniform(-1.0, 1.0, (200, 2)), rng.uniform(0.4, 2.0, (200, 1))]
    uv = camera.project(points)
    uv_cv, _ = cv2.fisheye.projectPoints(points.reshape(-1, 1, 3), np.zeros(3), np.zeros(3), K, np.array(FISHEYE_D))
    np.testing.assert_allclose(uv, uv_cv.reshape(-1, 2), atol=1e-6)
    np.testing.assert_allclose(camera.deproject(uv[:, 0], uv[:, 1], points[:, 2]), points, atol=1e-9)


def test_equidistant_pixels_beyond_90_degrees_have_no_ray():
    camera = camera_model_from_msg(_info("equidistant", FISHEYE_D))
    rays = camera.ray_map()
    assert np.isnan(rays[0, 0]).all()  # the corner of a 163-degree lens looks behind the pinhole plane
    assert np.isfinite(rays[400, 421]).all() and np.allclose(rays[401, 421], 0.0, atol=1e-9)


@pytest.mark.parametrize(
    "name, model, n",
    [
        ("Brown Conrady", "plumb_bob", 5),
        ("Inverse Brown Conrady", "plumb_bob", 5),
        ("Kannala Brandt4", "equidistant", 4),
        ("None", "plumb_bob", 5),
        ("", "plumb_bob", 5),
        ("rational_polynomial", "rational_polynomial", 8),
    ],
)
def test_librealsense_and_ros_names_map_to_ros_models(name, model, n):
    d = [0.1, -0.05, 0.001, 0.002, 0.01]
    camera = camera_model_from_msg(_info(name, d))
    assert camera.distortion_model == model and camera.D.size == n
    if name == "None":  # librealsense writes coefficients even for an undistorted stream: they mean nothing
        assert not camera.has_distortion
    if name == "Kannala Brandt4":  # realsense-ros keeps the first four (k1..k4)
        np.testing.assert_allclose(camera.D, d[:4])


def test_unknown_model_is_a_typed_error_naming_it():
    with pytest.raises(UnsupportedDistortionError, match="'F-Theta' is not supported.*equidistant") as info:
        camera_model_from_msg(_info("F-Theta", [0.9]))
    assert isinstance(info.value, CameraModelError) and info.value.rule == "unsupported_distortion_model"
    raw = raw_calibration(_info("F-Theta", [0.9]))  # what a logger keeps anyway
    assert raw.distortion_model == "F-Theta" and raw.D.tolist() == [0.9] and raw.width == 848


def test_same_calibration_names_the_first_difference():
    colour = _info("plumb_bob", [0.0] * 5)
    assert same_calibration(colour, _info("Brown Conrady", [0.0] * 5)) is None
    other_k = K.copy()
    other_k[0, 0] = 390.0
    assert "intrinsics differ" in same_calibration(colour, _info("plumb_bob", [0.0] * 5, k=other_k))
    assert "sizes differ" in same_calibration(colour, _info("plumb_bob", [0.0] * 5, size=(640, 480)))


def test_a_calibration_yaml_with_librealsense_names_loads_too():
    data = {
        "width": 848,
        "height": 800,
        "k": K.ravel().tolist(),
        "d": FISHEYE_D + [0.0],
        "distortion_model": "Kannala Brandt4",
        "header": {"frame_id": "camera_fisheye1_optical_frame"},
    }
    camera = CameraModel.from_dict(data)
    assert camera.distortion_model == "equidistant" and camera.D.tolist() == FISHEYE_D
