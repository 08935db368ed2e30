"""Text rendering of score results in the layout of the paper's Table I (TSR and ARR, explicit/implicit x horizon)."""

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


def overall_line(label: str, result: dict[str, Any]) -> list[str]:
    """The overall figures of one result (with the Wilson 95% interval on TSR) and notes on missing data."""
    o = result["overall"]
    lo, hi = o["tsr_ci95"]
    lines = [
        f"{label}: {o['episodes']} episodes, TSR {o['tsr']:.1f}% (95% CI {lo:.1f}-{hi:.1f}), "
        f"ARR {o['arr']:.1f}%, action precision {o['precision']:.1f}%, "
        f"{o['null_plans']} null/unparseable plan(s)"
    ]
    if o.get("missing_predictions"):
        lines.append(f"  note: {o['missing_predictions']} episode(s) had no prediction and scored as null plans")
    if o.get("unknown_predictions"):
        lines.append(f"  note: {o['unknown_predictions']} prediction(s) name no episode and were not scored")
    return lines


def format_tables(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Table I layout for one or more prediction sets on the same episodes: a row of 12 numbers per set
    (TSR then ARR; explicit, implicit; short, medium, long), a row of episode counts, then overall lines."""
    label_w = max([len(label) for label, _ in rows] + [len("episodes")]) + 2
    half = 6 * CELL
    lines = [
        " " * label_w + "Task Success Rate (TSR) %".center(half) + "Action Recall Rate (ARR) %".center(half),
        " " * label_w + "".join(t.capitalize().center(3 * CELL) for t in TYPES * 2),
        " " * label_w + "".join(h.rjust(CELL) for h in HORIZONS * 4),
    ]
    for label, result in rows:
        lines.append(label.ljust(label_w) + "".join(v.rjust(CELL) for _, _, _, v in table_cells(result)))
    lines.append("episodes".ljust(label_w) + "".join(c.rjust(CELL) for c in episode_counts(rows[0][1])))
    lines.append("")
    for label, result in rows:
        lines += overall_line("overall" if len(rows) == 1 else label, result)
    return "\n".join(lines)
