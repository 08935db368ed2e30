"""V2GP stage 4: segments -> plan, the filters, instruction revision, implicit rewrites, training samples."""

from __future__ import annotations

import pytest

from grounded_planner.v2gp.ground import Grounding, make_grounder
from grounded_planner.v2gp.identify import IdentifyError, ObjectIdentity, parse_identity
from grounded_planner.v2gp.plans import build_episode_plan, clean_implicit, sample_plan, training_messages
from grounded_planner.v2gp.segment import Segment, SegmentConfig

SIZE = (320, 240)


def seg(start: int, end: int, level: float = 0.7, drop: bool = False) -> Segment:
    return Segment(
        start=start, end=end, close_frame=start + 2, release_frame=end - 2, closed_level=level, dropped_mid_grasp=drop
    )


def pick(name: str, target: str = "blue plate") -> ObjectIdentity:
    return ObjectIdentity(object=name, category=name.split()[-1], interaction="pick_place", target=target)


def grounded(box=(50.0, 60.0, 70.0, 80.0), point=(200.0, 100.0), identity="consistent") -> Grounding:
    return Grounding(
        bbox_px=list(box),
        point_px=None if point is None else list(point),
        target="blue plate",
        moved_px=140.0,
        identity=identity,
    )


def test_kept_segments_become_grasp_place_and_open_in_time_order():
    opened = ObjectIdentity(object="drawer handle", category="drawer", interaction="open")
    result = build_episode_plan(
        "put the block on the plate, then open the drawer",
        SIZE,
        [seg(10, 40), seg(50, 70)],
        [pick("red block"), opened],
        [grounded(), grounded(box=(100, 200, 130, 210), point=None)],
        SegmentConfig(),
    )
    plan = result.plan
    assert [a.type for a in plan.actions] == ["grasp", "place", "open"]
    assert plan.actions[0].bbox == (50.0, 60.0, 70.0, 80.0) and plan.actions[1].point == (200.0, 100.0)
    assert plan.actions[1].target == "blue plate"
    assert not result.revised and plan.instruction == "put the block on the plate, then open the drawer"


@pytest.mark.parametrize(
    "segment, identity, grounding, reason",
    [
        (seg(10, 40, level=0.99), pick("red block"), grounded(), "empty_grasp"),
        (seg(10, 40, drop=True), pick("red block"), grounded(), "drop"),
        (seg(10, 40), pick("red block"), grounded(identity="mismatch"), "identity_mismatch"),
        (seg(10, 40), ObjectIdentity("", "", "pick_place"), grounded(), "no_object"),
        (seg(10, 40), pick("red block"), Grounding(notes=["not found"]), "no_box"),
        (seg(10, 40), pick("red block"), grounded(point=None), "no_point"),
        (seg(10, 40), pick("red block"), grounded(box=(10, 10, 12, 40)), "bad_box"),
    ],
)
def test_each_filter_drops_the_step_says_why_and_revises_the_instruction(segment, identity, grounding, reason):
    result = build_episode_plan(
        "put the red block and the green cup on the plate",
        SIZE,
        [segment, seg(50, 80)],
        [identity, pick("green cup", "tray")],
        [grounding, grounded(box=(150, 150, 170, 170), point=(250, 200))],
        SegmentConfig(),
    )
    assert [d["reason"] for d in result.dropped] == [reason]
    assert [a.object for a in result.plan.actions] == ["green cup", "green cup"]
    assert result.revised and result.plan.instruction == "put the green cup on the blue plate"
    assert "revised" in result.plan.warnings[0]


def test_a_failed_grasp_that_is_retried_keeps_the_instruction():
    result = build_episode_plan(
        "put the red block on the plate",
        SIZE,
        [seg(10, 30, level=1.0), seg(40, 70)],
        [pick("red block"), pick("red block")],
        [grounded(), grounded()],
        SegmentConfig(),
    )
    assert [d["reason"] for d in result.dropped] == ["empty_grasp"]
    assert not result.revised and result.plan.instruction == "put the red block on the plate"


def test_nothing_kept_means_no_plan_and_the_reasons():
    result = build_episode_plan(
        "pick it", SIZE, [seg(10, 30, level=1.0)], [pick("red block")], [grounded()], SegmentConfig()
    )
    assert result.plan is None and result.dropped[0]["reason"] == "empty_grasp"


def test_implicit_rewrite_filters():
    assert clean_implicit(
        '<think>hmm</think>\nImplicit instruction: "Please tidy up the table."', "put the red block on the plate"
    ) == ("Please tidy up the table.", "")
    assert clean_implicit("Put the red block on the plate.", "put the red block on the plate")[0] == ""
    assert "coordinates" in clean_implicit("move it to [120, 300]", "put x on y")[1]
    assert "longer" in clean_implicit("tidy " * 60, "put x on y")[1]
    assert clean_implicit("   ", "put x on y") == ("", "empty rewrite")


def test_identity_answers_are_read_leniently_and_bad_ones_named():
    identity = parse_identity(
        '<think>the red one</think>```json\n{"Object": "red block on the left", '
        '"category": "block", "interaction": "pick and place", "target": "plate"}\n```'
    )
    assert (identity.object, identity.category, identity.interaction, identity.target) == (
        "red block on the left",
        "block",
        "pick_place",
        "plate",
    )
    with pytest.raises(IdentifyError, match="no JSON object"):
        parse_identity("a red block, I think")
    with pytest.raises(IdentifyError, match="interaction must be one of"):
        parse_identity('{"object": "door", "interaction": "kick"}')


def test_training_sample_round_trips_through_the_planner_parser():
    result = build_episode_plan(
        "put the red block on the plate", SIZE, [seg(10, 40)], [pick("red block")], [grounded()], SegmentConfig()
    )
    sample = {
        "image_size": list(SIZE),
        "messages": training_messages("images/x.png", SIZE, result.plan.instruction, result.plan),
    }
    assert '"bbox_2d": [156, 250, 219, 333]' in sample["messages"][2]["content"][0]["text"]  # qwen3: 0-1000
    back = sample_plan(sample)
    assert back.instruction == result.plan.instruction
    for got, want in zip(back.actions, result.plan.actions):
        assert got.type == want.type and got.object == want.object
        for a, b in zip(got.bbox or got.point, want.bbox or want.point):
            assert abs(a - b) <= 0.33


def test_unknown_and_unavailable_grounders_are_named():
    with pytest.raises(ValueError, match="unknown grounder"):
        make_grounder("magic")
    with pytest.raises(ValueError, match="needs a VLM"):
        make_grounder("vlm", None)
    from grounded_planner.v2gp.errors import MissingDependencyError, V2GPError

    with pytest.raises(ValueError, match="needs sam3_model"):
        make_grounder("sam3")
    # no such checkpoint (or, on a machine without torch/torchvision, the missing package) is named
    with pytest.raises((MissingDependencyError, V2GPError), match="torch|SAM 3|sam3"):
        make_grounder("sam3", sam3_model="/nonexistent/sam3")
