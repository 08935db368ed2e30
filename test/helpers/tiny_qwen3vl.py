"""A tiny Qwen3-VL (same architecture and processor classes as the real one) built on the spot from a
config, with a small byte-level BPE tokenizer trained here: no download, a few MB, CPU-fast.

Shared test helper: the transformers backend tests use it, and so can V2GP fine-tuning tests
(``build_tiny_qwen3vl`` for a saved model folder, ``teach`` to make it answer a given text, ``teach_lora``
for a PEFT LoRA adapter). Needs torch, transformers (with Qwen3-VL, >= 4.57), tokenizers and, for
``teach_lora``, peft.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Qwen-style chat template: an image part becomes <|vision_start|><|image_pad|><|vision_end|>, which the
# processor expands to one pad token per merged patch.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Text the tokenizer is trained on: plan JSON in every convention, call lines, prompt words.
CORPUS = [
    '[{"type": "grasp", "object": "red block", "bbox_2d": [150, 450, 250, 600]}, '
    '{"type": "place", "object": "red block", "target": "blue plate", "point_2d": [700, 550]}]',
    '{"actions": [{"type": "open", "object": "drawer", "box_2d": [80, 400, 140, 600]}], "reason": ""}',
    '{"actions": [], "reason": "nothing to do"}',
    "1. grasp(spoon, [120, 200, 180, 260])\n2. place(plate, [300, 220])",
    "You are the task planner of a robot arm. Instruction: put the red block on the blue plate. "
    "Coordinates are relative integers 0 1000 bbox_2d point_2d box_2d pixels image answer JSON only",
    "0123456789 , . : ; [ ] { } ( ) \" ' - _ \n",
]


def _corpus() -> list[str]:
    """CORPUS plus this project's prompts, so prompts compress to few tokens (short, fast sequences)."""
    from grounded_planner.vlm import prompts

    texts = list(CORPUS)
    for family in ("qwen3", "gemini", "pixel"):
        texts.append(prompts.planning_system_prompt(family, 320, 240))
        texts.append(prompts.grounding_prompt(family, "box", "the red block", 320, 240))
    texts += [prompts.language_plan_system_prompt(), prompts.repair_prompt("no plan found")]
    return texts


def build_tiny_qwen3vl(
    out_dir: str | Path, seed: int = 0, vocab_size: int = 1024, hidden_size: int = 32, image_side_px: int = 64
) -> Path:
    """Write a tiny Qwen3-VL model, tokenizer and processor to ``out_dir``; return the folder.

    The folder loads with ``AutoProcessor.from_pretrained`` and ``Qwen3VLForConditionalGeneration``
    (or ``AutoModelForImageTextToText``) exactly like a real checkpoint. Images are resized by the
    processor to at most ``image_side_px`` squared pixels (16 px patches, 2x2 merge: a handful of tokens).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus() * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        extra_special_tokens={},
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    patch = 16
    pixels = {"shortest_edge": (2 * patch) ** 2, "longest_edge": image_side_px**2}
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch,
        merge_size=2,
        temporal_patch_size=2,
        size=pixels,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    video_processor = Qwen3VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2, size=pixels)
    # Qwen3VLProcessor itself cannot be built without torchvision (its video half), which has no CPU wheel
    # for this torch here: save its parts and its name, as processor.save_pretrained would.
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)
    video_processor.save_pretrained(out)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen3VLProcessor"}))

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = 16
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=head_dim,
            max_position_embeddings=2048,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
            pad_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
        ),
        vision_config=dict(
            depth=1,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_heads=2,
            patch_size=patch,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=hidden_size,
            num_position_embeddings=64,
            deepstack_visual_indexes=[0],
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(out)
    (out / "TINY_MODEL.json").write_text(json.dumps({"built_by": __name__, "seed": seed}))
    return out


def _example(processor, image_rgb: np.ndarray, messages: Sequence[dict], answer: str):
    """Inputs and labels of one chat example whose assistant turn is ``answer`` (loss only on the answer)."""
    import torch
    from PIL import Image

    from grounded_planner.vlm.backends.transformers import chat_turns

    chat = chat_turns(list(messages))
    prompt = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    full = prompt + answer + "<|im_end|>"
    image = Image.fromarray(image_rgb)
    inputs = processor(text=[full], images=[image], return_tensors="pt")
    prompt_len = processor(text=[prompt], images=[image], return_tensors="pt")["input_ids"].shape[1]
    labels = inputs["input_ids"].clone()
    labels[:, :prompt_len] = -100
    return inputs, labels, torch


def _fit(model, processor, image_rgb, messages, answer, steps: int, lr: float) -> float:
    inputs, labels, torch = _example(processor, image_rgb, messages, answer)
    # One thread: a model this small gains nothing from more, and loses a lot when other processes
    # share the cores (measured 47 ms vs 1.1 s per step on a busy 2-core machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit_loop(model, inputs, labels, steps, lr, torch)
    finally:
        torch.set_num_threads(threads)


def _fit_loop(model, inputs, labels, steps, lr, torch) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    model.train()
    loss_value = float("nan")
    for _ in range(steps):
        opt.zero_grad()
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        opt.step()
        loss_value = float(loss.detach())
        if loss_value < 0.01:
            break
    model.eval()
    return loss_value


def teach(
    model_dir: str | Path,
    image_rgb: np.ndarray,
    messages: Sequence[dict],
    answer: str,
    steps: int = 300,
    lr: float = 3e-3,
) -> float:
    """Fine-tune the whole tiny model in ``model_dir`` (in place) until it answers ``messages`` with ``answer``.

    ``messages`` are the backend's (role, content) messages; the image goes with the first user turn.
    Returns the final training loss.
    """
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from grounded_planner.vlm.backends.transformers import load_processor

    torch.manual_seed(0)
    processor = load_processor(model_dir)
    model = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    loss = _fit(model, processor, image_rgb, messages, answer, steps, lr)
    model.save_pretrained(model_dir)
    return loss


def teach_lora(
    model_dir: str | Path,
    adapter_dir: str | Path,
    image_rgb: np.ndarray,
    messages: Sequence[dict],
    answer: str,
    steps: int = 300,
    lr: float = 1e-2,
    rank: int = 8,
) -> float:
    """Train a PEFT LoRA adapter (language-model projections and lm_head) that makes the tiny
    model answer ``answer``; save it to ``adapter_dir``. The base model is left unchanged."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    from grounded_planner.vlm.backends.transformers import load_processor

    torch.manual_seed(0)
    processor = load_processor(model_dir)
    base = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    lora = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        # lm_head too: a tiny model's logits are too flat to peak without it
        target_modules=r"(.*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj))|lm_head",
    )
    model = get_peft_model(base, lora)
    loss = _fit(model, processor, image_rgb, messages, answer, steps, lr)
    model.save_pretrained(adapter_dir, save_embedding_layers=False)  # the base lm_head is unchanged: keep it out
    return loss
