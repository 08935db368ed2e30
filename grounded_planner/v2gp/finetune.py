"""LoRA fine-tuning of a Qwen3-VL planner on V2GP training JSONL (transformers' Trainer, accelerate, peft).

Each JSONL line is a chat sample as ``v2gp run`` writes it: system (the planner's prompt), user (image +
instruction), assistant (the plan in the qwen3 convention). The chat is rendered with the model's own
processor and chat template exactly as the ``transformers`` planner backend renders a request, and the
loss covers only the assistant's answer. The adapter saved to ``ADAPTER_DIR`` loads with
``PlannerConfig(backend="transformers", model=BASE, adapter_path=ADAPTER_DIR)``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from grounded_planner.errors import InputError
from grounded_planner.v2gp.errors import TrainingDataError, V2GPError, require
from PIL import Image
from grounded_planner.vlm.backends.transformers import chat_turns, load_processor, pick_device

REPORTERS = ("auto", "tensorboard", "wandb", "none")
# LoRA on the language model's attention and MLP projections (the vision tower stays frozen)
DEFAULT_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


@dataclass
class FinetuneConfig:
    """Training settings (GPU in practice; the defaults suit a 4B-8B model on one GPU)."""

    epochs: float = 3.0  # passes over the data (ignored when max_steps > 0)
    max_steps: int = 0  # optimizer steps to run (0 = derived from epochs)
    learning_rate: float = 2e-4  # AdamW learning rate of the LoRA weights (constant after the warm-up)
    lora_rank: int = 16  # LoRA rank r
    lora_alpha: float = 0.0  # LoRA scaling alpha (0 = 2 * rank)
    lora_dropout: float = 0.05  # dropout on the LoRA path
    target_modules: str = DEFAULT_TARGETS  # regex of the modules that get adapters
    batch_size: int = 1  # samples per optimizer step over all processes (the global batch)
    micro_batch_size: int = 1  # samples per forward pass and process; batch_size / (processes * this) = accumulation
    max_image_side: int = 0  # resize images so the longer side is at most this, px (0 = as stored)
    warmup_steps: int = 0  # linear learning-rate warm-up
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory (large models), slower
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps (a distributed launch picks each process's device)
    seed: int = 0  # data order and LoRA init (the same on every process)
    log_every: int = 1  # progress line and logged train loss every this many steps
    eval_fraction: float = 0.0  # share of the samples held out for the eval loss (at least one when > 0)
    eval_every: int = 0  # eval loss every this many steps (0 = once, at the end)
    save_every: int = 0  # checkpoint every this many steps under OUT/checkpoints (0 = only at the end)
    save_total_limit: int = 2  # checkpoints kept (the oldest are deleted)
    resume: bool = False  # continue from the last checkpoint in OUT/checkpoints (optimizer, scheduler, data order)
    report_to: str = "auto"  # auto (TensorBoard; W&B too when installed and configured) | tensorboard | wandb | none
    dataloader_workers: int = 0  # processes rendering samples (image resize + processor) beside each trainer process

    def __post_init__(self) -> None:
        if self.epochs <= 0 and self.max_steps <= 0:
            raise InputError("FinetuneConfig needs epochs > 0 or max_steps > 0")
        if self.max_steps < 0:
            raise InputError(f"FinetuneConfig.max_steps must be >= 0, got {self.max_steps}")
        if not self.learning_rate > 0:
            raise InputError(f"FinetuneConfig.learning_rate must be > 0, got {self.learning_rate}")
        if self.lora_rank < 1:
            raise InputError(f"FinetuneConfig.lora_rank must be >= 1, got {self.lora_rank}")
        if not 0 <= self.lora_dropout < 1:
            raise InputError(f"FinetuneConfig.lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.batch_size < 1 or self.micro_batch_size < 1:
            raise InputError(
                f"FinetuneConfig.batch_size and micro_batch_size must be >= 1, got {self.batch_size}, "
                f"{self.micro_batch_size}"
            )
        if self.max_image_side < 0 or self.warmup_steps < 0 or self.log_every < 1:
            raise InputError("FinetuneConfig.max_image_side and warmup_steps must be >= 0, log_every >= 1")
        if not 0 <= self.eval_fraction < 1:
            raise InputError(f"FinetuneConfig.eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if self.eval_every < 0 or self.save_every < 0 or self.save_total_limit < 1:
            raise InputError("FinetuneConfig.eval_every and save_every must be >= 0, save_total_limit >= 1")
        if self.dataloader_workers < 0:
            raise InputError(f"FinetuneConfig.dataloader_workers must be >= 0, got {self.dataloader_workers}")
        if self.report_to not in REPORTERS:
            raise InputError(f"FinetuneConfig.report_to must be one of {', '.join(REPORTERS)}, got {self.report_to!r}")


def load_training_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read and check V2GP chat samples; image paths are resolved against the JSONL's folder."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TrainingDataError(f"cannot read training data {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TrainingDataError(f"training data {path} is not UTF-8 text (byte offset {exc.start})") from exc
    samples = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrainingDataError(f"{where}: not JSON: {exc}") from exc
        messages = sample.get("messages") if isinstance(sample, dict) else None
        if not isinstance(messages, list) or len(messages) < 2 or messages[-1].get("role") != "assistant":
            raise TrainingDataError(f"{where}: expected 'messages' ending with the assistant's answer")
        images = []
        for m in messages:
            content = m.get("content")
            if not isinstance(content, list):
                raise TrainingDataError(f"{where}: message content must be a list of parts (Qwen3-VL chat format)")
            for part in content:
                if part.get("type") == "image":
                    ref = Path(str(part.get("image", "")))
                    image = ref if ref.is_absolute() else path.parent / ref
                    if not image.exists():
                        raise TrainingDataError(f"{where}: image {image} not found")
                    images.append(image)
        if len(images) != 1:
            raise TrainingDataError(f"{where}: expected exactly one image part, got {len(images)}")
        answer = "".join(p.get("text", "") for p in messages[-1]["content"] if p.get("type") == "text")
        if not answer.strip():
            raise TrainingDataError(f"{where}: the assistant's answer is empty")
        samples.append({"messages": messages, "image": images[0], "answer": answer, "where": where})
    if not samples:
        raise TrainingDataError(f"{path}: no training samples")
    return samples


def _render(processor, sample: dict[str, Any], max_image_side: int):
    """input_ids, labels (prompt masked with -100) and vision inputs of one sample."""

    image = Image.open(sample["image"]).convert("RGB")
    if max_image_side and max(image.size) > max_image_side:
        scale = max_image_side / max(image.size)
        image = image.resize(
            (max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.Resampling.BOX
        )
    # the very chat the transformers backend builds for a request (image part first in the user turn)

    flat = [
        {"role": m["role"], "content": "".join(p.get("text", "") for p in m["content"] if p.get("type") == "text")}
        for m in sample["messages"]
    ]
    chat = chat_turns(flat, with_image=True)
    prompt = processor.apply_chat_template(chat[:-1], tokenize=False, add_generation_prompt=True)
    full = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=False)
    if not full.startswith(prompt):  # a template that rewrites earlier turns: fall back to prompt + answer
        eos = processor.tokenizer.eos_token or ""
        full = prompt + sample["answer"] + eos
    inputs = processor(text=[full], images=[image], return_tensors="pt")
    prompt_len = processor(text=[prompt], images=[image], return_tensors="pt")["input_ids"].shape[1]
    labels = inputs["input_ids"].clone()
    labels[:, :prompt_len] = -100
    if int((labels != -100).sum()) == 0:
        raise TrainingDataError(f"{sample['where']}: nothing to learn after the prompt (answer cut off?)")
    return inputs, labels


def _load_processor(base: Path):
    """The processor exactly as the transformers planner backend loads it (same chat rendering at inference)."""

    return load_processor(str(base))


class Collator:
    """Renders a micro-batch of samples on the fly (no pre-rendered corpus in memory) and pads it.

    Token-aligned tensors (input ids, attention mask, labels, token types) are right-padded; vision tensors
    (Qwen-VL's flat patches and their grid sizes) are concatenated, as the processor does for several images.
    """

    def __init__(self, processor, samples: list[dict[str, Any]], max_image_side: int):
        self.processor, self.samples, self.max_image_side = processor, samples, max_image_side
        self.pad_id = getattr(getattr(processor, "tokenizer", processor), "pad_token_id", None) or 0

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch  # lazy: optional SDK (torch), not in install_requires

        rendered = []
        for row in rows:
            inputs, labels = _render(self.processor, self.samples[int(row["sample"])], self.max_image_side)
            item = dict(inputs)
            item["labels"] = labels
            rendered.append(item)
        length = max(int(item["input_ids"].shape[1]) for item in rendered)
        batch: dict[str, Any] = {}
        for key in rendered[0]:
            values = [item[key] for item in rendered]
            if values[0].dim() == 2 and values[0].shape[0] == 1 and key in TOKEN_KEYS:
                fill = {"labels": -100, "input_ids": self.pad_id}.get(key, 0)
                batch[key] = torch.cat(
                    [torch.nn.functional.pad(v, (0, length - v.shape[1]), value=fill) for v in values]
                )
            else:
                batch[key] = torch.cat(values)
        return batch


TOKEN_KEYS = ("input_ids", "attention_mask", "labels", "mm_token_type_ids", "token_type_ids")


def _reporters(choice: str) -> list[str]:
    """Trainer ``report_to``: TensorBoard when installed; W&B when installed and given a key or offline mode."""
    has_tb = importlib.util.find_spec("tensorboard") is not None or importlib.util.find_spec("tensorboardX") is not None
    has_wandb = importlib.util.find_spec("wandb") is not None
    if choice == "none":
        return []
    if choice == "tensorboard" and not has_tb:
        raise V2GPError("report_to tensorboard needs the tensorboard package (pip install 'grounded_planner[scale]')")
    if choice == "wandb" and not has_wandb:
        raise V2GPError("report_to wandb needs the wandb package (pip install wandb)")
    if choice != "auto":
        return [choice]
    wandb_ready = has_wandb and (
        os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in ("offline", "online")
    )
    return (["tensorboard"] if has_tb else []) + (["wandb"] if wandb_ready else [])


class _Progress:
    """Trainer callback: one progress line per logged step on the main process, the losses kept for the report."""

    def __init__(self, stream: TextIO | None):
        self.stream = stream
        self.t0 = time.monotonic()
        self.losses: list[tuple[int, float]] = []  # (step, train loss)
        self.eval_losses: list[tuple[int, float]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" in logs:
            self.losses.append((state.global_step, float(logs["loss"])))
            if self.stream and state.is_world_process_zero:
                print(
                    f"finetune: step {state.global_step}/{state.max_steps} loss {float(logs['loss']):.4f} "
                    f"({time.monotonic() - self.t0:.1f} s)",
                    file=self.stream,
                    flush=True,
                )
        if "eval_loss" in logs:
            self.eval_losses.append((state.global_step, float(logs["eval_loss"])))
            if self.stream and state.is_world_process_zero:
                print(
                    f"finetune: step {state.global_step} eval loss {float(logs['eval_loss']):.4f}",
                    file=self.stream,
                    flush=True,
                )


def last_checkpoint(folder: Path) -> Path | None:
    """The newest ``checkpoint-N`` folder under ``folder`` (None when there is none)."""
    found = [p for p in folder.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None


def finetune(
    data: str | Path,
    base_model: str | Path,
    out: str | Path,
    config: FinetuneConfig | None = None,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Train a LoRA adapter on ``data`` for ``base_model`` with transformers' Trainer; save it to ``out``.

    Runs as one process, or as several under ``accelerate launch`` / ``torchrun`` (data parallel; FSDP or
    DeepSpeed through an accelerate config): the global batch ``batch_size`` is split over the processes and
    gradient accumulation, so the loss curve does not depend on how many processes share it. Checkpoints go
    to ``out/checkpoints`` (``resume`` continues from the newest), TensorBoard logs to ``out/runs``.

    The report has ``steps``, ``losses`` (train loss per logged step), ``loss_first``/``loss_last`` (mean of the
    first and last up-to-3), ``eval_loss`` (None without an eval split), ``samples``, ``eval_samples``,
    ``processes``, ``resumed_from``, ``seconds``, ``adapter_dir``.
    """
    config = config or FinetuneConfig()
    torch = require("torch", "ml", "fine-tuning")
    peft = require("peft", "ml", "LoRA fine-tuning")
    transformers = require("transformers", "ml", "fine-tuning")
    require("accelerate", "scale", "fine-tuning")  # the Trainer's engine; named here so a missing one says so
    samples = load_training_jsonl(data)
    base = Path(base_model)
    if not base.is_dir():
        raise V2GPError(f"base model {base} is not a folder (give a local Hugging Face checkpoint)")
    out = Path(out)
    checkpoints = out / "checkpoints"
    resume_from = last_checkpoint(checkpoints) if config.resume else None
    if config.resume and resume_from is None:
        raise V2GPError(f"nothing to resume: no checkpoint-N folder in {checkpoints}")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = world * config.micro_batch_size
    if config.batch_size % per_step:
        raise V2GPError(
            f"batch_size {config.batch_size} is not a multiple of processes x micro_batch_size "
            f"({world} x {config.micro_batch_size}); the global batch must split evenly"
        )
    # the eval split: a fixed, seeded choice of samples, the same on every process and every resume
    order = list(range(len(samples)))
    random.Random(config.seed).shuffle(order)
    n_eval = max(1, round(config.eval_fraction * len(samples))) if config.eval_fraction > 0 else 0
    if n_eval and n_eval >= len(samples):
        raise V2GPError(f"eval_fraction {config.eval_fraction} leaves no training sample of {len(samples)}")
    eval_ids, train_ids = sorted(order[:n_eval]), sorted(order[n_eval:])

    if config.device.startswith("cuda:") and config.device != "cuda:0":
        raise V2GPError(
            f"device {config.device}: pick the GPU with CUDA_VISIBLE_DEVICES={config.device[5:]} and "
            "--device cuda (the trainer uses the first visible GPU of each process)"
        )
    on_cpu = config.device == "cpu" or pick_device(config.device) == "cpu"
    transformers.set_seed(config.seed)
    dtype = torch.bfloat16 if (not on_cpu and torch.cuda.is_available()) else torch.float32
    os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(out / "runs"))
    steps_per_epoch = math.ceil(len(train_ids) / config.batch_size)
    total = config.max_steps or max(1, math.ceil(config.epochs * steps_per_epoch))
    # the training arguments before the model: under DeepSpeed ZeRO-3 they make from_pretrained load it sharded
    args = transformers.TrainingArguments(
        output_dir=str(checkpoints),
        max_steps=total,
        learning_rate=config.learning_rate,
        weight_decay=0.0,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=config.warmup_steps,
        per_device_train_batch_size=config.micro_batch_size,
        per_device_eval_batch_size=config.micro_batch_size,
        gradient_accumulation_steps=config.batch_size // per_step,
        seed=config.seed,
        data_seed=config.seed,
        logging_steps=config.log_every,
        report_to=_reporters(config.report_to),
        disable_tqdm=True,
        save_strategy="steps",
        save_steps=config.save_every or total,
        save_total_limit=config.save_total_limit,
        eval_strategy="steps" if (n_eval and config.eval_every) else "no",
        eval_steps=config.eval_every or None,
        use_cpu=on_cpu,
        bf16=dtype == torch.bfloat16,
        dataloader_num_workers=config.dataloader_workers,
        # rows are sample indices; the collator renders them exactly as the planner's transformers backend
        # renders a request (its chat template, its image resize), the loss masked to the answer
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,
    )
    try:
        processor = _load_processor(base)
        model = transformers.AutoModelForImageTextToText.from_pretrained(base, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise V2GPError(f"cannot load a vision-language model from {base}: {exc}") from exc
    lora = peft.LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha or 2 * config.lora_rank,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
    )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()  # frozen embeddings: checkpointed blocks still need a grad path
    model = peft.get_peft_model(model, lora)
    if not any(p.requires_grad for p in model.parameters()):
        raise V2GPError(f"no module of {base} matches target_modules {config.target_modules!r}")

    train_set = [{"sample": i} for i in train_ids]
    eval_set = [{"sample": i} for i in eval_ids] if n_eval else None
    tracker = type("ProgressCallback", (_Progress, transformers.TrainerCallback), {})(progress)
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=Collator(processor, samples, config.max_image_side),
        processing_class=getattr(processor, "tokenizer", processor),
        callbacks=[tracker],
    )
    trainer.remove_callback(transformers.PrinterCallback)  # stdout is the report's; progress goes to `progress`
    t0 = time.monotonic()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    eval_loss = None
    if n_eval:
        eval_loss = float(trainer.evaluate()["eval_loss"])
    losses = [loss for _, loss in tracker.losses]
    if losses and not all(math.isfinite(v) for v in losses):
        raise V2GPError(f"training loss became {losses[-1]}; lower the learning rate")
    report: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        trainer.model.save_pretrained(out)  # the adapter the transformers planner backend loads
        k = max(1, min(3, len(losses)))
        report = {
            "adapter_dir": str(out),
            "base_model": str(base),
            "samples": len(train_ids),
            "eval_samples": n_eval,
            "steps": int(trainer.state.global_step),
            "processes": world,
            "losses": losses,
            "loss_steps": [step for step, _ in tracker.losses],
            "loss_first": sum(losses[:k]) / k if losses else None,
            "loss_last": sum(losses[-k:]) / k if losses else None,
            "eval_loss": eval_loss,
            "resumed_from": str(resume_from) if resume_from else None,
            "checkpoints": str(checkpoints),
            "tensorboard": os.environ["TENSORBOARD_LOGGING_DIR"] if "tensorboard" in args.report_to else None,
            "seconds": round(time.monotonic() - t0, 2),
            "device": str(args.device),
            "config": asdict(config),
        }
        (out / "v2gp_finetune.json").write_text(json.dumps(report, indent=2))
    _leave_process_group()
    return report


def _leave_process_group() -> None:
    """In a distributed launch, every process waits here for rank 0's save, then leaves the process group. A rank
    that returned at once and exited with its gloo group still up aborted ("terminate called without an active
    exception", SIGABRT: the launch failed after a finished training, seen in CI); PyTorch asks for
    ``destroy_process_group()`` before exit."""
    import torch.distributed as dist  # lazy: optional ML stack (the ml extra), as the rest of fine-tuning

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
