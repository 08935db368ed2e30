"""Extrinsics: a rigid transform between two named frames, loaded from and saved to the calibration/ YAML format."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from grounded_planner.fileio import write_text_atomic
from grounded_planner.geometry.errors import ExtrinsicsError
from grounded_planner.geometry.transforms import invert_transform, make_transform, matrix_to_quat, quat_to_matrix
from grounded_planner.geometry.yamlfile import read_yaml
import yaml

# A stored quaternion whose norm is further than this from 1 is rejected as a typo rather than renormalised:
# YAML files written by tools carry ~1e-9 rounding, a hand-edited wrong digit shows up as >1e-3.
QUAT_NORM_TOL = 1e-3


@dataclass(eq=False)
class Extrinsics:
    """The pose of ``child_frame`` in ``parent_frame``: ``p_parent = R @ p_child + t``.

    Attributes
    ----------
    parent_frame : str
        Frame the translation is expressed in (``panda_link0`` / ``base_link`` for an eye-to-hand camera).
    child_frame : str
        Frame being located (``camera_color_optical_frame``).
    translation : ndarray, shape (3,)
        Origin of the child frame in the parent frame, metres.
    rotation : ndarray, shape (4,)
        Orientation as a unit quaternion (qx, qy, qz, qw), ROS order.
    metadata : dict
        Free-form extra keys kept from the file (calibration method, residuals, date).
    """

    parent_frame: str
    child_frame: str
    translation: np.ndarray
    rotation: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("parent_frame", "child_frame"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ExtrinsicsError(f"'{name}' must be a non-empty frame name, got {value!r}")
        if self.parent_frame == self.child_frame:
            raise ExtrinsicsError(f"parent_frame and child_frame are both {self.parent_frame!r}")
        self.translation = _vector(self.translation, 3, "translation [x, y, z] (metres)")
        q = _vector(self.rotation, 4, "rotation [qx, qy, qz, qw]")
        norm = float(np.linalg.norm(q))
        if abs(norm - 1.0) > QUAT_NORM_TOL:
            raise ExtrinsicsError(
                f"'rotation' must be a unit quaternion [qx, qy, qz, qw], got {q.tolist()} with norm {norm:.6f}"
            )
        self.rotation = q / norm

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_matrix(
        cls, matrix: np.ndarray, parent_frame: str, child_frame: str, metadata: dict[str, Any] | None = None
    ) -> "Extrinsics":
        """From a 4x4 child->parent transform (its rotation block must be a proper rotation)."""
        T = np.asarray(matrix, dtype=float)
        if T.shape != (4, 4) or not np.all(np.isfinite(T)):
            raise ExtrinsicsError(f"transform must be a finite 4x4 matrix, got shape {T.shape}")
        R = T[:3, :3]
        if not np.allclose(R @ R.T, np.eye(3), atol=1e-6) or np.linalg.det(R) <= 0:
            raise ExtrinsicsError("transform's 3x3 block is not a proper rotation (R R^T != I or det <= 0)")
        return cls(parent_frame, child_frame, T[:3, 3].copy(), matrix_to_quat(R), dict(metadata or {}))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "extrinsics") -> "Extrinsics":
        if not isinstance(data, Mapping):
            raise ExtrinsicsError(f"{source}: expected a YAML mapping, got {type(data).__name__}")
        missing = [k for k in ("parent_frame", "child_frame", "translation", "rotation") if k not in data]
        if missing:
            raise ExtrinsicsError(
                f"{source}: missing field(s) {', '.join(missing)} (expected parent_frame, child_frame, "
                "translation: [x, y, z], rotation: [qx, qy, qz, qw])"
            )
        metadata = {
            k: v for k, v in data.items() if k not in ("parent_frame", "child_frame", "translation", "rotation")
        }
        try:
            return cls(data["parent_frame"], data["child_frame"], data["translation"], data["rotation"], metadata)
        except ExtrinsicsError as exc:
            raise ExtrinsicsError(f"{source}: {exc.detail}") from exc

    @classmethod
    def load(cls, path: str | Path) -> "Extrinsics":
        """Read a calibration/*.yaml extrinsics file."""
        return cls.from_dict(read_yaml(path, "extrinsics file", ExtrinsicsError), source=str(path))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "parent_frame": self.parent_frame,
            "child_frame": self.child_frame,
            "translation": [float(v) for v in self.translation],
            "rotation": [float(v) for v in self.rotation],
        }
        out.update(self.metadata)
        return out

    def save(self, path: str | Path, header: str = "") -> None:
        """Write the YAML file atomically; ``header`` lines become leading ``#`` comments."""

        path = Path(path)
        text = "".join(f"# {line}\n" for line in header.splitlines()) + yaml.safe_dump(self.to_dict(), sort_keys=False)
        write_text_atomic(path, text)

    # -- algebra ------------------------------------------------------------------------------
    @property
    def rotation_matrix(self) -> np.ndarray:
        """R, shape (3, 3): child axes expressed in the parent frame."""
        return quat_to_matrix(self.rotation)

    @property
    def matrix(self) -> np.ndarray:
        """4x4 homogeneous child->parent transform."""
        return make_transform(self.rotation_matrix, self.translation)

    def inverse(self) -> "Extrinsics":
        """The parent's pose in the child frame."""
        return Extrinsics.from_matrix(invert_transform(self.matrix), self.child_frame, self.parent_frame)

    def compose(self, inner: "Extrinsics") -> "Extrinsics":
        """``self @ inner``: e.g. hand->base composed with camera->hand gives camera->base.

        ``inner.parent_frame`` must equal ``self.child_frame``.
        """
        if inner.parent_frame != self.child_frame:
            raise ExtrinsicsError(
                f"cannot chain {self.parent_frame}<-{self.child_frame} with {inner.parent_frame}<-{inner.child_frame}: "
                f"frames {self.child_frame!r} and {inner.parent_frame!r} differ"
            )
        return Extrinsics.from_matrix(self.matrix @ inner.matrix, self.parent_frame, inner.child_frame)

    def transform_points(self, points_child: np.ndarray) -> np.ndarray:
        """Points in the child frame, shape (N, 3), to the parent frame, shape (N, 3)."""
        P = np.asarray(points_child, dtype=float).reshape(-1, 3)
        return P @ self.rotation_matrix.T + self.translation

    def transform_vectors(self, vectors_child: np.ndarray) -> np.ndarray:
        """Directions (normals, axes), shape (N, 3), rotated into the parent frame (no translation)."""
        V = np.asarray(vectors_child, dtype=float).reshape(-1, 3)
        return V @ self.rotation_matrix.T


def _vector(values: Any, n: int, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ExtrinsicsError(f"'{what.split()[0]}' must be {n} numbers: {what}, got {values!r}") from exc
    if arr.size != n:
        raise ExtrinsicsError(f"'{what.split()[0]}' must have {n} numbers: {what}, got {arr.size}")
    if not all(math.isfinite(v) for v in arr):
        raise ExtrinsicsError(f"'{what.split()[0]}' must be finite: {what}, got {arr.tolist()}")
    return arr
