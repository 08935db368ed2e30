"""What the nodes show of a plan: an overlay image, RViz markers, target poses."""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
from geometry_msgs.msg import PoseStamped
from visualization_msgs.msg import Marker, MarkerArray

from grounded_planner.ros.convert import pose_stamped

# RGB per primitive for the markers.
ACTION_COLORS = {"grasp": (230, 60, 60), "place": (40, 170, 60), "open": (40, 110, 230), "close": (220, 160, 20)}


def draw_plan_overlay(image_rgb: np.ndarray, plan: Any) -> np.ndarray:
    """(H, W, 3) uint8 copy of ``image_rgb`` with the plan drawn by the vlm layer's ``draw_plan``."""
    from grounded_planner.vlm.draw import draw_plan

    return np.asarray(draw_plan(image_rgb, plan))


def yaw_quaternion(yaw_rad: float | None) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation by ``yaw_rad`` about z (identity when None)."""
    if yaw_rad is None or not math.isfinite(yaw_rad):
        return (0.0, 0.0, 0.0, 1.0)
    return (0.0, 0.0, math.sin(yaw_rad / 2.0), math.cos(yaw_rad / 2.0))


def target_poses(target_set: Any, n_actions: int, stamp=None) -> list[PoseStamped | None]:
    """One PoseStamped per plan action from a geometry TargetSet (None for an action with no target).

    The orientation is the grasp yaw about the frame's z axis (identity for other primitives).
    """
    poses: list[PoseStamped | None] = [None] * n_actions
    for target in target_set.targets:
        if 0 <= target.index < n_actions:
            poses[target.index] = pose_stamped(target_set.frame, [float(v) for v in target.position],
                                               yaw_quaternion(target.yaw), stamp=stamp)
    return poses


def plan_markers(plan: Any, poses: Sequence[PoseStamped | None], namespace: str = "grounded_plan",
                 stamp=None) -> MarkerArray:
    """A sphere and a text label per back-projected action; a DELETEALL first so old plans disappear."""
    out = MarkerArray()
    clear = Marker()
    clear.action = Marker.DELETEALL
    clear.ns = namespace
    out.markers.append(clear)
    for i, (action, pose) in enumerate(zip(plan.actions, poses)):
        if pose is None:
            continue
        r, g, b = (c / 255.0 for c in ACTION_COLORS.get(action.type, (255, 255, 255)))
        for kind, marker_id in ((Marker.SPHERE, 2 * i), (Marker.TEXT_VIEW_FACING, 2 * i + 1)):
            m = Marker()
            m.header.frame_id = pose.header.frame_id
            if stamp is not None:
                m.header.stamp = stamp
            m.ns, m.id, m.type, m.action = namespace, marker_id, kind, Marker.ADD
            m.pose = copy.deepcopy(pose.pose)  # the label is lifted: never move the plan's own pose
            m.color.r, m.color.g, m.color.b, m.color.a = r, g, b, 1.0
            if kind == Marker.SPHERE:
                m.scale.x = m.scale.y = m.scale.z = 0.03
            else:
                m.pose.position.z += 0.05
                m.scale.z = 0.03
                m.text = f"{i + 1} {action.type} {action.object}".strip()
            out.markers.append(m)
    return out
