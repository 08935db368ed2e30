"""rclpy bindings of the message converters in ``grounded_planner.msgs`` (plans), and sensor_msgs images."""

from __future__ import annotations

import numpy as np

from sensor_msgs.msg import Image
from std_msgs.msg import Header

from grounded_planner.msgs import images
from grounded_planner.msgs import plan as plan_msgs
from grounded_planner.plan import GroundedAction, GroundedPlan
from grounded_planner.ros.msg_types import rclpy_type

EMPTY_PLAN_REASON = plan_msgs.EMPTY_PLAN_REASON


def action_to_msg(action: GroundedAction):
    """Plan action (with its 3D target, if any) -> rclpy GroundedAction message."""
    return plan_msgs.action_to_msg(action, rclpy_type)


def plan_to_msg(plan: GroundedPlan, header: Header | None = None):
    """Plan model (targets, reason and warnings inside) -> rclpy GroundedPlan message."""
    return plan_msgs.plan_to_msg(plan, rclpy_type, header)


def plan_from_msg(msg, validate: bool = True) -> GroundedPlan:
    """GroundedPlan message -> plan model with the targets it carries (see :mod:`grounded_planner.msgs.plan`)."""
    return plan_msgs.plan_from_msg(msg, validate=validate)


# -- images (the conversions live in grounded_planner.msgs.images; these bind rclpy's Image class) ------------
def image_to_numpy(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> array (H, W) or (H, W, C); colour comes back as RGB."""
    return images.image_to_numpy(msg)


def numpy_to_image(array: np.ndarray, encoding: str | None = None, header: Header | None = None) -> Image:
    """Array -> sensor_msgs/Image. (H, W, 3) uint8 -> rgb8; (H, W) uint16 -> 16UC1; float32 -> 32FC1."""
    return images.numpy_to_image(array, Image, encoding, header)
