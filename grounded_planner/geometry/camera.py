"""Pinhole camera model with ROS distortion models: load camera_info YAML, deproject and project pixels.

Pixel convention: the ROS/OpenCV one, pixel centres at integer coordinates (u right, v down); points are in
the camera optical frame (x right, y down, z forward), metres.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from grounded_planner.geometry.errors import CameraModelError
from grounded_planner.geometry.yamlfile import read_yaml
import yaml

# Number of coefficients of each supported ROS distortion model (sensor_msgs/distortion_models.hpp);
# shorter D vectors are padded with zeros, as OpenCV does. equidistant is OpenCV's fisheye model (k1..k4 on
# the angle theta from the optical axis), what realsense-ros publishes for Kannala-Brandt lenses (T265, D405 IR).
DISTORTION_MODELS = {"plumb_bob": 5, "rational_polynomial": 8, "equidistant": 4}
# librealsense model name (as rs2_distortion_to_string spells it) -> (ROS model, how many coefficients to keep)
LIBREALSENSE_MODELS = {
    "Brown Conrady": ("plumb_bob", 5),
    "Modified Brown Conrady": ("plumb_bob", 5),
    "Inverse Brown Conrady": ("plumb_bob", 5),
    "Kannala Brandt4": ("equidistant", 4),
    "None": ("plumb_bob", 0),
}


class UnsupportedDistortionError(CameraModelError):
    """A camera_info whose distortion model this project cannot deproject (names the model and the ones it can)."""

    rule_default = "unsupported_distortion_model"


def ros_distortion_model(name: str) -> tuple[str, int | None]:
    """ROS model name and how many coefficients count, for a ROS or librealsense model name.

    ``""`` (an uncalibrated driver leaves it empty) is plumb_bob, as image_geometry treats it.

    Raises
    ------
    UnsupportedDistortionError
        For any other name (``fisheye``, ``F-Theta``, ...).
    """
    name = str(name or "").strip()
    if not name:
        return "plumb_bob", None
    if name in DISTORTION_MODELS:
        return name, None
    if name in LIBREALSENSE_MODELS:
        return LIBREALSENSE_MODELS[name]
    known = list(DISTORTION_MODELS) + [f"{n!r} (librealsense)" for n in LIBREALSENSE_MODELS]
    raise UnsupportedDistortionError(f"distortion_model {name!r} is not supported (expected one of {', '.join(known)})")


# Undistortion is a fixed-point iteration; it stops when no coordinate moves more than this (normalised units,
# about 1e-9 px) or after _UNDISTORT_MAX_ITER rounds.
_UNDISTORT_TOL = 1e-12
_UNDISTORT_MAX_ITER = 100
# Still moving by more than this after _UNDISTORT_MAX_ITER rounds (about 1e-3 px) means the iteration diverges.
_UNDISTORT_NOT_CONVERGED = 1e-6
_UNDISTORT_CHUNK = 32768


@dataclass(eq=False)
class CameraModel:
    """Intrinsics of one camera stream, as in a ROS ``sensor_msgs/CameraInfo``.

    Attributes
    ----------
    width, height : int
        Image size in pixels.
    K : ndarray, shape (3, 3)
        Camera matrix [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] in pixels.
    D : ndarray, shape (5,), (8,) or (4,)
        Distortion coefficients in ROS/OpenCV order: plumb_bob (k1, k2, p1, p2, k3), rational_polynomial
        (k1, k2, p1, p2, k3, k4, k5, k6), equidistant (k1, k2, k3, k4; OpenCV fisheye).
    distortion_model : str
        ``plumb_bob``, ``rational_polynomial`` or ``equidistant``; librealsense's names are accepted and mapped
        (``Brown Conrady`` -> plumb_bob, ``Kannala Brandt4`` -> equidistant, ...: :data:`LIBREALSENSE_MODELS`).
    frame_id : str
        Optical frame of the stream (``camera_color_optical_frame``); ``""`` when the source did not say.
    """

    width: int
    height: int
    K: np.ndarray
    D: np.ndarray = field(default_factory=lambda: np.zeros(5))
    distortion_model: str = "plumb_bob"
    frame_id: str = ""
    _ray_map: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            self.width, self.height = int(self.width), int(self.height)
        except (TypeError, ValueError) as exc:
            raise CameraModelError(f"image width/height must be integers, got {self.width!r}x{self.height!r}") from exc
        if self.width <= 0 or self.height <= 0:
            raise CameraModelError(f"image size must be positive, got {self.width}x{self.height}")
        K = np.asarray(self.K, dtype=float)
        if K.size != 9:
            raise CameraModelError(f"camera matrix K must have 9 values (3x3), got {K.size}")
        K = K.reshape(3, 3)
        if not np.all(np.isfinite(K)):
            raise CameraModelError(f"camera matrix K must be finite, got {K.tolist()}")
        if K[0, 0] <= 0 or K[1, 1] <= 0:
            raise CameraModelError(f"focal lengths fx, fy must be positive, got fx={K[0, 0]}, fy={K[1, 1]}")
        if not np.allclose(K[2], [0, 0, 1]) or K[1, 0] != 0:
            raise CameraModelError(
                f"camera matrix K must have the pinhole form [[fx,s,cx],[0,fy,cy],[0,0,1]], got {K.tolist()}"
            )
        self.K = K
        model, keep = ros_distortion_model(self.distortion_model)  # librealsense's names too; typed error otherwise
        self.distortion_model = model
        D = np.asarray(self.D if self.D is not None else [], dtype=float).reshape(-1)
        if keep is not None:
            D = D[:keep]
        n = DISTORTION_MODELS[model]
        if D.size > n and not np.any(D[n:]):
            D = D[:n]  # trailing zeros (a 5-vector written for a 4-coefficient model) say nothing
        if D.size > n:
            raise CameraModelError(f"{model} takes at most {n} distortion coefficients, got {D.size}: {D.tolist()}")
        if not np.all(np.isfinite(D)):
            raise CameraModelError(f"distortion coefficients must be finite, got {D.tolist()}")
        self.D = np.concatenate([D, np.zeros(n - D.size)])
        self.frame_id = str(self.frame_id or "")

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_camera_info(
        cls, K: Any, D: Any, width: int, height: int, distortion_model: str = "plumb_bob", frame_id: str = ""
    ) -> "CameraModel":
        """From the fields of a ``sensor_msgs/CameraInfo`` (``k``, ``d``, ``width``, ``height``, ...)."""
        return cls(
            width=width,
            height=height,
            K=np.asarray(K, dtype=float),
            D=np.asarray(D, dtype=float),
            distortion_model=distortion_model,
            frame_id=frame_id,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "camera info") -> "CameraModel":
        """From a ROS camera_calibration YAML mapping, or a YAML dump of a CameraInfo message.

        camera_calibration format: ``image_width``, ``image_height``, ``camera_matrix: {rows, cols, data}``,
        ``distortion_model``, ``distortion_coefficients: {rows, cols, data}``; an optional ``frame_id`` (our
        addition). Message dump (``ros2 topic echo --once .../camera_info``): ``width``, ``height``, ``k``,
        ``d``, ``distortion_model``, ``header.frame_id``.
        """
        if not isinstance(data, Mapping):
            raise CameraModelError(f"{source}: expected a YAML mapping, got {type(data).__name__}")
        try:
            if "camera_matrix" in data:
                K = _matrix_field(data["camera_matrix"], "camera_matrix", (3, 3))
                D_raw = data.get("distortion_coefficients") or {"data": []}
                D = _matrix_field(D_raw, "distortion_coefficients", None)
                width, height = data["image_width"], data["image_height"]
                frame_id = data.get("frame_id") or ""
            elif "k" in data or "K" in data:
                K = np.asarray(data.get("k", data.get("K")), dtype=float)
                D = np.asarray(data.get("d", data.get("D")) or [], dtype=float)
                width, height = data["width"], data["height"]
                header = data.get("header") or {}
                frame_id = (header.get("frame_id") if isinstance(header, Mapping) else "") or data.get("frame_id") or ""
            else:
                raise CameraModelError("no 'camera_matrix' (camera_calibration YAML) or 'k' (CameraInfo message) field")
            return cls.from_camera_info(K, D, width, height, str(data.get("distortion_model") or "plumb_bob"), frame_id)
        except KeyError as exc:
            raise CameraModelError(f"{source}: missing field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CameraModelError):
                raise CameraModelError(f"{source}: {exc.detail}") from exc
            raise CameraModelError(f"{source}: invalid value ({exc})") from exc

    @classmethod
    def from_camera_info_yaml(cls, path: str | Path) -> "CameraModel":
        """Load a ROS camera_calibration YAML file (or a YAML dump of a CameraInfo message)."""
        return cls.from_dict(read_yaml(path, "camera info file", CameraModelError), source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The ROS camera_calibration YAML mapping (with our ``frame_id``)."""
        P = np.hstack([self.K, np.zeros((3, 1))])
        return {
            "image_width": self.width,
            "image_height": self.height,
            "camera_name": self.frame_id or "camera",
            "frame_id": self.frame_id,
            "camera_matrix": {"rows": 3, "cols": 3, "data": [float(v) for v in self.K.ravel()]},
            "distortion_model": self.distortion_model,
            "distortion_coefficients": {"rows": 1, "cols": int(self.D.size), "data": [float(v) for v in self.D]},
            "rectification_matrix": {"rows": 3, "cols": 3, "data": [float(v) for v in np.eye(3).ravel()]},
            "projection_matrix": {"rows": 3, "cols": 4, "data": [float(v) for v in P.ravel()]},
        }

    def save_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")

    # -- properties ---------------------------------------------------------------------------
    @property
    def fx(self) -> float:
        return float(self.K[0, 0])

    @property
    def fy(self) -> float:
        return float(self.K[1, 1])

    @property
    def cx(self) -> float:
        return float(self.K[0, 2])

    @property
    def cy(self) -> float:
        return float(self.K[1, 2])

    @property
    def has_distortion(self) -> bool:
        return bool(np.any(self.D != 0))

    # -- distortion ---------------------------------------------------------------------------
    def distort(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply lens distortion to normalised coordinates.

        Parameters
        ----------
        x, y : ndarray, shape (N,)
            Ideal normalised coordinates X/Z, Y/Z.

        Returns
        -------
        xd, yd : ndarray, shape (N,)
            Distorted normalised coordinates (pixel = K @ [xd, yd, 1]).
        """
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        if not self.has_distortion:
            return x, y
        if self.distortion_model == "equidistant":
            r = np.hypot(x, y)
            theta = np.arctan(r)
            scale = np.divide(self._theta_d(theta), r, out=np.ones_like(r), where=r > 1e-15)
            return x * scale, y * scale
        radial, dx, dy = self._distortion_terms(x, y)
        return x * radial + dx, y * radial + dy

    def _theta_d(self, theta: np.ndarray) -> np.ndarray:
        """Equidistant model: distorted angle theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8)."""
        k1, k2, k3, k4 = self.D[:4]
        t2 = theta * theta
        return theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))

    def _distortion_terms(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k1, k2, p1, p2, k3 = self.D[:5]
        r2 = x * x + y * y
        radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
        if self.distortion_model == "rational_polynomial":
            k4, k5, k6 = self.D[5:8]
            radial = radial / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)))
        xy = x * y
        dx = 2.0 * p1 * xy + p2 * (r2 + 2.0 * x * x)
        dy = p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * xy
        return radial, dx, dy

    def undistort_normalized(self, xd: np.ndarray, yd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Invert :meth:`distort` by fixed-point iteration to convergence (vectorised over all points).

        Parameters
        ----------
        xd, yd : ndarray, shape (N,)
            Distorted normalised coordinates, K^-1 @ [u, v, 1].

        Returns
        -------
        x, y : ndarray, shape (N,)
            Ideal normalised coordinates.
        """
        xd = np.asarray(xd, dtype=float)
        yd = np.asarray(yd, dtype=float)
        if not self.has_distortion:
            return xd, yd
        if xd.size > _UNDISTORT_CHUNK:
            # Blocks that stay in cache: about 2x faster than whole-image temporaries on a full frame.
            x, y = np.empty_like(xd), np.empty_like(yd)
            xf, yf, xo, yo = xd.reshape(-1), yd.reshape(-1), x.reshape(-1), y.reshape(-1)
            for start in range(0, xf.size, _UNDISTORT_CHUNK):
                block = slice(start, start + _UNDISTORT_CHUNK)
                xo[block], yo[block] = self._undistort_block(xf[block], yf[block])
            return x, y
        return self._undistort_block(xd, yd)

    def _undistort_block(self, xd: np.ndarray, yd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.distortion_model == "equidistant":
            return self._undistort_equidistant(xd, yd)
        x, y = xd.copy(), yd.copy()
        step = np.inf
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for _ in range(_UNDISTORT_MAX_ITER):
                radial, dx, dy = self._distortion_terms(x, y)
                x_new = (xd - dx) / radial
                y_new = (yd - dy) / radial
                step = max(float(np.max(np.abs(x_new - x), initial=0.0)), float(np.max(np.abs(y_new - y), initial=0.0)))
                x, y = x_new, y_new
                if step < _UNDISTORT_TOL:
                    break
        if not step < _UNDISTORT_NOT_CONVERGED:  # NaN included: silently wrong rays would become wrong 3D targets
            raise CameraModelError(
                f"undistortion does not converge with {self.distortion_model} distortion coefficients D={self.D.tolist()} "
                f"(still moving by {step:.3g} after {_UNDISTORT_MAX_ITER} iterations): not a plausible lens calibration"
            )
        return x, y

    def _undistort_equidistant(self, xd: np.ndarray, yd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Solve theta_d(theta) = r_d by Newton's method (as OpenCV's fisheye::undistortPoints), then x = tan(theta) x_d / r_d.

        Rays at or beyond 90 degrees have no pinhole coordinates: they come back NaN (no depth is valid there).
        """
        k1, k2, k3, k4 = self.D[:4]
        r_d = np.hypot(xd, yd)
        theta = np.clip(r_d, 0.0, np.pi / 2)
        for _ in range(_UNDISTORT_MAX_ITER):
            t2 = theta * theta
            f = self._theta_d(theta) - r_d
            df = 1.0 + t2 * (3 * k1 + t2 * (5 * k2 + t2 * (7 * k3 + t2 * 9 * k4)))
            step = np.divide(f, df, out=np.zeros_like(f), where=np.abs(df) > 1e-12)
            theta = theta - step
            if float(np.max(np.abs(step), initial=0.0)) < _UNDISTORT_TOL:
                break
        valid = (theta >= 0) & (theta < np.pi / 2) & np.isfinite(theta)
        scale = np.divide(np.tan(np.where(valid, theta, 0.0)), r_d, out=np.ones_like(r_d), where=r_d > 1e-15)
        scale = np.where(valid, scale, np.nan)
        return xd * scale, yd * scale

    # -- pixels <-> points --------------------------------------------------------------------
    def normalized(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Undistorted normalised ray coordinates (X/Z, Y/Z) of pixels (u, v), arrays of one shape."""
        u = np.asarray(u, dtype=float)
        v = np.asarray(v, dtype=float)
        yd = (v - self.cy) / self.fy
        xd = (u - self.cx - self.K[0, 1] * yd) / self.fx
        return self.undistort_normalized(xd, yd)

    def deproject(self, u: np.ndarray, v: np.ndarray, depth_m: np.ndarray) -> np.ndarray:
        """Pixels with depth to points in the optical frame (depth is Z, as RealSense/ROS depth images are).

        Parameters
        ----------
        u, v : array-like, shape (N,)
            Pixel coordinates (centres at integers).
        depth_m : array-like, shape (N,) or scalar
            Z distance in metres.

        Returns
        -------
        points_cam : ndarray, shape (N, 3)
        """
        x, y = self.normalized(np.ravel(u), np.ravel(v))
        z = np.broadcast_to(np.asarray(depth_m, dtype=float).ravel(), x.shape)
        return np.stack([x * z, y * z, z], axis=-1)

    def project(self, points_cam: np.ndarray) -> np.ndarray:
        """Points in the optical frame to pixels (with distortion).

        Parameters
        ----------
        points_cam : array-like, shape (N, 3)
            Points with Z > 0.

        Returns
        -------
        uv : ndarray, shape (N, 2)
        """
        P = np.asarray(points_cam, dtype=float).reshape(-1, 3)
        x, y = self.distort(P[:, 0] / P[:, 2], P[:, 1] / P[:, 2])
        u = self.fx * x + self.K[0, 1] * y + self.cx
        v = self.fy * y + self.cy
        return np.stack([u, v], axis=-1)

    def ray_map(self) -> np.ndarray:
        """Normalised undistorted ray coordinates of every pixel, shape (H, W, 2); computed once, cached."""
        if self._ray_map is None:
            v, u = np.mgrid[0 : self.height, 0 : self.width]
            x, y = self.normalized(u.ravel(), v.ravel())
            self._ray_map = np.stack([x, y], axis=-1).reshape(self.height, self.width, 2)
            self._ray_map.setflags(write=False)
        return self._ray_map

    def deproject_image(self, depth_m: np.ndarray) -> np.ndarray:
        """Every pixel of a depth image to a point, shape (H, W, 3); holes (depth 0/NaN) give Z = depth."""
        depth_m = np.asarray(depth_m, dtype=float)
        if depth_m.shape != (self.height, self.width):
            raise CameraModelError(
                f"depth image is {depth_m.shape[1] if depth_m.ndim > 1 else '?'}x{depth_m.shape[0]}, "
                f"camera model is {self.width}x{self.height}"
            )
        rays = self.ray_map()
        return np.stack([rays[..., 0] * depth_m, rays[..., 1] * depth_m, depth_m], axis=-1)


def _matrix_field(value: Any, name: str, shape: tuple[int, int] | None) -> np.ndarray:
    """A camera_calibration ``{rows, cols, data}`` block as an array, checked against rows*cols."""
    if not isinstance(value, Mapping) or "data" not in value:
        raise CameraModelError(f"'{name}' must be a mapping with rows, cols, data")
    data = np.asarray(value["data"] if value["data"] is not None else [], dtype=float).ravel()
    rows, cols = value.get("rows"), value.get("cols")
    if rows is not None and cols is not None and int(rows) * int(cols) != data.size:
        raise CameraModelError(f"'{name}' says {rows}x{cols} but has {data.size} values")
    if shape is not None:
        if data.size != shape[0] * shape[1]:
            raise CameraModelError(f"'{name}' must have {shape[0] * shape[1]} values, got {data.size}")
        return data.reshape(shape)
    return data
