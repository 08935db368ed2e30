"""Decoupled mode (the paper's baseline): a planner writes the plan in language, a grounder localizes each step.

Grounders: ``vlm`` (any backend asked for one box or point), ``embodied-r1`` (an OpenAI-compatible
Embodied-R1 server answering ``<point>[[x, y]]</point>``), ``sam3`` (the ``sam3`` package on a GPU).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

import numpy as np

from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError
from grounded_planner.vlm import prompts
from grounded_planner.vlm.backends.base import VLMBackend
from grounded_planner.vlm.config import PlannerConfig, prompt_family_for
from grounded_planner.vlm.errors import VLMConfigError, VLMResponseError
from grounded_planner.vlm.image import EncodedImage, check_image, image_sha256
from grounded_planner.vlm.parse import ParseError, parse_location
from grounded_planner.vlm.planner import Planner, _check_instruction, make_backend, request_deadline
from PIL import Image

log = logging.getLogger(__name__)


class Grounder(ABC):
    """Localizes one described thing in an image."""

    name = "grounder"

    @abstractmethod
    def locate(
        self, image_rgb: np.ndarray, encoded: EncodedImage, name: str, kind: str, carried: str = ""
    ) -> tuple[tuple[float, ...], list[str]]:
        """Box (x1, y1, x2, y2) of object ``name`` (``kind="box"``) or a point on target ``name`` where ``carried``
        can be put (``kind="point"``), in pixels of ``image_rgb``; with warnings. Raises VLMResponseError."""

    def close(self) -> None:  # noqa: B027 - optional: most grounders hold nothing to release
        pass


def _box_around(point: tuple[float, float], side_px: float, size: tuple[int, int]) -> tuple[float, float, float, float]:
    x, y = point
    w, h = size
    half = side_px / 2.0
    return (max(0.0, x - half), max(0.0, y - half), min(float(w), x + half), min(float(h), y + half))


class VLMGrounder(Grounder):
    """Asks a VLM backend (through a Planner, so the response cache applies) for one box or point."""

    name = "vlm"

    def __init__(self, planner: Planner, family: str):
        self.planner = planner
        self.family = family

    def locate(self, image_rgb, encoded, name, kind, carried=""):
        description = (
            f"the {name}"
            if kind == "box"
            else f"a free spot on the {name} where the {carried or 'object'} should be put"
        )
        prompt = prompts.grounding_prompt(self.family, kind, description, *encoded.size)
        answer = self.planner.complete([{"role": "user", "content": prompt}], encoded)
        seen = self.planner.backend.seen_size(encoded.size)
        try:
            return parse_location(answer, encoded.original_size, kind, self.family, model_image_size=seen)
        except ParseError as exc:
            raise VLMResponseError(f"grounding {description!r}: {exc.reason}", answer) from exc

    def close(self) -> None:
        self.planner.close()


class EmbodiedR1Grounder(Grounder):
    """Embodied-R1 points (pixels of the image sent); a grasp's box is a square of ``point_box_px`` around
    the point, recorded as a warning because the box size is ours, not the model's."""

    name = "embodied-r1"

    def __init__(self, planner: Planner, point_box_px: float):
        self.planner = planner
        self.point_box_px = point_box_px

    def locate(self, image_rgb, encoded, name, kind, carried=""):
        description = name
        answer = self.planner.complete([{"role": "user", "content": prompts.embodied_r1_prompt(kind, name)}], encoded)
        seen = self.planner.backend.seen_size(encoded.size)
        try:
            point, warnings = parse_location(answer, encoded.original_size, "point", "pixel", model_image_size=seen)
        except ParseError as exc:
            raise VLMResponseError(f"grounding {description!r}: {exc.reason}", answer) from exc
        if kind == "point":
            return point, warnings
        warnings.append(f"{description}: Embodied-R1 gives a point; used a {self.point_box_px:g} px box around it")
        return _box_around(point, self.point_box_px, encoded.original_size), warnings

    def close(self) -> None:
        self.planner.close()


class Sam3Grounder(Grounder):
    """SAM 3 text-prompted segmentation: the best-scoring instance's box, or its mask centroid for a point."""

    name = "sam3"

    def __init__(self):
        try:  # sam3 first: without it there is no reason to pay for importing torch
            # lazy: optional SDK (sam3), not in install_requires
            from sam3.model.sam3_image_processor import Sam3Processor
            from sam3.model_builder import build_sam3_image_model  # lazy: optional SDK (sam3), not in install_requires
            import torch  # lazy: optional SDK (torch), not in install_requires
        except ImportError as exc:
            raise VLMConfigError(
                f"the sam3 grounder needs the sam3 package and torch ({exc}); "
                "use --grounder vlm or embodied-r1 otherwise"
            ) from exc
        if not torch.cuda.is_available():
            raise VLMConfigError(
                "the sam3 grounder needs a CUDA GPU; use --grounder vlm or embodied-r1 on this machine"
            )
        self._processor = Sam3Processor(build_sam3_image_model())
        self._cache: tuple[str, object] | None = None

    def locate(self, image_rgb, encoded, name, kind, carried=""):
        description = name
        key = image_sha256(image_rgb)
        if self._cache is None or self._cache[0] != key:  # one image embedding per plan, not per step
            self._cache = (key, self._processor.set_image(Image.fromarray(image_rgb)))
        output = self._processor.set_text_prompt(state=self._cache[1], prompt=description)
        scores = np.asarray(output["scores"].detach().float().cpu()).reshape(-1)
        if scores.size == 0:
            raise VLMResponseError(f"SAM 3 found no {description!r} in the image")
        best = int(scores.argmax())
        box = tuple(float(v) for v in np.asarray(output["boxes"][best].detach().float().cpu()).reshape(-1)[:4])
        h, w = image_rgb.shape[:2]
        box = (max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3]))
        if kind == "box":
            return box, []
        mask = np.asarray(output["masks"][best].detach().cpu()).reshape(h, w) > 0.5
        ys, xs = np.nonzero(mask)
        if len(xs) == 0:
            return ((box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0), []
        return (float(xs.mean()), float(ys.mean())), []


class DecoupledPlanner(Planner):
    """Plan in language with ``config.language_backend``/``model``, then ground each step with a Grounder.

    grasp/open/close get the box of their object; place gets a point on its target.
    """

    def __init__(self, config: PlannerConfig, backend: VLMBackend, grounder: Grounder):
        super().__init__(config, backend)
        self.grounder = grounder

    def plan(self, image_rgb: np.ndarray, instruction: str) -> GroundedPlan:
        with request_deadline(self.config.timeout_s):  # the language step and every grounding share timeout_s
            return self._plan_decoupled(image_rgb, instruction)

    def _plan_decoupled(self, image_rgb: np.ndarray, instruction: str) -> GroundedPlan:
        image_rgb = check_image(image_rgb)
        instruction = _check_instruction(instruction)
        encoded = self.encode(image_rgb)
        messages = [
            {"role": "system", "content": prompts.language_plan_system_prompt()},
            {"role": "user", "content": prompts.planning_user_prompt(instruction)},
        ]
        steps = self.complete_plan(messages, encoded, instruction, "pixel", validate=False)
        warnings = list(steps.warnings)
        actions: list[GroundedAction] = []
        for i, step in enumerate(steps.actions):
            if step.type == "place":
                if not step.target:
                    raise VLMResponseError(f"step {i} (place) names no target to ground", steps.raw_response)
                point, notes = self.grounder.locate(image_rgb, encoded, step.target, "point", carried=step.object)
                actions.append(GroundedAction("place", step.object, step.target, point=tuple(point)))
            else:
                if not step.object:
                    raise VLMResponseError(f"step {i} ({step.type}) names no object to ground", steps.raw_response)
                box, notes = self.grounder.locate(image_rgb, encoded, step.object, "box")
                actions.append(GroundedAction(step.type, step.object, step.target, bbox=tuple(box)))
            warnings += [f"step {i}: {n}" for n in notes]
        plan = GroundedPlan(
            instruction=instruction,
            image_size=steps.image_size,
            actions=actions,
            reason=steps.reason,
            warnings=warnings,
            model=f"{self.model_name} + {self.grounder.name}",
            raw_response=steps.raw_response,
        )
        try:
            plan.validate()
        except PlanError as exc:
            raise VLMResponseError(f"grounded plan is invalid: {exc}", steps.raw_response) from exc
        if self.recorder is not None:
            self.recorder.record(instruction, image_sha256(image_rgb), plan)
        return plan

    def close(self) -> None:
        super().close()
        self.grounder.close()


def make_decoupled_planner(config: PlannerConfig) -> DecoupledPlanner:
    """Language planner from ``language_backend``/``model``/``base_url``; grounder from ``grounder*`` fields."""
    backend = make_backend(config)
    grounder_model = config.grounder_model or config.model
    grounder_url = config.grounder_base_url or config.base_url
    if config.grounder == "vlm":
        family = prompt_family_for(grounder_model) if config.grounder_family == "auto" else config.grounder_family
        sub = Planner(
            config,
            make_backend(config, backend=config.grounder_backend or None, model=grounder_model, base_url=grounder_url),
        )
        grounder: Grounder = VLMGrounder(sub, family)
    elif config.grounder == "embodied-r1":
        sub = Planner(
            config,
            make_backend(config, backend="openai", model=config.grounder_model or "Embodied-R1", base_url=grounder_url),
        )
        grounder = EmbodiedR1Grounder(sub, config.point_box_px)
    else:
        grounder = Sam3Grounder()
    return DecoupledPlanner(config, backend, grounder)
