"""What the nodes show of a plan: an overlay image, RViz markers, target poses."""

from __future__ import annotations

from typing import Any

import numpy as np
from visualization_msgs.msg import Marker, MarkerArray

from grounded_planner.geometry.transforms import yaw_to_quaternion
from grounded_planner.vlm.draw import draw_plan

# RGB per primitive for the markers.
ACTION_COLORS = {"grasp": (230, 60, 60), "place": (40, 170, 60), "open": (40, 110, 230), "close": (220, 160, 20)}


def draw_plan_overlay(image_rgb: np.ndarray, plan: Any) -> np.ndarray:
    """(H, W, 3) uint8 copy of ``image_rgb`` with the plan drawn by the vlm layer's ``draw_plan``."""
    return np.asarray(draw_plan(image_rgb, plan))


def plan_markers(plan: Any, namespace: str = "grounded_plan", stamp=None) -> MarkerArray:
    """A sphere and a text label per back-projected action (``action.target_3d``); a DELETEALL first so old plans
    disappear."""
    out = MarkerArray()
    clear = Marker()
    clear.action = Marker.DELETEALL
    clear.ns = namespace
    out.markers.append(clear)
    for i, action in enumerate(plan.actions):
        target = action.target_3d
        if target is None:
            continue
        quaternion = yaw_to_quaternion(target.yaw) if target.yaw is not None else (0.0, 0.0, 0.0, 1.0)
        r, g, b = (c / 255.0 for c in ACTION_COLORS.get(action.type, (255, 255, 255)))
        for kind, marker_id in ((Marker.SPHERE, 2 * i), (Marker.TEXT_VIEW_FACING, 2 * i + 1)):
            m = Marker()
            m.header.frame_id = target.frame
            if stamp is not None:
                m.header.stamp = stamp
            m.ns, m.id, m.type, m.action = namespace, marker_id, kind, Marker.ADD
            m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(v) for v in target.position)
            (m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w) = (
                float(v) for v in quaternion
            )
            m.color.r, m.color.g, m.color.b, m.color.a = r, g, b, 1.0
            if kind == Marker.SPHERE:
                m.scale.x = m.scale.y = m.scale.z = 0.03
            else:
                m.pose.position.z += 0.05
                m.scale.z = 0.03
                m.text = f"{i + 1} {action.type} {action.object}".strip()
            out.markers.append(m)
    return out
