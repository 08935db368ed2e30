"""`grounded-planner calibrate --from-samples` and `--import`: other tools' samples and results in our extrinsics,
with the camera frame checked against its rotation (camera_link holding the optical frame's rotation is refused).

The easy_handeye2 files are written here in the exact layout its `rosidl_runtime_py.message_to_yaml` writes
(SampleList / HandeyeCalibration messages, easy_handeye2 master b42cae6); the MoveIt Calibration launch file in the
layout of its RViz plugin's "Save camera pose" (moveit_calibration a883ec2). The poses are synthetic with a known
answer: no public repository holds a real saved file of either tool (searched), so none is fetched.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import REPO
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.geometry.transforms import invert_transform, make_transform, matrix_to_quat, rotation_from_vector

pytest.importorskip("cv2")

# The optical frame of a camera 1.05 m in front of a Franka base, 0.62 m up, looking back and down at the table
# (the project's example calibration); its body frame (camera_link: x forward, z up) is the same pose rotated.
CAM_OPTICAL = Extrinsics.load(REPO / "calibration" / "realsense_d435_eye_to_hand.yaml")
OPTICAL_IN_LINK = np.array([[0, 0, 1], [-1, 0, 0], [0, -1, 0]], float)  # REP 103: optical axes in camera_link's


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main", "calibrate", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _pose(T: np.ndarray, as_mapping: bool = False) -> dict:
    t, q = T[:3, 3], matrix_to_quat(T[:3, :3])
    if as_mapping:  # geometry_msgs/Transform as message_to_yaml writes it
        return {"translation": dict(zip("xyz", map(float, t))), "rotation": dict(zip("xyzw", map(float, q)))}
    return {"translation": [float(v) for v in t], "rotation": [float(v) for v in q]}


def _effector_poses(rng, n: int = 12) -> list[np.ndarray]:
    poses = []
    for _ in range(n):
        R = rotation_from_vector(rng.normal(0, 0.5, 3)) @ np.diag([1.0, -1.0, -1.0])  # roughly pointing down
        poses.append(make_transform(R, [0.45, 0.0, 0.35] + rng.uniform(-0.15, 0.15, 3)))
    return poses


def _eye_to_hand_samples(rng, noise_m: float = 0.0):
    """(effector2base, target2cam) with a board fixed on the flange and the camera at CAM_OPTICAL."""
    target2effector = make_transform(rotation_from_vector([0.1, -0.2, 0.3]), [0.02, -0.01, 0.08])
    cam2base = CAM_OPTICAL.matrix
    effector2base = _effector_poses(rng)
    target2cam = []
    for E in effector2base:
        T = invert_transform(cam2base) @ E @ target2effector
        T[:3, 3] += rng.normal(0, noise_m, 3) if noise_m else 0.0
        target2cam.append(T)
    return effector2base, target2cam


def _assert_close(written: Extrinsics, expected: np.ndarray, mm: float, deg: float) -> None:
    assert np.linalg.norm(written.translation - expected[:3, 3]) * 1000 < mm
    R = written.rotation_matrix.T @ expected[:3, :3]
    assert np.degrees(np.arccos(np.clip((np.trace(R) - 1) / 2, -1, 1))) < deg


def test_plain_yaml_samples_solve_the_known_mounting(tmp_path):
    rng = np.random.default_rng(0)
    effector2base, target2cam = _eye_to_hand_samples(rng, noise_m=0.0005)
    samples = {
        "setup": "eye_to_hand",
        "robot_base_frame": "panda_link0",
        "robot_effector_frame": "panda_hand",
        "camera_frame": "camera_color_optical_frame",
        "samples": [{"robot": _pose(E), "target": _pose(T)} for E, T in zip(effector2base, target2cam)],
    }
    (tmp_path / "samples.yaml").write_text(yaml.safe_dump(samples))
    done = _cli("--from-samples", str(tmp_path / "samples.yaml"), "--out", str(tmp_path / "ext.yaml"))
    assert done.returncode == 0, done.stderr
    assert "12 samples (plain YAML, eye_to_hand)" in done.stdout
    written = Extrinsics.load(tmp_path / "ext.yaml")
    assert (written.parent_frame, written.child_frame) == ("panda_link0", "camera_color_optical_frame")
    _assert_close(written, CAM_OPTICAL.matrix, mm=3.0, deg=0.5)


@pytest.mark.parametrize("kind", ["eye_on_base", "eye_in_hand"])
def test_easy_handeye2_saved_samples_solve_the_known_mounting(tmp_path, kind):
    """easy_handeye2's sampler stores the *base in the effector* for eye_on_base (its "trick"), the effector in the
    base for eye_in_hand; both must come out as the camera's true pose."""
    rng = np.random.default_rng(1)
    if kind == "eye_on_base":
        effector2base, target2cam = _eye_to_hand_samples(rng)
        robot = [invert_transform(E) for E in effector2base]
        expected = CAM_OPTICAL.matrix
    else:  # a wrist camera: camera in the flange; the board lies fixed on the table
        cam2effector = make_transform(rotation_from_vector([0.0, 0.0, np.pi / 2]), [0.05, 0.0, 0.04])
        target2base = make_transform(np.eye(3), [0.5, 0.1, 0.0])
        effector2base = _effector_poses(rng)
        robot = effector2base
        target2cam = [invert_transform(cam2effector) @ invert_transform(E) @ target2base for E in effector2base]
        expected = cam2effector
    saved = {
        "parameters": {
            "name": "fr3_d435",
            "calibration_type": kind,
            "robot_base_frame": "fr3_link0",
            "robot_effector_frame": "fr3_hand",
            "tracking_base_frame": "camera_color_optical_frame",
            "tracking_marker_frame": "marker_0",
            "freehand_robot_movement": True,
            "move_group_namespace": "/",
            "move_group": "manipulator",
        },
        "samples": [{"robot": _pose(R, True), "tracking": _pose(T, True)} for R, T in zip(robot, target2cam)],
    }
    (tmp_path / "fr3_d435.samples").write_text(yaml.safe_dump(saved))
    done = _cli("--from-samples", str(tmp_path / "fr3_d435.samples"), "--out", str(tmp_path / "ext.yaml"))
    assert done.returncode == 0, done.stderr
    written = Extrinsics.load(tmp_path / "ext.yaml")
    assert written.parent_frame == ("fr3_link0" if kind == "eye_on_base" else "fr3_hand")
    _assert_close(written, expected, mm=0.5, deg=0.05)


def _calib_file(path, kind: str, camera_frame: str, T: np.ndarray) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "parameters": {
                    "name": "cell",
                    "calibration_type": kind,
                    "robot_base_frame": "fr3_link0",
                    "robot_effector_frame": "fr3_hand",
                    "tracking_base_frame": camera_frame,
                    "tracking_marker_frame": "marker_0",
                    "freehand_robot_movement": False,
                    "move_group_namespace": "/",
                    "move_group": "manipulator",
                },
                "transform": _pose(T, True),
            }
        )
    )


def test_import_an_easy_handeye2_result(tmp_path):
    _calib_file(tmp_path / "cell.calib", "eye_on_base", "camera_color_optical_frame", CAM_OPTICAL.matrix)
    done = _cli("--import", str(tmp_path / "cell.calib"), "--out", str(tmp_path / "ext.yaml"))
    assert done.returncode == 0, done.stderr
    written = Extrinsics.load(tmp_path / "ext.yaml")
    assert (written.parent_frame, written.child_frame) == ("fr3_link0", "camera_color_optical_frame")
    _assert_close(written, CAM_OPTICAL.matrix, mm=1e-3, deg=1e-4)


def test_camera_link_holding_the_optical_rotation_is_refused_and_can_be_relabelled(tmp_path):
    """The classic trap: the optical frame's pose saved under camera_link (easy_handeye2 users pass
    tracking_base_frame:=camera_link while their marker detector reports in the optical frame)."""
    _calib_file(tmp_path / "trap.calib", "eye_on_base", "camera_link", CAM_OPTICAL.matrix)
    done = _cli("--import", str(tmp_path / "trap.calib"), "--out", str(tmp_path / "ext.yaml"))
    assert done.returncode == 2
    assert "'camera_link'" in done.stderr and "optical frame's rotation" in done.stderr, done.stderr
    assert not (tmp_path / "ext.yaml").exists()
    relabelled = _cli(
        "--import",
        str(tmp_path / "trap.calib"),
        "--out",
        str(tmp_path / "ext.yaml"),
        "--camera-frame",
        "camera_color_optical_frame",
    )
    assert relabelled.returncode == 0, relabelled.stderr
    written = Extrinsics.load(tmp_path / "ext.yaml")
    assert written.child_frame == "camera_color_optical_frame"
    assert written.metadata["calibration"]["relabelled_from"] == "camera_link"


def test_a_true_camera_link_result_passes_and_an_optical_name_on_it_is_refused(tmp_path):
    link = CAM_OPTICAL.matrix.copy()
    link[:3, :3] = CAM_OPTICAL.matrix[:3, :3] @ OPTICAL_IN_LINK.T  # the same camera's body frame
    _calib_file(tmp_path / "link.calib", "eye_on_base", "camera_link", link)
    done = _cli("--import", str(tmp_path / "link.calib"))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["child_frame"] == "camera_link"
    assert "a body frame's rotation" in done.stderr
    _calib_file(tmp_path / "wrong.calib", "eye_on_base", "camera_color_optical_frame", link)
    wrong = _cli("--import", str(tmp_path / "wrong.calib"))
    assert wrong.returncode == 2 and "named as an optical frame" in wrong.stderr, wrong.stderr


def test_import_a_moveit_calibration_launch_file(tmp_path):
    T = CAM_OPTICAL.matrix
    t, q = T[:3, 3], matrix_to_quat(T[:3, :3])
    (tmp_path / "camera.launch").write_text(
        "<launch>\n  <!-- The rpy in the comment uses the extrinsic XYZ convention -->\n"
        f'  <!-- xyz="{t[0]} {t[1]} {t[2]}" rpy="0 0 0" -->\n'
        '  <node pkg="tf2_ros" type="static_transform_publisher" name="camera_link_broadcaster"\n'
        f'      args="{t[0]} {t[1]} {t[2]}   {q[0]} {q[1]} {q[2]} {q[3]} panda_link0 camera_color_optical_frame" />\n'
        "</launch>\n"
    )
    done = _cli("--import", str(tmp_path / "camera.launch"), "--out", str(tmp_path / "ext.yaml"))
    assert done.returncode == 0, done.stderr
    assert "MoveIt Calibration eye_to_hand" in done.stderr
    _assert_close(Extrinsics.load(tmp_path / "ext.yaml"), T, mm=1e-3, deg=1e-3)


@pytest.mark.parametrize(
    "text,words",
    [
        (
            "setup: sideways\nrobot_base_frame: a\nrobot_effector_frame: b\ncamera_frame: c\nsamples: []\n",
            "'setup' must be eye_in_hand or eye_to_hand",
        ),
        (
            "setup: eye_to_hand\nrobot_base_frame: a\nrobot_effector_frame: b\ncamera_frame: c\n"
            "samples:\n  - {robot: {translation: [0, 0], rotation: [0, 0, 0, 1]}, target: {translation: [0, 0, 1], rotation: [0, 0, 0, 1]}}\n",
            "sample 0 robot: translation must be 3 numbers",
        ),
        (
            "setup: eye_to_hand\nrobot_base_frame: a\nrobot_effector_frame: b\ncamera_frame: c\n"
            "samples:\n  - {robot: {translation: [0, 0, 0], rotation: [0, 0, 0, 1]}, target: {translation: [0, 0, 1], rotation: [0, 0, 0, 1]}}\n",
            "at least 3 samples",
        ),
    ],
)
def test_bad_samples_are_refused_naming_the_problem(tmp_path, text, words):
    (tmp_path / "s.yaml").write_text(text)
    done = _cli("--from-samples", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "ext.yaml"))
    assert done.returncode != 0 and words in done.stderr, done.stderr
    assert not (tmp_path / "ext.yaml").exists()
