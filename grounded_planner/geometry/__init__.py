"""Camera models, back-projection, extrinsics, grasp/place point estimation and hand-eye calibration.

Plain numpy (OpenCV only for calibration and blob labelling); no rclpy. The names other layers use:
:class:`CameraModel`, :class:`Extrinsics`, :func:`compute_targets` -> :class:`TargetSet` of :class:`Target`,
and :class:`GeometryError` (every error of this layer derives from it).
"""

from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.errors import (
    CalibrationError,
    CameraModelError,
    DepthImageError,
    ExtrinsicsError,
    GeometryError,
    NoValidDepthError,
    OutsideImageError,
    RayPlaneError,
)
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.geometry.targets import Target, TargetConfig, TargetSet, backproject, compute_targets

__all__ = [
    "CalibrationError",
    "CameraModel",
    "CameraModelError",
    "DepthImageError",
    "Extrinsics",
    "ExtrinsicsError",
    "GeometryError",
    "NoValidDepthError",
    "OutsideImageError",
    "RayPlaneError",
    "Target",
    "TargetConfig",
    "TargetSet",
    "backproject",
    "compute_targets",
]
