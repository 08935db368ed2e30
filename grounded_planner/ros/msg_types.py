"""Message classes of rclpy by ROS type name, for the rclpy-free converters in ``grounded_planner.msgs``."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from grounded_planner.errors import InputError


@cache
def rclpy_type(name: str) -> Any:
    """The rclpy message class of ``name`` (``"geometry_msgs/msg/Pose"`` or ``"geometry_msgs/Pose"``)."""
    parts = name.split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3:
        raise InputError(f"message type {name!r} is not of the form package/msg/Name")
    package, kind, cls = parts
    return getattr(importlib.import_module(f"{package}.{kind}"), cls)
