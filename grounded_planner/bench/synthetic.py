"""Random ground-truth episodes and perturbed predictions, for the scoring benchmark and cross-check tests.

Predictions are GT plans with the mistakes VLMs make: jittered boxes (some just above, some just below
IoU 0.5), place points on the target's edge or outside it, steps permuted inside and across unordered
blocks, steps dropped or added, grasps without a place, null and unparseable plans.
"""

from __future__ import annotations

import random
from typing import Any

IMAGE_W, IMAGE_H = 640, 480


def _rand_box(rng: random.Random) -> list[float]:
    w, h = rng.randint(20, 160), rng.randint(20, 160)
    x1, y1 = rng.randint(0, IMAGE_W - w), rng.randint(0, IMAGE_H - h)
    return [float(x1), float(y1), float(x1 + w), float(y1 + h)]


def random_episode(rng: random.Random, ep_id: str, n_actions: int | None = None) -> dict[str, Any]:
    """A GT episode record (JSONL dict) with ``n_actions`` actions (random 1-26 when None)."""
    if n_actions is None:
        n_actions = rng.choice([rng.randint(1, 4), rng.randint(5, 8), rng.randint(9, 26)])
    actions: list[dict[str, Any]] = []
    n_steps = 0
    while len(actions) < n_actions:
        left = n_actions - len(actions)
        if left >= 2 and rng.random() < 0.7:
            actions.append({"type": "grasp", "object": "obj", "bbox": _rand_box(rng)})
            actions.append({"type": "place", "target": "region", "bbox": _rand_box(rng)})
        else:
            actions.append({"type": rng.choice(["open", "close"]), "object": "door", "bbox": _rand_box(rng)})
        n_steps += 1
    blocks: list[list[int]] = []
    i = 0
    while i < n_steps - 1:
        if rng.random() < 0.3:
            size = min(rng.randint(2, 5), n_steps - i)
            blocks.append(list(range(i, i + size)))
            i += size
        else:
            i += 1
    return {
        "id": ep_id,
        "image": f"images/{ep_id}.png",
        "instruction": "synthetic task",
        "instruction_type": rng.choice(["explicit", "implicit"]),
        "actions": actions,
        "unordered": blocks,
    }


def _jitter_box(rng: random.Random, box: list[float]) -> list[float]:
    """A box near ``box``: exact, slightly moved, exactly IoU 0.5, or clearly off."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    r = rng.random()
    if r < 0.4:
        return list(box)
    if r < 0.65:
        d = rng.uniform(-0.1, 0.1)
        return [x1 + d * w, y1 + d * h, x2 + d * w, y2 + d * h]
    if r < 0.75:
        return [x1, y1, x1 + w / 2, y2]  # IoU exactly 0.5 (matches)
    if r < 0.85:
        return [x1, y1, x1 + w / 2 - 1.0, y2]  # IoU just below 0.5
    return [x1 + 0.8 * w, y1 + 0.8 * h, x2 + 0.8 * w, y2 + 0.8 * h]


def _place_point(rng: random.Random, box: list[float]) -> list[float]:
    x1, y1, x2, y2 = box
    r = rng.random()
    if r < 0.6:
        return [rng.uniform(x1, x2), rng.uniform(y1, y2)]
    if r < 0.75:
        return [x2, rng.uniform(y1, y2)]  # on the right edge: inside
    if r < 0.85:
        return [x1, y1]  # on a corner: inside
    return [x2 + rng.uniform(0.5, 30.0), rng.uniform(y1, y2)]


def _gt_steps(actions: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    steps, i = [], 0
    while i < len(actions):
        if actions[i]["type"] == "grasp":
            steps.append(actions[i : i + 2])
            i += 2
        else:
            steps.append(actions[i : i + 1])
            i += 1
    return steps


def random_prediction(rng: random.Random, episode: dict[str, Any]) -> dict[str, Any]:
    """A prediction record for ``episode``: mostly near-correct plans with typical mistakes."""
    r = rng.random()
    if r < 0.04:
        return {"id": episode["id"], "plan": None, "error": "VLMResponseError: no JSON in the answer"}
    if r < 0.06:
        return {"id": episode["id"], "plan": "not a plan", "error": ""}
    steps = _gt_steps(episode["actions"])
    pred_steps = []
    for step in steps:
        if step[0]["type"] == "grasp":
            pred_steps.append(
                [
                    {"type": "grasp", "bbox": _jitter_box(rng, step[0]["bbox"])},
                    {"type": "place", "point": _place_point(rng, step[1]["bbox"])},
                ]
            )
        else:
            kind = step[0]["type"] if rng.random() < 0.95 else ("close" if step[0]["type"] == "open" else "open")
            pred_steps.append([{"type": kind, "bbox": _jitter_box(rng, step[0]["bbox"])}])
    for block in episode["unordered"]:
        if rng.random() < 0.5:
            chunk = pred_steps[block[0] : block[-1] + 1]
            rng.shuffle(chunk)
            pred_steps[block[0] : block[-1] + 1] = chunk
    if len(pred_steps) >= 2 and rng.random() < 0.1:
        i = rng.randrange(len(pred_steps) - 1)
        pred_steps[i], pred_steps[i + 1] = pred_steps[i + 1], pred_steps[i]
    if pred_steps and rng.random() < 0.1:
        del pred_steps[rng.randrange(len(pred_steps))]
    if rng.random() < 0.1:
        extra = [{"type": "open", "bbox": _rand_box(rng)}]
        pred_steps.insert(rng.randint(0, len(pred_steps)), extra)
    actions = [a for step in pred_steps for a in step]
    if actions and rng.random() < 0.05:
        actions.insert(rng.randint(0, len(actions)), {"type": "grasp", "bbox": _rand_box(rng)})  # no place after it
    if actions and rng.random() < 0.03:
        actions.insert(rng.randint(0, len(actions)), {"type": "place", "point": [10.0, 10.0]})  # no grasp before it
    if actions and rng.random() < 0.02:
        actions[rng.randrange(len(actions))].pop("bbox", None)
    plan = {
        "instruction": episode["instruction"],
        "image_size": [IMAGE_W, IMAGE_H],
        "actions": actions,
        "reason": "" if actions else "nothing to do",
        "warnings": [],
        "model": "synthetic",
        "raw_response": "",
    }
    return {"id": episode["id"], "plan": plan, "error": ""}


def generate(n_episodes: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``n_episodes`` GT records and one prediction record each, reproducible from ``seed``."""
    rng = random.Random(seed)
    episodes = [random_episode(rng, f"syn-{i:05d}") for i in range(n_episodes)]
    return episodes, [random_prediction(rng, ep) for ep in episodes]
