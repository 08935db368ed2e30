"""The workcell's RGB-D camera: intrinsics and true extrinsics, offscreen rendering of colour, aligned depth
(with D435-like noise) and segmentation, on one GL thread shared by every caller."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from grounded_planner.errors import RunFailure
from grounded_planner.geometry.camera import CameraModel
from grounded_planner.geometry.extrinsics import Extrinsics
from grounded_planner.sim.scene import camera_axes

log = logging.getLogger(__name__)

BASE_FRAME = "base_link"
CAMERA_FRAME = "camera_color_optical_frame"


class SimError(RunFailure):
    """The simulation cannot do what was asked (no GL for rendering, an unknown object id, ...)."""


class WorkcellCamera:
    """The camera half of :class:`~grounded_planner.sim.workcell.SimWorkcell` (a mixin: it reads the workcell's
    public ``mujoco``, ``model``, ``data``, ``lock`` and ``scenario``; what else it needs is given to
    :meth:`_init_camera`)."""

    def _init_camera(self, camera_id: int, noise_rng: np.random.Generator) -> None:
        """``camera_id``: the MuJoCo camera that renders; ``noise_rng``: draws the depth noise and holes (the
        workcell's seeded generator, so that a seed gives the same frames)."""
        self._render_camera_id = camera_id
        self._noise_rng = noise_rng
        # every GL context lives on one thread of its own: EGL/OSMesa contexts cannot move between threads, and
        # a ROS camera thread, the executor's thread and the main thread may all ask for frames
        self._gl = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-render")
        self._renderers: dict[tuple[int, int], object] = {}
        self._render_lock = threading.Lock()  # one frame at a time: a renderer's scene is shared state

    @property
    def camera_model(self):
        """The colour camera's intrinsics as a geometry-layer ``CameraModel`` (depth is aligned to it)."""
        cam = self.scenario.camera
        # OpenGL's principal point is the image centre; in pixel-centre coordinates that is (w-1)/2, (h-1)/2
        K = [[cam.fy_px, 0.0, (cam.width - 1) / 2], [0.0, cam.fy_px, (cam.height - 1) / 2], [0.0, 0.0, 1.0]]
        return CameraModel.from_camera_info(K, [0.0] * 5, cam.width, cam.height, "plumb_bob", CAMERA_FRAME)

    @property
    def cam2base(self) -> np.ndarray:
        """4x4 transform from the camera optical frame to the robot base frame (the true extrinsics)."""
        cam = self.scenario.camera
        x_opt, y_opt, z_opt = camera_axes(cam.position_m, cam.look_at_m)
        T = np.eye(4)
        T[:3, :3] = np.column_stack([x_opt, y_opt, z_opt])
        T[:3, 3] = cam.position_m
        return T

    @property
    def extrinsics(self):
        """The true camera extrinsics as a geometry-layer ``Extrinsics`` (child: optical frame, parent: base)."""
        return Extrinsics.from_matrix(
            self.cam2base,
            BASE_FRAME,
            CAMERA_FRAME,
            metadata={"method": "simulation ground truth", "scenario": self.scenario.name},
        )

    def write_calibration(self, directory: str | Path) -> tuple[Path, Path]:
        """Write ``extrinsics.yaml`` and ``camera_info.yaml`` (geometry-layer formats) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        ext_path, info_path = directory / "extrinsics.yaml", directory / "camera_info.yaml"
        self.extrinsics.save(ext_path, header=f"true camera pose of the simulated workcell '{self.scenario.name}'")
        self.camera_model.save_yaml(info_path)
        return ext_path, info_path

    def project(self, points_base: np.ndarray) -> np.ndarray:
        """Base-frame points (N, 3) to pixel coordinates (N, 2) of the colour image."""
        T = np.linalg.inv(self.cam2base)
        P = np.asarray(points_base, float).reshape(-1, 3) @ T[:3, :3].T + T[:3, 3]
        K = self.camera_model.K
        return np.column_stack([K[0, 0] * P[:, 0] / P[:, 2] + K[0, 2], K[1, 1] * P[:, 1] / P[:, 2] + K[1, 2]])

    def _renderer(self, height: int | None = None, width: int | None = None):
        """The renderer for an image size, created on the render thread (call with ``_render_lock`` held)."""
        cam = self.scenario.camera
        size = (height or cam.height, width or cam.width)
        r = self._renderers.get(size)
        if r is None:
            if self._gl is None:
                raise SimError("the workcell is closed: no more frames")
            try:
                r = self._gl.submit(self.mujoco.Renderer, self.model, *size).result()
            except Exception as exc:  # GL errors come as several types depending on the backend
                raise SimError(
                    f"cannot create an offscreen renderer with MUJOCO_GL={os.environ.get('MUJOCO_GL')}: "
                    f"{exc} (install libegl1 and libgl1-mesa-dri, or libosmesa6 and set MUJOCO_GL=osmesa)"
                ) from exc
            self._renderers[size] = r
        return r

    def _draw(self, r, mode: str = "rgb") -> np.ndarray:
        """Render the renderer's current scene on the render thread: ``rgb``, ``depth`` or ``segmentation``."""
        r.disable_depth_rendering()
        r.disable_segmentation_rendering()
        if mode == "depth":
            r.enable_depth_rendering()
        elif mode == "segmentation":
            r.enable_segmentation_rendering()
        return self._gl.submit(r.render).result().copy()

    def _update_scene(self, r) -> None:
        with self.lock:  # the scene is a CPU copy of the state: the physics may step again right after
            r.update_scene(self.data, camera=self._render_camera_id)

    def render_rgb(self, width: int | None = None, height: int | None = None) -> np.ndarray:
        """Colour only, (H, W, 3) uint8, optionally at another size (same field of view): cheap video frames."""
        with self._render_lock:
            r = self._renderer(height, width)
            self._update_scene(r)
            return self._draw(r, "rgb")

    def render(self, noise: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Colour image and aligned depth from the RGB-D camera, both of the same instant (thread-safe).

        Returns
        -------
        rgb : (H, W, 3) uint8.
        depth_m : (H, W) float32, metres along the optical axis; 0 where invalid (out of range, holes).
            With ``noise`` (default: the scenario's ``camera.depth_noise``) D435-like noise and 1 mm steps.
        """
        with self._render_lock:
            r = self._renderer()
            self._update_scene(r)
            rgb = self._draw(r, "rgb")
            depth = self._draw(r, "depth").astype(np.float32)
        return rgb, self._sensor_depth(depth, self.scenario.camera.depth_noise if noise is None else noise)

    def render_depth_mm(self, noise: bool | None = None) -> np.ndarray:
        """Depth as the real camera publishes it: (H, W) uint16 millimetres, 0 = invalid."""
        _, depth_m = self.render(noise)
        return np.round(depth_m * 1000.0).astype(np.uint16)

    def render_segmentation(self) -> np.ndarray:
        """(H, W) int32 geom id seen at each pixel, -1 for background."""
        with self._render_lock:
            r = self._renderer()
            self._update_scene(r)
            seg = self._draw(r, "segmentation")
        geom_type = int(self.mujoco.mjtObj.mjOBJ_GEOM)
        return np.where(seg[..., 1] == geom_type, seg[..., 0], -1).astype(np.int32)

    def _sensor_depth(self, depth_m: np.ndarray, noise: bool) -> np.ndarray:
        cam = self.scenario.camera
        out = depth_m.copy()
        if noise:
            # stereo depth error grows with z^2: sigma = z^2 * subpixel / (f * baseline), D435: 0.08 px, 50 mm
            sigma = out**2 * 0.08 / (cam.fy_px * 0.05)
            out = out + self._noise_rng.standard_normal(out.shape).astype(np.float32) * sigma
            out = np.round(out * 1000.0) / 1000.0
        out[(out < cam.depth_min_m) | (out > cam.depth_max_m)] = 0.0
        if cam.depth_hole_fraction > 0:
            out[self._noise_rng.random(out.shape) < cam.depth_hole_fraction] = 0.0
        return out.astype(np.float32)

    def object_masks(self, segmentation: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Pixel masks (H, W) bool per scenario object, and per cabinet ``<id>:drawer`` for its drawer."""
        seg = self.render_segmentation() if segmentation is None else segmentation
        mj = self.mujoco
        lut: dict[int, str] = {}
        for g in range(self.model.ngeom):
            name = mj.mj_id2name(self.model, mj.mjtObj.mjOBJ_GEOM, g) or ""
            if name.startswith("obj:"):
                _, obj_id, part = name.split(":", 2)
                lut[g] = f"{obj_id}:drawer" if part.startswith("drawer") else obj_id
        masks: dict[str, np.ndarray] = {}
        for key in sorted(set(lut.values())):
            ids = [g for g, k in lut.items() if k == key]
            masks[key] = np.isin(seg, ids)
        return masks

    def _close_camera(self) -> None:
        """Free every renderer's GL context (on the thread that made it) and stop the render thread."""
        with self._render_lock:
            if self._gl is None:
                return
            for r in self._renderers.values():
                try:
                    self._gl.submit(r.close).result()
                except Exception as exc:  # noqa: BLE001 - a broken GL state must not hide the caller's own error
                    log.warning("closing a renderer failed: %s", exc)
            self._renderers.clear()
            self._gl.shutdown(wait=True)
            self._gl = None
