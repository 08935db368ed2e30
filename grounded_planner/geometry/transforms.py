"""Rigid-transform helpers: quaternions (x, y, z, w) <-> rotation matrices, 4x4 homogeneous transforms."""

from __future__ import annotations

import math

import numpy as np


def quat_to_matrix(q_xyzw: np.ndarray) -> np.ndarray:
    """Rotation matrix of a unit quaternion.

    Parameters
    ----------
    q_xyzw : array-like, shape (4,)
        Quaternion in ROS order (x, y, z, w); must already be normalised.

    Returns
    -------
    R : ndarray, shape (3, 3)
    """
    x, y, z, w = (float(v) for v in q_xyzw)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (x, y, z, w) of a rotation matrix, with w >= 0 (Shepperd's method, stable near 180 deg).

    Parameters
    ----------
    R : array-like, shape (3, 3)
        A proper rotation matrix.

    Returns
    -------
    q_xyzw : ndarray, shape (4,)
    """
    R = np.asarray(R, dtype=float)
    trace = R[0, 0] + R[1, 1] + R[2, 2]
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = [(R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = [0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s, (R[2, 1] - R[1, 2]) / s]
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = [(R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s, (R[0, 2] - R[2, 0]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = [(R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s, (R[1, 0] - R[0, 1]) / s]
    q_arr = np.asarray(q, dtype=float)
    q_arr /= np.linalg.norm(q_arr)
    return -q_arr if q_arr[3] < 0 else q_arr


def make_transform(R: np.ndarray, t: np.ndarray) -> np.ndarray:
    """4x4 homogeneous transform from a rotation (3, 3) and a translation (3,)."""
    T = np.eye(4)
    T[:3, :3] = np.asarray(R, dtype=float)
    T[:3, 3] = np.asarray(t, dtype=float).reshape(3)
    return T


def invert_transform(T: np.ndarray) -> np.ndarray:
    """Inverse of a rigid 4x4 transform (uses R^T rather than a general matrix inverse)."""
    T = np.asarray(T, dtype=float)
    R = T[:3, :3]
    return make_transform(R.T, -R.T @ T[:3, 3])


def rotation_angle_deg(R: np.ndarray) -> float:
    """Angle in degrees of a rotation matrix (the geodesic distance to the identity)."""
    cos = (np.trace(np.asarray(R, dtype=float)) - 1.0) / 2.0
    return math.degrees(math.acos(min(1.0, max(-1.0, cos))))


def rotation_about_axis(axis: np.ndarray, angle_rad: float) -> np.ndarray:
    """Rotation matrix (3, 3) of ``angle_rad`` about the unit vector ``axis`` (Rodrigues' formula)."""
    a = np.asarray(axis, dtype=float)
    a = a / np.linalg.norm(a)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(angle_rad) * K + (1 - math.cos(angle_rad)) * (K @ K)


def rotation_from_vector(rotvec: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a rotation vector (3,) (axis * angle in radians); identity for a zero vector."""
    r = np.asarray(rotvec, dtype=float).reshape(3)
    angle = float(np.linalg.norm(r))
    if angle < 1e-15:
        return np.eye(3)
    return rotation_about_axis(r / angle, angle)
