"""A deliberately naive, independent re-implementation of the scoring rules, to cross-check the fast scorer.

Written from the issue text without sharing code with :mod:`grounded_planner.bench.scoring`: TSR tries
every permutation of every unordered block (itertools), ARR searches every one-to-one assignment of
predicted to GT steps for the one with most matched GT actions (exhaustive, memoised on the set of used
predicted steps). Exponential in the worst case; used by the tests and by ``benchmarks/bench_scoring.py``
as the baseline, never by the CLI.
"""

from __future__ import annotations

import itertools
import math
from functools import cache
from typing import Any


def _nums(value: Any, n: int):
    if not isinstance(value, (list, tuple)) or len(value) != n:
        return None
    try:
        vals = [float(v) for v in value]
    except (TypeError, ValueError, OverflowError):
        return None
    if any(math.isnan(v) or math.isinf(v) for v in vals):
        return None
    return vals


def _steps(actions: list[dict], is_gt: bool) -> list[dict]:
    """Steps as dicts: {"kind", "box", "where", "size"}; ``where`` is a point (pred) or a box (GT)."""
    out: list[dict] = []
    k = 0
    while k < len(actions):
        a = actions[k]
        kind = a.get("type") if isinstance(a, dict) else None
        nxt = actions[k + 1] if k + 1 < len(actions) else None
        if kind == "grasp" and isinstance(nxt, dict) and nxt.get("type") == "place":
            where = _nums(nxt.get("bbox"), 4) if is_gt else _nums(nxt.get("point"), 2)
            out.append({"kind": "pair", "box": _nums(a.get("bbox"), 4), "where": where, "size": 2})
            k += 2
        elif kind in ("open", "close"):
            out.append({"kind": kind, "box": _nums(a.get("bbox"), 4), "where": None, "size": 1})
            k += 1
        else:
            out.append({"kind": "invalid", "box": None, "where": None, "size": 1})
            k += 1
    return out


def _iou(p, g) -> float:
    ix = max(0.0, min(p[2], g[2]) - max(p[0], g[0]))
    iy = max(0.0, min(p[3], g[3]) - max(p[1], g[1]))
    inter = ix * iy
    union = (p[2] - p[0]) * (p[3] - p[1]) + (g[2] - g[0]) * (g[3] - g[1]) - inter
    if inter <= 0 or union <= 0:
        return 0.0
    return inter / union


def _ok(p: dict, g: dict) -> bool:
    if p["kind"] == "invalid" or p["kind"] != g["kind"] or p["box"] is None:
        return False
    if not _iou(p["box"], g["box"]) >= 0.5:
        return False
    if g["kind"] != "pair":
        return True
    pt, box = p["where"], g["where"]
    return pt is not None and box[0] <= pt[0] <= box[2] and box[1] <= pt[1] <= box[3]


def reference_episode(gt_actions: list[dict], unordered: list[list[int]], plan: Any) -> tuple[bool, float, float]:
    """(task success, ARR fraction, precision fraction) of one episode; ``gt_actions`` as JSON dicts."""
    if not isinstance(plan, dict) or not isinstance(plan.get("actions"), list):
        return False, 0.0, 0.0
    pred_actions = plan["actions"]
    gt = _steps(gt_actions, True)
    pred = _steps(pred_actions, False)
    total_gt = sum(g["size"] for g in gt)

    success = False
    if len(pred) == len(gt):
        blocks = [sorted(b) for b in unordered if len(b) >= 2]
        free = [i for i in range(len(gt)) if not any(i in b for b in blocks)]
        success = all(_ok(pred[i], gt[i]) for i in free)
        for b in blocks:
            if not success:
                break
            success = any(all(_ok(pred[pos], gt[g]) for pos, g in zip(b, perm)) for perm in itertools.permutations(b))

    @cache
    def best(j: int, used: frozenset) -> int:
        """Most GT actions matchable among GT steps j.. with predicted steps ``used`` taken."""
        if j == len(gt):
            return 0
        result = best(j + 1, used)  # leave GT step j unmatched
        for i in range(len(pred)):
            if i not in used and _ok(pred[i], gt[j]):
                result = max(result, gt[j]["size"] + best(j + 1, used | {i}))
        return result

    matched = best(0, frozenset())
    precision = matched / len(pred_actions) if pred_actions else 0.0
    return success, matched / total_gt, precision


def reference_score(episodes: list[dict], predictions: dict[str, Any]) -> dict[str, Any]:
    """Overall and per-group TSR/ARR/precision in percent, from raw JSON records (episodes as in the JSONL)."""
    rows: dict[str, list[tuple[bool, float, float]]] = {}
    everything = []
    for ep in episodes:
        n = len(ep["actions"])
        horizon = "short" if n < 5 else ("medium" if n < 9 else "long")
        pred = predictions.get(ep["id"])
        r = reference_episode(
            ep["actions"], ep.get("unordered") or [], pred.get("plan") if isinstance(pred, dict) else None
        )
        rows.setdefault(ep["instruction_type"] + "/" + horizon, []).append(r)
        everything.append(r)

    def pct(rs):
        return {
            "episodes": len(rs),
            "tsr": 100.0 * sum(r[0] for r in rs) / len(rs),
            "arr": 100.0 * sum(r[1] for r in rs) / len(rs),
            "precision": 100.0 * sum(r[2] for r in rs) / len(rs),
        }

    return {"overall": pct(everything), "groups": {k: pct(v) for k, v in rows.items()}}
