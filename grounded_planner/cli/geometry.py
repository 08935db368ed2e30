"""`grounded-planner backproject` (plan pixels + depth -> 3D targets) and `grounded-planner calibrate` (hand-eye)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

from grounded_planner.cli.main import CliError, add_command
from grounded_planner.geometry import CameraModel, Extrinsics, GeometryError, compute_targets
from grounded_planner.geometry.errors import CameraModelError
from grounded_planner.geometry.calibration_files import check_camera_frame, import_result, load_pose_samples
from grounded_planner.geometry.handeye import CharucoBoardSpec, calibrate_hand_eye, detect_board, load_samples
from grounded_planner.plan import PlanError, load_plan


def register(subparsers: argparse._SubParsersAction) -> None:
    bp = add_command(
        subparsers,
        "backproject",
        description='Print {"frame", "targets": [{index, type, object, position, yaw, width, normal, method, '
        'confidence}], "warnings"} with positions in metres in the extrinsics\' parent frame (the camera '
        "optical frame without --extrinsics).",
    )
    bp.add_argument("--plan", required=True, metavar="PLAN.json", help="canonical grounded plan JSON")
    bp.add_argument(
        "--depth",
        required=True,
        metavar="DEPTH.png",
        help="single-channel 16-bit depth image aligned to the plan's camera, in depth units",
    )
    bp.add_argument(
        "--camera-info",
        required=True,
        metavar="CAM.yaml",
        help="ROS camera_calibration YAML (or a CameraInfo message dump) of the depth image",
    )
    bp.add_argument(
        "--extrinsics", default=None, metavar="CALIB.yaml", help="camera -> robot base extrinsics (calibration/*.yaml)"
    )
    bp.add_argument("--depth-scale", type=float, default=0.001, help="metres per depth unit (default 0.001, D4xx)")
    bp.add_argument("--compact", action="store_true", help="one-line JSON")
    bp.set_defaults(func=_backproject)

    cal = add_command(
        subparsers,
        "calibrate",
        description="Three ways to the camera extrinsics YAML. --samples DIR: NAME.png + NAME.yaml pairs (the flange "
        "pose in the robot base frame, in the extrinsics format), plus camera.yaml and board.yaml unless "
        "given; prints residuals per sample and overall. --from-samples FILE: robot and target pose "
        "samples (easy_handeye2's saved .samples, or a plain YAML: setup: eye_in_hand|eye_to_hand, "
        "robot_base_frame, robot_effector_frame, camera_frame, samples: [{robot: {translation: [x, y, "
        "z], rotation: [qx, qy, qz, qw]}, target: {...}}], the effector in the base frame, the target in "
        "the camera frame). --import FILE: a finished result of easy_handeye2 (.calib), easy_handeye "
        "(.yaml) or MoveIt Calibration (.launch). Every result's camera frame is checked against its "
        "rotation (camera_link holding the optical frame's rotation is refused).",
    )
    source = cal.add_mutually_exclusive_group(required=True)
    source.add_argument("--samples", metavar="DIR", help="ChArUco images + flange poses")
    source.add_argument(
        "--from-samples",
        metavar="FILE",
        dest="from_samples",
        help="robot + target pose samples: easy_handeye2 .samples or the plain YAML above",
    )
    source.add_argument(
        "--import",
        metavar="FILE",
        dest="import_file",
        help="a calibration result of easy_handeye2, easy_handeye or MoveIt Calibration",
    )
    cal.add_argument(
        "--out",
        metavar="EXTRINSICS.yaml",
        help="where to write our extrinsics YAML (required with --samples and --from-samples; "
        "--import without it prints the YAML)",
    )
    cal.add_argument(
        "--mode",
        default="eye_to_hand",
        choices=["eye_to_hand", "eye_in_hand"],
        help="--samples: eye_to_hand: camera fixed, board on the flange; eye_in_hand: camera on the arm, "
        "board fixed (the sample files of --from-samples and --import say it themselves)",
    )
    cal.add_argument(
        "--method",
        default="auto",
        choices=["auto", "tsai", "park", "horaud", "andreff", "daniilidis"],
        help="OpenCV solver for the initial estimate (auto keeps the one with the smallest residuals); "
        "with --samples it is then refined on the corners' reprojection error over all samples",
    )
    cal.add_argument("--camera-info", default=None, metavar="CAM.yaml", help="intrinsics (default DIR/camera.yaml)")
    cal.add_argument("--board", default=None, metavar="BOARD.yaml", help="ChArUco board spec (default DIR/board.yaml)")
    cal.add_argument(
        "--camera-frame",
        default=None,
        help="child frame of the result (default: the camera file's frame_id, else "
        "camera_color_optical_frame; with --from-samples/--import: the file's camera frame). Use it "
        "to relabel a result whose rotation belongs to another frame than its name says",
    )
    cal.set_defaults(func=_calibrate)


def read_depth_png(path: str | Path, depth_scale: float):
    """A single-channel 16-bit PNG in depth units -> (H, W) float metres (0 stays 0: a hole)."""
    path = Path(path)
    try:
        with Image.open(path) as img:
            mode = img.mode
            raw = np.array(img)
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read depth image {path}: {exc}") from exc
    # Pillow opens 16-bit grayscale PNGs as mode I;16 (uint16) or I (int32 holding 0..65535).
    if mode not in ("I;16", "I;16B", "I;16L", "I") or raw.ndim != 2:
        raise CliError(f"depth image {path} must be single-channel 16-bit (16UC1), got mode {mode} shape {raw.shape}")
    if raw.min(initial=0) < 0 or raw.max(initial=0) > 65535:
        raise CliError(f"depth image {path} holds values outside 0..65535")
    return raw.astype(np.float64) * depth_scale


def _backproject(args: argparse.Namespace) -> int:
    if not args.depth_scale > 0:
        raise CliError(f"--depth-scale must be > 0 metres per unit, got {args.depth_scale}")
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        raise CliError(f"plan {args.plan}: {exc}") from exc
    depth_m = read_depth_png(args.depth, args.depth_scale)
    try:
        camera = CameraModel.from_camera_info_yaml(args.camera_info)
        extrinsics = Extrinsics.load(args.extrinsics) if args.extrinsics else None
    except GeometryError as exc:
        raise CliError(str(exc)) from exc
    try:
        targets = compute_targets(plan, depth_m, camera, extrinsics)
    except CameraModelError as exc:  # the calibration itself is unusable (e.g. distortion that cannot be inverted)
        raise CliError(f"camera info {args.camera_info}: {exc}") from exc
    except GeometryError as exc:
        raise CliError(str(exc), code=1) from exc
    print(json.dumps(targets.to_dict(), indent=None if args.compact else 2))
    return 0


def _write_extrinsics(extrinsics: Extrinsics, out: str | None, header: str) -> None:
    if out is None:
        print(yaml.safe_dump(extrinsics.to_dict(), sort_keys=False), end="")
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    extrinsics.save(path, header=header)
    print(f"wrote {path}: {extrinsics.parent_frame} <- {extrinsics.child_frame}")


def _relabelled(extrinsics: Extrinsics, camera_frame: str | None) -> Extrinsics:
    if not camera_frame or camera_frame == extrinsics.child_frame:
        return extrinsics
    metadata = dict(extrinsics.metadata)
    metadata.setdefault("calibration", {})["relabelled_from"] = extrinsics.child_frame
    return Extrinsics(extrinsics.parent_frame, camera_frame, extrinsics.translation, extrinsics.rotation, metadata)


def _import_calibration(args: argparse.Namespace) -> int:
    try:
        extrinsics, setup, tool = import_result(args.import_file)
        extrinsics = _relabelled(extrinsics, args.camera_frame)
        checked = check_camera_frame(extrinsics, setup)
    except GeometryError as exc:
        raise CliError(exc.detail) from exc
    print(f"{tool} {setup} result from {args.import_file}; {checked}", file=sys.stderr)
    _write_extrinsics(
        extrinsics,
        args.out,
        f"imported from {tool} ({setup}) by grounded-planner calibrate --import {args.import_file}",
    )
    return 0


def _calibrate_from_samples(args: argparse.Namespace) -> int:
    if not args.out:
        raise CliError("--from-samples needs --out EXTRINSICS.yaml")
    try:
        samples = load_pose_samples(args.from_samples)
        result = calibrate_hand_eye(
            samples.effector2base,
            samples.target2cam,
            mode=samples.setup,
            method=args.method,
            base_frame=samples.base_frame,
            gripper_frame=samples.effector_frame,
            camera_frame=args.camera_frame or samples.camera_frame,
        )
        checked = check_camera_frame(result.extrinsics, samples.setup)
    except GeometryError as exc:
        raise CliError(exc.detail, code=1) from exc
    except ImportError as exc:  # calibrate_hand_eye's solvers are OpenCV's
        raise CliError(f"calibrate needs OpenCV: pip install opencv-python-headless ({exc})") from exc
    fixed = "target in effector" if samples.setup == "eye_to_hand" else "target in base"
    print(f"{'sample':<16} {'resid_mm':>9} {'resid_deg':>9}   ({fixed} vs consensus)")
    for r in result.residuals:
        print(f"{r.name:<16} {1000 * r.translation_m:>9.3f} {r.rotation_deg:>9.4f}")
    print(
        f"overall: {len(samples.target2cam)} samples ({samples.source}, {samples.setup}), method {result.method}, "
        f"RMS {1000 * result.rms_translation_m:.3f} mm, {result.rms_rotation_deg:.4f} deg; {checked}"
    )
    result.extrinsics.metadata["calibration"]["samples_file"] = str(args.from_samples)
    _write_extrinsics(
        result.extrinsics,
        args.out,
        f"hand-eye calibration ({samples.setup}) by grounded-planner calibrate --from-samples {args.from_samples}",
    )
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    if args.import_file:
        return _import_calibration(args)
    if args.from_samples:
        return _calibrate_from_samples(args)
    if not args.out:
        raise CliError("--samples needs --out EXTRINSICS.yaml")
    samples_dir = Path(args.samples)
    try:
        import cv2  # lazy: optional SDK (cv2), not in install_requires
    except ImportError as exc:
        raise CliError("calibrate needs OpenCV: pip install 'grounded_planner[geometry]'") from exc
    try:
        camera = CameraModel.from_camera_info_yaml(args.camera_info or samples_dir / "camera.yaml")
        spec = CharucoBoardSpec.load(args.board or samples_dir / "board.yaml")
        samples = load_samples(samples_dir)
    except GeometryError as exc:
        raise CliError(str(exc)) from exc
    if not samples:
        raise CliError(f"{samples_dir}: no NAME.png + NAME.yaml samples")
    base_frames = {s.gripper2base.parent_frame for s in samples}
    flange_frames = {s.gripper2base.child_frame for s in samples}
    if len(base_frames) > 1 or len(flange_frames) > 1:
        raise CliError(
            f"robot poses disagree on frames: parents {sorted(base_frames)}, children {sorted(flange_frames)}"
        )
    used, observations, skipped = [], [], []
    for sample in samples:
        image = cv2.imread(str(sample.image_path), cv2.IMREAD_GRAYSCALE)
        if image is None:
            raise CliError(f"cannot read image {sample.image_path}")
        try:
            observations.append(detect_board(image, camera, spec, sample.image_path.name))
            used.append(sample)
        except GeometryError as exc:
            skipped.append(sample.name)
            print(f"skipped {exc.detail}", file=sys.stderr)
    camera_frame = args.camera_frame or camera.frame_id or "camera_color_optical_frame"
    try:
        result = calibrate_hand_eye(
            [s.gripper2base.matrix for s in used],
            [o.target2cam for o in observations],
            mode=args.mode,
            method=args.method,
            base_frame=base_frames.pop(),
            gripper_frame=flange_frames.pop(),
            camera_frame=camera_frame,
            names=[s.name for s in used],
            reprojection_px=[o.reprojection_px for o in observations],
            camera=camera,
            observations=observations,
        )
    except GeometryError as exc:
        raise CliError(str(exc), code=1) from exc
    fixed = "board in flange" if args.mode == "eye_to_hand" else "board in base"
    print(f"{'sample':<16} {'corners':>7} {'reproj_px':>9} {'resid_mm':>9} {'resid_deg':>9}   ({fixed} vs consensus)")
    for obs, r in zip(observations, result.residuals):
        print(
            f"{r.name:<16} {obs.n_corners:>7d} {r.reprojection_px:>9.3f} {1000 * r.translation_m:>9.3f} {r.rotation_deg:>9.4f}"
        )
    print(
        f"overall: {len(used)} samples ({len(skipped)} skipped), method {result.method}, RMS "
        f"{1000 * result.rms_translation_m:.3f} mm, {result.rms_rotation_deg:.4f} deg, mean reprojection "
        f"{float(np.mean([o.reprojection_px for o in observations])):.3f} px per view, "
        f"{result.reprojection_rms_px:.3f} px jointly"
    )
    if skipped:
        result.extrinsics.metadata["calibration"]["skipped"] = skipped
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result.extrinsics.save(
        out, header=f"hand-eye calibration ({args.mode}) by grounded-planner calibrate from {samples_dir}"
    )
    print(f"wrote {out}: {result.extrinsics.parent_frame} <- {result.extrinsics.child_frame}")
    return 0
