"""Raw action items (dicts from JSON/YAML/tables, or actions read from call lines) -> canonical GroundedActions
in pixels of the original image: type, names, coordinates, and the checks on boxes and points."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from grounded_planner.plan import GroundedAction
from grounded_planner.vlm.conventions import answer_box_to_px, answer_point_to_px, detect_convention, key_convention
from grounded_planner.vlm.errors import ParseError
from grounded_planner.vlm.scan import BOX_KEYS, NUMBER_RE, CallItem, call_items, lower_keys, norm_type, type_of

# A point this close outside the image (fraction of the side) is clipped with a warning; farther is an error.
POINT_CLIP_MARGIN = 0.02
# Clipping by less than this (float noise of scaling) is not worth a warning.
CLIP_SILENT_PX = 1e-6

OBJECT_KEYS = ("object", "obj", "object_name", "item", "label", "target_object", "what", "name", "entity")
TARGET_KEYS = (
    "target",
    "destination",
    "receptacle",
    "place_on",
    "on",
    "to",
    "target_name",
    "where",
    "location",
    "surface",
    "goal",
    "target_location",
)
POINT_KEYS = (
    "point_2d",
    "point",
    "point_px",
    "place_point",
    "target_point",
    "point_xy",
    "xy",
    "location",
    "position",
    "target_location",
    "target",
    "coordinates",
    "coords",
    "pos",
    "place_location",
)
# Keys that may hold a box or a point: decided by how many numbers they hold.
EITHER_KEYS = ("coordinates", "coords", "location", "position", "target_location", "pos", "place_location", "target")
ARG_KEYS = ("args", "arguments", "parameters", "params", "parameter", "argument", "inputs")
_BOX_NAMES = (("x1", "y1", "x2", "y2"), ("xmin", "ymin", "xmax", "ymax"), ("x_min", "y_min", "x_max", "y_max"))
_NUMBERS_ONLY = re.compile(r"[\s\[\](),\d.eE+-]*+")


def short(value: Any, limit: int = 80) -> str:
    """repr of a value cut to ``limit`` characters: error messages quote model output, never all of it."""
    text = (
        repr(value)
        if not isinstance(value, (dict, list, tuple)) or len(value) < 50
        else f"<{type(value).__name__} of {len(value)}>"
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_float(value: int | float | str) -> float:
    """float() that gives an infinity instead of raising on a 400-digit integer."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


# ------------------------------------------------------------------------------------------------
# numbers
# ------------------------------------------------------------------------------------------------
def number(value: Any, what: str, index: int) -> float:
    """One finite coordinate from a number or a numeric string."""
    if isinstance(value, bool):
        raise ParseError(
            f"action {index}: {what} holds a boolean {value!r}, expected a number", index=index, rule=f"{what}_numbers"
        )
    found = NUMBER_RE.search(value) if isinstance(value, str) else None
    if isinstance(value, (int, float)):
        out = _as_float(value)
    elif found is not None:
        out = _as_float(found.group(0))
    else:
        raise ParseError(
            f"action {index}: {what} holds {short(value)}, expected a number", index=index, rule=f"{what}_numbers"
        )
    if not math.isfinite(out):
        raise ParseError(
            f"action {index}: {what} holds a non-finite number {short(value)}", index=index, rule=f"{what}_finite"
        )
    return out


def numbers(value: Any, n: int, what: str, index: int) -> list[float]:
    """``n`` numbers from a list, nested list ([[x1, y1], [x2, y2]]), string or x/y dict."""
    if isinstance(value, dict):
        low = lower_keys(value)
        names = _BOX_NAMES + (("left", "top", "right", "bottom"),) if n == 4 else (("x", "y"), ("u", "v"))
        for keys in names:
            if all(k in low for k in keys):
                return [number(low[k], what, index) for k in keys]
        raise ParseError(
            f"action {index}: {what} as an object must have keys {', '.join(names[0])}, got {short(sorted(low))}",
            index=index,
            rule=f"{what}_numbers",
        )
    if isinstance(value, str):
        flat: list[Any] = NUMBER_RE.findall(value)
    elif isinstance(value, (list, tuple)):
        flat = []
        for v in value:
            if isinstance(v, (list, tuple)):
                flat.extend(v)
            else:
                flat.append(v)
    else:
        raise ParseError(
            f"action {index}: {what} must be a list of {n} numbers, got {short(value)}",
            index=index,
            rule=f"{what}_numbers",
        )
    if len(flat) != n:
        raise ParseError(
            f"action {index}: {what} must have {n} numbers, got {len(flat)}: {short(value)}",
            index=index,
            rule=f"{what}_length",
        )
    return [number(v, what, index) for v in flat]


def count_numbers(value: Any) -> int:
    """How many coordinates a value holds (nested pairs flattened; dicts by their x/y keys; names: 0)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)):
        return 1
    if isinstance(value, str):
        return len(NUMBER_RE.findall(value)) if _NUMBERS_ONLY.fullmatch(value) else 0
    if isinstance(value, (list, tuple)):
        return sum(
            count_numbers(v) if isinstance(v, (list, tuple)) else int(not isinstance(v, (dict, bool))) for v in value
        )
    if isinstance(value, dict):
        low = lower_keys(value)
        if any(all(k in low for k in keys) for keys in _BOX_NAMES[:2]):
            return 4
        return 2 if "x" in low and "y" in low else 0
    return 0


def all_fractions(items: list) -> bool:
    """True when every number under a generic coordinate key is in [0, 1] and some are fractional."""
    found: list[float] = []
    for i, raw in enumerate(items):
        if not isinstance(raw, dict):
            return False
        try:
            item = flatten_item(raw, i)
        except ParseError:
            return False
        for key in ("bbox", "box", "bounding_box", "point", "coordinates", "coords", "position", "location"):
            value = item.get(key)
            if isinstance(value, (list, tuple)):
                for v in value:
                    for x in v if isinstance(v, (list, tuple)) else [v]:
                        if isinstance(x, bool) or not isinstance(x, (int, float)):
                            return False
                        found.append(_as_float(x))
    return len(found) >= 2 and all(0.0 <= x <= 1.0 for x in found) and any(0.0 < x < 1.0 for x in found)


def plan_convention(items: list, convention: str) -> str:
    """Convention for generic keys (``bbox``, ``point``) under ``auto``: by the distinctive keys present."""
    if convention != "auto":
        return convention
    keys: set[str] = set()
    for item in items:
        if isinstance(item, dict) and not isinstance(item, CallItem):
            low = lower_keys(item)
            keys.update(low)
            for arg_key in ARG_KEYS:
                if isinstance(low.get(arg_key), dict):
                    keys.update(lower_keys(low[arg_key]))
    return detect_convention(keys, convention)


# ------------------------------------------------------------------------------------------------
# item -> action
# ------------------------------------------------------------------------------------------------
def flatten_item(raw: Any, index: int) -> dict:
    """A raw item as a lower-cased dict with argument sub-objects merged in (a CallItem as it is)."""
    if isinstance(raw, CallItem):
        return raw
    if isinstance(raw, str):
        calls = list(call_items(raw))
        if len(calls) != 1:
            raise ParseError(
                f"action {index}: cannot read {short(raw)} as one action like 'grasp(object, [x1, y1, x2, y2])'",
                index=index,
                rule="action_text",
            )
        return calls[0]
    if not isinstance(raw, dict):
        raise ParseError(
            f"action {index}: expected an object with a type, got {type(raw).__name__} {short(raw, 60)}",
            index=index,
            rule="action_object",
        )
    low = lower_keys(raw)
    if len(low) == 1 and norm_type(next(iter(low))) is not None:  # {"grasp": {...}} or {"grasp": [..]}
        verb, val = next(iter(low.items()))
        low = {"type": verb}
        if isinstance(val, dict):
            low.update(lower_keys(val))
        elif isinstance(val, (list, str)):
            low["coordinates"] = val
    if isinstance(low.get("action"), dict):  # {"action": {"type": ...}}
        inner = lower_keys(low.pop("action"))
        low = {**inner, **low}
    for key in ARG_KEYS:
        if isinstance(low.get(key), dict):
            for k, v in lower_keys(low.pop(key)).items():
                low.setdefault(k, v)
    return low


def _name(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        low = lower_keys(value)
        for k in ("name", "label", "object"):
            if isinstance(low.get(k), str):
                return " ".join(low[k].split())
    return ""


def _kind(item: dict, index: int) -> tuple[str, str | None]:
    raw_type, type_key = type_of(item)
    if raw_type is None:
        keys = sorted(k for k in item if not k.startswith("_"))
        raise ParseError(
            f"action {index}: no action type (expected a 'type' of grasp, place, open or close), "
            f"got keys {short(keys)}",
            index=index,
            rule="type",
        )
    kind = norm_type(raw_type)
    if kind is None:
        raise ParseError(
            f"action {index}: unknown action type {short(raw_type)} (expected grasp, place, open or close; "
            "pick and put are read as grasp and place)",
            index=index,
            rule="type",
        )
    return kind, type_key


def _names(item: dict, kind: str, type_key: str | None) -> tuple[str, str]:
    obj = next((_name(item[k]) for k in OBJECT_KEYS if k != type_key and k in item and _name(item[k])), "")
    target = next(
        (_name(item[k]) for k in TARGET_KEYS if k in item and isinstance(item[k], (str, dict)) and _name(item[k])), ""
    )
    if kind != "place" and not obj and target:
        obj, target = target, ""  # {"action": "grasp", "target": "spoon"}: the thing grasped
    return obj, target


Coords = tuple[Any, str]  # (raw numbers, convention)


def _call_coords(item: CallItem, kind: str, index: int, convention: str) -> tuple[Coords | None, Coords | None]:
    """Box and point of an action read from a call line; its bare numbers are pixels unless a convention is given."""
    call_conv = convention if convention != "auto" else "pixel"
    box = (
        (item["_box"], key_convention(item.get("_box_key", "bbox"), convention, call_conv)) if "_box" in item else None
    )
    point = (
        (item["_point"], key_convention(item.get("_point_key", "point"), convention, call_conv))
        if "_point" in item
        else None
    )
    coords = item.get("_coords")
    if coords is not None:
        if len(coords) == 4 and box is None:
            box = (coords, call_conv)
        elif len(coords) == 2 and point is None:
            point = (coords, call_conv)
        else:
            raise ParseError(
                f"action {index}: {kind}(...) has {len(coords)} coordinates, expected 4 (box) or 2 (point)",
                index=index,
                rule="coords_length",
            )
    return box, point


def _first_box_key(item: dict, convention: str, plan_conv: str) -> Coords | None:
    key = next((k for k in BOX_KEYS if k in item and item[k] is not None and item[k] != []), None)
    return None if key is None else (item[key], key_convention(key, convention, plan_conv))


def _point_or_box_by_key(
    item: dict, convention: str, plan_conv: str, box: Coords | None
) -> tuple[Coords | None, Coords | None]:
    """The first point key with a value; a key that may hold either (``coordinates``) holding 4 numbers is the
    box when there is none yet."""
    for key in POINT_KEYS:
        value = item.get(key)
        if value is None or value == []:
            continue
        conv = key_convention(key, convention, plan_conv)
        if key in EITHER_KEYS:
            count = count_numbers(value)
            if count == 4 and box is None:  # "coordinates": [x1, y1, x2, y2]
                box = (value, conv)
                continue
            if count != 2:
                continue  # a name ("location": "plate") or something else
        return box, (value, conv)
    return box, None


def _corner_keys(item: dict, plan_conv: str) -> tuple[Coords | None, Coords | None]:
    """``{"x1": .., "y1": .., "x2": .., "y2": ..}`` (a box) or ``{"x": .., "y": ..}`` (a point) in the action itself."""
    keys = next((keys for keys in _BOX_NAMES if all(k in item for k in keys)), None)
    if keys is not None:
        return ([item[k] for k in keys], plan_conv), None
    if "x" in item and "y" in item:
        return None, ([item["x"], item["y"]], plan_conv)
    return None, None


def _keyed_coords(item: dict, convention: str, plan_conv: str) -> tuple[Coords | None, Coords | None]:
    """Box and point of an action object, by its keys; a key's count of numbers decides box or point."""
    box, point = _point_or_box_by_key(item, convention, plan_conv, _first_box_key(item, convention, plan_conv))
    # a box key holding a point, or a point key holding a box: the count of numbers decides
    if box is not None and point is None and count_numbers(box[0]) == 2:
        return None, box
    if point is not None and box is None and count_numbers(point[0]) == 4:
        return point, None
    if box is None and point is None:
        return _corner_keys(item, plan_conv)
    return box, point


def to_action(
    raw: Any,
    index: int,
    convention: str,
    plan_conv: str,
    model_size: tuple[int, int],
    image_size: tuple[int, int],
    warnings: list[str],
) -> GroundedAction:
    """One raw item -> a GroundedAction in pixels of the original image (warnings appended for any fix)."""
    item = flatten_item(raw, index)
    kind, type_key = _kind(item, index)
    obj, target = _names(item, kind, type_key)
    if isinstance(item, CallItem):
        box, point = _call_coords(item, kind, index, convention)
    else:
        box, point = _keyed_coords(item, convention, plan_conv)
    label = f"action {index} ({kind}{' ' + (obj if len(obj) <= 60 else obj[:57] + '...') if obj else ''})"
    # Relative conventions map straight to the original image; pixels refer to the image the model saw.
    bbox_px = point_px = None
    if box is not None:
        px = answer_box_to_px(numbers(box[0], 4, "bbox", index), box[1], image_size, model_size)
        bbox_px = checked_box(px, index, label, image_size, warnings)
    if point is not None:
        px = answer_point_to_px(numbers(point[0], 2, "point", index), point[1], image_size, model_size)
        point_px = checked_point(px, index, label, image_size, warnings)
    if kind == "place":
        if point_px is None and bbox_px is not None:
            point_px = ((bbox_px[0] + bbox_px[2]) / 2.0, (bbox_px[1] + bbox_px[3]) / 2.0)
            warnings.append(f"{label}: place had a box but no point; used the box centre {fmt(point_px)}")
        bbox_px = None
    else:
        point_px = None  # a grasp/open/close is grounded by its box; a stray point carries no meaning here
    return GroundedAction(type=kind, object=obj, target=target, bbox=bbox_px, point=point_px)


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------
def fmt(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.1f}" if abs(v) < 1e9 else f"{v:.3g}" for v in values) + "]"


def checked_box(
    box: Sequence[float], index: int, label: str, image_size: tuple[int, int], warnings: list[str]
) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = box
    if not all(math.isfinite(v) for v in box):  # finite model numbers scaled past the float range
        raise ParseError(f"{label}: bbox {fmt(box)} px is not finite after scaling", index=index, rule="bbox_finite")
    if x1 > x2 or y1 > y2:
        # not guessed: the plan model forbids it, and which corner the model meant is unknown
        raise ParseError(
            f"{label}: bbox {fmt(box)} px has x1 > x2 or y1 > y2 (expected [x1, y1, x2, y2] with the "
            "top-left corner first)",
            index=index,
            rule="bbox_order",
        )
    if x1 == x2 or y1 == y2:
        raise ParseError(
            f"{label}: degenerate bbox {fmt(box)} px (zero width or height)", index=index, rule="bbox_degenerate"
        )
    w, h = image_size
    if x2 <= 0 or y2 <= 0 or x1 >= w or y1 >= h:
        raise ParseError(
            f"{label}: bbox {fmt(box)} px lies wholly outside the {w}x{h} image", index=index, rule="bbox_outside"
        )
    clipped = (max(0.0, x1), max(0.0, y1), min(float(w), x2), min(float(h), y2))
    if max(abs(a - b) for a, b in zip(clipped, (x1, y1, x2, y2))) > CLIP_SILENT_PX:
        warnings.append(
            f"{label}: bbox {fmt((x1, y1, x2, y2))} px extends outside the {w}x{h} image; clipped to {fmt(clipped)}"
        )
    return clipped


def checked_point(
    point: Sequence[float], index: int, label: str, image_size: tuple[int, int], warnings: list[str]
) -> tuple[float, float]:
    x, y = point
    w, h = image_size
    if 0 <= x <= w and 0 <= y <= h:
        return (x, y)
    if -CLIP_SILENT_PX <= x <= w + CLIP_SILENT_PX and -CLIP_SILENT_PX <= y <= h + CLIP_SILENT_PX:
        return (min(max(x, 0.0), float(w)), min(max(y, 0.0), float(h)))  # float noise of the scaling
    mx, my = POINT_CLIP_MARGIN * w, POINT_CLIP_MARGIN * h
    if -mx <= x <= w + mx and -my <= y <= h + my:
        clipped = (min(max(x, 0.0), float(w)), min(max(y, 0.0), float(h)))
        warnings.append(f"{label}: point {fmt(point)} px is just outside the {w}x{h} image; clipped to {fmt(clipped)}")
        return clipped
    raise ParseError(
        f"{label}: point {fmt(point)} px lies outside the {w}x{h} image", index=index, rule="point_outside"
    )
