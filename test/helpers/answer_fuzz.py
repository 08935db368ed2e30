"""Seeded generator of hostile model answers: realistic Qwen3 / Gemini / pixel / call-style / plain-line / YAML /
table / Embodied-R1 answers, mutated by truncation, byte flips, huge numbers, NaN/Infinity, deep nesting,
long runs (whitespace, tags, fences, calls), megabyte strings and unicode.

Used by test/test_vlm_parse_fuzz.py (a few thousand answers in CI) and benchmarks/bench_parse_fuzz.py (as many
as asked for). The generator, not a fixed corpus: a new seed gives new answers of the same kinds.
"""

from __future__ import annotations

import json
import random
from typing import Callable

from grounded_planner.vlm.parse import parse_location, parse_plan

OBJECTS = [
    "spoon",
    "white plate",
    "red cup",
    "kid's mug",
    "drawer",
    "cabinet door",
    "bowl",
    "apple",
    "Löffel",
    "杯子",
    "tray",
]
SIZES = [(640, 480), (1280, 720), (1920, 1080), (320, 240)]
# Runs that made earlier parsers slow (backtracking regexes, quadratic scans): repeated many times.
HOSTILE_RUNS = [
    " ",
    "\t",
    " \t",
    "<think>",
    "</think>",
    "<thinking>",
    "```",
    "``` ",
    "grasp(",
    "place(",
    "[",
    "{",
    "[[",
    '{"a":',
    "/*",
    "//",
    "{a ",
    ", ",
    "- ",
    "- - ",
    "|",
    "| grasp |",
    "1. grasp ",
    "(",
    '"',
    "'",
    "\\",
    "\n",
    "\n\n",
    "<point>",
    "1e",
    "9",
    "-",
    "0.",
    "grasp spoon ",
    "at ",
    ":",
]
UNICODE = [
    "\u0130",
    "\u202e",
    "\u0301",
    "\U0001f600",
    "\ufeff",
    "\u2028",
    "\x00",
    "\ud7ff",
    "\u00a0",
    "\u3000",
    "\u201c",
    "\u201d",
    "\u2019",
    "\u2022",
    "ß",
    "\uffff",
]


def _box(rng: random.Random, w: float, h: float) -> list[float]:
    x1, y1 = rng.uniform(0, 0.8 * w), rng.uniform(0, 0.8 * h)
    return [round(x1), round(y1), round(x1 + rng.uniform(0.05, 0.2) * w), round(y1 + rng.uniform(0.05, 0.2) * h)]


def _point(rng: random.Random, w: float, h: float) -> list[float]:
    return [round(rng.uniform(0, w)), round(rng.uniform(0, h))]


def _json_answer(rng: random.Random, size: tuple[int, int], family: str) -> str:
    obj, target = rng.sample(OBJECTS, 2)
    if family == "qwen3":
        grasp = {"type": "grasp", "object": obj, "bbox_2d": _box(rng, 1000, 1000)}
        place = {"type": "place", "object": obj, "target": target, "point_2d": _point(rng, 1000, 1000)}
    elif family == "gemini":
        b = _box(rng, 1000, 1000)
        p = _point(rng, 1000, 1000)
        grasp = {"type": "grasp", "object": obj, "box_2d": [b[1], b[0], b[3], b[2]]}
        place = {"type": "place", "object": obj, "target": target, "point": [p[1], p[0]]}
    else:
        grasp = {"action": "pick", "object": obj, "bbox": _box(rng, *size)}
        place = {"action": "put", "object": obj, "target": target, "point": _point(rng, *size)}
    actions = [grasp, place]
    if rng.random() < 0.3:
        actions.append(
            {
                "type": rng.choice(["open", "close"]),
                "object": "drawer",
                "bbox_2d" if family == "qwen3" else "bbox": _box(
                    rng, 1000 if family == "qwen3" else size[0], 1000 if family == "qwen3" else size[1]
                ),
            }
        )
    value = actions if rng.random() < 0.6 else {"actions": actions, "reason": "the spoon goes on the plate"}
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2]))
    if rng.random() < 0.5:
        text = f"```json\n{text}\n```"
    if rng.random() < 0.3:
        text = "<think>The user wants the spoon moved. First grasp(spoon), then place it.</think>\n" + text
    if rng.random() < 0.3:
        text = "Here is the plan:\n" + text + "\nDone."
    return text


def _parts(rng: random.Random, size: tuple[int, int]) -> tuple[str, str, list[float], list[float]]:
    """Object, target, box and point of a pick-and-place, in pixels of ``size``."""
    obj, target = rng.sample(OBJECTS, 2)
    return obj, target, _box(rng, *size), _point(rng, *size)


def _call_answer(rng: random.Random, size: tuple[int, int]) -> str:
    obj, target, b, p = _parts(rng, size)
    return f"1. grasp({obj}, [{', '.join(map(str, b))}])\n2. place({obj}, {target}, [{', '.join(map(str, p))}])"


def _line_answer(rng: random.Random, size: tuple[int, int]) -> str:
    obj, target, b, p = _parts(rng, size)
    return f"1. grasp the {obj} at [{', '.join(map(str, b))}]\n2. place on the {target} [{', '.join(map(str, p))}]"


def _yaml_answer(rng: random.Random, size: tuple[int, int]) -> str:
    obj, target, b, p = _parts(rng, size)
    return (
        f"```yaml\n- type: grasp\n  object: {obj}\n  bbox: {b}\n"
        f"- type: place\n  object: {obj}\n  target: {target}\n  point: {p}\n```"
    )


def _table_answer(rng: random.Random, size: tuple[int, int]) -> str:
    obj, target, b, p = _parts(rng, size)
    return (
        "| step | action | object | bbox / point |\n|---|---|---|---|\n"
        f"| 1 | grasp | {obj} | {b} |\n| 2 | place | {target} | {p} |"
    )


def _embodied_answer(rng: random.Random, size: tuple[int, int]) -> str:
    p = _point(rng, *size)
    return f"<think>the plate is on the right</think><point>[[{p[0]}, {p[1]}]]</point>"


BASES: list[tuple[str, Callable]] = [
    ("qwen3", lambda rng, size: _json_answer(rng, size, "qwen3")),
    ("gemini", lambda rng, size: _json_answer(rng, size, "gemini")),
    ("pixel", lambda rng, size: _json_answer(rng, size, "pixel")),
    ("calls", _call_answer),
    ("lines", _line_answer),
    ("yaml", _yaml_answer),
    ("table", _table_answer),
    ("embodied", _embodied_answer),
]


def _digits_positions(text: str) -> list[int]:
    return [i for i, ch in enumerate(text) if ch.isdigit() and (i == 0 or not text[i - 1].isdigit())]


def _replace_number(rng: random.Random, text: str, new: str) -> str:
    starts = _digits_positions(text)
    if not starts:
        return text + new
    i = rng.choice(starts)
    j = i
    while j < len(text) and (text[j].isdigit() or text[j] == "."):
        j += 1
    return text[:i] + new + text[j:]


def _mutate(rng: random.Random, text: str, big: bool) -> str:
    kind = rng.randrange(12)
    n = len(text)
    at = rng.randrange(n + 1)
    if kind == 0:  # truncation
        return text[:at]
    if kind == 1:  # byte flips
        chars = list(text)
        for _ in range(rng.randint(1, 5)):
            if chars:
                chars[rng.randrange(len(chars))] = chr(
                    rng.randrange(32, 127) if rng.random() < 0.7 else rng.randrange(0x80, 0x3000)
                )
        return "".join(chars)
    if kind == 2:  # a huge number
        return _replace_number(
            rng, text, rng.choice(["9" * rng.randint(300, 4000), "1e400", "-1e999", "1" + "0" * 400 + ".5", "4" * 5000])
        )
    if kind == 3:  # NaN / Infinity
        return _replace_number(rng, text, rng.choice(["NaN", "Infinity", "-Infinity", "nan", "inf", "1e308"]))
    if kind == 4:  # deep nesting
        k = rng.choice([40, 200, 1000, 5000, 30000]) if big else rng.choice([40, 200, 1000])
        opener = rng.choice(["[", "{", '[{"a":', "(", "- "])
        closer = {"[": "]", "{": "}", '[{"a":': "}]", "(": ")", "- ": ""}[opener]
        return text[:at] + opener * k + (closer * k if rng.random() < 0.5 else "") + text[at:]
    if kind == 5:  # a long run of something that made parsers slow
        run = rng.choice(HOSTILE_RUNS)
        k = (rng.choice([1000, 10000, 60000]) if big else rng.choice([100, 1000, 3000])) // max(1, len(run))
        return text[:at] + run * k + text[at:]
    if kind == 6:  # unicode
        return text[:at] + "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 20))) + text[at:]
    if kind == 7:  # megabyte string (over the size cap) or just under it
        length = rng.choice([1_000_000, 199_000]) if big else rng.choice([5_000, 20_000])
        return text[:at] + rng.choice(HOSTILE_RUNS + ["x", "a "]) * (length // 2) + text[at:]
    if kind == 8:  # a type swapped for a JSON value
        return text.replace("[", rng.choice(["5 ", '"five" ', '{"x": ', "true ", "null ", "[["]), 1)
    if kind == 9:  # internal-looking keys and odd values
        return text.replace(
            '"object"',
            rng.choice(['"_coords": 5, "object"', '"_call": true, "object"', '"coordinates": {"x": 1e999}, "object"']),
            1,
        )
    if kind == 10:  # repeat a fragment
        i, j = sorted((rng.randrange(n + 1), rng.randrange(n + 1)))
        return text[:j] + text[i:j] * rng.randint(2, 200 if big else 20) + text[j:]
    return text + rng.choice(HOSTILE_RUNS) * rng.randint(1, 5000 if big else 500)  # trailing junk


def parse_answer(family: str, size: tuple[int, int], text: str):
    """Parse one generated answer the way its family is read: a grounding point for Embodied-R1, else a plan."""
    if family == "embodied":
        return parse_location(text, size, "point")
    return parse_plan(text, size)


def answers(seed: int, count: int, *, big: bool = True):
    """Yield ``count`` (base family, image size, answer text) triples from ``seed``; ``big`` allows runs up to the
    size cap and megabyte strings (slower per answer)."""
    rng = random.Random(seed)
    for _ in range(count):
        family, make = rng.choice(BASES)
        size = rng.choice(SIZES)
        text = make(rng, size)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            text = _mutate(rng, text, big)[:2_000_000]  # over the size cap either way; keeps memory small
        yield family, size, text
