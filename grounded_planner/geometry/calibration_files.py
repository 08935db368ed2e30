"""Other tools' hand-eye files: pose samples to solve from, and finished results to import into our extrinsics.

Read here (each named after the tool and version whose writer it follows):

- **our plain samples YAML** (``calibrate --from-samples``)::

      setup: eye_to_hand            # or eye_in_hand
      robot_base_frame: panda_link0
      robot_effector_frame: panda_hand
      camera_frame: camera_color_optical_frame
      samples:                      # robot: the effector in the base frame; target: the target in the camera frame
        - {robot: {translation: [x, y, z], rotation: [qx, qy, qz, qw]}, target: {translation: [...], rotation: [...]}}

- **easy_handeye2 saved samples** (``~/.ros2/easy_handeye2/samples/NAME.samples``, master b42cae6): a
  ``SampleList`` message as ``rosidl_runtime_py.message_to_yaml`` writes it: ``parameters`` (``calibration_type``
  ``eye_in_hand`` | ``eye_on_base``, ``robot_base_frame``, ``robot_effector_frame``, ``tracking_base_frame`` = the
  camera, ``tracking_marker_frame``) and ``samples: [{robot: Transform, tracking: Transform}]``. Its sampler looks
  up ``robot`` as the effector in the base for eye_in_hand but as the *base in the effector* for eye_on_base
  ("we trick the library"), and ``tracking`` as the marker in the camera.
- **easy_handeye2 results** (``~/.ros2/easy_handeye2/calibrations/NAME.calib``): ``parameters`` as above and
  ``transform``: the camera (``tracking_base_frame``) in the effector (eye_in_hand) or in the base (eye_on_base),
  as its publisher broadcasts it.
- **easy_handeye (ROS 1) results** (``~/.ros/easy_handeye/NAME.yaml``): ``eye_on_hand``, ``robot_base_frame``,
  ``robot_effector_frame``, ``tracking_base_frame`` and ``transformation: {x, y, z, qx, qy, qz, qw}``.
- **MoveIt Calibration results** (the hand-eye RViz plugin's "Save camera pose", moveit_calibration master
  a883ec2 and its ros2 branch): a ROS 1 XML launch file whose ``static_transform_publisher`` node has
  ``args="x y z qx qy qz qw FROM_FRAME TO_FRAME"``: the sensor frame in the robot base or effector frame.

Every result goes through :func:`check_camera_frame`: a frame named like a body frame (``camera_link``, x forward,
z up) holding the rotation of an optical frame (z forward, y down), or the other way round, is refused by name.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from grounded_planner.geometry.errors import CalibrationError, ExtrinsicsError
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.geometry.transforms import invert_transform, make_transform, quat_to_matrix
from grounded_planner.geometry.yamlfile import read_yaml

SETUPS = ("eye_to_hand", "eye_in_hand")
# a body-frame camera (REP 103) or an optical one (REP 103's "_optical" suffix) whose axes point the other
# convention's way by more than this (cosine with the base's up axis) is refused
_AXIS_COS = 0.5


class CalibrationFileError(CalibrationError):
    """A samples or result file that cannot be read, or one whose camera frame does not match its rotation."""

    rule_default = "calibration_file"


@dataclass
class PoseSamples:
    """Hand-eye samples in our frames: ``effector2base`` and ``target2cam`` 4x4 transforms, one pair per sample."""

    setup: str  # eye_to_hand | eye_in_hand
    base_frame: str
    effector_frame: str
    camera_frame: str
    effector2base: list[np.ndarray]
    target2cam: list[np.ndarray]
    source: str  # "plain YAML" | "easy_handeye2 samples"


def _transform(value: Any, where: str) -> np.ndarray:
    """A pose ``{translation: [x, y, z] | {x, y, z}, rotation: [qx, qy, qz, qw] | {x, y, z, w}}`` as 4x4."""
    if not isinstance(value, Mapping) or "translation" not in value or "rotation" not in value:
        raise CalibrationFileError(
            f"{where} must be {{translation: [x, y, z], rotation: [qx, qy, qz, qw]}}, got {value!r}"[:300]
        )
    t, q = value["translation"], value["rotation"]
    if isinstance(t, Mapping):
        t = [t.get(k) for k in ("x", "y", "z")]
    if isinstance(q, Mapping):
        q = [q.get(k) for k in ("x", "y", "z", "w")]
    try:
        t, q = np.asarray(t, dtype=float), np.asarray(q, dtype=float)
    except (TypeError, ValueError):
        raise CalibrationFileError(f"{where}: translation and rotation must be numbers, got {value!r}"[:300]) from None
    if t.shape != (3,) or q.shape != (4,) or not (np.all(np.isfinite(t)) and np.all(np.isfinite(q))):
        raise CalibrationFileError(
            f"{where}: translation must be 3 numbers and rotation 4 (qx, qy, qz, qw), got {value!r}"[:300]
        )
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > 1e-3:
        raise CalibrationFileError(f"{where}: rotation {q.tolist()} is not a unit quaternion (norm {norm:.4f})")
    return make_transform(quat_to_matrix(q / norm), t)


def _text(data: Mapping, key: str, source: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CalibrationFileError(f"{source}: {key!r} must name a frame, got {value!r}")
    return value.strip()


def load_pose_samples(path: str | Path) -> PoseSamples:
    """Our plain samples YAML or easy_handeye2's ``.samples`` file (told apart by their keys)."""
    path = Path(path)
    data = read_yaml(path, "hand-eye samples file", CalibrationFileError)
    if not isinstance(data, Mapping) or not isinstance(data.get("samples"), list):
        raise CalibrationFileError(
            f"{path}: expected a mapping with a 'samples' list (our plain format: setup, "
            "robot_base_frame, robot_effector_frame, camera_frame, samples; or an "
            "easy_handeye2 .samples file)"
        )
    if isinstance(data.get("parameters"), Mapping):
        return _easy_handeye2_samples(data, str(path))
    setup = data.get("setup")
    if setup not in SETUPS:
        raise CalibrationFileError(f"{path}: 'setup' must be eye_in_hand or eye_to_hand, got {setup!r}")
    effector2base, target2cam = [], []
    for i, sample in enumerate(data["samples"]):
        if not isinstance(sample, Mapping):
            raise CalibrationFileError(f"{path}: sample {i} must be {{robot: ..., target: ...}}, got {sample!r}"[:300])
        effector2base.append(_transform(sample.get("robot"), f"{path}: sample {i} robot"))
        target2cam.append(_transform(sample.get("target"), f"{path}: sample {i} target"))
    return PoseSamples(
        setup,
        _text(data, "robot_base_frame", str(path)),
        _text(data, "robot_effector_frame", str(path)),
        _text(data, "camera_frame", str(path)),
        effector2base,
        target2cam,
        "plain YAML",
    )


def _easy_handeye2_samples(data: Mapping, source: str) -> PoseSamples:
    params = data["parameters"]
    kind = params.get("calibration_type")
    if kind not in ("eye_in_hand", "eye_on_base"):
        raise CalibrationFileError(
            f"{source}: parameters.calibration_type must be eye_in_hand or eye_on_base (easy_handeye2), got {kind!r}"
        )
    effector2base, target2cam = [], []
    for i, sample in enumerate(data["samples"]):
        if not isinstance(sample, Mapping):
            raise CalibrationFileError(
                f"{source}: sample {i} must be {{robot: ..., tracking: ...}}, got {sample!r}"[:300]
            )
        robot = _transform(sample.get("robot"), f"{source}: sample {i} robot")
        # easy_handeye2's sampler stores the base in the effector for eye_on_base: undo its trick
        effector2base.append(robot if kind == "eye_in_hand" else invert_transform(robot))
        target2cam.append(_transform(sample.get("tracking"), f"{source}: sample {i} tracking"))
    return PoseSamples(
        "eye_in_hand" if kind == "eye_in_hand" else "eye_to_hand",
        _text(params, "robot_base_frame", source),
        _text(params, "robot_effector_frame", source),
        _text(params, "tracking_base_frame", source),
        effector2base,
        target2cam,
        "easy_handeye2 samples",
    )


def import_result(path: str | Path) -> tuple[Extrinsics, str, str]:
    """A finished calibration from easy_handeye2, easy_handeye or MoveIt Calibration as our extrinsics.

    Returns (extrinsics: the camera in the base or effector frame, setup: eye_to_hand | eye_in_hand, the tool's
    name). Raises :class:`CalibrationFileError` naming the file and what is missing.
    """
    path = Path(path)
    try:
        head = path.read_text(encoding="utf-8")[:4096].lstrip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationFileError(f"cannot read calibration result {path}: {exc}") from exc
    if head.startswith("<"):
        return _moveit_launch(path)
    data = read_yaml(path, "calibration result", CalibrationFileError)
    if isinstance(data, Mapping) and isinstance(data.get("parameters"), Mapping) and "transform" in data:
        params = data["parameters"]
        kind = params.get("calibration_type")
        if kind not in ("eye_in_hand", "eye_on_base"):
            raise CalibrationFileError(
                f"{path}: parameters.calibration_type must be eye_in_hand or eye_on_base (easy_handeye2), got {kind!r}"
            )
        parent = _text(params, "robot_effector_frame" if kind == "eye_in_hand" else "robot_base_frame", str(path))
        camera = _text(params, "tracking_base_frame", str(path))
        T = _transform(data["transform"], f"{path}: transform")
        setup = "eye_in_hand" if kind == "eye_in_hand" else "eye_to_hand"
        return _extrinsics(T, parent, camera, path, "easy_handeye2"), setup, "easy_handeye2"
    if isinstance(data, Mapping) and "transformation" in data and "eye_on_hand" in data:
        tr = data["transformation"]
        if not isinstance(tr, Mapping):
            raise CalibrationFileError(f"{path}: transformation must be {{x, y, z, qx, qy, qz, qw}}, got {tr!r}")
        T = _transform(
            {
                "translation": [tr.get(k) for k in ("x", "y", "z")],
                "rotation": [tr.get(k) for k in ("qx", "qy", "qz", "qw")],
            },
            f"{path}: transformation",
        )
        on_hand = bool(data["eye_on_hand"])
        parent = _text(data, "robot_effector_frame" if on_hand else "robot_base_frame", str(path))
        camera = _text(data, "tracking_base_frame", str(path))
        return (
            _extrinsics(T, parent, camera, path, "easy_handeye"),
            "eye_in_hand" if on_hand else "eye_to_hand",
            "easy_handeye",
        )
    raise CalibrationFileError(
        f"{path}: not a calibration result this reads (easy_handeye2 .calib: parameters + "
        "transform; easy_handeye .yaml: eye_on_hand + transformation; MoveIt Calibration "
        ".launch: a static_transform_publisher)"
    )


def _moveit_launch(path: Path) -> tuple[Extrinsics, str, str]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        line, column = exc.position
        raise CalibrationFileError(f"{path}:{line}:{column + 1}: not valid XML: {exc}") from None
    for node in root.iter("node"):
        if node.get("type") == "static_transform_publisher":
            args = (node.get("args") or "").split()
            if len(args) != 9:
                raise CalibrationFileError(
                    f"{path}: static_transform_publisher args must be 'x y z qx qy qz qw FRAME "
                    f"CHILD' (MoveIt Calibration's), got {node.get('args')!r}"
                )
            try:
                values = [float(v) for v in args[:7]]
            except ValueError:
                raise CalibrationFileError(
                    f"{path}: static_transform_publisher args {args[:7]} are not numbers"
                ) from None
            T = _transform({"translation": values[:3], "rotation": values[3:7]}, f"{path}: static_transform_publisher")
            parent, camera = args[7], args[8]
            # MoveIt Calibration's frames are what the user picked: the parent is the base (eye-to-hand) or an arm link
            setup = "eye_to_hand" if "base" in parent or parent.endswith("link0") else "eye_in_hand"
            return _extrinsics(T, parent, camera, path, "MoveIt Calibration"), setup, "MoveIt Calibration"
    raise CalibrationFileError(f"{path}: no static_transform_publisher node (MoveIt Calibration's saved camera pose)")


def _extrinsics(T: np.ndarray, parent: str, child: str, path: Path, tool: str) -> Extrinsics:
    try:
        return Extrinsics.from_matrix(T, parent, child, {"calibration": {"imported_from": str(path), "tool": tool}})
    except ExtrinsicsError as exc:
        raise CalibrationFileError(f"{path}: {exc.detail}") from None


def is_optical(frame: str) -> bool:
    """REP 103: a frame whose name ends in ``_optical_frame`` (or holds ``optical``) has z forward, x right, y down;
    any other camera frame (``camera_link``, ``camera_color_frame``) has x forward, y left, z up."""
    return "optical" in frame


def check_camera_frame(extrinsics: Extrinsics, setup: str) -> str:
    """Refuse a camera frame whose name and rotation disagree; returns a line on what was checked.

    Only a camera fixed beside the robot (eye-to-hand: the parent is the robot base, whose z points up) can be
    checked: a camera looks at the table level or down, and stands upright unless mounted otherwise. A body frame
    (``camera_link``) then has its z (up) axis not pointing down and its y (left) axis level; an optical frame has
    its y (down) axis not pointing up. A ``camera_link`` result holding the optical frame's rotation is the classic
    trap (the optical frame's pose saved under the link's name): every target would land 90 degrees off.
    """
    if setup != "eye_to_hand":
        return (
            f"camera frame {extrinsics.child_frame!r} not checked: in eye-in-hand its parent "
            f"{extrinsics.parent_frame!r} moves with the arm and has no fixed up"
        )
    R = extrinsics.rotation_matrix
    up = R[2, :]  # the base's up axis in the camera frame's axes: cosines of camera x, y, z with up
    name = extrinsics.child_frame
    if is_optical(name):
        if up[1] > _AXIS_COS or up[2] > _AXIS_COS:
            raise CalibrationFileError(
                f"camera frame {name!r} is named as an optical frame (z forward, y down) but its "
                f"{'y axis points up' if up[1] > _AXIS_COS else 'z axis looks up'} in {extrinsics.parent_frame!r}: "
                "this looks like a body-frame rotation (x forward, z up, as camera_link) saved under an optical "
                "name. Re-run the calibration with the optical frame, or pass --camera-frame with the frame the "
                "rotation belongs to"
            )
        return f"camera frame {name!r}: an optical frame's rotation (y down, z forward), as named"
    if up[1] < -_AXIS_COS or up[2] < -_AXIS_COS:
        raise CalibrationFileError(
            f"camera frame {name!r} is named as a body frame (x forward, y left, z up, like camera_link) but its "
            f"{'y axis points down' if up[1] < -_AXIS_COS else 'z axis points down'} in {extrinsics.parent_frame!r}: "
            "this is an optical frame's rotation (z forward, y down) under a body frame's name, the classic "
            "camera_link vs camera_color_optical_frame trap. If the result really is the optical frame's pose, pass "
            "--camera-frame camera_color_optical_frame (the frame your images carry)"
        )
    return f"camera frame {name!r}: a body frame's rotation (x forward, z up), as named"
