"""sensor_msgs/CameraInfo <-> geometry CameraModel, for rclpy and rosbags message objects alike (duck-typed).

Besides the ROS distortion models (``plumb_bob``, ``rational_polynomial``, ``equidistant``), camera_info
converted from RealSense recordings carries librealsense's own model names (``rs2_distortion_to_string``):
they are mapped the way realsense-ros maps them (``base_realsense_node.cpp``: Kannala-Brandt4 ->
``equidistant`` with 4 coefficients, every other model -> ``plumb_bob``). ``Inverse Brown Conrady`` (D400
colour streams) is the Brown-Conrady polynomial applied in the direction OpenCV applies it (librealsense
deprojects it by the same iterative undistortion), hence plumb_bob; ``None`` means no distortion at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from grounded_planner.geometry.camera import (
    CameraModel,
    UnsupportedDistortionError,  # noqa: F401 (re-exported)
    ros_distortion_model,
)
from grounded_planner.geometry.errors import CameraModelError
import sys


def camera_model_from_msg(msg: Any, frame_id: str = "") -> CameraModel:
    """A CameraInfo message -> CameraModel; ``frame_id`` defaults to the message's header.

    Raises
    ------
    CameraModelError
        (UnsupportedDistortionError for an unknown model) naming what is wrong with the calibration.
    """
    try:
        K = np.asarray(msg.k, dtype=float).reshape(3, 3)
    except ValueError as exc:
        raise CameraModelError(f"camera_info k must have 9 values, got {len(msg.k)}") from exc
    return CameraModel.from_camera_info(
        K,
        np.asarray(msg.d, dtype=float),
        int(msg.width),
        int(msg.height),
        str(msg.distortion_model),
        frame_id or msg.header.frame_id,
    )


def camera_model_to_msg(camera: CameraModel, make: Callable[..., Any], header: Any) -> Any:
    """CameraModel -> a CameraInfo of class ``make`` (rclpy's, or a rosbags typestore's), P = [K | 0], R = I.

    ``header`` is a Header of the same message family (rosbags classes take every field up front).
    """
    return _camera_info(make, header, camera.width, camera.height, camera.K, camera.D, camera.distortion_model)


def raw_calibration_to_msg(calibration: "RawCalibration", make: Callable[..., Any], header: Any) -> Any:
    """A calibration as recorded -> CameraInfo of class ``make``, nothing checked (a log keeps what the camera
    sent, a distortion model nothing here can use included); P = [K | 0], R = I."""
    return _camera_info(
        make, header, calibration.width, calibration.height, calibration.K, calibration.D, calibration.distortion_model
    )


def _camera_info(make: Callable[..., Any], header: Any, width: int, height: int, K: Any, D: Any, model: str) -> Any:
    K = np.asarray(K, dtype=np.float64).reshape(3, 3)
    P = np.hstack([K, np.zeros((3, 1))])
    fields = dict(
        header=header,
        height=int(height),
        width=int(width),
        distortion_model=str(model),
        d=np.asarray(D, dtype=np.float64).ravel(),
        k=K.ravel(),
        r=np.eye(3).ravel(),
        p=P.ravel(),
        binning_x=0,
        binning_y=0,
    )
    roi_type = getattr(make, "__dataclass_fields__", {}).get("roi")
    if roi_type is not None:  # rosbags: a dataclass whose RegionOfInterest class sits in the same module
        roi_cls = getattr(sys.modules[make.__module__], str(roi_type.type).split(".")[-1])
        fields["roi"] = roi_cls(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    return make(**fields)


@dataclass(frozen=True)
class RawCalibration:
    """A camera_info's fields as they came, not checked: what a log keeps whatever the calibration says."""

    width: int
    height: int
    K: np.ndarray
    D: np.ndarray
    distortion_model: str
    frame_id: str


def raw_calibration(msg: Any) -> RawCalibration:
    """The fields of a CameraInfo as recorded (for logging a frame whose calibration cannot be used)."""
    k = np.asarray(msg.k, dtype=float).reshape(-1)
    K = k.reshape(3, 3) if k.size == 9 else np.zeros((3, 3))
    return RawCalibration(
        int(msg.width),
        int(msg.height),
        K,
        np.asarray(msg.d, dtype=float).reshape(-1),
        str(msg.distortion_model),
        str(msg.header.frame_id),
    )


def same_calibration(a: Any, b: Any, tol_px: float = 1e-3) -> str | None:
    """None when two CameraInfo messages describe the same pixels (size, K, model, D), else the first difference."""
    if (int(a.width), int(a.height)) != (int(b.width), int(b.height)):
        return f"sizes differ ({a.width}x{a.height} vs {b.width}x{b.height})"
    ka, kb = np.asarray(a.k, dtype=float), np.asarray(b.k, dtype=float)
    if ka.shape != kb.shape or not np.allclose(ka, kb, atol=tol_px):
        return f"intrinsics differ (K {np.round(ka, 3).tolist()} vs {np.round(kb, 3).tolist()})"
    ma, mb = ros_model_or_name(a.distortion_model), ros_model_or_name(b.distortion_model)
    if ma != mb:
        return f"distortion models differ ({a.distortion_model!r} vs {b.distortion_model!r})"
    da, db = np.asarray(a.d, dtype=float).ravel(), np.asarray(b.d, dtype=float).ravel()
    n = max(da.size, db.size)
    da, db = np.pad(da, (0, n - da.size)), np.pad(db, (0, n - db.size))
    if not np.allclose(da, db, atol=1e-6):
        return f"distortion coefficients differ ({da.tolist()} vs {db.tolist()})"
    return None


def ros_model_or_name(name: str) -> str:
    try:
        return ros_distortion_model(name)[0]
    except UnsupportedDistortionError:
        return str(name)
