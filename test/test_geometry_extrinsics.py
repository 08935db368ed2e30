"""Extrinsics files: loading, validation with typed errors, and the transform algebra."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from grounded_planner.geometry import Extrinsics, ExtrinsicsError
from grounded_planner.geometry.transforms import make_transform, matrix_to_quat, quat_to_matrix, rotation_about_axis

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "calibration" / "realsense_d435_eye_to_hand.yaml"


def test_example_file_points_the_camera_at_the_table_centre():
    cam2base = Extrinsics.load(EXAMPLE)
    assert (cam2base.parent_frame, cam2base.child_frame) == ("panda_link0", "camera_color_optical_frame")
    assert cam2base.metadata["calibration"]["mode"] == "example"
    # The optical axis (z) passes through the table centre (0.45, 0, 0) named in the file's comment.
    origin, z_axis = cam2base.translation, cam2base.rotation_matrix[:, 2]
    t = -origin[2] / z_axis[2]
    np.testing.assert_allclose(origin + t * z_axis, [0.45, 0.0, 0.0], atol=1e-5)
    # Image "down" (optical y) points downwards in the base frame: the camera is upright, not rolled over.
    assert cam2base.rotation_matrix[2, 1] < 0


def test_transform_algebra():
    rng = np.random.default_rng(0)
    R = rotation_about_axis(rng.normal(size=3), 2.0)
    a = Extrinsics.from_matrix(make_transform(R, [0.1, 0.2, 0.3]), "base", "cam")
    points = rng.normal(size=(20, 3))
    np.testing.assert_allclose(a.transform_points(points), (a.matrix @ np.c_[points, np.ones(20)].T).T[:, :3])
    np.testing.assert_allclose(a.inverse().transform_points(a.transform_points(points)), points, atol=1e-12)
    hand2base = Extrinsics("base", "hand", [0.4, 0.0, 0.5], [1.0, 0.0, 0.0, 0.0])
    cam2hand = Extrinsics("hand", "cam", [0.0, 0.05, 0.1], [0.0, 0.0, 0.0, 1.0])
    cam2base = hand2base.compose(cam2hand)
    assert (cam2base.parent_frame, cam2base.child_frame) == ("base", "cam")
    np.testing.assert_allclose(cam2base.translation, [0.4, -0.05, 0.4], atol=1e-12)
    with pytest.raises(ExtrinsicsError, match="frames 'cam' and 'hand' differ"):
        cam2hand.compose(cam2hand)


@pytest.mark.parametrize("angle", [0.0, 0.3, 2.5, math.pi - 1e-9, math.pi])
def test_quaternion_round_trip_including_half_turns(angle):
    rng = np.random.default_rng(1)
    for _ in range(20):
        R = rotation_about_axis(rng.normal(size=3), angle)
        q = matrix_to_quat(R)
        assert abs(np.linalg.norm(q) - 1) < 1e-12 and q[3] >= 0
        np.testing.assert_allclose(quat_to_matrix(q), R, atol=1e-9)


def test_save_and_load_keep_values_and_metadata(tmp_path):
    e = Extrinsics(
        "panda_link0",
        "camera_color_optical_frame",
        [1, 2, 3],
        [0, 0, math.sin(0.2), math.cos(0.2)],
        {"calibration": {"method": "park", "rms_translation_mm": 0.4}},
    )
    e.save(tmp_path / "cell.yaml", header="made by a test")
    text = (tmp_path / "cell.yaml").read_text()
    assert text.startswith("# made by a test\n")
    back = Extrinsics.load(tmp_path / "cell.yaml")
    np.testing.assert_allclose(back.matrix, e.matrix)
    assert back.metadata == e.metadata


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "parent_frame: base\nchild_frame: cam\ntranslation: [0, 0, 1]\nrotation: [0, 0, 0.5, 0.5]\n",
            "must be a unit quaternion",
        ),
        ("parent_frame: base\nchild_frame: cam\ntranslation: [0, .nan, 1]\nrotation: [0, 0, 0, 1]\n", "must be finite"),
        ("parent_frame: base\nchild_frame: cam\ntranslation: [0, 1]\nrotation: [0, 0, 0, 1]\n", "must have 3 numbers"),
        ("parent_frame: base\nchild_frame: cam\ntranslation: [0, 0, 1]\nrotation: [0, 0, 1]\n", "must have 4 numbers"),
        ("parent_frame: base\nchild_frame: cam\ntranslation: [0, 0, 1]\nrotation: [a, b, c, d]\n", "must be 4 numbers"),
        ("parent_frame: base\ntranslation: [0, 0, 1]\nrotation: [0, 0, 0, 1]\n", "missing field\\(s\\) child_frame"),
        (
            "parent_frame: base\nchild_frame: ''\ntranslation: [0, 0, 1]\nrotation: [0, 0, 0, 1]\n",
            "non-empty frame name",
        ),
        ("parent_frame: cam\nchild_frame: cam\ntranslation: [0, 0, 1]\nrotation: [0, 0, 0, 1]\n", "are both 'cam'"),
        ("- just\n- a list\n", "expected a YAML mapping"),
    ],
)
def test_bad_extrinsics_give_a_typed_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ExtrinsicsError, match=message) as info:
        Extrinsics.load(path)
    assert str(path) in str(info.value)


def test_rounding_in_a_quaternion_is_renormalised_not_refused():
    e = Extrinsics("base", "cam", [0, 0, 0], [0.0, 0.0, 0.7071, 0.7071])
    assert np.linalg.norm(e.rotation) == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(ExtrinsicsError, match="4x4"):
        Extrinsics.from_matrix(np.eye(3), "base", "cam")
    with pytest.raises(ExtrinsicsError, match="proper rotation"):
        Extrinsics.from_matrix(np.diag([1.0, 1.0, -1.0, 1.0]), "base", "cam")
