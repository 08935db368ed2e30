"""GroundedPlan / GroundedAction messages <-> the plan model, for rclpy and rosbags message objects alike.

Reading is duck-typed (the same field names in both families). Building takes ``types``: how to find a message
class by its ROS name (``"geometry_msgs/msg/Pose"``): a rosbags typestore's ``types`` mapping, or a callable such
as :func:`grounded_planner.ros.msg_types.rclpy_type`. Every message is built with all its fields up front
(rosbags classes need that; rclpy's accept it). A back-projected target travels inside its action: the pose
(position; for a grasp the orientation is the yaw about the frame's z axis), ``width``, ``normal``,
``target_method``, ``target_confidence``; ``pose.header.frame_id`` empty means "not back-projected".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.geometry.transforms import quaternion_to_yaw, yaw_to_quaternion
from grounded_planner.plan import GroundedAction, GroundedPlan, Target

PLAN_MSGTYPE = "grounded_planner_interfaces/msg/GroundedPlan"
ACTION_MSGTYPE = "grounded_planner_interfaces/msg/GroundedAction"
# The messages carry pixel coordinates and width as float32: values come back rounded so that a plan written
# with up to three decimals (pixels) and a width in micrometres survive the round trip unchanged.
_COORD_DECIMALS = 3
_WIDTH_DECIMALS = 6
_CONFIDENCE_DECIMALS = 4
# An empty plan from a sender that filled no reason (older publishers) still validates with this one.
EMPTY_PLAN_REASON = "empty plan received over ROS (no reason given)"

TypeSource = Mapping[str, Any] | Callable[[str], Any]


def resolver(types: TypeSource) -> Callable[[str], Any]:
    """A function ROS type name -> message class, from a rosbags ``typestore.types`` mapping or such a function."""
    if isinstance(types, Mapping):
        return types.__getitem__
    if callable(types):
        return types
    raise TypeError(f"types must be a mapping or a function from ROS type name to message class, got {types!r}")


def _is_rosbags(cls: Any) -> bool:
    # rosbags typestore classes are dataclasses whose primitive arrays must be numpy arrays
    return hasattr(cls, "__dataclass_fields__")


def _float32s(cls: Any, values: Sequence[float] | None) -> Any:
    out = [] if values is None else [float(v) for v in values]
    return np.asarray(out, dtype=np.float32) if _is_rosbags(cls) else out


def time_msg(types: TypeSource, stamp_ns: int = 0) -> Any:
    """builtin_interfaces/Time from integer nanoseconds."""
    Time = resolver(types)("builtin_interfaces/msg/Time")
    return Time(sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000))


def header_msg(types: TypeSource, stamp_ns: int = 0, frame_id: str = "") -> Any:
    """std_msgs/Header with a stamp in integer nanoseconds."""
    Header = resolver(types)("std_msgs/msg/Header")
    return Header(stamp=time_msg(types, stamp_ns), frame_id=str(frame_id))


def stamp_to_ns(stamp: Any) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# -- plan model -> message ------------------------------------------------------------------------------------
def pose_stamped_msg(
    types: TypeSource,
    frame_id: str,
    position: Sequence[float],
    quaternion_xyzw: Sequence[float] = (0.0, 0.0, 0.0, 1.0),
    stamp_ns: int = 0,
) -> Any:
    """geometry_msgs/PoseStamped from a position (m) and a quaternion (x, y, z, w)."""
    get = resolver(types)
    x, y, z = (float(v) for v in position)
    qx, qy, qz, qw = (float(v) for v in quaternion_xyzw)
    pose = get("geometry_msgs/msg/Pose")(
        position=get("geometry_msgs/msg/Point")(x=x, y=y, z=z),
        orientation=get("geometry_msgs/msg/Quaternion")(x=qx, y=qy, z=qz, w=qw),
    )
    return get("geometry_msgs/msg/PoseStamped")(header=header_msg(types, stamp_ns, frame_id), pose=pose)


def action_to_msg(action: GroundedAction, types: TypeSource, stamp_ns: int = 0) -> Any:
    """One plan action -> GroundedAction message, its 3D target (if any) in pose/width/normal/method/confidence."""
    get = resolver(types)
    Action, Vector3 = get(ACTION_MSGTYPE), get("geometry_msgs/msg/Vector3")
    target = action.target_3d
    if target is None:
        pose = pose_stamped_msg(types, "", (0.0, 0.0, 0.0), stamp_ns=stamp_ns)
        width, normal, method, confidence = 0.0, (0.0, 0.0, 0.0), "", 0.0
    else:
        quaternion = yaw_to_quaternion(target.yaw) if target.yaw is not None else (0.0, 0.0, 0.0, 1.0)
        pose = pose_stamped_msg(types, target.frame, target.position, quaternion, stamp_ns)
        width = 0.0 if target.width is None else float(target.width)
        normal = (0.0, 0.0, 0.0) if target.normal is None else tuple(float(v) for v in target.normal)
        method, confidence = target.method, float(target.confidence)
    return Action(
        type=action.type,
        object=action.object,
        target=action.target,
        bbox=_float32s(Action, action.bbox),
        point=_float32s(Action, action.point),
        pose=pose,
        width=width,
        normal=Vector3(x=normal[0], y=normal[1], z=normal[2]),
        target_method=method,
        target_confidence=confidence,
    )


def plan_to_msg(
    plan: GroundedPlan, types: TypeSource, header: Any = None, *, stamp_ns: int | None = None, frame_id: str = ""
) -> Any:
    """Plan model -> GroundedPlan message (targets, reason and warnings included).

    ``header`` (a Header of the same family) or ``stamp_ns``/``frame_id`` (the image's optical frame) set the
    plan's header; the actions' poses carry the same stamp.
    """
    if header is None:
        header = header_msg(types, stamp_ns or 0, frame_id)
    stamp = stamp_to_ns(header.stamp)
    Plan = resolver(types)(PLAN_MSGTYPE)
    return Plan(
        header=header,
        instruction=plan.instruction,
        image_width=int(plan.image_size[0]),
        image_height=int(plan.image_size[1]),
        actions=[action_to_msg(a, types, stamp) for a in plan.actions],
        model=plan.model,
        raw_response=plan.raw_response,
        reason=plan.reason,
        warnings=[str(w) for w in plan.warnings],
    )


# -- message -> plan model ------------------------------------------------------------------------------------
def _coords(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(round(float(v), _COORD_DECIMALS) for v in values)


def target_from_msg(msg: Any, index: int = 0) -> Target | None:
    """The 3D target a GroundedAction message carries, or None when it was not back-projected (no frame)."""
    pose = msg.pose
    frame = str(pose.header.frame_id)
    if not frame:
        return None
    p, q = pose.pose.position, pose.pose.orientation
    normal = np.array([float(msg.normal.x), float(msg.normal.y), float(msg.normal.z)])
    yaw = quaternion_to_yaw((q.x, q.y, q.z, q.w)) if str(msg.type) == "grasp" else None
    width = float(msg.width)
    return Target(
        index=index,
        type=str(msg.type),
        object=str(msg.object),
        position=np.array([float(p.x), float(p.y), float(p.z)]),
        yaw=yaw,
        width=round(width, _WIDTH_DECIMALS) if width > 0 and math.isfinite(width) else None,
        normal=normal if np.linalg.norm(normal) > 0 else None,
        method=str(msg.target_method),
        confidence=round(float(msg.target_confidence), _CONFIDENCE_DECIMALS),
        frame=frame,
    )


def action_from_msg(msg: Any, index: int = 0) -> GroundedAction:
    """GroundedAction message -> plan action (with its 3D target when the message carries one)."""
    return GroundedAction(
        type=str(msg.type),
        object=str(msg.object),
        target=str(msg.target),
        bbox=_coords(msg.bbox) if len(msg.bbox) else None,  # type: ignore[arg-type]
        point=_coords(msg.point) if len(msg.point) else None,  # type: ignore[arg-type]
        target_3d=target_from_msg(msg, index),
    )


def plan_from_msg(msg: Any, *, validate: bool = True) -> GroundedPlan:
    """GroundedPlan message -> plan model (targets, reason, warnings included).

    Raises :class:`~grounded_planner.plan.PlanError` naming the action and rule when ``validate`` and the plan
    breaks a rule of the plan model.
    """
    actions = [action_from_msg(a, i) for i, a in enumerate(msg.actions)]
    plan = GroundedPlan(
        instruction=str(msg.instruction),
        image_size=(int(msg.image_width), int(msg.image_height)),
        actions=actions,
        reason=str(msg.reason) or ("" if actions else EMPTY_PLAN_REASON),
        warnings=[str(w) for w in msg.warnings],
        model=str(msg.model),
        raw_response=str(msg.raw_response),
    )
    if validate:
        plan.validate()
    return plan


def target_frame(msg: Any) -> str:
    """The frame of a plan message's targets ('' when none is back-projected); ValueError when they differ."""
    frames = sorted({str(a.pose.header.frame_id) for a in msg.actions} - {""})
    if len(frames) > 1:
        raise InputError(f"the plan's poses are in several frames {frames}; expected one")
    return frames[0] if frames else ""
