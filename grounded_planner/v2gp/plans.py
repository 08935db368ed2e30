"""V2GP stage 4: segments -> grounded plan + instructions (explicit, revised, implicit) -> training samples.

Filters (each dropped segment is recorded with its reason, never silently lost):

* ``not_reopened`` / ``truncated`` — the cycle is not complete in the recording;
* ``empty_grasp`` — the fingers closed fully (signal at ``empty_grasp_level``) or the object did not move;
* ``drop`` — the fingers closed fully half way through the hold: the object slipped out;
* ``identity_mismatch`` — the named object is not the one that moved (tracking disagrees with stage 2);
* ``no_object`` / ``no_box`` / ``no_point`` / ``bad_box`` — stage 2 or 3 found nothing usable.

When a dropped segment's step is not done by another segment (a failed grasp that was retried is), the
instruction is revised to say what the plan does (templated from the plan), so instruction and plan stay
consistent; the dataset's instruction is kept in the sample's ``source_instruction``. The training sample uses exactly the planner's prompt
(``vlm.prompts.planning_system_prompt`` + ``planning_user_prompt``) and the answer in the qwen3 convention
(``vlm.conventions.render_plan``), with the first frame as the image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError
from grounded_planner.v2gp.ground import Grounding
from grounded_planner.v2gp.identify import ObjectIdentity
from grounded_planner.v2gp.segment import Segment, SegmentConfig
from grounded_planner.vlm.parse import parse_plan, strip_thinking
from grounded_planner.vlm import prompts
from grounded_planner.vlm.conventions import render_plan

TRAINING_CONVENTION = "qwen3"


@dataclass
class EpisodePlan:
    """Stage-4 result of one episode."""

    plan: GroundedPlan | None  # None when no segment survived the filters
    instruction: str  # the dataset's instruction
    revised: bool  # True when the plan's instruction was rewritten to what the plan does
    dropped: list[dict[str, Any]] = field(default_factory=list)  # {"segment": [s, e], "reason": ..., "detail": ...}
    implicit: str = ""  # the implicit variant ("" = none)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": None if self.plan is None else self.plan.to_dict(),
            "instruction": self.instruction,
            "revised": self.revised,
            "dropped": self.dropped,
            "implicit": self.implicit,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EpisodePlan":
        plan = data.get("plan")
        return cls(
            plan=None if plan is None else GroundedPlan.from_dict(plan),
            instruction=data["instruction"],
            revised=bool(data["revised"]),
            dropped=list(data.get("dropped") or []),
            implicit=str(data.get("implicit") or ""),
        )


def segment_rejection(
    segment: Segment,
    identity: ObjectIdentity,
    grounding: Grounding,
    seg_config: SegmentConfig,
    image_size: Sequence[int],
    min_box_px: float,
    min_motion_px: float,
) -> tuple[str, str] | None:
    """(reason, detail) when a segment must not become plan actions, else None."""
    if segment.truncated_start:
        return "truncated", "the gripper was already closed at the first frame"
    if segment.closed_level >= seg_config.empty_grasp_level:
        return "empty_grasp", f"the gripper closed to {segment.closed_level:.2f} (fully closed: nothing held)"
    if segment.dropped_mid_grasp:
        return "drop", "the gripper closed fully during the hold: the object slipped out"
    if not identity.object:
        return "no_object", "stage 2 named no manipulated object"
    if grounding.identity == "mismatch":
        return "identity_mismatch", "; ".join(grounding.notes) or "the named object is not the one that moved"
    if grounding.bbox_px is None:
        return "no_box", "; ".join(grounding.notes) or "no box for the object"
    x1, y1, x2, y2 = grounding.bbox_px
    w, h = image_size
    if x2 - x1 < min_box_px or y2 - y1 < min_box_px:
        return "bad_box", f"box {grounding.bbox_px} is smaller than {min_box_px} px"
    if x1 < -1 or y1 < -1 or x2 > w + 1 or y2 > h + 1:
        return "bad_box", f"box {grounding.bbox_px} lies outside the {w}x{h} image"
    if identity.interaction == "pick_place":
        if grounding.point_px is None:
            return "no_point", "; ".join(grounding.notes) or "no place point"
        if grounding.moved_px is not None and grounding.moved_px < min_motion_px:
            return "empty_grasp", f"the object moved only {grounding.moved_px:.1f} px"
        px, py = grounding.point_px
        if not (0 <= px <= w and 0 <= py <= h):
            return "no_point", f"place point {grounding.point_px} lies outside the image"
    return None


def _clip_box(box: Sequence[float], size: Sequence[int]) -> tuple[float, float, float, float]:
    w, h = size
    x1, y1, x2, y2 = box
    return (max(0.0, float(x1)), max(0.0, float(y1)), min(float(w), float(x2)), min(float(h), float(y2)))


def describe_plan(plan: GroundedPlan) -> str:
    """An explicit instruction that says what the plan does: "put the red block on the blue plate and ..."."""
    parts = []
    for action in plan.actions:
        if action.type == "place":
            target = action.target or "its new place"
            parts.append(f"put the {action.object} on the {target}" if action.target else f"move the {action.object}")
        elif action.type in ("open", "close"):
            parts.append(f"{action.type} the {action.object}")
    return " and ".join(parts) if parts else ""


def build_episode_plan(
    instruction: str,
    image_size: Sequence[int],
    segments: Sequence[Segment],
    identities: Sequence[ObjectIdentity],
    groundings: Sequence[Grounding],
    seg_config: SegmentConfig,
    min_box_px: float = 4.0,
    min_motion_px: float = 3.0,
    model: str = "v2gp",
) -> EpisodePlan:
    """Aggregate the kept segments in time order into a validated canonical plan.

    Boxes are in the episode's first frame; an object grasped again after an earlier kept place is boxed at
    that place point (same box size), since the first frame still shows it where it started.
    """
    actions: list[GroundedAction] = []
    dropped: list[dict[str, Any]] = []
    placed: dict[str, tuple[float, float]] = {}  # object -> where its last kept place put it
    for seg, ident, ground in zip(segments, identities, groundings):
        rejection = segment_rejection(seg, ident, ground, seg_config, image_size, min_box_px, min_motion_px)
        if rejection is not None:
            dropped.append(
                {"segment": seg.to_list(), "reason": rejection[0], "detail": rejection[1], "object": ident.object}
            )
            continue
        box = _clip_box(ground.bbox_px, image_size)  # type: ignore[arg-type]
        earlier = placed.get(ident.object.lower())
        if ident.interaction == "pick_place" and earlier is not None:
            # grasped again: it lies where the earlier place put it, not where the first frame shows it
            half_w, half_h = (box[2] - box[0]) / 2.0, (box[3] - box[1]) / 2.0
            box = _clip_box(
                (earlier[0] - half_w, earlier[1] - half_h, earlier[0] + half_w, earlier[1] + half_h), image_size
            )
        if ident.interaction == "pick_place":
            placed[ident.object.lower()] = tuple(ground.point_px)  # type: ignore[arg-type]
            actions.append(GroundedAction("grasp", object=ident.object, bbox=box))
            actions.append(
                GroundedAction(
                    "place", object=ident.object, target=ground.target or ident.target, point=tuple(ground.point_px)
                )
            )  # type: ignore[arg-type]
        else:
            actions.append(GroundedAction(ident.interaction, object=ident.object, bbox=box))
    # revise only when a dropped step is not done by another segment (a failed grasp that was retried is not
    # a missing step); a dropped segment with no name might be anything, so it counts as missing
    handled = {a.object.lower() for a in actions}
    revised = bool(actions) and any(not d.get("object") or d["object"].lower() not in handled for d in dropped)
    if not actions:
        return EpisodePlan(plan=None, instruction=instruction, revised=False, dropped=dropped)
    plan = GroundedPlan(
        instruction=instruction, image_size=(int(image_size[0]), int(image_size[1])), actions=actions, model=model
    )
    if revised:
        plan.instruction = describe_plan(plan)
        plan.warnings.append(f"instruction revised from {instruction!r}: {len(dropped)} segment(s) dropped")
    try:
        plan.validate()
    except PlanError as exc:
        return EpisodePlan(
            plan=None,
            instruction=instruction,
            revised=False,
            dropped=dropped + [{"segment": None, "reason": "invalid_plan", "detail": str(exc)}],
        )
    return EpisodePlan(plan=plan, instruction=instruction, revised=revised, dropped=dropped)


# -- implicit variant -----------------------------------------------------------------------------------
def implicit_prompt(instruction: str) -> str:
    return (
        "Rewrite this robot instruction as an implicit, higher-level request that states the goal or need "
        'instead of the steps, the way a person would say it at home (for example "tidy up the table" or '
        '"I want to put my keys away"). Do not name coordinates or list the steps.\n'
        f'Instruction: "{instruction}"\n'
        "Answer with the rewritten instruction only, one sentence."
    )


def clean_implicit(answer: str, explicit: str, max_chars: int = 200) -> tuple[str, str]:
    """(rewrite, "") when the LLM's rewrite is usable, else ("", reason)."""

    text = strip_thinking(answer)[0].strip()
    text = re.sub(r"^(implicit instruction|rewritten instruction|instruction)\s*:\s*", "", text, flags=re.I)
    text = text.strip().strip("\"'` ").strip()
    if "\n" in text:
        text = text.splitlines()[0].strip()
    if not text:
        return "", "empty rewrite"
    if len(text) > max_chars:
        return "", f"rewrite longer than {max_chars} characters"
    if re.search(r"[\[\]{}<>]|\d{2,}", text):
        return "", f"rewrite carries coordinates or markup: {text!r}"
    if text.lower().rstrip(".") == explicit.lower().rstrip("."):
        return "", "rewrite repeats the explicit instruction"
    return text, ""


# -- training samples -------------------------------------------------------------------------------------
def training_messages(
    image_ref: str, image_size_sent: Sequence[int], instruction: str, plan: GroundedPlan
) -> list[dict]:
    """One Qwen3-VL chat sample: the planner's system prompt, image + user prompt, answer in qwen3 convention."""

    system = prompts.planning_system_prompt(TRAINING_CONVENTION, int(image_size_sent[0]), int(image_size_sent[1]))
    answer = render_plan(plan, TRAINING_CONVENTION)
    return [
        {"role": "system", "content": [{"type": "text", "text": system}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": image_ref},
                {"type": "text", "text": prompts.planning_user_prompt(instruction)},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def sample_plan(sample: dict[str, Any]) -> GroundedPlan:
    """The plan a training sample teaches, read back with the planner's own parser (qwen3 convention)."""

    messages = sample["messages"]
    answer = "".join(p["text"] for p in messages[-1]["content"] if p.get("type") == "text")
    user_text = "".join(p.get("text", "") for p in messages[1]["content"] if p.get("type") == "text")
    instruction = user_text.split("Instruction:", 1)[-1].strip()
    return parse_plan(answer, sample["image_size"], TRAINING_CONVENTION, instruction)
