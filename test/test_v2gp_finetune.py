"""Fine-tuning on the CPU: V2GP training JSONL -> `grounded-planner finetune` (transformers Trainer, LoRA) -> the adapter
loaded by the planner's transformers backend -> a plan through the planner's parser; two gloo processes under
torchrun against one process with the same global batch; resume from a checkpoint; TensorBoard logs.

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
pytest.importorskip("accelerate")

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
    from grounded_planner.vlm.factory import make_planner

    base = build_tiny_qwen3vl(tmp_path / "tiny-qwen3-vl")
    dataset = write_synthetic_dataset(tmp_path / "ds", SyntheticConfig(episodes=1))
    out = tmp_path / "v2gp"
    run_pipeline(
        dataset,
        out,
        V2GPConfig(gripper="observation.state[gripper]", identifier="oracle", grounder="oracle", max_image_side=64),
    )
    train = out / "train.jsonl"
    sample = json.loads(train.read_text().splitlines()[0])
    taught = sample_plan(sample)

    adapter = tmp_path / "adapter"
    exe = Path(sys.executable).with_name("grounded-planner")
    run = subprocess.run(
        [
            str(exe),
            "finetune",
            "--data",
            str(train),
            "--base-model",
            str(base),
            "--out",
            str(adapter),
            "--max-steps",
            "160",
            "--lr",
            "1e-2",
            "--rank",
            "8",
            "--dropout",
            "0",
            "--device",
            "cpu",
            "--target-modules",
            TARGETS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
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
    config = PlannerConfig(
        backend="transformers",
        model=str(base),
        adapter_path=str(adapter),
        prompt_family="qwen3",
        max_image_side=64,
        device="cpu",
        repair_attempts=0,
        max_tokens=160,
    )
    with make_planner(config) as planner:
        plan = planner.plan(image, taught.instruction)
    assert [(a.type, a.object, a.target) for a in plan.actions] == [
        (a.type, a.object, a.target) for a in taught.actions
    ]
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
    data.write_text(
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, '
        '{"role": "assistant", "content": [{"type": "text", "text": "[]"}]}]}\n'
    )
    with pytest.raises(TrainingDataError, match=r"train.jsonl:1: expected exactly one image part"):
        load_training_jsonl(data)
    data.write_text(
        '{"messages": [{"role": "user", "content": [{"type": "image", "image": "missing.png"}]}, '
        '{"role": "assistant", "content": [{"type": "text", "text": "[]"}]}]}\n'
    )
    with pytest.raises(TrainingDataError, match="missing.png not found"):
        load_training_jsonl(data)
    data.write_text("not json\n")
    with pytest.raises(TrainingDataError, match="train.jsonl:1: not JSON"):
        load_training_jsonl(data)


def test_finetune_cli_errors_are_one_line(tmp_path):
    exe = Path(sys.executable).with_name("grounded-planner")
    data = tmp_path / "train.jsonl"
    data.write_text("")
    out = subprocess.run(
        [
            str(exe),
            "finetune",
            "--data",
            str(data),
            "--base-model",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "a"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "no training samples" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def finetune_cli(*args, launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    import os

    exe = Path(sys.executable).with_name("grounded-planner")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [*(launcher or []), str(exe), "finetune", *map(str, args)], capture_output=True, text=True, timeout=600, env=env
    )


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """The tiny Qwen3-VL and the training JSONL of 5 synthetic episodes (5 samples: 4 train, 1 eval)."""
    from helpers.tiny_qwen3vl import build_tiny_qwen3vl

    root = tmp_path_factory.mktemp("ft")
    base = build_tiny_qwen3vl(root / "tiny-qwen3-vl")
    dataset = write_synthetic_dataset(root / "ds", SyntheticConfig(episodes=5))
    run_pipeline(
        dataset,
        root / "v2gp",
        V2GPConfig(gripper="observation.state[gripper]", identifier="oracle", grounder="oracle", max_image_side=64),
    )
    return base, root / "v2gp" / "train.jsonl"


COMMON = [
    "--batch-size",
    "2",
    "--lr",
    "1e-2",
    "--rank",
    "8",
    "--dropout",
    "0",
    "--device",
    "cpu",
    "--eval-fraction",
    "0.2",
    "--seed",
    "3",
]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # three launches of ~1 min each on a busy 2-core machine
def test_two_gloo_processes_give_the_single_process_loss_curve_and_resume_continues(tiny_setup, tmp_path):
    import socket

    base, train = tiny_setup
    one = finetune_cli("--data", train, "--base-model", base, "--out", tmp_path / "one", "--max-steps", 4, *COMMON)
    assert one.returncode == 0, one.stderr[-3000:]
    single = json.loads(one.stdout)
    assert (single["steps"], single["processes"], single["samples"], single["eval_samples"]) == (4, 1, 4, 1)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
    ]
    two = finetune_cli(
        "--data", train, "--base-model", base, "--out", tmp_path / "two", "--max-steps", 4, *COMMON, launcher=torchrun
    )
    assert two.returncode == 0, two.stderr[-3000:]
    dist = json.loads(two.stdout)  # one report: only the main process prints
    assert dist["processes"] == 2 and dist["steps"] == 4
    np.testing.assert_allclose(dist["losses"], single["losses"], rtol=1e-5)
    np.testing.assert_allclose(dist["eval_loss"], single["eval_loss"], rtol=1e-5)
    assert single["losses"][-1] < single["losses"][0]  # it learns

    # stop after 2 steps (a checkpoint is written), then resume to 4: steps 3-4 as in the uninterrupted run
    first = finetune_cli(
        "--data", train, "--base-model", base, "--out", tmp_path / "resumed", "--max-steps", 2, *COMMON
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert (tmp_path / "resumed" / "checkpoints" / "checkpoint-2").is_dir()
    again = finetune_cli(
        "--data", train, "--base-model", base, "--out", tmp_path / "resumed", "--max-steps", 4, "--resume", *COMMON
    )
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = json.loads(again.stdout)
    assert resumed["resumed_from"].endswith("checkpoint-2") and resumed["loss_steps"] == [3, 4]
    np.testing.assert_allclose(resumed["losses"], single["losses"][2:], rtol=1e-5)
    assert "finetune: step 3/4" in again.stderr and "finetune: step 1/4" not in again.stderr

    # the adapter loads where the planner loads it; the train and eval losses are in TensorBoard's event files
    assert (tmp_path / "one" / "adapter_config.json").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "one" / "runs"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    np.testing.assert_allclose([e.value for e in events.Scalars("train/loss")], single["losses"], rtol=1e-4)
    assert events.Scalars("eval/loss")[-1].value == pytest.approx(single["eval_loss"], rel=1e-4)


def test_resume_without_a_checkpoint_is_a_one_line_error(tiny_setup, tmp_path):
    base, train = tiny_setup
    run = finetune_cli("--data", train, "--base-model", base, "--out", tmp_path / "a", "--max-steps", 1, "--resume")
    assert run.returncode == 2 and "nothing to resume: no checkpoint-N folder" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
