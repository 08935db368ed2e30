"""Prompts per model family: grounded planning, repair re-prompts, language-only planning and grounding."""

from __future__ import annotations

import json
from typing import Sequence

from grounded_planner.vlm.conventions import BOX_KEY, POINT_KEY

_COORDS = {
    "qwen3": (
        "Coordinates are relative to the image: integers from 0 to 1000, where (0, 0) is the top-left and "
        '(1000, 1000) the bottom-right corner. Boxes are "bbox_2d": [x1, y1, x2, y2]; points are '
        '"point_2d": [x, y].'
    ),
    "gemini": (
        "Coordinates are normalized to 0-1000 with (0, 0) the top-left corner. Boxes are "
        '"box_2d": [ymin, xmin, ymax, xmax]; points are "point": [y, x] (y first).'
    ),
    "pixel": (
        "Coordinates are absolute pixels of this {width}x{height} image, (0, 0) top-left, x right, y down. "
        'Boxes are "bbox": [x1, y1, x2, y2]; points are "point": [x, y].'
    ),
}
_EXAMPLE_NUMBERS = {
    "qwen3": ([212, 415, 298, 530], [655, 470]),
    "gemini": ([415, 212, 530, 298], [470, 655]),
    "pixel": None,  # scaled to the image size
}


def _example(family: str, width: int, height: int) -> str:
    if family == "pixel":
        box = [round(0.212 * width), round(0.415 * height), round(0.298 * width), round(0.530 * height)]
        point = [round(0.655 * width), round(0.470 * height)]
    else:
        box, point = _EXAMPLE_NUMBERS[family]
    example = {
        "actions": [
            {"type": "grasp", "object": "red cup", BOX_KEY[family]: box},
            {"type": "place", "object": "red cup", "target": "tray", POINT_KEY[family]: point},
        ],
        "reason": "",
    }
    return json.dumps(example)


def planning_system_prompt(family: str, width: int, height: int) -> str:
    """System prompt of grounded planning for a model family (``qwen3``, ``gemini``, ``pixel``).

    ``width``/``height`` are of the image as sent (pixel coordinates refer to it).
    """
    coords = _COORDS[family].format(width=width, height=height)
    return (
        "You are the task planner of a robot arm with a parallel gripper. You see one image of the workspace "
        "and get an instruction. Write the shortest plan of primitives that carries out the instruction, each "
        "tied to a place in the image.\n"
        'Primitives (the only allowed values of "type"):\n'
        f'- grasp: pick up an object; give "object" and its box ({BOX_KEY[family]}).\n'
        f'- place: put down the object held; give "object", "target" (where it goes) and the point '
        f"({POINT_KEY[family]}) on the surface where it should be put.\n"
        f'- open / close: open or close a drawer, door or lid; give "object" and the box ({BOX_KEY[family]}) '
        "of the handle or the part to push or pull.\n"
        "Rules: every grasp is immediately followed by the place of the same object, and every place comes "
        "right after its grasp. Use only objects that are visible in the image.\n"
        f"{coords}\n"
        "If nothing needs doing (the instruction is already satisfied) or no valid target is visible, the right "
        'answer is an empty plan with the reason: {"actions": [], "reason": "..."}.\n'
        "Answer with JSON only, no prose, in this form:\n"
        f"{_example(family, width, height)}"
    )


def planning_user_prompt(instruction: str, done: Sequence[str] = ()) -> str:
    """The user turn of a planning request; ``done`` (closed loop, replanning) lists what the robot already did."""
    return f"Instruction: {instruction_with_done(instruction, done)}"


def instruction_with_done(instruction: str, done: Sequence[str] = ()) -> str:
    """The instruction followed by what the robot already did (closed loop, replanning the rest); the text a
    plan service request carries when its client replans."""
    text = instruction.strip()
    if done:
        text += (
            "\nSteps already done (the image shows the scene as it is now): "
            + "; ".join(done)
            + "\nPlan only what is left. If the instruction is already satisfied, answer an empty plan."
        )
    return text


def repair_prompt(error: str) -> str:
    """Re-prompt after an invalid answer: quote the error, ask for the corrected plan only."""
    return (
        f"Your answer could not be used: {error}\n"
        "Answer again with the corrected plan as JSON only, following the rules and the coordinate format above."
    )


def language_plan_system_prompt() -> str:
    """System prompt of the decoupled mode's planner: steps in language, no coordinates."""
    return (
        "You are the task planner of a robot arm with a parallel gripper. You see one image of the workspace "
        "and get an instruction. Write the shortest sequence of primitives that carries it out.\n"
        'Primitives: grasp (pick up "object"), place (put the held "object" on or in "target"), open and '
        'close (a drawer, door or lid named in "object"). Every grasp is immediately followed by the place of '
        "the same object. Name each object precisely enough to find it in the image (colour, position).\n"
        'If nothing needs doing or no valid target is visible, answer {"actions": [], "reason": "..."}.\n'
        "Answer with JSON only, for example:\n"
        '{"actions": [{"type": "grasp", "object": "red cup"}, '
        '{"type": "place", "object": "red cup", "target": "tray"}], "reason": ""}'
    )


def grounding_prompt(family: str, kind: str, description: str, width: int, height: int) -> str:
    """Ask a VLM for one box (``kind="box"``) or one point (``kind="point"``) of ``description``."""
    coords = _COORDS[family].format(width=width, height=height)
    if kind == "box":
        return (
            f"Locate {description} in the image. {coords} "
            f'Answer with JSON only: {{"{BOX_KEY[family]}": [...], "label": "..."}}'
        )
    return (
        f"Point to {description} in the image. {coords} "
        f'Answer with JSON only: {{"{POINT_KEY[family]}": [...], "label": "..."}}'
    )


def embodied_r1_prompt(kind: str, description: str) -> str:
    """Embodied-R1 style pointing request; it answers ``<point>[[x, y]]</point>`` in pixels of the image sent."""
    if kind == "box":
        return f"Please point out the {description}. Output the point as <point>[[x, y]]</point>."
    return (
        f"Please point out a free spot on {description} where an object can be placed. "
        "Output the point as <point>[[x, y]]</point>."
    )
