"""Planner configuration: which backend and model, how to reach it, how hard to try, how to read answers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from grounded_planner.vlm.conventions import PARSE_CONVENTIONS
from grounded_planner.vlm.errors import VLMConfigError

BACKENDS = ("openai", "gemini", "transformers", "replay", "decoupled")  # the planner backends, named once
# the backends that serve a model (a decoupled mode's language planner and its vlm grounder)
MODEL_BACKENDS = ("openai", "gemini", "transformers")
PROMPT_FAMILIES = ("auto", "qwen3", "gemini", "pixel")
GROUNDERS = ("vlm", "embodied-r1", "sam3")
# Environment variables read by PlannerConfig.from_env (explicit arguments win).
ENV_VARS = {
    "backend": "GP_VLM_BACKEND",
    "model": "GP_VLM_MODEL",
    "base_url": "GP_VLM_BASE_URL",
    "api_key_env": "GP_VLM_API_KEY_ENV",
    "timeout_s": "GP_VLM_TIMEOUT_S",
    "cache_dir": "GP_VLM_CACHE_DIR",
}
DEFAULT_API_KEY_ENV = {"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}


def known_family(model: str) -> str | None:
    """The coordinate convention a model family is trained on, when its name says it; else None."""
    name = model.lower().replace("_", "-")
    if "qwen3" in name:
        return "qwen3"  # Qwen3-VL: relative 0-1000 bbox_2d / point_2d
    if "gemini" in name or "gemma" in name or "robotics-er" in name:
        return "gemini"
    if "qwen2.5" in name or "qwen2-5" in name or "qwen2-vl" in name:
        return "pixel"  # Qwen2.5-VL writes bbox_2d in absolute pixels of the image it saw
    return None


def prompt_family_for(model: str) -> str:
    """Coordinate convention to ask a model for: its family's, else absolute pixels (GPT, Claude, InternVL...)."""
    return known_family(model) or "pixel"


@dataclass
class PlannerConfig:
    """Everything needed to build a planner (``make_planner``); checked on construction."""

    backend: str = "openai"  # openai | gemini | transformers | replay | decoupled
    model: str = ""  # model name on the server, Gemini model id, or local path/hub id for transformers
    base_url: str = (
        ""  # OpenAI-compatible server root incl. /v1 (vLLM http://localhost:8000/v1); Gemini endpoint override
    )
    # more OpenAI-compatible servers of the same model: requests go to the least loaded of base_url and these, and
    # around a dead one (YAML may also give base_url as a list)
    base_urls: list[str] = field(default_factory=list)
    api_key_env: str = ""  # name of the environment variable holding the API key ("" = OPENAI_API_KEY / GEMINI_API_KEY)
    timeout_s: float = 60.0  # wall-clock limit of one plan request: every try, retry, repair re-prompt and parse
    max_retries: int = 2  # extra tries on 429/5xx/connection errors, with exponential backoff
    retry_backoff_s: float = 0.5  # first backoff; doubles per retry, Retry-After honoured up to 4x this cap
    repair_attempts: int = 1  # re-prompts quoting the parse/validation error before giving up
    max_image_side: int = 1280  # longest image side sent to the model, in pixels (0 = send as is)
    image_format: str = "jpeg"  # jpeg (a 1280x720 frame: ~7 ms, ~180 kB) | png (lossless: ~130 ms, ~1.9 MB)
    jpeg_quality: int = 90  # 1-95, used when image_format is jpeg
    prompt_family: str = "auto"  # qwen3 | gemini | pixel | auto (guessed from the model name)
    convention: str = "auto"  # how answers are parsed: auto = the prompt family's convention
    temperature: float = 0.0  # sampling temperature; 0 for repeatable plans
    max_tokens: int = 1024  # longest answer requested
    json_mode: bool = False  # ask the server for JSON only (OpenAI response_format json_object; Gemini JSON mime type)
    cache_dir: str = ""  # on-disk response cache folder ("" = no cache)
    replay_file: str = ""  # JSONL of recorded plans (replay backend) ...
    record_file: str = ""  # ... and where any planner appends the plans it returns ("" = no recording)
    adapter_path: str = ""  # PEFT LoRA adapter folder for the transformers backend ("" = none)
    device: str = "auto"  # transformers backend: auto | cpu | cuda | cuda:N | mps
    # decoupled mode: a language planner (backend below, same model/base_url) writes steps, a grounder localizes each
    language_backend: str = "openai"  # openai | gemini | transformers: the decoupled mode's language planner
    grounder: str = "vlm"  # vlm | embodied-r1 | sam3
    grounder_backend: str = ""  # vlm grounder's backend: openai | gemini | transformers ("" = language_backend)
    grounder_model: str = ""  # grounder's model name ("" = same as model)
    grounder_base_url: str = ""  # grounder's server ("" = same as base_url)
    grounder_family: str = "auto"  # prompt family of the vlm grounder
    point_box_px: float = 24.0  # side of the box made around a grounder's point when a grasp needs a box
    extra_headers: dict[str, str] = field(default_factory=dict)  # additional HTTP headers (OpenAI-compatible servers)

    def __post_init__(self) -> None:
        self.backend = str(self.backend).strip().lower()
        if isinstance(self.base_url, (list, tuple)):  # a list of servers in YAML: the first is base_url
            urls = [str(u) for u in self.base_url]
            self.base_url, self.base_urls = (urls[0] if urls else ""), urls[1:] + list(self.base_urls)
        if isinstance(self.base_urls, str) or not all(isinstance(u, str) and u for u in self.base_urls):
            raise VLMConfigError(f"PlannerConfig.base_urls must be a list of server URLs, got {self.base_urls!r}")
        if self.base_urls and not self.base_url:
            raise VLMConfigError("PlannerConfig.base_urls adds servers to base_url: give base_url too")
        if self.backend not in BACKENDS:
            raise VLMConfigError(f"PlannerConfig.backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.prompt_family not in PROMPT_FAMILIES:
            raise VLMConfigError(
                f"PlannerConfig.prompt_family must be one of {', '.join(PROMPT_FAMILIES)}, got {self.prompt_family!r}"
            )
        if self.grounder_family not in PROMPT_FAMILIES:
            raise VLMConfigError(
                f"PlannerConfig.grounder_family must be one of {', '.join(PROMPT_FAMILIES)}, got {self.grounder_family!r}"
            )
        if self.convention not in PARSE_CONVENTIONS:
            raise VLMConfigError(
                f"PlannerConfig.convention must be one of {', '.join(PARSE_CONVENTIONS)}, got {self.convention!r}"
            )
        if self.language_backend not in MODEL_BACKENDS:
            raise VLMConfigError(
                f"PlannerConfig.language_backend must be openai, gemini or transformers, got {self.language_backend!r}"
            )
        if self.grounder_backend not in ("", *MODEL_BACKENDS):
            raise VLMConfigError(
                f"PlannerConfig.grounder_backend must be '', openai, gemini or transformers, got {self.grounder_backend!r}"
            )
        if self.grounder not in GROUNDERS:
            raise VLMConfigError(f"PlannerConfig.grounder must be one of {', '.join(GROUNDERS)}, got {self.grounder!r}")
        if self.image_format not in ("png", "jpeg"):
            raise VLMConfigError(f"PlannerConfig.image_format must be png or jpeg, got {self.image_format!r}")
        if not (self.timeout_s > 0):
            raise VLMConfigError(f"PlannerConfig.timeout_s must be > 0 seconds, got {self.timeout_s!r}")
        for name in ("max_retries", "repair_attempts", "max_image_side", "max_tokens"):
            if int(getattr(self, name)) < 0:
                raise VLMConfigError(f"PlannerConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.max_image_side and self.max_image_side < 28:
            raise VLMConfigError(
                f"PlannerConfig.max_image_side must be 0 (no resize) or >= 28 px, got {self.max_image_side}"
            )
        if self.retry_backoff_s < 0:
            raise VLMConfigError(f"PlannerConfig.retry_backoff_s must be >= 0 s, got {self.retry_backoff_s}")
        if not (1 <= self.jpeg_quality <= 95):
            raise VLMConfigError(f"PlannerConfig.jpeg_quality must be in 1..95, got {self.jpeg_quality}")
        if self.point_box_px <= 0:
            raise VLMConfigError(f"PlannerConfig.point_box_px must be > 0 px, got {self.point_box_px}")
        if self.backend == "replay" and not self.replay_file:
            raise VLMConfigError(
                "PlannerConfig.replay_file is required for the replay backend (a JSONL of recorded plans)"
            )

    # -- derived ------------------------------------------------------------------------------------
    @property
    def family(self) -> str:
        """The prompt family actually used (``auto`` resolved from the model name)."""
        return prompt_family_for(self.model) if self.prompt_family == "auto" else self.prompt_family

    @property
    def server_urls(self) -> list[str]:
        """Every server of the model, base_url first, without repeats."""
        return list(dict.fromkeys([u.rstrip("/") for u in [self.base_url, *self.base_urls] if u]))

    @property
    def parse_convention(self) -> str:
        """The convention answers are parsed in.

        An explicit ``convention`` wins; then an explicit ``prompt_family``; then the family a known model
        name implies (Qwen2.5-VL's ``bbox_2d`` is pixels, Qwen3-VL's is 0-1000). For other models ``auto``:
        the keys decide (``bbox_2d`` -> 0-1000, ``box_2d`` -> Gemini order) and plain ``bbox``/``point`` are
        the pixels the prompt asked for, so a model that answers in its native format is still read right.
        """
        if self.convention != "auto":
            return self.convention
        if self.prompt_family != "auto":
            return self.prompt_family
        return known_family(self.model) or "auto"

    def api_key(self, backend: str | None = None) -> str:
        """The API key for ``backend`` (default: this config's) from the configured environment variable, else
        the backend's usual one (OPENAI_API_KEY; GEMINI_API_KEY or GOOGLE_API_KEY). "" when unset: local
        servers need none."""
        backend = backend or self.backend
        name = self.api_key_env or DEFAULT_API_KEY_ENV.get(backend, "OPENAI_API_KEY")
        key = os.environ.get(name, "")
        if not key and backend == "gemini" and not self.api_key_env:
            key = os.environ.get("GOOGLE_API_KEY", "")
        return key

    def replace(self, **changes: Any) -> "PlannerConfig":
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> "PlannerConfig":
        """Config from ``GP_VLM_*`` environment variables; keyword arguments that are not None win."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, var in ENV_VARS.items():
            if env.get(var):
                values[name] = float(env[var]) if name == "timeout_s" else env[var]
        known = {f.name for f in fields(cls)}
        for name, value in overrides.items():
            if name not in known:
                raise VLMConfigError(f"PlannerConfig has no field {name!r}")
            if value is not None:
                values[name] = value
        return cls(**values)
