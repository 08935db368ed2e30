"""Hand-eye calibration with a ChArUco board (OpenCV): eye-to-hand (camera fixed) and eye-in-hand (camera on the arm).

Frames: ``gripper2base`` is the robot's flange pose in its base frame (from forward kinematics), ``target2cam``
the board pose in the camera optical frame (from the image). Eye-to-hand solves ``cam2base`` with the board on
the flange; eye-in-hand solves ``cam2gripper`` with the board fixed in the workcell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.errors import CalibrationError
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.geometry.transforms import (
    invert_transform,
    make_transform,
    rotation_angle_deg,
    rotation_from_vector,
)
from grounded_planner.geometry.yamlfile import read_yaml

MODES = ("eye_to_hand", "eye_in_hand")
# OpenCV's solvers by name; "auto" runs all and keeps the one with the smallest residuals.
METHODS = ("tsai", "park", "horaud", "andreff", "daniilidis")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
# A residual score adds rotation error as if seen at this lever arm (a board ~10 cm from the flange).
_LEVER_ARM_M = 0.1


@dataclass
class CharucoBoardSpec:
    """A printed ChArUco board. Measure the printed squares: printers scale."""

    squares_x: int = 7  # squares along the board's x (image columns of the generated board)
    squares_y: int = 5  # squares along the board's y (rows)
    square_length_m: float = 0.04  # side of a chessboard square as printed, metres
    marker_length_m: float = 0.03  # side of an ArUco marker as printed, metres (< square_length_m)
    dictionary: str = "DICT_5X5_100"  # cv2.aruco predefined dictionary name
    legacy_pattern: bool = False  # boards made by OpenCV < 4.6 with an even number of rows
    min_corners: int = 6  # views with fewer detected ChArUco corners are rejected

    def __post_init__(self) -> None:
        if int(self.squares_x) < 2 or int(self.squares_y) < 2:
            raise CalibrationError(
                f"a ChArUco board needs at least 2x2 squares, got {self.squares_x}x{self.squares_y}", rule="board_spec"
            )
        self.squares_x, self.squares_y = int(self.squares_x), int(self.squares_y)
        if not 0 < float(self.marker_length_m) < float(self.square_length_m):
            raise CalibrationError(
                f"need 0 < marker_length_m < square_length_m, got {self.marker_length_m} and {self.square_length_m}",
                rule="board_spec",
            )
        if not str(self.dictionary).startswith("DICT_"):
            raise CalibrationError(
                f"dictionary must be a cv2.aruco name like DICT_5X5_100, got {self.dictionary!r}", rule="board_spec"
            )
        if int(self.min_corners) < 4:
            raise CalibrationError(f"min_corners must be >= 4 for a pose, got {self.min_corners}", rule="board_spec")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "board") -> "CharucoBoardSpec":
        if not isinstance(data, Mapping):
            raise CalibrationError(f"{source}: expected a YAML mapping", rule="board_spec")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise CalibrationError(
                f"{source}: unknown board field(s) {', '.join(unknown)} (expected {', '.join(sorted(known))})",
                rule="board_spec",
            )
        try:
            return cls(**dict(data))
        except CalibrationError as exc:
            raise CalibrationError(f"{source}: {exc.detail}", rule="board_spec") from exc

    @classmethod
    def load(cls, path: str | Path) -> "CharucoBoardSpec":
        return cls.from_dict(read_yaml(path, "board file", CalibrationError, rule="board_spec"), str(path))

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def board(self):
        """The ``cv2.aruco.CharucoBoard``."""
        import cv2  # lazy: optional SDK (cv2), not in install_requires

        dict_id = getattr(cv2.aruco, self.dictionary, None)
        if dict_id is None:
            raise CalibrationError(f"unknown ArUco dictionary {self.dictionary!r}", rule="board_spec")
        dictionary = cv2.aruco.getPredefinedDictionary(dict_id)
        board = cv2.aruco.CharucoBoard(
            (self.squares_x, self.squares_y), self.square_length_m, self.marker_length_m, dictionary
        )
        board.setLegacyPattern(bool(self.legacy_pattern))
        return board

    def render(self, px_per_square: int = 100) -> np.ndarray:
        """The board as a grayscale image (H, W) uint8 without margin, ``px_per_square`` pixels a square.

        Board point (X, Y, 0) in metres is at image pixel (X / s - 0.5, Y / s - 0.5), s = metres per pixel.
        """
        size = (self.squares_x * px_per_square, self.squares_y * px_per_square)
        return self.board().generateImage(size, marginSize=0, borderBits=1)


@dataclass
class BoardObservation:
    """One detected board: its pose in the camera optical frame and how well it fits."""

    target2cam: np.ndarray  # (4, 4) board frame -> optical frame
    n_corners: int  # ChArUco corners used for the pose
    reprojection_px: float  # RMS reprojection error of those corners, pixels
    object_points: np.ndarray | None = None  # (n, 3) the corners on the board, metres (for joint refinement)
    image_points: np.ndarray | None = None  # (n, 2) where they were detected, pixels


def detect_board(
    image: np.ndarray, camera: CameraModel, spec: CharucoBoardSpec, name: str = "image"
) -> BoardObservation:
    """Find the ChArUco board in an image and solve its pose.

    Parameters
    ----------
    image : ndarray, shape (H, W) or (H, W, 3) uint8
    camera : CameraModel
        Intrinsics of the image (distortion is handled by OpenCV's PnP).
    spec : CharucoBoardSpec
    name : str
        Used in error messages.

    Raises
    ------
    CalibrationError
        Fewer than ``spec.min_corners`` corners found.
    """
    import cv2  # lazy: optional SDK (cv2), not in install_requires

    img = np.asarray(image)
    if img.ndim == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    if img.dtype != np.uint8:
        raise CalibrationError(f"{name}: expected an 8-bit image, got {img.dtype}", rule="image")
    if img.shape != (camera.height, camera.width):
        raise CalibrationError(
            f"{name}: image is {img.shape[1]}x{img.shape[0]}, camera model is {camera.width}x{camera.height}",
            rule="image",
        )
    board = spec.board()
    params = cv2.aruco.CharucoParameters()
    params.cameraMatrix = camera.K
    params.distCoeffs = camera.D
    detector = cv2.aruco.CharucoDetector(board, params)
    corners, ids, _, _ = detector.detectBoard(img)
    n = 0 if ids is None else len(ids)
    if n < spec.min_corners:
        raise CalibrationError(
            f"{name}: found {n} ChArUco corners, need at least {spec.min_corners} "
            f"(is the board {spec.squares_x}x{spec.squares_y} {spec.dictionary} in view?)",
            rule="board_not_found",
        )
    obj, imgp = board.matchImagePoints(corners, ids)
    obj = obj.reshape(-1, 3).astype(np.float64)
    imgp = imgp.reshape(-1, 2).astype(np.float64)
    ok, rvec, tvec = cv2.solvePnP(obj, imgp, camera.K, camera.D, flags=cv2.SOLVEPNP_IPPE)
    if not ok:
        raise CalibrationError(f"{name}: PnP failed for {n} corners", rule="pnp")
    rvec, tvec = cv2.solvePnPRefineLM(obj, imgp, camera.K, camera.D, rvec, tvec)
    proj, _ = cv2.projectPoints(obj, rvec, tvec, camera.K, camera.D)
    err = float(np.sqrt(np.mean(np.sum((proj.reshape(-1, 2) - imgp) ** 2, axis=1))))
    R, _ = cv2.Rodrigues(rvec)
    return BoardObservation(make_transform(R, tvec.ravel()), n, err, obj, imgp)


@dataclass
class SampleResidual:
    """How far one sample's implied constant transform is from the consensus."""

    name: str
    translation_m: float
    rotation_deg: float
    reprojection_px: float = float("nan")


@dataclass
class HandEyeResult:
    """The calibrated transform with per-sample and overall residuals."""

    extrinsics: Extrinsics
    mode: str
    method: str
    residuals: list[SampleResidual] = field(default_factory=list)
    reprojection_rms_px: float | None = None  # after joint refinement: RMS over every corner of every sample

    @property
    def rms_translation_m(self) -> float:
        return float(np.sqrt(np.mean([r.translation_m**2 for r in self.residuals])))

    @property
    def rms_rotation_deg(self) -> float:
        return float(np.sqrt(np.mean([r.rotation_deg**2 for r in self.residuals])))


def calibrate_hand_eye(
    gripper2base: Sequence[np.ndarray],
    target2cam: Sequence[np.ndarray],
    mode: str = "eye_to_hand",
    method: str = "auto",
    base_frame: str = "base_link",
    gripper_frame: str = "flange",
    camera_frame: str = "camera_color_optical_frame",
    names: Sequence[str] | None = None,
    reprojection_px: Sequence[float] | None = None,
    camera: CameraModel | None = None,
    observations: Sequence[BoardObservation] | None = None,
) -> HandEyeResult:
    """Solve AX = XB for the camera's mounting.

    Parameters
    ----------
    gripper2base : sequence of ndarray (4, 4)
        Flange poses in the robot base frame, one per sample.
    target2cam : sequence of ndarray (4, 4)
        Board poses in the camera optical frame, same samples.
    mode : str
        ``eye_to_hand`` (board on the flange; result camera->base) or ``eye_in_hand`` (board fixed; result
        camera->flange).
    method : str
        ``auto`` or one of :data:`METHODS`.
    camera, observations : optional
        The intrinsics and the detected corners of each sample. With both, the closed-form solution is refined
        by minimising the corners' reprojection error over all samples at once (both unknown transforms
        jointly), which removes most of the error single-view PnP depth leaves in the closed-form solvers.

    Returns
    -------
    HandEyeResult
        ``extrinsics`` with parent ``base_frame`` (eye-to-hand) or ``gripper_frame`` (eye-in-hand) and child
        ``camera_frame``; a residual per sample: the spread of the implied fixed transform (board in the
        flange for eye-to-hand, board in the base for eye-in-hand).
    """
    import cv2  # lazy: optional SDK (cv2), not in install_requires

    if mode not in MODES:
        raise CalibrationError(f"mode must be one of {', '.join(MODES)}, got {mode!r}", rule="mode")
    if method != "auto" and method not in METHODS:
        raise CalibrationError(f"method must be auto or one of {', '.join(METHODS)}, got {method!r}", rule="method")
    g2b = [np.asarray(T, dtype=float) for T in gripper2base]
    t2c = [np.asarray(T, dtype=float) for T in target2cam]
    if len(g2b) != len(t2c):
        raise CalibrationError(f"{len(g2b)} robot poses but {len(t2c)} board poses", rule="samples")
    if len(g2b) < 3:
        raise CalibrationError(
            f"hand-eye calibration needs at least 3 samples (10+ recommended), got {len(g2b)}", rule="samples"
        )
    names = list(names) if names is not None else [f"sample {i}" for i in range(len(g2b))]
    reproj = list(reprojection_px) if reprojection_px is not None else [float("nan")] * len(g2b)
    # Eye-to-hand is the same problem with the robot poses inverted (base in the gripper frame).
    robot = [invert_transform(T) for T in g2b] if mode == "eye_to_hand" else g2b
    flags = {
        "tsai": cv2.CALIB_HAND_EYE_TSAI,
        "park": cv2.CALIB_HAND_EYE_PARK,
        "horaud": cv2.CALIB_HAND_EYE_HORAUD,
        "andreff": cv2.CALIB_HAND_EYE_ANDREFF,
        "daniilidis": cv2.CALIB_HAND_EYE_DANIILIDIS,
    }
    best: tuple[float, str, np.ndarray, list[SampleResidual]] | None = None
    for name in METHODS if method == "auto" else (method,):
        R, t = cv2.calibrateHandEye(
            [T[:3, :3] for T in robot],
            [T[:3, 3] for T in robot],
            [T[:3, :3] for T in t2c],
            [T[:3, 3] for T in t2c],
            method=flags[name],
        )
        X = make_transform(R, t.ravel())
        if not np.all(np.isfinite(X)) or abs(np.linalg.det(X[:3, :3]) - 1) > 1e-6:
            continue
        residuals = _residuals(robot, t2c, X, names, reproj)
        score = math.sqrt(
            np.mean([r.translation_m**2 + (math.radians(r.rotation_deg) * _LEVER_ARM_M) ** 2 for r in residuals])
        )
        if best is None or score < best[0]:
            best = (score, name, X, residuals)
    if best is None:
        raise CalibrationError("every hand-eye solver failed (are the robot poses varied in rotation?)", rule="solver")
    _, name, X, residuals = best
    if camera is not None and observations is not None:
        if len(observations) != len(t2c) or any(o.object_points is None for o in observations):
            raise CalibrationError("refinement needs one observation with corner points per sample", rule="samples")
        X, joint_rms_px = _refine(robot, t2c, X, camera, observations)
        residuals = _residuals(robot, t2c, X, names, reproj)
        name += "+refined"
    else:
        joint_rms_px = None
    parent = base_frame if mode == "eye_to_hand" else gripper_frame
    result = HandEyeResult(Extrinsics.from_matrix(X, parent, camera_frame), mode, name, residuals, joint_rms_px)
    result.extrinsics.metadata["calibration"] = {
        "mode": mode,
        "method": name,
        "samples": len(g2b),
        "rms_translation_mm": round(1000 * result.rms_translation_m, 3),
        "rms_rotation_deg": round(result.rms_rotation_deg, 4),
    }
    if joint_rms_px is not None:
        result.extrinsics.metadata["calibration"]["reprojection_rms_px"] = round(joint_rms_px, 4)
    return result


def _residuals(
    robot: list[np.ndarray], t2c: list[np.ndarray], X: np.ndarray, names: list[str], reproj: list[float]
) -> list[SampleResidual]:
    """Per sample, the distance of its implied fixed transform from the consensus of all samples.

    Both modes reduce to ``C_i = robot_i @ X @ target2cam_i`` with ``robot_i`` as passed to the solver
    (base2gripper for eye-to-hand, gripper2base for eye-in-hand), which must be the same for every sample.
    """
    C = [Ri @ X @ Ti for Ri, Ti in zip(robot, t2c)]
    mean = _mean_transform(C)
    return [
        SampleResidual(
            n, float(np.linalg.norm(c[:3, 3] - mean[:3, 3])), rotation_angle_deg(mean[:3, :3].T @ c[:3, :3]), e
        )
        for n, c, e in zip(names, C, reproj)
    ]


def _refine(
    robot: list[np.ndarray],
    t2c: list[np.ndarray],
    X0: np.ndarray,
    camera: CameraModel,
    observations: Sequence[BoardObservation],
    iterations: int = 30,
) -> tuple[np.ndarray, float]:
    """Levenberg-Marquardt on the reprojection error of every detected corner, over X and the fixed transform C.

    Model: ``target2cam_i = X^-1 @ robot_i^-1 @ C`` (see :func:`_residuals`); 12 parameters, small rotation
    vectors and translations applied on the right of the current estimates; numeric Jacobian. Returns the
    refined X and the final RMS reprojection error (pixels) over all corners.
    """
    C0 = _mean_transform([Ri @ X0 @ Ti for Ri, Ti in zip(robot, t2c)])
    robot_inv = [invert_transform(R) for R in robot]
    obj = [o.object_points for o in observations]
    img = np.concatenate([o.image_points for o in observations]).ravel()

    def unpack(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = X0 @ make_transform(rotation_from_vector(p[0:3]), p[3:6])
        C = C0 @ make_transform(rotation_from_vector(p[6:9]), p[9:12])
        return X, C

    def residual(p: np.ndarray) -> np.ndarray:
        X, C = unpack(p)
        X_inv = invert_transform(X)
        projected = []
        for Rinv, P in zip(robot_inv, obj):
            T = X_inv @ Rinv @ C
            projected.append(camera.project(P @ T[:3, :3].T + T[:3, 3]))
        return np.concatenate(projected).ravel() - img

    p = np.zeros(12)
    r = residual(p)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(iterations):
        J = np.empty((r.size, 12))
        for k in range(12):
            step = np.zeros(12)
            step[k] = 1e-7
            J[:, k] = (residual(p + step) - residual(p - step)) / 2e-7
        A, g = J.T @ J, J.T @ r
        while True:
            delta = -np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), g)
            r_new = residual(p + delta)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                p, r, lam = p + delta, r_new, lam * 0.3
                break
            lam *= 10
            if lam > 1e8:
                return unpack(p)[0], float(np.sqrt(cost / (r.size / 2)))
        converged = cost - cost_new < 1e-10 * cost
        cost = cost_new
        if converged:
            break
    return unpack(p)[0], float(np.sqrt(cost / (r.size / 2)))


def _mean_transform(Ts: list[np.ndarray]) -> np.ndarray:
    """Average of rigid transforms: mean translation, chordal mean rotation."""
    u, _, vt = np.linalg.svd(np.sum([T[:3, :3] for T in Ts], axis=0))
    R = u @ np.diag([1, 1, np.linalg.det(u @ vt)]) @ vt
    return make_transform(R, np.mean([T[:3, 3] for T in Ts], axis=0))


@dataclass
class CalibrationSample:
    """One image + robot pose pair from a samples directory."""

    name: str
    image_path: Path
    gripper2base: Extrinsics


def load_samples(directory: str | Path) -> list[CalibrationSample]:
    """Pairs ``NAME.png`` (or .jpg) + ``NAME.yaml`` (flange pose in base, extrinsics format) from a directory.

    Every image needs its pose file and every pose file its image; anything else is an error, not skipped.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CalibrationError(f"samples directory {directory} does not exist", rule="samples")
    reserved = {"camera.yaml", "board.yaml"}
    images = {p.stem: p for p in sorted(directory.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES}
    poses = {p.stem: p for p in sorted(directory.glob("*.yaml")) if p.name not in reserved}
    missing_pose = sorted(set(images) - set(poses))
    missing_image = sorted(set(poses) - set(images))
    if missing_pose or missing_image:
        raise CalibrationError(
            f"{directory}: unpaired samples: images without pose {missing_pose or '-'}, poses without image "
            f"{missing_image or '-'} (each sample is NAME.png + NAME.yaml)",
            rule="samples",
        )
    samples = []
    for stem in sorted(images):
        try:
            pose = Extrinsics.load(poses[stem])
        except Exception as exc:  # an ExtrinsicsError; re-typed so the CLI reports it as a calibration input
            raise CalibrationError(f"pose file: {exc}", rule="samples") from exc
        samples.append(CalibrationSample(stem, images[stem], pose))
    return samples
