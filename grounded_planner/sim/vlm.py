"""The planner of a simulated run: a VLM (a real server, or the project's stand-in that finds the scenario's objects
by their rendered colour) asked for whole plans and for single objects again, with the scenario's
``grasp_offset`` perturbation applied to the first grasp box it gives."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Iterator, Sequence

import numpy as np

from grounded_planner.plan import GroundedAction, GroundedPlan
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.decoupled import VLMGrounder
from grounded_planner.vlm.errors import VLMError
from grounded_planner.vlm.fake_server import FakeVLMServer
from grounded_planner.vlm.planner import Planner
from grounded_planner.vlm.factory import make_planner

STAND_IN_MODEL = "stand-in-colour-vlm"


def stand_in_scene(cell, rgb: np.ndarray | None = None) -> dict[str, tuple[int, int, int]]:
    """Each scenario object's name -> its colour as the camera renders it (over its pixels), so the stand-in
    server finds objects in rendered frames as a colour-matching model would."""
    rgb = cell.render_rgb() if rgb is None else rgb
    masks = cell.object_masks()
    scene: dict[str, tuple[int, int, int]] = {}
    for obj in cell.scenario.objects:
        mask = masks.get(obj.id)
        if obj.kind == "cabinet" or mask is None or not mask.any():
            continue
        if obj.id.endswith("_lookalike"):
            continue  # the stand-in model knows only the names of the task; a look-alike may fool it
        # the median chromaticity and brightness of its pixels: a lit top and a shaded side count alike
        pixels = rgb[mask].astype(float)
        total = pixels.sum(axis=1)
        chroma = np.median(pixels / np.maximum(total, 1.0)[:, None], axis=0)
        scene[obj.name] = tuple(int(round(v)) for v in chroma / chroma.sum() * np.median(total))
    return scene


class SimVLM:
    """``plan(rgb, instruction, done)`` and ``locate(rgb, action)`` for the closed loop, over one Planner."""

    def __init__(self, planner: Planner, cell):
        self.planner = planner
        self.cell = cell
        self.grounder = VLMGrounder(planner, planner.config.family)
        self._offset_done = False
        self.calls = {"plan": 0, "locate": 0}

    @property
    def model(self) -> str:
        return self.planner.model_name

    def plan(self, rgb: np.ndarray, instruction: str, done: Sequence[str] = ()) -> GroundedPlan:
        self.calls["plan"] += 1
        plan = self.planner.plan(rgb, instruction, done=tuple(done)) if done else self.planner.plan(rgb, instruction)
        return self._offset_first_grasp(plan)

    def locate(self, rgb: np.ndarray, action: GroundedAction) -> GroundedAction | None:
        """The action re-grounded in ``rgb``: a new box for grasp/open/close, a new point for place."""
        self.calls["locate"] += 1
        kind = "point" if action.type == "place" else "box"
        name = action.target if action.type == "place" else action.object
        try:
            found, _warnings = self.grounder.locate(
                rgb, self.planner.encode(rgb), name or action.object, kind, carried=action.object
            )
        except VLMError:
            return None
        if kind == "point":
            return dataclasses.replace(action, point=tuple(float(v) for v in found))
        return dataclasses.replace(action, bbox=tuple(float(v) for v in found))

    def _offset_first_grasp(self, plan: GroundedPlan) -> GroundedPlan:
        """``grasp_offset``: the first grasp box for the perturbed object comes back shifted on the table."""
        if self._offset_done:
            return plan
        for i, action in enumerate(plan.actions):
            if action.type != "grasp" or action.bbox is None:
                continue
            spec = next(
                (
                    p
                    for p in self.cell.scenario.perturbations
                    if p.type == "grasp_offset"
                    and p.active
                    and self.cell.scenario.object(p.object).name in (action.object or "")
                ),
                None,
            )
            if spec is None:
                continue
            self._offset_done = True
            shift = self._pixels_for(action.bbox, spec.amount_m, spec.angle_rad)
            x1, y1, x2, y2 = action.bbox
            w, h = plan.image_size
            dx = float(np.clip(shift[0], -x1, w - x2))
            dy = float(np.clip(shift[1], -y1, h - y2))
            actions = list(plan.actions)
            actions[i] = dataclasses.replace(action, bbox=(x1 + dx, y1 + dy, x2 + dx, y2 + dy))
            return dataclasses.replace(plan, actions=actions)
        return plan

    def _pixels_for(self, bbox, amount_m: float, angle_rad: float) -> np.ndarray:
        """The image shift of a box whose object moved ``amount_m`` on the table in direction ``angle_rad``."""
        cell = self.cell
        u, v = (bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2
        # the table point under the box centre: intersect its camera ray with z = object height / 2 (~0.02 m)
        K, T = cell.camera_model.K, cell.cam2base
        ray = T[:3, :3] @ np.array([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], 1.0])
        origin = T[:3, 3]
        s = (0.02 - origin[2]) / ray[2]
        point = origin + s * ray
        moved = point + amount_m * np.array([math.cos(angle_rad), math.sin(angle_rad), 0.0])
        return (cell.project(moved[None]) - cell.project(point[None]))[0]

    def close(self) -> None:
        self.planner.close()


@contextlib.contextmanager
def sim_vlm(cell, config: PlannerConfig | None = None) -> Iterator[SimVLM]:
    """The run's planner: ``config`` (a real model server), or with None the stand-in server started on
    127.0.0.1 for the scenario's objects (names and rendered colours), stopped on exit."""
    if config is not None:
        planner = make_planner(config)
        if not isinstance(planner, Planner) or type(planner).__name__ == "DecoupledPlanner":
            raise VLMError(
                f"sim runs need a grounded planner backend (openai, gemini, transformers), got {config.backend!r}"
            )
        vlm = SimVLM(planner, cell)
        try:
            yield vlm
        finally:
            vlm.close()
        return
    with FakeVLMServer(stand_in_scene(cell), one_object=True) as server:
        planner = make_planner(
            PlannerConfig(
                backend="openai",
                base_url=server.base_url,
                model=STAND_IN_MODEL,
                api_key_env="",
                image_format="png",
                max_retries=0,
                timeout_s=30.0,
            )
        )
        vlm = SimVLM(planner, cell)
        try:
            yield vlm
        finally:
            vlm.close()
