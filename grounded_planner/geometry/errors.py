"""Typed errors of the geometry layer: each names the input (and the plan action) that caused it."""

from __future__ import annotations

from grounded_planner.errors import InputError


class GeometryError(InputError):
    """A geometric computation that cannot give a trustworthy answer for the given input.

    Attributes
    ----------
    index : int or None
        Index of the plan action the error belongs to, or None for errors not tied to an action
        (a bad camera file, bad extrinsics, a calibration that failed).
    action : str
        Type of that action (``grasp``, ``place``, ``open``, ``close``) or ``""``.
    rule : str
        Short machine-readable name of the failed check (``no_valid_depth``, ``ray_parallel``, ...).
    """

    rule_default = "geometry"

    def __init__(self, message: str, *, index: int | None = None, action: str = "", rule: str | None = None):
        self.detail = message
        self.index = index
        self.action = action
        self.rule = rule or self.rule_default
        where = ""
        if index is not None:
            where = f"action {index} ({action}): " if action else f"action {index}: "
        super().__init__(f"{where}{message} [rule: {self.rule}]")


class CameraModelError(GeometryError):
    """A camera_info / calibration YAML that is missing fields or holds invalid values."""

    rule_default = "camera_model"


class ExtrinsicsError(GeometryError):
    """An extrinsics file or transform that is malformed (missing frames, non-unit quaternion, NaN)."""

    rule_default = "extrinsics"


class DepthImageError(GeometryError):
    """A depth image of the wrong shape, type or size for the camera model."""

    rule_default = "depth_image"


class OutsideImageError(GeometryError):
    """A bbox or point of the plan that lies outside the depth image."""

    rule_default = "outside_image"


class NoValidDepthError(GeometryError):
    """No usable depth where an action needs it (all holes, or all out of the valid range)."""

    rule_default = "no_valid_depth"


class RayPlaneError(GeometryError):
    """A pixel ray that does not meet the plane in front of the camera (parallel, or behind it)."""

    rule_default = "ray_parallel"


class CalibrationError(GeometryError):
    """Hand-eye calibration input that cannot give a result (too few samples, board not found)."""

    rule_default = "calibration"
