"""What the moveit backend needs from a ROS install: moveit_py, the PoseStamped goal type, the franka_gripper client."""

from __future__ import annotations

from typing import Any

from geometry_msgs.msg import PoseStamped

from grounded_planner.execution.backend import BackendFault
from grounded_planner.ros.franka_gripper import make_gripper_client


def load_moveit_py() -> Any:
    """The ``moveit.planning`` module of moveit_py (MoveItPy, PlanRequestParameters), or a BackendFault saying how to
    install it; imported only when a moveit backend connects."""
    try:
        from moveit import planning  # optional SDK: ROS 2 installs with MoveIt only
    except ImportError as exc:
        raise BackendFault("moveit: the moveit backend needs moveit_py (ROS 2 Jazzy or later with MoveIt 2: "
                           f"apt install ros-jazzy-moveit-py); it is not importable here: {exc}") from exc
    return planning


def moveit_backend_args() -> dict[str, Any]:
    """Keyword arguments of ``make_backend("moveit", config, ...)`` for a ROS install."""
    return {"moveit_loader": load_moveit_py, "pose_stamped_type": PoseStamped, "gripper_factory": make_gripper_client}
