"""Text rendering of a score result in the layout of the paper's Table I (TSR and ARR, explicit/implicit x horizon)."""

from __future__ import annotations

from typing import Any

from grounded_planner.bench.scoring import HORIZONS

TYPES = ("explicit", "implicit")
CELL = 7  # characters per number column


def table_cells(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The 12 Table I columns in order: (metric, instruction type, horizon, formatted value or '-')."""
    cells = []
    for metric in ("tsr", "arr"):
        for itype in TYPES:
            for horizon in HORIZONS:
                group = result["groups"].get(f"{itype}/{horizon}")
                cells.append((metric, itype, horizon, "-" if group is None else f"{group[metric]:.1f}"))
    return cells


def episode_counts(result: dict[str, Any]) -> list[str]:
    """Episode count under each of the 12 Table I columns (the 6 groups, once for TSR and once for ARR)."""
    return [str(result["groups"].get(f"{t}/{h}", {}).get("episodes", 0)) for t in TYPES for h in HORIZONS] * 2


def format_table(result: dict[str, Any], label: str = "predictions") -> str:
    """Table I layout: one row of 12 numbers (TSR then ARR; explicit, implicit; short, medium, long),
    a row of episode counts, and an overall line with the Wilson 95% interval on TSR."""
    label_w = max(len(label), len("episodes"), 8) + 2
    half = 6 * CELL
    lines = [
        " " * label_w + "Task Success Rate (TSR) %".center(half) + "Action Recall Rate (ARR) %".center(half),
        " " * label_w + "".join(t.capitalize().center(3 * CELL) for t in TYPES * 2),
        " " * label_w + "".join(h.rjust(CELL) for h in HORIZONS * 4),
        label.ljust(label_w) + "".join(v.rjust(CELL) for _, _, _, v in table_cells(result)),
    ]
    counts = episode_counts(result)
    lines.append("episodes".ljust(label_w) + "".join(c.rjust(CELL) for c in counts))
    o = result["overall"]
    lo, hi = o["tsr_ci95"]
    lines.append("")
    lines.append(f"overall: {o['episodes']} episodes, TSR {o['tsr']:.1f}% (95% CI {lo:.1f}-{hi:.1f}), "
                 f"ARR {o['arr']:.1f}%, action precision {o['precision']:.1f}%, "
                 f"{o['null_plans']} null/unparseable plan(s)")
    if o.get("missing_predictions"):
        lines.append(f"note: {o['missing_predictions']} episode(s) had no prediction and scored as null plans")
    if o.get("unknown_predictions"):
        lines.append(f"note: {o['unknown_predictions']} prediction(s) name no episode and were not scored")
    return "\n".join(lines)
