"""sensor_msgs/JointState from joint names and values, for rclpy and rosbags message classes alike."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.msgs.plan import TypeSource, header_msg, resolver

JOINT_STATE_MSGTYPE = "sensor_msgs/msg/JointState"


class JointStateError(InputError):
    """Joint names and values that do not pair up (the message names both lengths)."""


def joint_state_msg(
    types: TypeSource,
    names: Sequence[str],
    position: Sequence[float],
    stamp_ns: int = 0,
    velocity: Sequence[float] = (),
    effort: Sequence[float] = (),
    frame_id: str = "",
) -> Any:
    """JointState with positions (rad or m, as the robot reports them), optional velocities and efforts."""
    for what, values in (("positions", position), ("velocities", velocity), ("efforts", effort)):
        if len(values) and len(values) != len(names):
            raise JointStateError(f"joint state has {len(names)} names but {len(values)} {what}")
    JointState = resolver(types)(JOINT_STATE_MSGTYPE)
    # rosbags classes (dataclasses) take float64 arrays; rclpy's take sequences of floats
    as_values = (
        (lambda v: np.asarray(v, dtype=np.float64))
        if hasattr(JointState, "__dataclass_fields__")
        else (lambda v: [float(x) for x in v])
    )
    return JointState(
        header=header_msg(types, stamp_ns, frame_id),
        name=[str(n) for n in names],
        position=as_values(position),
        velocity=as_values(velocity),
        effort=as_values(effort),
    )
