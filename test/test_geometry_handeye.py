"""Hand-eye calibration from synthetic ChArUco images: the board is rendered by OpenCV and warped into a camera
at known poses, so the recovered transform can be compared with the truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

cv2 = pytest.importorskip("cv2")

from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.geometry import CalibrationError, Extrinsics  # noqa: E402
from grounded_planner.geometry.handeye import (  # noqa: E402
    CharucoBoardSpec,
    calibrate_hand_eye,
    detect_board,
    load_samples,
)
from grounded_planner.geometry.synthetic import look_at, realsense_camera, render_board_view  # noqa: E402
from grounded_planner.geometry.transforms import (  # noqa: E402
    invert_transform,
    make_transform,
    rotation_about_axis,
    rotation_angle_deg,
)

SPEC = CharucoBoardSpec(squares_x=7, squares_y=5, square_length_m=0.04, marker_length_m=0.03)
PX_PER_SQUARE = 120


def _views(n: int, seed: int, camera):
    """Board poses in the camera (target2cam): 0.5-0.75 m away, tilted up to 30 deg about random axes."""
    rng = np.random.default_rng(seed)
    half = np.array([SPEC.squares_x * SPEC.square_length_m / 2, SPEC.squares_y * SPEC.square_length_m / 2, 0.0])
    views = []
    for _ in range(n):
        R = rotation_about_axis(rng.normal(size=3), math.radians(rng.uniform(-30, 30)))
        centre = np.array([rng.uniform(-0.1, 0.1), rng.uniform(-0.06, 0.06), rng.uniform(0.5, 0.75)])
        views.append(make_transform(R, centre - R @ half))
    return views


def _samples(mode: str, seed: int = 0, n: int = 12):
    """Images and flange poses of a cell whose true camera mounting is known."""
    camera = realsense_camera(1280, 720)
    board_img = SPEC.render(PX_PER_SQUARE)
    if mode == "eye_to_hand":
        truth = look_at([0.9, 0.3, 0.6], [0.3, 0.0, 0.1], parent_frame="panda_link0").matrix  # cam2base
        fixed = make_transform(rotation_about_axis([1, 0, 0], 0.3), [0.02, -0.01, 0.08])  # target2gripper
    else:
        truth = make_transform(rotation_about_axis([0, 0, 1], 0.4), [0.05, -0.03, 0.06])  # cam2gripper
        fixed = make_transform(rotation_about_axis([1, 0, 0], math.pi), [0.5, 0.1, 0.0])  # target2base
    images, gripper2base = [], []
    for target2cam in _views(n, seed, camera):
        images.append(render_board_view(board_img, SPEC.square_length_m, PX_PER_SQUARE, camera, target2cam))
        if mode == "eye_to_hand":  # cam2base @ target2cam = gripper2base @ target2gripper
            gripper2base.append(truth @ target2cam @ invert_transform(fixed))
        else:  # gripper2base @ cam2gripper @ target2cam = target2base
            gripper2base.append(fixed @ invert_transform(target2cam) @ invert_transform(truth))
    return camera, images, gripper2base, truth


def _error(estimate: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    d = invert_transform(truth) @ estimate
    return float(np.linalg.norm(estimate[:3, 3] - truth[:3, 3])), rotation_angle_deg(d[:3, :3])


@pytest.mark.parametrize("mode, seed", [("eye_to_hand", 0), ("eye_to_hand", 7), ("eye_in_hand", 0), ("eye_in_hand", 7)])
def test_recovers_the_known_mounting_within_2mm_and_0_2deg(mode, seed):
    camera, images, gripper2base, truth = _samples(mode, seed)
    observations = [detect_board(img, camera, SPEC, f"view {i}") for i, img in enumerate(images)]
    assert all(o.n_corners >= 20 and o.reprojection_px < 0.5 for o in observations)
    result = calibrate_hand_eye(
        gripper2base,
        [o.target2cam for o in observations],
        mode=mode,
        base_frame="panda_link0",
        gripper_frame="panda_hand",
        camera=camera,
        observations=observations,
    )
    assert result.method.endswith("+refined")
    t_err, r_err = _error(result.extrinsics.matrix, truth)
    assert t_err < 0.002, f"{mode}: translation off by {t_err * 1000:.2f} mm"
    assert r_err < 0.2, f"{mode}: rotation off by {r_err:.3f} deg"
    parent = "panda_link0" if mode == "eye_to_hand" else "panda_hand"
    assert (result.extrinsics.parent_frame, result.extrinsics.child_frame) == (parent, "camera_color_optical_frame")
    assert len(result.residuals) == 12 and result.rms_translation_m < 0.002
    assert result.extrinsics.metadata["calibration"]["method"] == result.method


def test_joint_refinement_beats_the_closed_form_solution():
    camera, images, gripper2base, truth = _samples("eye_in_hand", seed=24)  # a seed where the closed form is 3 mm off
    observations = [detect_board(img, camera, SPEC) for img in images]
    closed = calibrate_hand_eye(gripper2base, [o.target2cam for o in observations], mode="eye_in_hand")
    refined = calibrate_hand_eye(
        gripper2base, [o.target2cam for o in observations], mode="eye_in_hand", camera=camera, observations=observations
    )
    closed_t, closed_r = _error(closed.extrinsics.matrix, truth)
    refined_t, refined_r = _error(refined.extrinsics.matrix, truth)
    assert closed_t > 0.001
    assert refined_t < closed_t / 3 and refined_r < 0.2


def test_a_wrong_robot_pose_shows_up_in_its_residual():
    camera, images, gripper2base, _ = _samples("eye_to_hand", seed=3)
    observations = [detect_board(img, camera, SPEC) for img in images]
    gripper2base[5] = gripper2base[5] @ make_transform(np.eye(3), [0.02, 0.0, 0.0])  # a 2 cm bad pose file
    result = calibrate_hand_eye(gripper2base, [o.target2cam for o in observations], mode="eye_to_hand")
    worst = max(result.residuals, key=lambda r: r.translation_m)
    assert worst.name == "sample 5" and worst.translation_m > 0.01


def test_bad_calibration_input_gives_typed_errors(tmp_path):
    camera = realsense_camera(1280, 720)
    with pytest.raises(CalibrationError, match="found 0 ChArUco corners") as info:
        detect_board(np.full((720, 1280), 128, np.uint8), camera, SPEC, "blank.png")
    assert info.value.rule == "board_not_found" and "blank.png" in str(info.value)
    with pytest.raises(CalibrationError, match="at least 3 samples"):
        calibrate_hand_eye([np.eye(4)] * 2, [np.eye(4)] * 2)
    with pytest.raises(CalibrationError, match="marker_length_m < square_length_m"):
        CharucoBoardSpec(square_length_m=0.03, marker_length_m=0.04)
    with pytest.raises(CalibrationError, match="mode must be one of"):
        calibrate_hand_eye([np.eye(4)] * 3, [np.eye(4)] * 3, mode="hand_in_eye")
    (tmp_path / "000.png").write_bytes(b"")
    (tmp_path / "001.yaml").write_text("{}")
    with pytest.raises(CalibrationError, match=r"images without pose \['000'\], poses without image \['001'\]"):
        load_samples(tmp_path)


@pytest.mark.parametrize("mode, parent", [("eye_to_hand", "panda_link0"), ("eye_in_hand", "panda_hand")])
def test_calibrate_cli_writes_the_extrinsics_and_prints_residuals(tmp_path, capsys, mode, parent):
    camera, images, gripper2base, truth = _samples(mode, seed=1, n=10)
    samples = tmp_path / "samples"
    samples.mkdir()
    camera.save_yaml(samples / "camera.yaml")
    (samples / "board.yaml").write_text(yaml.safe_dump(SPEC.to_dict()))
    for i, (img, g2b) in enumerate(zip(images, gripper2base)):
        cv2.imwrite(str(samples / f"{i:03d}.png"), img)
        Extrinsics.from_matrix(g2b, "panda_link0", "panda_hand").save(samples / f"{i:03d}.yaml")
    # One view where the board is out of sight: reported and skipped, not silently dropped.
    cv2.imwrite(str(samples / "010.png"), np.full((720, 1280), 90, np.uint8))
    Extrinsics.from_matrix(gripper2base[0], "panda_link0", "panda_hand").save(samples / "010.yaml")
    out = tmp_path / "calibration" / "cell.yaml"
    assert main(["calibrate", "--samples", str(samples), "--out", str(out), "--mode", mode]) == 0
    printed = capsys.readouterr()
    assert "skipped 010.png: found 0 ChArUco corners" in printed.err
    lines = printed.out.splitlines()
    assert sum(line.startswith("00") for line in lines) == 10  # one residual line per used sample
    assert any(line.startswith("overall: 10 samples (1 skipped)") for line in lines)
    result = Extrinsics.load(out)
    assert (result.parent_frame, result.child_frame) == (parent, "camera_color_optical_frame")
    t_err, r_err = _error(result.matrix, truth)
    assert t_err < 0.002 and r_err < 0.2
    assert result.metadata["calibration"]["skipped"] == ["010"]
    assert result.metadata["calibration"]["mode"] == mode
