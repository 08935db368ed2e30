"""Table I's success predicates as pure functions: the 76.2 mm and 45 degree bounds (on, and one step past), the bowl's
rim, exact counts, and no intervention (2 cm, no grasp)."""

from __future__ import annotations

import math

import pytest

from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.predicates import evaluate, objects_in_bowl
from grounded_planner.spabench.trial import TrialSpec

LEFT = (0.0, -1.0)  # the camera's left in the base frame (the camera faces the robot from +x)
REF = (0.40, 0.05, 0.02)


def _relational(target_xy, direction=LEFT, name="left") -> bool:
    spec = TrialSpec(target="t", reference="r", direction=name, direction_xy=direction)
    initial = {"t": (0.3, 0.3, 0.02), "r": REF}
    final = {"t": (target_xy[0], target_xy[1], 0.02), "r": REF}
    return evaluate("relational_placement", spec, True, initial, final, True).success


def _at(distance_m: float, angle_deg: float, direction=LEFT) -> tuple[float, float]:
    base = math.atan2(direction[1], direction[0]) + math.radians(angle_deg)
    return REF[0] + distance_m * math.cos(base), REF[1] + distance_m * math.sin(base)


@pytest.mark.parametrize(
    "distance_m, angle_deg, expected",
    [
        (0.0762, 0.0, True),  # exactly 3 in: inside
        (0.0763, 0.0, False),  # 0.1 mm past
        (0.05, 45.0, True),  # exactly on the sector's edge, either side
        (0.05, -45.0, True),
        (0.05, 45.1, False),  # 0.1 degree past
        (0.05, -45.1, False),
        (0.0762, 45.0, True),  # the corner
        (0.05, 180.0, False),  # the opposite side
    ],
)
def test_relational_placement_bounds(distance_m, angle_deg, expected):
    assert _relational(_at(distance_m, angle_deg)) is expected


def test_relational_directions_and_a_target_on_the_reference():
    front = (1.0, 0.0)  # towards the camera
    assert _relational(_at(0.05, 10, front), front, "front")
    assert not _relational(_at(0.05, 10, front), LEFT, "left")
    assert not _relational(REF[:2])  # no direction at all


def test_in_bowl_tasks_and_the_rim():
    spec = TrialSpec(target="cup", receptacle="bowl", receptacle_radius_m=0.06, distractors=("cup2",))
    initial = {"cup": (0.3, 0.2, 0.03), "cup2": (0.3, -0.2, 0.03), "bowl": (0.4, 0.0, 0.01)}
    on_rim = {**initial, "cup": (0.46, 0.0, 0.03)}
    past_rim = {**initial, "cup": (0.4601, 0.0, 0.03)}
    assert evaluate("object_state", spec, True, initial, on_rim, True).success
    assert not evaluate("object_state", spec, True, initial, past_rim, True).success
    # the wrong cup in the bowl: not a success, and the verdict says what is in it
    wrong = {**initial, "cup2": (0.4, 0.0, 0.03)}
    verdict = evaluate("object_state", spec, True, initial, wrong, True)
    assert not verdict.success and "cup2" in verdict.detail


def test_counting_wants_exactly_n():
    spec = TrialSpec(receptacle="bowl", receptacle_radius_m=0.06, count=2)
    initial = {"a": (0.3, 0.2, 0.02), "b": (0.3, -0.2, 0.02), "c": (0.2, 0.0, 0.02), "bowl": (0.4, 0.0, 0.01)}
    two = {**initial, "a": (0.41, 0.01, 0.02), "b": (0.39, -0.01, 0.02)}
    three = {**two, "c": (0.40, 0.03, 0.02)}
    assert evaluate("counting", spec, True, initial, two, True).success
    assert not evaluate("counting", spec, True, initial, three, True).success
    assert objects_in_bowl(spec, three) == ["a", "b", "c"]


def test_no_intervention_two_cm_and_no_grasp():
    spec = TrialSpec(receptacle="bowl", receptacle_radius_m=0.06)
    initial = {"a": (0.3, 0.2, 0.02), "bowl": (0.4, 0.0, 0.01)}
    nudged = {**initial, "a": (0.32, 0.2, 0.02)}  # exactly 2 cm: not "more than 2 cm"
    moved = {**initial, "a": (0.3201, 0.2, 0.02)}
    assert evaluate("counting", spec, False, initial, nudged, False).success
    assert not evaluate("counting", spec, False, initial, moved, False).success
    verdict = evaluate("counting", spec, False, initial, initial, True)
    assert not verdict.success and "grasp" in verdict.detail
    assert evaluate("counting", spec, False, initial, initial, None).success  # unknown: nobody saw a grasp


def test_missing_inputs_are_named():
    spec = TrialSpec(receptacle="bowl", receptacle_radius_m=0.06)
    with pytest.raises(SpaBenchError, match="spec.target is null"):
        evaluate("object_state", spec, True, {"bowl": (0, 0, 0)}, {"bowl": (0, 0, 0)}, True)
    with pytest.raises(SpaBenchError, match="final_positions are unknown"):
        evaluate("object_state", spec, True, {}, None, True)
    with pytest.raises(SpaBenchError, match="no position for object 'x'"):
        evaluate(
            "object_state",
            TrialSpec(target="x", receptacle="bowl", receptacle_radius_m=0.06),
            True,
            {"bowl": (0, 0, 0)},
            {"bowl": (0, 0, 0)},
            True,
        )
