"""rollout_logger_node in a child process records an episode from the topics the other nodes publish."""

import json
from pathlib import Path

import pytest

from conftest import requires_ros
from helpers.ros_wait import spin_until, start_node, stop_process
from helpers.tabletop import scene_messages

pytestmark = [requires_ros, pytest.mark.ros]


@pytest.mark.parametrize("recording", ["default", "session_raw"])
def test_episode_from_plan_to_result_becomes_one_rollout(tmp_path, rclpy_context, recording):
    """Default: one folder (rollout.json + compressed rollout.mcap) per episode. ``session:=true images:=raw``: the
    episodes share one session file of raw Images, each with its own rollout.json folder."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import CameraInfo, Image
    from std_msgs.msg import String

    from grounded_planner.execution import executor as execution  # its ExecutionResult: the message's Python twin
    from grounded_planner.execution.outcomes import Outcome
    from grounded_planner.msgs.execution import execution_event_msg, execution_result_msg, planner_status_msg
    from grounded_planner.plan import GroundedAction, GroundedPlan, Target, TargetSet
    from grounded_planner.ros.msg_types import rclpy_type
    from grounded_planner.rollout.record import load_rollout
    from grounded_planner.ros.convert import plan_to_msg
    from grounded_planner_interfaces.msg import ExecutionEvent, ExecutionResult, PlannerStatus
    from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg

    child = start_node(
        "rollout_logger_node",
        f"log_dir:={tmp_path / 'rollouts'}",
        "condition:=test",
        "frame_rate_hz:=20.0",
        *(["session:=true", "images:=raw"] if recording == "session_raw" else []),
    )
    node = rclpy.create_node("logger_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        color, depth, info = scene_messages()
        qos = QoSProfile(depth=10)
        pubs = {
            name: node.create_publisher(t, topic, qos)
            for name, t, topic in [
                ("color", Image, "/camera/camera/color/image_raw"),
                ("depth", Image, "/camera/camera/aligned_depth_to_color/image_raw"),
                ("info", CameraInfo, "/camera/camera/color/camera_info"),
                ("plan", GroundedPlanMsg, "/grounded_planner/last_plan"),
                ("status", PlannerStatus, "/grounded_planner/planner_status"),
                ("targets", GroundedPlanMsg, "/grounded_planner/targets"),
                ("feedback", ExecutionEvent, "/grounded_planner/execution/feedback"),
                ("result", ExecutionResult, "/grounded_planner/execution/result"),
            ]
        }

        def camera():
            stamp = node.get_clock().now().to_msg()
            for name, msg in (("color", color), ("depth", depth), ("info", info)):
                msg.header.stamp = stamp
                pubs[name].publish(msg)

        node.create_timer(0.05, camera)
        closed = []
        node.create_subscription(
            String,
            "/grounded_planner/rollout/closed",
            lambda m: closed.append(m.data),
            QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL),
        )
        spin_until(
            executor,
            lambda: all(p.get_subscription_count() > 0 for p in pubs.values()),
            30.0,
            "the logger to subscribe to every topic",
        )

        plan = GroundedPlan(
            "put the red cube on the right",
            (320, 240),
            [
                GroundedAction("grasp", "red cube", bbox=(80.0, 90.0, 120.0, 150.0)),
                GroundedAction("place", "red cube", "table", point=(240.0, 120.0)),
            ],
            model="qwen3-vl-test",
        )
        pubs["plan"].publish(plan_to_msg(plan))
        located = plan.with_targets(
            TargetSet(
                "fr3_link0",
                [
                    Target(0, "grasp", "red cube", [0.3, 0.0, 0.05], yaw=0.0, width=0.03, method="top_surface"),
                    Target(1, "place", "red cube", [0.76, 0.0, 0.0], method="depth"),
                ],
            )
        )
        pubs["targets"].publish(plan_to_msg(located))
        for step, state in ((0, "approach"), (0, "grasp"), (1, "place")):
            pubs["feedback"].publish(execution_event_msg(rclpy_type, step, state, located.actions[step]))
        result = execution.ExecutionResult(
            True,
            "all 2 steps ok",
            [execution.StepOutcome(0, "grasp", Outcome.OK, ""), execution.StepOutcome(1, "place", Outcome.OK, "")],
        )
        pubs["result"].publish(execution_result_msg(rclpy_type, result, plan.instruction, scene_success=True))
        spin_until(executor, lambda: len(closed) == 1, 30.0, "the rollout to close on the execution result")

        pubs["status"].publish(
            planner_status_msg(rclpy_type, "tidy up", False, "VLMUnavailableError: connection refused")
        )
        spin_until(executor, lambda: len(closed) == 2, 30.0, "a rollout for the planner failure")
    finally:
        node.destroy_node()
        out = stop_process(child)
    assert "Traceback" not in out, out

    record = load_rollout(closed[0]).data
    assert record["status"] == "complete" and record["instruction"] == "put the red cube on the right"
    assert record["condition"] == "test" and record["model"] == "qwen3-vl-test"
    assert [a["type"] for a in record["plan"]["actions"]] == ["grasp", "place"]
    assert record["targets"]["frame"] == "fr3_link0" and record["targets"]["targets"][0]["width"] == pytest.approx(0.03)
    assert record["success"] is True  # the simulator's scene check, carried by the typed result
    assert [s["outcome"] for s in record["steps"]] == ["ok", "ok"] and record["execution"]["success"] is True
    if recording == "session_raw":
        images = ("/camera/camera/color/image_raw", "/camera/camera/aligned_depth_to_color/image_raw")
        session = Path(closed[0]).parent
        assert Path(closed[1]).parent == session and (session / "session.mcap").is_file()
        index = json.loads((session / "session.json").read_text())
        assert index["status"] == "complete" and [e["status"] for e in index["episodes"]] == ["complete"] * 2
        assert not (Path(closed[0]) / "rollout.mcap").exists()
    else:  # compressed by default, on image_transport's topics (the node received raw Images)
        images = (
            "/camera/camera/color/image_raw/compressed",
            "/camera/camera/aligned_depth_to_color/image_raw/compressedDepth",
        )
    topics = [m.topic for m in load_rollout(closed[0]).messages()]
    for topic in (
        *images,
        "/camera/camera/color/camera_info",
        "/grounded_planner/plan",
        "/grounded_planner/targets",
        "/grounded_planner/execution/feedback",
        "/grounded_planner/execution/result",
    ):
        assert topic in topics, f"{topic} missing from the rollout bag"
    assert topics.count("/grounded_planner/execution/feedback") == 3

    failed = load_rollout(closed[1]).data
    assert failed["instruction"] == "tidy up" and "connection refused" in failed["planner_error"]
