"""franka_gripper action client (move, grasp, homing) for the moveit execution backend: rclpy lives here, not there."""

from __future__ import annotations

import threading
import time
from typing import Any

FRANKA_HAND_MAX_WIDTH_M = 0.08


class FrankaGripperClient:
    """Blocking calls to the ``<ns>/move``, ``<ns>/grasp`` and ``<ns>/homing`` actions of franka_gripper, with the
    finger width read from ``<ns>/joint_states`` (sum of the two finger joints). Runs its own node and executor
    thread in the default rclpy context (moveit_py has already initialised it on a ROS install)."""

    def __init__(self, namespace: str = "/fr3_gripper", max_width_m: float = FRANKA_HAND_MAX_WIDTH_M):
        import rclpy
        from franka_msgs.action import Grasp, Homing, Move
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState

        if not rclpy.ok():
            rclpy.init()
        ns = namespace.rstrip("/")
        self._types = {"move": Move, "grasp": Grasp, "homing": Homing}
        self._max_width_m = float(max_width_m)
        self._node = rclpy.create_node("grounded_planner_franka_gripper")
        self._clients = {name: ActionClient(self._node, kind, f"{ns}/{name}") for name, kind in self._types.items()}
        self._width_m: float | None = None
        self._node.create_subscription(JointState, f"{ns}/joint_states", self._on_joints, 10)
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self._node)
        self._spin = threading.Thread(target=self._executor.spin, name="franka-gripper", daemon=True)
        self._spin.start()
        self._goal_handle: Any = None

    def _on_joints(self, msg: Any) -> None:
        self._width_m = float(sum(msg.position[:2]))

    def _call(self, name: str, goal: Any, timeout_s: float) -> bool:
        client = self._clients[name]
        if not client.wait_for_server(timeout_sec=min(timeout_s, 5.0)):
            raise RuntimeError(f"action server {client._action_name} not available")  # noqa: SLF001
        sent = client.send_goal_async(goal)
        deadline = time.monotonic() + timeout_s
        while not sent.done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        handle = sent.result()
        if not handle.accepted:
            return False
        self._goal_handle = handle
        result = handle.get_result_async()
        while not result.done():
            if time.monotonic() > deadline:
                handle.cancel_goal_async()
                return False
            time.sleep(0.005)
        self._goal_handle = None
        return bool(result.result().result.success)

    def move(self, width_m: float, speed_mps: float, timeout_s: float) -> bool:
        goal = self._types["move"].Goal()
        goal.width, goal.speed = float(width_m), float(speed_mps)
        return self._call("move", goal, timeout_s)

    def grasp(self, width_m: float, speed_mps: float, force_n: float, epsilon_inner_m: float,
              epsilon_outer_m: float, timeout_s: float) -> bool:
        goal = self._types["grasp"].Goal()
        goal.width, goal.speed, goal.force = float(width_m), float(speed_mps), float(force_n)
        goal.epsilon.inner, goal.epsilon.outer = float(epsilon_inner_m), float(epsilon_outer_m)
        return self._call("grasp", goal, timeout_s)

    def homing(self, timeout_s: float) -> bool:
        return self._call("homing", self._types["homing"].Goal(), timeout_s)

    def width(self) -> float:
        if self._width_m is None:
            raise RuntimeError("no gripper joint_states received yet")
        return self._width_m

    def max_width(self) -> float:
        return self._max_width_m

    def cancel(self) -> None:
        handle = self._goal_handle
        if handle is not None:
            handle.cancel_goal_async()

    def close(self) -> None:
        self._executor.shutdown()
        self._node.destroy_node()
