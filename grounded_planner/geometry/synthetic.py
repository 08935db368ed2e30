"""Synthetic RGB-D tabletop scenes rendered by ray casting: known geometry for tests, benchmarks and demos.

The world frame has z up with the table top at ``table_z``; the camera is placed with :func:`look_at`. Rays are
built from K directly (and OpenCV's undistortion when the camera has distortion), not through
:class:`CameraModel`'s own deprojection, so tests of that deprojection are not circular.

``python -m grounded_planner.geometry.synthetic --seed N --out DIR`` writes a held-out scene as the files
``grounded-planner backproject`` reads (plan.json, depth.png, camera.yaml, extrinsics.yaml) plus truth.json.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.geometry.transforms import fold_half_turn, matrix_to_quat
from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.extrinsics import Extrinsics
from PIL import Image
from grounded_planner.plan import GroundedAction, GroundedPlan, save_plan


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
        return fold_half_turn(yaw)


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
        v, u = np.mgrid[0 : cam.height, 0 : cam.width].astype(float)
        if cam.has_distortion:
            import cv2  # lazy: optional SDK (cv2), not in install_requires

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
            raise InputError(f"object {k} is not visible")
        h, w = labels.shape
        return (
            float(max(0, cc.min() - pad_px)),
            float(max(0, rr.min() - pad_px)),
            float(min(w, cc.max() + 1 + pad_px)),
            float(min(h, rr.max() + 1 + pad_px)),
        )

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


def look_at(
    eye: np.ndarray,
    target: np.ndarray,
    up: np.ndarray = (0.0, 0.0, 1.0),
    parent_frame: str = "world",
    child_frame: str = "camera_color_optical_frame",
) -> Extrinsics:
    """Optical-frame pose (z forward, x right, y down) of a camera at ``eye`` looking at ``target``."""
    eye, target, up = (np.asarray(v, dtype=float) for v in (eye, target, up))
    z = target - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, up)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z], axis=1)
    return Extrinsics(parent_frame, child_frame, eye, matrix_to_quat(R))


def realsense_camera(
    width: int = 1280,
    height: int = 720,
    frame_id: str = "camera_color_optical_frame",
    D: tuple[float, ...] = (),
    fy_over_fx: float = 1.0,
    principal_offset_px: tuple[float, float] = (-0.7, 1.3),
) -> CameraModel:
    """Intrinsics like a D435 colour stream at the given size (about 69 x 42 deg field of view).

    ``fy_over_fx`` != 1 (non-square pixels) and a larger ``principal_offset_px`` (cx, cy from the image centre)
    make a swapped fx/fy or cx/cy, or a centred principal point, show in the geometry; a real D435 has fy/fx
    within 0.1 % of 1 and its principal point within a few pixels of the centre, where such bugs hide."""
    f = 0.72 * width
    dx, dy = principal_offset_px
    return CameraModel.from_camera_info(
        [[f, 0, width / 2 + dx], [0, f * fy_over_fx, height / 2 + dy], [0, 0, 1]],
        list(D),
        width,
        height,
        "plumb_bob",
        frame_id,
    )


# The synthetic tabletops' camera: non-square pixels and a principal point well off the centre (see realsense_camera)
TABLETOP_FY_OVER_FX = 1.15
TABLETOP_PRINCIPAL_OFFSET_PX = (-13.7, 9.3)


def add_holes(depth_m: np.ndarray, rng: np.random.Generator, n_holes: int = 20, max_radius_px: int = 12) -> np.ndarray:
    """A copy of ``depth_m`` with ``n_holes`` random discs set to 0 (missing depth)."""
    out = depth_m.copy()
    h, w = out.shape
    v, u = np.mgrid[0:h, 0:w]
    for _ in range(n_holes):
        cu, cv, r = rng.integers(0, w), rng.integers(0, h), rng.integers(2, max_radius_px + 1)
        out[(u - cu) ** 2 + (v - cv) ** 2 <= r * r] = 0.0
    return out


def to_depth_units(
    depth_m: np.ndarray, rng: np.random.Generator | None = None, noise_m: float = 0.0, depth_scale: float = 0.001
) -> np.ndarray:
    """Depth as a 16UC1 image in ``depth_scale`` units (1 mm like a D4xx), with optional Gaussian noise."""
    d = depth_m.astype(float)
    if noise_m > 0 and rng is not None:
        d = d + rng.normal(0.0, noise_m, d.shape) * (d > 0)
    return np.clip(np.round(d / depth_scale), 0, 65535).astype(np.uint16) * (depth_m > 0)


def render_board_view(
    board_image: np.ndarray,
    square_length_m: float,
    px_per_square: int,
    camera: CameraModel,
    target2cam: np.ndarray,
    background: int = 140,
) -> np.ndarray:
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
    import cv2  # lazy: optional SDK (cv2), not in install_requires

    s = square_length_m / px_per_square
    # Board pixel (centre convention) -> board metres -> camera pixel.
    A = np.array([[s, 0, 0.5 * s], [0, s, 0.5 * s], [0, 0, 1.0]])
    H = camera.K @ np.column_stack([target2cam[:3, 0], target2cam[:3, 1], target2cam[:3, 3]]) @ A
    # Pre-blur so the warp (bilinear, no area filter) does not alias when it shrinks the board.
    src = cv2.GaussianBlur(board_image, (0, 0), 0.6)
    return cv2.warpPerspective(
        src,
        H,
        (camera.width, camera.height),
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=int(background),
    )


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
    cc = dx * dx + dy * dy - cyl.radius**2
    disc = b * b - 4 * a * cc
    out = np.full(rays.shape[:2], np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        t_side = (-b - np.sqrt(disc)) / (2 * a)
        z_side = o[2] + t_side * rz
        side = (disc >= 0) & (t_side > 0) & (z_side >= table_z) & (z_side <= table_z + cyl.height)
        out[side] = t_side[side]
        t_top = (table_z + cyl.height - o[2]) / rz
        px, py = dx + t_top * rx, dy + t_top * ry
        top = (t_top > 0) & (px * px + py * py <= cyl.radius**2)
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


def random_camera_pose(
    rng: np.random.Generator, elevation_deg: tuple[float, float] = (40, 60), parent_frame: str = "panda_link0"
) -> Extrinsics:
    """A camera 0.75-0.95 m from the table centre, looking down at it at 40-60 deg from a random side."""
    azimuth = rng.uniform(0, 2 * math.pi)
    elevation = math.radians(rng.uniform(*elevation_deg))
    dist = rng.uniform(0.75, 0.95)
    eye = dist * np.array(
        [math.cos(azimuth) * math.cos(elevation), math.sin(azimuth) * math.cos(elevation), math.sin(elevation)]
    )
    return look_at(eye, [0.0, 0.0, 0.0], parent_frame=parent_frame)


def random_tabletop(
    seed: int,
    width: int = 640,
    height: int = 480,
    D: tuple[float, ...] = (),
    n_holes: int = 25,
    noise_m: float = 0.001,
    elongated_only: bool = False,
) -> tuple[Scene, np.ndarray, np.ndarray]:
    """Three boxes and a cylinder (or four boxes) on cells 0.24 m apart, an oblique camera, holes and noise.

    Returns
    -------
    scene : Scene
    depth_units : ndarray, shape (H, W) uint16
        Depth in millimetres as a D4xx delivers it: noisy, quantised, with holes.
    labels : ndarray, shape (H, W) int
        Of the clean render (see :meth:`Scene.render`).
    """
    rng = np.random.default_rng(seed)
    camera = realsense_camera(
        width, height, D=D, fy_over_fx=TABLETOP_FY_OVER_FX, principal_offset_px=TABLETOP_PRINCIPAL_OFFSET_PX
    )
    cells = [(-0.12, -0.12), (-0.12, 0.12), (0.12, -0.12), (0.12, 0.12)]
    objects: list = []
    for k, (cx, cy) in enumerate(cells):
        xy = (cx + rng.uniform(-0.02, 0.02), cy + rng.uniform(-0.02, 0.02))
        if k == 3 and not elongated_only:
            objects.append(Cylinder(f"can{k}", xy, rng.uniform(0.025, 0.04), rng.uniform(0.06, 0.12)))
        else:
            size = (rng.uniform(0.09, 0.14), rng.uniform(0.03, 0.05), rng.uniform(0.03, 0.09))
            objects.append(Box(f"box{k}", xy, size, rng.uniform(-math.pi, math.pi)))
    scene = Scene(camera, random_camera_pose(rng), objects)
    clean, labels = scene.render()
    return scene, to_depth_units(add_holes(clean, rng, n_holes, 6), rng, noise_m), labels


# Where the generated plans put things down: between the objects' cells, on the table (the first of these
# that no object hides from the camera).
PLACE_POINTS_WORLD = (
    (0.0, 0.02, 0.0),
    (0.0, -0.02, 0.0),
    (0.02, 0.0, 0.0),
    (-0.02, 0.0, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.12, 0.0),
    (0.0, -0.12, 0.0),
    (0.12, 0.0, 0.0),
    (-0.12, 0.0, 0.0),
)


def visible_place_point(scene: Scene, labels: np.ndarray, half_px: int = 6) -> np.ndarray:
    """The first of :data:`PLACE_POINTS_WORLD` whose pixel neighbourhood shows only the table."""
    for candidate in PLACE_POINTS_WORLD:
        x, y = scene.pixel_of(np.asarray(candidate))
        u, v = int(x), int(y)
        window = labels[max(0, v - half_px) : v + half_px + 1, max(0, u - half_px) : u + half_px + 1]
        if window.size and np.all(window == 0):
            return np.asarray(candidate, dtype=float)
    raise InputError("every candidate place point is hidden by an object")


def write_scene_files(seed: int, out_dir: str | Path, width: int = 640, height: int = 480) -> dict:
    """Write a random tabletop as backproject inputs plus its true targets; returns the truth mapping.

    Files: ``plan.json`` (grasp each object, place it at :func:`visible_place_point`), ``depth.png`` (16-bit mm),
    ``camera.yaml``, ``extrinsics.yaml`` and ``truth.json`` (``{"frame", "targets": [{index, type, object,
    position, yaw}]}``: grasp at the true top-face centre with the true closing yaw (None for round objects),
    place at the place pixel's ray on the table).
    """

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    scene, depth_units, labels = random_tabletop(seed, width, height)
    place_px = scene.pixel_of(visible_place_point(scene, labels))
    o = scene.cam2world.translation
    ray = scene.ray_world(*place_px)
    place_true = o + ray * ((scene.table_z - o[2]) / ray[2])
    actions, truth = [], []
    for k, obj in enumerate(scene.objects):
        actions += [
            GroundedAction("grasp", obj.name, bbox=scene.bbox_of(k, labels)),
            GroundedAction("place", obj.name, target="table", point=place_px),
        ]
        yaw = obj.closing_yaw() if isinstance(obj, Box) else None
        truth += [
            {
                "index": 2 * k,
                "type": "grasp",
                "object": obj.name,
                "position": obj.top_center(scene.table_z).tolist(),
                "yaw": yaw,
            },
            {"index": 2 * k + 1, "type": "place", "object": obj.name, "position": place_true.tolist(), "yaw": None},
        ]
    save_plan(GroundedPlan("put everything in the middle", (width, height), actions).validate(), out / "plan.json")
    Image.fromarray(depth_units).save(out / "depth.png")
    scene.camera.save_yaml(out / "camera.yaml")
    scene.cam2world.save(out / "extrinsics.yaml", header=f"true camera pose of synthetic scene {seed}")
    data = {"frame": scene.cam2world.parent_frame, "seed": seed, "targets": truth}
    (out / "truth.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a synthetic RGB-D tabletop scene as backproject inputs "
        "(plan.json, depth.png, camera.yaml, extrinsics.yaml) and truth.json."
    )
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    args = parser.parse_args(argv)
    write_scene_files(args.seed, args.out, args.width, args.height)
    print(Path(args.out) / "truth.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
