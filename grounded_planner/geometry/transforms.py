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


# -- yaw about the frame's z axis (the one yaw convention of plan targets) ----------------------------------------
# A target's yaw is the direction along which a parallel gripper closes, measured about the frame's z axis from its
# x axis, in radians; on the wire it is the pose orientation Rz(yaw).


def yaw_to_quaternion(yaw_rad: float) -> np.ndarray:
    """Quaternion (x, y, z, w) of a rotation by ``yaw_rad`` about z."""
    half = 0.5 * float(yaw_rad)
    return np.array([0.0, 0.0, math.sin(half), math.cos(half)])


def quaternion_to_yaw(q_xyzw: np.ndarray) -> float:
    """Heading (rotation about z, radians in (-pi, pi]) of a quaternion (x, y, z, w): where its x axis points."""
    x, y, z, w = (float(v) for v in q_xyzw)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def wrap_pi(angle_rad: float) -> float:
    """``angle_rad`` wrapped to (-pi, pi]."""
    a = math.fmod(float(angle_rad) + math.pi, 2 * math.pi)
    if a <= 0:
        a += 2 * math.pi
    return a - math.pi


def fold_half_turn(yaw_rad: float) -> float:
    """A parallel gripper's yaw folded into (-pi/2, pi/2] (the gripper is symmetric under a half turn)."""
    yaw = (float(yaw_rad) + math.pi / 2) % math.pi - math.pi / 2
    return math.pi / 2 if yaw <= -math.pi / 2 + 1e-12 else yaw
