"""The canonical grounded-plan data model: actions in pixels of the original image, validation, JSON I/O."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from grounded_planner.fileio import write_text_atomic
from grounded_planner.plan.errors import PlanError
from grounded_planner.plan.targets import Target, TargetSet

ACTION_TYPES = ("grasp", "place", "open", "close")
# Primitives that are tied to a box around an object (grasp it, open/close it).
BOX_TYPES = ("grasp", "open", "close")


def _finite_floats(values: Any, n: int, what: str, index: int | None) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{what} must be {n} numbers, got {values!r}", index=index, rule=f"{what}_numbers") from exc
    if len(out) != n:
        raise PlanError(f"{what} must have {n} numbers, got {len(out)}: {values!r}", index=index, rule=f"{what}_length")
    if not all(math.isfinite(v) for v in out):
        raise PlanError(f"{what} must be finite, got {values!r}", index=index, rule=f"{what}_finite")
    return out


@dataclass
class GroundedAction:
    """One primitive tied to a place in the image.

    ``bbox`` is (x1, y1, x2, y2) and ``point`` is (x, y), both in pixels of the plan's
    original image, origin top-left, x right, y down. ``target`` names where a place goes;
    ``target_3d`` is the back-projected 3D target (None until the plan is back-projected).
    """

    type: str
    object: str = ""
    target: str = ""
    bbox: tuple[float, float, float, float] | None = None
    point: tuple[float, float] | None = None
    target_3d: Target | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.object:
            out["object"] = self.object
        if self.target:
            out["target"] = self.target
        if self.bbox is not None:
            out["bbox"] = [float(v) for v in self.bbox]
        if self.point is not None:
            out["point"] = [float(v) for v in self.point]
        if self.target_3d is not None:
            t = self.target_3d.to_dict()
            out["target_3d"] = {
                "frame": self.target_3d.frame,
                **{k: v for k, v in t.items() if k not in ("index", "type", "object")},
            }
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], index: int | None = None) -> "GroundedAction":
        if not isinstance(data, dict):
            raise PlanError(
                f"an action must be a JSON object, got {type(data).__name__}", index=index, rule="action_object"
            )
        if "type" not in data:
            raise PlanError(
                f"action has no 'type' (expected one of {', '.join(ACTION_TYPES)})", index=index, rule="type"
            )
        bbox = data.get("bbox")
        point = data.get("point")
        target_3d = data.get("target_3d")
        if target_3d is not None:
            if not isinstance(target_3d, dict):
                raise PlanError(
                    f"target_3d must be a JSON object, got {type(target_3d).__name__}",
                    index=index,
                    rule="target_format",
                )
            target_3d = Target.from_dict(
                {
                    **target_3d,
                    "index": -1 if index is None else index,
                    "type": data["type"],
                    "object": data.get("object") or "",
                }
            )
        return cls(
            type=str(data["type"]),
            object=str(data.get("object") or ""),
            target=str(data.get("target") or ""),
            bbox=None if bbox is None or bbox == [] else _finite_floats(bbox, 4, "bbox", index),  # type: ignore[arg-type]
            point=None if point is None or point == [] else _finite_floats(point, 2, "point", index),  # type: ignore[arg-type]
            target_3d=target_3d,
        )


@dataclass
class GroundedPlan:
    """A grounded plan: ordered primitives for one image and instruction.

    An empty ``actions`` list is a valid plan meaning "nothing to do"; ``reason`` then says why.
    ``image_size`` is (width, height) in pixels of the image the coordinates refer to.
    """

    instruction: str
    image_size: tuple[int, int]
    actions: list[GroundedAction] = field(default_factory=list)
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    model: str = ""
    raw_response: str = ""

    # -- validation -----------------------------------------------------------------------------
    def validate(self) -> "GroundedPlan":
        """Check every rule of the plan model; raise :class:`PlanError` naming the first broken one."""
        validate_plan(self)
        return self

    # -- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "instruction": self.instruction,
            "image_size": [int(self.image_size[0]), int(self.image_size[1])],
            "actions": [a.to_dict() for a in self.actions],
            "reason": self.reason,
            "warnings": list(self.warnings),
            "model": self.model,
            "raw_response": self.raw_response,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, validate: bool = True) -> "GroundedPlan":
        if not isinstance(data, dict):
            raise PlanError(f"a plan must be a JSON object, got {type(data).__name__}", rule="plan_object")
        size = data.get("image_size")
        if not isinstance(size, (list, tuple)) or len(size) != 2:
            raise PlanError(f"'image_size' must be [width, height], got {size!r}", rule="image_size")
        try:
            width, height = int(size[0]), int(size[1])
        except (TypeError, ValueError) as exc:
            raise PlanError(f"'image_size' must be two integers, got {size!r}", rule="image_size") from exc
        actions_raw = data.get("actions", [])
        if not isinstance(actions_raw, list):
            raise PlanError(f"'actions' must be a list, got {type(actions_raw).__name__}", rule="actions_list")
        plan = cls(
            instruction=str(data.get("instruction") or ""),
            image_size=(width, height),
            actions=[GroundedAction.from_dict(a, i) for i, a in enumerate(actions_raw)],
            reason=str(data.get("reason") or ""),
            warnings=[str(w) for w in data.get("warnings") or []],
            model=str(data.get("model") or ""),
            raw_response=str(data.get("raw_response") or ""),
        )
        if validate:
            plan.validate()
        return plan

    @classmethod
    def from_json(cls, text: str, *, validate: bool = True) -> "GroundedPlan":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(f"plan is not valid JSON: {exc}", rule="json") from exc
        return cls.from_dict(data, validate=validate)

    # -- convenience ----------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.actions

    # -- 3D targets -----------------------------------------------------------------------------
    @property
    def is_backprojected(self) -> bool:
        """Every action carries its 3D target (an empty plan counts as back-projected)."""
        return all(a.target_3d is not None for a in self.actions)

    def with_targets(self, targets: TargetSet) -> "GroundedPlan":
        """A copy of this plan whose actions carry ``targets`` (one per action); the set's warnings are appended.

        Raises :class:`PlanError` when a target is missing, doubled, or of another type than its action.
        """
        by_index: dict[int, Target] = {}
        for target in targets.targets:
            if int(target.index) in by_index:
                raise PlanError(f"two targets for action {target.index}", index=int(target.index), rule="target_match")
            by_index[int(target.index)] = target
        extra = sorted(set(by_index) - set(range(len(self.actions))))
        if extra:
            raise PlanError(
                f"targets for actions {extra} that the plan ({len(self.actions)} actions) does not have",
                rule="target_match",
            )
        actions = []
        for i, action in enumerate(self.actions):
            target = by_index.get(i)
            if target is None:
                raise PlanError(
                    f"{action.type} has no target (targets for actions {sorted(by_index)})",
                    index=i,
                    rule="target_match",
                )
            if target.type != action.type:
                raise PlanError(f"a {action.type} cannot take a {target.type} target", index=i, rule="target_match")
            if not target.frame:
                target.frame = targets.frame
            actions.append(replace(action, target_3d=target))
        return replace(
            self,
            actions=actions,
            warnings=list(self.warnings) + [w for w in targets.warnings if w not in self.warnings],
        )

    def target_set(self) -> TargetSet:
        """The actions' 3D targets as one :class:`TargetSet` (the backproject JSON object).

        Raises :class:`PlanError` when an action has no target or the targets are in different frames.
        """
        missing = [i for i, a in enumerate(self.actions) if a.target_3d is None]
        if missing:
            raise PlanError(
                f"actions {missing} have no 3D target: back-project the plan first", rule="not_backprojected"
            )
        targets = [a.target_3d for a in self.actions]
        frames = sorted({t.frame for t in targets})  # type: ignore[union-attr]
        if len(frames) > 1:
            raise PlanError(f"the targets are in several frames {frames}; expected one", rule="target_frames")
        targets = [replace(t, index=i) for i, t in enumerate(targets)]  # type: ignore[type-var]
        return TargetSet(frame=frames[0] if frames else "", targets=targets, warnings=list(self.warnings))


def validate_action(action: GroundedAction, index: int | None = None, image_size: Sequence[int] | None = None) -> None:
    """Check one action's own fields (type, bbox/point presence, order, finiteness, inside the image)."""
    if action.type not in ACTION_TYPES:
        raise PlanError(
            f"unknown action type {action.type!r} (expected one of {', '.join(ACTION_TYPES)})", index=index, rule="type"
        )
    if action.type in BOX_TYPES:
        if action.bbox is None:
            raise PlanError(f"a {action.type} needs a bbox [x1, y1, x2, y2]", index=index, rule="bbox_required")
        x1, y1, x2, y2 = _finite_floats(action.bbox, 4, "bbox", index)
        if not (x1 < x2 and y1 < y2):
            raise PlanError(
                f"bbox must have x1 < x2 and y1 < y2, got {list(action.bbox)}", index=index, rule="bbox_order"
            )
        if image_size is not None:
            w, h = image_size
            if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
                raise PlanError(
                    f"bbox {list(action.bbox)} lies outside the {w}x{h} image", index=index, rule="bbox_in_image"
                )
    if action.type == "place":
        if action.point is None:
            raise PlanError("a place needs a point [x, y]", index=index, rule="point_required")
        x, y = _finite_floats(action.point, 2, "point", index)
        if image_size is not None:
            w, h = image_size
            if not (0 <= x <= w and 0 <= y <= h):
                raise PlanError(
                    f"point {list(action.point)} lies outside the {w}x{h} image", index=index, rule="point_in_image"
                )


def pairing_error(types: Sequence[str]) -> tuple[int, str, str] | None:
    """The first step of ``types`` (action types in order) that breaks the pairing rule: every grasp is immediately
    followed by a place and every place immediately follows a grasp. ``(index, rule, message)``, or None when the
    sequence keeps the rule. The one place this rule lives: plans, bench ground truth and simulator scenarios
    report it with their own location."""
    for i, kind in enumerate(types):
        if kind == "grasp" and (i + 1 >= len(types) or types[i + 1] != "place"):
            return i, "grasp_then_place", "a grasp must be immediately followed by a place"
        if kind == "place" and (i == 0 or types[i - 1] != "grasp"):
            return i, "place_after_grasp", "a place must immediately follow a grasp"
    return None


def validate_plan(plan: GroundedPlan) -> None:
    """Check the plan model's rules; raise :class:`PlanError` naming the action index and the rule.

    Rules: known types; grasp/open/close carry a bbox with x1 < x2, y1 < y2 inside the image; a place
    carries a point inside the image; every grasp is immediately followed by a place and every place
    immediately follows a grasp; an empty plan carries a reason.
    """
    w, h = plan.image_size
    if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
        raise PlanError(f"image_size must be two positive integers, got {list(plan.image_size)}", rule="image_size")
    if not plan.actions:
        if not plan.reason.strip():
            raise PlanError("an empty plan (nothing to do) must carry a reason", rule="empty_needs_reason")
        return
    types = [action.type for action in plan.actions]
    broken = pairing_error(types)
    for i, action in enumerate(plan.actions):
        validate_action(action, i, plan.image_size)
        if broken is not None and broken[0] == i:
            raise PlanError(broken[2], index=i, rule=broken[1])


def load_plan(path: str | Path, *, validate: bool = True) -> GroundedPlan:
    """Read a canonical plan JSON file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror}", rule="file") from exc
    return GroundedPlan.from_json(text, validate=validate)


def save_plan(plan: GroundedPlan, path: str | Path) -> None:
    """Write a plan as canonical JSON (atomically: a crash never leaves half a file)."""
    write_text_atomic(path, plan.to_json() + "\n")


def iter_pairs(actions: Iterable[GroundedAction]) -> list[tuple[GroundedAction, ...]]:
    """Group a valid plan's actions into steps: (grasp, place) pairs and single open/close actions."""
    steps: list[tuple[GroundedAction, ...]] = []
    pending: GroundedAction | None = None
    for action in actions:
        if action.type == "grasp":
            pending = action
        elif action.type == "place" and pending is not None:
            steps.append((pending, action))
            pending = None
        else:
            steps.append((action,))
    return steps
