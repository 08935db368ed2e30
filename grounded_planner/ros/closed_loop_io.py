"""The closed loop's eyes and planner inside the ROS graph: the latest camera frame (colour, aligned depth,
camera_info) and the plan service (``/grounded_planner/plan``) called with that frame, for re-grounding a step and
for replanning the rest. Used by executor_node with ``closed_loop: true``."""

from __future__ import annotations

import dataclasses
import threading
from typing import Sequence

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Image

from grounded_planner.errors import RunFailure
from grounded_planner_interfaces.srv import GetGroundedPlan

from grounded_planner.execution.closed_loop import Observation
from grounded_planner.msgs.images import color_to_rgb, depth_to_m, numpy_to_image
from grounded_planner.plan import GroundedAction, GroundedPlan
from grounded_planner.ros import names
from grounded_planner.ros.convert import plan_from_msg
from grounded_planner.ros.frames import LatestFrames, camera_model, check_depth_aligned, frame_check
from grounded_planner.ros.reach import Reachability, wait_spun_elsewhere
from grounded_planner.vlm.prompts import instruction_with_done


class PlanServiceError(RunFailure):
    """The plan service did not answer, or answered with a failure (its message is kept)."""


class RosClosedLoopIO:
    """``observe``, ``plan`` and ``locate`` for :class:`~grounded_planner.execution.closed_loop.ClosedLoop`.

    ``locate`` asks the plan service again for the episode's instruction on the fresh frame and keeps the action
    of the same type about the same object (the planner is the only model in the graph).
    """

    def __init__(
        self, node: Node, frames: LatestFrames, extrinsics, frame_wait_s: float = 5.0, service_timeout_s: float = 120.0
    ):
        self.node = node
        self.frames = frames
        self.extrinsics = extrinsics
        self.frame_wait_s = frame_wait_s
        self.service_timeout_s = service_timeout_s
        self.instruction = ""  # the episode's instruction (set by the caller before each run)
        self._plan_service = node.resolve_service_name(names.PLAN_SERVICE)  # the planner of this node's namespace
        self._client = node.create_client(GetGroundedPlan, self._plan_service, callback_group=ReentrantCallbackGroup())
        self._reach = Reachability(node, wait_spun_elsewhere)  # the node spins in the executor's other threads

    def observe(self) -> Observation:
        """A frame taken after this call (colour and depth both newer): a check must not look at the scene as it
        was before the motion it checks."""
        asked_ns = self.node.get_clock().now().nanoseconds
        # colour, depth and camera_info taken together: fresh, of one instant, and taken after this call
        check = dataclasses.replace(frame_check(self.node), not_before_ns=asked_ns)
        snap = self.frames.wait_for(("color", "depth", "camera_info"), self.frame_wait_s, check)
        check_depth_aligned(snap.depth, snap.camera_info, snap.depth_camera_info)
        camera = camera_model(snap.camera_info, snap.depth.header.frame_id or snap.camera_info.header.frame_id)
        return Observation(color_to_rgb(snap.color), depth_to_m(snap.depth), camera, self.extrinsics)

    def plan(self, rgb: np.ndarray, instruction: str, done: Sequence[str] = ()) -> GroundedPlan:
        request = GetGroundedPlan.Request(instruction=instruction_with_done(instruction, done), backproject=False)
        request.image = numpy_to_image(np.ascontiguousarray(rgb), Image, "rgb8")
        request.image.header.frame_id = "camera_color_optical_frame"
        if not self._client.wait_for_service(timeout_sec=self.frame_wait_s):
            raise PlanServiceError(f"{self._plan_service} is not available (is planner_node running?)")
        self._reach.ensure(self._plan_service, self.frame_wait_s)
        done_event = threading.Event()
        future = self._client.call_async(request)
        future.add_done_callback(lambda _f: done_event.set())
        if not done_event.wait(self.service_timeout_s) or future.result() is None:
            self._client.remove_pending_request(future)
            self._reach.forget(self._plan_service)
            raise PlanServiceError(f"{self._plan_service} did not answer within {self.service_timeout_s:g} s")
        response = future.result()
        if not response.success:
            raise PlanServiceError(f"{self._plan_service}: {response.message}")
        plan = plan_from_msg(response.plan)
        plan.instruction = instruction
        return plan

    def locate(self, rgb: np.ndarray, action: GroundedAction) -> GroundedAction | None:
        try:
            plan = self.plan(rgb, self.instruction or action.object)
        except PlanServiceError as exc:
            self.node.get_logger().warning(f"re-grounding {action.type} {action.object!r}: {exc}")
            return None
        for candidate in plan.actions:
            same = candidate.target == action.target if action.type == "place" else candidate.object == action.object
            if candidate.type == action.type and same:
                return candidate
        return None
