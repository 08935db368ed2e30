"""Scoring speed: the bench scorer vs the naive reference on 10,000 generated episodes (long horizons included).

Run: ``.venv/bin/python benchmarks/bench_scoring.py [--episodes 10000] [--seed 0]``. Prints the machine,
times for the GroundedPlanBench size (1,009 episodes) and the full set, from parsed records and from
JSONL files on disk, and the reference's time on the same episodes; checks both give the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from grounded_planner.bench.episodes import Prediction, load_episodes, load_predictions, parse_episode
from grounded_planner.bench.reference import reference_score
from grounded_planner.bench.scoring import score
from grounded_planner.bench.synthetic import generate

PAPER_SIZE = 1009


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    raw_eps, raw_preds = generate(args.episodes, seed=args.seed)
    horizons = Counter(
        "short" if len(e["actions"]) <= 4 else "medium" if len(e["actions"]) <= 8 else "long" for e in raw_eps
    )
    print(f"episodes: {len(raw_eps)} ({dict(horizons)}), longest {max(len(e['actions']) for e in raw_eps)} actions")

    eps = [parse_episode(e, "synthetic", Path(".")) for e in raw_eps]
    preds = {p["id"]: Prediction(p["id"], p["plan"], p["error"]) for p in raw_preds}
    small_eps = eps[:PAPER_SIZE]

    t_small = best_of(lambda: score(small_eps, preds), 5)
    t_full = best_of(lambda: score(eps, preds), 3)
    with tempfile.TemporaryDirectory() as tmp:
        ep_path, pred_path = Path(tmp) / "e.jsonl", Path(tmp) / "p.jsonl"
        ep_path.write_text("\n".join(json.dumps(e) for e in raw_eps[:PAPER_SIZE]) + "\n")
        pred_path.write_text("\n".join(json.dumps(p) for p in raw_preds[:PAPER_SIZE]) + "\n")
        t_files = best_of(lambda: score(load_episodes(ep_path), load_predictions(pred_path)), 5)

    t0 = time.perf_counter()
    ref = reference_score(raw_eps, {p["id"]: p for p in raw_preds})
    t_ref = time.perf_counter() - t0
    fast = score(eps, preds)

    print(f"bench scorer, {PAPER_SIZE} episodes (parsed):        {t_small * 1000:8.1f} ms")
    print(f"bench scorer, {PAPER_SIZE} episodes (JSONL load+score): {t_files * 1000:8.1f} ms")
    print(f"bench scorer, {len(eps)} episodes (parsed):       {t_full * 1000:8.1f} ms")
    print(
        f"naive reference (permutations + exhaustive matching), {len(eps)} episodes: {t_ref * 1000:8.1f} ms "
        f"({t_ref / t_full:.0f}x slower)"
    )
    o = fast["overall"]
    print(f"figures: TSR {o['tsr']:.2f}%  ARR {o['arr']:.2f}%  precision {o['precision']:.2f}%")
    same = all(abs(o[k] - ref["overall"][k]) < 1e-9 for k in ("tsr", "arr", "precision")) and all(
        abs(fast["groups"][g][k] - ref["groups"][g][k]) < 1e-9
        for g in ref["groups"]
        for k in ("tsr", "arr", "precision")
    )
    print(f"reference agrees on overall and all {len(ref['groups'])} groups: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
