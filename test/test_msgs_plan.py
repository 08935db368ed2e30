"""One plan conversion for rclpy and rosbags messages: targets (width, normal, method) survive, bytes agree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grounded_planner.msgs.plan import action_from_msg, plan_from_msg, plan_to_msg, target_frame
from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError, Target, TargetSet
from grounded_planner.rollout.bag import typestore

rclpy_serialization = pytest.importorskip("rclpy.serialization")
from grounded_planner.ros.msg_types import rclpy_type  # noqa: E402

PLAN_TYPE = "grounded_planner_interfaces/msg/GroundedPlan"


def located_plan() -> GroundedPlan:
    plan = GroundedPlan(
        "put the cup on the plate, then close the drawer",
        (1280, 720),
        [
            GroundedAction("grasp", "cup", bbox=(100.5, 200.25, 180.0, 290.125)),
            GroundedAction("place", "cup", target="plate", point=(640.0, 360.5)),
            GroundedAction("close", "drawer", bbox=(900.0, 400.0, 1100.0, 520.0)),
        ],
        warnings=["plan image rescaled"],
        model="qwen3-vl",
        raw_response='{"plan": []}',
    )
    targets = TargetSet(
        "fr3_link0",
        [
            Target(
                0,
                "grasp",
                "cup",
                [0.45, -0.1, 0.06],
                yaw=-0.7,
                width=0.062,
                normal=[0, 0, 1],
                method="top_surface",
                confidence=0.91,
            ),
            Target(1, "place", "cup", [0.5, 0.2, 0.01], normal=[0, 0, 1], method="depth", confidence=1.0),
            Target(2, "close", "drawer", [0.7, 0.05, 0.2], normal=[-0.8, 0.6, 0.0], method="handle", confidence=0.5),
        ],
        warnings=["action 0 (grasp 'cup'): footprint is nearly round"],
    )
    return plan.with_targets(targets).validate()


def _assert_same_targets(back: GroundedPlan, plan: GroundedPlan) -> None:
    for got, want in zip(back.actions, plan.actions):
        assert (got.type, got.object, got.target, got.bbox, got.point) == (
            want.type,
            want.object,
            want.target,
            want.bbox,
            want.point,
        )
        t, w = got.target_3d, want.target_3d
        assert t.frame == "fr3_link0" and t.method == w.method and t.confidence == pytest.approx(w.confidence)
        np.testing.assert_allclose(t.position, w.position)
        np.testing.assert_allclose(t.normal, w.normal)
        assert t.width == w.width
        if w.yaw is None:
            assert t.yaw is None
        else:
            assert math.isclose(t.yaw, w.yaw, abs_tol=1e-12)
    assert back.warnings == plan.warnings and back.model == plan.model and back.raw_response == plan.raw_response


@pytest.mark.parametrize("family", ["rclpy", "rosbags"])
def test_round_trip_keeps_width_normal_method_and_yaw(family):
    types = rclpy_type if family == "rclpy" else typestore().types
    plan = located_plan()
    msg = plan_to_msg(plan, types, stamp_ns=1_700_000_000_123_456_789, frame_id="camera_color_optical_frame")
    assert msg.actions[0].width == pytest.approx(0.062) and msg.actions[0].target_method == "top_surface"
    assert (msg.actions[2].normal.x, msg.actions[2].normal.y) == pytest.approx((-0.8, 0.6))
    assert msg.actions[0].pose.header.stamp.nanosec == 123_456_789
    assert target_frame(msg) == "fr3_link0"
    _assert_same_targets(plan_from_msg(msg), plan)


def test_rosbags_bytes_are_what_rclpy_reads():
    """A plan written into a bag by rosbags deserialises in rclpy to the same plan (one wire format)."""
    plan = located_plan()
    raw = typestore().serialize_cdr(plan_to_msg(plan, typestore().types), PLAN_TYPE)
    msg = rclpy_serialization.deserialize_message(bytes(raw), rclpy_type(PLAN_TYPE))
    _assert_same_targets(plan_from_msg(msg), plan)
    again = rclpy_serialization.serialize_message(plan_to_msg(plan, rclpy_type))
    _assert_same_targets(plan_from_msg(typestore().deserialize_cdr(again, PLAN_TYPE)), plan)


def test_pixel_plan_has_no_targets_and_an_empty_plan_keeps_its_reason():
    plan = located_plan()
    pixels = GroundedPlan(
        plan.instruction,
        plan.image_size,
        [GroundedAction(a.type, a.object, a.target, a.bbox, a.point) for a in plan.actions],
    )
    msg = plan_to_msg(pixels, rclpy_type)
    assert target_frame(msg) == "" and all(a.pose.header.frame_id == "" for a in msg.actions)
    back = plan_from_msg(msg)
    assert not back.is_backprojected and all(a.target_3d is None for a in back.actions)
    empty = GroundedPlan("tidy up", (640, 480), [], reason="the table is already tidy")
    assert plan_from_msg(plan_to_msg(empty, typestore().types)).reason == "the table is already tidy"


def test_invalid_message_plan_names_the_action():
    msg = plan_to_msg(located_plan(), rclpy_type)
    msg.actions = [msg.actions[1]]  # a place with no grasp before it
    with pytest.raises(PlanError, match="action 0: a place must immediately follow a grasp"):
        plan_from_msg(msg)
    assert action_from_msg(msg.actions[0]).target_3d.method == "depth"
