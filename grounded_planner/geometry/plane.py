"""Plane fitting for support surfaces and fronts of drawers/doors: seeded RANSAC plus least-squares refinement."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(eq=False)
class Plane:
    """The plane ``normal . p + offset = 0`` in some frame (the camera optical frame here).

    Attributes
    ----------
    normal : ndarray, shape (3,)
        Unit normal; oriented by the fitter (towards the camera, or along a given "up").
    offset : float
        Signed offset in metres; ``normal . p + offset`` is the signed distance of ``p`` (positive on the
        side the normal points to).
    inlier_fraction : float
        Fraction of the fitted points within the RANSAC threshold, 0..1.
    """

    normal: np.ndarray
    offset: float
    inlier_fraction: float = 1.0

    def signed_distance(self, points: np.ndarray) -> np.ndarray:
        """Signed distances (N,) of points (N, 3) in metres, positive on the normal's side."""
        return np.asarray(points, dtype=float).reshape(-1, 3) @ self.normal + self.offset

    def ray_parameter(self, direction: np.ndarray, origin: np.ndarray | None = None) -> tuple[float, float]:
        """Where the ray ``origin + t * direction`` meets the plane.

        Returns
        -------
        t : float
            Ray parameter of the hit (``inf`` when parallel).
        angle_deg : float
            Angle between the ray and the plane (0 = parallel, 90 = head-on).
        """
        d = np.asarray(direction, dtype=float).reshape(3)
        o = np.zeros(3) if origin is None else np.asarray(origin, dtype=float).reshape(3)
        denom = float(self.normal @ d)
        angle_deg = math.degrees(math.asin(min(1.0, abs(denom) / float(np.linalg.norm(d)))))
        if denom == 0.0:
            return math.inf, angle_deg
        return -(float(self.normal @ o) + self.offset) / denom, angle_deg


def fit_plane_lstsq(points: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Total-least-squares plane through points.

    Parameters
    ----------
    points : ndarray, shape (N, 3), N >= 3
    weights : ndarray, shape (N,), optional

    Returns
    -------
    normal : ndarray, shape (3,)
        Unit normal (sign arbitrary).
    offset : float
    """
    P = np.asarray(points, dtype=float).reshape(-1, 3)
    w = np.ones(len(P)) if weights is None else np.asarray(weights, dtype=float)
    centroid = (w[:, None] * P).sum(axis=0) / w.sum()
    Q = (P - centroid) * np.sqrt(w)[:, None]
    # The right singular vector of the smallest singular value is the normal.
    _, _, vt = np.linalg.svd(Q, full_matrices=False)
    normal = vt[-1]
    return normal, -float(normal @ centroid)


def fit_plane_ransac(
    points: np.ndarray,
    threshold_m: float,
    rng: np.random.Generator,
    iterations: int = 200,
    max_sample: int = 4000,
    up: np.ndarray | None = None,
    max_tilt_deg: float = 90.0,
    min_inliers: int = 3,
    min_tilt_deg: float = 0.0,
) -> Plane | None:
    """The plane with most inliers among random 3-point hypotheses, refined by least squares.

    Parameters
    ----------
    points : ndarray, shape (N, 3)
        Points in the camera optical frame (the camera at the origin).
    threshold_m : float
        Inlier distance.
    rng : numpy Generator
        Seeded by the caller so results are reproducible.
    iterations : int
        Hypotheses tried (drawn at once, scored vectorised).
    max_sample : int
        Hypotheses are scored on at most this many random points; the refinement uses all.
    up : ndarray, shape (3,), optional
        Gravity "up" in this frame. Hypotheses whose normal is tilted from it by less than ``min_tilt_deg``
        or more than ``max_tilt_deg`` are rejected: (0, 30) finds horizontal surfaces, (60, 90) vertical ones.
    max_tilt_deg, min_tilt_deg : float
        See ``up``.
    min_inliers : int
        Fewer inliers than this (over all points) gives None.

    Returns
    -------
    Plane or None
        For a horizontal-ish plane (``up`` given, ``max_tilt_deg`` < 90) the normal points up; otherwise it
        points towards the camera (the origin on the positive side).
    """
    P = np.asarray(points, dtype=float).reshape(-1, 3)
    n = len(P)
    if n < max(3, min_inliers):
        return None
    sample = P if n <= max_sample else P[rng.choice(n, size=max_sample, replace=False)]
    idx = rng.integers(0, len(sample), size=(iterations, 3))
    a, b, c = sample[idx[:, 0]], sample[idx[:, 1]], sample[idx[:, 2]]
    normals = np.cross(b - a, c - a)
    norms = np.linalg.norm(normals, axis=1)
    ok = norms > 1e-12
    normals[ok] /= norms[ok, None]
    offsets = -np.einsum("ij,ij->i", normals, a)
    up_unit = None if up is None else np.asarray(up, dtype=float) / np.linalg.norm(up)

    def tilt_ok(n: np.ndarray) -> np.ndarray:
        c = np.abs(n @ up_unit)
        return (c >= math.cos(math.radians(max_tilt_deg)) - 1e-12) & (c <= math.cos(math.radians(min_tilt_deg)) + 1e-12)

    if up_unit is not None:
        ok &= tilt_ok(normals)
    if not np.any(ok):
        return None
    normals, offsets = normals[ok], offsets[ok]
    counts = (np.abs(sample @ normals.T + offsets) < threshold_m).sum(axis=0)
    best = int(np.argmax(counts))
    normal, offset = normals[best], float(offsets[best])
    # Two refinement rounds: least squares on the inliers of all points, then re-select inliers.
    inliers = np.abs(P @ normal + offset) < threshold_m
    for _ in range(2):
        if inliers.sum() < 3:
            return None
        normal, offset = fit_plane_lstsq(P[inliers])
        inliers = np.abs(P @ normal + offset) < threshold_m
    if inliers.sum() < min_inliers:
        return None
    if up_unit is not None and not tilt_ok(normal):
        return None
    if up_unit is not None and max_tilt_deg < 90:
        if normal @ up_unit < 0:
            normal, offset = -normal, -offset
    elif offset < 0:
        normal, offset = -normal, -offset
    return Plane(normal=normal, offset=offset, inlier_fraction=float(inliers.mean()))
