"""The transformers backend, for real, on a tiny Qwen3-VL built here from a config (test/helpers/tiny_qwen3vl.py):
taught to answer one plan, with and without a LoRA adapter that teaches it another; its output goes
through the same parser as every backend's."""

from __future__ import annotations

import shutil
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")
if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
    pytest.skip("this transformers has no Qwen3-VL (needs >= 4.57)", allow_module_level=True)

from grounded_planner.vlm import prompts  # noqa: E402
from grounded_planner.vlm.config import PlannerConfig  # noqa: E402
from grounded_planner.vlm.errors import VLMConfigError, VLMResponseError, VLMTimeoutError  # noqa: E402
from grounded_planner.vlm.fake_server import make_demo_scene  # noqa: E402
from grounded_planner.vlm.factory import make_planner  # noqa: E402
from helpers.tiny_qwen3vl import build_tiny_qwen3vl, teach, teach_lora  # noqa: E402

INSTRUCTION = "put the red block on the blue plate"
PLAN_A = (
    '[{"type": "grasp", "object": "red block", "bbox_2d": [150, 450, 250, 600]}, '
    '{"type": "place", "object": "red block", "target": "blue plate", "point_2d": [700, 550]}]'
)
PLAN_B = '{"actions": [], "reason": "nothing to do"}'


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(untrained folder, taught folder, adapter folder); built once for the module (~15 s on 1 core)."""
    root = tmp_path_factory.mktemp("tiny_qwen3vl")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small only loses from thread contention
    try:
        base = build_tiny_qwen3vl(root / "base")
        taught = root / "taught"
        shutil.copytree(base, taught)
        image = make_demo_scene(320, 240)
        messages = [
            {"role": "system", "content": prompts.planning_system_prompt("qwen3", 320, 240)},
            {"role": "user", "content": prompts.planning_user_prompt(INSTRUCTION)},
        ]
        assert teach(taught, image, messages, PLAN_A) < 0.05
        assert teach_lora(taught, root / "adapter", image, messages, PLAN_B) < 0.05
        yield base, taught, root / "adapter"
    finally:
        torch.set_num_threads(threads)


def config(model, **kw):
    kw.setdefault("max_tokens", 96)
    return PlannerConfig(backend="transformers", model=str(model), prompt_family="qwen3", device="cpu", **kw)


def test_taught_model_plans_through_the_parser(models):
    _, taught, _ = models
    with make_planner(config(taught)) as planner:
        plan = planner.plan(make_demo_scene(320, 240), INSTRUCTION)
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    # bbox_2d [150, 450, 250, 600] of 320x240 -> pixels
    assert plan.actions[0].bbox == pytest.approx((48.0, 108.0, 80.0, 144.0))
    assert plan.actions[1].point == pytest.approx((224.0, 132.0))
    assert plan.raw_response.strip() == PLAN_A


def test_lora_adapter_changes_the_answer(models):
    _, taught, adapter = models
    with make_planner(config(taught, adapter_path=str(adapter))) as planner:
        plan = planner.plan(make_demo_scene(320, 240), INSTRUCTION)
    assert plan.is_empty and plan.reason == "nothing to do"


def test_untrained_model_output_is_a_typed_error_after_repair(models):
    base, _, _ = models
    with make_planner(config(base, max_tokens=24, repair_attempts=1)) as planner:
        with pytest.raises(VLMResponseError) as info:
            planner.plan(make_demo_scene(320, 240), INSTRUCTION)
        assert planner.stats.requests == 2 and planner.stats.repairs == 1
        # the processor resized the 320x240 image for the model; pixel answers (and pixel prompts) use this size
        seen = planner.backend.seen_size((320, 240))
        from PIL import Image

        grid = planner.backend.processor.image_processor(images=[Image.new("RGB", (320, 240))], return_tensors="pt")[
            "image_grid_thw"
        ][0]
        assert seen == (int(grid[2]) * 16, int(grid[1]) * 16) and seen != (320, 240)
    assert info.value.attempts == 2 and isinstance(info.value.raw_response, str)


def test_timeout_s_stops_generation(models):
    base, _, _ = models
    # an untrained model rambles on to max_tokens: generation itself stops at the request's deadline
    with make_planner(config(base, max_tokens=1200, timeout_s=0.3, repair_attempts=3)) as planner:
        start = time.monotonic()
        with pytest.raises(VLMTimeoutError, match="timeout_s"):
            planner.plan(make_demo_scene(320, 240), INSTRUCTION)
        assert time.monotonic() - start < 10.0  # not four answers of 1200 tokens; slack for a loaded machine


def test_missing_model_folder_is_a_config_error(tmp_path):
    with pytest.raises(VLMConfigError, match="cannot load"):
        make_planner(config(tmp_path / "nothing-here"))
    with pytest.raises(VLMConfigError, match="adapter"):
        make_planner(
            config(build_tiny_qwen3vl(tmp_path / "m", vocab_size=300), adapter_path=str(tmp_path / "no-adapter"))
        )
