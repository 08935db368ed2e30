"""backprojection_node: pixel GroundedPlan in (topic), the same plan with 3D poses out, plus target markers."""

from __future__ import annotations

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from visualization_msgs.msg import MarkerArray

from grounded_planner.errors import InputError
from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg

from grounded_planner.ros import names
from grounded_planner.ros.convert import plan_from_msg, plan_to_msg
from grounded_planner.ros.frames import (
    BACKPROJECTION_PARAMS,
    FRESHNESS_PARAMS,
    frame_check,
    stamp_ns,
    LatestFrames,
    NoFrameError,
    backproject,
    depth_info_topic,
)
from grounded_planner.ros.node_main import StackNode, run_node
from grounded_planner.ros.params import (
    Param,
    declare_all,
    resolve_data_path,
    non_empty,
    non_negative,
    values,
)
from grounded_planner.ros.visualize import plan_markers
from grounded_planner.geometry.extrinsics import Extrinsics

PARAMS = [
    Param("input_topic", names.PLAN_PIXELS, "GroundedPlan in pixels to back-project", non_empty, read_only=True),
    Param("output_topic", names.PLAN_3D, "the same plan with every action's pose filled", non_empty, read_only=True),
    Param(
        "targets_topic",
        names.TARGETS,
        "GroundedPlan: the back-projected plan again, for subscribers of the targets (width, normal, method inside)",
        non_empty,
        read_only=True,
    ),
    Param(
        "markers_topic",
        names.TARGET_MARKERS,
        "visualization_msgs/MarkerArray of the 3D targets",
        non_empty,
        read_only=True,
    ),
    *BACKPROJECTION_PARAMS,
    Param(
        "frame_wait_s",
        5.0,
        "how long a plan waits for a depth image and camera_info that are there, fresh and one instant, seconds",
        non_negative,
    ),
    *FRESHNESS_PARAMS,
]


class BackprojectionNode(StackNode, Node):
    """For every plan on ``input_topic``: poses from the latest depth + camera_info + extrinsics on ``output_topic``.

    A plan that cannot be back-projected (no depth yet, a target without valid depth) is logged with the
    reason and republished nowhere: downstream nodes never receive a plan with missing poses.
    """

    def __init__(self, node_name: str = "backprojection", **kwargs):
        super().__init__(node_name, **kwargs)
        self._extrinsics = None
        declare_all(
            self,
            PARAMS,
            on_change=lambda changed: setattr(self, "_extrinsics", None) if "extrinsics_file" in changed else None,
        )
        p = values(self, PARAMS)
        self._frames = LatestFrames(
            self,
            "",
            p["depth_topic"],
            p["camera_info_topic"],
            callback_group=MutuallyExclusiveCallbackGroup(),
            depth_camera_info_topic=depth_info_topic(p["depth_camera_info_topic"], p["depth_topic"]),
        )
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._out = self.create_publisher(GroundedPlanMsg, p["output_topic"], latched)
        self._targets_out = self.create_publisher(GroundedPlanMsg, p["targets_topic"], latched)
        self._markers_out = self.create_publisher(MarkerArray, p["markers_topic"], latched)
        # its own group: waiting for depth must not hold up the depth subscription itself
        self.create_subscription(
            GroundedPlanMsg,
            p["input_topic"],
            self._on_plan,
            QoSProfile(depth=5),
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.plans_done = 0
        self.last_error = ""

    def extrinsics(self):
        path = self.get_parameter("extrinsics_file").value
        if path and self._extrinsics is None:
            self._extrinsics = Extrinsics.load(resolve_data_path(path))
        return self._extrinsics if path else None

    def _on_plan(self, msg: GroundedPlanMsg) -> None:
        try:
            out, plan = self.process(msg)
        except (NoFrameError, InputError) as exc:  # GeometryError, PlanError; a bug is not 'cannot back-project'
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"cannot back-project plan {msg.instruction!r}: {self.last_error}")
            return
        self._out.publish(out)
        self._targets_out.publish(out)
        self._markers_out.publish(plan_markers(plan, namespace="targets", stamp=out.header.stamp))
        self.plans_done += 1
        for warning in plan.warnings:
            self.get_logger().warning(f"plan {msg.instruction!r}: {warning}")

    def process(self, msg: GroundedPlanMsg):
        """(plan message with its targets, plan model with its targets) for a pixel plan message.

        Raises NoFrameError, GeometryError or PlanError.
        """
        plan = plan_from_msg(msg)
        # depth and camera_info fresh and of one instant (StaleFrameError / UnmatchedFramesError otherwise)
        snap = self._frames.wait_for(
            ("depth", "camera_info"), self.get_parameter("frame_wait_s").value, frame_check(self)
        )
        located = backproject(
            plan,
            snap.depth,
            snap.camera_info,
            self.extrinsics(),
            depth_camera_info=snap.depth_camera_info,
            depth_registered=self.get_parameter("depth_registered").value,
        )
        # a plan made on an older image than this depth (a slow model upstream): said in the plan, not silent
        plan_ns, max_age_s = stamp_ns(msg), self.get_parameter("max_frame_age_s").value
        lag_s = (stamp_ns(snap.depth) - plan_ns) / 1e9
        if plan_ns and max_age_s > 0 and lag_s > max_age_s:
            located.warnings.append(
                f"depth is {lag_s:.1f} s newer than the plan's image (max_frame_age_s "
                f"{max_age_s:g}): the scene may have changed since the model saw it"
            )
        return plan_to_msg(located, header=msg.header), located


def main(args=None) -> None:
    run_node(BackprojectionNode, "backprojection_node", num_threads=3, args=args)


if __name__ == "__main__":
    main()
