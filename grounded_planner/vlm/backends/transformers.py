"""In-process Qwen3-VL (any size) through Hugging Face transformers, with an optional PEFT LoRA adapter."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from grounded_planner.vlm.backends.base import VLMBackend, VLMRequest
from grounded_planner.vlm.errors import VLMConfigError, VLMError, VLMTimeoutError
from grounded_planner.install_hints import install_hint

log = logging.getLogger(__name__)


class ComposedProcessor:
    """Tokenizer + image processor that expand each ``<|image_pad|>`` to one token per merged patch, as
    Qwen-VL processors do.

    Used when the checkpoint's own processor class cannot be built on this machine (``Qwen3VLProcessor``
    refuses to start without torchvision, which it needs only for video).
    """

    def __init__(self, path: str):
        # lazy: optional SDK (transformers), not in install_requires
        from transformers import AutoImageProcessor, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.image_processor = AutoImageProcessor.from_pretrained(path)
        template = Path(path) / "chat_template.jinja"
        if not getattr(self.tokenizer, "chat_template", None) and template.is_file():
            self.tokenizer.chat_template = template.read_text()
        self.image_token = getattr(self.tokenizer, "image_token", None) or "<|image_pad|>"

    def apply_chat_template(self, chat, tokenize=False, add_generation_prompt=True):
        return self.tokenizer.apply_chat_template(chat, tokenize=tokenize, add_generation_prompt=add_generation_prompt)

    def __call__(self, text, images=None, return_tensors="pt"):
        from transformers import BatchFeature  # lazy: optional SDK (transformers), not in install_requires

        features = {}
        text = list(text)
        if images:
            pixels = self.image_processor(images=images, return_tensors=return_tensors)
            features.update(pixels)
            merge = int(getattr(self.image_processor, "merge_size", 2)) ** 2
            counts = [int(thw.prod()) // merge for thw in pixels["image_grid_thw"]]
            expanded, k = [], 0
            for sample in text:
                pieces = sample.split(self.image_token)
                out = pieces[0]
                for piece in pieces[1:]:
                    out += (
                        "\0" * counts[k] + piece
                    )  # placeholder first, so a pad inside the expansion is not re-expanded
                    k += 1
                expanded.append(out.replace("\0", self.image_token))
            text = expanded
        tokens = self.tokenizer(text, return_tensors=return_tensors)
        features.update(tokens)
        # Qwen3-VL's multimodal RoPE needs to know which tokens are image tokens (1) and which are text (0).
        image_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        features["mm_token_type_ids"] = (tokens["input_ids"] == image_id).long()
        return BatchFeature(features)

    def batch_decode(self, ids, skip_special_tokens=True):
        return self.tokenizer.batch_decode(ids, skip_special_tokens=skip_special_tokens)


def chat_turns(messages: list[dict], with_image: bool = True) -> list[dict]:
    """Backend messages (role, content str) -> a processor chat, the image part in the first user turn."""
    chat, image_done = [], not with_image
    for m in messages:
        if m["role"] == "user" and not image_done:
            chat.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": m["content"]}]})
            image_done = True
        else:
            chat.append({"role": m["role"], "content": [{"type": "text", "text": m["content"]}]})
    return chat


def load_processor(path: str):
    """The checkpoint's processor, or a ComposedProcessor when its class cannot be built here."""
    from transformers import AutoProcessor  # lazy: optional SDK (transformers), not in install_requires

    try:
        return AutoProcessor.from_pretrained(path)
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        log.info("AutoProcessor for %s unavailable (%s); composing tokenizer + image processor", path, exc)
        return ComposedProcessor(path)


def pick_device(device: str) -> str:
    """``auto`` -> cuda if available, else mps, else cpu; anything else is passed through."""
    import torch  # lazy: optional SDK (torch), not in install_requires

    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


class TransformersBackend(VLMBackend):
    """Loads ``AutoProcessor`` + ``AutoModelForImageTextToText`` from a folder or hub id (hub downloads are
    the user's business; nothing here needs the network when given a folder) and generates greedily when
    the temperature is 0.

    Parameters
    ----------
    model : str
        Folder or hub id of a Qwen3-VL (or other image-text-to-text) checkpoint with its processor.
    adapter_path : str
        PEFT LoRA adapter folder applied on top ("" = none).
    device : str
        ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` | ``mps``. bfloat16 on CUDA, float32 elsewhere.
    """

    name = "transformers"

    def __init__(self, model: str, adapter_path: str = "", device: str = "auto"):
        super().__init__(model)
        import torch  # lazy: optional SDK (torch), not in install_requires

        # lazy: optional SDK (transformers), not in install_requires
        from transformers import AutoModelForImageTextToText

        self._torch = torch
        self.device = pick_device(device)
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        try:
            self.processor = load_processor(model)
            net = AutoModelForImageTextToText.from_pretrained(model, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise VLMConfigError(f"cannot load a vision-language model from {model!r}: {exc}") from exc
        if adapter_path:
            try:
                from peft import PeftModel  # lazy: optional SDK (peft), not in install_requires
            except ImportError as exc:
                raise VLMConfigError(f"a LoRA adapter needs the peft package ({install_hint('peft', 'ml')})") from exc
            try:
                net = PeftModel.from_pretrained(net, adapter_path)
            except (OSError, ValueError) as exc:
                raise VLMConfigError(f"cannot load the LoRA adapter {adapter_path!r}: {exc}") from exc
        self.adapter_path = adapter_path
        self.net = net.to(self.device).eval()
        self._lock = threading.Lock()  # one generate at a time: the ROS node may call from several threads
        self._seen: dict[tuple[int, int], tuple[int, int]] = {}

    def close(self) -> None:
        self.net = None

    def chat(self, request: VLMRequest) -> list[dict]:
        return chat_turns(request.messages, with_image=request.image is not None)

    def seen_size(self, sent_size: tuple[int, int]) -> tuple[int, int]:
        """Size of the image as the processor resizes it (Qwen2.5-VL pixel answers refer to it).

        Known before the request for Qwen-VL image processors (their smart resize), so pixel prompts can
        name it; otherwise learnt from the last request's patch grid.
        """
        sent_size = tuple(sent_size)
        if sent_size in self._seen:
            return self._seen[sent_size]
        ip = getattr(self.processor, "image_processor", None)
        size = getattr(ip, "size", None)
        try:
            try:
                # lazy: optional SDK (transformers), not in install_requires
                from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
            except ImportError:  # that module needs torchvision; the PIL one (transformers >= 5) does not
                # lazy: optional SDK (transformers), not in install_requires
                from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

            factor = int(ip.patch_size) * int(ip.merge_size)
            min_px = getattr(ip, "min_pixels", None) or size["shortest_edge"]
            max_px = getattr(ip, "max_pixels", None) or size["longest_edge"]
            height, width = smart_resize(
                sent_size[1], sent_size[0], factor=factor, min_pixels=min_px, max_pixels=max_px
            )
        except (ImportError, AttributeError, KeyError, TypeError, ValueError):
            return sent_size  # not a Qwen-VL processor: the size it sees is learnt after the first request
        self._seen[sent_size] = (int(width), int(height))
        return self._seen[sent_size]

    def generate(self, request: VLMRequest) -> str:
        if self.net is None:
            raise VLMError("the transformers backend was closed")
        torch = self._torch
        prompt = self.processor.apply_chat_template(self.chat(request), tokenize=False, add_generation_prompt=True)
        images = [request.image.to_pil()] if request.image is not None else None
        inputs = self.processor(text=[prompt], images=images, return_tensors="pt").to(self.device)
        if request.image is not None and "image_grid_thw" in inputs:
            _, grid_h, grid_w = (int(v) for v in inputs["image_grid_thw"][0])
            patch = int(getattr(self.processor.image_processor, "patch_size", 14))
            self._seen[request.image.size] = (grid_w * patch, grid_h * patch)
        sampling = (
            {"do_sample": True, "temperature": request.temperature} if request.temperature > 0 else {"do_sample": False}
        )
        with self._lock, torch.inference_mode():
            if request.deadline is not None:  # generation stops at the request's deadline (transformers' max_time)
                sampling["max_time"] = request.time_left(float("inf"), f"transformers ({self.model})")
            out = self.net.generate(**inputs, max_new_tokens=request.max_tokens, **sampling)
        if request.deadline is not None and time.monotonic() >= request.deadline:
            raise VLMTimeoutError(f"transformers ({self.model}): generation stopped at the request's timeout_s")
        new_tokens = out[:, inputs["input_ids"].shape[1] :]
        return self.processor.batch_decode(new_tokens, skip_special_tokens=True)[0]
