"""Text scanning of raw VLM answers: reasoning blocks, bracketed JSON-ish values, fences, YAML, tables,
function-call lines and plain lines -> raw action items, each pass linear in the answer's length.

Model text is hostile input (a fuzzer, a looping model, a cut-off answer): every regular expression here is
anchored or possessive so it cannot backtrack, bracket matching is one pass, nesting is bounded, and the
slow fallbacks (lenient JSON, YAML) run under a budget proportional to the text's length.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import yaml

from grounded_planner.vlm.errors import ParseDeadlineError, ParseError

# Deepest bracket nesting tried as JSON (a plan needs about 5).
MAX_JSON_DEPTH = 32
# Longest function call read (``grasp(...)`` with its arguments), in characters.
MAX_CALL_CHARS = 600
# Largest YAML block handed to the YAML reader (a YAML plan is a few kB; PyYAML is not fast).
MAX_YAML_CHARS = 20_000
# Lenient re-decoding (comments, single quotes, Python literals) may read at most this many times the
# answer's length in total, so nested undecodable brackets cannot make the work quadratic.
LENIENT_BUDGET_FACTOR = 2
# What one lenient attempt costs against that budget besides its length (compiling a Python literal is not free),
# so thousands of tiny undecodable brackets cannot add up either.
LENIENT_ATTEMPT_CHARS = 500
# Most JSON values looked at in one answer: a plan is one value, or one action per line (at most MAX_ACTIONS).
MAX_JSON_VALUES = 1_000

TYPE_SYNONYMS = {
    "grasp": "grasp",
    "grab": "grasp",
    "pick": "grasp",
    "pick_up": "grasp",
    "pickup": "grasp",
    "take": "grasp",
    "grip": "grasp",
    "pick_and_hold": "grasp",
    "place": "place",
    "put": "place",
    "put_down": "place",
    "putdown": "place",
    "place_on": "place",
    "put_on": "place",
    "drop": "place",
    "release": "place",
    "place_at": "place",
    "open": "open",
    "close": "close",
    "shut": "close",
}
TYPE_KEYS = (
    "type",
    "action",
    "primitive",
    "action_type",
    "actiontype",
    "skill",
    "op",
    "verb",
    "function",
    "name",
    "command",
    "step",
    "action_name",
    "primitive_type",
)
# keys under which a model writes a box (vlm.items reads them from here)
BOX_KEYS = ("bbox_2d", "box_2d", "bbox", "bbox_px", "box", "bounding_box", "boundingbox", "bounding_box_2d", "rect")
CONTAINER_KEYS = (
    "actions",
    "plan",
    "steps",
    "action_plan",
    "grounded_plan",
    "primitives",
    "sequence",
    "action_sequence",
    "subactions",
    "sub_actions",
    "task_plan",
)
REASON_KEYS = ("reason", "explanation", "rationale", "note", "notes", "comment", "message", "why")

_VERB_PATTERN = "|".join(sorted((re.escape(k).replace("_", "[ _-]?") for k in TYPE_SYNONYMS), key=len, reverse=True))
CALL_RE = re.compile(
    rf"(?<![A-Za-z_])(?=[{''.join(sorted(set(k[0] for k in TYPE_SYNONYMS)))}])({_VERB_PATTERN})[ \t]*+\(", re.IGNORECASE
)
# One number; the exponent is optional and the mantissa cannot be split two ways once matched.
NUMBER_RE = re.compile(r"[-+]?(?:\d++\.?\d*+|\.\d++)(?:[eE][-+]?\d++)?")
_KEY_SEPARATORS = re.compile(r"[\s\-]++")


class CallItem(dict):
    """An action read from text (a call or a plain line): its coordinates are in ``_coords``/``_box``/
    ``_point``. A distinct type, so a model's JSON cannot pose as one by writing ``"_coords"`` keys."""


def check_deadline(deadline: float | None) -> None:
    """Raise ParseDeadlineError when ``deadline`` (a ``time.monotonic()`` value) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise ParseDeadlineError("parsing the answer ran past the request's deadline (timeout_s)", rule="deadline")


def lower_keys(d: dict) -> dict:
    """Keys lower-cased with spaces and dashes as underscores (``"Bounding Box"`` -> ``bounding_box``)."""
    return {_KEY_SEPARATORS.sub("_", str(k).strip().lower()): v for k, v in d.items()}


def norm_type(value: Any) -> str | None:
    """Canonical action type of a model's verb (any case, pick->grasp, put->place), or None if unknown."""
    if not isinstance(value, str) or len(value) > 200:
        return None
    key = _KEY_SEPARATORS.sub("_", value.strip().lower()).strip("_().:")
    if key in TYPE_SYNONYMS:
        return TYPE_SYNONYMS[key]
    # "grasp_object", "open_drawer", "pick_up_spoon", "grasp the spoon": the verb comes first
    parts = key.split("_")
    if len(parts) > 1:
        if parts[:2] in (["pick", "up"], ["put", "down"]):
            return TYPE_SYNONYMS["_".join(parts[:2])]
        return TYPE_SYNONYMS.get(parts[0])
    return None


def type_of(item: dict) -> tuple[str | None, str | None]:
    """(raw type string, key it came from) of a lower-cased action dict."""
    for key in TYPE_KEYS:
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            if key in ("name", "function", "command", "step") and norm_type(value) is None:
                continue  # "name" is often the object's name
            return value, key
    return None, None


# ------------------------------------------------------------------------------------------------
# reasoning blocks
# ------------------------------------------------------------------------------------------------
_THINK_TAG = re.compile(r"<(/?)(think|thinking|reasoning)>", re.IGNORECASE)


def strip_thinking(text: str) -> tuple[str, list[str]]:
    """Remove reasoning blocks; return the answer text and warnings.

    A lone ``</think>`` means the opening tag was part of the chat template: everything before it is
    reasoning. An unclosed ``<think>`` (answer cut off inside its reasoning) keeps the text after the tag,
    with a warning, because some servers drop the closing tag. One pass over the tags: a block is an
    opening tag and the first closing tag of the same name after it.
    """
    warnings: list[str] = []
    tags = [(m.start(), m.end(), bool(m.group(1)), m.group(2).lower()) for m in _THINK_TAG.finditer(text)]
    closes: dict[str, list[tuple[int, int]]] = {}
    for start, end, closing, name in tags:
        if closing:
            closes.setdefault(name, []).append((start, end))
    next_close = dict.fromkeys(closes, 0)
    pieces, kept_from = [], 0
    for start, end, closing, name in tags:
        if closing or start < kept_from:
            continue
        candidates = closes.get(name, [])
        k = next_close.get(name, 0)
        while k < len(candidates) and candidates[k][0] < end:
            k += 1
        next_close[name] = k
        if k < len(candidates):
            pieces.append(text[kept_from:start])
            kept_from = candidates[k][1]
    pieces.append(text[kept_from:])
    body = " ".join(pieces)
    last_close = None
    for m in _THINK_TAG.finditer(body):
        if m.group(1):
            last_close = m
    if last_close is not None:
        body = body[last_close.end() :]
    opened = _THINK_TAG.search(body)
    if opened:
        warnings.append("the answer has an unclosed <think> block; read the text after it")
        body = body[: opened.start()] + " " + body[opened.end() :]
    return body, warnings


# ------------------------------------------------------------------------------------------------
# brackets and lenient JSON
# ------------------------------------------------------------------------------------------------
_BRACKET_EVENT = re.compile(r'[\[\]{}"]')
_STRING_REST = re.compile(r'(?:[^"\\]++|\\.)*+"', re.DOTALL)


def match_brackets(text: str, unclosed: list[int] | None = None) -> dict[int, tuple[int, int]]:
    """Map the index of every balanced opening ``[``/``{`` to (closing index, nesting depth), in one pass;
    openers still open at the end go to ``unclosed`` (a cut-off answer).

    Double-quoted strings count only inside brackets, so apostrophes and quotes in prose do not
    derail the matching.
    """
    pairs: dict[int, tuple[int, int]] = {}
    stack: list[list] = []  # [start, bracket, deepest child depth]
    closing = {"]": "[", "}": "{"}
    pos = 0
    while True:
        m = _BRACKET_EVENT.search(text, pos)  # only the characters that matter: prose is skipped in C
        if m is None:
            break
        i, ch = m.start(), m.group()
        pos = i + 1
        if ch == '"':
            if stack:  # a string inside brackets: jump to its end (a string never closes: nothing more closes)
                end = _STRING_REST.match(text, pos)
                if end is None:
                    break
                pos = end.end()
        elif ch in "[{":
            stack.append([i, ch, 0])
        elif stack and stack[-1][1] == closing[ch]:
            start, _, child_depth = stack.pop()
            pairs[start] = (i, child_depth + 1)
            if stack:
                stack[-1][2] = max(stack[-1][2], child_depth + 1)
        else:
            stack.clear()  # mismatched: nothing open so far can be a valid value
    if unclosed is not None:
        unclosed.extend(entry[0] for entry in stack)
    return pairs


_TRAILING_COMMA = re.compile(r",\s*+([\]}])")
_BARE_KEY = re.compile(r"([{,]\s*+)([A-Za-z_](?:[A-Za-z0-9_]|[ ]++(?=[A-Za-z0-9_]))*+)\s*+:")
_SMART_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_PY_LITERALS = (re.compile(r"\bnull\b"), "None"), (re.compile(r"\bfalse\b"), "False"), (re.compile(r"\btrue\b"), "True")
FAIL = object()


def strip_comments(text: str) -> str:
    """Drop ``/* block */`` comments and ``// line`` comments (when no quote follows on the line and the
    ``//`` does not follow a word or ``:``, as in a URL), in one pass."""
    out, kept_from, i, n = [], 0, 0, len(text)
    blocks_possible = True
    while True:
        i = text.find("/", i)
        if i < 0 or i + 1 >= n:
            break
        nxt = text[i + 1]
        if nxt == "*" and blocks_possible:
            j = text.find("*/", i + 2)
            if j >= 0:
                out.append(text[kept_from:i])
                i = kept_from = j + 2
                continue
            blocks_possible = False  # no later "/*" can close either
        elif nxt == "/" and (i == 0 or not (text[i - 1] == ":" or text[i - 1].isalnum() or text[i - 1] == "_")):
            eol = text.find("\n", i)
            eol = n if eol < 0 else eol
            quote = text.find('"', i, eol)
            if quote < 0:
                out.append(text[kept_from:i])
                i = kept_from = eol
                continue
            i = quote  # every "//" before this quote on the line is followed by it: none is a comment
            continue
        i += 1
    out.append(text[kept_from:])
    return "".join(out)


class _Lenient:
    """Decode JSON, or JSON with trailing commas / comments / single quotes / bare keys / Python literals,
    with the slow fallbacks limited to ``budget`` characters in total."""

    def __init__(self, budget: int):
        self.budget = budget

    def loads(self, chunk: str) -> Any:
        try:
            return json.loads(chunk)
        except (ValueError, RecursionError):
            pass
        if len(chunk) + LENIENT_ATTEMPT_CHARS > self.budget:
            return FAIL
        self.budget -= len(chunk) + LENIENT_ATTEMPT_CHARS
        fixed = _TRAILING_COMMA.sub(r"\1", strip_comments(chunk.translate(_SMART_QUOTES)))
        try:
            return json.loads(fixed)
        except (ValueError, RecursionError):
            pass
        try:
            py = fixed
            for pattern, literal in _PY_LITERALS:
                py = pattern.sub(literal, py)
            with warnings.catch_warnings():  # model text is not our source code: no SyntaxWarnings about it
                warnings.simplefilter("ignore")
                value = ast.literal_eval(py)
            if isinstance(value, (list, dict, tuple)):
                return list(value) if isinstance(value, tuple) else value
        except Exception:  # noqa: BLE001 - literal_eval raises many kinds (SyntaxError, ValueError, MemoryError, RecursionError)
            pass
        try:
            return json.loads(_BARE_KEY.sub(lambda m: f'{m.group(1)}"{m.group(2).strip()}":', fixed))
        except (ValueError, RecursionError):
            return FAIL


def json_values(
    text: str, deadline: float | None = None, pairs: dict[int, tuple[int, int]] | None = None
) -> Iterator[tuple[int, int, Any]]:
    """Yield (start, end, value) of decodable top-level JSON-ish values, outermost first, left to right
    (``pairs``: ``match_brackets(text)`` when the caller has it already)."""
    pairs = match_brackets(text) if pairs is None else pairs
    lenient = _Lenient(LENIENT_BUDGET_FACTOR * len(text) + 10_000)
    covered_until = -1
    yielded = 0
    for start in sorted(pairs):
        if start <= covered_until:
            continue
        if yielded >= MAX_JSON_VALUES:
            return
        end, depth = pairs[start]
        if depth > MAX_JSON_DEPTH:
            continue  # no plan nests this deep; decoding it would only cost time (look inside instead)
        check_deadline(deadline)
        value = lenient.loads(text[start : end + 1])
        if value is FAIL:
            continue  # look inside it: prose in brackets may hold a value
        covered_until = end
        yielded += 1
        yield start, end, value


# ------------------------------------------------------------------------------------------------
# values -> raw action items
# ------------------------------------------------------------------------------------------------
def looks_like_action(value: Any) -> bool:
    if isinstance(value, str):
        return bool(CALL_RE.search(value))
    if not isinstance(value, dict):
        return False
    low = lower_keys(value)
    if type_of(low)[0] is not None:
        return True
    if len(low) == 1 and norm_type(next(iter(low))) is not None:
        return True
    return any(k in low for k in BOX_KEYS + ("point_2d", "point"))


def container_items(value: Any, depth: int = 0) -> tuple[list | None, str]:
    """(action items, reason) of a plan-like value, or (None, "") when it holds no plan."""
    if depth > 3:
        return None, ""
    if isinstance(value, list):
        if not value:
            return [], ""
        if any(looks_like_action(v) for v in value):
            return value, ""
        if len(value) == 1:  # [{"actions": [...]}]
            return container_items(value[0], depth + 1)
        return None, ""
    if isinstance(value, dict):
        low = lower_keys(value)
        reason = next((str(low[k]) for k in REASON_KEYS if isinstance(low.get(k), str)), "")
        for key in CONTAINER_KEYS:
            if key not in low:
                continue
            inner = low[key]
            if isinstance(inner, str):
                calls = list(call_items(inner))
                if calls or not inner.strip():
                    return calls, reason
                continue
            if inner is None:
                return [], reason
            items, inner_reason = container_items(inner, depth + 1)
            if items is not None:
                return items, reason or inner_reason
        if looks_like_action(value):
            return [value], reason
        steps = [v for k, v in value.items() if k not in REASON_KEYS]
        if steps and all(isinstance(v, dict) and looks_like_action(v) for v in steps):
            return steps, reason  # {"1": {...}, "2": {...}} or {"step_1": {...}, ...}
    return None, ""


# ------------------------------------------------------------------------------------------------
# function calls and plain lines
# ------------------------------------------------------------------------------------------------
def _split_args(text: str) -> list[str]:
    """Split call arguments on commas outside brackets and quotes, in one pass."""
    args, depth, quote, current = [], 0, "", []
    last_visible = ""  # last non-space character of the current argument
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
            if not ch.isspace():
                last_visible = ch
            continue
        if ch in "\"'" and last_visible in ("", "=", ":"):
            quote = ch  # a quote opens a string only at the start of an argument (kid's cup is a name)
        elif ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(current).strip())
            current, last_visible = [], ""
            continue
        current.append(ch)
        if not ch.isspace():
            last_visible = ch
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


def _any_bracket_pairs(text: str) -> dict[int, int]:
    """Opening ``([{`` -> its closing ``)]}`` counted as one kind of bracket (a call's extent), in one pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch in "([{":
            stack.append(i)
        elif ch in ")]}" and stack:
            pairs[stack.pop()] = i
    return pairs


_KEYWORD_ARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*+)\s*+[=:]\s*+(.+)", re.DOTALL)
_COORDS_AFTER = re.compile(r"[\[(]([-+\d.,\s]*+)[\])]")


def call_items(text: str) -> Iterator[CallItem]:
    """Function-call actions in text: ``grasp(spoon, [x1, y1, x2, y2])``, ``place(spoon, plate, [x, y])``."""
    matches = list(CALL_RE.finditer(text))
    if not matches:
        return
    starts = [m.start() for m in matches]
    pairs = _any_bracket_pairs(text)
    last_paren = text.rfind(")")
    pos = 0
    for k, m in enumerate(matches):
        if m.start() < pos:
            continue
        open_at = m.end() - 1
        end = pairs.get(open_at, -1)
        if end - open_at >= MAX_CALL_CHARS:
            end = -1
        if end < 0:
            if k + 1 == len(matches) and last_paren < open_at:
                raise ParseError(
                    f"the answer is cut off inside {m.group(0)}...: the last action never closes (raise max_tokens?)",
                    rule="truncated",
                )
            continue
        pos = end + 1
        item = _call_item(m.group(1), _split_args(text[open_at + 1 : end]))
        if item is None:
            continue
        if "_coords" not in item and "_box" not in item and "_point" not in item:
            following = bisect.bisect_left(starts, end + 1)
            coords = _coords_after(text, end + 1, starts[following] if following < len(starts) else len(text))
            if coords:
                item["_coords"] = coords
        _assign_names(item)
        yield item


def _call_item(verb: str, args: list[str]) -> CallItem | None:
    if not args:
        return None
    item = CallItem(type=verb, _call=True)
    names: list[str] = []
    coords: list[Any] = []
    for arg in args:
        kw = _KEYWORD_ARG.fullmatch(arg)
        key, val = (kw.group(1).lower(), kw.group(2).strip()) if kw else (None, arg)
        if val[:1] in "[(":
            numbers = NUMBER_RE.findall(val)
            if key in ("bbox", "bbox_2d", "box_2d", "box", "bounding_box"):
                item["_box"], item["_box_key"] = numbers, key
            elif key in ("point", "point_2d", "xy", "location", "position"):
                item["_point"], item["_point_key"] = numbers, key
            else:
                coords.extend(numbers)
        elif NUMBER_RE.fullmatch(val):
            coords.append(val)
        else:
            name = _unquote(val.strip())
            if key in ("target", "destination", "to", "on", "location", "receptacle"):
                item["target"] = name
            elif key in ("object", "obj", "item", "name", "label"):
                item["object"] = name
            elif name:
                names.append(name)
    if coords:
        item["_coords"] = coords
    item["_names"] = names
    return item


def _coords_after(text: str, start: int, next_call: int) -> list[str]:
    """``grasp(spoon) at [120, 200, 180, 260]``: coordinates after the call, on the same line, before the
    next call (looked for within MAX_CALL_CHARS)."""
    stop = text.find("\n", start, min(next_call, start + MAX_CALL_CHARS))
    tail = text[start : stop if stop >= 0 else min(next_call, start + MAX_CALL_CHARS)]
    after = _COORDS_AFTER.search(tail)
    if after and len(NUMBER_RE.findall(after.group(1))) in (2, 4):
        return NUMBER_RE.findall(after.group(1))
    return []


def _assign_names(item: CallItem) -> None:
    names = item.pop("_names")
    if names and norm_type(item["type"]) == "place" and len(names) == 1 and "target" not in item:
        item["target"] = names.pop(0)  # place(plate, [x, y]): the one name is where it goes
    if names:
        if "object" not in item:
            item["object"] = names.pop(0)
        if names and "target" not in item:
            item["target"] = names.pop(0)


# A plain line: optional bullet or step number, a verb, words, then one bracket of numbers at the line's end.
_LINE_HEAD = re.compile(
    rf"^[ \t]*+(?:[-*\u2022][ \t]*+|(?:step[ \t]*+)?\d++[ \t]*+[.):][ \t]*+)?({_VERB_PATTERN})\b[ \t:]*+",
    re.IGNORECASE | re.MULTILINE,
)
_LINE_NUMBERS = re.compile(r"[-+\d., \t]++")
_PLACE_SPLIT = re.compile(r" (?:on|onto|in|into|to|inside|->) ", re.IGNORECASE)
_AT_SUFFIX = re.compile(r" (?:at|@) ?:?$")
_ARTICLE = re.compile(r"^(?:the|a|an) ", re.IGNORECASE)


def line_items(text: str) -> list[CallItem]:
    """Plain lines such as ``1. grasp the spoon at [120, 200, 180, 260]`` / ``2. place on plate [300, 220]``."""
    items = []
    for head in _LINE_HEAD.finditer(text):  # line starts are found in C: prose lines cost nothing here
        eol = text.find("\n", head.end())
        rest = text[head.end() : eol if eol >= 0 else len(text)].rstrip(" \t.")
        if not rest or rest[-1] not in "])":
            continue
        bracket = min((i for i in (rest.find("["), rest.find("(")) if i >= 0), default=-1)
        numbers = rest[bracket + 1 : -1] if bracket >= 0 else ""
        if bracket < 0 or not numbers or not _LINE_NUMBERS.fullmatch(numbers):
            continue
        words = rest[:bracket]
        if any(c in words for c in "[]()"):
            continue
        words = _AT_SUFFIX.sub("", " " + " ".join(words.strip(" \t:-").split())).strip()
        item = CallItem(type=head.group(1), _call=True, _coords=NUMBER_RE.findall(numbers))
        if norm_type(head.group(1)) == "place":
            parts = _PLACE_SPLIT.split(" " + words + " ", maxsplit=1)
            obj, target = (parts[0], parts[1]) if len(parts) == 2 else ("", parts[0])
            item["object"], item["target"] = _strip_article(obj), _strip_article(target)
        else:
            item["object"] = _strip_article(words)
        items.append(item)
    return items


def _strip_article(words: str) -> str:
    return _ARTICLE.sub("", " ".join(words.split()))


# ------------------------------------------------------------------------------------------------
# fences, YAML, tables
# ------------------------------------------------------------------------------------------------
_FENCE_HEAD = re.compile(r"[ \t]*+([A-Za-z0-9_-]*+)[ \t]*+\n")


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of every closed markdown fence, in one pass."""
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            return
        head = _FENCE_HEAD.match(text, start + 3)
        if not head:
            pos = start + 1
            continue
        close = text.find("```", head.end())
        if close < 0:
            return  # no later fence can close either
        yield head.group(1), text[head.end() : close]
        pos = close + 3


_YAML_LIST_ITEM = re.compile(r"^[ \t]*+-(?:[ \t]++(?:\n[ \t]*+)?|\n[ \t]*+)\w++[ \t]*+:", re.MULTILINE)
_YAML_ALIAS = re.compile(r"(?:^|[\s\[{,:-])[&*][A-Za-z0-9_]")
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_nesting_ok(block: str) -> bool:
    """Bounded nesting, so neither PyYAML's recursion nor its C parser's stack is at risk; no aliases (a
    few anchors can expand to an exponential tree)."""
    if _YAML_ALIAS.search(block):
        return False
    depth = deepest = 0
    for ch in block:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    if deepest > MAX_JSON_DEPTH:
        return False
    for line in block.split("\n"):
        indent = len(line) - len(line.lstrip(" \t-?:"))
        if indent > 4 * MAX_JSON_DEPTH:
            return False
    return True


def yaml_values(text: str) -> Iterator[Any]:
    """Values of YAML blocks (fenced, else the whole text) for answers written as YAML lists of actions."""
    blocks = [body for lang, body in fenced_blocks(text) if lang.lower() in ("", "yaml", "yml")]
    if not blocks and _YAML_LIST_ITEM.search(text):
        blocks = [text]
    for block in blocks:
        if len(block) > MAX_YAML_CHARS or not _yaml_nesting_ok(block):
            continue
        try:
            yield yaml.load(block, Loader=_YAML_LOADER)
        except Exception:  # noqa: BLE001 - yaml raises many kinds on prose; a failed block is simply not a plan
            continue


_TABLE_LINE = re.compile(r"^[ \t\r\f\v]*+\|[^\n]*+", re.MULTILINE)
_TABLE_RULE = re.compile(r":?-{2,}+:?")
_COORD_HEADER = re.compile(r"box|point|coord|location|position|pixel", re.IGNORECASE)


def table_items(text: str) -> list[dict]:
    """Rows of a markdown table (``| step | action | object | bbox |``) as action dicts."""
    rows = [m.group().strip().strip("|").split("|") for m in _TABLE_LINE.finditer(text)]
    rows = [[cell.strip() for cell in row] for row in rows]
    rows = [row for row in rows if not all(_TABLE_RULE.fullmatch(cell) for cell in row if cell)]
    if len(rows) < 2:
        return []
    # a column of coordinates may hold boxes and points ("BBox / Point"): its numbers decide
    header = ["coordinates" if _COORD_HEADER.search(h) else h for h in rows[0]]
    items = [dict(zip(header, row)) for row in rows[1:] if len(row) == len(header)]
    return items if items and all(looks_like_action(item) for item in items) else []


# ------------------------------------------------------------------------------------------------
# the plan in an answer
# ------------------------------------------------------------------------------------------------
_FENCE_MARK = re.compile(r"```[A-Za-z]*+")


def prose(text: str) -> str:
    """The text around a plan, one line, at most 300 characters."""
    text = _FENCE_MARK.sub(" ", text)
    text = " ".join(text.split()).strip(" :.-")
    return text[:300]


@dataclass
class Found:
    items: list
    reason: str
    prose: str


def find_plan(body: str, deadline: float | None = None) -> Found | None:
    """The plan in an answer: the first JSON plan (or JSON action objects, one a line), else a YAML list,
    a markdown table, function-call lines, plain numbered lines, an empty JSON plan; None when none.

    The other forms are looked for only outside JSON plans, so a reason that quotes
    ``grasp(object, [...])`` is not read as an action.
    """
    first_empty: tuple[int, int, str] | None = None
    singles: list[tuple[int, int, dict]] = []
    outside: list[str] = []  # the text with plan-like JSON values cut out
    last = 0
    unclosed: list[int] = []
    pairs = match_brackets(body, unclosed)
    for start, end, value in json_values(body, deadline, pairs):
        items, reason = container_items(value)
        if items is None:
            continue
        outside.append(body[last:start])
        last = end + 1
        if len(items) == 1 and isinstance(value, dict) and items[0] is value:
            singles.append((start, end, value))  # one action object: maybe one of several JSON lines
            continue
        if items:
            return Found(items, reason, prose(body[:start] + " " + body[end + 1 :]))
        if first_empty is None:
            first_empty = (start, end, reason)
    outside.append(body[last:])
    if singles:
        if unclosed and min(unclosed) < singles[0][0]:
            # complete actions inside a list that never closes: the answer was cut off (max_tokens?)
            raise ParseError(
                f"the answer is cut off: a JSON list or object opened at character {min(unclosed)} never "
                "closes, so actions may be missing (raise max_tokens?)",
                rule="truncated",
            )
        return Found([v for _, _, v in singles], "", prose(" ".join(outside)))
    rest = " \n".join(outside)
    check_deadline(deadline)
    for value in yaml_values(rest):
        items, reason = container_items(value)
        if items and all(isinstance(v, dict) for v in items):
            return Found(items, reason, "")
    check_deadline(deadline)
    table = table_items(rest)
    if table:
        return Found(table, "", "")
    calls = list(call_items(rest))
    if calls:
        return Found(calls, "", "")
    lines = line_items(rest)
    if lines:
        return Found(lines, "", "")
    if first_empty is not None:
        start, end, reason = first_empty
        return Found([], reason, prose(body[:start] + " " + body[end + 1 :]))
    return None
