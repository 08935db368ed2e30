"""Conversions between the plan model and grounded_planner_interfaces / sensor_msgs messages."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from geometry_msgs.msg import Pose, PoseStamped
from grounded_planner_interfaces.msg import GroundedAction as GroundedActionMsg
from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from grounded_planner.msgs import images
from grounded_planner.plan import GroundedAction, GroundedPlan

# The messages carry coordinates as float32; values come back rounded to a thousandth of a
# pixel so that a plan written with up to three decimals survives the round trip unchanged.
_COORD_DECIMALS = 3
# An empty plan over ROS carries its reason in the service/action message, not in the plan.
EMPTY_PLAN_REASON = "empty plan received over ROS (no reason given)"


def _coords(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(round(float(v), _COORD_DECIMALS) for v in values)


def action_to_msg(action: GroundedAction, pose: PoseStamped | None = None) -> GroundedActionMsg:
    msg = GroundedActionMsg()
    msg.type = action.type
    msg.object = action.object
    msg.target = action.target
    msg.bbox = [float(v) for v in action.bbox] if action.bbox is not None else []
    msg.point = [float(v) for v in action.point] if action.point is not None else []
    if pose is not None:
        msg.pose = pose
    return msg


def action_from_msg(msg: GroundedActionMsg) -> GroundedAction:
    return GroundedAction(
        type=msg.type,
        object=msg.object,
        target=msg.target,
        bbox=_coords(msg.bbox) if len(msg.bbox) else None,  # type: ignore[arg-type]
        point=_coords(msg.point) if len(msg.point) else None,  # type: ignore[arg-type]
    )


def plan_to_msg(
    plan: GroundedPlan,
    header: Header | None = None,
    poses: Sequence[PoseStamped | None] | None = None,
) -> GroundedPlanMsg:
    """Plan model -> ``GroundedPlan`` message; ``poses[i]`` (optional) fills action i's 3D target."""
    if poses is not None and len(poses) != len(plan.actions):
        raise ValueError(f"got {len(poses)} poses for {len(plan.actions)} actions")
    msg = GroundedPlanMsg()
    if header is not None:
        msg.header = header
    msg.instruction = plan.instruction
    msg.image_width = int(plan.image_size[0])
    msg.image_height = int(plan.image_size[1])
    msg.actions = [action_to_msg(a, None if poses is None else poses[i]) for i, a in enumerate(plan.actions)]
    msg.model = plan.model
    msg.raw_response = plan.raw_response
    return msg


def plan_from_msg(
    msg: GroundedPlanMsg,
    reason: str = "",
    warnings: Sequence[str] = (),
    validate: bool = True,
) -> GroundedPlan:
    """``GroundedPlan`` message -> plan model. The message has no reason/warnings: pass them in."""
    plan = GroundedPlan(
        instruction=msg.instruction,
        image_size=(int(msg.image_width), int(msg.image_height)),
        actions=[action_from_msg(a) for a in msg.actions],
        reason=reason or ("" if len(msg.actions) else EMPTY_PLAN_REASON),
        warnings=list(warnings),
        model=msg.model,
        raw_response=msg.raw_response,
    )
    if validate:
        plan.validate()
    return plan


def poses_from_msg(msg: GroundedPlanMsg) -> list[PoseStamped | None]:
    """Each action's 3D target, or None where it was not back-projected (empty frame_id)."""
    return [a.pose if a.pose.header.frame_id else None for a in msg.actions]


def pose_stamped(frame_id: str, position: Sequence[float], quaternion_xyzw: Sequence[float] = (0.0, 0.0, 0.0, 1.0),
                 stamp=None) -> PoseStamped:
    out = PoseStamped()
    out.header.frame_id = frame_id
    if stamp is not None:
        out.header.stamp = stamp
    pose = Pose()
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in position)
    pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = (float(v) for v in quaternion_xyzw)
    out.pose = pose
    return out


# -- images (the conversions live in grounded_planner.msgs.images; these bind rclpy's Image class) ------------
def image_to_numpy(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> array (H, W) or (H, W, C); colour comes back as RGB."""
    return images.image_to_numpy(msg)


def numpy_to_image(array: np.ndarray, encoding: str | None = None, header: Header | None = None) -> Image:
    """Array -> sensor_msgs/Image. (H, W, 3) uint8 -> rgb8; (H, W) uint16 -> 16UC1; float32 -> 32FC1."""
    return images.numpy_to_image(array, Image, encoding, header)
