"""The project's own small sample episode set: drawn table-top scenes with ground truth and sample predictions.

``python -m grounded_planner.bench.sample data/sample_bench`` (re)writes ``episodes.jsonl``,
``predictions.jsonl`` and ``images/*.png``. Every scene is drawn with Pillow from a seeded layout, so
the GT boxes are exact: they are the drawn objects' boxes. The sample predictions are built to show
one outcome each (success, a permutation inside an unordered block, wrong order, wrong box, place
outside the target, missing, extra and invalid steps, null and unparseable plans).
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from PIL import Image, ImageDraw

from grounded_planner.errors import RunFailure

IMAGE_SIZE = (320, 240)  # (width, height) px of every sample image
TABLE_RGB = (196, 164, 120)
WALL_RGB = (226, 230, 236)


@dataclass
class Thing:
    """One drawn object: a name, how it is drawn, its colour and its box (x1, y1, x2, y2) px."""

    name: str
    shape: str  # cup | block | apple | plate | bin | tray | drawer
    rgb: tuple[int, int, int]
    bbox: tuple[int, int, int, int]


SIZES = {
    "cup": (22, 28),
    "block": (20, 20),
    "apple": (22, 22),
    "plate": (64, 40),
    "bin": (70, 56),
    "tray": (80, 44),
    "drawer": (96, 40),
}


def _layout(rng: random.Random, things: list[tuple[str, str, tuple[int, int, int]]]) -> list[Thing]:
    """Place objects on the table without overlap (a drawer sits on the wall strip at the top)."""
    placed: list[Thing] = []
    w_img, h_img = IMAGE_SIZE
    for name, shape, rgb in things:
        w, h = SIZES[shape]
        for _ in range(500):
            if shape == "drawer":
                x, y = rng.randint(8, w_img - w - 8), 12
            else:
                x, y = rng.randint(8, w_img - w - 8), rng.randint(70, h_img - h - 8)
            box = (x, y, x + w, y + h)
            if all(
                box[2] + 6 < t.bbox[0] or t.bbox[2] + 6 < box[0] or box[3] + 6 < t.bbox[1] or t.bbox[3] + 6 < box[1]
                for t in placed
            ):
                placed.append(Thing(name, shape, rgb, box))
                break
        else:
            raise RunFailure(f"sample layout: no room for {name}")
    return placed


def draw_scene(things: list[Thing]):
    """Render the scene as a PIL image (flat colours: small PNGs)."""

    img = Image.new("RGB", IMAGE_SIZE, TABLE_RGB)
    d = ImageDraw.Draw(img)
    d.rectangle((0, 0, IMAGE_SIZE[0], 60), fill=WALL_RGB)
    for t in things:
        x1, y1, x2, y2 = t.bbox
        dark = tuple(max(0, c - 70) for c in t.rgb)
        if t.shape == "cup":
            d.rectangle((x1 + 2, y1 + 4, x2 - 2, y2 - 1), fill=t.rgb, outline=dark)
            d.ellipse((x1, y1, x2 - 1, y1 + 8), fill=dark, outline=dark)
        elif t.shape == "block":
            d.rectangle((x1, y1, x2 - 1, y2 - 1), fill=t.rgb, outline=dark)
        elif t.shape == "apple":
            d.ellipse((x1, y1 + 2, x2 - 1, y2 - 1), fill=t.rgb, outline=dark)
            d.line((x1 + 11, y1, x1 + 11, y1 + 5), fill=(90, 60, 20), width=2)
        elif t.shape == "plate":
            d.ellipse((x1, y1, x2 - 1, y2 - 1), fill=t.rgb, outline=dark)
            d.ellipse((x1 + 12, y1 + 8, x2 - 13, y2 - 9), outline=dark)
        elif t.shape in ("bin", "tray"):
            d.rectangle((x1, y1, x2 - 1, y2 - 1), fill=dark, outline=(40, 40, 40))
            d.rectangle((x1 + 5, y1 + 5, x2 - 6, y2 - 6), fill=t.rgb)
        elif t.shape == "drawer":
            d.rectangle((x1, y1, x2 - 1, y2 - 1), fill=t.rgb, outline=dark, width=2)
            cx = (x1 + x2) // 2
            d.rectangle((cx - 12, y1 + 16, cx + 12, y1 + 22), fill=dark)
    return img


# Each episode: (id, instruction, type, objects, GT steps, unordered blocks, prediction recipe).
# A GT step is ("pair", thing, receptacle) or ("open"/"close", thing). Prediction recipes are the
# outcome to demonstrate, turned into a plan by _predict.
RED, BLUE, GREEN, YELLOW, PURPLE = (214, 60, 50), (60, 100, 210), (70, 170, 80), (235, 200, 50), (150, 80, 180)
WHITE, GREY, BROWN = (245, 245, 240), (120, 120, 125), (150, 100, 60)
EPISODES: list[dict[str, Any]] = [
    dict(
        id="ep-01",
        instruction="put the red cup in the bin",
        type="explicit",
        things=[("red cup", "cup", RED), ("bin", "bin", GREY), ("blue block", "block", BLUE)],
        steps=[("pair", "red cup", "bin")],
        blocks=[],
        recipe="perfect",
    ),
    dict(
        id="ep-02",
        instruction="clear the cups off the table",
        type="implicit",
        things=[("red cup", "cup", RED), ("blue cup", "cup", BLUE), ("bin", "bin", GREY)],
        steps=[("pair", "red cup", "bin"), ("pair", "blue cup", "bin")],
        blocks=[[0, 1]],
        recipe="permute_block",
    ),
    dict(
        id="ep-03",
        instruction="open the drawer, then put the yellow block in the tray",
        type="explicit",
        things=[("drawer", "drawer", BROWN), ("yellow block", "block", YELLOW), ("tray", "tray", WHITE)],
        steps=[("open", "drawer"), ("pair", "yellow block", "tray")],
        blocks=[],
        recipe="wrong_order",
    ),
    dict(
        id="ep-04",
        instruction="put the red, blue and green blocks on the plate",
        type="explicit",
        things=[
            ("red block", "block", RED),
            ("blue block", "block", BLUE),
            ("green block", "block", GREEN),
            ("plate", "plate", WHITE),
        ],
        steps=[("pair", "red block", "plate"), ("pair", "blue block", "plate"), ("pair", "green block", "plate")],
        blocks=[[0, 1, 2]],
        recipe="wrong_box",
    ),
    dict(
        id="ep-05",
        instruction="get the fruit ready to serve",
        type="implicit",
        things=[
            ("apple", "apple", RED),
            ("green apple", "apple", GREEN),
            ("yellow cup", "cup", YELLOW),
            ("plate", "plate", WHITE),
            ("tray", "tray", WHITE),
        ],
        steps=[("pair", "apple", "plate"), ("pair", "green apple", "plate"), ("pair", "yellow cup", "tray")],
        blocks=[],
        recipe="place_outside",
    ),
    dict(
        id="ep-06",
        instruction="open the drawer, put the purple and blue blocks in it, then close it",
        type="explicit",
        things=[("drawer", "drawer", BROWN), ("purple block", "block", PURPLE), ("blue block", "block", BLUE)],
        steps=[
            ("open", "drawer"),
            ("pair", "purple block", "drawer"),
            ("pair", "blue block", "drawer"),
            ("close", "drawer"),
        ],
        blocks=[[1, 2]],
        recipe="missing_last",
    ),
    dict(
        id="ep-07",
        instruction="I'd like the apple on a plate",
        type="implicit",
        things=[("apple", "apple", RED), ("plate", "plate", WHITE), ("drawer", "drawer", BROWN)],
        steps=[("pair", "apple", "plate")],
        blocks=[],
        recipe="extra_open",
    ),
    dict(
        id="ep-08",
        instruction="put all five blocks in the bin",
        type="explicit",
        things=[
            ("red block", "block", RED),
            ("blue block", "block", BLUE),
            ("green block", "block", GREEN),
            ("yellow block", "block", YELLOW),
            ("purple block", "block", PURPLE),
            ("bin", "bin", GREY),
        ],
        steps=[("pair", c, "bin") for c in ("red block", "blue block", "green block", "yellow block", "purple block")],
        blocks=[[0, 1, 2, 3, 4]],
        recipe="permute_block",
    ),
    dict(
        id="ep-09",
        instruction="pack everything away in the drawer",
        type="implicit",
        things=[
            ("drawer", "drawer", BROWN),
            ("red cup", "cup", RED),
            ("blue cup", "cup", BLUE),
            ("green block", "block", GREEN),
            ("apple", "apple", RED),
        ],
        steps=[
            ("open", "drawer"),
            ("pair", "red cup", "drawer"),
            ("pair", "blue cup", "drawer"),
            ("pair", "green block", "drawer"),
            ("pair", "apple", "drawer"),
            ("close", "drawer"),
        ],
        blocks=[[1, 2, 3, 4]],
        recipe="null",
    ),
    dict(
        id="ep-10",
        instruction="move the green block onto the plate",
        type="explicit",
        things=[("green block", "block", GREEN), ("plate", "plate", WHITE)],
        steps=[("pair", "green block", "plate")],
        blocks=[],
        recipe="grasp_only",
    ),
    dict(
        id="ep-11",
        instruction="sort the cups into the tray and the blocks into the bin",
        type="implicit",
        things=[
            ("red cup", "cup", RED),
            ("yellow cup", "cup", YELLOW),
            ("blue block", "block", BLUE),
            ("green block", "block", GREEN),
            ("tray", "tray", WHITE),
            ("bin", "bin", GREY),
        ],
        steps=[
            ("pair", "red cup", "tray"),
            ("pair", "yellow cup", "tray"),
            ("pair", "blue block", "bin"),
            ("pair", "green block", "bin"),
        ],
        blocks=[[0, 1], [2, 3]],
        recipe="swap_across_blocks",
    ),
    dict(
        id="ep-12",
        instruction="open the drawer",
        type="explicit",
        things=[("drawer", "drawer", BROWN), ("red cup", "cup", RED)],
        steps=[("open", "drawer")],
        blocks=[],
        recipe="unparseable",
    ),
]


def _gt_actions(steps, things: dict[str, Thing]) -> list[dict[str, Any]]:
    actions: list[dict[str, Any]] = []
    for step in steps:
        if step[0] == "pair":
            obj, rec = things[step[1]], things[step[2]]
            actions.append({"type": "grasp", "object": obj.name, "bbox": list(obj.bbox)})
            actions.append({"type": "place", "object": obj.name, "target": rec.name, "bbox": list(rec.bbox)})
        else:
            actions.append({"type": step[0], "object": things[step[1]].name, "bbox": list(things[step[1]].bbox)})
    return actions


def _pred_steps(gt_actions: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """GT actions as a near-perfect prediction: boxes off by a pixel, place points at the target's centre."""
    steps, i = [], 0
    while i < len(gt_actions):
        a = gt_actions[i]
        box = [a["bbox"][0] + 1, a["bbox"][1], a["bbox"][2] + 1, a["bbox"][3] - 1]
        if a["type"] == "grasp":
            region = gt_actions[i + 1]["bbox"]
            steps.append(
                [
                    {"type": "grasp", "object": a["object"], "bbox": box},
                    {
                        "type": "place",
                        "object": a["object"],
                        "target": gt_actions[i + 1]["target"],
                        "point": [(region[0] + region[2]) / 2, (region[1] + region[3]) / 2],
                    },
                ]
            )
            i += 2
        else:
            steps.append([{"type": a["type"], "object": a["object"], "bbox": box}])
            i += 1
    return steps


def _predict(recipe: str, ep_id: str, instruction: str, gt_actions: list[dict[str, Any]], blocks) -> dict[str, Any]:
    if recipe == "null":
        return {
            "id": ep_id,
            "plan": None,
            "error": "VLMResponseError: no valid plan after 2 answer(s): no JSON in the answer",
        }
    if recipe == "unparseable":
        return {"id": ep_id, "plan": "open(drawer)", "error": ""}
    steps = _pred_steps(gt_actions)
    if recipe == "permute_block":
        b = blocks[0]
        steps[b[0] : b[-1] + 1] = steps[b[0] : b[-1] + 1][::-1]
    elif recipe in ("wrong_order", "swap_across_blocks"):
        k = 0 if recipe == "wrong_order" else 1
        steps[k], steps[k + 1] = steps[k + 1], steps[k]
    elif recipe == "wrong_box":
        x1, y1, x2, y2 = steps[1][0]["bbox"]
        steps[1][0]["bbox"] = [x1 + 14, y1 + 12, x2 + 14, y2 + 12]  # IoU well under 0.5
    elif recipe == "place_outside":
        x, y = steps[2][1]["point"]
        steps[2][1]["point"] = [x + 60, y]
    elif recipe == "missing_last":
        steps.pop()
    elif recipe == "extra_open":
        steps.append([{"type": "open", "object": "drawer", "bbox": [10.0, 12.0, 106.0, 52.0]}])
    elif recipe == "grasp_only":
        steps[0] = steps[0][:1]
    actions = [a for s in steps for a in s]
    plan = {
        "instruction": instruction,
        "image_size": list(IMAGE_SIZE),
        "actions": actions,
        "reason": "",
        "warnings": [],
        "model": "sample",
        "raw_response": "",
    }
    return {"id": ep_id, "plan": plan, "error": ""}


def make_sample_set(out_dir: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """Write the sample episodes, images and predictions; returns (episodes path, predictions path)."""
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    episode_lines, prediction_lines = [], []
    for spec in EPISODES:
        things = _layout(rng, spec["things"])
        by_name = {t.name: t for t in things}
        image_rel = f"images/{spec['id']}.png"
        draw_scene(things).save(out / image_rel, optimize=True)
        actions = _gt_actions(spec["steps"], by_name)
        record = {
            "id": spec["id"],
            "image": image_rel,
            "instruction": spec["instruction"],
            "instruction_type": spec["type"],
            "actions": actions,
            "unordered": spec["blocks"],
        }
        episode_lines.append(json.dumps(record))
        prediction_lines.append(
            json.dumps(_predict(spec["recipe"], spec["id"], spec["instruction"], actions, spec["blocks"]))
        )
    episodes_path, predictions_path = out / "episodes.jsonl", out / "predictions.jsonl"
    episodes_path.write_text("\n".join(episode_lines) + "\n", encoding="utf-8")
    predictions_path.write_text("\n".join(prediction_lines) + "\n", encoding="utf-8")
    return episodes_path, predictions_path


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "data/sample_bench"
    for p in make_sample_set(target):
        print(p)
