"""Scene cards for staging Spa-Bench trials on a real arm: a top-down layout per trial (object positions in cm on a
grid aligned with the robot base), the instruction and what counts as success; one PNG per card, one printable HTML
sheet, and ``cards.jsonl`` (the trial record up to ``initial_positions`` plus the card's own keys) that
``spabench session`` and the console read.

Layout convention: the card is drawn as seen from above with the robot base at the bottom centre, base +x (away
from the robot) up and base +y (the robot's left) to the left; the camera, which the instructions' left/right/front/
behind refer to, stands at the top of the card, facing the robot.
"""

from __future__ import annotations

import html
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from PIL import Image, ImageDraw, ImageFont

from grounded_planner.fileio import write_jsonl_atomic, write_text_atomic
from grounded_planner.sim.scenario import NAMED_COLORS
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.scenes import WORKSPACES, generate_trial
from grounded_planner.spabench.trial import TASK_CONDITIONS, Trial

CARDS_FILE = "cards.jsonl"
SHEET_FILE = "cards.html"
CARD_DIR = "cards"
PX_PER_CM = 16  # card drawing scale
MARGIN_CM = 3.0


def trial_keys(
    tasks: Iterable[str], conditions: Iterable[str], trials: int, first_seed: int = 0
) -> list[tuple[str, str, int]]:
    """``(task, condition, seed)`` of every trial a run of these options holds, in run order: task, condition, then
    seed; a condition a task does not have (``TASK_CONDITIONS``) is left out."""
    if trials < 1 or first_seed < 0:
        raise SpaBenchError(f"--trials must be >= 1 and --first-seed >= 0, got {trials} and {first_seed}")
    conditions = list(conditions)
    return [
        (task, condition, seed)
        for task in tasks
        for condition in conditions
        if condition in TASK_CONDITIONS[task]
        for seed in range(first_seed, first_seed + trials)
    ]


def card_record(trial: Trial, planner: str = "") -> dict:
    """The ``cards.jsonl`` line of a trial (paths relative to the cards folder)."""
    stem = card_stem(trial)
    return {
        **trial.record(planner).card_dict(),
        "objects": [o.to_dict() for o in trial.objects],
        "success_rule": trial.success_rule,
        "card_png": f"{CARD_DIR}/{stem}.png",
        "card_html": SHEET_FILE,
    }


def card_stem(trial: Trial) -> str:
    return f"{trial.task}_{trial.condition}_{trial.seed}"


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size
        return ImageFont.load_default()


def draw_card(trial: Trial) -> Image.Image:
    """The card of one trial as an RGB image: grid in cm aligned with the robot base, footprints to scale."""
    ws = WORKSPACES[trial.robot]
    extent_cm = ws.r_max_m * 100 + MARGIN_CM
    width_cm, height_cm = 2 * extent_cm, extent_cm + MARGIN_CM
    w, h_layout = int(width_cm * PX_PER_CM), int(height_cm * PX_PER_CM)
    text_h = 150
    img = Image.new("RGB", (w, h_layout + text_h), "white")
    draw = ImageDraw.Draw(img)
    small, normal = _font(11), _font(15)

    def px(x_m: float, y_m: float) -> tuple[float, float]:
        """Base frame (m) -> card pixels: base at the bottom centre, +x up, +y left."""
        return (w / 2 - y_m * 100 * PX_PER_CM, h_layout - MARGIN_CM * PX_PER_CM - x_m * 100 * PX_PER_CM)

    # grid: 1 cm lines, labelled every 5 cm
    x_max_cm = int(extent_cm)
    for cm in range(-int(extent_cm), int(extent_cm) + 1):
        major = cm % 5 == 0
        colour = (190, 190, 190) if major else (232, 232, 232)
        x0, _ = px(0, cm / 100)
        draw.line([(x0, 0), (x0, h_layout)], fill=colour)
        if major:
            draw.text((x0 + 2, h_layout - 14), f"y {cm}", fill=(90, 90, 90), font=small)
    for cm in range(-int(MARGIN_CM), x_max_cm + 1):
        major = cm % 5 == 0
        _, y0 = px(cm / 100, 0)
        draw.line([(0, y0), (w, y0)], fill=(190, 190, 190) if major else (232, 232, 232))
        if major:
            draw.text((2, y0 - 13), f"x {cm}", fill=(90, 90, 90), font=small)
    # reach band and the robot base
    for r in (ws.r_min_m, ws.r_max_m):
        cx, cy = px(0, 0)
        rr = r * 100 * PX_PER_CM
        draw.arc([cx - rr, cy - rr, cx + rr, cy + rr], 180, 360, fill=(150, 200, 150), width=1)
    bx, by = px(0, 0)
    draw.rectangle([bx - 0.03 * 100 * PX_PER_CM, by - 10, bx + 0.03 * 100 * PX_PER_CM, by + 10], fill=(40, 40, 40))
    draw.text((bx + 30, by - 6), f"robot base ({trial.robot}): x forward, y left", fill=(40, 40, 40), font=small)
    draw.text((w / 2 - 70, 4), "camera side (facing the robot)", fill=(40, 40, 40), font=small)
    # objects
    for obj in sorted(trial.objects, key=lambda o: o.family != "bowl"):  # bowls first: objects draw over them
        rgb = tuple(int(255 * c) for c in NAMED_COLORS.get(obj.colour, (0.5, 0.5, 0.5)))
        ox, oy = px(obj.position_m[0], obj.position_m[1])
        outline = (0, 0, 0)
        if len(obj.size_m) == 3:  # box: rotated rectangle; yaw about base z, drawn with +y to the left
            hx, hy = obj.size_m[0] * 50 * PX_PER_CM, obj.size_m[1] * 50 * PX_PER_CM
            yaw = math.radians(obj.yaw_deg)
            corners = []
            for sx, sy in ((1, 1), (-1, 1), (-1, -1), (1, -1)):
                lx, ly = sx * hx, sy * hy  # local x (forward), y (left) in pixels
                bx_, by_ = lx * math.cos(yaw) - ly * math.sin(yaw), lx * math.sin(yaw) + ly * math.cos(yaw)
                corners.append((ox - by_, oy - bx_))
            draw.polygon(corners, fill=rgb, outline=outline)
        else:
            rr = obj.size_m[0] * 100 * PX_PER_CM
            draw.ellipse(
                [ox - rr, oy - rr, ox + rr, oy + rr],
                fill=None if obj.family == "bowl" else rgb,
                outline=rgb if obj.family == "bowl" else outline,
                width=3 if obj.family == "bowl" else 1,
            )
        label = f"{obj.name}{' (' + obj.state.replace('_', '-') + ')' if obj.state else ''}"
        where = f"x {obj.position_m[0] * 100:.1f}, y {obj.position_m[1] * 100:.1f} cm"
        is_target = obj.id == trial.spec.target
        draw.text((ox + 8, oy - 14), label + (" *" if is_target else ""), fill=(0, 0, 0), font=small)
        draw.text((ox + 8, oy), where, fill=(60, 60, 60), font=small)
        draw.line([(ox - 3, oy), (ox + 3, oy)], fill=(0, 0, 0))
        draw.line([(ox, oy - 3), (ox, oy + 3)], fill=(0, 0, 0))
    # text block
    y = h_layout + 8
    draw.line([(0, h_layout), (w, h_layout)], fill=(0, 0, 0))
    for line in (
        f"{trial.trial_id}  ({trial.robot})",
        f'say: "{trial.instruction}"',
        f"success: {trial.success_rule}",
        "no action expected" if not trial.expects_action else "action expected",
        "* = the intended target" if trial.spec.target else "",
    ):
        for chunk in _wrap(line, max(20, int(w / 8))):
            draw.text((8, y), chunk, fill=(0, 0, 0), font=normal)
            y += 19
    return img


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])


def sheet_html(trials: list[Trial]) -> str:
    """A printable HTML sheet: one card per trial (layout image, instruction, objects in cm, success rule)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Spa-Bench scene cards</title><style>"
        "body{font-family:sans-serif;margin:1cm} .card{page-break-inside:avoid;border:1px solid #888;"
        "padding:8px;margin:0 0 12px 0} .card img{max-width:100%} table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px} @media print{.card{page-break-after:"
        "always}}</style></head><body><h1>Spa-Bench scene cards</h1><p>Positions are object centres in cm in "
        "the robot base frame (x forward, y to the robot's left). Left/right/front/behind in the instructions "
        "are as seen from the camera, which faces the robot.</p>"
    ]
    for trial in trials:
        rows = "".join(
            f"<tr><td>{html.escape(o.name)}</td><td>{html.escape(o.state or '')}</td>"
            f"<td>{o.position_m[0] * 100:.1f}</td><td>{o.position_m[1] * 100:.1f}</td>"
            f"<td>{o.yaw_deg:.0f}</td><td>{'target' if o.id == trial.spec.target else ''}</td></tr>"
            for o in trial.objects
        )
        parts.append(
            f"<div class='card' id='{html.escape(card_stem(trial))}'><h2>{html.escape(trial.trial_id)} "
            f"({trial.robot})</h2><p><b>Say:</b> \u201c{html.escape(trial.instruction)}\u201d</p>"
            f"<p><b>Success:</b> {html.escape(trial.success_rule)}"
            f"{'' if trial.expects_action else ' (no action expected)'}</p>"
            f"<img src='{CARD_DIR}/{html.escape(card_stem(trial))}.png' alt='layout'>"
            f"<table><tr><th>object</th><th>state</th><th>x cm</th><th>y cm</th><th>yaw deg</th><th></th>"
            f"</tr>{rows}</table></div>"
        )
    parts.append("</body></html>")
    return "".join(parts)


def write_cards(keys: list[tuple[str, str, int]], robot: str, out_dir: str | Path, planner: str = "") -> list[dict]:
    """Generate every trial of ``keys`` and write the cards folder ``out_dir``; returns the card lines.

    Every trial is generated before anything is written (a bad trial leaves no folder half-written), and the
    folder's files are written beside it first and moved in at the end.
    """
    trials = [generate_trial(task, condition, seed, robot) for task, condition, seed in keys]
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (staging / CARD_DIR).mkdir()
        records = []
        for trial in trials:
            draw_card(trial).save(staging / CARD_DIR / f"{card_stem(trial)}.png")
            records.append(card_record(trial, planner))
        write_text_atomic(staging / SHEET_FILE, sheet_html(trials))
        write_jsonl_atomic(staging / CARDS_FILE, records)
        out.mkdir(exist_ok=True)
        for item in (CARD_DIR, SHEET_FILE, CARDS_FILE):
            target = out / item
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(staging / item, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return records
