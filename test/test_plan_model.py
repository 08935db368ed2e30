"""The canonical plan model: JSON round trips and every validation rule, with messages a user can act on."""

import json

import pytest

from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError, iter_pairs, load_plan, save_plan

SPOON = GroundedAction("grasp", "spoon", bbox=(120.0, 200.0, 180.0, 260.0))
PLACE = GroundedAction("place", "spoon", "plate", point=(300.5, 220.25))
DRAWER = GroundedAction("open", "top drawer", bbox=(10.0, 300.0, 200.0, 360.0))


def make_plan(actions, **kw):
    return GroundedPlan("put the spoon on the plate", (640, 480), list(actions), **kw)


def test_json_round_trip_keeps_every_field():
    plan = make_plan([SPOON, PLACE, DRAWER], warnings=["bbox clipped"], model="qwen3-vl-8b", raw_response="{...}")
    text = plan.to_json()
    assert GroundedPlan.from_json(text) == plan
    data = json.loads(text)
    assert data["image_size"] == [640, 480]
    assert data["actions"][1] == {"type": "place", "object": "spoon", "target": "plate", "point": [300.5, 220.25]}
    assert set(data) == {"instruction", "image_size", "actions", "reason", "warnings", "model", "raw_response"}


def test_file_round_trip(tmp_path):
    plan = make_plan([SPOON, PLACE])
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == plan


def test_empty_plan_is_valid_with_a_reason():
    plan = make_plan([], reason="the spoon is already on the plate")
    assert plan.validate().is_empty
    with pytest.raises(PlanError, match="empty plan.*reason") as err:
        make_plan([]).validate()
    assert err.value.rule == "empty_needs_reason"


@pytest.mark.parametrize(
    "actions, index, rule",
    [
        ([SPOON], 0, "grasp_then_place"),
        ([SPOON, DRAWER], 0, "grasp_then_place"),
        ([PLACE], 0, "place_after_grasp"),
        ([DRAWER, PLACE], 1, "place_after_grasp"),
        ([SPOON, PLACE, PLACE], 2, "place_after_grasp"),
        ([GroundedAction("push", bbox=(0, 0, 1, 1))], 0, "type"),
        ([GroundedAction("grasp", "x"), PLACE], 0, "bbox_required"),
        ([GroundedAction("grasp", "x", bbox=(50, 10, 40, 20)), PLACE], 0, "bbox_order"),
        ([GroundedAction("open", "x", bbox=(10, 10, 10, 20))], 0, "bbox_order"),
        ([GroundedAction("close", "x", bbox=(600, 10, 700, 20))], 0, "bbox_in_image"),
        # one step past each edge of the landscape 640x480 image (a y bound checked against the width passes 481)
        ([GroundedAction("close", "x", bbox=(10, 10, 20, 480.5))], 0, "bbox_in_image"),
        ([GroundedAction("close", "x", bbox=(10, 10, 640.5, 20))], 0, "bbox_in_image"),
        ([GroundedAction("close", "x", bbox=(-0.5, 10, 20, 20))], 0, "bbox_in_image"),
        ([GroundedAction("close", "x", bbox=(10, -0.5, 20, 20))], 0, "bbox_in_image"),
        ([SPOON, GroundedAction("place", "spoon", point=(10, 480.5))], 1, "point_in_image"),
        ([SPOON, GroundedAction("place", "spoon", point=(-0.5, 10))], 1, "point_in_image"),
        ([SPOON, GroundedAction("place", "spoon")], 1, "point_required"),
        ([SPOON, GroundedAction("place", "spoon", point=(641, 10))], 1, "point_in_image"),
        ([SPOON, GroundedAction("place", "spoon", point=(float("nan"), 10))], 1, "point_finite"),
    ],
)
def test_each_rule_names_the_action_and_the_rule(actions, index, rule):
    """Each rule refuses with its own name; the image edges themselves are inside (see the next test)."""
    with pytest.raises(PlanError) as err:
        make_plan(actions).validate()
    assert err.value.index == index
    assert err.value.rule == rule
    assert f"action {index}:" in str(err.value)


def test_bad_json_gives_typed_errors():
    with pytest.raises(PlanError, match="not valid JSON"):
        GroundedPlan.from_json("{nope")
    with pytest.raises(PlanError, match="image_size"):
        GroundedPlan.from_dict({"instruction": "x", "actions": []})
    with pytest.raises(PlanError, match="action 0: bbox must have 4 numbers"):
        GroundedPlan.from_dict(
            {"instruction": "x", "image_size": [10, 10], "actions": [{"type": "open", "bbox": [1, 2, 3]}]}
        )
    with pytest.raises(PlanError, match="no 'type'"):
        GroundedPlan.from_dict({"instruction": "x", "image_size": [10, 10], "actions": [{"bbox": [1, 2, 3, 4]}]})


def test_missing_plan_file_names_the_path(tmp_path):
    with pytest.raises(PlanError, match="cannot read plan file .*missing.json"):
        load_plan(tmp_path / "missing.json")


def test_steps_group_grasp_place_pairs():
    steps = iter_pairs([SPOON, PLACE, DRAWER])
    assert [tuple(a.type for a in s) for s in steps] == [("grasp", "place"), ("open",)]


def test_boxes_and_points_exactly_on_the_image_edges_are_valid():
    make_plan([GroundedAction("open", "x", bbox=(0, 0, 640, 480))]).validate()
    make_plan(
        [GroundedAction("grasp", "x", bbox=(0, 0, 640, 480)), GroundedAction("place", "x", point=(640, 480))]
    ).validate()
    make_plan(
        [GroundedAction("grasp", "x", bbox=(0, 0, 640, 480)), GroundedAction("place", "x", point=(0, 0))]
    ).validate()


@pytest.mark.parametrize(
    "types, expected",
    [
        (["grasp", "place", "open", "close"], None),
        ([], None),
        (["grasp"], (0, "grasp_then_place", "a grasp must be immediately followed by a place")),
        (["grasp", "open", "place"], (0, "grasp_then_place", "a grasp must be immediately followed by a place")),
        (["open", "place"], (1, "place_after_grasp", "a place must immediately follow a grasp")),
        (["grasp", "place", "place"], (2, "place_after_grasp", "a place must immediately follow a grasp")),
    ],
)
def test_the_grasp_place_pairing_rule_is_one_function(types, expected):
    """The plan model, bench ground truth and simulator scenarios check the same pairing rule (pairing_error),
    and each reports it with its own location."""
    from grounded_planner.plan.model import pairing_error

    assert pairing_error(types) == expected
