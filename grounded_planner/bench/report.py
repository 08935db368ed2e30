"""Per-episode failure diagnosis and the self-contained HTML report (Table I, overlays, reasons)."""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from grounded_planner.errors import InputError
from grounded_planner.fileio import write_text_atomic
from grounded_planner.bench.episodes import Episode, Prediction
from grounded_planner.bench.scoring import (
    IOU_THRESHOLD,
    EpisodeScore,
    gt_steps,
    iou,
    match_sets,
    max_matching,
    predicted_actions,
    score,
    score_episode,
    segment_steps,
)
from grounded_planner.bench.table import HORIZONS, TYPES, episode_counts, table_cells
from PIL import Image

# Failure categories, in the order the report lists them.
CATEGORIES = (
    "missing prediction",
    "no plan",
    "unparseable",
    "invalid step",
    "wrong box",
    "place outside target",
    "missing step",
    "extra step",
    "wrong order",
)


@dataclass
class Diagnosis:
    """Why an episode failed: ``reasons`` as (category, text); empty when the task succeeded."""

    score: EpisodeScore
    reasons: list[tuple[str, str]] = field(default_factory=list)

    @property
    def categories(self) -> list[str]:
        return sorted({c for c, _ in self.reasons}, key=CATEGORIES.index)


def _step_name(episode: Episode, step: tuple) -> str:
    first = episode.actions[step[4]]
    if step[0] == "pair":
        place = episode.actions[step[4] + 1]
        return f"pick {first.object or 'object'} -> {place.target or 'target'}"
    return f"{step[0]} {first.object or ''}".strip()


def diagnose(episode: Episode, prediction: Prediction | None) -> Diagnosis:
    """Score one episode and say why it failed, step by step.

    Categories: missing prediction, no plan (null, with the run's error), unparseable, invalid step
    (grasp without place, place without grasp, unknown type), wrong box (best same-kind candidate has
    IoU < 0.5), place outside target, missing step, extra step, wrong order (every step right, order not).
    """
    result = score_episode(episode, prediction)
    diag = Diagnosis(result)
    if result.success:
        return diag
    if prediction is None:
        diag.reasons.append(("missing prediction", "no prediction for this episode"))
        return diag
    actions = predicted_actions(prediction.plan)
    if actions is None:
        if prediction.plan is None:
            diag.reasons.append(("no plan", prediction.error or "the prediction has no plan"))
        else:
            diag.reasons.append(("unparseable", f"the plan is not a plan object: {str(prediction.plan)[:120]!r}"))
        return diag
    gt = gt_steps(episode)
    pred = segment_steps(actions)
    for step in pred:
        if step[0] == "invalid":
            atype = actions[step[4]][0]
            why = {"grasp": "a grasp not followed by a place", "place": "a place without a grasp before it"}.get(
                atype, f"unknown action type {atype!r}"
            )
            diag.reasons.append(("invalid step", f"predicted action {step[4]}: {why}"))
    ok = match_sets(pred, gt)
    match = max_matching(ok, len(gt))
    used = {m for m in match if m >= 0}
    spare = [p for p in range(len(pred)) if p not in used and pred[p][0] != "invalid"]
    for j, g in enumerate(gt):
        if match[j] >= 0:
            continue
        candidates = [p for p in spare if pred[p][0] == g[0]]
        if not candidates:
            diag.reasons.append(
                ("missing step", f"GT step {j + 1} ({_step_name(episode, g)}) has no {g[0]} step in the plan")
            )
            continue
        best = max(candidates, key=lambda p: iou(pred[p][1], g[1]) if pred[p][1] is not None else -1.0)
        spare.remove(best)
        overlap = iou(pred[best][1], g[1]) if pred[best][1] is not None else 0.0
        if overlap < IOU_THRESHOLD:
            diag.reasons.append(
                (
                    "wrong box",
                    f"GT step {j + 1} ({_step_name(episode, g)}): best predicted box has "
                    f"IoU {overlap:.2f} < {IOU_THRESHOLD}",
                )
            )
        else:
            point = pred[best][2]
            where = "no place point" if point is None else f"place point ({point[0]:.0f}, {point[1]:.0f})"
            diag.reasons.append(
                (
                    "place outside target",
                    f"GT step {j + 1} ({_step_name(episode, g)}): {where} "
                    f"outside the target box {[round(v) for v in g[2]]}",
                )
            )
    for p in spare:
        diag.reasons.append(("extra step", f"predicted step {p + 1} ({pred[p][0]}) matches no GT step"))
    if not diag.reasons:
        # every GT step matched one-to-one and nothing is left over, yet TSR failed: order alone is wrong
        diag.reasons.append(("wrong order", "every step is right but the order is not (outside the unordered blocks)"))
    return diag


# -- HTML -------------------------------------------------------------------------------------------

GT_RGB, PRED_RGB, PLACE_RGB = "#1a9a3a", "#e0301e", "#1f5fd6"
CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table.t1{border-collapse:collapse;margin:8px 0 16px}
table.t1 td,table.t1 th{border:1px solid #bbb;padding:3px 8px;text-align:right}
table.t1 th{background:#f1f1f1;text-align:center}
.ep{border:1px solid #ccc;border-radius:6px;padding:10px;margin:12px 0;display:flex;gap:16px;flex-wrap:wrap}
.ep.pass{border-left:6px solid #1a9a3a}.ep.fail{border-left:6px solid #e0301e}
.ep svg{border:1px solid #999;max-width:100%}
.ep .info{flex:1;min-width:280px}
.reason{color:#a01b0e}.ok{color:#1a9a3a;font-weight:bold}
.steps td{padding:1px 6px;font-family:monospace;font-size:12px}
.legend span{margin-right:14px}
"""


def _image_data(episode: Episode, max_side_px: int) -> tuple[str | None, tuple[int, int] | None]:
    """(data URI, original (width, height)) of the episode image, or (None, None) when it cannot be read.

    Images whose longest side exceeds ``max_side_px`` are embedded shrunk (JPEG) to keep the report small;
    the overlay still uses original pixel coordinates because the SVG stretches the image to full size.
    """

    try:
        raw = episode.image.read_bytes()
        with Image.open(io.BytesIO(raw)) as img:
            size = img.size
            if max_side_px and max(size) > max_side_px:
                scale = max_side_px / max(size)
                small = img.convert("RGB").resize((max(1, round(size[0] * scale)), max(1, round(size[1] * scale))))
                buf = io.BytesIO()
                small.save(buf, format="JPEG", quality=85)
                return f"data:image/jpeg;base64,{base64.b64encode(buf.getvalue()).decode('ascii')}", size
            fmt = (img.format or "PNG").lower()
    except (OSError, ValueError):
        return None, None
    mime = {"jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}.get(fmt, "image/png")
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}", size


def _rect(box, colour: str, label: str, dashed: bool = False, label_below: bool = False) -> str:
    x1, y1, x2, y2 = box
    dash = ' stroke-dasharray="5,3"' if dashed else ""
    # GT labels sit inside the top edge, predicted ones under the bottom edge, so they never cover each other
    label_y = y2 + 11 if label_below else y1 + 11
    return (
        f'<rect x="{x1:.1f}" y="{y1:.1f}" width="{max(x2 - x1, 0):.1f}" height="{max(y2 - y1, 0):.1f}" '
        f'fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        f'<text x="{x1 + 2:.1f}" y="{label_y:.1f}" font-size="11" fill="{colour}">{html.escape(label)}</text>'
    )


def _cross(point, colour: str, label: str) -> str:
    x, y = point
    return (
        f'<path d="M{x - 6:.1f},{y - 6:.1f}L{x + 6:.1f},{y + 6:.1f}M{x - 6:.1f},{y + 6:.1f}L{x + 6:.1f},{y - 6:.1f}" '
        f'stroke="{colour}" stroke-width="2.5"/>'
        f'<text x="{x + 7:.1f}" y="{y - 4:.1f}" font-size="11" fill="{colour}">{html.escape(label)}</text>'
    )


def _overlay_svg(episode: Episode, prediction: Prediction | None, max_side_px: int) -> str:
    uri, size = _image_data(episode, max_side_px)
    boxes = [a.bbox for a in episode.actions if a.bbox is not None]
    width, height = size or (int(max(b[2] for b in boxes)) + 20, int(max(b[3] for b in boxes)) + 20)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{max(width, 480)}">']
    if uri:
        parts.append(f'<image href="{uri}" x="0" y="0" width="{width}" height="{height}" preserveAspectRatio="none"/>')
    else:
        parts.append(
            f'<rect width="{width}" height="{height}" fill="#eee"/><text x="8" y="16" font-size="12">'
            f"image not found: {html.escape(str(episode.image))}</text>"
        )
    for k, step in enumerate(gt_steps(episode), start=1):
        parts.append(_rect(step[1], GT_RGB, f"{k}"))
        if step[0] == "pair":
            parts.append(_rect(step[2], PLACE_RGB, f"{k} target", dashed=True))
    actions = predicted_actions(prediction.plan) if prediction is not None else None
    for k, step in enumerate(segment_steps(actions or []), start=1):
        if step[1] is not None:
            parts.append(_rect(step[1], PRED_RGB, f"p{k}" if step[0] != "invalid" else f"p{k}?", label_below=True))
        if step[0] == "pair" and step[2] is not None:
            parts.append(_cross(step[2], PRED_RGB, f"p{k}"))
    parts.append("</svg>")
    return "".join(parts)


def _steps_table(episode: Episode, prediction: Prediction | None) -> str:
    gt = [_step_name(episode, s) for s in gt_steps(episode)]
    actions = predicted_actions(prediction.plan) if prediction is not None else None
    pred = []
    for s in segment_steps(actions or []):
        if s[0] == "pair":
            pt = "none" if s[2] is None else f"({s[2][0]:.0f}, {s[2][1]:.0f})"
            box = "none" if s[1] is None else str([round(v) for v in s[1]])
            pred.append(f"grasp {box} -> place {pt}")
        elif s[0] == "invalid":
            pred.append(f"invalid: {actions[s[4]][0]}")
        else:
            pred.append(f"{s[0]} {'none' if s[1] is None else [round(v) for v in s[1]]}")
    rows = []
    for k in range(max(len(gt), len(pred))):
        g = html.escape(gt[k]) if k < len(gt) else ""
        p = html.escape(pred[k]) if k < len(pred) else ""
        rows.append(f"<tr><td>{k + 1}</td><td>{g}</td><td>{p}</td></tr>")
    blocks = ", ".join("[" + ", ".join(str(i + 1) for i in b) + "]" for b in episode.unordered)
    head = "<tr><th>#</th><th>GT step</th><th>predicted step</th></tr>"
    note = f"<div>unordered blocks (GT step numbers): {blocks}</div>" if blocks else ""
    return f'<table class="steps">{head}{"".join(rows)}</table>{note}'


def _table_html(result: dict[str, Any]) -> str:
    head1 = '<tr><th rowspan="3"></th><th colspan="6">Task Success Rate (TSR) %</th><th colspan="6">Action Recall Rate (ARR) %</th></tr>'
    head2 = "<tr>" + "".join(f'<th colspan="3">{t.capitalize()}</th>' for t in TYPES * 2) + "</tr>"
    head3 = "<tr>" + "".join(f"<th>{h}</th>" for h in HORIZONS * 4) + "</tr>"
    values = [v for _, _, _, v in table_cells(result)]
    counts = episode_counts(result)
    row = "<tr><th>score</th>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
    nrow = "<tr><th>episodes</th>" + "".join(f"<td>{c}</td>" for c in counts) + "</tr>"
    o = result["overall"]
    lo, hi = o["tsr_ci95"]
    overall = (
        f"<p><b>Overall</b>: {o['episodes']} episodes &middot; TSR {o['tsr']:.1f}% (Wilson 95% CI {lo:.1f}&ndash;{hi:.1f}) "
        f"&middot; ARR {o['arr']:.1f}% &middot; action precision {o['precision']:.1f}% &middot; "
        f"{o['null_plans']} null/unparseable plan(s) &middot; {o['missing_predictions']} missing prediction(s)</p>"
    )
    return f'<table class="t1">{head1}{head2}{head3}{row}{nrow}</table>{overall}'


def render_report(
    episodes: list[Episode],
    predictions: Mapping[str, Prediction],
    title: str = "GroundedPlanBench report",
    *,
    image_max_side_px: int = 640,
    failures_only: bool = False,
) -> str:
    """The whole report as one HTML string (images embedded as base64 data URIs; no external files).

    The table and the failure tally always cover every episode; ``failures_only`` leaves the successful
    episodes' cards out, ``image_max_side_px`` (0 = as is) shrinks large images embedded in the cards.
    """
    if image_max_side_px < 0:
        raise InputError(f"image_max_side_px must be >= 0 (0 = original size), got {image_max_side_px}")
    result = score(episodes, predictions)
    diagnoses = [diagnose(ep, predictions.get(ep.id)) for ep in episodes]
    tally = Counter(c for d in diagnoses for c in d.categories)
    tally_html = "".join(f"<li>{html.escape(c)}: {tally[c]} episode(s)</li>" for c in CATEGORIES if tally[c])
    cards = []
    for ep, d in zip(episodes, diagnoses):
        if failures_only and d.score.success:
            continue
        pred = predictions.get(ep.id)
        status = '<span class="ok">success</span>' if d.score.success else "failed"
        reasons = "".join(f'<li class="reason"><b>{html.escape(c)}</b>: {html.escape(t)}</li>' for c, t in d.reasons)
        cards.append(
            f'<div class="ep {"pass" if d.score.success else "fail"}" id="{html.escape(ep.id)}">'
            f'{_overlay_svg(ep, pred, image_max_side_px)}<div class="info"><h3>{html.escape(ep.id)} &middot; {html.escape(ep.group)} '
            f"&middot; {status}</h3><p>&ldquo;{html.escape(ep.instruction)}&rdquo;</p>"
            f"<p>ARR {100 * d.score.arr:.1f}% &middot; precision {100 * d.score.precision:.1f}% &middot; "
            f"{d.score.gt_actions} GT actions, {d.score.pred_actions} predicted</p>"
            f"<ul>{reasons}</ul>{_steps_table(ep, pred)}</div></div>"
        )
    legend = (
        f'<p class="legend"><span style="color:{GT_RGB}">&#9633; GT grasp/open/close box (step n)</span>'
        f'<span style="color:{PLACE_RGB}">&#9633; GT place target (dashed)</span>'
        f'<span style="color:{PRED_RGB}">&#9633; predicted box, &#10005; predicted place point (pn)</span></p>'
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{_table_html(result)}"
        f"<h2>Failure reasons</h2><ul>{tally_html or '<li>none</li>'}</ul><h2>Episodes</h2>{legend}"
        f"{''.join(cards)}</body></html>"
    )


def write_report(
    episodes: list[Episode],
    predictions: Mapping[str, Prediction],
    out: str | Path,
    title: str = "GroundedPlanBench report",
    **options: Any,
) -> Path:
    """Write :func:`render_report` (``options`` are its keyword options) to ``out`` atomically; returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(out, render_report(episodes, predictions, title, **options))
