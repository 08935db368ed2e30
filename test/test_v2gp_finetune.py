"""Fine-tuning round trip on the CPU: V2GP training JSONL -> `grounded-planner finetune` (LoRA) -> the adapter
loaded by the planner's transformers backend -> a plan through the planner's parser.

The model is a tiny Qwen3-VL (real architecture and processor classes) built here from a config
(test/helpers/tiny_qwen3vl.py): no download. Its hidden size of 32 behind an RMSNorm bounds the logits of
an un-adapted lm_head to about +-1, so the round trip also puts a LoRA on lm_head: then the loss really
drops (5.6 -> < 0.5) and greedy decoding reproduces the taught answer with a wide margin.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from grounded_planner.v2gp.config import V2GPConfig  # noqa: E402
from grounded_planner.v2gp.dataset import open_dataset  # noqa: E402
from grounded_planner.v2gp.errors import TrainingDataError  # noqa: E402
from grounded_planner.v2gp.finetune import DEFAULT_TARGETS, load_training_jsonl  # noqa: E402
from grounded_planner.v2gp.pipeline import run_pipeline  # noqa: E402
from grounded_planner.v2gp.plans import sample_plan  # noqa: E402
from grounded_planner.v2gp.synthetic import SyntheticConfig, write_synthetic_dataset  # noqa: E402

TARGETS = DEFAULT_TARGETS + "|.*lm_head"


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~20 s on an idle 2-core machine; minutes when other jobs share the CPUs
def test_finetune_round_trip_adapter_makes_the_planner_answer_the_training_plan(tmp_path):
    from helpers.tiny_qwen3vl import build_tiny_qwen3vl
    from PIL import Image

    from grounded_planner.vlm.config import PlannerConfig
    from grounded_planner.vlm.errors import VLMResponseError
    from grounded_planner.vlm.planner import make_planner

    base = build_tiny_qwen3vl(tmp_path / "tiny-qwen3-vl")
    dataset = write_synthetic_dataset(tmp_path / "ds", SyntheticConfig(episodes=1))
    out = tmp_path / "v2gp"
    run_pipeline(dataset, out, V2GPConfig(gripper="observation.state[gripper]", identifier="oracle",
                                          grounder="oracle", max_image_side=64))
    train = out / "train.jsonl"
    sample = json.loads(train.read_text().splitlines()[0])
    taught = sample_plan(sample)

    adapter = tmp_path / "adapter"
    exe = Path(sys.executable).with_name("grounded-planner")
    run = subprocess.run([str(exe), "finetune", "--data", str(train), "--base-model", str(base), "--out", str(adapter),
                          "--max-steps", "160", "--lr", "1e-2", "--rank", "8", "--dropout", "0", "--device", "cpu",
                          "--target-modules", TARGETS],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["steps"] == 160 and report["samples"] == 1
    assert report["loss_last"] < report["loss_first"] / 4, (report["loss_first"], report["loss_last"])
    assert (adapter / "adapter_config.json").exists()
    assert "finetune: step 160/160" in run.stderr

    # the episode's first frame at full size: the planner resizes it to 64 px as the training image was,
    # and answers in pixels of the frame, like the training plan
    image = open_dataset(dataset, gripper="observation.state[gripper]").episode(0).frame(0)
    assert Image.open(out / sample["messages"][1]["content"][0]["image"]).size == (64, 48)
    config = PlannerConfig(backend="transformers", model=str(base), adapter_path=str(adapter), prompt_family="qwen3",
                           max_image_side=64, device="cpu", repair_attempts=0, max_tokens=160)
    with make_planner(config) as planner:
        plan = planner.plan(image, taught.instruction)
    assert [(a.type, a.object, a.target) for a in plan.actions] == [(a.type, a.object, a.target) for a in taught.actions]
    for got, want in zip(plan.actions, taught.actions):
        if want.bbox is not None:
            np.testing.assert_allclose(got.bbox, want.bbox, atol=0.5)
        if want.point is not None:
            np.testing.assert_allclose(got.point, want.point, atol=0.5)

    # control: the same base model without the adapter does not give that plan
    with make_planner(config.replace(adapter_path="")) as planner:
        try:
            untaught = planner.plan(image, taught.instruction)
        except VLMResponseError:
            untaught = None
    assert untaught is None or untaught.to_dict()["actions"] != plan.to_dict()["actions"]


def test_bad_training_data_is_named_with_file_and_line(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, '
                    '{"role": "assistant", "content": [{"type": "text", "text": "[]"}]}]}\n')
    with pytest.raises(TrainingDataError, match=r"train.jsonl:1: expected exactly one image part"):
        load_training_jsonl(data)
    data.write_text('{"messages": [{"role": "user", "content": [{"type": "image", "image": "missing.png"}]}, '
                    '{"role": "assistant", "content": [{"type": "text", "text": "[]"}]}]}\n')
    with pytest.raises(TrainingDataError, match="missing.png not found"):
        load_training_jsonl(data)
    data.write_text("not json\n")
    with pytest.raises(TrainingDataError, match="train.jsonl:1: not JSON"):
        load_training_jsonl(data)


def test_finetune_cli_errors_are_one_line(tmp_path):
    exe = Path(sys.executable).with_name("grounded-planner")
    data = tmp_path / "train.jsonl"
    data.write_text("")
    out = subprocess.run([str(exe), "finetune", "--data", str(data), "--base-model", str(tmp_path / "none"),
                          "--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no training samples" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
