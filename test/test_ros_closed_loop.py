"""executor_node with closed_loop: true in a ROS graph on the simulator: a camera node publishes the workcell's
rendered frames, planner_node plans on them with the stand-in VLM server (real HTTP), and the executor calls the
plan service itself to recover from a slip during the carry."""

import importlib.util
import threading
import time

import numpy as np
import pytest

from conftest import requires_ros
from helpers.camera import publish_camera
from helpers.ros_wait import call, reach, spin_until
from test_closed_loop_sim import small

pytestmark = [
    requires_ros,
    pytest.mark.ros,
    pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)"),
]


def camera_publisher(context, cell, period_s=0.2):
    """A node publishing the workcell's colour, aligned depth (16UC1 mm) and camera_info, as realsense-ros does."""
    import rclpy
    from sensor_msgs.msg import CameraInfo

    from grounded_planner.ros.convert import numpy_to_image

    node = rclpy.create_node("sim_camera", context=context)
    cam = cell.camera_model

    def render():
        # publish_camera stamps at the exposure, before the render, as the real driver stamps the capture time: a
        # stamp taken after a slow render (a loaded CPU) labels a scene from before the executor's last motion as
        # newer than its request, and the closed loop then replans on the arm still carrying the box
        rgb, depth_m = cell.render()
        depth_mm = np.rint(np.nan_to_num(depth_m) * 1000.0).astype(np.uint16)
        info = CameraInfo(
            width=cam.width,
            height=cam.height,
            distortion_model=cam.distortion_model,
            d=[float(v) for v in np.ravel(cam.D)],
            k=[float(v) for v in np.ravel(cam.K)],
            r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p=[cam.fx, 0.0, cam.cx, 0.0, 0.0, cam.fy, cam.cy, 0.0, 0.0, 0.0, 1.0, 0.0],
        )
        frames = {"color": numpy_to_image(rgb, "rgb8"), "depth": numpy_to_image(depth_mm, "16UC1"), "info": info}
        for msg in frames.values():
            msg.header.frame_id = cam.frame_id
        return frames

    publish_camera(node, render, period_s)
    return node


def test_executor_node_closed_loop_recovers_a_slip_through_the_plan_service(tmp_path, rclpy_context):
    from rclpy.action import ActionClient
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    from rclpy.parameter import Parameter

    import rclpy
    from grounded_planner.ros.executor_node import ExecutorNode
    from grounded_planner.ros.planner_node import PlannerNode
    from grounded_planner.sim.backend import SimBackend
    from grounded_planner.sim.vlm import STAND_IN_MODEL, stand_in_scene
    from grounded_planner.sim.workcell import SimWorkcell
    from grounded_planner.vlm.fake_server import FakeVLMServer
    from grounded_planner_interfaces.action import ExecutePlan
    from grounded_planner_interfaces.msg import ExecutionEvent
    from grounded_planner_interfaces.srv import GetGroundedPlan

    cell = SimWorkcell.from_scenario(small(tmp_path, "box_in_bowl_slip"), seed=1)
    extrinsics, _ = cell.write_calibration(tmp_path / "calibration")
    spin = MultiThreadedExecutor(num_threads=4, context=rclpy_context)
    nodes = []
    with FakeVLMServer(stand_in_scene(cell), one_object=True) as vlm:
        try:
            nodes.append(camera_publisher(rclpy_context, cell))
            nodes.append(
                PlannerNode(
                    context=rclpy_context,
                    parameter_overrides=[
                        Parameter("backend", value="openai"),
                        Parameter("base_url", value=vlm.base_url),
                        Parameter("model", value=STAND_IN_MODEL),
                        Parameter("extrinsics_file", value=str(extrinsics)),
                        Parameter("timeout_s", value=30.0),
                        Parameter("max_retries", value=0),
                    ],
                )
            )
            executor_node = ExecutorNode(
                context=rclpy_context,
                backend_factory=lambda name, config: SimBackend(cell),
                parameter_overrides=[
                    Parameter("closed_loop", value=True),
                    Parameter("extrinsics_file", value=str(extrinsics)),
                    Parameter("base_frame", value="base_link"),
                ],
            )
            nodes.append(executor_node)
            executor_node.trigger_configure()
            executor_node.trigger_activate()
            for node in nodes:
                spin.add_node(node)
            thread = threading.Thread(target=spin.spin, daemon=True)
            thread.start()

            probe = rclpy.create_node("closed_loop_probe", context=rclpy_context)
            local = SingleThreadedExecutor(context=rclpy_context)
            local.add_node(probe)
            events = []
            probe.create_subscription(
                ExecutionEvent,
                "/grounded_planner/execution/feedback",
                lambda m: events.append({"state": m.state, "step": m.step, "message": m.message}),
                50,
            )
            time.sleep(0.5)  # first camera frames
            plan = call(
                local,
                probe.create_client(GetGroundedPlan, "/grounded_planner/plan"),
                GetGroundedPlan.Request(instruction=cell.scenario.instruction, backproject=True),
                60.0,
                "the first plan",
            )
            assert plan.success and len(plan.plan.actions) == 2, plan.message
            client = ActionClient(probe, ExecutePlan, "/grounded_planner/execute")
            assert client.wait_for_server(timeout_sec=30.0)
            reach(local, probe, "/grounded_planner/execute", 30.0, action=True)
            sent = client.send_goal_async(ExecutePlan.Goal(plan=plan.plan))
            spin_until(local, sent.done, 30.0, "goal accepted")
            result = sent.result().get_result_async()
            spin_until(local, result.done, 240.0, "the closed-loop result")
            outcome = result.result().result
            assert outcome.success, (outcome.message, [e for e in events if e["state"].startswith("check:")])
            assert cell.success(), "the box is not in the bowl"
            checks = [e["state"] for e in events if e["state"].startswith("check:")]
            assert "check:premature_release" in checks and checks[-1] == "check:ok"
            assert list(outcome.step_outcomes) == ["ok", "ok", "ok", "ok"]  # grasp, place (dropped), grasp, place
            probe.destroy_node()
        finally:
            spin.shutdown()
            for node in nodes:
                node.destroy_node()
            cell.close()
