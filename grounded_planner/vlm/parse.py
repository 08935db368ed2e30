"""Robust parsing of raw VLM answers into canonical grounded plans (pixels of the original image).

Survives what real models emit: ``<think>`` blocks, markdown fences, prose around the JSON, a top-level
list or an object holding ``actions``/``plan``/``steps`` (or numbered steps), keys ``type``/``action``/
``primitive`` in any case, pick->grasp and put->place (and grasp_object, open_drawer...), function-call lines
(``1. grasp(spoon, [120, 200, 180, 260])``), plain numbered lines, YAML lists, markdown tables, trailing
commas, comments, single quotes, numbers written as strings. Coordinates are read in the convention passed;
``auto`` decides by the keys present (``bbox_2d``/``point_2d``: Qwen3 0-1000, ``box_2d``: Gemini
[ymin, xmin, ymax, xmax] with ``point`` [y, x], anything else pixels, or fractions when every number is in
[0, 1]); function-call lines are read as pixels unless a convention is given.

Total and linear: every input gives a plan or a ParseError (with a ``rule``), in time linear in its length.
The work is split in three: text scanning (vlm/scan.py), item -> action (vlm/items.py), coordinate
conventions (vlm/conventions.py); this module holds the two entry points."""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Sequence

from grounded_planner.errors import InputError
from grounded_planner.plan import GroundedPlan, PlanError
from grounded_planner.vlm.conventions import (
    PARSE_CONVENTIONS,
    answer_box_to_px,
    answer_point_to_px,
    check_convention,
    key_convention,
)
from grounded_planner.vlm.errors import ParseDeadlineError, ParseError
from grounded_planner.vlm.items import (
    BOX_KEYS,
    POINT_KEYS,
    all_fractions,
    checked_box,
    checked_point,
    numbers,
    plan_convention,
    short,
    to_action,
)
from grounded_planner.vlm.scan import (
    MAX_CALL_CHARS,
    MAX_JSON_DEPTH,
    NUMBER_RE,
    TYPE_SYNONYMS,
    check_deadline,
    find_plan,
    json_values,
    lower_keys,
    norm_type,
    strip_thinking,
)

__all__ = [
    "parse_plan",
    "parse_location",
    "ParseError",
    "ParseDeadlineError",
    "strip_thinking",
    "norm_type",
    "TYPE_SYNONYMS",
    "MAX_TEXT_CHARS",
    "MAX_ACTIONS",
    "MAX_JSON_DEPTH",
    "MAX_CALL_CHARS",
]

log = logging.getLogger(__name__)

# Longest answer we read; real plans are a few kB, this bounds the work on pathological input.
MAX_TEXT_CHARS = 200_000
# Most actions read from one answer; a real plan has a handful, more is a looping model (rule ``too_many_actions``).
MAX_ACTIONS = 100


def _check_size(size: Any, what: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in size)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"{what} must be (width, height) in pixels, got {size!r}") from exc
    if w <= 0 or h <= 0:
        raise InputError(f"{what} must be positive, got {size!r}")
    return w, h


def _check_text(text: Any) -> None:
    if not isinstance(text, str):
        raise ParseError(f"model answer must be text, got {type(text).__name__}", rule="text")
    if not text.strip():
        raise ParseError("the model's answer is empty", rule="empty_answer")
    if len(text) > MAX_TEXT_CHARS:
        raise ParseError(
            f"the model's answer is {len(text)} characters long (more than {MAX_TEXT_CHARS}); not a plan",
            rule="too_long",
        )


def parse_plan(
    text: str,
    image_size: Sequence[int],
    convention: str = "auto",
    instruction: str = "",
    *,
    model_image_size: Sequence[int] | None = None,
    validate: bool = True,
    model: str = "",
    deadline: float | None = None,
) -> GroundedPlan:
    """Read a raw VLM answer into a canonical plan in pixels of the original image.

    Parameters
    ----------
    text : str
        The model's raw answer.
    image_size : (width, height)
        Size in pixels of the original image; the plan's coordinates refer to it.
    convention : {"auto", "qwen3", "gemini", "pixel"}
        How to read coordinates. ``auto`` decides by keys: ``box_2d`` -> gemini, ``bbox_2d``/``point_2d`` ->
        qwen3, otherwise pixels; function-call lines are read as pixels under ``auto``.
    instruction : str
        Copied into the plan.
    model_image_size : (width, height), optional
        Size of the image the model saw, when it was resized before sending: pixel coordinates refer to it
        and are scaled back to ``image_size``. Defaults to ``image_size``.
    validate : bool
        Check the plan model's rules (grasp->place order, ...) and raise ParseError when broken.
    model : str
        Copied into the plan.
    deadline : float, optional
        A ``time.monotonic()`` value: past it, parsing stops with ParseDeadlineError (rule ``deadline``).
        The planner passes its request's deadline so ``timeout_s`` bounds parsing too.

    Returns
    -------
    GroundedPlan
        With ``raw_response`` = ``text`` and a warning for every box or point that was clipped or fixed.

    Raises
    ------
    ParseError
        No plan in the text, an unknown type, a box wholly outside the image or degenerate, an answer
        longer than MAX_TEXT_CHARS (``too_long``), ... (one line, with a ``rule``). Nothing else for any text.
    """
    _check_text(text)
    size = _check_size(image_size, "image_size")
    model_size = _check_size(model_image_size, "model_image_size") if model_image_size is not None else size
    convention = check_convention(convention, PARSE_CONVENTIONS)
    try:
        return _parse_plan(text, size, model_size, convention, instruction, validate, model, deadline)
    except ParseError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise ParseError(
            f"the model's answer is too deeply nested or too large to read ({type(exc).__name__})", rule="too_complex"
        ) from exc
    except Exception as exc:  # a parser bug must not take the caller down with an untyped error: say so, typed
        log.exception("parser bug on an answer of %d characters", len(text))
        raise ParseError(f"internal parser error {type(exc).__name__}: {exc}", rule="internal") from exc


def _parse_plan(
    text: str,
    size: tuple[int, int],
    model_size: tuple[int, int],
    convention: str,
    instruction: str,
    validate: bool,
    model: str,
    deadline: float | None,
) -> GroundedPlan:
    body, warnings = strip_thinking(text)
    stripped = body.strip()
    if len(stripped) > 1 and stripped[0] == stripped[-1] == '"':
        try:  # the whole answer is a JSON string holding the answer (double-encoded)
            inner = json.loads(stripped)
            body = inner if isinstance(inner, str) else body
        except (ValueError, RecursionError):
            pass
    check_deadline(deadline)
    found = find_plan(body, deadline)
    if found is None:
        snippet = " ".join(body[:1000].split())[:80]
        raise ParseError(
            "no plan found in the model's answer: expected a JSON list of actions (or an object with "
            f"'actions') or lines like 'grasp(object, [x1, y1, x2, y2])'; the answer starts {snippet!r}",
            rule="no_plan",
        )
    if len(found.items) > MAX_ACTIONS:
        raise ParseError(
            f"the answer holds {len(found.items)} actions (more than {MAX_ACTIONS}); not a plan",
            rule="too_many_actions",
        )
    check_deadline(deadline)
    plan_conv = plan_convention(found.items, convention)
    if convention == "auto" and plan_conv == "pixel" and all_fractions(found.items):
        plan_conv = "unit"
        warnings.append("every coordinate is between 0 and 1: read as fractions of the image width and height")
    actions = [
        to_action(raw, i, convention, plan_conv, model_size, size, warnings) for i, raw in enumerate(found.items)
    ]
    # A place that names no object carries what the grasp before it picked up.
    for i, action in enumerate(actions):
        if action.type == "place" and not action.object and i > 0 and actions[i - 1].type == "grasp":
            action.object = actions[i - 1].object
    reason = " ".join(found.reason.split())
    if not actions and not reason:
        reason = found.prose or "the model returned an empty plan without a reason"
        warnings.append(
            "empty plan without a 'reason' field: "
            + ("the text around it is the reason" if found.prose else "none given")
        )
    plan = GroundedPlan(
        instruction=instruction,
        image_size=size,
        actions=actions,
        reason=reason,
        warnings=warnings,
        model=model,
        raw_response=text,
    )
    if validate:
        try:
            plan.validate()
        except PlanError as exc:
            raise ParseError(str(exc), index=exc.index, rule=exc.rule) from exc
    return plan


_POINT_OPEN = re.compile(r"<point>", re.IGNORECASE)
_POINT_CLOSE = re.compile(r"</point>", re.IGNORECASE)


def _point_tag_numbers(body: str) -> list[str]:
    """Numbers of the first closed ``<point>...</point>`` (Embodied-R1), found without backtracking."""
    start = _POINT_OPEN.search(body)
    end = _POINT_CLOSE.search(body, start.end()) if start else None
    return NUMBER_RE.findall(body[start.end() : end.start()]) if end else []


def parse_location(
    text: str,
    image_size: Sequence[int],
    kind: str,
    convention: str = "auto",
    *,
    model_image_size: Sequence[int] | None = None,
) -> tuple[tuple[float, ...], list[str]]:
    """One box (``kind="box"``) or point (``kind="point"``) from a grounding answer, in original pixels.

    Reads ``{"bbox_2d": [...]}`` / ``{"box_2d": [...]}`` / ``{"point": [...]}`` objects (or a list of them:
    the first is taken), bare number lists, and Embodied-R1's ``<point>[[x, y], ...]</point>`` (pixels of
    the image sent). Returns (coordinates, warnings); raises ParseError when nothing usable is there.
    """
    if kind not in ("box", "point"):
        raise InputError(f"kind must be 'box' or 'point', got {kind!r}")
    if not isinstance(text, str):
        raise ParseError(f"model answer must be text, got {type(text).__name__}", rule="text")
    size = _check_size(image_size, "image_size")
    model_size = _check_size(model_image_size, "model_image_size") if model_image_size is not None else size
    convention = check_convention(convention, PARSE_CONVENTIONS)
    try:
        return _parse_location(text[:MAX_TEXT_CHARS], size, model_size, kind, convention)
    except ParseError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise ParseError(
            f"the grounding answer is too deeply nested or too large to read ({type(exc).__name__})", rule="too_complex"
        ) from exc
    except Exception as exc:  # see parse_plan
        log.exception("parser bug on a grounding answer of %d characters", len(text))
        raise ParseError(f"internal parser error {type(exc).__name__}: {exc}", rule="internal") from exc


def _parse_location(
    text: str, size: tuple[int, int], model_size: tuple[int, int], kind: str, convention: str
) -> tuple[tuple[float, ...], list[str]]:
    body, warnings = strip_thinking(text)
    n = 4 if kind == "box" else 2
    keys = BOX_KEYS if kind == "box" else POINT_KEYS
    label = f"{kind} answer"
    candidates: list[tuple[Any, str]] = []  # (numbers, convention)
    tag_numbers = _point_tag_numbers(body)
    if len(tag_numbers) >= 2:
        candidates.append((tag_numbers[:2], "pixel"))  # Embodied-R1 points are pixels of the image it saw
    for _, _, value in json_values(body):
        items = value if isinstance(value, list) else [value]
        if items and all(isinstance(v, (int, float, str)) for v in items) and len(items) in (2, 4):
            candidates.append((items, convention if convention != "auto" else "pixel"))
        for item in items:
            if isinstance(item, dict):
                low = lower_keys(item)
                found = next((k for k in keys if k in low and isinstance(low[k], (list, str, dict))), None)
                if found is not None:
                    plan_conv = plan_convention([item], convention)
                    candidates.append((low[found], key_convention(found, convention, plan_conv)))
    if not candidates:
        raise ParseError(
            f"no {kind} found in the grounding answer; it starts {' '.join(body[:1000].split())[:80]!r}",
            rule=f"no_{kind}",
        )
    raw, conv = candidates[0]
    if isinstance(raw, (list, tuple)):
        raw = [v for part in raw for v in (part if isinstance(part, (list, tuple)) else [part])]
        count = len(raw) if len(raw) in (2, 4) else n  # a box where a point was asked is allowed (its centre)
    else:
        count = n
    values = numbers(raw, count, kind, 0)
    if len(values) == 4:
        box = checked_box(answer_box_to_px(values, conv, size, model_size), 0, label, size, warnings)
        if kind == "box":
            return box, warnings
        warnings.append(f"{label}: a box was given where a point was asked; used its centre")
        return ((box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0), warnings
    if kind == "box":
        raise ParseError(f"the grounding answer has a point {short(values)}, expected a box", rule="box_length")
    return checked_point(answer_point_to_px(values, conv, size, model_size), 0, label, size, warnings), warnings
