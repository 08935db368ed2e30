"""Synthetic RGB-D tabletop scenes rendered by ray casting: known geometry for tests, benchmarks and demos.

The world frame has z up with the table top at ``table_z``; the camera is placed with :func:`look_at`. Rays are
built from K directly (and OpenCV's undistortion when the camera has distortion), not through
:class:`CameraModel`'s own deprojection, so tests of that deprojection are not circular.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.geometry.transforms import matrix_to_quat


@dataclass
class Box:
    """A box on the table: footprint centre (x, y), size (lx, ly, lz) metres, yaw about z (rad).

    ``base_z`` lifts its bottom above the table (a drawer handle, a shelf board).
    """

    name: str
    center_xy: tuple[float, float]
    size: tuple[float, float, float]
    yaw: float = 0.0
    base_z: float = 0.0

    def top_center(self, table_z: float) -> np.ndarray:
        return np.array([self.center_xy[0], self.center_xy[1], table_z + self.base_z + self.size[2]])

    def closing_yaw(self) -> float:
        """Yaw (rad, folded to (-pi/2, pi/2]) of the short footprint side: where a parallel gripper closes."""
        yaw = self.yaw + (math.pi / 2 if self.size[0] >= self.size[1] else 0.0)
        return _fold(yaw)


@dataclass
class Cylinder:
    """An upright cylinder on the table."""

    name: str
    center_xy: tuple[float, float]
    radius: float
    height: float

    def top_center(self, table_z: float) -> np.ndarray:
        return np.array([self.center_xy[0], self.center_xy[1], table_z + self.height])


@dataclass
class Panel:
    """A vertical rectangle (a drawer front or door): centre (3,), outward horizontal normal, width x height."""

    name: str
    center: tuple[float, float, float]
    normal_xy: tuple[float, float]
    width: float
    height: float

    @property
    def normal(self) -> np.ndarray:
        n = np.array([self.normal_xy[0], self.normal_xy[1], 0.0])
        return n / np.linalg.norm(n)


@dataclass
class Scene:
    """A camera over a (finite) table with objects; ``cam2world`` maps the optical frame to ``world``."""

    camera: CameraModel
    cam2world: Extrinsics
    objects: list = field(default_factory=list)
    table_z: float = 0.0
    table_extent: tuple[float, float, float, float] = (-0.6, 0.6, -0.6, 0.6)  # xmin, xmax, ymin, ymax

    def rays_world(self) -> np.ndarray:
        """Ray directions (H, W, 3) in the world frame, scaled so that the optical-frame z component is 1."""
        cam = self.camera
        v, u = np.mgrid[0:cam.height, 0:cam.width].astype(float)
        if cam.has_distortion:
            import cv2

            pts = np.stack([u.ravel(), v.ravel()], axis=1).reshape(-1, 1, 2)
            criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 20, 1e-12)  # converged to ~1e-11 px
            und = cv2.undistortPointsIter(pts, cam.K, cam.D, None, None, criteria).reshape(cam.height, cam.width, 2)
            x, y = und[..., 0], und[..., 1]
        else:
            y = (v - cam.K[1, 2]) / cam.K[1, 1]
            x = (u - cam.K[0, 2] - cam.K[0, 1] * y) / cam.K[0, 0]
        rays_cam = np.stack([x, y, np.ones_like(x)], axis=-1)
        return rays_cam @ self.cam2world.rotation_matrix.T

    def render(self) -> tuple[np.ndarray, np.ndarray]:
        """Ray-cast the scene.

        Returns
        -------
        depth_m : ndarray, shape (H, W)
            Optical-axis depth in metres; 0 where a ray hits nothing.
        labels : ndarray, shape (H, W), int
            -1 nothing, 0 table, k + 1 for ``objects[k]``.
        """
        rays = self.rays_world()
        o = self.cam2world.translation
        h, w = rays.shape[:2]
        depth = np.full((h, w), np.inf)
        labels = np.full((h, w), -1, dtype=int)
        rz = rays[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (self.table_z - o[2]) / rz
        hit = o[:2] + t[..., None] * rays[..., :2]
        xmin, xmax, ymin, ymax = self.table_extent
        ok = (t > 0) & (hit[..., 0] >= xmin) & (hit[..., 0] <= xmax) & (hit[..., 1] >= ymin) & (hit[..., 1] <= ymax)
        depth[ok] = t[ok]
        labels[ok] = 0
        for k, obj in enumerate(self.objects):
            if isinstance(obj, Box):
                t = _hit_box(o, rays, obj, self.table_z)
            elif isinstance(obj, Cylinder):
                t = _hit_cylinder(o, rays, obj, self.table_z)
            elif isinstance(obj, Panel):
                t = _hit_panel(o, rays, obj)
            else:
                raise TypeError(f"unknown scene object {obj!r}")
            closer = t < depth
            depth[closer] = t[closer]
            labels[closer] = k + 1
        depth[~np.isfinite(depth)] = 0.0
        return depth, labels

    def bbox_of(self, k: int, labels: np.ndarray, pad_px: int = 4) -> tuple[float, float, float, float]:
        """Plan bbox (continuous pixel coordinates) around the visible pixels of ``objects[k]``, padded."""
        rr, cc = np.nonzero(labels == k + 1)
        if rr.size == 0:
            raise ValueError(f"object {k} is not visible")
        h, w = labels.shape
        return (float(max(0, cc.min() - pad_px)), float(max(0, rr.min() - pad_px)),
                float(min(w, cc.max() + 1 + pad_px)), float(min(h, rr.max() + 1 + pad_px)))

    def pixel_of(self, point_world: np.ndarray) -> tuple[float, float]:
        """Plan coordinates (continuous: pixel centre + 0.5) of a world point, without distortion."""
        p = self.cam2world.inverse().transform_points(point_world)[0]
        u = self.camera.K[0, 0] * p[0] / p[2] + self.camera.K[0, 2]
        v = self.camera.K[1, 1] * p[1] / p[2] + self.camera.K[1, 2]
        return u + 0.5, v + 0.5

    def ray_world(self, x: float, y: float) -> np.ndarray:
        """World ray direction (3,) through plan coordinates (x, y), optical z component 1 (no distortion)."""
        u, v = x - 0.5, y - 0.5
        yn = (v - self.camera.K[1, 2]) / self.camera.K[1, 1]
        xn = (u - self.camera.K[0, 2]) / self.camera.K[0, 0]
        return self.cam2world.rotation_matrix @ np.array([xn, yn, 1.0])


def look_at(eye: np.ndarray, target: np.ndarray, up: np.ndarray = (0.0, 0.0, 1.0), parent_frame: str = "world",
            child_frame: str = "camera_color_optical_frame") -> Extrinsics:
    """Optical-frame pose (z forward, x right, y down) of a camera at ``eye`` looking at ``target``."""
    eye, target, up = (np.asarray(v, dtype=float) for v in (eye, target, up))
    z = target - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, up)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z], axis=1)
    return Extrinsics(parent_frame, child_frame, eye, matrix_to_quat(R))


def realsense_camera(width: int = 1280, height: int = 720, frame_id: str = "camera_color_optical_frame",
                     D: tuple[float, ...] = ()) -> CameraModel:
    """Intrinsics like a D435 colour stream at the given size (about 69 x 42 deg field of view)."""
    f = 0.72 * width
    return CameraModel.from_camera_info([[f, 0, width / 2 - 0.7], [0, f, height / 2 + 1.3], [0, 0, 1]],
                                        list(D), width, height, "plumb_bob", frame_id)


def add_holes(depth_m: np.ndarray, rng: np.random.Generator, n_holes: int = 20, max_radius_px: int = 12) -> np.ndarray:
    """A copy of ``depth_m`` with ``n_holes`` random discs set to 0 (missing depth)."""
    out = depth_m.copy()
    h, w = out.shape
    v, u = np.mgrid[0:h, 0:w]
    for _ in range(n_holes):
        cu, cv, r = rng.integers(0, w), rng.integers(0, h), rng.integers(2, max_radius_px + 1)
        out[(u - cu) ** 2 + (v - cv) ** 2 <= r * r] = 0.0
    return out


def to_depth_units(depth_m: np.ndarray, rng: np.random.Generator | None = None, noise_m: float = 0.0,
                   depth_scale: float = 0.001) -> np.ndarray:
    """Depth as a 16UC1 image in ``depth_scale`` units (1 mm like a D4xx), with optional Gaussian noise."""
    d = depth_m.astype(float)
    if noise_m > 0 and rng is not None:
        d = d + rng.normal(0.0, noise_m, d.shape) * (d > 0)
    return np.clip(np.round(d / depth_scale), 0, 65535).astype(np.uint16) * (depth_m > 0)


def render_board_view(board_image: np.ndarray, square_length_m: float, px_per_square: int, camera: CameraModel,
                      target2cam: np.ndarray, background: int = 140) -> np.ndarray:
    """A pinhole (undistorted) camera image of a flat printed board at a known pose, by a homography warp.

    Parameters
    ----------
    board_image : ndarray, shape (h, w) uint8
        The board as generated (no margin), ``px_per_square`` pixels per square of ``square_length_m``.
    target2cam : ndarray, shape (4, 4)
        Board frame (x right, y down along the image, z into the board) in the optical frame.

    Returns
    -------
    image : ndarray, shape (camera.height, camera.width) uint8
    """
    import cv2

    s = square_length_m / px_per_square
    # Board pixel (centre convention) -> board metres -> camera pixel.
    A = np.array([[s, 0, 0.5 * s], [0, s, 0.5 * s], [0, 0, 1.0]])
    H = camera.K @ np.column_stack([target2cam[:3, 0], target2cam[:3, 1], target2cam[:3, 3]]) @ A
    # Pre-blur so the warp (bilinear, no area filter) does not alias when it shrinks the board.
    src = cv2.GaussianBlur(board_image, (0, 0), 0.6)
    return cv2.warpPerspective(src, H, (camera.width, camera.height), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=int(background))


def _fold(yaw: float) -> float:
    while yaw <= -math.pi / 2:
        yaw += math.pi
    while yaw > math.pi / 2:
        yaw -= math.pi
    return yaw


def _hit_box(o: np.ndarray, rays: np.ndarray, box: Box, table_z: float) -> np.ndarray:
    c, s = math.cos(box.yaw), math.sin(box.yaw)
    Rt = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])  # world -> box axes
    centre = np.array([box.center_xy[0], box.center_xy[1], table_z + box.base_z + box.size[2] / 2])
    ol = Rt @ (o - centre)
    rl = rays @ Rt.T
    half = np.asarray(box.size) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = (-half - ol) / rl
        t2 = (half - ol) / rl
    tmin = np.nanmax(np.minimum(t1, t2), axis=-1)
    tmax = np.nanmin(np.maximum(t1, t2), axis=-1)
    hit = (tmax >= tmin) & (tmax > 0)
    return np.where(hit, np.where(tmin > 0, tmin, np.inf), np.inf)


def _hit_cylinder(o: np.ndarray, rays: np.ndarray, cyl: Cylinder, table_z: float) -> np.ndarray:
    dx, dy = o[0] - cyl.center_xy[0], o[1] - cyl.center_xy[1]
    rx, ry, rz = rays[..., 0], rays[..., 1], rays[..., 2]
    a = rx * rx + ry * ry
    b = 2 * (dx * rx + dy * ry)
    cc = dx * dx + dy * dy - cyl.radius ** 2
    disc = b * b - 4 * a * cc
    out = np.full(rays.shape[:2], np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        t_side = (-b - np.sqrt(disc)) / (2 * a)
        z_side = o[2] + t_side * rz
        side = (disc >= 0) & (t_side > 0) & (z_side >= table_z) & (z_side <= table_z + cyl.height)
        out[side] = t_side[side]
        t_top = (table_z + cyl.height - o[2]) / rz
        px, py = dx + t_top * rx, dy + t_top * ry
        top = (t_top > 0) & (px * px + py * py <= cyl.radius ** 2)
    out[top] = np.minimum(out[top], t_top[top])
    return out


def _hit_panel(o: np.ndarray, rays: np.ndarray, panel: Panel) -> np.ndarray:
    n = panel.normal
    centre = np.asarray(panel.center, dtype=float)
    side = np.array([-n[1], n[0], 0.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = ((centre - o) @ n) / (rays @ n)
    p = o + t[..., None] * rays - centre
    inside = (t > 0) & (np.abs(p @ side) <= panel.width / 2) & (np.abs(p[..., 2]) <= panel.height / 2)
    return np.where(inside, t, np.inf)
