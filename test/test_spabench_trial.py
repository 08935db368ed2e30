"""The Spa-Bench trial record: the contract's keys in order, nulls written and read, pairing, bad input named."""

from __future__ import annotations

import json

import pytest

from grounded_planner.spabench.errors import TrialRecordError
from grounded_planner.spabench.trial import (
    CARD_RECORD_KEYS,
    CONDITIONS,
    FAILURE_MODES,
    RECORD_KEYS,
    ROBOTS,
    TASK_CONDITIONS,
    TASKS,
    MatrixCell,
    TrialRecord,
    TrialSpec,
    direction_xy,
    pair_id,
    paraphrase_original,
    parse_trial_id,
)


def _record(**kw) -> TrialRecord:
    base = dict(
        task="relational_placement",
        condition="ood",
        seed=7,
        robot="so101",
        planner="gt",
        instruction="place the green block to the left of the red block",
        expects_action=True,
        spec=TrialSpec(
            target="green_block",
            reference="red_block",
            direction="left",
            direction_xy=(0.0, -1.0),
            distractors=("blue_block",),
        ),
        initial_positions={"green_block": (0.15, 0.05, 0.015), "red_block": (0.16, -0.04, 0.015)},
        pair_id=pair_id("relational_placement", "ood", 7),
        cell=MatrixCell("left", "green_block"),
    )
    base.update(kw)
    return TrialRecord(**base)


def test_names_are_the_contracts():
    assert TASKS == (
        "object_state",
        "relative_size",
        "referential_description",
        "relational_placement",
        "ordinal_position",
        "counting",
    )
    assert CONDITIONS == (
        "id",
        "ood",
        "direct",
        "paraphrase",
        "cross_task_object",
        "no_intervention",
        "relational_control",
    )
    assert FAILURE_MODES == (
        "no_action",
        "wrong_object",
        "wrong_instance",
        "grasp_failure",
        "incorrect_spatial_outcome",
        "premature_release",
        "refused",
        "planner_error",
    )
    assert ROBOTS == ("so101", "gp5", "fr3")
    # Table II: relative size has no no-intervention diagnostic; the relational control is relational placement's
    assert "no_intervention" not in TASK_CONDITIONS["relative_size"]
    assert [t for t in TASKS if "relational_control" in TASK_CONDITIONS[t]] == ["relational_placement"]


def test_record_writes_every_key_in_contract_order_with_nulls():
    line = json.dumps(_record().to_dict())
    data = json.loads(line)
    assert list(data) == list(RECORD_KEYS)
    assert data["trial_id"] == "relational_placement/ood/7"
    assert data["final_positions"] is None and data["success"] is None and data["failure_mode"] is None
    assert data["spec"] == {
        "target": "green_block",
        "reference": "red_block",
        "receptacle": None,
        "receptacle_radius_m": None,
        "direction": "left",
        "direction_xy": [0.0, -1.0],
        "count": None,
        "distractors": ["blue_block"],
    }
    assert data["cell"] == {"concept": "left", "argument": "green_block"}
    assert TrialRecord.from_dict(data).to_dict() == data


def test_outcome_round_trip_and_card_lines():
    done = _record(
        final_positions={"green_block": (0.15, 0.1, 0.015), "red_block": (0.16, -0.04, 0.015)},
        grasp_attempted=True,
        success=False,
        failure_mode="incorrect_spatial_outcome",
        outcome_source="auto",
        rollout="rollouts/relational_placement_ood_7",
        started_at="2026-12-01T17:00:00Z",
        wall_s=3.21,
    )
    data = json.loads(json.dumps(done.to_dict()))
    again = TrialRecord.from_dict(data)
    assert again == done
    card = done.card_dict()
    assert list(card) == list(CARD_RECORD_KEYS) and list(card)[-1] == "initial_positions"
    # a cards.jsonl line (with the card-only keys) reads as a record with its outcome unknown
    card.update({"objects": [], "success_rule": "...", "card_png": "cards/x.png", "card_html": "cards.html"})
    assert TrialRecord.from_dict(card).success is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"task": "juggling"}, "unknown task 'juggling'"),
        ({"condition": "odd"}, "unknown condition 'odd'"),
        ({"robot": "ur5"}, "unknown robot 'ur5'"),
        ({"failure_mode": "bad_luck"}, "unknown failure_mode 'bad_luck'"),
        ({"seed": "7"}, ".seed: expected int"),
        ({"success": "yes"}, ".success: expected bool or null"),
        ({"trial_id": "relational_placement/ood/8"}, "does not match"),
        ({"colour": "red"}, "unknown key(s) ['colour']"),
    ],
)
def test_bad_lines_are_named(change, message):
    data = {**_record().to_dict(), **change}
    with pytest.raises(TrialRecordError, match=None) as err:
        TrialRecord.from_dict(data, where="trials.jsonl:3")
    assert message in str(err.value) and "trials.jsonl:3" in str(err.value)


def test_missing_required_key_and_bad_spec():
    data = _record().to_dict()
    del data["instruction"]
    with pytest.raises(TrialRecordError, match="missing required key 'instruction'"):
        TrialRecord.from_dict(data)
    data = _record().to_dict()
    data["spec"]["direction_xy"] = [1.0, 1.0]
    with pytest.raises(TrialRecordError, match="unit vector"):
        TrialRecord.from_dict(data)
    data["spec"]["direction_xy"] = None
    with pytest.raises(TrialRecordError, match="both set or both null"):
        TrialRecord.from_dict(data)


def test_a_success_has_no_failure_mode():
    with pytest.raises(TrialRecordError, match="no failure_mode"):
        _record(success=True, failure_mode="wrong_object")


def test_pairing_rule():
    assert pair_id("counting", "ood", 3) == pair_id("counting", "direct", 3) == pair_id("counting", "paraphrase", 3)
    assert pair_id("counting", "ood", 3) != pair_id("counting", "ood", 4)
    assert (
        pair_id("relational_placement", "relational_control", 4)
        == pair_id("relational_placement", "relational_control", 5)
        != pair_id("relational_placement", "relational_control", 6)
    )
    assert pair_id("counting", "id", 3) is None and pair_id("counting", "no_intervention", 3) is None
    assert (paraphrase_original(2), paraphrase_original(3)) == ("ood", "direct")
    assert parse_trial_id("counting/direct/12") == ("counting", "direct", 12)
    with pytest.raises(TrialRecordError, match="not an integer"):
        parse_trial_id("counting/direct/x")


def test_directions_are_as_seen_from_the_camera():
    # the camera stands across the table on the base's +x axis, looking back at the robot (-x)
    cam, look = (0.62, 0.0), (0.17, 0.0)
    assert direction_xy("front", cam, look) == (1.0, 0.0)  # towards the camera
    assert direction_xy("behind", cam, look) == (-1.0, 0.0)  # towards the robot
    # facing the robot, the person's left is the robot's right (base -y)
    assert direction_xy("left", cam, look) == (0.0, -1.0)
    assert direction_xy("right", cam, look) == (0.0, 1.0)
