"""Prompts per model family: they state the vocabulary, the schema, the grasp->place rule and the empty
plan, and the example each one shows is itself a valid plan in that family's convention."""

from __future__ import annotations

import json
import re

import pytest

from grounded_planner.vlm import prompts
from grounded_planner.vlm.parse import parse_plan


@pytest.mark.parametrize(
    "family, box_key, point_key",
    [("qwen3", "bbox_2d", "point_2d"), ("gemini", "box_2d", "point"), ("pixel", "bbox", "point")],
)
def test_planning_prompt_states_the_contract(family, box_key, point_key):
    text = prompts.planning_system_prompt(family, 640, 360)
    for word in ("grasp", "place", "open", "close", box_key, point_key, "immediately followed", "empty plan", "reason"):
        assert word in text, word
    if family == "pixel":
        assert "640x360" in text  # pixels of the image as sent
    else:
        assert "1000" in text
    if family == "gemini":
        assert "[ymin, xmin, ymax, xmax]" in text and "[y, x]" in text
    example = text[text.rindex('{"actions"') :]
    plan = parse_plan(example, (640, 360), family)
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    # the example box covers the same part of the image in every family
    assert plan.actions[0].bbox == pytest.approx((0.212 * 640, 0.415 * 360, 0.298 * 640, 0.530 * 360), abs=0.7)


def test_repair_prompt_quotes_the_error():
    assert "action 0: a grasp must be immediately followed by a place" in prompts.repair_prompt(
        "action 0: a grasp must be immediately followed by a place"
    )


def test_language_prompt_asks_for_no_coordinates():
    text = prompts.language_plan_system_prompt()
    example = json.loads(re.search(r"\{\"actions\".*\}", text).group(0))
    assert all(set(a) <= {"type", "object", "target"} for a in example["actions"])
