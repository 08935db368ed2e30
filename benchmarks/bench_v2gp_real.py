"""V2GP stage 1 on real demonstrations of other embodiments: share of episodes segmented right against the
truth marked from the raw signal by the paper's rule (``v2gp_truth.json`` beside each dataset), episodes left
empty without a reason, datasets refused; the plain fixed-threshold rule on the same signals as the baseline.

A segment is right when its start lies in the truth's start window (the last open frame before the closing ..
the hold) and its end in the end window (the end of the hold .. the first fully open frame), each window
already 3 frames wider on both sides; ``--slack`` frames more are allowed on top (reported for 0 and 2).

Run: .venv/bin/python benchmarks/bench_v2gp_real.py [--dataset PATH --truth FILE]...
(default: every test/fixtures folder with a v2gp_truth.json; the last two lines total the held-out datasets (every
robot_type but SO-100/SO-101, on which the rule was first written, and the G1 Inspire hand, on which its constants
were set) and the tuned-on G1 apart; the full G1 Inspire dataset is github.com/YifanTian07/G1-policy-train, whose
100 episodes the fixture's truth file covers; held-out datasets not kept here for their licence, with their truth:
benchmarks/v2gp_heldout/, fetched as docs/v2gp.md says)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from grounded_planner.v2gp.config import V2GPConfig
from grounded_planner.v2gp.dataset import open_dataset
from grounded_planner.v2gp.profiles import profile_for_robot_type
from grounded_planner.v2gp.segment import SegmentConfig, segment_signal
from grounded_planner.v2gp.stage1 import plan_grippers, segment_episode

FIXTURES = Path(__file__).resolve().parent.parent / "test" / "fixtures"


def right(found: list[list[int]], truth: list[dict], slack: int, optional: str = "either") -> bool:
    """Every truth segment found in its windows, in order, and nothing else; a truth segment marked
    ``optional`` (a closure the raw signal cannot tell from one on nothing) is right found or not found
    (``optional="either"``), or must be found (``"required"``), or must not be (``"absent"``)."""
    found = sorted(found)
    if optional == "absent":
        truth = [w for w in truth if not w.get("optional")]
    elif optional == "required":
        truth = [{**w, "optional": False} for w in truth]

    def inside(s: list[int], w: dict) -> bool:
        return (
            w["start"][0] - slack <= s[0] <= w["start"][1] + slack
            and w["end"][0] - slack <= s[1] <= w["end"][1] + slack
        )

    def match(i: int, k: int) -> bool:
        if k == len(truth):
            return i == len(found)
        if truth[k].get("optional") and match(i, k + 1):
            return True
        return i < len(found) and inside(found[i], truth[k]) and match(i + 1, k + 1)

    return match(0, 0)


def score(path: Path, truth_file: Path) -> dict:
    truth = json.loads(truth_file.read_text())
    hand = truth.get("hand", "")
    t0 = time.perf_counter()
    try:
        ds = open_dataset(path)
        plans, warnings = plan_grippers(ds, V2GPConfig())
    except ValueError as exc:
        return {"dataset": str(path), "refused": str(exc)}
    found, baseline, empty_unexplained, n = {}, {}, 0, 0
    for index in ds.episode_indices:
        if str(index) not in truth["episodes"]:
            continue
        n += 1
        episode = ds.episode(index)
        result = segment_episode(episode, plans)
        found[index] = [s.to_list() for s in result.segments if s.hand in (hand, "")]
        if not result.segments and not result.reason:
            empty_unexplained += 1
        # baseline: fixed thresholds (0.5 / 0.2) on the profile's 0..1 normalisation of the same hand's signal
        k = next(i for i, p in enumerate(plans) if p.hand in (hand, ""))
        cfg = plans[k].config
        trace = episode.grippers[k]
        if cfg.open_value is not None and cfg.closed_value is not None:
            base = segment_signal(
                trace.values,
                episode.frame_indices,
                SegmentConfig(open_value=cfg.open_value, closed_value=cfg.closed_value),
            )
            baseline[index] = [s.to_list() for s in base.segments]
        else:
            baseline[index] = []
    seconds = time.perf_counter() - t0
    profile = profile_for_robot_type(ds.robot_type)
    out = {
        "dataset": str(path),
        "profile": profile.name if profile else "",
        "episodes": n,
        "warnings": warnings,
        "seconds": round(seconds, 3),
        "empty_without_reason": empty_unexplained,
    }
    for slack in (0, 2):
        ok = sum(right(found[i], truth["episodes"][str(i)]["segments"], slack) for i in found)
        ok_base = sum(right(baseline[i], truth["episodes"][str(i)]["segments"], slack) for i in baseline)
        out[f"right_slack{slack}"] = ok
        out[f"baseline_right_slack{slack}"] = ok_base
    out["wrong"] = sorted(i for i in found if not right(found[i], truth["episodes"][str(i)]["segments"], 2))
    for mode in ("required", "absent"):
        out[f"right_slack0_optional_{mode}"] = sum(
            right(found[i], truth["episodes"][str(i)]["segments"], 0, mode) for i in found
        )
    out["optional_segments"] = sum(
        bool(w.get("optional")) for i in found for w in truth["episodes"][str(i)]["segments"]
    )
    return out


# Profiles of the embodiments the rule was written or tuned on: SO-101 (first written on it) and the G1 Inspire hand
# (the constants were set while looking at its episodes). Every other dataset is held out: run after the rule was
# written, its figure recorded before any change for it.
TUNED_ON = {"so101": "SO-101", "g1_inspire": "G1 Inspire"}
KEYS = ("episodes", "right_slack0", "right_slack2", "empty_without_reason", "refused")


def total_line(name: str, t: dict) -> str:
    n = max(t["episodes"], 1)
    return (
        f"{name}: {t['episodes']} episodes; right {t['right_slack0']} ({100 * t['right_slack0'] / n:.1f} %), "
        f"with 2 frames more slack {t['right_slack2']} ({100 * t['right_slack2'] / n:.1f} %); "
        f"empty without a reason: {t['empty_without_reason']}; datasets refused: {t['refused']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", action="append", default=[], help="a LeRobot dataset folder (repeatable)")
    parser.add_argument("--truth", action="append", default=[], help="its v2gp_truth.json (same order)")
    args = parser.parse_args()
    pairs = list(zip(map(Path, args.dataset), map(Path, args.truth)))
    if not pairs:
        pairs = [(p.parent, p) for p in sorted(FIXTURES.glob("*/v2gp_truth.json"))]
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    held_out = dict.fromkeys(KEYS, 0)
    tuned = dict.fromkeys(KEYS, 0)
    for path, truth in pairs:
        r = score(path, truth)
        if "refused" in r:
            print(f"{path.name}: REFUSED: {r['refused']}")
            held_out["refused"] += 1
            continue
        if r["profile"] != "so101":  # the embodiment the rule was first written on is left out of both totals
            for key in KEYS[:-1]:
                (tuned if r["profile"] in TUNED_ON else held_out)[key] += r[key]
        n = r["episodes"]
        print(
            f"{path.name} ({'tuned on' if r['profile'] in TUNED_ON else 'held out'}, profile {r['profile'] or '-'}): "
            f"{n} episodes in {r['seconds']} s; right {r['right_slack0']}/{n} "
            f"({100 * r['right_slack0'] / max(n, 1):.0f} %), with 2 frames more slack {r['right_slack2']}/{n} "
            f"({100 * r['right_slack2'] / max(n, 1):.0f} %); baseline (fixed 0.5/0.2 thresholds) "
            f"{r['baseline_right_slack0']}/{n} and {r['baseline_right_slack2']}/{n}; empty without a reason: "
            f"{r['empty_without_reason']}; wrong: {r['wrong']}"
        )
        if r["optional_segments"]:
            print(
                f"  {r['optional_segments']} optional truth segments: right {r['right_slack0_optional_required']}/{n} "
                f"if each must be found, {r['right_slack0_optional_absent']}/{n} if none may be"
            )
        for line in r["warnings"]:
            print(f"  warning: {line}")
    print(total_line("held out (all but SO-101 and G1 Inspire)", held_out))
    print(total_line("tuned on (G1 Inspire)", tuned))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
