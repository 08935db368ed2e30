"""backprojection_node in a child process: a pixel plan on a topic comes back with poses in the base frame."""

import numpy as np
import pytest

from conftest import requires_ros, spawn_python
from helpers.camera import publish_camera
from helpers.ros_wait import spin_until, stop_process
from helpers.tabletop import CUBE_M, EXTRINSICS, FX, TABLE_M, base_point, scene_messages

pytestmark = [requires_ros, pytest.mark.ros]


def test_pixel_plan_comes_back_with_base_frame_poses(tmp_path, rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile

    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.ros.convert import plan_from_msg, plan_to_msg
    from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg

    (tmp_path / "extrinsics.yaml").write_text(EXTRINSICS)
    child = spawn_python(
        [
            "-m",
            "grounded_planner.ros.backprojection_node",
            "--ros-args",
            "-p",
            f"extrinsics_file:={tmp_path / 'extrinsics.yaml'}",
        ]
    )
    node = rclpy.create_node("backprojection_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        _color, depth, info = scene_messages()
        camera_timer = publish_camera(node, {"depth": depth, "info": info})  # a 10 Hz depth camera
        plan_pub = node.create_publisher(GroundedPlanMsg, "/grounded_planner/plan_pixels", QoSProfile(depth=5))
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        got = {}
        node.create_subscription(
            GroundedPlanMsg, "/grounded_planner/plan_3d", lambda m: got.__setitem__("plan", m), latched
        )
        node.create_subscription(
            GroundedPlanMsg, "/grounded_planner/targets", lambda m: got.__setitem__("targets", m), latched
        )

        plan = GroundedPlan(
            "put the red cube on the right",
            (320, 240),
            [
                GroundedAction("grasp", "red cube", bbox=(80.0, 90.0, 120.0, 150.0)),
                GroundedAction("place", "red cube", "table", point=(240.0, 200.0)),
            ],
        )  # far from the centre: fx != fy shows
        msg = plan_to_msg(plan)
        msg.header.frame_id = "camera_color_optical_frame"
        spin_until(executor, lambda: plan_pub.get_subscription_count() > 0, 30.0, "backprojection_node to subscribe")
        plan_pub.publish(msg)
        spin_until(executor, lambda: "plan" in got and "targets" in got, 30.0, "the back-projected plan")
        located = plan_from_msg(got["plan"])
        assert [(a.type, a.object, a.bbox, a.point) for a in located.actions] == [
            (a.type, a.object, a.bbox, a.point) for a in plan.actions
        ]
        grasp_t, place_t = (a.target_3d for a in located.actions)
        assert (grasp_t.frame, place_t.frame) == ("fr3_link0", "fr3_link0")
        assert list(grasp_t.position) == pytest.approx(base_point(100.5, 120.5, CUBE_M), abs=0.01)
        assert list(place_t.position) == pytest.approx(base_point(240.0, 200.0, TABLE_M), abs=0.01)
        targets = plan_from_msg(got["targets"]).target_set().to_dict()
        assert targets["frame"] == "fr3_link0" and [t["type"] for t in targets["targets"]] == ["grasp", "place"]
        assert np.isfinite(targets["targets"][0]["width"]) and targets["targets"][0]["width"] == pytest.approx(
            30 / FX * CUBE_M, abs=0.01
        )  # 30 px wide

        # the depth camera dies (issue 30.1): the next plan is refused, naming the topic and the age, not located
        # on the last depth image it left behind
        camera_timer.cancel()
        stopped = node.get_clock().now().nanoseconds
        spin_until(executor, lambda: node.get_clock().now().nanoseconds - stopped > 1.5e9, 10.0, "the depth to age")
        got.clear()
        plan_pub.publish(msg)
        spin_until(executor, lambda: node.get_clock().now().nanoseconds - stopped > 8e9, 15.0, "frame_wait_s to pass")
        assert "plan" not in got, "a plan was back-projected on a stale depth image"
    finally:
        node.destroy_node()
        out = stop_process(child)
    assert "Traceback" not in out, out
    assert "StaleFrameError: stale frame: /camera/camera/aligned_depth_to_color/image_raw is" in out, out
