"""The grounded planner: image + instruction -> prompt -> VLM -> parse -> validate (-> repair) -> GroundedPlan."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.plan import GroundedPlan, PlanError
from grounded_planner.vlm import prompts
from grounded_planner.vlm.backends.base import VLMBackend, VLMRequest
from grounded_planner.vlm.backends.gemini import GeminiBackend
from grounded_planner.vlm.backends.pool import ServerPool
from grounded_planner.vlm.backends.transformers import TransformersBackend
from grounded_planner.vlm.cache import ResponseCache, cache_key
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import VLMConfigError, VLMResponseError, VLMTimeoutError
from grounded_planner.vlm.gate import model_call
from grounded_planner.vlm.image import EncodedImage, check_image, encode_image, image_sha256
from grounded_planner.vlm.parse import ParseDeadlineError, ParseError, parse_plan
from grounded_planner.install_hints import install_hint

log = logging.getLogger(__name__)

# The deadline (time.monotonic()) of the request this thread is serving. timeout_s bounds a whole request: its
# model calls, their retries, the repair re-prompts and the parsing share one budget; a planner called inside
# another's request (the decoupled mode's grounder) keeps the outer request's deadline.
_DEADLINE: ContextVar[float | None] = ContextVar("grounded_planner_request_deadline", default=None)


@contextmanager
def request_deadline(timeout_s: float):
    """Run a request within ``timeout_s`` seconds from now, or within the enclosing request's deadline."""
    outer = _DEADLINE.get()
    if outer is not None:
        yield outer
        return
    token = _DEADLINE.set(time.monotonic() + timeout_s)
    try:
        yield _DEADLINE.get()
    finally:
        _DEADLINE.reset(token)


@dataclass
class PlannerStats:
    """Counters a caller can log or assert on (requests actually sent, cache hits, repair re-prompts)."""

    requests: int = 0
    cache_hits: int = 0
    repairs: int = 0
    last_latency_s: float = 0.0


def _check_instruction(instruction: Any) -> str:
    if not isinstance(instruction, str) or not instruction.strip():
        raise InputError(f"instruction must be a non-empty string, got {instruction!r}")
    return instruction.strip()


class PlanRecorder:
    """Appends every returned plan to a JSONL file keyed by instruction and image hash (for ``replay``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()

    def record(
        self,
        instruction: str,
        image_hash: str,
        plan: GroundedPlan | None = None,
        *,
        prompt: str | None = None,
        response: str | None = None,
    ) -> None:
        entry: dict[str, Any] = {"instruction": instruction, "image_sha256": image_hash}
        if plan is not None:
            entry["plan"] = plan.to_dict()
        if prompt is not None:
            entry["prompt"] = prompt
            entry["response"] = response
        line = json.dumps(entry, ensure_ascii=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")


class Planner:
    """Grounded planning with one VLM backend.

    ``plan`` sends the image (resized to ``max_image_side``) with the prompt of the configured family, parses
    the answer in that family's convention, validates it with the plan model and, when that fails, re-prompts
    up to ``repair_attempts`` times quoting the error. Coordinates come back in pixels of the caller's image.
    """

    def __init__(self, config: PlannerConfig, backend: VLMBackend | None):
        self.config = config
        self.backend = backend
        self.cache = ResponseCache(config.cache_dir) if config.cache_dir else None
        self.recorder = PlanRecorder(config.record_file) if config.record_file else None
        self.stats = PlannerStats()

    @property
    def model_name(self) -> str:
        return self.config.model or (self.backend.model if self.backend is not None else "")

    # -- public API ----------------------------------------------------------------------------------
    def plan(self, image_rgb: np.ndarray, instruction: str, done: Sequence[str] = ()) -> GroundedPlan:
        """A validated grounded plan for ``instruction`` on ``image_rgb`` (H, W, 3) uint8.

        ``done`` (closed loop, replanning the rest): the steps the robot already carried out, told to the model.
        An empty plan with a reason is a valid result. Raises VLMResponseError when the answers stay
        invalid after the repair re-prompts, VLMUnavailableError when the model cannot be reached,
        VLMTimeoutError when the whole request (every try) takes longer than ``timeout_s``.
        """
        with request_deadline(self.config.timeout_s):
            return self._plan(image_rgb, instruction, done)

    def _plan(self, image_rgb: np.ndarray, instruction: str, done: Sequence[str]) -> GroundedPlan:
        image_rgb = check_image(image_rgb)
        instruction = _check_instruction(instruction)
        encoded = self.encode(image_rgb)
        family = self.config.family
        seen = self.backend.seen_size(encoded.size) if self.backend is not None else encoded.size
        messages = [
            {"role": "system", "content": prompts.planning_system_prompt(family, *seen)},
            {"role": "user", "content": prompts.planning_user_prompt(instruction, done)},
        ]
        plan = self.complete_plan(messages, encoded, instruction, self.config.parse_convention)
        if self.recorder is not None:
            self.recorder.record(instruction, image_sha256(image_rgb), plan)
        return plan

    def ask(self, image_rgb: np.ndarray, prompt: str, system: str = "") -> str:
        """One raw request with the image and ``prompt`` (no parsing); cached like plan requests."""
        image_rgb = check_image(image_rgb)
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(f"prompt must be a non-empty string, got {prompt!r}")
        with request_deadline(self.config.timeout_s):
            encoded = self.encode(image_rgb)
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": prompt}
            ]
            answer = self.complete(messages, encoded)
        if self.recorder is not None:
            self.recorder.record("", image_sha256(image_rgb), prompt=prompt, response=answer)
        return answer

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- building blocks (used by the decoupled planner and the benchmark) ---------------------------
    def encode(self, image_rgb: np.ndarray) -> EncodedImage:
        return encode_image(image_rgb, self.config.max_image_side, self.config.image_format, self.config.jpeg_quality)

    def complete_plan(
        self,
        messages: list[dict[str, str]],
        encoded: EncodedImage,
        instruction: str,
        convention: str,
        validate: bool = True,
    ) -> GroundedPlan:
        """Request, parse, and re-prompt with the error until the answer is a valid plan, all within the request's
        deadline (:func:`request_deadline`)."""
        with request_deadline(self.config.timeout_s) as deadline:
            return self._complete_plan(messages, encoded, instruction, convention, validate, deadline)

    def _complete_plan(self, messages, encoded, instruction, convention, validate, deadline) -> GroundedPlan:
        messages = list(messages)
        reason, raw, first_reason = "", "", ""
        attempts = self.config.repair_attempts + 1
        for attempt in range(attempts):
            if attempt and time.monotonic() >= deadline:
                raise VLMTimeoutError(
                    f"no valid plan within timeout_s={self.config.timeout_s:g} s: {attempt} answer(s) "
                    f"were not valid plans (last: {reason})"
                )
            raw = self.complete(messages, encoded, json_mode=self.config.json_mode)
            seen = self.backend.seen_size(encoded.size) if self.backend is not None else encoded.size
            try:
                plan = parse_plan(
                    raw,
                    encoded.original_size,
                    convention,
                    instruction,
                    model_image_size=seen,
                    validate=validate,
                    model=self.model_name,
                    deadline=deadline,
                )
            except ParseDeadlineError as exc:
                raise VLMTimeoutError(
                    f"answer {attempt + 1} was not parsed within the request's timeout_s="
                    f"{self.config.timeout_s:g} s ({len(raw)} characters)"
                ) from exc
            except ParseError as exc:
                reason = exc.reason
                first_reason = first_reason or reason
                log.info("answer %d/%d is not a valid plan: %s", attempt + 1, attempts, reason)
                if attempt + 1 < attempts:
                    self.stats.repairs += 1
                    messages += [
                        {"role": "assistant", "content": raw},
                        {"role": "user", "content": prompts.repair_prompt(reason)},
                    ]
                continue
            if attempt:
                plan.warnings.append(f"valid after {attempt} repair re-prompt(s); first error: {first_reason}")
            return plan
        raise VLMResponseError(reason, raw, attempts)

    def complete(self, messages: list[dict[str, str]], encoded: EncodedImage | None, json_mode: bool = False) -> str:
        """One backend request through the response cache (``json_mode``: plan requests of a json_mode config),
        within the request's deadline (:func:`request_deadline`)."""
        if self.backend is None:
            raise VLMConfigError(f"the {self.config.backend} planner has no model backend for raw requests")
        with request_deadline(self.config.timeout_s) as deadline:
            request = VLMRequest(
                messages=messages,
                image=encoded,
                max_tokens=self.config.max_tokens,
                temperature=self.config.temperature,
                json_mode=json_mode,
                deadline=deadline,
            )
            return self._complete(request, messages, encoded, json_mode)

    def _complete(self, request: VLMRequest, messages, encoded, json_mode) -> str:
        key = None
        if self.cache is not None:
            key = cache_key(
                backend=self.backend.name,
                model=self.backend.model,
                server=getattr(self.backend, "base_url", ""),
                messages=messages,
                image=encoded.sha256 if encoded else None,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                adapter=self.config.adapter_path,
                json_mode=json_mode,
            )
            cached = self.cache.get(key)
            if cached is not None:
                self.stats.cache_hits += 1
                return cached
        model_call()  # a bounded number of requests in flight (the planner node's gate); VLMBusyError beyond it
        start = time.monotonic()
        answer = self.backend.generate(request)
        self.stats.last_latency_s = time.monotonic() - start
        self.stats.requests += 1
        if self.cache is not None and key is not None:
            self.cache.put(key, answer, {"backend": self.backend.name, "model": self.backend.model})
        return answer


class ReplayPlanner(Planner):
    """Plans recorded in a JSONL file (by ``record_file`` or by hand), looked up by instruction and image hash.

    A line is ``{"instruction": ..., "image_sha256": ..., "plan": {canonical plan}}`` for ``plan`` or
    ``{"image_sha256": ..., "prompt": ..., "response": ...}`` for ``ask``. ``"image_sha256": "*"`` matches
    any image (demos with live cameras).
    """

    def __init__(self, config: PlannerConfig):
        super().__init__(config, backend=None)
        self.plans: dict[tuple[str, str], dict] = {}
        self.answers: dict[tuple[str, str], str] = {}
        path = Path(config.replay_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise VLMConfigError(f"cannot read replay file {path}: {exc.strerror}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                image_hash = str(entry.get("image_sha256") or "*")
                if "plan" in entry:
                    GroundedPlan.from_dict(entry["plan"])  # fail at load time, not mid-demo
                    self.plans[(str(entry.get("instruction", "")).strip(), image_hash)] = entry["plan"]
                elif "prompt" in entry:
                    self.answers[(str(entry["prompt"]), image_hash)] = str(entry.get("response", ""))
                else:
                    raise InputError("a record needs 'plan' or 'prompt'/'response'")
            except (ValueError, AttributeError, PlanError) as exc:
                raise VLMConfigError(f"{path}:{number}: not a replay record: {exc}") from exc

    @property
    def model_name(self) -> str:
        return self.config.model or "replay"

    def _lookup(self, table: dict, key: str, image_rgb: np.ndarray, what: str):
        image_hash = image_sha256(image_rgb)
        for candidate in ((key, image_hash), (key, "*")):
            if candidate in table:
                return table[candidate]
        raise VLMResponseError(
            f"{self.config.replay_file} has no recorded {what} for {key!r} on image "
            f"sha256 {image_hash[:12]}... ({len(table)} records)"
        )

    def plan(self, image_rgb: np.ndarray, instruction: str, done: Sequence[str] = ()) -> GroundedPlan:
        image_rgb = check_image(image_rgb)
        instruction = _check_instruction(instruction)
        plan = GroundedPlan.from_dict(self._lookup(self.plans, instruction, image_rgb, "plan"))
        height, width = image_rgb.shape[:2]
        if tuple(plan.image_size) != (width, height):
            raise VLMResponseError(
                f"recorded plan for {instruction!r} is for a {plan.image_size[0]}x{plan.image_size[1]} "
                f"image, got {width}x{height}"
            )
        return plan

    def ask(self, image_rgb: np.ndarray, prompt: str, system: str = "") -> str:
        image_rgb = check_image(image_rgb)
        return self._lookup(self.answers, prompt, image_rgb, "answer")


def make_backend(
    config: PlannerConfig, *, backend: str | None = None, model: str | None = None, base_url: str | None = None
) -> VLMBackend:
    """The model backend a config names (``backend`` overrides it; optional SDKs are imported only here)."""
    name = backend or (config.language_backend if config.backend == "decoupled" else config.backend)
    model = config.model if model is None else model
    base_url = config.base_url if base_url is None else base_url
    try:
        if name == "openai":
            # lazy: loads httpx, an optional SDK (not in install_requires)
            from grounded_planner.vlm.backends.openai import OpenAIBackend

            if not model:
                raise VLMConfigError("the openai backend needs a model name (--model or GP_VLM_MODEL)")
            urls = config.server_urls if base_url.rstrip("/") == config.base_url.rstrip("/") else [base_url]
            if len(urls) > 1:  # several servers of one model: the pool retries across them, each server once
                return ServerPool(
                    [
                        OpenAIBackend(
                            model,
                            url,
                            api_key=config.api_key(name),
                            timeout_s=config.timeout_s,
                            max_retries=0,
                            extra_headers=config.extra_headers,
                        )
                        for url in urls
                    ],
                    max_retries=config.max_retries,
                    retry_backoff_s=config.retry_backoff_s,
                )
            return OpenAIBackend(
                model,
                base_url,
                api_key=config.api_key(name),
                timeout_s=config.timeout_s,
                max_retries=config.max_retries,
                retry_backoff_s=config.retry_backoff_s,
                extra_headers=config.extra_headers,
            )
        if name == "gemini":
            return GeminiBackend(
                model or "gemini-2.5-flash",
                api_key=config.api_key(name),
                base_url=base_url,
                timeout_s=config.timeout_s,
                max_retries=config.max_retries,
                retry_backoff_s=config.retry_backoff_s,
            )
        if name == "transformers":
            if not model:
                raise VLMConfigError("the transformers backend needs a model folder or hub id (--model)")
            return TransformersBackend(model, adapter_path=config.adapter_path, device=config.device)
    except ImportError as exc:
        raise VLMConfigError(
            f"the {name} backend needs an optional package: {exc} "
            f"({install_hint('httpx google-genai torch transformers', 'vlm,ml', 'python3-httpx' if name == 'openai' else '')})"
        ) from exc
    raise VLMConfigError(f"no model backend named {name!r}")
