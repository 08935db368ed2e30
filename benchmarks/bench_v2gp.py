"""V2GP: segmentation accuracy on noisy gripper signals (vs plain threshold crossings, same signals) and
pipeline throughput on the synthetic LeRobot dataset.

Run: .venv/bin/python benchmarks/bench_v2gp.py [--signals 300] [--episodes 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np

from grounded_planner.v2gp.config import V2GPConfig
from grounded_planner.v2gp.pipeline import run_pipeline
from grounded_planner.v2gp.segment import SegmentConfig, segment_signal
from grounded_planner.v2gp.synthetic import SyntheticConfig, write_synthetic_dataset


def random_signal(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[int, int]], float]:
    """2-4 close-open cycles with ramps of 1-8 frames, closed level 0.5-1, noise 0-3 %, NaN dropouts and
    1-2 frame "open" reads while holding. Truth: last open frame before each rise, first open frame after."""
    n_cycles = int(rng.integers(2, 5))
    sigma = float(rng.uniform(0.0, 0.03))
    t, cycles, parts, holds = 0, [], [], []
    for _ in range(n_cycles):
        gap = int(rng.integers(15, 40))
        ramp = int(rng.integers(1, 9))
        hold = int(rng.integers(20, 60))
        level = float(rng.uniform(0.5, 1.0))
        parts += [
            np.zeros(gap),
            np.linspace(0, level, ramp + 1)[1:],
            np.full(hold, level),
            np.linspace(level, 0, ramp + 1)[:-1],
        ]
        start = t + gap - 1
        t += gap + ramp + hold + ramp
        cycles.append((start, t))
        holds.append((start + ramp + 3, t - ramp - 3))
    parts.append(np.zeros(20))
    clean = np.concatenate(parts)
    sig = clean + rng.normal(0, sigma, clean.size)
    for s, e in holds:  # dropouts while holding, away from the edges
        sig[rng.integers(s, e)] = np.nan
        k = int(rng.integers(s, e - 2))
        sig[k : k + int(rng.integers(1, 3))] = 0.0
    return sig, cycles, sigma


def threshold_baseline(sig: np.ndarray, close: float, open_: float) -> list[tuple[int, int]]:
    """First frame at/above ``close`` to the first frame at/below ``open_`` after it (no debouncing)."""
    out, state, start = [], False, 0
    for i, v in enumerate(sig):
        if np.isnan(v):
            continue
        if not state and v >= close:
            state, start = True, i
        elif state and v <= open_:
            state = False
            out.append((start, i))
    return out


def score(found: list[tuple[int, int]], truth: list[tuple[int, int]]) -> tuple[bool, bool, float]:
    """(exact match, same count, mean |boundary error| in frames when the counts agree)."""
    if len(found) != len(truth):
        return False, False, float("nan")
    err = np.abs(np.asarray(found, dtype=float) - np.asarray(truth, dtype=float))
    return bool(err.max() == 0), True, float(err.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )

    rng = np.random.default_rng(0)
    config = SegmentConfig(close_threshold=0.4, open_threshold=0.15, min_frames=3)
    rows = {"v2gp segment": [], "hysteresis crossings, no edge fit": [], "threshold crossings (baseline)": []}
    frames, seconds = 0, 0.0
    for _ in range(args.signals):
        sig, truth, _ = random_signal(rng)
        t0 = time.perf_counter()
        result = segment_signal(sig, config=config)
        seconds += time.perf_counter() - t0
        frames += sig.size
        rows["v2gp segment"].append(score([tuple(s) for s in result.to_dict()["segments"]], truth))
        rows["hysteresis crossings, no edge fit"].append(
            score([(s.close_frame, s.release_frame) for s in result.segments], truth)
        )
        if not rows["v2gp segment"][-1][1] and os.environ.get("BENCH_DEBUG"):
            print("count mismatch:", result.to_dict()["segments"], truth, result.dropped)
        rows["threshold crossings (baseline)"].append(score(threshold_baseline(sig, 0.4, 0.15), truth))
    print(f"\nsegmentation: {args.signals} noisy signals (ramps 1-8 frames, noise 0-3 %, NaN + 'open' dropouts)")
    print(f"{'method':34s} {'exact':>8s} {'count ok':>9s} {'mean |err| frames':>18s}")
    for name, results in rows.items():
        exact = np.mean([r[0] for r in results])
        count = np.mean([r[1] for r in results])
        errs = [r[2] for r in results if r[1]]
        err = float(np.mean(errs)) if errs else float("nan")
        print(f"{name:34s} {100 * exact:7.1f}% {100 * count:8.1f}% {err:18.3f}")
    print(f"segment throughput: {frames / seconds:,.0f} frames/s ({frames} frames in {seconds:.2f} s)")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ds = write_synthetic_dataset(os.path.join(tmp, "ds"), SyntheticConfig(episodes=args.episodes))
        t_write = time.perf_counter() - t0
        cfg = V2GPConfig(gripper="observation.state[gripper]", identifier="oracle", grounder="oracle")
        t0 = time.perf_counter()
        summary = run_pipeline(ds, os.path.join(tmp, "out"), cfg)
        t_run = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_pipeline(ds, os.path.join(tmp, "out"), cfg)
        t_resume = time.perf_counter() - t0
    print(f"\npipeline (oracle identifier + grounder, no VLM): {args.episodes} synthetic episodes")
    print(
        f"  write dataset {t_write:.2f} s; run {t_run:.2f} s ({t_run / args.episodes * 1000:.0f} ms/episode); "
        f"rerun from caches {t_resume:.2f} s"
    )
    print(
        f"  {summary.segments} segments, {summary.segments_kept} kept, dropped {summary.dropped}, "
        f"{summary.samples_explicit} training samples"
    )


if __name__ == "__main__":
    main()
