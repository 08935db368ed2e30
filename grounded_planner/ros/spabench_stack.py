"""The live graph as a Spa-Bench session's stack: the plan service and the execute action (GroundedPlannerClient)
and the camera's latest frame, for `spabench session`."""

from __future__ import annotations

import contextlib
from typing import Iterator

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from grounded_planner.geometry.errors import CameraModelError
from grounded_planner.msgs.images import color_to_rgb, depth_to_m
from grounded_planner.plan import GroundedPlan
from grounded_planner.ros import names
from grounded_planner.ros.client import ExecuteStatus, GroundedPlannerClient
from grounded_planner.ros.frames import LatestFrames, NoFrameError, camera_model
from grounded_planner.spabench.session import Frame, StackExecution, StackPlan

COLOR_TOPIC = names.COLOR_IMAGE  # relative: the stack of the node's namespace
DEPTH_TOPIC = names.ALIGNED_DEPTH_IMAGE
CAMERA_INFO_TOPIC = names.COLOR_CAMERA_INFO


class RosStack:
    """:class:`grounded_planner.spabench.session.Stack` over a running graph (bringup or launch).

    ``execute`` blocks until the executor's result: with ``require_approval`` on the executor, that includes the
    wait for `grounded-planner approve` (a rejected plan moves nothing and comes back as a failed execution)."""

    def __init__(
        self,
        node: Node,
        executor=None,
        plan_timeout_s: float = 120.0,
        execute_timeout_s: float = 600.0,
        frame_wait_s: float = 5.0,
        color_topic: str = COLOR_TOPIC,
        depth_topic: str = DEPTH_TOPIC,
        camera_info_topic: str = CAMERA_INFO_TOPIC,
    ):
        self.client = GroundedPlannerClient(node, executor=executor)
        self.executor = executor
        self.frames = LatestFrames(node, color_topic, depth_topic, camera_info_topic)
        self.plan_timeout_s, self.execute_timeout_s, self.frame_wait_s = plan_timeout_s, execute_timeout_s, frame_wait_s

    def frame(self) -> Frame | None:
        if self.executor is not None:
            self.executor.spin_once(timeout_sec=0.05)  # let camera_info callbacks run
        try:
            snap = self.frames.wait_for(("color", "depth"), self.frame_wait_s)
        except NoFrameError:
            return None
        rgb = color_to_rgb(snap.color)
        depth = depth_to_m(snap.depth) if snap.depth is not None else None
        camera = None
        if snap.camera_info is not None:
            try:
                camera = camera_model(snap.camera_info)
            except CameraModelError:
                camera = None
        return Frame(rgb, depth, camera)

    def plan(self, instruction: str) -> StackPlan:
        result = self.client.plan(
            instruction, backproject=True, timeout_s=self.plan_timeout_s, service_wait_s=self.frame_wait_s
        )
        return StackPlan(result.plan, "" if result.succeeded else result.message)

    def execute(self, plan: GroundedPlan) -> StackExecution:
        result = self.client.execute(plan, timeout_s=self.execute_timeout_s, server_wait_s=self.frame_wait_s)
        return StackExecution(result.status is ExecuteStatus.SUCCEEDED, result.message, list(result.step_outcomes))

    def destroy(self) -> None:
        self.client.destroy()


@contextlib.contextmanager
def live_stack(node_name: str = "spabench_session", **kwargs) -> Iterator[RosStack]:
    """A :class:`RosStack` on a node of its own (rclpy initialised here and shut down on exit), for the CLI."""
    rclpy.init()
    try:
        node = rclpy.create_node(node_name)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        stack = RosStack(node, executor=executor, **kwargs)
        try:
            yield stack
        finally:
            stack.destroy()
            executor.shutdown()
            node.destroy_node()
    finally:
        rclpy.try_shutdown()
