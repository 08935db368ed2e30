"""parse_plan on raw answers in the styles real VLMs write, and the `grounded-planner parse` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grounded_planner.vlm.parse import ParseError, parse_plan

W, H = 640, 480
# The plan every styled answer below describes, in pixels of a 640x480 image.
GRASP_PX = [128.0, 192.0, 192.0, 288.0]
PLACE_PX = [320.0, 240.0]


def rel(v, side):  # pixel -> 0-1000
    return round(v / side * 1000)


QWEN = [rel(128, W), rel(192, H), rel(192, W), rel(288, H)]  # [200, 400, 300, 600]
QWEN_PT = [rel(320, W), rel(240, H)]  # [500, 500]
GEM = [QWEN[1], QWEN[0], QWEN[3], QWEN[2]]
GEM_PT = [QWEN_PT[1], QWEN_PT[0]]

STYLED_ANSWERS = {
    "qwen3 think + fence": (
        "<think>\nThe spoon is on the left. I should pick it and put it on the plate.\n[draft]\n</think>\n\n"
        f'```json\n[\n  {{"type": "grasp", "object": "spoon", "bbox_2d": {QWEN}}},\n'
        f'  {{"type": "place", "object": "spoon", "target": "plate", "point_2d": {QWEN_PT}}}\n]\n```'
    ),
    "qwen3 lone closing think tag": (
        "The user wants the spoon on the plate.\n</think>\n"
        f'[{{"type": "grasp", "object": "spoon", "bbox_2d": {QWEN}}}, '
        f'{{"type": "place", "object": "spoon", "target": "plate", "point_2d": {QWEN_PT}}}]'
    ),
    "gemini fence box_2d": (
        f'```json\n[{{"action": "pick", "label": "spoon", "box_2d": {GEM}}},\n'
        f' {{"action": "put", "label": "spoon", "target": "plate", "point": {GEM_PT}}}]\n```'
    ),
    "gpt prose around pixel object": (
        "Sure! Here's a plan for the robot.\n\n"
        f'{{"plan": [{{"Primitive": "GRASP", "Object": "spoon", "BBox": {GRASP_PX}}}, '
        f'{{"Primitive": "Place", "Object": "spoon", "Target": "plate", "Point": {PLACE_PX}}}]}}\n\n'
        "Let me know if you need anything else!"
    ),
    "steps key, strings for numbers, trailing commas": (
        '{"steps": [{"type": "grasp", "object": "spoon", "bbox": ["128", "192", "192", "288"],},'
        ' {"type": "place", "object": "spoon", "target": "plate", "point": ["320", "240"],},],}'
    ),
    "python literal with single quotes": (
        "[{'type': 'grasp', 'object': 'spoon', 'bbox': [128, 192, 192, 288]}, "
        "{'type': 'place', 'object': 'spoon', 'target': 'plate', 'point': (320, 240)}]"
    ),
    "function-call lines": "Plan:\n1. grasp(spoon, [128, 192, 192, 288])\n2. place(plate, [320, 240])\nDone.",
    "function-call lines with keywords and quotes": (
        '- pick(object="spoon", bbox=[128, 192, 192, 288])\n- put("spoon", target=\'plate\', point=[320, 240])'
    ),
    "list of call strings under actions": (
        '{"actions": ["grasp(spoon, [128, 192, 192, 288])", "place(spoon, plate, [320, 240])"]}'
    ),
    "one JSON object per line": (
        '{"type": "grasp", "object": "spoon", "bbox": [128, 192, 192, 288]}\n'
        '{"type": "place", "object": "spoon", "target": "plate", "point": [320, 240]}'
    ),
    "nested args and corner pairs": (
        '[{"action": "grasp", "args": {"object": "spoon", "bbox": [[128, 192], [192, 288]]}}, '
        '{"action": "place", "args": {"object": "spoon", "target": "plate", "point": {"x": 320, "y": 240}}}]'
    ),
    "verb as key": (
        '[{"grasp": {"object": "spoon", "bbox": [128, 192, 192, 288]}}, '
        '{"place": {"object": "spoon", "target": "plate", "point": [320, 240]}}]'
    ),
    "numbered object of steps": (
        '{"1": {"action": "grasp", "object": "spoon", "bbox": [128, 192, 192, 288]}, '
        '"2": {"action": "place", "object": "spoon", "target": "plate", "point": [320, 240]}}'
    ),
    "calls with coordinates after the parenthesis": "1. grasp(spoon) at [128, 192, 192, 288]\n2. place(plate) at [320, 240]",
    "plain numbered lines": "Plan:\n1. Grasp the spoon at [128, 192, 192, 288]\n2. Place the spoon on the plate [320, 240]",
    "bullets with parentheses": "- pick up spoon (128, 192, 192, 288)\n- put down on plate (320, 240)",
    "double-encoded JSON string": json.dumps(
        '[{"type": "grasp", "object": "spoon", "bbox": [128, 192, 192, 288]}, '
        '{"type": "place", "target": "plate", "point": [320, 240]}]'
    ),
    "verb suffixes, coordinates key, target names the grasped thing": (
        '[{"action": "grasp_object", "target": "spoon", "coordinates": [128, 192, 192, 288]}, '
        '{"action": "place_object", "object": "spoon", "location": "plate", "coordinates": [320, 240]}]'
    ),
    "title-case keys with spaces and min/max box": (
        '[{"Action": "Pick Up", "Object Name": "spoon", "Bounding Box": {"x_min": 128, "y_min": 192, '
        '"x_max": 192, "y_max": 288}}, {"Action": "Put Down", "Object": "spoon", "Destination": "plate", '
        '"Point": {"x": 320, "y": 240}}]'
    ),
    "calls with qwen3 keyword coordinates": (
        f'grasp(object="spoon", bbox_2d={QWEN})\nplace(object="spoon", target="plate", point_2d={QWEN_PT})'
    ),
    "step numbers beside the action": (
        '[{"step": 1, "action": "grasp", "object": "spoon", "bbox": [128, 192, 192, 288]}, '
        '{"step": 2, "action": "place", "object": "spoon", "target": "plate", "point": [320, 240]}]'
    ),
    "json with comments": (
        '```json\n[\n  {"type": "grasp", "object": "spoon", "bbox": [128, 192, 192, 288]}, // the spoon\n'
        '  /* then */ {"type": "place", "object": "spoon", "target": "plate", "point": [320, 240]}\n]\n```'
    ),
    "corner keys on the action": (
        '[{"type": "grasp", "object": "spoon", "x1": 128, "y1": 192, "x2": 192, "y2": 288}, '
        '{"type": "place", "object": "spoon", "target": "plate", "x": 320, "y": 240}]'
    ),
    "yaml list in a fence": (
        "```yaml\n- type: grasp\n  object: spoon\n  bbox: [128, 192, 192, 288]\n"
        "- type: place\n  object: spoon\n  target: plate\n  point: [320, 240]\n```"
    ),
    "markdown table": (
        "Here is the plan:\n\n| Step | Action | Object | Target | BBox / Point |\n|---|---|---|---|---|\n"
        "| 1 | grasp | spoon | | [128, 192, 192, 288] |\n| 2 | place | spoon | plate | [320, 240] |\n"
    ),
    "pick up with space and hyphen": (
        '[{"type": "Pick Up", "object": "spoon", "bbox": [128, 192, 192, 288]}, '
        '{"type": "put-down", "object": "spoon", "target": "plate", "point": [320, 240]}]'
    ),
}


@pytest.mark.parametrize("name", sorted(STYLED_ANSWERS))
def test_styled_answers_give_the_same_pixel_plan(name):
    plan = parse_plan(STYLED_ANSWERS[name], (W, H), instruction="put the spoon on the plate")
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    assert plan.actions[0].object == "spoon"
    assert plan.actions[1].object == "spoon" and plan.actions[1].target == "plate"
    assert plan.actions[0].bbox == pytest.approx(GRASP_PX, abs=0.5)
    assert plan.actions[1].point == pytest.approx(PLACE_PX, abs=0.5)
    assert plan.actions[1].bbox is None and plan.actions[0].point is None
    assert plan.raw_response == STYLED_ANSWERS[name]
    assert plan.instruction == "put the spoon on the plate"
    assert plan.warnings == []


def test_explicit_convention_reads_generic_keys_and_calls():
    rel_calls = f"grasp(spoon, {QWEN})\nplace(plate, {QWEN_PT})"
    plan = parse_plan(rel_calls, (W, H), convention="qwen3")
    assert plan.actions[0].bbox == pytest.approx(GRASP_PX, abs=0.5)
    gem = json.dumps(
        [{"type": "grasp", "object": "spoon", "bbox": GEM}, {"type": "place", "object": "spoon", "point": GEM_PT}]
    )
    plan = parse_plan(gem, (W, H), convention="gemini")
    assert plan.actions[0].bbox == pytest.approx(GRASP_PX, abs=0.5)
    assert plan.actions[1].point == pytest.approx(PLACE_PX, abs=0.5)
    # auto reads the same calls as pixels
    plan = parse_plan(f"grasp(spoon, {GRASP_PX})\nplace(plate, {PLACE_PX})", (W, H))
    assert plan.actions[0].bbox == pytest.approx(GRASP_PX)


def test_pixel_answers_for_a_resized_image_are_scaled_back():
    # the model saw a 320x240 copy: its pixels are half of the original's
    answer = '[{"type": "open", "object": "drawer", "bbox": [64, 96, 96, 144]}]'
    plan = parse_plan(answer, (W, H), model_image_size=(320, 240))
    assert plan.actions[0].bbox == pytest.approx(GRASP_PX)
    # relative coordinates do not depend on the size the model saw
    answer = f'[{{"type": "close", "object": "drawer", "bbox_2d": {QWEN}}}]'
    assert parse_plan(answer, (W, H), model_image_size=(320, 240)).actions[0].bbox == pytest.approx(GRASP_PX, abs=0.5)


def test_fractions_of_the_image_are_read_with_a_warning():
    answer = (
        '[{"type": "grasp", "object": "spoon", "bbox": [0.2, 0.4, 0.3, 0.6]}, '
        '{"type": "place", "object": "spoon", "target": "plate", "point": [0.5, 0.5]}]'
    )
    plan = parse_plan(answer, (W, H))
    assert plan.actions[0].bbox == pytest.approx(GRASP_PX) and plan.actions[1].point == pytest.approx(PLACE_PX)
    assert "fractions" in plan.warnings[0]
    # an explicit pixel convention means pixels, however small
    plan = parse_plan(answer, (W, H), convention="pixel")
    assert plan.actions[0].bbox == pytest.approx((0.2, 0.4, 0.3, 0.6))


def test_open_close_and_empty_plans():
    plan = parse_plan(
        '{"actions": [{"type": "OPEN", "object": "top drawer", "bbox": [10, 300, 200, 360]},'
        ' {"type": "shut", "object": "top drawer", "bbox": [10, 300, 200, 360]}]}',
        (W, H),
    )
    assert [a.type for a in plan.actions] == ["open", "close"]
    plan = parse_plan('```json\n{"actions": [], "reason": "The spoon is already on the plate."}\n```', (W, H))
    assert plan.is_empty and plan.reason == "The spoon is already on the plate."
    plan = parse_plan("Nothing to do: the spoon is already on the plate.\n[]", (W, H))
    assert plan.is_empty and "already on the plate" in plan.reason
    assert "without a 'reason'" in plan.warnings[0]


def test_partly_outside_box_is_clipped_with_a_warning():
    answer = (
        '[{"type": "grasp", "object": "cup", "bbox": [-20, 400, 100, 520]}, '
        '{"type": "place", "object": "cup", "point": [641, 100]}]'
    )
    plan = parse_plan(answer, (W, H))
    assert plan.actions[0].bbox == (0.0, 400.0, 100.0, 480.0)
    assert plan.actions[1].point == (640.0, 100.0)
    assert len(plan.warnings) == 2 and "clipped" in plan.warnings[0] and "action 0" in plan.warnings[0]
    # qwen3 relative values a little above 1000 are clipped too
    plan = parse_plan('[{"type": "open", "object": "door", "bbox_2d": [900, 900, 1010, 1003]}]', (W, H))
    assert plan.actions[0].bbox == pytest.approx((576.0, 432.0, 640.0, 480.0))
    assert plan.warnings


def test_reversed_corners_are_an_error_not_a_guess():
    with pytest.raises(ParseError, match="x1 > x2") as info:
        parse_plan('[{"type": "open", "object": "door", "bbox": [200, 300, 100, 250]}]', (W, H))
    assert info.value.rule == "bbox_order" and info.value.index == 0


@pytest.mark.parametrize(
    "answer, rule",
    [
        ("I'm sorry, I can't see a spoon in this image.", "no_plan"),
        ("", "empty_answer"),
        (
            '[{"type": "grasp", "object": "cup", "bbox": [700, 10, 800, 50]}, {"type": "place", "point": [1, 1]}]',
            "bbox_outside",
        ),
        ('[{"type": "open", "object": "door", "bbox": [100, 100, 100, 200]}]', "bbox_degenerate"),
        ('[{"type": "push", "object": "door", "bbox": [1, 1, 20, 20]}]', "type"),
        ('[{"object": "door", "bbox": [1, 1, 20, 20]}]', "type"),
        ('[{"type": "grasp", "object": "cup", "bbox": [1, 2, 3]}, {"type": "place", "point": [1, 1]}]', "bbox_length"),
        ('[{"type": "grasp", "object": "cup", "bbox": [1, 2, 30, 40]}]', "grasp_then_place"),
        ('[{"type": "place", "object": "cup", "point": [1, 2]}]', "place_after_grasp"),
        ('[{"type": "grasp", "object": "cup"}, {"type": "place", "point": [1, 1]}]', "bbox_required"),
        ('[{"type": "grasp", "bbox": [1, 2, 30, 40]}, {"type": "place", "point": [5000, 1]}]', "point_outside"),
        ('[{"type": "grasp", "bbox": [1, 2, NaN, 40]}, {"type": "place", "point": [5, 1]}]', "bbox_finite"),
        ('<think>I will answer [{"type": "open", "bbox": [1, 1, 5, 5]}]</think>Sorry, I cannot help.', "no_plan"),
        # cut off by max_tokens after two complete actions: never a silently shortened plan
        (
            '[{"type": "grasp", "object": "a", "bbox": [1, 2, 30, 40]}, {"type": "place", "point": [5, 6]}, '
            '{"type": "grasp", "object": "b", "bb',
            "truncated",
        ),
        ("1. grasp(a, [1, 2, 30, 40])\n2. place(b, [5, 6])\n3. grasp(c, [1,", "truncated"),
    ],
)
def test_unusable_answers_raise_a_typed_error_with_the_reason(answer, rule):
    with pytest.raises(ParseError) as info:
        parse_plan(answer, (W, H))
    assert info.value.rule == rule
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value) and str(info.value)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="image_size"):
        parse_plan("[]", (0, 480))
    with pytest.raises(ValueError, match="convention"):
        parse_plan("[]", (W, H), convention="yolo")


CLI = "import sys; from grounded_planner.cli.main import main; sys.exit(main(sys.argv[1:]))"


def run_cli(args, stdin):
    return subprocess.run(
        [sys.executable, "-c", CLI, "parse", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_parse_command_prints_the_canonical_plan_and_exits_0():
    out = run_cli(
        ["--width", "640", "--height", "480", "--instruction", "put the spoon on the plate"],
        STYLED_ANSWERS["gemini fence box_2d"],
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["image_size"] == [640, 480]
    assert plan["actions"][0]["bbox"] == pytest.approx(GRASP_PX, abs=0.5)
    assert plan["actions"][1]["point"] == pytest.approx(PLACE_PX, abs=0.5)
    assert plan["instruction"] == "put the spoon on the plate"


def test_parse_command_convention_flag():
    out = run_cli(
        ["--width", "640", "--height", "480", "--convention", "qwen3"], f"grasp(spoon, {QWEN})\nplace(plate, {QWEN_PT})"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["actions"][0]["bbox"] == pytest.approx(GRASP_PX, abs=0.5)


def test_parse_command_exits_2_with_one_line_reason():
    out = run_cli(["--width", "640", "--height", "480"], "The image shows a kitchen. I am not sure what to do.")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no plan found" in lines[0]
    out = run_cli(
        ["--width", "640", "--height", "480"], '[{"type": "grasp", "object": "cup", "bbox": [700, 0, 900, 50]}]'
    )
    assert out.returncode == 2 and "outside" in out.stderr and len(out.stderr.strip().splitlines()) == 1


# ---- boundaries: on the image edge, half a pixel past it, the action cap -------------------------------------
def one_box(box, size=(W, H)):
    return parse_plan(json.dumps([{"type": "open", "object": "door", "bbox": box}]), size)


@pytest.mark.parametrize("box", [[-10, 10, 0, 20], [10, -10, 20, 0], [W, 10, W + 10, 20], [10, H, 20, H + 10]])
def test_a_box_touching_the_image_from_outside_is_wholly_outside(box):
    with pytest.raises(ParseError) as info:
        one_box(box)
    assert info.value.rule == "bbox_outside" and f"{W}x{H} image" in info.value.reason


@pytest.mark.parametrize(
    "box, clipped",
    [
        ([-0.5, 10, 0.5, 20], (0.0, 10.0, 0.5, 20.0)),
        ([W - 0.5, 10, W + 0.5, 20], (W - 0.5, 10.0, W, 20.0)),
        ([10, H - 0.5, 20, H + 0.5], (10.0, H - 0.5, 20.0, H)),
    ],
)
def test_a_box_half_a_pixel_past_the_edge_is_clipped_with_a_warning(box, clipped):
    plan = one_box(box)
    assert plan.actions[0].bbox == pytest.approx(clipped, abs=1e-9)
    assert len(plan.warnings) == 1 and "clipped" in plan.warnings[0]


def test_a_box_exactly_on_the_image_edges_is_kept_without_a_warning():
    plan = one_box([0, 0, W, H])
    assert plan.actions[0].bbox == (0.0, 0.0, W, H) and plan.warnings == []


def place_at(x, y, size):
    return parse_plan(
        json.dumps(
            [
                {"type": "grasp", "object": "cup", "bbox": [10, 10, 20, 20]},
                {"type": "place", "object": "cup", "point": [x, y]},
            ]
        ),
        size,
    )


def test_a_point_within_two_percent_outside_is_clipped_and_past_it_refused():
    # 2 % of a 1000 x 500 image: 20 px to the sides, 10 px above and below
    for x, y, clipped in [(1020, 250, (1000, 250)), (-20, 250, (0, 250)), (500, 510, (500, 500)), (500, -10, (500, 0))]:
        plan = place_at(x, y, (1000, 500))
        assert plan.actions[1].point == pytest.approx(clipped) and "just outside" in plan.warnings[0], (x, y)
    for x, y in [(1020.5, 250), (-20.5, 250), (500, 510.5), (500, -10.5)]:
        with pytest.raises(ParseError) as info:
            place_at(x, y, (1000, 500))
        assert info.value.rule == "point_outside" and info.value.index == 1, (x, y)


def test_a_point_on_the_image_edge_is_kept_without_a_warning():
    plan = place_at(W, H, (W, H))
    assert plan.actions[1].point == (W, H) and plan.warnings == []


def test_the_action_cap_allows_exactly_max_actions():
    from grounded_planner.vlm.parse import MAX_ACTIONS

    item = {"type": "open", "object": "door", "bbox": [1, 2, 30, 40]}
    assert len(parse_plan(json.dumps([item] * MAX_ACTIONS), (W, H)).actions) == MAX_ACTIONS
    with pytest.raises(ParseError) as info:
        parse_plan(json.dumps([item] * (MAX_ACTIONS + 1)), (W, H))
    assert info.value.rule == "too_many_actions" and str(MAX_ACTIONS + 1) in info.value.reason


@pytest.mark.parametrize(
    "text, kind, rule",
    [
        ('{"point": [1, 2, 3]}', "point", "point_length"),
        ('{"bbox_2d": [1, 2, 3]}', "box", "box_length"),
        ('{"point": [1, 2, 3, 4, 5]}', "point", "point_length"),
        ("[10, 20]", "box", "box_length"),
        ('{"point": [10, 20]}', "box", "no_box"),
        ("no coordinates here", "point", "no_point"),
        ("no coordinates here", "box", "no_box"),
        ('{"point": [5000, 20]}', "point", "point_outside"),
    ],
)
def test_unusable_grounding_answers_are_refused_by_rule(text, kind, rule):
    from grounded_planner.vlm.parse import parse_location

    with pytest.raises(ParseError) as info:
        parse_location(text, (W, H), kind)
    assert info.value.rule == rule, info.value.reason
