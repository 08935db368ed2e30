"""franka_gripper action client (homing, move, grasp) for the moveit execution backend: rclpy lives here, not there.

Mirrors franka_ros2's ``franka_gripper/src/gripper_action_server.cpp`` (v1.x .. v3.4, identical there): the node
serves ``~/homing``, ``~/move``, ``~/grasp`` (franka_msgs/action/Homing, Move, Grasp; result ``success`` and
``error``), accepts every goal and every cancel (a cancel stops the fingers and ends the goal CANCELED), and
publishes ``~/joint_states`` with both finger joints at width/2. The node's name depends on the release
(:func:`grounded_planner.execution.backends.moveit_backend.franka_gripper_namespace`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from grounded_planner.errors import RunFailure

FRANKA_HAND_MAX_WIDTH_M = 0.08
#: rclpy's GoalStatus values (action_msgs/msg/GoalStatus)
STATUS_NAMES = {
    0: "UNKNOWN",
    1: "ACCEPTED",
    2: "EXECUTING",
    3: "CANCELING",
    4: "SUCCEEDED",
    5: "CANCELED",
    6: "ABORTED",
}
STATUS_CANCELED = 5
FRESH_WIDTH_WAIT_S = 0.5  # width() waits this long for joint_states newer than the last result
SERVER_WAIT_S = 5.0  # how long a call waits to discover its action server before saying it is missing


class FrankaGripperClient:
    """Blocking calls to the ``<namespace>/{homing,move,grasp}`` actions of franka_gripper, with the finger width
    read from ``<namespace>/joint_states`` (sum of the two finger joints). Runs its own node and executor thread
    (in ``context``, default: rclpy's default context, initialised here if nobody has).

    Each call returns the action's ``success`` and keeps its ``error`` in :attr:`last_error`; it raises
    ``ConnectionError`` when no server serves the action (after ``server_wait_s`` of discovery) and
    ``TimeoutError`` when the server does not accept or finish the goal within ``timeout_s`` of sending it (the
    goal is then cancelled). :meth:`cancel` (any thread) cancels
    the goal in flight, also one whose acceptance has not arrived yet.
    """

    def __init__(
        self,
        namespace: str = "/franka_gripper",
        max_width_m: float = FRANKA_HAND_MAX_WIDTH_M,
        context: Any = None,
        node_name: str = "grounded_planner_franka_gripper",
        server_wait_s: float = SERVER_WAIT_S,
    ):
        import rclpy  # lazy: ROS package (rclpy), absent without a ROS install

        # lazy: ROS package (franka_msgs), absent without a ROS install
        from franka_msgs.action import Grasp, Homing, Move
        from rclpy.action import ActionClient  # lazy: ROS package (rclpy), absent without a ROS install
        from rclpy.executors import SingleThreadedExecutor  # lazy: ROS package (rclpy), absent without a ROS install
        from sensor_msgs.msg import JointState  # lazy: ROS package (sensor_msgs), absent without a ROS install

        from grounded_planner.ros.reach import Reachability, wait_spun_elsewhere  # lazy: imports rclpy (above)

        if context is None and not rclpy.ok():
            rclpy.init()
        self.namespace = "/" + namespace.strip("/")
        self._types = {"move": Move, "grasp": Grasp, "homing": Homing}
        self._max_width_m = float(max_width_m)
        self._homed_width_m: float | None = None  # the opening homing reached: the hand's real maximum
        self._server_wait_s = float(server_wait_s)
        self._node = rclpy.create_node(node_name, context=context)
        self._clients = {
            name: ActionClient(self._node, kind, f"{self.namespace}/{name}") for name, kind in self._types.items()
        }
        # before the first goal to a gripper server (re)start: the server must see this client (ros/reach.py)
        self._reach = Reachability(self._node, wait_spun_elsewhere)
        self._width_m: float | None = None
        self._width_at = float("-inf")  # when the last joint_states arrived (monotonic)
        self._goal_ended_at = float("-inf")  # when the last goal's result arrived
        self._fresh = threading.Condition()
        self._node.create_subscription(JointState, f"{self.namespace}/joint_states", self._on_joints, 10)
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self._node)
        self._spin = threading.Thread(target=self._executor.spin, name="franka-gripper", daemon=True)
        self._spin.start()
        self._state = threading.Lock()
        self._goal_handle: Any = None
        self._cancel_requested = False
        self._closed = False
        self.last_error = ""

    def _on_joints(self, msg: Any) -> None:
        if len(msg.position) >= 2:
            with self._fresh:
                self._width_m = float(msg.position[0] + msg.position[1])
                self._width_at = time.monotonic()
                self._fresh.notify_all()

    @staticmethod
    def _wait(future: Any, deadline: float) -> bool:
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        return done.wait(max(0.0, deadline - time.monotonic()))

    def _call(self, name: str, goal: Any, timeout_s: float) -> bool:
        client = self._clients[name]
        action = f"{self.namespace}/{name}"
        with self._state:
            self._cancel_requested = False
        # discovery has its own budget: timeout_s bounds the gripper's answer, not DDS discovery
        if not client.wait_for_server(timeout_sec=self._server_wait_s):
            raise ConnectionError(
                f"no action server {action} after {self._server_wait_s:.0f} s (is franka_gripper "
                f"running, and is franka_ros2_version/robot_namespace right for its release?)"
            )
        self._reach.ensure(action, self._server_wait_s, action=True)
        deadline = time.monotonic() + float(timeout_s)
        sent = client.send_goal_async(goal)
        if not self._wait(sent, deadline):
            self._reach.forget(action, action=True)
            raise TimeoutError(f"{action} did not answer the goal within {timeout_s:.1f} s")
        handle = sent.result()
        if not handle.accepted:
            self.last_error = f"{action} rejected the goal"
            return False
        with self._state:
            self._goal_handle = handle
            cancel_now = self._cancel_requested
        if cancel_now:  # cancel() came while the goal was on its way
            handle.cancel_goal_async()
        try:
            result = handle.get_result_async()
            if not self._wait(result, deadline):
                handle.cancel_goal_async()
                raise TimeoutError(f"{action} did not finish within {timeout_s:.1f} s (goal cancelled)")
        finally:
            with self._state:
                self._goal_handle = None
        with self._fresh:
            self._goal_ended_at = time.monotonic()
        answer = result.result()
        if answer.status == STATUS_CANCELED:
            self.last_error = f"{action} canceled"
            return False
        self.last_error = str(answer.result.error)
        return bool(answer.result.success)

    def move(self, width_m: float, speed_mps: float, timeout_s: float) -> bool:
        goal = self._types["move"].Goal()
        goal.width, goal.speed = float(width_m), float(speed_mps)
        return self._call("move", goal, timeout_s)

    def grasp(
        self,
        width_m: float,
        speed_mps: float,
        force_n: float,
        epsilon_inner_m: float,
        epsilon_outer_m: float,
        timeout_s: float,
    ) -> bool:
        goal = self._types["grasp"].Goal()
        goal.width, goal.speed, goal.force = float(width_m), float(speed_mps), float(force_n)
        goal.epsilon.inner, goal.epsilon.outer = float(epsilon_inner_m), float(epsilon_outer_m)
        return self._call("grasp", goal, timeout_s)

    def homing(self, timeout_s: float) -> bool:
        """Home the fingers; on success the opening they reached is this hand's :meth:`max_width` (libfranka's
        ``GripperState::max_width`` is "estimated by homing"; a real hand opens a little less than its nominal
        0.08 m, and a move wider than the homed width is rejected)."""
        ok = self._call("homing", self._types["homing"].Goal(), timeout_s)
        if ok:
            self._homed_width_m = self.width()
        return ok

    def width(self) -> float:
        """Finger opening, m, from a joint_states message published after the last goal ended (joint_states come
        at 15 Hz, so the one just before a result still shows the fingers moving); waits up to
        ``FRESH_WIDTH_WAIT_S`` for it."""
        with self._fresh:
            self._fresh.wait_for(lambda: self._width_at > self._goal_ended_at, timeout=FRESH_WIDTH_WAIT_S)
            if self._width_m is None:
                raise RunFailure(f"no {self.namespace}/joint_states received yet")
            return self._width_m

    def max_width(self) -> float:
        """The homed opening, m (the nominal ``max_width_m`` before a successful :meth:`homing`)."""
        return self._max_width_m if self._homed_width_m is None else self._homed_width_m

    def state_age_s(self) -> float:
        """Seconds since the last joint_states of the gripper arrived (inf before the first): franka_gripper
        publishes them while the robot answers, so an age well beyond their period says the robot is gone."""
        with self._fresh:
            return time.monotonic() - self._width_at

    def cancel(self) -> None:
        with self._state:
            self._cancel_requested = True
            handle = self._goal_handle
        if handle is not None:
            handle.cancel_goal_async()

    def close(self) -> None:
        """Stop the spin thread and release the node (idempotent; an open goal is left to the server)."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(timeout_sec=1.0)
        for client in self._clients.values():
            client.destroy()
        self._node.destroy_node()
        self._spin.join(1.0)


def make_gripper_client(config: Any) -> FrankaGripperClient:
    """The moveit backend's ``gripper_factory``: a client for ``config.gripper_namespace``
    (:class:`grounded_planner.execution.backends.moveit_backend.MoveItConfig`)."""
    return FrankaGripperClient(config.gripper_namespace)
