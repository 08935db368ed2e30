"""A small Spa-Bench scene-card folder as `spabench cards --out DIR` lays it out (the contract: cards.jsonl with the
trial record's fields up to initial_positions plus objects, success_rule, card_png, card_html; one PNG per card)."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image


def trial_record(task: str, condition: str, seed: int, instruction: str = "put two blocks in the bowl", planner=""):
    """A trial record of the red cube and the tray (the cards' scene), as the contract checks it."""
    from grounded_planner.spabench.trial import TrialRecord, TrialSpec

    return TrialRecord(
        task=task,
        condition=condition,
        seed=seed,
        robot="gp5",
        planner=planner,
        instruction=instruction,
        expects_action=True,
        spec=TrialSpec(target="red_cube", receptacle="tray", receptacle_radius_m=0.085),
        initial_positions={"red_cube": (0.308, 0.0, 0.025), "tray": (0.5, 0.0, 0.015)},
    )


def make_cards(
    folder: Path,
    trials,
    instruction: str = "put two blocks in the bowl",
    success_rule: str = "the red cube ends in the tray",
) -> list[dict]:
    """``trials``: (task, condition, seed) triples; every card asks ``instruction`` and shows ``success_rule``."""
    (folder / "cards").mkdir(parents=True)
    cards = []
    for task, condition, seed in trials:
        record = trial_record(task, condition, seed, instruction)
        png = f"cards/{task}_{condition}_{seed}.png"
        Image.new("RGB", (160, 120), (200, 180, 20)).save(folder / png)
        cards.append(
            {
                **record.card_dict(),
                "objects": [],
                "success_rule": success_rule,
                "card_png": png,
                "card_html": "cards.html",
            }
        )
    (folder / "cards.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cards))
    return cards
