"""Decoupled mode over real HTTP: a language planner and a grounder (VLM or Embodied-R1 style) on local
servers (grounded_planner.vlm.fake_server); parse_location on grounding answers."""

from __future__ import annotations

import importlib.util

import numpy as np

import pytest

from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import VLMConfigError, VLMResponseError, VLMTimeoutError
from grounded_planner.vlm.fake_server import DEMO_SCENE, FakeVLMServer, Reply, find_color, make_demo_scene
from grounded_planner.vlm.parse import ParseError, parse_location
from grounded_planner.vlm.factory import make_planner

INSTRUCTION = "put the red block on the blue plate"


@pytest.fixture(scope="module")
def scene():
    return make_demo_scene(1280, 720)


def plate_centre(scene):
    x1, y1, x2, y2 = find_color(scene, DEMO_SCENE["blue plate"])
    return ((x1 + x2) / 2, (y1 + y2) / 2)


@pytest.mark.parametrize("grounder_model", ["Qwen/Qwen3-VL-8B-Instruct", "gemini-robotics-er", "gpt-4o"])
def test_language_plan_grounded_by_a_vlm(scene, grounder_model):
    with FakeVLMServer() as planner_srv, FakeVLMServer() as grounder_srv:
        cfg = PlannerConfig(
            backend="decoupled",
            model="gpt-5.2",
            base_url=planner_srv.base_url,
            grounder="vlm",
            grounder_model=grounder_model,
            grounder_base_url=grounder_srv.base_url,
            max_image_side=640,
        )
        with make_planner(cfg) as planner:
            plan = planner.plan(scene, INSTRUCTION)
        # the planner was asked for language only, the grounder for one box and one point
        assert (
            len(planner_srv.requests) == 1
            and "Name each object precisely" in planner_srv.requests[0]["messages"][0]["content"]
        )
        assert [r["model"] for r in grounder_srv.requests] == [grounder_model] * 2
        assert "Locate the red block" in grounder_srv.requests[0]["messages"][0]["content"][1]["text"]
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    assert plan.actions[0].bbox == pytest.approx(find_color(scene, DEMO_SCENE["red block"]), abs=2.5)
    assert plan.actions[1].point == pytest.approx(plate_centre(scene), abs=2.5)
    assert plan.model == "gpt-5.2 + vlm"


def test_the_language_step_and_every_grounding_share_timeout_s(scene):
    # 0.5 s for the language plan, 0.6 s per grounding: each call fits in timeout_s = 1 s, the request does not
    with FakeVLMServer() as planner_srv, FakeVLMServer() as grounder_srv:
        planner_srv.script.append(Reply(delay_s=0.5))
        grounder_srv.script += [Reply(delay_s=0.6), Reply(delay_s=0.6)]
        cfg = PlannerConfig(
            backend="decoupled",
            model="gpt-5.2",
            base_url=planner_srv.base_url,
            grounder="vlm",
            grounder_model="gpt-4o",
            grounder_base_url=grounder_srv.base_url,
            max_image_side=640,
            timeout_s=1.0,
            max_retries=0,
        )
        with make_planner(cfg) as planner:
            with pytest.raises(VLMTimeoutError):
                planner.plan(scene, INSTRUCTION)
        assert len(planner_srv.requests) == 1 and len(grounder_srv.requests) == 1  # the second grounding never started


def test_embodied_r1_points_and_boxes_around_them(scene):
    with FakeVLMServer() as srv:
        cfg = PlannerConfig(
            backend="decoupled",
            model="qwen3-vl-4b",
            base_url=srv.base_url,
            grounder="embodied-r1",
            point_box_px=30,
            max_image_side=640,
        )
        with make_planner(cfg) as planner:
            plan = planner.plan(scene, INSTRUCTION)
        assert srv.requests[-1]["model"] == "Embodied-R1"
    x1, y1, x2, y2 = find_color(scene, DEMO_SCENE["red block"])
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    assert plan.actions[0].bbox == pytest.approx((cx - 15, cy - 15, cx + 15, cy + 15), abs=2.5)
    assert plan.actions[1].point == pytest.approx(plate_centre(scene), abs=2.5)
    assert any("30 px box" in w for w in plan.warnings)


def test_grounder_that_finds_nothing_is_a_typed_error(scene):
    with FakeVLMServer() as srv:
        srv.script += [Reply(), Reply(content="I cannot find it.")]  # the plan, then a useless grounding answer
        cfg = PlannerConfig(backend="decoupled", model="gpt-5.2", base_url=srv.base_url, grounder="vlm")
        with make_planner(cfg) as planner:
            with pytest.raises(VLMResponseError, match="grounding 'the red block'.*no box"):
                planner.plan(scene, INSTRUCTION)


@pytest.mark.skipif(importlib.util.find_spec("sam3") is not None, reason="sam3 is installed here")
def test_sam3_without_the_package_is_a_config_error():
    with pytest.raises(VLMConfigError, match="sam3"):
        make_planner(
            PlannerConfig(backend="decoupled", model="gpt-5.2", base_url="http://127.0.0.1:9/v1", grounder="sam3")
        )


def test_parse_location_styles():
    size = (640, 480)
    assert parse_location('{"bbox_2d": [100, 200, 300, 400], "label": "cup"}', size, "box")[0] == (
        64.0,
        96.0,
        192.0,
        192.0,
    )
    assert parse_location('```json\n[{"box_2d": [200, 100, 400, 300]}]\n```', size, "box")[0] == (
        64.0,
        96.0,
        192.0,
        192.0,
    )
    point, _ = parse_location(
        "<think>left side</think><point>[[160, 120]]</point>", size, "point", model_image_size=(320, 240)
    )
    assert point == (320.0, 240.0)
    point, warnings = parse_location("[10, 20, 30, 40]", size, "point")
    assert point == (20.0, 30.0) and "centre" in warnings[0]
    with pytest.raises(ParseError, match="no box"):
        parse_location("It is on the left.", size, "box")
    with pytest.raises(ParseError, match="no box"):
        parse_location('{"point": [1, 2]}', size, "box")  # a point where a box was asked
    with pytest.raises(ParseError, match="expected a box"):
        parse_location("[1, 2]", size, "box")


def test_grounder_on_another_backend(scene, monkeypatch):
    """GPT-style language plan over the OpenAI API, boxes and points from Gemini through its SDK."""
    pytest.importorskip("google.genai")
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    with FakeVLMServer() as planner_srv, FakeVLMServer() as gemini_srv:
        cfg = PlannerConfig(
            backend="decoupled",
            model="gpt-5.2",
            base_url=planner_srv.base_url,
            grounder="vlm",
            grounder_backend="gemini",
            grounder_model="gemini-2.5-flash",
            grounder_base_url=gemini_srv.root_url,
            max_image_side=640,
        )
        with make_planner(cfg) as planner:
            plan = planner.plan(scene, INSTRUCTION)
        assert all(":generateContent" in r["_path"] for r in gemini_srv.requests) and len(gemini_srv.requests) == 2
    assert plan.actions[0].bbox == pytest.approx(find_color(scene, DEMO_SCENE["red block"]), abs=2.5)
    assert plan.actions[1].point == pytest.approx(plate_centre(scene), abs=2.5)


class _Sam3Double:
    """A test double of the `sam3` package's image API (build_sam3_image_model, Sam3Processor.set_image /
    set_text_prompt -> masks, boxes, scores), used because SAM 3 needs its weights and a GPU, neither of
    which exists here. It segments the demo scene by colour; what is tested is our adapter around it."""

    def __init__(self, torch):
        self.torch = torch
        self.images_set = 0

    def build_sam3_image_model(self):
        return object()

    def processor(self, model):
        double = self

        class Processor:
            def set_image(self, image):
                double.images_set += 1
                return {"image": np.asarray(image)}

            def set_text_prompt(self, state, prompt):
                image = state["image"]
                color = next((c for name, c in DEMO_SCENE.items() if name in prompt), None)
                if color is None:
                    empty = double.torch.zeros((0,))
                    return {
                        "masks": double.torch.zeros((0, 1) + image.shape[:2]),
                        "boxes": double.torch.zeros((0, 4)),
                        "scores": empty,
                    }
                mask = np.abs(image.astype(int) - color).max(axis=2) <= 40
                box = find_color(image, color)
                # a second, weaker detection that must not win
                return {
                    "masks": double.torch.tensor(np.stack([mask, ~mask])[:, None].astype(np.float32)),
                    "boxes": double.torch.tensor([box, (0.0, 0.0, 10.0, 10.0)]),
                    "scores": double.torch.tensor([0.9, 0.2]),
                }

        return Processor()


def test_sam3_grounder_adapter_with_a_package_double(scene, monkeypatch):
    import sys
    import types

    torch = pytest.importorskip("torch")
    double = _Sam3Double(torch)
    builder = types.ModuleType("sam3.model_builder")
    builder.build_sam3_image_model = double.build_sam3_image_model
    processor_mod = types.ModuleType("sam3.model.sam3_image_processor")
    processor_mod.Sam3Processor = double.processor
    for name, module in {
        "sam3": types.ModuleType("sam3"),
        "sam3.model": types.ModuleType("sam3.model"),
        "sam3.model_builder": builder,
        "sam3.model.sam3_image_processor": processor_mod,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with FakeVLMServer() as srv:
        cfg = PlannerConfig(backend="decoupled", model="gpt-5.2", base_url=srv.base_url, grounder="sam3")
        with make_planner(cfg) as planner:
            plan = planner.plan(scene, INSTRUCTION)
            srv.script.append(
                Reply(
                    content='{"actions": [{"type": "grasp", "object": "purple cup"}, '
                    '{"type": "place", "object": "purple cup", "target": "blue plate"}]}'
                )
            )
            with pytest.raises(VLMResponseError, match="SAM 3 found no 'purple cup'"):
                planner.plan(scene, "put the purple cup on the blue plate")
    assert plan.actions[0].bbox == find_color(scene, DEMO_SCENE["red block"])
    assert plan.actions[1].point == pytest.approx(plate_centre(scene), abs=1.0)  # mask centroid
    assert double.images_set == 1  # one image embedding for the image (4 grounding calls, 2 plans)
    assert plan.model == "gpt-5.2 + sam3"
