"""What the moveit backend needs from a ROS install: moveit_py, the PoseStamped goal type, the franka_gripper client."""

from __future__ import annotations

import threading
import time
from typing import Any

import rclpy
from geometry_msgs.msg import PoseStamped
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState

from grounded_planner.execution.backend import BackendFault
from grounded_planner.ros.franka_gripper import make_gripper_client


def load_moveit_py() -> Any:
    """The ``moveit.planning`` module of moveit_py (MoveItPy, PlanRequestParameters), or a BackendFault saying how to
    install it; imported only when a moveit backend connects."""
    try:
        from moveit import planning  # optional SDK: ROS 2 installs with MoveIt only
    except ImportError as exc:
        raise BackendFault(
            "moveit: the moveit backend needs moveit_py (ROS 2 Jazzy or later with MoveIt 2: "
            f"apt install ros-jazzy-moveit-py); it is not importable here: {exc}"
        ) from exc
    return planning


def wait_for_joint_states(topic: str, timeout_s: float, context: Any = None) -> bool:
    """True once a JointState arrives on ``topic`` within ``timeout_s``. Waits in short Python slices, so a Ctrl-C
    (KeyboardInterrupt) ends it at once, unlike MoveItPy's constructor, which waits for the same with the GIL held."""
    if context is None and not rclpy.ok():
        rclpy.init()
    node = rclpy.create_node("grounded_planner_state_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    got = threading.Event()
    try:
        node.create_subscription(JointState, topic, lambda _msg: got.set(), 10)
        executor.add_node(node)
        deadline = time.monotonic() + timeout_s
        while not got.is_set() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        return got.is_set()
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()


def moveit_backend_args() -> dict[str, Any]:
    """Keyword arguments of ``make_backend("moveit", config, ...)`` for a ROS install."""
    return {
        "moveit_loader": load_moveit_py,
        "pose_stamped_type": PoseStamped,
        "gripper_factory": make_gripper_client,
        "state_probe": wait_for_joint_states,
    }
