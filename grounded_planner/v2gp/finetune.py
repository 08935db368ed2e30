"""LoRA fine-tuning of a Qwen3-VL planner on V2GP training JSONL (transformers + peft).

Each JSONL line is a chat sample as ``v2gp run`` writes it: system (the planner's prompt), user (image +
instruction), assistant (the plan in the qwen3 convention). The chat is rendered with the model's own
processor and chat template exactly as the ``transformers`` planner backend renders a request, and the
loss covers only the assistant's answer. The adapter saved to ``ADAPTER_DIR`` loads with
``PlannerConfig(backend="transformers", model=BASE, adapter_path=ADAPTER_DIR)``.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from grounded_planner.v2gp.errors import TrainingDataError, V2GPError, require

# LoRA on the language model's attention and MLP projections (the vision tower stays frozen)
DEFAULT_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


@dataclass
class FinetuneConfig:
    """Training settings (GPU in practice; the defaults suit a 4B-8B model on one GPU)."""

    epochs: float = 3.0  # passes over the data (ignored when max_steps > 0)
    max_steps: int = 0  # optimizer steps to run (0 = derived from epochs)
    learning_rate: float = 2e-4  # AdamW learning rate of the LoRA weights
    lora_rank: int = 16  # LoRA rank r
    lora_alpha: float = 0.0  # LoRA scaling alpha (0 = 2 * rank)
    lora_dropout: float = 0.05  # dropout on the LoRA path
    target_modules: str = DEFAULT_TARGETS  # regex of the modules that get adapters
    batch_size: int = 1  # samples per step (gradient accumulation; images differ in size)
    max_image_side: int = 0  # resize images so the longer side is at most this, px (0 = as stored)
    warmup_steps: int = 0  # linear learning-rate warm-up
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory (large models), slower
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    seed: int = 0  # data order and LoRA init
    log_every: int = 1  # progress line every this many steps

    def __post_init__(self) -> None:
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ValueError("FinetuneConfig needs epochs > 0 or max_steps > 0")
        if self.max_steps < 0:
            raise ValueError(f"FinetuneConfig.max_steps must be >= 0, got {self.max_steps}")
        if not self.learning_rate > 0:
            raise ValueError(f"FinetuneConfig.learning_rate must be > 0, got {self.learning_rate}")
        if self.lora_rank < 1:
            raise ValueError(f"FinetuneConfig.lora_rank must be >= 1, got {self.lora_rank}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"FinetuneConfig.lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.batch_size < 1:
            raise ValueError(f"FinetuneConfig.batch_size must be >= 1, got {self.batch_size}")
        if self.max_image_side < 0 or self.warmup_steps < 0 or self.log_every < 1:
            raise ValueError("FinetuneConfig.max_image_side and warmup_steps must be >= 0, log_every >= 1")


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
    from PIL import Image

    image = Image.open(sample["image"]).convert("RGB")
    if max_image_side and max(image.size) > max_image_side:
        scale = max_image_side / max(image.size)
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                             Image.Resampling.BOX)
    # the very chat the transformers backend builds for a request (image part first in the user turn)
    from grounded_planner.vlm.backends.transformers import chat_turns

    flat = [{"role": m["role"], "content": "".join(p.get("text", "") for p in m["content"] if p.get("type") == "text")}
            for m in sample["messages"]]
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
    from grounded_planner.vlm.backends.transformers import load_processor

    return load_processor(str(base))


def finetune(data: str | Path, base_model: str | Path, out: str | Path, config: FinetuneConfig | None = None,
             progress: TextIO | None = None) -> dict[str, Any]:
    """Train a LoRA adapter on ``data`` for ``base_model``; save it to ``out``; return a report.

    The report has ``steps``, ``losses`` (per optimizer step), ``loss_first``/``loss_last`` (mean of the first
    and last up-to-3 steps), ``samples``, ``seconds``, ``adapter_dir``.
    """
    config = config or FinetuneConfig()
    torch = require("torch", "ml", "fine-tuning")
    peft = require("peft", "ml", "LoRA fine-tuning")
    transformers = require("transformers", "ml", "fine-tuning")
    samples = load_training_jsonl(data)
    base = Path(base_model)
    if not base.is_dir():
        raise V2GPError(f"base model {base} is not a folder (give a local Hugging Face checkpoint)")

    from grounded_planner.vlm.backends.transformers import pick_device

    device = pick_device(config.device)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        processor = _load_processor(base)
        model = transformers.AutoModelForImageTextToText.from_pretrained(base, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise V2GPError(f"cannot load a vision-language model from {base}: {exc}") from exc
    lora = peft.LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha or 2 * config.lora_rank,
                           lora_dropout=config.lora_dropout, target_modules=config.target_modules)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()  # frozen embeddings: checkpointed blocks still need a grad path
    model = peft.get_peft_model(model, lora)
    if not any(p.requires_grad for p in model.parameters()):
        raise V2GPError(f"no module of {base} matches target_modules {config.target_modules!r}")
    model.to(device)
    examples = [_render(processor, s, config.max_image_side) for s in samples]

    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    total = config.max_steps or max(1, math.ceil(config.epochs * steps_per_epoch))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0)
    model.train()
    order: list[int] = []
    losses: list[float] = []
    t0 = time.monotonic()
    for step in range(total):
        optimizer.zero_grad()
        step_loss = 0.0
        for _ in range(config.batch_size):
            if not order:
                order = list(range(len(examples)))
                random.shuffle(order)
            inputs, labels = examples[order.pop()]
            inputs = inputs.to(device)
            loss = model(**inputs, labels=labels.to(device)).loss / config.batch_size
            loss.backward()
            step_loss += float(loss)
        if not math.isfinite(step_loss):
            raise V2GPError(f"training loss became {step_loss} at step {step + 1}; lower the learning rate")
        optimizer.step()
        scheduler.step()
        losses.append(step_loss)
        if progress and ((step + 1) % config.log_every == 0 or step + 1 == total):
            print(f"finetune: step {step + 1}/{total} loss {step_loss:.4f} ({time.monotonic() - t0:.1f} s)",
                  file=progress, flush=True)
    model.eval()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    k = min(3, len(losses))
    report = {"adapter_dir": str(out), "base_model": str(base), "samples": len(examples), "steps": total,
              "loss_first": sum(losses[:k]) / k, "loss_last": sum(losses[-k:]) / k, "losses": losses,
              "seconds": round(time.monotonic() - t0, 2), "device": device, "config": asdict(config)}
    (out / "v2gp_finetune.json").write_text(json.dumps(report, indent=2))
    return report
