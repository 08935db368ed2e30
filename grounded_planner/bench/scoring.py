"""GroundedPlanBench scoring: step segmentation, step matching, TSR, ARR, action precision, Table I groups.

The rules (issue 4), in short:

* **Steps.** A plan's actions are scanned left to right: a grasp immediately followed by a place is
  one *pair* step (2 actions); open and close are one step each (1 action); anything else (a grasp
  not followed by a place, a place without a grasp, an unknown type) is an *invalid* step of one
  action that never matches but counts as predicted.
* **Step match.** Pair: IoU(predicted grasp box, GT grasp box) >= 0.5 and the predicted place point
  inside the GT place box, edges included. Open/close: same type and IoU >= 0.5.
* **TSR.** Same number of steps and a position-by-position match, except that the positions of an
  unordered block may be filled by the block's GT steps in any order (a perfect matching inside the block).
* **ARR.** A maximum one-to-one matching between predicted and GT steps ignoring order; episode ARR =
  actions in matched GT steps / actions in all GT steps. **Precision** = matched predicted actions /
  predicted actions (0 when nothing was predicted). A null or unparseable plan scores 0 on all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from grounded_planner.bench.episodes import Episode, Prediction
from grounded_planner.errors import InputError
from grounded_planner.rollout.stats import wilson_interval  # the project's one Wilson interval (fractions)

IOU_THRESHOLD = 0.5
HORIZONS = ("short", "medium", "long")
GROUP_KEYS = tuple(f"{t}/{h}" for t in ("explicit", "implicit") for h in HORIZONS)

# A step is a tuple (kind, box, place, n_actions, first_action_index):
#   kind  "pair" | "open" | "close" | "invalid"
#   box   grasp/open/close box (x1, y1, x2, y2) or None when missing/malformed in a prediction
#   place pair only: predicted place point (x, y), or the GT place box (x1, y1, x2, y2); else None
Step = tuple


def _floats(value: Any, n: int) -> tuple[float, ...] | None:
    """``n`` finite floats, or None for anything else (a prediction's malformed field never matches)."""
    if not isinstance(value, (list, tuple)) or len(value) != n:
        return None
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit integer
        return None
    return out if all(math.isfinite(v) for v in out) else None


def predicted_actions(plan: Any) -> list[tuple[str, Any, Any]] | None:
    """Read a predicted plan leniently into ``[(type, bbox or None, point or None), ...]``.

    No plan validation: a grasp without a place, a missing box or an unknown type all survive here and
    become unmatched (invalid) steps. Returns None when ``plan`` is null or not a plan object at all.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("actions"), list):
        return None
    out = []
    for raw in plan["actions"]:
        if not isinstance(raw, dict):
            out.append(("?", None, None))
            continue
        atype = raw.get("type")
        out.append(
            (atype if isinstance(atype, str) else "?", _floats(raw.get("bbox"), 4), _floats(raw.get("point"), 2))
        )
    return out


def segment_steps(actions: list[tuple[str, Any, Any]]) -> list[Step]:
    """Split ``[(type, bbox, point_or_place_box), ...]`` into steps (see module docstring)."""
    steps: list[Step] = []
    n = len(actions)
    i = 0
    while i < n:
        atype, box, place = actions[i]
        if atype == "grasp" and i + 1 < n and actions[i + 1][0] == "place":
            steps.append(("pair", box, actions[i + 1][2], 2, i))
            i += 2
            continue
        if atype == "open" or atype == "close":
            steps.append((atype, box, None, 1, i))
        else:
            steps.append(("invalid", box, None, 1, i))  # box kept for drawing; an invalid step never matches
        i += 1
    return steps


def gt_steps(episode: Episode) -> list[Step]:
    """Ground-truth steps of an episode; a pair's ``place`` is the GT place box."""
    return segment_steps([(a.type, a.bbox, a.bbox if a.type == "place" else None) for a in episode.actions])


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """IoU of two boxes (x1, y1, x2, y2) on continuous coordinates (no +1 pixel convention); 0 if disjoint."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    if iw <= 0:
        return 0.0
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if ih <= 0:
        return 0.0
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def point_in_box(p: tuple[float, ...], box: tuple[float, ...]) -> bool:
    """True when point (x, y) lies in box (x1, y1, x2, y2); points on an edge count as inside."""
    return box[0] <= p[0] <= box[2] and box[1] <= p[1] <= box[3]


def step_matches(pred: Step, gt: Step) -> bool:
    """Whether a predicted step matches a GT step (same kind, IoU >= 0.5, place point inside the GT place box)."""
    if pred[0] != gt[0] or pred[1] is None:
        return False
    if iou(pred[1], gt[1]) < IOU_THRESHOLD:
        return False
    if gt[0] == "pair":
        return pred[2] is not None and point_in_box(pred[2], gt[2])
    return True


def max_matching(adjacency: list[list[int]], n_right: int) -> list[int]:
    """Maximum-cardinality bipartite matching (Kuhn's augmenting paths).

    Parameters
    ----------
    adjacency : list of lists, len n_left
        ``adjacency[i]`` lists the right vertices left vertex ``i`` may be matched to.
    n_right : int
        Number of right vertices.

    Returns
    -------
    list of int, len n_right
        ``match[j]`` = left vertex matched to right vertex ``j``, or -1.
    """
    match = [-1] * n_right

    def augment(i: int, seen: list[bool]) -> bool:
        for j in adjacency[i]:
            if not seen[j]:
                seen[j] = True
                if match[j] < 0 or augment(match[j], seen):
                    match[j] = i
                    return True
        return False

    for i in range(len(adjacency)):
        if adjacency[i]:
            augment(i, [False] * n_right)
    return match


@dataclass
class EpisodeScore:
    """Scores of one episode. ``success`` is TSR; ``arr``/``precision`` are fractions 0-1."""

    id: str
    group: str
    success: bool
    gt_actions: int
    pred_actions: int
    matched_actions: int
    null_plan: bool  # the prediction was null, unparseable or missing

    @property
    def arr(self) -> float:
        return self.matched_actions / self.gt_actions

    @property
    def precision(self) -> float:
        return self.matched_actions / self.pred_actions if self.pred_actions else 0.0


def match_sets(pred: list[Step], gt: list[Step]) -> list[list[int]]:
    """``out[p]`` = indices of the GT steps that predicted step ``p`` matches (same-kind pairs only)."""
    by_kind: dict[str, list[int]] = {}
    for j, g in enumerate(gt):
        by_kind.setdefault(g[0], []).append(j)
    return [[j for j in by_kind.get(p[0], ()) if step_matches(p, gt[j])] for p in pred]


def task_success(pred: list[Step], gt: list[Step], blocks: list[list[int]], ok: list[list[int]]) -> bool:
    """TSR for one episode given the match sets ``ok`` from :func:`match_sets`."""
    if len(pred) != len(gt):
        return False
    in_block = set()
    for block in blocks:
        in_block.update(block)
        allowed = set(block)
        # positions of the block (predicted steps) vs the block's GT steps: a perfect matching must exist
        adjacency = [[block.index(j) for j in ok[p] if j in allowed] for p in block]
        if any(not a for a in adjacency):
            return False
        if min(max_matching(adjacency, len(block))) < 0:
            return False
    return all(p in in_block or p in ok[p] for p in range(len(pred)))


def score_episode(episode: Episode, prediction: Prediction | None, steps_gt: list[Step] | None = None) -> EpisodeScore:
    """Score one episode; a missing prediction counts as a null plan."""
    gt = steps_gt if steps_gt is not None else gt_steps(episode)
    n_gt = len(episode.actions)
    actions = predicted_actions(prediction.plan) if prediction is not None else None
    if actions is None:
        return EpisodeScore(episode.id, episode.group, False, n_gt, 0, 0, True)
    pred = segment_steps(actions)
    ok = match_sets(pred, gt)
    match = max_matching(ok, len(gt))
    # Edges join only steps of the same kind, and a GT step's weight (2 for a pair, 1 for open/close)
    # depends only on its kind, so the graph splits into per-kind parts of equal weight: a maximum-
    # cardinality matching is therefore also a maximum-weight one (most matched GT actions).
    matched = sum(gt[j][3] for j in range(len(gt)) if match[j] >= 0)
    success = task_success(pred, gt, episode.unordered, ok)
    return EpisodeScore(episode.id, episode.group, success, n_gt, len(actions), matched, False)


def aggregate(scores: list[EpisodeScore]) -> dict[str, Any]:
    """Means over episodes in percent, with the Wilson 95% interval on TSR."""
    n = len(scores)
    successes = sum(1 for s in scores if s.success)
    lo, hi = wilson_interval(successes, n)
    return {
        "episodes": n,
        "tsr": 100.0 * successes / n,
        "arr": 100.0 * sum(s.arr for s in scores) / n,
        "precision": 100.0 * sum(s.precision for s in scores) / n,
        "tsr_ci95": [100.0 * lo, 100.0 * hi],
        "successes": successes,
        "null_plans": sum(1 for s in scores if s.null_plan),
    }


def _as_mapping(predictions: Mapping[str, Prediction] | Iterable[Prediction]) -> Mapping[str, Prediction]:
    if isinstance(predictions, Mapping):
        return predictions
    return {p.id: p for p in predictions}


def score_episodes(
    episodes: list[Episode], predictions: Mapping[str, Prediction] | Iterable[Prediction]
) -> list[EpisodeScore]:
    """Per-episode scores, in episode order."""
    preds = _as_mapping(predictions)
    return [score_episode(ep, preds.get(ep.id)) for ep in episodes]


def score(episodes: list[Episode], predictions: Mapping[str, Prediction] | Iterable[Prediction]) -> dict[str, Any]:
    """Score predictions against episodes: the ``bench score --json`` object.

    Returns
    -------
    dict
        ``{"overall": {...}, "groups": {"explicit/short": {...}, ...}}``; each part has ``episodes``,
        ``tsr``, ``arr``, ``precision`` (percent, means over episodes), ``tsr_ci95`` ([lo, hi] percent),
        ``successes`` and ``null_plans``. ``overall`` also has ``missing_predictions`` (episodes with no
        prediction line, scored as null plans) and ``unknown_predictions`` (prediction ids that are no
        episode). Groups with no episodes are omitted.
    """
    if not episodes:
        raise InputError("no episodes to score")
    preds = _as_mapping(predictions)
    scores = score_episodes(episodes, preds)
    groups: dict[str, list[EpisodeScore]] = {}
    for s in scores:
        groups.setdefault(s.group, []).append(s)
    overall = aggregate(scores)
    ids = {ep.id for ep in episodes}
    overall["missing_predictions"] = sum(1 for ep in episodes if ep.id not in preds)
    overall["unknown_predictions"] = sum(1 for pid in preds if pid not in ids)
    return {"overall": overall, "groups": {k: aggregate(groups[k]) for k in GROUP_KEYS if k in groups}}
