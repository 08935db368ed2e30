"""Each model family's coordinate convention, checked against numbers written by hand (not against the renderer):
a convention swapped in both parse and render would pass a round trip, never these.

One non-square 1280x720 image; the grasp box and the place point are chosen so that every swap (x<->y, min<->max,
width<->height, relative<->absolute, original<->resized image) gives different numbers:

| family                          | box written by the model     | point written by the model   |
|---------------------------------|------------------------------|------------------------------|
| Qwen3-VL (0-1000, x1 y1 x2 y2)  | bbox_2d [100, 400, 300, 900] | point_2d [750, 300]          |
| Gemini (0-1000, ymin xmin ...)  | box_2d  [400, 100, 900, 300] | point [300, 750]             |
| pixels of the original          | bbox    [128, 288, 384, 648] | point [960, 216]             |
| Qwen2.5-VL (pixels of 640x360)  | bbox_2d [64, 144, 192, 324]  | point_2d [480, 108]          |
| Embodied-R1 (pixels of 640x360) |                              | <point>[[480, 108]]</point>  |
"""

from __future__ import annotations

import json

import pytest

from grounded_planner.plan import GroundedAction, GroundedPlan
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.conventions import box_from_px, box_to_px, point_from_px, point_to_px, render_plan
from grounded_planner.vlm.parse import parse_location, parse_plan

SIZE = (1280, 720)
MODEL_SIZE = (640, 360)  # the copy a Qwen2.5-VL / Embodied-R1 server was sent
BOX_PX = (128.0, 288.0, 384.0, 648.0)
POINT_PX = (960.0, 216.0)
WRITTEN = {  # convention -> (box key, box numbers, point key, point numbers), as each family writes them
    "qwen3": ("bbox_2d", [100, 400, 300, 900], "point_2d", [750, 300]),
    "gemini": ("box_2d", [400, 100, 900, 300], "point", [300, 750]),
    "pixel": ("bbox", [128, 288, 384, 648], "point", [960, 216]),
}
QWEN25_BOX = [64, 144, 192, 324]
QWEN25_POINT = [480, 108]


def plan_px() -> GroundedPlan:
    return GroundedPlan(
        "put the cup on the tray",
        SIZE,
        [GroundedAction("grasp", "cup", bbox=BOX_PX), GroundedAction("place", "cup", "tray", point=POINT_PX)],
    )


def answer(box_key, box, point_key, point) -> str:
    return json.dumps(
        [
            {"type": "grasp", "object": "cup", box_key: box},
            {"type": "place", "object": "cup", "target": "tray", point_key: point},
        ]
    )


@pytest.mark.parametrize("convention", sorted(WRITTEN))
def test_the_renderer_writes_each_family_s_own_numbers(convention):
    box_key, box, point_key, point = WRITTEN[convention]
    assert json.loads(render_plan(plan_px(), convention)) == [
        {"type": "grasp", "object": "cup", box_key: box},
        {"type": "place", "object": "cup", "target": "tray", point_key: point},
    ]
    assert box_from_px(BOX_PX, convention, SIZE) == box
    assert point_from_px(POINT_PX, convention, SIZE) == point


@pytest.mark.parametrize("convention", sorted(WRITTEN))
def test_each_family_s_numbers_are_read_back_to_the_same_pixels(convention):
    box_key, box, point_key, point = WRITTEN[convention]
    text = answer(box_key, box, point_key, point)
    for reading in ("auto", convention):  # the keys decide under auto; the named convention reads them alike
        plan = parse_plan(text, SIZE, reading)
        assert plan.actions[0].bbox == pytest.approx(BOX_PX, abs=1e-9), reading
        assert plan.actions[1].point == pytest.approx(POINT_PX, abs=1e-9), reading
        assert plan.warnings == []
    assert box_to_px(box, convention, SIZE) == pytest.approx(BOX_PX, abs=1e-9)
    assert point_to_px(point, convention, SIZE) == pytest.approx(POINT_PX, abs=1e-9)


def test_gemini_numbers_under_generic_keys_are_read_as_gemini_only_when_told():
    text = answer("bbox", WRITTEN["gemini"][1], "point", WRITTEN["gemini"][3])
    plan = parse_plan(text, SIZE, "gemini")
    assert plan.actions[0].bbox == pytest.approx(BOX_PX, abs=1e-9)
    assert plan.actions[1].point == pytest.approx(POINT_PX, abs=1e-9)
    # under auto the generic keys are pixels of the original: the same numbers are another box
    opened = parse_plan(json.dumps([{"type": "open", "object": "drawer", "bbox": WRITTEN["gemini"][1]}]), SIZE)
    assert opened.actions[0].bbox == pytest.approx((400, 100, 900, 300), abs=1e-9)


def test_qwen2_5_vl_bbox_2d_is_pixels_of_the_resized_image():
    config = PlannerConfig(model="Qwen/Qwen2.5-VL-7B-Instruct")
    assert config.parse_convention == "pixel"
    text = answer("bbox_2d", QWEN25_BOX, "point_2d", QWEN25_POINT)
    plan = parse_plan(text, SIZE, config.parse_convention, model_image_size=MODEL_SIZE)
    assert plan.actions[0].bbox == pytest.approx(BOX_PX, abs=1e-9)
    assert plan.actions[1].point == pytest.approx(POINT_PX, abs=1e-9)
    # the renderer writes what Qwen2.5-VL would for that copy
    rendered = json.loads(render_plan(plan_px(), "pixel", model_image_size=MODEL_SIZE))
    assert rendered[0]["bbox"] == QWEN25_BOX and rendered[1]["point"] == QWEN25_POINT
    # the same numbers under Qwen3-VL's name are thousandths of the side
    plan = parse_plan(
        text, SIZE, PlannerConfig(model="Qwen/Qwen3-VL-8B-Instruct").parse_convention, model_image_size=MODEL_SIZE
    )
    assert plan.actions[0].bbox == pytest.approx((81.92, 103.68, 245.76, 233.28), abs=1e-9)


def test_relative_numbers_do_not_depend_on_the_size_the_model_saw():
    box_key, box, point_key, point = WRITTEN["qwen3"]
    plan = parse_plan(answer(box_key, box, point_key, point), SIZE, "qwen3", model_image_size=MODEL_SIZE)
    assert plan.actions[0].bbox == pytest.approx(BOX_PX, abs=1e-9)
    rendered = json.loads(render_plan(plan_px(), "gemini", model_image_size=MODEL_SIZE))
    assert rendered[0]["box_2d"] == WRITTEN["gemini"][1] and rendered[1]["point"] == WRITTEN["gemini"][3]


def test_call_lines_are_written_and_read_in_each_convention():
    assert (
        render_plan(plan_px(), "qwen3", style="calls") == "1. grasp(cup, [100, 400, 300, 900])\n"
        "2. place(cup, tray, [750, 300])"
    )
    assert (
        render_plan(plan_px(), "gemini", style="calls") == "1. grasp(cup, [400, 100, 900, 300])\n"
        "2. place(cup, tray, [300, 750])"
    )
    plan = parse_plan("1. grasp(cup, [400, 100, 900, 300])\n2. place(cup, tray, [300, 750])", SIZE, "gemini")
    assert plan.actions[0].bbox == pytest.approx(BOX_PX, abs=1e-9)
    assert plan.actions[1].point == pytest.approx(POINT_PX, abs=1e-9)
    # auto reads call lines as pixels
    plan = parse_plan("1. grasp(cup, [128, 288, 384, 648])\n2. place(cup, tray, [960, 216])", SIZE)
    assert plan.actions[0].bbox == pytest.approx(BOX_PX, abs=1e-9)


def test_sub_pixel_rendering_keeps_the_half_pixel():
    plan = GroundedPlan("x", SIZE, [GroundedAction("open", "drawer", bbox=(128.5, 288.25, 384.75, 647.5))])
    assert json.loads(render_plan(plan, "pixel", decimals=2))[0]["bbox"] == [128.5, 288.25, 384.75, 647.5]
    parsed = parse_plan(render_plan(plan, "pixel", decimals=2), SIZE)
    assert parsed.actions[0].bbox == pytest.approx((128.5, 288.25, 384.75, 647.5), abs=1e-9)
    # 0-1000 with one decimal: 128.5 / 1280 * 1000 = 100.390625 -> 100.4
    assert json.loads(render_plan(plan, "qwen3", decimals=1))[0]["bbox_2d"] == [100.4, 400.3, 300.6, 899.3]


@pytest.mark.parametrize(
    "text, convention, kind, model_size, expected",
    [
        ("<point>[[480, 108]]</point>", "auto", "point", MODEL_SIZE, POINT_PX),  # Embodied-R1: pixels of the copy sent
        (
            "I see it. <point>[[480, 108], [10, 10]]</point>",
            "qwen3",
            "point",
            MODEL_SIZE,
            POINT_PX,
        ),  # first point, pixels
        ('{"point_2d": [750, 300]}', "auto", "point", None, POINT_PX),
        ('{"point": [300, 750]}', "gemini", "point", None, POINT_PX),
        ('{"point": [960, 216]}', "auto", "point", None, POINT_PX),
        ('{"bbox_2d": [100, 400, 300, 900]}', "auto", "box", None, BOX_PX),
        ('[{"box_2d": [400, 100, 900, 300], "label": "cup"}]', "auto", "box", None, BOX_PX),
        ('{"bbox_2d": [64, 144, 192, 324]}', "pixel", "box", MODEL_SIZE, BOX_PX),  # Qwen2.5-VL grounding
        ('{"bbox_px": [128, 288, 384, 648]}', "auto", "box", None, BOX_PX),
        ("[100, 400, 300, 900]", "qwen3", "point", None, (256.0, 468.0)),  # a box where a point was asked
    ],
)
def test_grounding_answers_in_each_convention(text, convention, kind, model_size, expected):
    coords, _ = parse_location(text, SIZE, kind, convention, model_image_size=model_size)
    assert coords == pytest.approx(expected, abs=1e-9)


# ---- name mappings, each entry written out by hand -------------------------------------------------------------
@pytest.mark.parametrize(
    "model, family, asked",
    [
        ("Qwen/Qwen3-VL-8B-Instruct", "qwen3", "qwen3"),
        ("qwen3-vl-235b-a22b", "qwen3", "qwen3"),
        ("gemini-2.5-pro", "gemini", "gemini"),
        ("google/gemma-3-12b-it", "gemini", "gemini"),
        ("gemini-robotics-er-1.5-preview", "gemini", "gemini"),
        ("robotics-er-1.5", "gemini", "gemini"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "pixel", "pixel"),
        ("qwen2_5_vl_3b", "pixel", "pixel"),
        ("Qwen/Qwen2-VL-7B-Instruct", "pixel", "pixel"),
        ("gpt-4o", None, "pixel"),
        ("OpenGVLab/InternVL3-8B", None, "pixel"),
    ],
)
def test_model_names_map_to_their_family_s_convention(model, family, asked):
    from grounded_planner.vlm.config import known_family, prompt_family_for

    assert known_family(model) == family
    assert prompt_family_for(model) == asked
    assert PlannerConfig(model=model).parse_convention == (family or "auto")


@pytest.mark.parametrize(
    "written, canonical",
    [
        ("grasp", "grasp"),
        ("Grab", "grasp"),
        ("PICK", "grasp"),
        ("Pick Up", "grasp"),
        ("pick-up", "grasp"),
        ("pickup", "grasp"),
        ("take", "grasp"),
        ("grip", "grasp"),
        ("pick_and_hold", "grasp"),
        ("grasp_object", "grasp"),
        ("place", "place"),
        ("Put", "place"),
        ("put down", "place"),
        ("putdown", "place"),
        ("place_on", "place"),
        ("put on", "place"),
        ("drop", "place"),
        ("release", "place"),
        ("place at", "place"),
        ("place_object", "place"),
        ("open", "open"),
        ("Open Drawer", "open"),
        ("close", "close"),
        ("SHUT", "close"),
        ("close_the_drawer", "close"),
        ("push", None),
        ("wipe", None),
        ("", None),
    ],
)
def test_action_verbs_as_models_write_them(written, canonical):
    from grounded_planner.vlm.scan import norm_type

    assert norm_type(written) == canonical
