"""What the nodes show of a plan: an overlay image (boxes, points, step numbers), RViz markers, target poses."""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
from geometry_msgs.msg import PoseStamped
from visualization_msgs.msg import Marker, MarkerArray

from grounded_planner.ros.convert import pose_stamped

# RGB per primitive, shared by the overlay and the markers so the two views match.
ACTION_COLORS = {"grasp": (230, 60, 60), "place": (40, 170, 60), "open": (40, 110, 230), "close": (220, 160, 20)}


def draw_plan_overlay(image_rgb: np.ndarray, plan: Any) -> np.ndarray:
    """Draw each action's box or point with its step number and type onto a copy of ``image_rgb``.

    Parameters
    ----------
    image_rgb : ndarray, shape (H, W, 3), uint8
    plan : GroundedPlan
        In pixels of an image of ``plan.image_size``; rescaled when ``image_rgb`` has another size.

    Returns
    -------
    ndarray, shape (H, W, 3), uint8
    """
    from PIL import Image, ImageDraw

    image = np.asarray(image_rgb)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image_rgb must be (H, W, 3) uint8, got shape {image.shape} dtype {image.dtype}")
    height, width = image.shape[:2]
    sx = width / plan.image_size[0] if plan.image_size[0] else 1.0
    sy = height / plan.image_size[1] if plan.image_size[1] else 1.0
    canvas = Image.fromarray(image.copy())
    draw = ImageDraw.Draw(canvas)
    line = max(2, round(min(width, height) / 240))
    for i, action in enumerate(plan.actions):
        color = ACTION_COLORS.get(action.type, (255, 255, 255))
        label = f"{i + 1} {action.type} {action.object}".strip()
        if action.bbox is not None:
            x1, y1, x2, y2 = action.bbox
            draw.rectangle([x1 * sx, y1 * sy, x2 * sx, y2 * sy], outline=color, width=line)
            anchor = (x1 * sx + line, y1 * sy + line)
        elif action.point is not None:
            x, y = action.point[0] * sx, action.point[1] * sy
            r = 3 * line
            draw.ellipse([x - r, y - r, x + r, y + r], outline=color, width=line)
            draw.line([x - 2 * r, y, x + 2 * r, y], fill=color, width=1)
            draw.line([x, y - 2 * r, x, y + 2 * r], fill=color, width=1)
            anchor = (x + r + 2, y - r - 12)
        else:
            continue
        bbox = draw.textbbox(anchor, label)
        draw.rectangle(bbox, fill=(0, 0, 0))
        draw.text(anchor, label, fill=color)
    return np.asarray(canvas)


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
