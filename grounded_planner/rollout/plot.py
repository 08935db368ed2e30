"""Summary plots: success rate per group with Wilson 95% whiskers, and the failure-mode composition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grounded_planner.errors import InputError
from grounded_planner.rollout.taxonomy import FAILURE_MODES


def plot_summary(summary: dict[str, Any], out_path: str | Path, title: str = "") -> Path:
    """Write a PNG/PDF/SVG (by suffix) of a :func:`~grounded_planner.rollout.stats.summarize` result.

    Left: success rate per group, whiskers = two-sided Wilson 95% interval, ``s/n`` above each bar.
    Right: failure-mode composition per group, normalised within the group's failures (``n`` = failures).
    """
    import matplotlib  # lazy: optional SDK (matplotlib), not in install_requires

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt  # lazy: optional SDK (matplotlib), not in install_requires

    out_path = Path(out_path)
    groups = [g for g in summary["groups"] if g["n"]]
    if not groups:
        raise InputError("nothing to plot: no group has a labelled rollout")
    by = summary["by"]
    labels = ["\n".join(str(g[f]) or "-" for f in by) if by else "all" for g in groups]
    rates = [100 * g["rate"] for g in groups]
    lows = [100 * (g["rate"] - g["ci95"][0]) for g in groups]
    highs = [100 * (g["ci95"][1] - g["rate"]) for g in groups]

    width = max(6.0, 1.1 * len(groups) + 2)
    fig, (ax_rate, ax_modes) = plt.subplots(1, 2, figsize=(2 * width, 4.5), constrained_layout=True)
    x = range(len(groups))
    ax_rate.bar(x, rates, color="#4C72B0", yerr=[lows, highs], capsize=5, error_kw={"elinewidth": 1.2})
    for i, g in enumerate(groups):
        ax_rate.text(i, min(103.0, 100 * g["ci95"][1] + 2), f"{g['successes']}/{g['n']}", ha="center", fontsize=8)
    ax_rate.set_xticks(list(x), labels, fontsize=8)
    ax_rate.set_ylim(0, 110)
    ax_rate.set_ylabel("success rate (%)")
    ax_rate.set_title("success, two-sided Wilson 95% CI")

    modes = [m for m in [*FAILURE_MODES, "unlabelled_failure_mode"] if any(g["failure_modes"].get(m) for g in groups)]
    cmap = plt.get_cmap("tab10")
    bottoms = [0.0] * len(groups)
    for k, mode in enumerate(modes):
        fractions = [100 * g["failure_mode_fractions"].get(mode, 0.0) if g["failures"] else 0.0 for g in groups]
        ax_modes.bar(x, fractions, bottom=bottoms, color=cmap(k % 10), label=mode)
        bottoms = [b + f for b, f in zip(bottoms, fractions)]
    for i, g in enumerate(groups):
        ax_modes.text(i, 102, f"n={g['failures']}", ha="center", fontsize=8)
    ax_modes.set_xticks(list(x), labels, fontsize=8)
    ax_modes.set_ylim(0, 110)
    ax_modes.set_ylabel("share of failures (%)")
    ax_modes.set_title("failure-mode composition")
    if modes:
        ax_modes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        fig.suptitle(title)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path
