"""V2GP stage 1 across gripper conventions: the share of synthetic episodes segmented right for each polarity,
units and rest (DROID 0 open .. 1 closed resting open; ALOHA 1 open resting open; a hand resting half open; an
SO-101 resting closed in 0..100; raw ticks 0..255 with 255 closed), one grasp, two grasps of different depth, and
an open level that drifts down a little before the closing; the fixed 0.5 / 0.2 thresholds on the same signals as
the baseline.

Signals: smooth-step ramps of 3-20 frames, holds of 20-120 frames at 0.25-0.92 of the stroke, noise of 0-1 % of
the stroke. Truth: the start lies between the last open frame before the closing and the hold, the end between
the end of the hold and the first fully open frame (2 frames' tolerance).

Run: .venv/bin/python benchmarks/bench_v2gp_conventions.py [--episodes 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from grounded_planner.v2gp.segment import SegmentConfig, segment, segment_signal

CONVENTIONS = {  # name: (raw open value, raw closed value, rest as closedness 0 open .. 1 closed)
    "DROID: 0 open .. 1 closed, rests open": (0.0, 1.0, 0.0),
    "ALOHA: 1 open .. 0 closed, rests open": (1.0, 0.0, 0.0),
    "hand: 1 open .. 0 closed, rests half open": (1.0, 0.0, 0.45),
    "SO-101: 100 open .. 0 closed, rests closed": (100.0, 0.0, 0.97),
    "ticks: 0 open .. 255 closed, rests open": (0.0, 255.0, 0.0),
}


def _smooth_step(a: float, b: float, n: int) -> list[float]:
    t = np.linspace(0.0, 1.0, n + 1)[1:]
    return list(a + (b - a) * (3 * t**2 - 2 * t**3))


def episode(rng: np.random.Generator, open_v: float, closed_v: float, rest: float, kind: str):
    """(raw signal, truth windows [((start lo, start hi), (end lo, end hi)), ...])."""
    c: list[float] = [rest] * int(rng.integers(20, 60))
    truth = []
    for _ in range(2 if kind == "two grasps" else 1):
        c += _smooth_step(c[-1], 0.0, int(rng.integers(4, 15))) + [0.0] * int(rng.integers(10, 40))
        if kind == "drifted open level":
            c += _smooth_step(0.0, 0.04, 3) + [0.04] * int(rng.integers(15, 50))
        last_open = len(c) - 1
        hold = float(rng.uniform(0.25, 0.92))
        c += _smooth_step(c[-1], hold, int(rng.integers(3, 20)))
        h0 = len(c)
        c += [hold] * int(rng.integers(20, 120))
        h1 = len(c) - 1
        c += _smooth_step(hold, 0.0, int(rng.integers(3, 20)))
        first_open = len(c) - 1
        c += [0.0] * int(rng.integers(10, 40))
        truth.append(((last_open - 2, h0 + 2), (h1 - 2, first_open + 2)))
    c += _smooth_step(c[-1], rest, int(rng.integers(4, 15))) + [rest] * int(rng.integers(20, 60))
    closedness = np.asarray(c) + rng.normal(0.0, float(rng.uniform(0.0, 0.01)), len(c))
    return open_v + (closed_v - open_v) * closedness, truth


def right(segments, truth) -> bool:
    return len(segments) == len(truth) and all(
        ws[0] <= s.start <= ws[1] and we[0] <= s.end <= we[1] for s, (ws, we) in zip(segments, truth)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=40, help="episodes per convention and kind")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}")
    total = total_base = n_all = 0
    t0 = time.perf_counter()
    for name, (open_v, closed_v, rest) in CONVENTIONS.items():
        for kind in ("one grasp", "two grasps", "drifted open level"):
            ok = base = 0
            for _ in range(args.episodes):
                raw, truth = episode(rng, open_v, closed_v, rest, kind)
                auto = SegmentConfig(open_value=open_v, closed_value=closed_v, levels="auto", prominence=0.15)
                ok += right(segment(raw, None, auto).segments, truth)
                fixed = SegmentConfig(open_value=open_v, closed_value=closed_v)
                base += right(segment_signal(raw, None, fixed).segments, truth)
            total, total_base, n_all = total + ok, total_base + base, n_all + args.episodes
            print(
                f"{name:45s} {kind:20s} learned levels {ok:3d}/{args.episodes}   fixed thresholds "
                f"{base:3d}/{args.episodes}"
            )
    print(
        f"all: learned levels {total}/{n_all} ({100 * total / n_all:.1f} %), fixed thresholds {total_base}/{n_all} "
        f"({100 * total_base / n_all:.1f} %), {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
