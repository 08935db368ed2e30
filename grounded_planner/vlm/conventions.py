"""Coordinate conventions of VLM families and conversion to and from canonical pixels.

| convention | box                                         | point               |
|------------|---------------------------------------------|---------------------|
| ``qwen3``  | ``bbox_2d`` [x1, y1, x2, y2], relative 0-1000 | ``point_2d`` [x, y], 0-1000 |
| ``gemini`` | ``box_2d`` [ymin, xmin, ymax, xmax], 0-1000   | ``point`` [y, x], 0-1000    |
| ``pixel``  | ``bbox`` [x1, y1, x2, y2], absolute pixels of the image the model saw | ``point`` [x, y] |

Canonical plans (``grounded_planner.plan``) hold float pixels of the original image.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

from grounded_planner.errors import InputError
from grounded_planner.plan import GroundedPlan

CONVENTIONS = ("qwen3", "gemini", "pixel")
PARSE_CONVENTIONS = ("auto", *CONVENTIONS)
# Relative conventions express coordinates in thousandths of the image side.
RELATIVE_SCALE = 1000.0

BOX_KEY = {"qwen3": "bbox_2d", "gemini": "box_2d", "pixel": "bbox"}
POINT_KEY = {"qwen3": "point_2d", "gemini": "point", "pixel": "point"}


def check_convention(convention: str, allowed: Sequence[str] = CONVENTIONS) -> str:
    """Return ``convention`` lower-cased, or raise ValueError naming the allowed values."""
    name = str(convention).strip().lower()
    if name not in allowed:
        raise InputError(f"unknown coordinate convention {convention!r} (expected one of {', '.join(allowed)})")
    return name


def box_to_px(values: Sequence[float], convention: str, size_wh: Sequence[int]) -> tuple[float, float, float, float]:
    """Model box numbers -> (x1, y1, x2, y2) in pixels of an image of ``size_wh`` (not ordered, not clipped)."""
    w, h = float(size_wh[0]), float(size_wh[1])
    a, b, c, d = (float(v) for v in values)
    if convention == "qwen3":
        return (a / RELATIVE_SCALE * w, b / RELATIVE_SCALE * h, c / RELATIVE_SCALE * w, d / RELATIVE_SCALE * h)
    if convention == "gemini":  # [ymin, xmin, ymax, xmax]
        return (b / RELATIVE_SCALE * w, a / RELATIVE_SCALE * h, d / RELATIVE_SCALE * w, c / RELATIVE_SCALE * h)
    return (a, b, c, d)


def point_to_px(values: Sequence[float], convention: str, size_wh: Sequence[int]) -> tuple[float, float]:
    """Model point numbers -> (x, y) in pixels of an image of ``size_wh``."""
    w, h = float(size_wh[0]), float(size_wh[1])
    a, b = (float(v) for v in values)
    if convention == "qwen3":
        return (a / RELATIVE_SCALE * w, b / RELATIVE_SCALE * h)
    if convention == "gemini":  # [y, x]
        return (b / RELATIVE_SCALE * w, a / RELATIVE_SCALE * h)
    return (a, b)


def detect_convention(keys: set[str], convention: str) -> str:
    """Convention of a plan's generic keys (``bbox``, ``point``) under ``auto``, by the distinctive keys present:
    ``box_2d`` -> gemini, ``bbox_2d``/``point_2d`` -> qwen3, anything else pixels."""
    if convention != "auto":
        return convention
    if "box_2d" in keys:
        return "gemini"
    if "bbox_2d" in keys or "point_2d" in keys:
        return "qwen3"
    return "pixel"


def key_convention(key: str, convention: str, plan_convention: str) -> str:
    """Convention of the numbers under one key: the key's own (``bbox_2d``, ``box_2d``, ``*_px``) under ``auto``."""
    if convention != "auto":
        return convention
    if key in ("bbox_2d", "point_2d"):
        return "qwen3"
    if key == "box_2d":
        return "gemini"
    if key in ("bbox_px", "point_px"):
        return "pixel"
    return plan_convention


def answer_box_to_px(
    values: Sequence[float], convention: str, image_wh: Sequence[int], model_wh: Sequence[int]
) -> tuple[float, float, float, float]:
    """A box as a model answered (``convention`` or ``unit``: fractions of the sides) -> pixels of the original
    image; pixel answers refer to the image the model saw (``model_wh``) and are scaled back."""
    w, h = float(image_wh[0]), float(image_wh[1])
    if convention == "unit":
        return (values[0] * w, values[1] * h, values[2] * w, values[3] * h)
    if convention == "pixel":
        sx, sy = w / model_wh[0], h / model_wh[1]
        return (values[0] * sx, values[1] * sy, values[2] * sx, values[3] * sy)
    return box_to_px(values, convention, image_wh)


def answer_point_to_px(
    values: Sequence[float], convention: str, image_wh: Sequence[int], model_wh: Sequence[int]
) -> tuple[float, float]:
    """A point as a model answered -> pixels of the original image (see :func:`answer_box_to_px`)."""
    w, h = float(image_wh[0]), float(image_wh[1])
    if convention == "unit":
        return (values[0] * w, values[1] * h)
    if convention == "pixel":
        sx, sy = w / model_wh[0], h / model_wh[1]
        return (values[0] * sx, values[1] * sy)
    return point_to_px(values, convention, image_wh)


def box_from_px(bbox_px: Sequence[float], convention: str, size_wh: Sequence[int], decimals: int = 0) -> list[float]:
    """Pixel (x1, y1, x2, y2) -> the numbers a model of ``convention`` writes (rounded to ``decimals``)."""
    w, h = float(size_wh[0]), float(size_wh[1])
    x1, y1, x2, y2 = (float(v) for v in bbox_px)
    if convention == "qwen3":
        out = [x1 / w * RELATIVE_SCALE, y1 / h * RELATIVE_SCALE, x2 / w * RELATIVE_SCALE, y2 / h * RELATIVE_SCALE]
    elif convention == "gemini":
        out = [y1 / h * RELATIVE_SCALE, x1 / w * RELATIVE_SCALE, y2 / h * RELATIVE_SCALE, x2 / w * RELATIVE_SCALE]
    else:
        out = [x1, y1, x2, y2]
    return [_round(v, decimals) for v in out]


def point_from_px(point_px: Sequence[float], convention: str, size_wh: Sequence[int], decimals: int = 0) -> list[float]:
    """Pixel (x, y) -> the numbers a model of ``convention`` writes (rounded to ``decimals``)."""
    w, h = float(size_wh[0]), float(size_wh[1])
    x, y = (float(v) for v in point_px)
    if convention == "qwen3":
        out = [x / w * RELATIVE_SCALE, y / h * RELATIVE_SCALE]
    elif convention == "gemini":
        out = [y / h * RELATIVE_SCALE, x / w * RELATIVE_SCALE]
    else:
        out = [x, y]
    return [_round(v, decimals) for v in out]


def _round(value: float, decimals: int):
    return int(round(value)) if decimals <= 0 else round(value, decimals)


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9 _.'-]+$")


def render_plan(
    plan: GroundedPlan,
    convention: str = "pixel",
    *,
    style: str = "json",
    model_image_size: Sequence[int] | None = None,
    decimals: int = 0,
) -> str:
    """Write a canonical plan the way a model of ``convention`` would answer.

    Used for prompt examples, V2GP training targets and round-trip tests of the parser.

    Parameters
    ----------
    plan : GroundedPlan
        Canonical plan (pixels of ``plan.image_size``).
    convention : {"qwen3", "gemini", "pixel"}
    style : {"json", "calls"}
        ``json``: a JSON list of action objects (an object with ``actions`` and ``reason`` when empty);
        ``calls``: numbered function-call lines such as ``1. grasp(spoon, [x1, y1, x2, y2])``.
    model_image_size : (width, height), optional
        Size of the image the model saw; pixel coordinates are scaled to it. Defaults to ``plan.image_size``.
    decimals : int
        Rounding of the written numbers (0: integers, as models write them).
    """
    convention = check_convention(convention)
    if style not in ("json", "calls"):
        raise InputError(f"unknown render style {style!r} (expected json or calls)")
    w, h = plan.image_size
    mw, mh = model_image_size if model_image_size is not None else (w, h)
    sx, sy = mw / w, mh / h
    # Relative conventions do not depend on the image size, pixel ones refer to the model's image.
    size = (mw, mh)

    def box(a):
        x1, y1, x2, y2 = a.bbox
        return box_from_px((x1 * sx, y1 * sy, x2 * sx, y2 * sy), convention, size, decimals)

    def point(a):
        x, y = a.point
        return point_from_px((x * sx, y * sy), convention, size, decimals)

    if style == "calls":
        if not plan.actions:
            return f"No actions needed: {plan.reason}"
        lines = []
        for i, a in enumerate(plan.actions, 1):
            if a.type == "place":
                names = [n for n in (a.object, a.target) if n]
                coords = point(a)
            else:
                names = [a.object] if a.object else []
                coords = box(a)
            args = [_call_name(n) for n in names] + ["[" + ", ".join(str(v) for v in coords) + "]"]
            lines.append(f"{i}. {a.type}({', '.join(args)})")
        return "\n".join(lines)

    items = []
    for a in plan.actions:
        item: dict = {"type": a.type}
        if a.object:
            item["object"] = a.object
        if a.target:
            item["target"] = a.target
        if a.type == "place":
            item[POINT_KEY[convention]] = point(a)
        else:
            item[BOX_KEY[convention]] = box(a)
        items.append(item)
    if not items:
        return json.dumps({"actions": [], "reason": plan.reason}, ensure_ascii=False)
    return json.dumps(items, ensure_ascii=False)


def _call_name(name: str) -> str:
    return (
        name if _PLAIN_NAME.match(name) and not re.match(r"^[\d.\s-]+$", name) else json.dumps(name, ensure_ascii=False)
    )
