"""Property tests of the parser: parse(render(plan)) == plan for every convention; fuzzed text only ever
raises the typed ParseError."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grounded_planner.plan import GroundedAction, GroundedPlan
from grounded_planner.vlm.conventions import CONVENTIONS, render_plan
from grounded_planner.vlm.parse import ParseError, parse_location, parse_plan

# Generating whole plans is slow on a loaded 2-core CI machine; that is not a failure of the parser.
SLOW_CI = [HealthCheck.too_slow, HealthCheck.data_too_large]
NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -'"
names = (
    st.text(alphabet=NAME_CHARS, min_size=1, max_size=20)
    .map(lambda s: " ".join(s.split()))
    .filter(lambda s: s[:1].isalpha())
)
json_names = st.text(min_size=1, max_size=20).map(lambda s: " ".join(s.split())).filter(bool)


@st.composite
def boxes(draw, w, h):
    # at least 1 % of the side (and 2 px) wide so 0-1000 rounding cannot make it degenerate
    min_w, min_h = max(2.0, 0.01 * w), max(2.0, 0.01 * h)
    x1 = draw(st.floats(0, w - min_w))
    y1 = draw(st.floats(0, h - min_h))
    x2 = draw(st.floats(x1 + min_w, w))
    y2 = draw(st.floats(y1 + min_h, h))
    return (x1, y1, x2, y2)


@st.composite
def plans(draw, name_strategy=names, allow_empty=True):
    w = draw(st.integers(16, 4096))
    h = draw(st.integers(16, 4096))
    actions = []
    for kind in draw(
        st.lists(st.sampled_from(["pick_place", "open", "close"]), min_size=0 if allow_empty else 1, max_size=5)
    ):
        obj = draw(name_strategy)
        if kind == "pick_place":
            point = (draw(st.floats(0, w)), draw(st.floats(0, h)))
            actions.append(GroundedAction("grasp", obj, bbox=draw(boxes(w, h))))
            actions.append(GroundedAction("place", obj, target=draw(name_strategy), point=point))
        else:
            actions.append(GroundedAction(kind, obj, bbox=draw(boxes(w, h))))
    reason = "" if actions else draw(st.text(alphabet=NAME_CHARS, min_size=1, max_size=40).filter(str.strip))
    return GroundedPlan(instruction="do it", image_size=(w, h), actions=actions, reason=" ".join(reason.split()))


def assert_same_plan(parsed: GroundedPlan, plan: GroundedPlan, convention: str, model_size=None):
    w, h = plan.image_size
    mw, mh = model_size or (w, h)
    if convention == "pixel":  # integer pixels of the image the model saw, scaled back
        tol_x, tol_y = 0.5 * w / mw + 1e-6, 0.5 * h / mh + 1e-6
    else:  # integer thousandths of the side
        tol_x, tol_y = 0.5 * w / 1000 + 1e-6, 0.5 * h / 1000 + 1e-6
    assert [a.type for a in parsed.actions] == [a.type for a in plan.actions]
    assert [a.object for a in parsed.actions] == [a.object for a in plan.actions]
    assert [a.target for a in parsed.actions] == [a.target for a in plan.actions]
    assert parsed.reason == plan.reason
    assert parsed.warnings == []
    for got, want in zip(parsed.actions, plan.actions):
        if want.bbox is not None:
            for i, (g, e) in enumerate(zip(got.bbox, want.bbox)):
                assert abs(g - e) <= (tol_x if i % 2 == 0 else tol_y), (got.bbox, want.bbox)
        if want.point is not None:
            assert abs(got.point[0] - want.point[0]) <= tol_x and abs(got.point[1] - want.point[1]) <= tol_y


@pytest.mark.parametrize("convention", CONVENTIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=SLOW_CI)
@given(plan=plans(name_strategy=json_names))
def test_json_round_trip(convention, plan):
    text = render_plan(plan, convention)
    assert_same_plan(
        parse_plan(text, plan.image_size, "auto" if convention != "gemini" else "gemini", plan.instruction),
        plan,
        convention,
    )
    # the explicit convention reads it the same way
    assert_same_plan(parse_plan(text, plan.image_size, convention, plan.instruction), plan, convention)


@pytest.mark.parametrize("convention", CONVENTIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=SLOW_CI)
@given(plan=plans(allow_empty=False))
def test_call_lines_round_trip(convention, plan):
    text = render_plan(plan, convention, style="calls")
    assert_same_plan(parse_plan(text, plan.image_size, convention, plan.instruction), plan, convention)


@pytest.mark.parametrize("convention", CONVENTIONS)
@settings(max_examples=40, deadline=None, suppress_health_check=SLOW_CI + [HealthCheck.filter_too_much])
@given(plan=plans(allow_empty=False), scale=st.floats(0.1, 1.0))
def test_round_trip_through_a_resized_image(convention, plan, scale):
    w, h = plan.image_size
    model_size = (max(8, round(w * scale)), max(8, round(h * scale)))
    # a box under 2 pixels of the model's image cannot survive integer pixels there
    assume(
        all(
            (a.bbox[2] - a.bbox[0]) * model_size[0] / w >= 2 and (a.bbox[3] - a.bbox[1]) * model_size[1] / h >= 2
            for a in plan.actions
            if a.bbox is not None
        )
    )
    text = render_plan(plan, convention, model_image_size=model_size)
    parsed = parse_plan(text, plan.image_size, convention, model_image_size=model_size)
    assert_same_plan(parsed, plan, convention, model_size)


def test_gemini_auto_detection_by_box_2d_key():
    plan = GroundedPlan(
        "x",
        (1000, 500),
        [GroundedAction("grasp", "a", bbox=(100, 50, 200, 250)), GroundedAction("place", "a", "b", point=(900, 100))],
    )
    parsed = parse_plan(render_plan(plan, "gemini"), (1000, 500))  # auto sees box_2d: point is [y, x] too
    assert parsed.actions[1].point == pytest.approx((900, 100))


FRAGMENTS = [
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    '"',
    "'",
    '"type"',
    '"action"',
    '"grasp"',
    '"place"',
    '"open"',
    '"pick"',
    '"bbox"',
    '"bbox_2d"',
    '"box_2d"',
    '"point"',
    '"point_2d"',
    '"actions"',
    '"reason"',
    '"object"',
    "grasp(",
    "place(",
    "put(",
    ")",
    "<think>",
    "</think>",
    "```json",
    "```",
    "\n",
    " ",
    "1.",
    "-1",
    "0",
    "1000",
    "1e9",
    "NaN",
    "Infinity",
    "null",
    "true",
    '"12"',
    "3.5",
    "spoon",
    "=",
    "\\",
    "\u201c",
    "[[",
    "]]",
]


@settings(max_examples=400, deadline=None, suppress_health_check=SLOW_CI)
@given(
    text=st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join)),
    size=st.tuples(st.integers(1, 3000), st.integers(1, 3000)),
    convention=st.sampled_from(["auto", "qwen3", "gemini", "pixel"]),
)
def test_fuzz_only_parse_errors(text, size, convention):
    try:
        plan = parse_plan(text, size, convention)
    except ParseError as exc:
        assert exc.rule != "internal", exc.reason  # a crash caught by parse_plan's catch-all, not a refusal
        assert exc.reason and "\n" not in exc.reason
        return
    plan.validate()  # whatever it returns is a valid plan inside the image
    json.dumps(plan.to_dict())


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_CI)
@given(
    text=st.one_of(
        st.text(max_size=200), st.lists(st.sampled_from(FRAGMENTS + ["<point>", "</point>"]), max_size=60).map("".join)
    ),
    kind=st.sampled_from(["box", "point"]),
    convention=st.sampled_from(["auto", "qwen3", "gemini", "pixel"]),
)
def test_fuzz_grounding_answers_only_parse_errors(text, kind, convention):
    try:
        coords, _ = parse_location(text, (640, 480), kind, convention)
    except ParseError as exc:
        assert exc.rule != "internal", exc.reason
        return
    assert len(coords) == (4 if kind == "box" else 2)
    assert all(0 <= v <= 640 for v in coords[0::2]) and all(0 <= v <= 480 for v in coords[1::2])


def test_pathological_nesting_is_a_parse_error():
    for text in ["[" * 50_000, "[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000, "grasp(" * 10_000]:
        with pytest.raises(ParseError) as info:
            parse_plan(text, (640, 480))
        assert info.value.rule in ("no_plan", "too_complex", "truncated"), (text[:20], info.value.rule)
