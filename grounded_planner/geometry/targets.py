"""3D targets from a grounded plan: grasp points with yaw and width, place points, handle points with normals.

Pixel convention: plan coordinates are continuous image coordinates (the image spans [0, W] x [0, H]), so the
plan point (x, y) is the camera-model pixel (x - 0.5, y - 0.5), whose centres sit at integers (ROS/OpenCV).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.errors import (
    DepthImageError,
    ExtrinsicsError,
    GeometryError,
    NoValidDepthError,
    OutsideImageError,
    RayPlaneError,
)
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.geometry.plane import Plane, fit_plane_ransac
from grounded_planner.geometry.transforms import fold_half_turn
from grounded_planner.plan import GroundedPlan, Target, TargetSet

__all__ = ["DEFAULT_OPTICAL_FRAME", "METHODS", "Target", "TargetConfig", "TargetSet", "backproject", "compute_targets"]

# Frame name used when neither extrinsics nor the camera model name the optical frame.
DEFAULT_OPTICAL_FRAME = "camera_optical_frame"
# Methods a target can record (``Target.method``).
METHODS = (
    "top_surface",  # grasp: centre of the visible top surface above the fitted support plane
    "flat_on_support",  # grasp: nothing stands out of the support plane (a flat object); bbox centre on it
    "bbox_center",  # grasp: no support plane; median depth of the bbox's centre at its centre pixel
    "depth",  # place: median depth around the place pixel
    "ray_local_plane",  # place: depth hole; pixel ray intersected with the surface fitted around it
    "ray_plane",  # place: depth hole and no surface around it; ray intersected with the support plane
    "handle",  # open/close: centre of the part sticking out of the fitted front surface (the handle)
    "ray_surface_plane",  # open/close: no handle; bbox-centre ray intersected with the surface fitted in the bbox
    "surface_centroid",  # open/close: no handle, bbox centre off the surface; centre of the visible surface
    "bbox_median",  # open/close: no plane fits; median depth around the bbox centre
)


@dataclass
class TargetConfig:
    """Tuning of :func:`compute_targets`. Defaults suit a RealSense D4xx at 0.3-1.5 m."""

    min_depth_m: float = 0.1  # depth below this is a hole (RealSense min-Z is ~0.1-0.3 m)
    max_depth_m: float = 10.0  # depth above this is a hole (far-range noise)
    plane_threshold_m: float = 0.006  # RANSAC inlier distance for support and surface planes
    ransac_iterations: int = 256  # plane hypotheses per fit
    support_points: int = 20000  # the support plane is fitted on a grid subsample of about this many pixels
    min_support_fraction: float = 0.05  # a support plane must hold at least this fraction of the valid subsample
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)  # gravity "up" in the extrinsics' parent frame
    max_support_tilt_deg: float = 30.0  # with extrinsics, the support plane's normal is within this of `up`
    support_margin_m: float = 0.008  # object points must be higher than this above the support plane
    top_band_m: float = 0.005  # the top surface is the points within this of the object's top
    top_percentile: float = 98.0  # the object's top height is this percentile (ignores flying pixels)
    min_object_points: int = 30  # fewer points above the support than this: fall back to flat_on_support
    round_ratio: float = 1.5  # footprint axis ratio below which the grasp yaw is reported as ambiguous
    place_window_px: int = 5  # side of the window whose median depth is the place depth (odd)
    place_surface_windows_px: tuple[int, ...] = (10, 20, 40)  # half-sizes tried, in turn, to find the surface
    # around a place point in a depth hole (needs 50 valid pixels)
    handle_window_px: int = 9  # side of the window around the bbox centre for the bbox_median fallback
    min_window_valid: float = 0.5  # fraction of valid pixels a window needs to trust its median depth
    min_ray_angle_deg: float = 2.0  # a ray closer than this to parallel with a plane is refused
    front_min_tilt_deg: float = 60.0  # with extrinsics, open/close surfaces are sought first among planes this
    # far from horizontal (drawer fronts, doors), then among all
    handle_min_m: float = 0.01  # a handle sticks out of its surface by at least this...
    handle_max_m: float = 0.08  # ...and at most this
    min_handle_points: int = 12  # fewer protruding pixels than this: no handle, use the surface itself
    handle_band_m: float = 0.015  # the grip is the outermost this much of the handle (a bar's thickness)
    seed: int = 0  # RANSAC seed: the same input gives the same targets

    def __post_init__(self) -> None:
        if not 0 < self.min_depth_m < self.max_depth_m:
            raise InputError(f"need 0 < min_depth_m < max_depth_m, got {self.min_depth_m}, {self.max_depth_m}")
        for name in ("plane_threshold_m", "support_margin_m", "top_band_m"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be > 0 metres, got {getattr(self, name)}")
        if self.ransac_iterations < 1 or self.support_points < 100 or self.min_object_points < 3:
            raise InputError("ransac_iterations >= 1, support_points >= 100 and min_object_points >= 3 are required")
        if not 0 < self.min_support_fraction < 1 or not 0 < self.min_window_valid <= 1:
            raise InputError("min_support_fraction must be in (0, 1) and min_window_valid in (0, 1]")
        if not 0 < self.max_support_tilt_deg < 90 or not 0 <= self.min_ray_angle_deg < 90:
            raise InputError("max_support_tilt_deg must be in (0, 90) and min_ray_angle_deg in [0, 90)")
        if not 0 < self.handle_min_m < self.handle_max_m or self.min_handle_points < 3 or not self.handle_band_m > 0:
            raise InputError("need 0 < handle_min_m < handle_max_m, handle_band_m > 0 and min_handle_points >= 3")
        if not 0 <= self.front_min_tilt_deg < 90:
            raise InputError(f"front_min_tilt_deg must be in [0, 90), got {self.front_min_tilt_deg}")
        if not 50 <= self.top_percentile <= 100 or self.round_ratio < 1:
            raise InputError("top_percentile must be in [50, 100] and round_ratio >= 1")
        if not self.place_surface_windows_px or any(int(h) < 1 for h in self.place_surface_windows_px):
            raise InputError(
                f"place_surface_windows_px must be positive half-sizes, got {self.place_surface_windows_px}"
            )
        for name in ("place_window_px", "handle_window_px"):
            value = getattr(self, name)
            if value < 1 or value % 2 == 0:
                raise InputError(f"{name} must be a positive odd number of pixels, got {value}")
        up = np.asarray(self.up, dtype=float)
        if up.shape != (3,) or not np.all(np.isfinite(up)) or np.linalg.norm(up) == 0:
            raise InputError(f"up must be a non-zero 3-vector, got {self.up!r}")


def compute_targets(
    plan: Any,
    depth_m: np.ndarray,
    camera: CameraModel,
    extrinsics: Extrinsics | None = None,
    config: TargetConfig | None = None,
) -> TargetSet:
    """Turn every action of a grounded plan into a 3D target.

    Parameters
    ----------
    plan : GroundedPlan
        Actions in pixels of an image of ``plan.image_size``; rescaled to the depth image when sizes differ.
    depth_m : ndarray, shape (H, W)
        Depth (Z along the optical axis) in metres, aligned to the camera model; 0 or NaN are holes.
    camera : CameraModel
        Intrinsics of the (colour-aligned) depth image, ``camera.width x camera.height == W x H``.
    extrinsics : Extrinsics, optional
        Camera optical frame -> output frame (``child_frame`` must be the camera's frame when that is known).
        Without it, targets stay in the optical frame.
    config : TargetConfig, optional

    Returns
    -------
    TargetSet
        One target per action, at the action's index, in ``extrinsics.parent_frame`` (or the optical frame).

    Raises
    ------
    GeometryError
        ``DepthImageError`` for a depth image that does not fit the camera; ``ExtrinsicsError`` when frames
        disagree; per action (naming its index and type): ``OutsideImageError``, ``NoValidDepthError``,
        ``RayPlaneError``.
    """
    config = config or TargetConfig()
    solver = _TargetSolver(plan, depth_m, camera, extrinsics, config)
    return solver.run()


def backproject(
    plan: GroundedPlan,
    depth_m: np.ndarray,
    camera: CameraModel,
    extrinsics: Extrinsics | None = None,
    config: TargetConfig | None = None,
) -> GroundedPlan:
    """A copy of ``plan`` whose actions carry their 3D targets (``action.target_3d``); see :func:`compute_targets`.

    The target set's warnings (rescaled pixels, fallbacks used) are appended to the plan's warnings.
    """
    return plan.with_targets(compute_targets(plan, depth_m, camera, extrinsics, config))


class _TargetSolver:
    """State of one :func:`compute_targets` call: the validated depth, the lazily fitted support plane."""

    def __init__(
        self, plan: Any, depth_m: np.ndarray, camera: CameraModel, extrinsics: Extrinsics | None, config: TargetConfig
    ):
        depth = np.asarray(depth_m)
        if depth.ndim != 2 or not np.issubdtype(depth.dtype, np.number):
            raise DepthImageError(
                f"depth image must be a 2-D numeric array (H, W) in metres, got shape {depth.shape} dtype {depth.dtype}"
            )
        if depth.shape != (camera.height, camera.width):
            raise DepthImageError(
                f"depth image is {depth.shape[1]}x{depth.shape[0]} but the camera model is "
                f"{camera.width}x{camera.height}"
            )
        self.depth = depth.astype(float, copy=False)
        with np.errstate(invalid="ignore"):
            self.valid = (
                np.isfinite(self.depth) & (self.depth >= config.min_depth_m) & (self.depth <= config.max_depth_m)
            )
        if extrinsics is not None and camera.frame_id and extrinsics.child_frame != camera.frame_id:
            raise ExtrinsicsError(
                f"extrinsics locate frame {extrinsics.child_frame!r} but the camera's frame is {camera.frame_id!r}",
                rule="frame_mismatch",
            )
        self.plan = plan
        self.camera = camera
        self.extrinsics = extrinsics
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.warnings: list[str] = []
        self.frame = extrinsics.parent_frame if extrinsics is not None else (camera.frame_id or DEFAULT_OPTICAL_FRAME)
        try:
            plan_w, plan_h = (int(v) for v in plan.image_size)
        except (TypeError, ValueError) as exc:
            raise GeometryError(
                f"plan image_size must be [width, height], got {plan.image_size!r}", rule="image_size"
            ) from exc
        if plan_w <= 0 or plan_h <= 0:
            raise GeometryError(f"plan image_size must be positive, got {plan_w}x{plan_h}", rule="image_size")
        self.sx, self.sy = camera.width / plan_w, camera.height / plan_h
        if (plan_w, plan_h) != (camera.width, camera.height):
            self.warnings.append(
                f"plan image is {plan_w}x{plan_h}, depth is {camera.width}x{camera.height}: plan pixels rescaled"
            )
        # Up in the optical frame, known only through extrinsics.
        self.up_cam: np.ndarray | None = None
        if extrinsics is not None:
            up = np.asarray(config.up, dtype=float)
            self.up_cam = extrinsics.rotation_matrix.T @ (up / np.linalg.norm(up))
        self._support: Plane | None = None
        self._support_done = False

    # -- whole plan ---------------------------------------------------------------------------
    def run(self) -> TargetSet:
        targets = []
        handlers = {"grasp": self._grasp, "place": self._place, "open": self._handle, "close": self._handle}
        for index, action in enumerate(self.plan.actions):
            handler = handlers.get(action.type)
            if handler is None:
                raise GeometryError(
                    f"unknown action type {action.type!r}", index=index, action=str(action.type), rule="action_type"
                )
            target, closing_axis_cam = handler(index, action)
            targets.append(self._to_output(target, closing_axis_cam))
        return TargetSet(frame=self.frame, targets=targets, warnings=self.warnings)

    def _to_output(self, target: Target, closing_axis_cam: np.ndarray | None) -> Target:
        """Move a target from the optical frame into the output frame; the grasp yaw is measured there."""
        if self.extrinsics is not None:
            target.position = self.extrinsics.transform_points(target.position)[0]
            if target.normal is not None:
                target.normal = self.extrinsics.transform_vectors(target.normal)[0]
        if closing_axis_cam is not None:
            axis = closing_axis_cam
            if self.extrinsics is not None:
                axis = self.extrinsics.transform_vectors(axis)[0]
            # a parallel gripper is symmetric: folded into (-pi/2, pi/2]
            target.yaw = fold_half_turn(math.atan2(axis[1], axis[0]))
        return target

    # -- shared pieces ------------------------------------------------------------------------
    def _along_reach(self, position_cam: np.ndarray) -> np.ndarray | None:
        """The horizontal direction (optical frame) from the output frame's origin (the robot base, with
        extrinsics) out to a point: the line a top-down hand reaches along. None without extrinsics (the optical
        frame's origin is the camera, not the arm) or for a point straight above the origin."""
        if self.extrinsics is None:
            return None
        p = self.extrinsics.transform_points(position_cam)[0]
        up = np.asarray(self.config.up, float)
        up = up / np.linalg.norm(up)
        along = p - (p @ up) * up
        if np.linalg.norm(along) < 1e-9:
            return None
        return self.extrinsics.rotation_matrix.T @ (along / np.linalg.norm(along))

    def support_plane(self) -> Plane | None:
        """The dominant plane of the scene (the table), fitted once on a grid subsample; None if none fits."""
        if self._support_done:
            return self._support
        self._support_done = True
        cfg = self.config
        h, w = self.depth.shape
        stride = max(1, int(math.sqrt(h * w / cfg.support_points)))
        v, u = np.mgrid[0:h:stride, 0:w:stride]
        ok = self.valid[v, u]
        if ok.sum() < 100:
            self.warnings.append("too few valid depth pixels to fit a support plane")
            return None
        points = self.camera.deproject(u[ok], v[ok], self.depth[v[ok], u[ok]])
        plane = fit_plane_ransac(
            points,
            cfg.plane_threshold_m,
            self.rng,
            iterations=cfg.ransac_iterations,
            up=self.up_cam,
            max_tilt_deg=cfg.max_support_tilt_deg,
            min_inliers=int(cfg.min_support_fraction * len(points)),
        )
        if plane is None:
            within = f" within {cfg.max_support_tilt_deg:g} deg of up" if self.up_cam is not None else ""
            self.warnings.append(f"no support plane found{within}")
        self._support = plane
        return plane

    def _bbox_pixels(self, index: int, action: Any) -> tuple[slice, slice, tuple[float, ...]]:
        """Rows and columns of the depth pixels whose centres lie inside the action's bbox."""
        if action.bbox is None:
            raise GeometryError(f"a {action.type} needs a bbox", index=index, action=action.type, rule="bbox_required")
        x1, y1, x2, y2 = (
            float(action.bbox[0]) * self.sx,
            float(action.bbox[1]) * self.sy,
            float(action.bbox[2]) * self.sx,
            float(action.bbox[3]) * self.sy,
        )
        w, h = self.camera.width, self.camera.height
        tol = 1e-6
        if not (x1 < x2 and y1 < y2) or x1 < -tol or y1 < -tol or x2 > w + tol or y2 > h + tol:
            raise OutsideImageError(
                f"bbox {list(action.bbox)} is not a box inside the {w}x{h} depth image", index=index, action=action.type
            )
        c0, c1 = max(0, math.ceil(x1 - 0.5)), min(w - 1, math.floor(x2 - 0.5))
        r0, r1 = max(0, math.ceil(y1 - 0.5)), min(h - 1, math.floor(y2 - 0.5))
        if c1 < c0 or r1 < r0:
            raise NoValidDepthError(f"bbox {list(action.bbox)} covers no pixel centre", index=index, action=action.type)
        return slice(r0, r1 + 1), slice(c0, c1 + 1), (x1, y1, x2, y2)

    def _pixel(self, index: int, action: Any, x: float, y: float) -> tuple[float, float]:
        """Plan point (continuous coordinates) -> camera pixel (centres at integers), checked inside the image."""
        xs, ys = x * self.sx, y * self.sy
        if not (0 <= xs <= self.camera.width and 0 <= ys <= self.camera.height and math.isfinite(xs + ys)):
            raise OutsideImageError(
                f"point {[x, y]} lies outside the {self.camera.width}x{self.camera.height} depth image",
                index=index,
                action=action.type,
            )
        return xs - 0.5, ys - 0.5

    def _window_depth(self, u: float, v: float, size: int) -> tuple[float | None, float]:
        """Median valid depth in a size x size window centred on pixel (u, v), and the window's valid fraction."""
        r = size // 2
        cu, cv = int(round(u)), int(round(v))
        rows = slice(max(0, cv - r), min(self.camera.height, cv + r + 1))
        cols = slice(max(0, cu - r), min(self.camera.width, cu + r + 1))
        ok = self.valid[rows, cols]
        fraction = float(ok.mean()) if ok.size else 0.0
        if fraction < self.config.min_window_valid:
            return None, fraction
        return float(np.median(self.depth[rows, cols][ok])), fraction

    def _ray(self, u: float, v: float) -> np.ndarray:
        x, y = self.camera.normalized(np.array([u]), np.array([v]))
        return np.array([x[0], y[0], 1.0])

    def _intersect(self, index: int, action: Any, plane: Plane, ray: np.ndarray, what: str) -> np.ndarray:
        t, angle_deg = plane.ray_parameter(ray)
        if angle_deg < self.config.min_ray_angle_deg or not math.isfinite(t):
            raise RayPlaneError(
                f"the pixel ray is parallel to the {what} ({angle_deg:.2f} deg, need >= "
                f"{self.config.min_ray_angle_deg:g} deg)",
                index=index,
                action=action.type,
                rule="ray_parallel",
            )
        if t <= 0:
            raise RayPlaneError(
                f"the {what} lies behind the camera along the pixel ray",
                index=index,
                action=action.type,
                rule="plane_behind_camera",
            )
        return ray * t

    def _bbox_points(self, index: int, action: Any) -> tuple[np.ndarray, np.ndarray, float, tuple[slice, slice]]:
        """Valid points (N, 3) inside the bbox, their (row, col) pixel indices (N, 2) and the valid fraction."""
        rows, cols, _ = self._bbox_pixels(index, action)
        ok = self.valid[rows, cols]
        if not ok.any():
            raise NoValidDepthError(
                f"no valid depth in bbox {list(action.bbox)} ({ok.size} pixels, all holes or "
                f"outside {self.config.min_depth_m:g}-{self.config.max_depth_m:g} m)",
                index=index,
                action=action.type,
            )
        rr, cc = np.nonzero(ok)
        rr, cc = rr + rows.start, cc + cols.start
        points = self.camera.deproject(cc, rr, self.depth[rr, cc])
        return points, np.stack([rr, cc], axis=1), float(ok.mean()), (rows, cols)

    # -- primitives ---------------------------------------------------------------------------
    def _grasp(self, index: int, action: Any) -> tuple[Target, np.ndarray | None]:
        cfg = self.config
        points, pix, valid_fraction, (rows, cols) = self._bbox_points(index, action)
        plane = self.support_plane()
        height = plane.signed_distance(points) if plane is not None else None
        above = height > cfg.support_margin_m if height is not None else None
        if plane is None or int(above.sum()) < cfg.min_object_points:
            return self._grasp_fallback(index, action, points, valid_fraction, plane)
        keep = _pick_component(
            pix[above] - [rows.start, cols.start], (rows.stop - rows.start, cols.stop - cols.start), central=True
        )
        obj = points[above][keep]
        obj_h = height[above][keep]
        top_h = float(np.percentile(obj_h, cfg.top_percentile))
        top = obj_h >= top_h - cfg.top_band_m
        top_pts = obj[top]
        # Each pixel sees a patch of area ~ z^3 / |n . p| on a surface with normal n: weight by it so
        # the near side of the top face (more pixels) does not pull the centre towards the camera.
        weights = top_pts[:, 2] ** 3 / np.maximum(np.abs(top_pts @ plane.normal), 1e-9)
        position = (weights[:, None] * top_pts).sum(axis=0) / weights.sum()
        major, minor, ratio = _footprint_axes(top_pts, weights, plane.normal)
        if ratio < cfg.round_ratio:
            # A square's second moments are the same in every direction, so its principal axes fall anywhere (a
            # block turned 20 deg got jaws across its diagonal and slipped out): close across the footprint's
            # narrowest width instead, which is across a square's sides and anywhere on a disc. Of a square's two
            # sides, the jaws close along the line the arm reaches out on (measured on the simulated SO-101, whose
            # hinged jaw lost 18 mm blocks it closed on from the side: 5 of 80 trials against 0 of 80)
            minor = _narrowest_axis(top_pts, plane.normal, self._along_reach(position))
            self.warnings.append(
                f"action {index} (grasp {action.object!r}): footprint is nearly round "
                f"(axis ratio {ratio:.2f}); closing across its narrowest width"
            )
        width = _extent(obj, minor)
        n_obj = len(obj)
        confidence = valid_fraction * min(1.0, n_obj / (4.0 * cfg.min_object_points))
        target = Target(
            index,
            "grasp",
            action.object,
            position,
            None,
            width,
            plane.normal.copy(),
            "top_surface",
            round(confidence, 3),
        )
        return target, minor

    def _grasp_fallback(
        self, index: int, action: Any, points: np.ndarray, valid_fraction: float, plane: Plane | None
    ) -> tuple[Target, np.ndarray | None]:
        """Fallbacks when no object stands out of a support plane.

        With a support plane (a flat object: a card, a cloth, thinner than ``support_margin_m``) the bbox-centre
        ray meets the plane (``flat_on_support``); without one, the median depth of the bbox's central third at
        its centre pixel (``bbox_center``). Yaw and width come from the principal axes of the bbox's points.
        """
        cfg = self.config
        _, _, (x1, y1, x2, y2) = self._bbox_pixels(index, action)
        u, v = (x1 + x2) / 2 - 0.5, (y1 + y2) / 2 - 0.5
        ray = self._ray(u, v)
        if plane is not None:
            position = self._intersect(index, action, plane, ray, "support plane")
            normal = plane.normal.copy()
            method, reason = (
                "flat_on_support",
                f"fewer than {cfg.min_object_points} points stand out of the support plane",
            )
        else:
            if len(points) < 3:
                raise NoValidDepthError(
                    f"only {len(points)} valid depth pixels in bbox {list(action.bbox)}", index=index, action="grasp"
                )
            centre = self._central_depth(x1, y1, x2, y2)
            if centre is None:
                raise NoValidDepthError(
                    f"no valid depth in the central third of bbox {list(action.bbox)} and no support plane",
                    index=index,
                    action="grasp",
                )
            position = ray * centre
            normal = self.up_cam.copy() if self.up_cam is not None else -ray / np.linalg.norm(ray)
            method, reason = "bbox_center", "no support plane"
        _, minor, _ = _footprint_axes(points, np.ones(len(points)), normal)
        width = _extent(points, minor)
        self.warnings.append(f"action {index} (grasp {action.object!r}): {reason}; used {method}")
        return Target(
            index, "grasp", action.object, position, None, width, normal, method, round(0.3 * valid_fraction, 3)
        ), minor

    def _central_depth(self, x1: float, y1: float, x2: float, y2: float) -> float | None:
        """Median valid depth of the middle third (each way) of a bbox given in depth-image coordinates."""
        w, h = x2 - x1, y2 - y1
        c0, c1 = math.floor(x1 + w / 3), math.ceil(x2 - w / 3)
        r0, r1 = math.floor(y1 + h / 3), math.ceil(y2 - h / 3)
        ok = self.valid[r0:r1, c0:c1]
        return float(np.median(self.depth[r0:r1, c0:c1][ok])) if ok.any() else None

    def _place(self, index: int, action: Any) -> tuple[Target, np.ndarray | None]:
        cfg = self.config
        if action.point is None:
            raise GeometryError("a place needs a point", index=index, action="place", rule="point_required")
        u, v = self._pixel(index, action, float(action.point[0]), float(action.point[1]))
        ray = self._ray(u, v)
        depth, fraction = self._window_depth(u, v, cfg.place_window_px)
        plane = self.support_plane()
        normal = None if plane is None else plane.normal.copy()
        # The object being placed: the place's own field, else the grasp before it.
        held = action.object or (self.plan.actions[index - 1].object if index > 0 else "")
        if depth is not None:
            return Target(index, "place", held, ray * depth, None, None, normal, "depth", round(fraction, 3)), None
        # A hole: first the surface around the point (the top of a box, a shelf), then the support plane.
        local = self._surface_around(u, v, plane)
        if local is not None:
            position = self._intersect(index, action, local, ray, "surface around the place point")
            self.warnings.append(
                f"action {index} (place): depth missing at {list(action.point)}; used the surface around it"
            )
            return Target(
                index,
                "place",
                held,
                position,
                None,
                None,
                local.normal.copy(),
                "ray_local_plane",
                round(local.inlier_fraction, 3),
            ), None
        if plane is None:
            raise NoValidDepthError(
                f"no valid depth at place point {list(action.point)} and no support plane to intersect its ray with",
                index=index,
                action="place",
            )
        position = self._intersect(index, action, plane, ray, "support plane")
        self.warnings.append(f"action {index} (place): depth missing at {list(action.point)}; used the support plane")
        return Target(
            index, "place", held, position, None, None, normal, "ray_plane", round(plane.inlier_fraction, 3)
        ), None

    def _surface_around(self, u: float, v: float, support: Plane | None) -> Plane | None:
        """A plane that most valid pixels around (u, v) lie on, growing the window past the hole; None if mixed.

        With a support plane, the surface must be parallel to it within ``max_support_tilt_deg`` (a place
        surface is horizontal); a window where no single plane holds most points gives None.
        """
        cfg = self.config
        cu, cv = int(round(u)), int(round(v))
        for half in cfg.place_surface_windows_px:
            rows = slice(max(0, cv - half), min(self.camera.height, cv + half + 1))
            cols = slice(max(0, cu - half), min(self.camera.width, cu + half + 1))
            ok = self.valid[rows, cols]
            if ok.sum() < 50:
                continue
            rr, cc = np.nonzero(ok)
            rr, cc = rr + rows.start, cc + cols.start
            points = self.camera.deproject(cc, rr, self.depth[rr, cc])
            plane = fit_plane_ransac(
                points,
                cfg.plane_threshold_m,
                self.rng,
                iterations=cfg.ransac_iterations,
                min_inliers=int(0.7 * len(points)),
            )
            if plane is None:
                return None
            if support is not None:
                if plane.normal @ support.normal < 0:
                    plane = Plane(-plane.normal, -plane.offset, plane.inlier_fraction)
                if plane.normal @ support.normal < math.cos(math.radians(cfg.max_support_tilt_deg)):
                    return None
            return plane
        return None

    def _handle(self, index: int, action: Any) -> tuple[Target, np.ndarray | None]:
        """open/close: the surface in the bbox (a drawer front, a door), its outward normal and the handle on it."""
        cfg = self.config
        points, pix, valid_fraction, (rows, cols) = self._bbox_points(index, action)
        _, _, (x1, y1, x2, y2) = self._bbox_pixels(index, action)
        u, v = (x1 + x2) / 2 - 0.5, (y1 + y2) / 2 - 0.5
        ray = self._ray(u, v)
        # The table under a drawer is not its front: drop support points when there are enough others.
        support = self.support_plane()
        if support is not None:
            off_support = support.signed_distance(points) > cfg.support_margin_m
            if off_support.sum() >= 10:
                points, pix = points[off_support], pix[off_support]
        plane = None
        min_inliers = max(10, int(0.2 * len(points)))
        if self.up_cam is not None:
            plane = fit_plane_ransac(
                points,
                cfg.plane_threshold_m,
                self.rng,
                iterations=cfg.ransac_iterations,
                up=self.up_cam,
                min_tilt_deg=cfg.front_min_tilt_deg,
                min_inliers=min_inliers,
            )
        if plane is None:
            plane = fit_plane_ransac(
                points, cfg.plane_threshold_m, self.rng, iterations=cfg.ransac_iterations, min_inliers=min_inliers
            )
        if plane is None:
            depth, _ = self._window_depth(u, v, cfg.handle_window_px)
            if depth is None:
                depth = float(np.median(points[:, 2]))
            self.warnings.append(f"action {index} ({action.type}): no plane fits the bbox; normal is the viewing ray")
            normal = -ray / np.linalg.norm(ray)
            return Target(
                index,
                action.type,
                action.object,
                ray * depth,
                None,
                None,
                normal,
                "bbox_median",
                round(0.5 * valid_fraction, 3),
            ), None
        confidence = round(valid_fraction * plane.inlier_fraction, 3)
        normal = plane.normal.copy()
        distance = plane.signed_distance(points)
        # The handle: the blob of pixels standing out of the surface towards the camera.
        sticking_out = (distance > cfg.handle_min_m) & (distance < cfg.handle_max_m)
        if sticking_out.sum() >= cfg.min_handle_points:
            keep = _pick_component(
                pix[sticking_out] - [rows.start, cols.start],
                (rows.stop - rows.start, cols.stop - cols.start),
                central=False,
            )
            if keep.sum() >= cfg.min_handle_points:
                # The outermost handle_band_m of the blob: the grip bar (not its posts); seen from above it holds
                # the bar's top as well as its front, so the centroid sits near the bar's middle.
                handle, handle_d = points[sticking_out][keep], distance[sticking_out][keep]
                grip = handle_d >= np.percentile(handle_d, cfg.top_percentile) - cfg.handle_band_m
                position = handle[grip].mean(axis=0)
                return Target(
                    index, action.type, action.object, position, None, None, normal, "handle", confidence
                ), None
        inliers = points[np.abs(distance) < cfg.plane_threshold_m]
        hit = self._intersect(index, action, plane, ray, "surface in the bbox")
        # "bbox centre on the surface" only while that point is on the visible surface, not its extension.
        if np.min(np.linalg.norm(inliers - hit, axis=1)) < 2 * cfg.plane_threshold_m:
            return Target(
                index, action.type, action.object, hit, None, None, normal, "ray_surface_plane", confidence
            ), None
        weights = inliers[:, 2] ** 3 / np.maximum(np.abs(inliers @ normal), 1e-9)
        position = (weights[:, None] * inliers).sum(axis=0) / weights.sum()
        return Target(
            index, action.type, action.object, position, None, None, normal, "surface_centroid", confidence
        ), None


def _footprint_axes(
    points: np.ndarray, weights: np.ndarray, normal: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Principal axes of points projected onto the plane with ``normal``.

    Returns
    -------
    major, minor : ndarray, shape (3,)
        Unit in-plane directions of the largest and smallest spread.
    ratio : float
        sqrt(var_major / var_minor), >= 1 (inf for a line).
    """
    e1, e2 = _in_plane_basis(normal)
    q = np.stack([points @ e1, points @ e2], axis=1)
    w = weights / weights.sum()
    mean = w @ q
    d = q - mean
    cov = (d * w[:, None]).T @ d
    evals, evecs = np.linalg.eigh(cov)  # ascending
    minor2, major2 = evecs[:, 0], evecs[:, 1]
    major = major2[0] * e1 + major2[1] * e2
    minor = minor2[0] * e1 + minor2[1] * e2
    ratio = math.sqrt(evals[1] / evals[0]) if evals[0] > 0 else math.inf
    return major, minor, ratio


def _in_plane_basis(normal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An orthonormal basis (e1, e2) of the plane with ``normal``."""
    n = normal / np.linalg.norm(normal)
    helper = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = np.cross(n, helper)
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(n, e1)


def _convex_hull_2d(q: np.ndarray) -> np.ndarray:
    """Vertices (M, 2) of the convex hull of 2-D points (Andrew's monotone chain), counter-clockwise."""
    pts = np.unique(q, axis=0)
    if len(pts) < 3:
        return pts

    def _turn(o, a, b) -> float:  # > 0: o -> a -> b turns counter-clockwise
        return float((a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]))

    def chain(points) -> list:
        out: list = []
        for p in points:
            while len(out) >= 2 and _turn(out[-2], out[-1], p) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = chain(pts), chain(pts[::-1])
    return np.array(lower[:-1] + upper[:-1])


def _narrowest_axis(
    points: np.ndarray, normal: np.ndarray, prefer: np.ndarray | None = None, tie: float = 0.08
) -> np.ndarray:
    """Unit in-plane direction (3,) across which the points' footprint is narrowest: the width across each
    direction (half a degree apart) from the convex hull. Narrow directions that are local minima within ``tie`` (a
    fraction) of the narrowest are the same grasp (a square's two sides): of those, the one nearest ``prefer``
    (either sign) when given."""
    e1, e2 = _in_plane_basis(normal)
    hull = _convex_hull_2d(np.stack([points @ e1, points @ e2], axis=1))
    angles = np.linspace(0.0, math.pi, 360, endpoint=False)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    spans = hull @ directions.T  # (vertices, directions)
    widths = spans.max(axis=0) - spans.min(axis=0)
    best = int(np.argmin(widths))
    if prefer is not None:
        minima = np.flatnonzero(
            (widths <= np.roll(widths, 1)) & (widths <= np.roll(widths, -1)) & (widths <= widths[best] * (1.0 + tie))
        )
        want = np.array([float(prefer @ e1), float(prefer @ e2)])
        best = int(minima[np.argmax(np.abs(directions[minima] @ want))])
    across = directions[best]
    return across[0] * e1 + across[1] * e2


def _extent(points: np.ndarray, axis: np.ndarray, lo: float = 1.0, hi: float = 99.0) -> float:
    """Robust extent (percentile range) of points along an in-plane axis, metres."""
    low, high = np.percentile(points @ axis, [lo, hi])
    return float(high - low)


def _pick_component(pix: np.ndarray, shape: tuple[int, int], central: bool) -> np.ndarray:
    """Mask (N,) of the pixels of one 8-connected blob of the given (row, col) pixels of a bbox of ``shape``.

    ``central``: the blob that fills most of the bbox's middle half (a grounded bbox is centred on its object;
    a neighbour poking into a loose bbox sits at its edges and can be the larger blob), ties going to the
    larger. Otherwise the largest blob.
    """
    mask = np.zeros(shape, dtype=np.uint8)
    mask[pix[:, 0], pix[:, 1]] = 1
    try:
        import cv2  # lazy: optional SDK (cv2), not in install_requires
    except ImportError:  # the geometry extra brings OpenCV; without it every pixel counts
        return np.ones(len(pix), dtype=bool)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    if n <= 2:
        return np.ones(len(pix), dtype=bool)
    area = stats[1:, cv2.CC_STAT_AREA]
    if central:
        h, w = shape
        middle = labels[h // 4 : h - h // 4, w // 4 : w - w // 4]
        in_middle = np.bincount(middle.ravel(), minlength=n)[1:]
        best = 1 + int(np.lexsort((area, in_middle))[-1])
    else:
        best = 1 + int(np.argmax(area))
    return labels[pix[:, 0], pix[:, 1]] == best
