"""Real ROS 2 (Fast DDS) between processes: our interfaces, and plan model <-> message conversion."""

import numpy as np
import pytest

from conftest import requires_ros, spawn_python
from grounded_planner.plan import GroundedAction, GroundedPlan, Target, TargetSet

pytestmark = [requires_ros, pytest.mark.ros]

PLAN = GroundedPlan(
    "put the spoon on the plate",
    (640, 480),
    [
        GroundedAction("grasp", "spoon", bbox=(120.0, 200.125, 180.0, 260.5)),
        GroundedAction("place", "spoon", "plate", point=(300.333, 220.0)),
        GroundedAction("open", "top drawer", bbox=(10.0, 300.0, 200.0, 360.0)),
        GroundedAction("close", "top drawer", bbox=(10.0, 300.0, 200.0, 360.0)),
    ],
    model="qwen3-vl-8b-instruct",
    raw_response='{"actions": []}',
)


def located(plan: GroundedPlan) -> GroundedPlan:
    """PLAN with 3D targets in the robot base frame, as back-projection leaves it."""
    return plan.with_targets(
        TargetSet(
            "fr3_link0",
            [
                Target(
                    0,
                    "grasp",
                    "spoon",
                    (0.5, 0.1, 0.02),
                    yaw=0.3,
                    width=0.018,
                    normal=(0, 0, 1),
                    method="top_surface",
                    confidence=0.9,
                ),
                Target(1, "place", "spoon", (0.4, -0.2, 0.0), normal=(0, 0, 1), method="depth", confidence=1.0),
                Target(2, "open", "top drawer", (0.7, 0.0, 0.3), normal=(-1, 0, 0), method="handle", confidence=0.6),
                Target(3, "close", "top drawer", (0.7, 0.0, 0.3), normal=(-1, 0, 0), method="handle", confidence=0.6),
            ],
        )
    )


def test_interfaces_have_the_documented_fields():
    from grounded_planner_interfaces.action import ExecutePlan
    from grounded_planner_interfaces.msg import GroundedAction as A, GroundedPlan as P
    from grounded_planner_interfaces.srv import GetGroundedPlan

    assert set(A.get_fields_and_field_types()) == {
        "type",
        "object",
        "target",
        "bbox",
        "point",
        "pose",
        "width",
        "normal",
        "target_method",
        "target_confidence",
    }
    assert A.get_fields_and_field_types()["pose"] == "geometry_msgs/PoseStamped"
    assert A.get_fields_and_field_types()["normal"] == "geometry_msgs/Vector3"
    assert set(P.get_fields_and_field_types()) == {
        "header",
        "instruction",
        "image_width",
        "image_height",
        "actions",
        "model",
        "raw_response",
        "reason",
        "warnings",
    }
    assert set(GetGroundedPlan.Request.get_fields_and_field_types()) == {"instruction", "image", "backproject"}
    assert set(GetGroundedPlan.Response.get_fields_and_field_types()) == {"success", "message", "plan"}
    assert set(ExecutePlan.Goal.get_fields_and_field_types()) == {"plan", "dry_run", "require_approval"}
    assert set(ExecutePlan.Result.get_fields_and_field_types()) == {
        "success",
        "message",
        "steps_completed",
        "step_outcomes",
    }
    assert set(ExecutePlan.Feedback.get_fields_and_field_types()) == {"step", "state", "current"}


def test_plan_message_round_trip_is_identity():
    from grounded_planner.ros.convert import plan_from_msg, plan_to_msg

    assert plan_from_msg(plan_to_msg(PLAN)) == PLAN
    empty = GroundedPlan("tidy up", (640, 480), [], reason="the table is already tidy")
    assert plan_from_msg(plan_to_msg(empty)) == empty

    msg = plan_to_msg(located(PLAN))
    assert msg.actions[0].pose.header.frame_id == "fr3_link0" and msg.actions[0].pose.pose.position.x == 0.5
    back = plan_from_msg(msg)
    assert back.target_set().to_dict()["targets"][2]["normal"] == [-1.0, 0.0, 0.0]
    assert back.actions[0].target_3d.width == 0.018 and back.actions[0].target_3d.method == "top_surface"


def test_image_conversion_round_trip():
    from grounded_planner.ros.convert import image_to_numpy, numpy_to_image

    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
    depth = rng.integers(0, 5000, (48, 64), dtype=np.uint16)
    assert np.array_equal(image_to_numpy(numpy_to_image(rgb)), rgb)
    msg = numpy_to_image(depth)
    assert msg.encoding == "16UC1"
    assert np.array_equal(image_to_numpy(msg), depth)
    msg.data = bytes(msg.data)[:10]
    with pytest.raises(ValueError, match="too short"):
        image_to_numpy(msg)


CLIENT_NODE = """
import json, sys
import rclpy
from grounded_planner.ros.client import GroundedPlannerClient

with rclpy.init():
    node = rclpy.create_node("outside_client")
    client = GroundedPlannerClient(node)
    first = client.plan("put the spoon on the plate", timeout_s=30.0, service_wait_s=30.0)
    result = client.plan("put the spoon on the plate", timeout_s=30.0)  # a second call on the node nobody spins
    actions = [dict(type=a.type, frame=a.pose.header.frame_id, width=a.width, method=a.target_method,
                    normal=[a.normal.x, a.normal.y, a.normal.z]) for a in result.msg.actions] if result.msg else []
    pixels = [{k: v for k, v in a.to_dict().items() if k != "target_3d"} for a in result.plan.actions] if result.plan else []
    print("RESULT " + json.dumps(dict(first=first.status.value, status=result.status.value, error=client.last_error,
                                      actions=actions, pixels=pixels,
                                      frame=result.msg.header.frame_id if result.msg else "")), flush=True)
    node.destroy_node()
"""


def test_a_node_outside_the_repo_gets_width_normal_and_method_through_the_client(tmp_path, ros_domain):
    """Two processes: the plan service, and a ten-line node elsewhere that calls it through GroundedPlannerClient."""
    import json

    from grounded_planner.plan import save_plan

    save_plan(located(PLAN), tmp_path / "plan.json")
    (tmp_path / "outside_client.py").write_text(CLIENT_NODE)
    server = spawn_python(["test/helpers/fixed_plan_server.py", str(tmp_path / "plan.json")])
    try:
        client = spawn_python([str(tmp_path / "outside_client.py")])
        out, _ = client.communicate(timeout=120)
        line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
        assert client.returncode == 0 and line is not None, out
        got = json.loads(line[len("RESULT ") :])
        assert got["first"] == "succeeded" and got["status"] == "succeeded", got["error"]
        assert got["frame"] == "camera_color_optical_frame"
        assert got["pixels"] == [a.to_dict() for a in PLAN.actions]  # field by field, to the thousandth of a pixel
        grasp, place, opening, _close = got["actions"]
        assert grasp["frame"] == "fr3_link0" and grasp["method"] == "top_surface"
        assert grasp["width"] == pytest.approx(0.018) and grasp["normal"] == [0.0, 0.0, 1.0]
        assert place["method"] == "depth" and place["width"] == 0.0  # 0 = unknown
        assert opening["method"] == "handle" and opening["normal"] == [-1.0, 0.0, 0.0]
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except Exception:
            server.kill()
