"""Rollout statistics: success rates with Wilson intervals, failure-mode composition, paired condition tests."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from grounded_planner.errors import InputError
from grounded_planner.rollout.taxonomy import FAILURE_MODES

# Fields of rollout.json a summary can be grouped by.
GROUP_FIELDS = ("task", "condition", "model", "scene_id", "config_hash", "expects_action")


class StatsError(InputError):
    """Statistics asked of data that cannot give them (no trials, unknown grouping field)."""


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Two-sided Wilson score interval of a binomial proportion, as fractions.

    ``z = 1.96`` gives the 95% interval: 82/120 -> (0.596, 0.760). Unlike the normal approximation it
    stays inside [0, 1] and is informative at 0/n and n/n (0/20 -> (0, 0.161)).
    """
    if not isinstance(n, int) or n <= 0:
        raise StatsError(f"need at least one trial for an interval, got n={n!r}")
    if not isinstance(successes, int) or not 0 <= successes <= n:
        raise StatsError(f"successes must be an integer in [0, {n}], got {successes!r}")
    if not z > 0:
        raise StatsError(f"z must be positive, got {z}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # clamp rounding noise at the ends (0/n and n/n give exactly 0 and 1)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts (binomial test at p = 1/2)."""
    if a_only < 0 or b_only < 0:
        raise StatsError(f"discordant counts must be >= 0, got {a_only}, {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


@dataclass
class GroupStats:
    """Success statistics of one group of rollouts (labelled ones count; unlabelled are reported)."""

    key: dict[str, Any]
    n: int = 0
    successes: int = 0
    unlabelled: int = 0
    cut_short: int = 0
    failure_modes: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float | None:
        return self.successes / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.successes, self.n) if self.n else None

    def to_dict(self) -> dict[str, Any]:
        lo_hi = self.interval
        failures = self.n - self.successes
        return {
            **self.key,
            "n": self.n,
            "successes": self.successes,
            "rate": self.rate,
            "ci95": list(lo_hi) if lo_hi else None,
            "cell": format_rate(self.successes, self.n) if self.n else "",  # as real-robot papers print it
            "unlabelled": self.unlabelled,
            "cut_short": self.cut_short,
            "failures": failures,
            "failure_modes": {m: self.failure_modes[m] for m in FAILURE_MODES if self.failure_modes[m]},
            "failure_mode_fractions": {
                m: self.failure_modes[m] / failures for m in FAILURE_MODES if self.failure_modes[m]
            }
            if failures
            else {},
        }


def _key(data: dict[str, Any], by: Sequence[str]) -> tuple:
    return tuple(data.get(f, "") if data.get(f) is not None else "" for f in by)


def _check_by(by: Sequence[str]) -> None:
    for f in by:
        if f not in GROUP_FIELDS:
            raise StatsError(f"cannot group by {f!r} (expected some of {', '.join(GROUP_FIELDS)})")


def group_stats(rollouts: Iterable[dict[str, Any]], by: Sequence[str] = ("task", "condition")) -> list[GroupStats]:
    """One :class:`GroupStats` per distinct value of the ``by`` fields, sorted by key."""
    _check_by(by)
    groups: dict[tuple, GroupStats] = {}
    for data in rollouts:
        k = _key(data, by)
        g = groups.get(k)
        if g is None:  # not setdefault: its default would be built for every rollout
            g = groups[k] = GroupStats(dict(zip(by, k)))
        if data.get("status") in ("in_progress", "cut_short"):
            g.cut_short += 1
        success = data.get("success")
        if success is None:
            g.unlabelled += 1
            continue
        g.n += 1
        if success:
            g.successes += 1
        else:
            g.failure_modes[data.get("failure_mode") or "unlabelled_failure_mode"] += 1
    return [groups[k] for k in sorted(groups, key=lambda t: tuple(str(v) for v in t))]


@dataclass
class PairedComparison:
    """Two conditions on the same scenes: concordance table and exact McNemar test."""

    key: dict[str, Any]
    condition_a: str
    condition_b: str
    pairs: int
    both: int  # both conditions succeeded
    a_only: int  # only condition_a succeeded
    b_only: int  # only condition_b succeeded
    neither: int

    @property
    def p_value(self) -> float:
        return mcnemar_exact(self.a_only, self.b_only)

    def to_dict(self) -> dict[str, Any]:
        rate_a = (self.both + self.a_only) / self.pairs
        rate_b = (self.both + self.b_only) / self.pairs
        return {
            **self.key,
            "condition_a": self.condition_a,
            "condition_b": self.condition_b,
            "pairs": self.pairs,
            "both": self.both,
            "a_only": self.a_only,
            "b_only": self.b_only,
            "neither": self.neither,
            "rate_a": rate_a,
            "rate_b": rate_b,
            "difference": rate_b - rate_a,
            "mcnemar_exact_p": self.p_value,
        }


def paired_comparisons(
    rollouts: Iterable[dict[str, Any]], by: Sequence[str] = ("task",), warnings: list[str] | None = None
) -> list[PairedComparison]:
    """Compare every two conditions on the scenes both ran (paired by ``scene_id`` and ``trial``).

    Groups by ``by`` (``condition`` is dropped from it: it is what is compared). Rollouts without a
    scene id or a label cannot be paired and are left out; a duplicate (scene, trial, condition) is
    left out with a warning.
    """
    by = [f for f in by if f != "condition"]
    _check_by(by)
    outcomes: dict[tuple, dict[str, dict[tuple, bool]]] = defaultdict(lambda: defaultdict(dict))
    duplicates: set[tuple] = set()
    for data in rollouts:
        scene = data.get("scene_id") or ""
        if not scene or data.get("success") is None:
            continue
        k = _key(data, by)
        cond = str(data.get("condition") or "")
        pair_key = (scene, int(data.get("trial") or 0))
        if pair_key in outcomes[k][cond]:
            duplicates.add((k, cond, pair_key))
        outcomes[k][cond][pair_key] = bool(data["success"])
    for k, cond, pair_key in sorted(duplicates):
        outcomes[k][cond].pop(pair_key, None)
        if warnings is not None:
            warnings.append(
                f"scene {pair_key[0]!r} trial {pair_key[1]} ran more than once under condition "
                f"{cond!r}; left out of the paired comparison"
            )
    out: list[PairedComparison] = []
    for k in sorted(outcomes, key=lambda t: tuple(str(v) for v in t)):
        conds = sorted(outcomes[k])
        for i, a in enumerate(conds):
            for b in conds[i + 1 :]:
                common = sorted(set(outcomes[k][a]) & set(outcomes[k][b]))
                if not common:
                    continue
                table = Counter((outcomes[k][a][s], outcomes[k][b][s]) for s in common)
                out.append(
                    PairedComparison(
                        dict(zip(by, k)),
                        a,
                        b,
                        len(common),
                        table[(True, True)],
                        table[(True, False)],
                        table[(False, True)],
                        table[(False, False)],
                    )
                )
    return out


def summarize(rollouts: Sequence[dict[str, Any]], by: Sequence[str] = ("task", "condition")) -> dict[str, Any]:
    """The ``rollouts summary --json`` object: overall, per-group and paired statistics."""
    warnings: list[str] = []
    overall = group_stats(rollouts, by=())
    return {
        "by": list(by),
        "rollouts": len(rollouts),
        "overall": overall[0].to_dict() if overall else None,
        "groups": [g.to_dict() for g in group_stats(rollouts, by)],
        "paired": [p.to_dict() for p in paired_comparisons(rollouts, by, warnings)],
        "warnings": warnings,
    }


def format_rate(successes: int, n: int) -> str:
    """``82/120; 68.3% (59.6–76.0)`` — the way real-robot papers report a cell."""
    lo, hi = wilson_interval(successes, n)
    return f"{successes}/{n}; {100 * successes / n:.1f}% ({100 * lo:.1f}–{100 * hi:.1f})"


def _unlabelled(g: dict[str, Any]) -> str:
    return f"{g['unlabelled']}" + (f" ({g['cut_short']} cut short)" if g["cut_short"] else "")


def format_summary(summary: dict[str, Any]) -> str:
    """Plain-text tables of :func:`summarize` output."""
    lines: list[str] = []
    by = summary["by"]
    header = [*by, "success (Wilson 95%)", "unlabelled", "failure modes"]
    rows = []
    for g in summary["groups"]:
        cell = format_rate(g["successes"], g["n"]) if g["n"] else "no labelled trials"
        modes = ", ".join(f"{m} {c}" for m, c in g["failure_modes"].items())
        rows.append([*(str(g[f]) if g[f] != "" else "-" for f in by), cell, _unlabelled(g), modes])
    o = summary["overall"]
    if o:
        rows.append(
            [
                *(["all"] + [""] * (len(by) - 1) if by else []),
                format_rate(o["successes"], o["n"]) if o["n"] else "no labelled trials",
                _unlabelled(o),
                ", ".join(f"{m} {c}" for m, c in o["failure_modes"].items()),
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if summary["paired"]:
        lines.append("")
        lines.append("paired comparisons (same scene and trial under two conditions; exact McNemar test):")
        for p in summary["paired"]:
            where = " ".join(f"{f}={p[f]}" for f in by if f in p and f != "condition")
            lines.append(
                f"  {where + ': ' if where else ''}{p['condition_a']} {100 * p['rate_a']:.1f}% vs "
                f"{p['condition_b']} {100 * p['rate_b']:.1f}% on {p['pairs']} pairs "
                f"(only {p['condition_a']}: {p['a_only']}, only {p['condition_b']}: {p['b_only']}), "
                f"p = {p['mcnemar_exact_p']:.3g}"
            )
    for w in summary["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
