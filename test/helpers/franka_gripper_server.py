"""Test double of franka_ros2's franka_gripper node (GripperActionServer), run as a child process over Fast DDS.

Mirrors ``franka_gripper/src/gripper_action_server.cpp`` and ``include/.../gripper_action_server.hpp`` of
franka_ros2 v3.4.0 (jazzy; the same in v1.0.0 .. v2.5.0): actions ``~/homing``, ``~/move``, ``~/grasp``
(franka_msgs, built for the test), every goal ACCEPT_AND_EXECUTE, every cancel ACCEPT; a cancel stops the fingers
where they are and ends the goal CANCELED; the result's ``success`` is what libfranka's call returned: a grasp
is answered as libfranka 0.15.0 answers it (franka_hand.py: fingers stopping outside
``(width - epsilon.inner, width + epsilon.outer)`` give ``success=false`` with an empty ``error``; a window reaching
beyond the homed opening is refused before the fingers move, ``success=false`` with "libfranka gripper: Command
failed!"); a command libfranka rejects is ``success=false`` with its message; ``~/joint_states`` at 15 Hz with both finger joints at width/2; goal
feedback ``current_width`` at 30 Hz. The hand is a Franka Hand: 0.08 m nominal stroke, but homing measures the
opening it really has (libfranka's ``GripperState::max_width``, "estimated by homing the gripper"), a little less on
a real hand: this one homes to ``HOMED_WIDTH_M``, and a move wider than that is rejected as libfranka rejects it.
Fingers move at the goal speed.

    python franka_gripper_server.py --node-name franka_gripper [--namespace ns] [--object-width-m 0.03]
        [--mode normal|silent|stuck]

``silent``: the node and its action servers exist but never answer a goal request; ``stuck``: goals are accepted
and never end, cancels included (a hung libfranka call). Prints READY when its servers are up.
"""

from __future__ import annotations

import argparse
import threading
import time

import rclpy
from franka_msgs.action import Grasp, Homing, Move
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from sensor_msgs.msg import JointState

from franka_hand import grasp_held, grasp_refusal  # beside this script (test/helpers)

MAX_WIDTH_M = 0.08  # the Franka Hand's nominal stroke: all a move may ask before homing
HOMED_WIDTH_M = 0.0787  # what homing measures on this hand (not the nominal 0.08)
FEEDBACK_PERIOD_S = 1.0 / 30  # feedback_publish_rate: 30 in franka_gripper_node.yaml
STATE_PERIOD_S = 1.0 / 15  # state_publish_rate: 15


class FakeFrankaGripper:
    def __init__(self, node, object_width_m: float | None, mode: str, arm_id: str):
        self.node, self.object_width_m, self.mode = node, object_width_m, mode
        self.width_m = 0.04  # wherever the fingers were left; homing opens them fully
        self.max_width_m = MAX_WIDTH_M  # until homing measures it
        self.lock = threading.Lock()
        group = ReentrantCallbackGroup()
        self.servers = [
            ActionServer(
                node,
                kind,
                f"~/{name}",
                execute_callback=getattr(self, f"execute_{name}"),
                goal_callback=self.handle_goal,
                cancel_callback=lambda _: CancelResponse.ACCEPT,
                callback_group=group,
            )
            for name, kind in (("homing", Homing), ("move", Move), ("grasp", Grasp))
        ]
        self.joints = node.create_publisher(JointState, "~/joint_states", 1)
        self.joint_names = [f"{arm_id}_finger_joint1", f"{arm_id}_finger_joint2"]
        node.create_timer(STATE_PERIOD_S, self.publish_state, callback_group=group)

    def handle_goal(self, _goal) -> GoalResponse:
        if self.mode == "silent":
            while rclpy.ok():  # never answers: the goal response never leaves
                time.sleep(0.1)
        return GoalResponse.ACCEPT

    def publish_state(self) -> None:
        msg = JointState()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.name = list(self.joint_names)
        with self.lock:
            msg.position = [self.width_m / 2, self.width_m / 2]
        msg.velocity, msg.effort = [0.0, 0.0], [0.0, 0.0]
        self.joints.publish(msg)

    def drive(self, handle, kind, target_m: float, speed_mps: float, stop_at_m: float | None):
        """Move the fingers towards ``target_m`` (stopping at an object at ``stop_at_m``); False if cancelled."""
        while True:
            if self.mode == "stuck":
                time.sleep(FEEDBACK_PERIOD_S)
                continue
            if handle.is_cancel_requested:
                return False
            with self.lock:
                step = speed_mps * FEEDBACK_PERIOD_S
                goal = target_m if stop_at_m is None else max(target_m, stop_at_m)
                if abs(goal - self.width_m) <= step:
                    self.width_m = goal
                    return True
                self.width_m += step if goal > self.width_m else -step
                width = self.width_m
            handle.publish_feedback(kind.Feedback(current_width=width))
            time.sleep(FEEDBACK_PERIOD_S)

    def finish(self, handle, kind, ok: bool | None, error: str = ""):
        result = kind.Result(success=bool(ok), error=error)
        if ok is None:  # cancelled: libfranka's stop() ended the command
            handle.canceled()
        elif ok:
            handle.succeed()
        else:
            handle.abort()
        return result

    def execute_homing(self, handle):
        done = self.drive(handle, Homing, HOMED_WIDTH_M, 0.1, None)
        if done:
            self.max_width_m = HOMED_WIDTH_M
        return self.finish(handle, Homing, True if done else None)

    def execute_move(self, handle):
        goal = handle.request
        if not 0.0 <= goal.width <= self.max_width_m or goal.speed <= 0.0:
            return self.finish(handle, Move, False, "libfranka gripper: command rejected: width or speed out of range")
        done = self.drive(handle, Move, goal.width, goal.speed, None)
        return self.finish(handle, Move, True if done else None)

    def execute_grasp(self, handle):
        goal = handle.request
        refusal = grasp_refusal(goal.width, goal.epsilon.inner, goal.epsilon.outer, self.max_width_m)
        if refusal:  # libfranka threw CommandException; franka_gripper's executeCommand reports e.what()
            return self.finish(handle, Grasp, False, refusal)
        # the fingers close until they meet the object or each other; the width only decides success
        done = self.drive(handle, Grasp, 0.0, goal.speed, self.object_width_m)
        if not done:
            return self.finish(handle, Grasp, None)
        with self.lock:
            width = self.width_m
        held = grasp_held(goal.width, goal.epsilon.inner, goal.epsilon.outer, width)
        return self.finish(handle, Grasp, held)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--node-name", default="franka_gripper")
    parser.add_argument("--namespace", default="")
    parser.add_argument("--arm-id", default="fr3")
    parser.add_argument("--object-width-m", type=float, default=None)
    parser.add_argument("--mode", choices=("normal", "silent", "stuck"), default="normal")
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node(args.node_name, namespace=args.namespace or None)
    FakeFrankaGripper(node, args.object_width_m, args.mode, args.arm_id)
    executor = MultiThreadedExecutor(num_threads=6)
    executor.add_node(node)
    print("READY", flush=True)
    try:
        executor.spin()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
