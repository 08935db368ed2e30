"""Robust parsing of raw VLM answers into canonical grounded plans (pixels of the original image).

Survives what real models emit: ``<think>`` blocks, markdown fences, prose around the JSON, a top-level
list or an object holding ``actions``/``plan``/``steps`` (or numbered steps), keys ``type``/``action``/
``primitive`` in any case, pick->grasp and put->place (and grasp_object, open_drawer...), function-call lines
(``1. grasp(spoon, [120, 200, 180, 260])``), plain numbered lines, YAML lists, markdown tables, trailing
commas, comments, single quotes, numbers written as strings. Coordinates are read in the convention passed;
``auto`` decides by the keys present (``bbox_2d``/``point_2d``: Qwen3 0-1000, ``box_2d``: Gemini
[ymin, xmin, ymax, xmax] with ``point`` [y, x], anything else pixels, or fractions when every number is in
[0, 1]); function-call lines are read as pixels unless a convention is given."""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError
from grounded_planner.vlm.conventions import PARSE_CONVENTIONS, box_to_px, check_convention, point_to_px

# Longest answer we read; real plans are a few kB, this bounds the work on pathological input.
MAX_TEXT_CHARS = 200_000
# A point this close outside the image (fraction of the side) is clipped with a warning; farther is an error.
POINT_CLIP_MARGIN = 0.02
# Deepest bracket nesting tried as JSON (a plan needs about 5).
MAX_JSON_DEPTH = 32
# Longest function call read (``grasp(...)`` with its arguments), in characters.
MAX_CALL_CHARS = 600
# Clipping by less than this (float noise of scaling) is not worth a warning.
CLIP_SILENT_PX = 1e-6

TYPE_SYNONYMS = {
    "grasp": "grasp", "grab": "grasp", "pick": "grasp", "pick_up": "grasp", "pickup": "grasp",
    "take": "grasp", "grip": "grasp", "pick_and_hold": "grasp",
    "place": "place", "put": "place", "put_down": "place", "putdown": "place", "place_on": "place",
    "put_on": "place", "drop": "place", "release": "place", "place_at": "place",
    "open": "open", "close": "close", "shut": "close",
}
_TYPE_KEYS = ("type", "action", "primitive", "action_type", "actiontype", "skill", "op", "verb", "function", "name",
              "command", "step", "action_name", "primitive_type")
_OBJECT_KEYS = ("object", "obj", "object_name", "item", "label", "target_object", "what", "name", "entity")
_TARGET_KEYS = ("target", "destination", "receptacle", "place_on", "on", "to", "target_name", "where", "location",
                "surface", "goal", "target_location")
_BOX_KEYS = ("bbox_2d", "box_2d", "bbox", "bbox_px", "box", "bounding_box", "boundingbox", "bounding_box_2d", "rect")
_POINT_KEYS = ("point_2d", "point", "point_px", "place_point", "target_point", "point_xy", "xy", "location",
               "position", "target_location", "target", "coordinates", "coords", "pos", "place_location")
# Keys that may hold a box or a point: decided by how many numbers they hold.
_EITHER_KEYS = ("coordinates", "coords", "location", "position", "target_location", "pos", "place_location", "target")
_ARG_KEYS = ("args", "arguments", "parameters", "params", "parameter", "argument", "inputs")
_CONTAINER_KEYS = ("actions", "plan", "steps", "action_plan", "grounded_plan", "primitives", "sequence",
                   "action_sequence", "subactions", "sub_actions", "task_plan")
_REASON_KEYS = ("reason", "explanation", "rationale", "note", "notes", "comment", "message", "why")

_VERB_PATTERN = "|".join(sorted((re.escape(k).replace("_", "[ _-]?") for k in TYPE_SYNONYMS), key=len, reverse=True))
_CALL_RE = re.compile(rf"(?<![A-Za-z_])({_VERB_PATTERN})\s*\(", re.IGNORECASE)
_NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class ParseError(ValueError):
    """No valid plan can be read from a model answer.

    Attributes
    ----------
    reason : str
        One line saying what is wrong (no plan found, unknown type, box outside the image, ...).
    index : int or None
        Index of the offending action, or None for answer-level problems.
    rule : str
        Short machine-readable name of the problem (``no_plan``, ``type``, ``bbox_outside``, ...).
    """

    def __init__(self, reason: str, *, index: int | None = None, rule: str = "parse"):
        reason = " ".join(str(reason).split())  # always one line: the CLI prints it on stderr as is
        self.reason = reason
        self.index = index
        self.rule = rule
        super().__init__(reason)


# ------------------------------------------------------------------------------------------------
# text -> candidate values
# ------------------------------------------------------------------------------------------------
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)


def strip_thinking(text: str) -> tuple[str, list[str]]:
    """Remove reasoning blocks; return the answer text and warnings.

    A lone ``</think>`` means the opening tag was part of the chat template: everything before it is
    reasoning. An unclosed ``<think>`` (answer cut off inside its reasoning) keeps the text after the tag,
    with a warning, because some servers drop the closing tag.
    """
    warnings: list[str] = []
    body = _THINK_BLOCK.sub(" ", text)
    closes = list(_THINK_CLOSE.finditer(body))
    if closes:
        body = body[closes[-1].end():]
    opened = _THINK_OPEN.search(body)
    if opened:
        warnings.append("the answer has an unclosed <think> block; read the text after it")
        body = body[:opened.start()] + " " + body[opened.end():]
    return body, warnings


def _match_brackets(text: str, unclosed: list[int] | None = None) -> dict[int, tuple[int, int]]:
    """Map the index of every balanced opening ``[``/``{`` to (closing index, nesting depth), in one pass;
    openers still open at the end go to ``unclosed`` (a cut-off answer).

    Double-quoted strings count only inside brackets, so apostrophes and quotes in prose do not
    derail the matching.
    """
    pairs: dict[int, tuple[int, int]] = {}
    stack: list[list] = []  # [start, bracket, deepest child depth]
    closing = {"]": "[", "}": "{"}
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            elif ch == "\n" and len(stack) == 0:
                in_string = False
            continue
        if ch in "[{":
            stack.append([i, ch, 0])
        elif ch in "]}":
            if stack and stack[-1][1] == closing[ch]:
                start, _, child_depth = stack.pop()
                pairs[start] = (i, child_depth + 1)
                if stack:
                    stack[-1][2] = max(stack[-1][2], child_depth + 1)
            else:
                stack.clear()  # mismatched: nothing open so far can be a valid value
        elif ch == '"' and stack:
            in_string = True
    if unclosed is not None:
        unclosed.extend(entry[0] for entry in stack)
    return pairs


_TRAILING_COMMA = re.compile(r",\s*([\]}])")
# // line comments and /* block */ comments, when no quote follows on the line (not inside a string)
_COMMENT = re.compile(r"/\*.*?\*/|(?<![:\w])//[^\n\"]*$", re.DOTALL | re.MULTILINE)
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_ ]*?)\s*:")
_SMART_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_FAIL = object()


def _loads_lenient(chunk: str) -> Any:
    """Decode JSON, or JSON with trailing commas / single quotes / bare keys / Python literals."""
    try:
        return json.loads(chunk)
    except (ValueError, RecursionError):
        pass
    fixed = _TRAILING_COMMA.sub(r"\1", _COMMENT.sub("", chunk.translate(_SMART_QUOTES)))
    try:
        return json.loads(fixed)
    except (ValueError, RecursionError):
        pass
    try:
        py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", fixed)))
        value = ast.literal_eval(py)
        if isinstance(value, (list, dict, tuple)):
            return list(value) if isinstance(value, tuple) else value
    except Exception:  # literal_eval raises many kinds (SyntaxError, ValueError, MemoryError, RecursionError)
        pass
    try:
        return json.loads(_BARE_KEY.sub(lambda m: f'{m.group(1)}"{m.group(2).strip()}":', fixed))
    except (ValueError, RecursionError):
        return _FAIL


def _json_values(text: str) -> Iterator[tuple[int, int, Any]]:
    """Yield (start, end, value) of decodable top-level JSON-ish values, outermost first, left to right."""
    pairs = _match_brackets(text)
    covered_until = -1
    for start in sorted(pairs):
        if start <= covered_until:
            continue
        end, depth = pairs[start]
        if depth > MAX_JSON_DEPTH:
            continue  # no plan nests this deep; decoding it would only cost time (look inside instead)
        value = _loads_lenient(text[start:end + 1])
        if value is _FAIL:
            continue  # look inside it: prose in brackets may hold a value
        covered_until = end
        yield start, end, value


# ------------------------------------------------------------------------------------------------
# values -> raw action items
# ------------------------------------------------------------------------------------------------
def _lower_keys(d: dict) -> dict:
    return {re.sub(r"[\s\-]+", "_", str(k).strip().lower()): v for k, v in d.items()}


def norm_type(value: Any) -> str | None:
    """Canonical action type of a model's verb (any case, pick->grasp, put->place), or None if unknown."""
    if not isinstance(value, str):
        return None
    key = re.sub(r"[\s\-]+", "_", value.strip().lower()).strip("_().:")
    if key in TYPE_SYNONYMS:
        return TYPE_SYNONYMS[key]
    # "grasp_object", "open_drawer", "pick_up_spoon", "grasp the spoon": the verb comes first
    parts = key.split("_")
    if len(parts) > 1:
        if parts[:2] in (["pick", "up"], ["put", "down"]):
            return TYPE_SYNONYMS["_".join(parts[:2])]
        return TYPE_SYNONYMS.get(parts[0])
    return None


def _type_of(item: dict) -> tuple[str | None, str | None]:
    """(raw type string, key it came from) of a lower-cased action dict."""
    for key in _TYPE_KEYS:
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            if key in ("name", "function", "command", "step") and norm_type(value) is None:
                continue  # "name" is often the object's name
            return value, key
    return None, None


def _looks_like_action(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_CALL_RE.search(value))
    if not isinstance(value, dict):
        return False
    low = _lower_keys(value)
    if _type_of(low)[0] is not None:
        return True
    if len(low) == 1 and norm_type(next(iter(low))) is not None:
        return True
    return any(k in low for k in _BOX_KEYS + ("point_2d", "point"))


def _container_items(value: Any, depth: int = 0) -> tuple[list | None, str]:
    """(action items, reason) of a plan-like value, or (None, "") when it holds no plan."""
    if depth > 3:
        return None, ""
    if isinstance(value, list):
        if not value:
            return [], ""
        if any(_looks_like_action(v) for v in value):
            return value, ""
        if len(value) == 1:  # [{"actions": [...]}]
            return _container_items(value[0], depth + 1)
        return None, ""
    if isinstance(value, dict):
        low = _lower_keys(value)
        reason = next((str(low[k]) for k in _REASON_KEYS if isinstance(low.get(k), str)), "")
        for key in _CONTAINER_KEYS:
            if key not in low:
                continue
            inner = low[key]
            if isinstance(inner, str):
                calls = list(_call_items(inner))
                if calls or not inner.strip():
                    return calls, reason
                continue
            if inner is None:
                return [], reason
            items, inner_reason = _container_items(inner, depth + 1)
            if items is not None:
                return items, reason or inner_reason
        if _looks_like_action(value):
            return [value], reason
        steps = [v for k, v in value.items() if k not in _REASON_KEYS]
        if steps and all(isinstance(v, dict) and _looks_like_action(v) for v in steps):
            return steps, reason  # {"1": {...}, "2": {...}} or {"step_1": {...}, ...}
    return None, ""


def _split_args(text: str) -> list[str]:
    """Split call arguments on commas outside brackets and quotes."""
    args, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'" and (not "".join(current).strip() or "".join(current).rstrip().endswith(("=", ":"))):
            quote = ch  # a quote opens a string only at the start of an argument (kid's cup is a name)
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    if "".join(current).strip():
        args.append("".join(current).strip())
    return args


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        if value[0] == '"':
            try:
                return " ".join(str(json.loads(value)).split())
            except ValueError:
                pass
        return " ".join(value[1:-1].split())
    return " ".join(value.split())


def _call_items(text: str) -> Iterator[dict]:
    """Function-call actions in text: ``grasp(spoon, [x1, y1, x2, y2])``, ``place(spoon, plate, [x, y])``."""
    pos = 0
    while True:
        m = _CALL_RE.search(text, pos)
        if not m:
            return
        open_at = m.end() - 1
        depth, end = 0, -1
        for j in range(open_at, min(len(text), open_at + MAX_CALL_CHARS)):
            if text[j] in "([{":
                depth += 1
            elif text[j] in ")]}":
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if end < 0:
            if not _CALL_RE.search(text, m.end()) and ")" not in text[open_at:]:
                raise ParseError(f"the answer is cut off inside {m.group(0)}...: the last action never closes "
                                 "(raise max_tokens?)", rule="truncated")
            pos = m.end()
            continue
        pos = end + 1
        args = _split_args(text[open_at + 1:end])
        if not args:
            continue
        item: dict[str, Any] = {"type": m.group(1), "_call": True}
        names: list[str] = []
        coords: list[Any] = []
        for arg in args:
            kw = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.+)$", arg, re.DOTALL)
            key, val = (kw.group(1).lower(), kw.group(2).strip()) if kw else (None, arg)
            if val[:1] in "[(":
                numbers = _NUMBER_RE.findall(val)
                if key in ("bbox", "bbox_2d", "box_2d", "box", "bounding_box"):
                    item["_box"], item["_box_key"] = numbers, key
                elif key in ("point", "point_2d", "xy", "location", "position"):
                    item["_point"], item["_point_key"] = numbers, key
                else:
                    coords.extend(numbers)
            elif _NUMBER_RE.fullmatch(val):
                coords.append(val)
            else:
                name = _unquote(val.strip())
                if key in ("target", "destination", "to", "on", "location", "receptacle"):
                    item["target"] = name
                elif key in ("object", "obj", "item", "name", "label"):
                    item["object"] = name
                elif name:
                    names.append(name)
        if not coords and "_box" not in item and "_point" not in item:
            # "grasp(spoon) at [120, 200, 180, 260]": coordinates after the call, on the same line
            tail = text[end + 1:].split("\n", 1)[0]
            following = _CALL_RE.search(tail)
            tail = tail[:following.start()] if following else tail
            after = re.search(r"[\[(]([-+\d.,\s]*)[\])]", tail)
            if after and len(_NUMBER_RE.findall(after.group(1))) in (2, 4):
                coords = _NUMBER_RE.findall(after.group(1))
        if coords:
            item["_coords"] = coords
        if names and norm_type(item["type"]) == "place" and len(names) == 1 and "target" not in item:
            item["target"] = names.pop(0)  # place(plate, [x, y]): the one name is where it goes
        if names:
            if "object" not in item:
                item["object"] = names.pop(0)
            if names and "target" not in item:
                item["target"] = names.pop(0)
        yield item


_LINE_RE = re.compile(
    rf"^[ \t]*(?:[-*\u2022][ \t]*|(?:step[ \t]*)?\d+[ \t]*[.):][ \t]*)?({_VERB_PATTERN})\b[ \t:]*([^\n\[\]()]*?)"
    r"[ \t]*[\[(]([-+\d., \t]+)[\])][ \t.]*$", re.IGNORECASE | re.MULTILINE)
_PLACE_SPLIT = re.compile(r"\s+(?:on|onto|in|into|to|inside|->)\s+", re.IGNORECASE)


def _line_items(text: str) -> list[dict]:
    """Plain lines such as ``1. grasp the spoon at [120, 200, 180, 260]`` / ``2. place on plate [300, 220]``."""
    items = []
    for m in _LINE_RE.finditer(text):
        words = re.sub(r"\s+(?:at|@)\s*:?$", "", " " + m.group(2).strip(" :-")).strip()
        item: dict[str, Any] = {"type": m.group(1), "_call": True, "_coords": _NUMBER_RE.findall(m.group(3))}
        if norm_type(m.group(1)) == "place":
            parts = _PLACE_SPLIT.split(" " + words + " ", maxsplit=1)
            obj, target = (parts[0], parts[1]) if len(parts) == 2 else ("", parts[0])
            item["object"], item["target"] = _strip_article(obj), _strip_article(target)
        else:
            item["object"] = _strip_article(words)
        items.append(item)
    return items


def _strip_article(words: str) -> str:
    return re.sub(r"^(?:the|a|an)\s+", "", " ".join(words.split()), flags=re.IGNORECASE)


@dataclass
class _Found:
    items: list
    reason: str
    prose: str


def _find_plan(body: str) -> _Found | None:
    """The plan in an answer: the first JSON plan (or JSON action objects, one a line), else a YAML list,
    a markdown table, function-call lines, plain numbered lines, an empty JSON plan; None when none.

    The other forms are looked for only outside JSON plans, so a reason that quotes
    ``grasp(object, [...])`` is not read as an action.
    """
    empties: list[_Found] = []
    singles: list[tuple[int, int, dict]] = []
    outside: list[str] = []  # the text with plan-like JSON values cut out
    last = 0
    for start, end, value in _json_values(body):
        items, reason = _container_items(value)
        if items is None:
            continue
        outside.append(body[last:start])
        last = end + 1
        if len(items) == 1 and isinstance(value, dict) and items[0] is value:
            singles.append((start, end, value))  # one action object: maybe one of several JSON lines
            continue
        if items:
            return _Found(items, reason, _prose(body[:start] + " " + body[end + 1:]))
        empties.append(_Found([], reason, _prose(body[:start] + " " + body[end + 1:])))
    outside.append(body[last:])
    if singles:
        unclosed: list[int] = []
        _match_brackets(body, unclosed)
        if unclosed and min(unclosed) < singles[0][0]:
            # complete actions inside a list that never closes: the answer was cut off (max_tokens?)
            raise ParseError(f"the answer is cut off: a JSON list or object opened at character {min(unclosed)} never "
                             "closes, so actions may be missing (raise max_tokens?)", rule="truncated")
        return _Found([v for _, _, v in singles], "", _prose(" ".join(outside)))
    rest = " \n".join(outside)
    for value in _yaml_values(rest):
        items, reason = _container_items(value)
        if items and all(isinstance(v, dict) for v in items):
            return _Found(items, reason, "")
    table = _table_items(rest)
    if table:
        return _Found(table, "", "")
    calls = list(_call_items(rest))
    if calls:
        return _Found(calls, "", "")
    lines = _line_items(rest)
    if lines:
        return _Found(lines, "", "")
    if empties:
        return empties[0]
    return None


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n(.*?)```", re.DOTALL)


def _yaml_values(text: str) -> Iterator[Any]:
    """Values of YAML blocks (fenced, else the whole text) for answers written as YAML lists of actions."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "yaml", "yml")]
    if not blocks and re.search(r"^\s*-\s+\w+\s*:", text, re.MULTILINE):
        blocks = [text]
    for block in blocks:
        try:
            import yaml

            yield yaml.safe_load(block)
        except Exception:  # yaml raises many kinds on prose; a failed block is simply not a plan
            continue


def _table_items(text: str) -> list[dict]:
    """Rows of a markdown table (``| step | action | object | bbox |``) as action dicts."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if line.strip().startswith("|")]
    rows = [[cell.strip() for cell in row] for row in rows]
    rows = [row for row in rows if not all(re.fullmatch(r":?-{2,}:?", cell) for cell in row if cell)]
    if len(rows) < 2:
        return []
    # a column of coordinates may hold boxes and points ("BBox / Point"): its numbers decide
    header = ["coordinates" if re.search(r"box|point|coord|location|position|pixel", h, re.IGNORECASE) else h
              for h in rows[0]]
    items = [dict(zip(header, row)) for row in rows[1:] if len(row) == len(header)]
    return items if items and all(_looks_like_action(item) for item in items) else []


def _prose(text: str) -> str:
    text = re.sub(r"```[A-Za-z]*", " ", text)
    text = " ".join(text.split()).strip(" :.-")
    return text[:300]


# ------------------------------------------------------------------------------------------------
# raw items -> canonical actions
# ------------------------------------------------------------------------------------------------
def _number(value: Any, what: str, index: int) -> float:
    if isinstance(value, bool):
        raise ParseError(f"action {index}: {what} holds a boolean {value!r}, expected a number", index=index, rule=f"{what}_numbers")
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str) and _NUMBER_RE.search(value):
        out = float(_NUMBER_RE.search(value).group(0))
    else:
        raise ParseError(f"action {index}: {what} holds {value!r}, expected a number", index=index, rule=f"{what}_numbers")
    if not math.isfinite(out):
        raise ParseError(f"action {index}: {what} holds a non-finite number {value!r}", index=index, rule=f"{what}_finite")
    return out


def _numbers(value: Any, n: int, what: str, index: int) -> list[float]:
    """``n`` numbers from a list, nested list ([[x1, y1], [x2, y2]]), string or x/y dict."""
    if isinstance(value, dict):
        low = _lower_keys(value)
        names = (("x1", "y1", "x2", "y2"), ("xmin", "ymin", "xmax", "ymax"), ("x_min", "y_min", "x_max", "y_max"),
                 ("left", "top", "right", "bottom")) if n == 4 else (("x", "y"), ("u", "v"))
        for keys in names:
            if all(k in low for k in keys):
                return [_number(low[k], what, index) for k in keys]
        raise ParseError(f"action {index}: {what} as an object must have keys {', '.join(names[0])}, got {sorted(low)}",
                         index=index, rule=f"{what}_numbers")
    if isinstance(value, str):
        flat: list[Any] = _NUMBER_RE.findall(value)
    elif isinstance(value, (list, tuple)):
        flat = []
        for v in value:
            if isinstance(v, (list, tuple)):
                flat.extend(v)
            else:
                flat.append(v)
    else:
        raise ParseError(f"action {index}: {what} must be a list of {n} numbers, got {value!r}", index=index, rule=f"{what}_numbers")
    if len(flat) != n:
        raise ParseError(f"action {index}: {what} must have {n} numbers, got {len(flat)}: {value!r}", index=index, rule=f"{what}_length")
    return [_number(v, what, index) for v in flat]


def _all_fractions(items: list) -> bool:
    """True when every number under a generic coordinate key is in [0, 1] and some are fractional."""
    numbers: list[float] = []
    for i, raw in enumerate(items):
        if not isinstance(raw, dict):
            return False
        try:
            item = _flatten_item(raw, i)
        except ParseError:
            return False
        for key in ("bbox", "box", "bounding_box", "point", "coordinates", "coords", "position", "location"):
            value = item.get(key)
            if isinstance(value, (list, tuple)):
                for v in value:
                    for x in (v if isinstance(v, (list, tuple)) else [v]):
                        if isinstance(x, bool) or not isinstance(x, (int, float)):
                            return False
                        numbers.append(float(x))
    return len(numbers) >= 2 and all(0.0 <= x <= 1.0 for x in numbers) and any(0.0 < x < 1.0 for x in numbers)


def _plan_convention(items: list, convention: str) -> str:
    """Convention for generic keys (``bbox``, ``point``) under ``auto``: by the distinctive keys present."""
    if convention != "auto":
        return convention
    keys: set[str] = set()
    for item in items:
        if isinstance(item, dict):
            low = _lower_keys(item)
            keys.update(low)
            for arg_key in _ARG_KEYS:
                if isinstance(low.get(arg_key), dict):
                    keys.update(_lower_keys(low[arg_key]))
    if "box_2d" in keys:
        return "gemini"
    if "bbox_2d" in keys or "point_2d" in keys:
        return "qwen3"
    return "pixel"


def _key_convention(key: str, convention: str, plan_convention: str) -> str:
    if convention != "auto":
        return convention
    if key in ("bbox_2d", "point_2d"):
        return "qwen3"
    if key == "box_2d":
        return "gemini"
    if key in ("bbox_px", "point_px"):
        return "pixel"
    return plan_convention


def _flatten_item(raw: Any, index: int) -> dict:
    """A raw item as a lower-cased dict with argument sub-objects merged in."""
    if isinstance(raw, str):
        calls = list(_call_items(raw))
        if len(calls) != 1:
            raise ParseError(f"action {index}: cannot read {raw[:80]!r} as one action like 'grasp(object, [x1, y1, x2, y2])'",
                             index=index, rule="action_text")
        return calls[0]
    if not isinstance(raw, dict):
        raise ParseError(f"action {index}: expected an object with a type, got {type(raw).__name__} {str(raw)[:60]!r}",
                         index=index, rule="action_object")
    low = _lower_keys(raw)
    if len(low) == 1 and norm_type(next(iter(low))) is not None:  # {"grasp": {...}} or {"grasp": [..]}
        verb, val = next(iter(low.items()))
        low = {"type": verb}
        if isinstance(val, dict):
            low.update(_lower_keys(val))
        elif isinstance(val, (list, str)):
            low["_coords"] = val
    if isinstance(low.get("action"), dict):  # {"action": {"type": ...}}
        inner = _lower_keys(low.pop("action"))
        low = {**inner, **low}
    for key in _ARG_KEYS:
        if isinstance(low.get(key), dict):
            for k, v in _lower_keys(low.pop(key)).items():
                low.setdefault(k, v)
    return low


def _name(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        low = _lower_keys(value)
        for k in ("name", "label", "object"):
            if isinstance(low.get(k), str):
                return " ".join(low[k].split())
    return ""


def _to_action(raw: Any, index: int, convention: str, plan_convention: str, model_size: tuple[int, int],
               image_size: tuple[int, int], warnings: list[str]) -> GroundedAction:
    item = _flatten_item(raw, index)
    raw_type, type_key = _type_of(item)
    if raw_type is None:
        keys = sorted(k for k in item if not k.startswith("_"))
        raise ParseError(f"action {index}: no action type (expected a 'type' of grasp, place, open or close), "
                         f"got keys {keys}", index=index, rule="type")
    kind = norm_type(raw_type)
    if kind is None:
        raise ParseError(f"action {index}: unknown action type {raw_type!r} (expected grasp, place, open or close; "
                         "pick and put are read as grasp and place)", index=index, rule="type")

    obj = ""
    for key in _OBJECT_KEYS:
        if key != type_key and key in item and _name(item[key]):
            obj = _name(item[key])
            break
    target = ""
    for key in _TARGET_KEYS:
        if key in item and isinstance(item[key], (str, dict)) and _name(item[key]):
            target = _name(item[key])
            break

    if kind != "place" and not obj and target:
        obj, target = target, ""  # {"action": "grasp", "target": "spoon"}: the thing grasped
    is_call = bool(item.get("_call"))
    call_conv = convention if convention != "auto" else "pixel"
    box_raw, box_conv, point_raw, point_conv = None, call_conv, None, call_conv
    if is_call:
        coords = item.get("_coords")
        box_raw = item.get("_box")
        point_raw = item.get("_point")
        if box_raw is not None and convention == "auto":
            box_conv = _key_convention(item.get("_box_key", "bbox"), convention, call_conv)
        if point_raw is not None and convention == "auto":
            point_conv = _key_convention(item.get("_point_key", "point"), convention, call_conv)
        if coords is not None:
            if len(coords) == 4 and box_raw is None:
                box_raw = coords
            elif len(coords) == 2 and point_raw is None:
                point_raw = coords
            else:
                raise ParseError(f"action {index}: {kind}(...) has {len(coords)} coordinates, expected 4 (box) or 2 (point)",
                                 index=index, rule="coords_length")
    else:
        for key in _BOX_KEYS:
            if key in item and item[key] is not None and item[key] != []:
                box_raw, box_conv = item[key], _key_convention(key, convention, plan_convention)
                break
        for key in _POINT_KEYS:
            value = item.get(key)
            if value is None or value == []:
                continue
            if key in _EITHER_KEYS:
                count = _count_numbers(value)
                if count == 4 and box_raw is None:  # "coordinates": [x1, y1, x2, y2]
                    box_raw, box_conv = value, _key_convention(key, convention, plan_convention)
                    continue
                if count != 2:
                    continue  # a name ("location": "plate") or something else
            point_raw, point_conv = value, _key_convention(key, convention, plan_convention)
            break
        # a box key holding a point, or a point key holding a box: the count of numbers decides
        if box_raw is not None and point_raw is None and _count_numbers(box_raw) == 2:
            box_raw, box_conv, point_raw, point_conv = None, box_conv, box_raw, box_conv
        elif point_raw is not None and box_raw is None and _count_numbers(point_raw) == 4:
            box_raw, box_conv, point_raw, point_conv = point_raw, point_conv, None, point_conv
        if box_raw is None and point_raw is None:
            for keys in (("x1", "y1", "x2", "y2"), ("xmin", "ymin", "xmax", "ymax"), ("x_min", "y_min", "x_max", "y_max")):
                if all(k in item for k in keys):  # {"type": "grasp", "x1": ..., "y1": ..., ...}
                    box_raw, box_conv = [item[k] for k in keys], plan_convention
                    break
            else:
                if "x" in item and "y" in item:
                    point_raw, point_conv = [item["x"], item["y"]], plan_convention
        if box_raw is None and point_raw is None and "_coords" in item:
            coords = item["_coords"]
            n = len(_NUMBER_RE.findall(coords)) if isinstance(coords, str) else len(coords)
            if n == 4:
                box_raw, box_conv = coords, plan_convention
            else:
                point_raw, point_conv = coords, plan_convention

    mw, mh = model_size
    sx, sy = image_size[0] / mw, image_size[1] / mh
    bbox = point = None
    label = f"action {index} ({kind}{' ' + obj if obj else ''})"
    # Relative conventions map straight to the original image; pixels refer to the image the model saw.
    if box_raw is not None:
        numbers = _numbers(box_raw, 4, "bbox", index)
        if box_conv == "unit":
            box = (numbers[0] * image_size[0], numbers[1] * image_size[1], numbers[2] * image_size[0], numbers[3] * image_size[1])
        elif box_conv == "pixel":
            x1, y1, x2, y2 = numbers
            box = (x1 * sx, y1 * sy, x2 * sx, y2 * sy)
        else:
            box = box_to_px(numbers, box_conv, image_size)
        bbox = _checked_box(box, index, label, image_size, warnings)
    if point_raw is not None:
        numbers = _numbers(point_raw, 2, "point", index)
        if point_conv == "unit":
            pt = (numbers[0] * image_size[0], numbers[1] * image_size[1])
        elif point_conv == "pixel":
            pt = (numbers[0] * sx, numbers[1] * sy)
        else:
            pt = point_to_px(numbers, point_conv, image_size)
        point = _checked_point(pt, index, label, image_size, warnings)

    if kind == "place":
        if point is None and bbox is not None:
            point = ((bbox[0] + bbox[2]) / 2.0, (bbox[1] + bbox[3]) / 2.0)
            warnings.append(f"{label}: place had a box but no point; used the box centre {_fmt(point)}")
        bbox = None
    else:
        point = None  # a grasp/open/close is grounded by its box; a stray point carries no meaning here
    return GroundedAction(type=kind, object=obj, target=target, bbox=bbox, point=point)


def _count_numbers(value: Any) -> int:
    """How many coordinates a value holds (nested pairs flattened; dicts by their x/y keys; names: 0)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)):
        return 1
    if isinstance(value, str):
        return len(_NUMBER_RE.findall(value)) if re.fullmatch(r"[\s\[\](),\d.eE+-]*", value) else 0
    if isinstance(value, (list, tuple)):
        return sum(_count_numbers(v) if isinstance(v, (list, tuple)) else int(not isinstance(v, (dict, bool))) for v in value)
    if isinstance(value, dict):
        low = _lower_keys(value)
        if all(k in low for k in ("x1", "y1", "x2", "y2")) or all(k in low for k in ("xmin", "ymin", "xmax", "ymax")):
            return 4
        return 2 if _has_xy(value) else 0
    return 0


def _has_xy(d: dict) -> bool:
    low = _lower_keys(d)
    return "x" in low and "y" in low


def _fmt(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.1f}" for v in values) + "]"


def _checked_box(box: Sequence[float], index: int, label: str, image_size: tuple[int, int],
                 warnings: list[str]) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = box
    if x1 > x2 or y1 > y2:
        # not guessed: the plan model forbids it, and which corner the model meant is unknown
        raise ParseError(f"{label}: bbox {_fmt(box)} px has x1 > x2 or y1 > y2 (expected [x1, y1, x2, y2] with the "
                         "top-left corner first)", index=index, rule="bbox_order")
    if x1 == x2 or y1 == y2:
        raise ParseError(f"{label}: degenerate bbox {_fmt(box)} px (zero width or height)", index=index, rule="bbox_degenerate")
    w, h = image_size
    if x2 <= 0 or y2 <= 0 or x1 >= w or y1 >= h:
        raise ParseError(f"{label}: bbox {_fmt(box)} px lies wholly outside the {w}x{h} image", index=index, rule="bbox_outside")
    clipped = (max(0.0, x1), max(0.0, y1), min(float(w), x2), min(float(h), y2))
    if max(abs(a - b) for a, b in zip(clipped, (x1, y1, x2, y2))) > CLIP_SILENT_PX:
        warnings.append(f"{label}: bbox {_fmt((x1, y1, x2, y2))} px extends outside the {w}x{h} image; clipped to {_fmt(clipped)}")
    return clipped


def _checked_point(point: Sequence[float], index: int, label: str, image_size: tuple[int, int],
                   warnings: list[str]) -> tuple[float, float]:
    x, y = point
    w, h = image_size
    if 0 <= x <= w and 0 <= y <= h:
        return (x, y)
    if -CLIP_SILENT_PX <= x <= w + CLIP_SILENT_PX and -CLIP_SILENT_PX <= y <= h + CLIP_SILENT_PX:
        return (min(max(x, 0.0), float(w)), min(max(y, 0.0), float(h)))  # float noise of the scaling
    mx, my = POINT_CLIP_MARGIN * w, POINT_CLIP_MARGIN * h
    if -mx <= x <= w + mx and -my <= y <= h + my:
        clipped = (min(max(x, 0.0), float(w)), min(max(y, 0.0), float(h)))
        warnings.append(f"{label}: point {_fmt(point)} px is just outside the {w}x{h} image; clipped to {_fmt(clipped)}")
        return clipped
    raise ParseError(f"{label}: point {_fmt(point)} px lies outside the {w}x{h} image", index=index, rule="point_outside")


# ------------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------------
def _check_size(size: Any, what: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in size)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be (width, height) in pixels, got {size!r}") from exc
    if w <= 0 or h <= 0:
        raise ValueError(f"{what} must be positive, got {size!r}")
    return w, h


def parse_plan(text: str, image_size: Sequence[int], convention: str = "auto", instruction: str = "", *,
               model_image_size: Sequence[int] | None = None, validate: bool = True, model: str = "") -> GroundedPlan:
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

    Returns
    -------
    GroundedPlan
        With ``raw_response`` = ``text`` and a warning for every box or point that was clipped or fixed.

    Raises
    ------
    ParseError
        No plan in the text, an unknown type, a box wholly outside the image or degenerate, ... (one line).
    """
    if not isinstance(text, str):
        raise ParseError(f"model answer must be text, got {type(text).__name__}", rule="text")
    size = _check_size(image_size, "image_size")
    model_size = _check_size(model_image_size, "model_image_size") if model_image_size is not None else size
    convention = check_convention(convention, PARSE_CONVENTIONS)
    if not text.strip():
        raise ParseError("the model's answer is empty", rule="empty_answer")
    if len(text) > MAX_TEXT_CHARS:
        raise ParseError(f"the model's answer is {len(text)} characters long (more than {MAX_TEXT_CHARS}); not a plan",
                         rule="too_long")
    body, warnings = strip_thinking(text)
    stripped = body.strip()
    if len(stripped) > 1 and stripped[0] == stripped[-1] == '"':
        try:  # the whole answer is a JSON string holding the answer (double-encoded)
            inner = json.loads(stripped)
            body = inner if isinstance(inner, str) else body
        except ValueError:
            pass
    found = _find_plan(body)
    if found is None:
        snippet = " ".join(body.split())[:80]
        raise ParseError("no plan found in the model's answer: expected a JSON list of actions (or an object with "
                         f"'actions') or lines like 'grasp(object, [x1, y1, x2, y2])'; the answer starts {snippet!r}",
                         rule="no_plan")
    plan_conv = _plan_convention(found.items, convention)
    if convention == "auto" and plan_conv == "pixel" and _all_fractions(found.items):
        plan_conv = "unit"
        warnings.append("every coordinate is between 0 and 1: read as fractions of the image width and height")
    actions = [_to_action(raw, i, convention, plan_conv, model_size, size, warnings) for i, raw in enumerate(found.items)]
    # A place that names no object carries what the grasp before it picked up.
    for i, action in enumerate(actions):
        if action.type == "place" and not action.object and i > 0 and actions[i - 1].type == "grasp":
            action.object = actions[i - 1].object
    reason = " ".join(found.reason.split())
    if not actions and not reason:
        reason = found.prose or "the model returned an empty plan without a reason"
        warnings.append("empty plan without a 'reason' field: " + ("the text around it is the reason" if found.prose
                                                                    else "none given"))
    plan = GroundedPlan(instruction=instruction, image_size=size, actions=actions, reason=reason,
                        warnings=warnings, model=model, raw_response=text)
    if validate:
        try:
            plan.validate()
        except PlanError as exc:
            raise ParseError(str(exc), index=exc.index, rule=exc.rule) from exc
    return plan


_POINT_TAG = re.compile(r"<point>(.*?)</point>", re.IGNORECASE | re.DOTALL)


def parse_location(text: str, image_size: Sequence[int], kind: str, convention: str = "auto", *,
                   model_image_size: Sequence[int] | None = None) -> tuple[tuple[float, ...], list[str]]:
    """One box (``kind="box"``) or point (``kind="point"``) from a grounding answer, in original pixels.

    Reads ``{"bbox_2d": [...]}`` / ``{"box_2d": [...]}`` / ``{"point": [...]}`` objects (or a list of them:
    the first is taken), bare number lists, and Embodied-R1's ``<point>[[x, y], ...]</point>`` (pixels of
    the image sent). Returns (coordinates, warnings); raises ParseError when nothing usable is there.
    """
    if kind not in ("box", "point"):
        raise ValueError(f"kind must be 'box' or 'point', got {kind!r}")
    if not isinstance(text, str):
        raise ParseError(f"model answer must be text, got {type(text).__name__}", rule="text")
    size = _check_size(image_size, "image_size")
    model_size = _check_size(model_image_size, "model_image_size") if model_image_size is not None else size
    convention = check_convention(convention, PARSE_CONVENTIONS)
    body, warnings = strip_thinking(text[:MAX_TEXT_CHARS])
    n = 4 if kind == "box" else 2
    keys = _BOX_KEYS if kind == "box" else _POINT_KEYS
    label = f"{kind} answer"
    candidates: list[tuple[Any, str]] = []  # (numbers, convention)
    tag = _POINT_TAG.search(body)
    if tag:
        numbers = _NUMBER_RE.findall(tag.group(1))
        if len(numbers) >= 2:
            candidates.append((numbers[:2], "pixel"))  # Embodied-R1 points are pixels of the image it saw
    for _, _, value in _json_values(body):
        items = value if isinstance(value, list) else [value]
        if items and all(isinstance(v, (int, float, str)) for v in items) and len(items) in (2, 4):
            candidates.append((items, convention if convention != "auto" else "pixel"))
        for item in items:
            if isinstance(item, dict):
                low = _lower_keys(item)
                found = next((k for k in keys if k in low and isinstance(low[k], (list, str, dict))), None)
                if found is not None:
                    plan_conv = _plan_convention([item], convention)
                    candidates.append((low[found], _key_convention(found, convention, plan_conv)))
    if not candidates:
        raise ParseError(f"no {kind} found in the grounding answer; it starts {' '.join(body.split())[:80]!r}",
                         rule=f"no_{kind}")
    raw, conv = candidates[0]
    if isinstance(raw, (list, tuple)):
        raw = [v for part in raw for v in (part if isinstance(part, (list, tuple)) else [part])]
        count = len(raw) if len(raw) in (2, 4) else n  # a box where a point was asked is allowed (its centre)
    else:
        count = n
    numbers = _numbers(raw, count, kind, 0)
    sx, sy = size[0] / model_size[0], size[1] / model_size[1]
    if len(numbers) == 4:
        if conv == "pixel":
            box = (numbers[0] * sx, numbers[1] * sy, numbers[2] * sx, numbers[3] * sy)
        else:
            box = box_to_px(numbers, conv, size)
        box = _checked_box(box, 0, label, size, warnings)
        if kind == "box":
            return box, warnings
        warnings.append(f"{label}: a box was given where a point was asked; used its centre")
        return ((box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0), warnings
    if kind == "box":
        raise ParseError(f"the grounding answer has a point {numbers}, expected a box", rule="box_length")
    pt = (numbers[0] * sx, numbers[1] * sy) if conv == "pixel" else point_to_px(numbers, conv, size)
    return _checked_point(pt, 0, label, size, warnings), warnings
