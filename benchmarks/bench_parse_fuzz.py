"""Benchmark: the parser over many fuzzed model answers (test/helpers/answer_fuzz.py) — untyped exceptions,
answers over 1 s of CPU, CPU time per answer — with ``json.loads`` of the same texts as the baseline.

Run: .venv/bin/python benchmarks/bench_parse_fuzz.py [--count 20000] [--seed 1] [--small]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

from helpers.answer_fuzz import answers, parse_answer  # noqa: E402

from grounded_planner.vlm.parse import ParseError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="no runs near the size cap, no megabyte strings")
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    rules: collections.Counter = collections.Counter()
    untyped, cpu_s, base_s, sizes, heads = [], [], [], [], []
    for i, (family, size, text) in enumerate(answers(args.seed, args.count, big=not args.small)):
        start = time.process_time()
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            pass
        base_s.append(time.process_time() - start)
        start = time.process_time()
        try:
            parse_answer(family, size, text)
            rules["(plan)"] += 1
        except ParseError as exc:
            rules[exc.rule] += 1
        except Exception as exc:  # noqa: BLE001 - counted, that is the point
            untyped.append((i, family, type(exc).__name__, str(exc)[:80]))
        cpu_s.append(time.process_time() - start)
        sizes.append(len(text))
        heads.append(f"{family}: {text[:60]!r}")
    order = sorted(range(len(cpu_s)), key=cpu_s.__getitem__)
    worst = order[-1]
    print(f"answers: {len(cpu_s)} (seed {args.seed}), {sum(sizes) / 1e6:.1f} M characters, longest {max(sizes)}")
    print(
        f"untyped exceptions: {len(untyped)}; internal parser errors: {rules['internal']}; "
        f"answers over 1 s CPU: {sum(t > 1.0 for t in cpu_s)}"
    )
    print(
        f"parse CPU per answer: median {statistics.median(cpu_s) * 1e3:.2f} ms, "
        f"p99 {cpu_s[order[int(0.99 * (len(order) - 1))]] * 1e3:.1f} ms, max {cpu_s[worst] * 1e3:.0f} ms "
        f"({sizes[worst]} characters: {1e6 * cpu_s[worst] / max(1, sizes[worst]):.2f} us/char; {heads[worst]})"
    )
    print(
        f"baseline json.loads per answer: median {statistics.median(base_s) * 1e3:.3f} ms, max {max(base_s) * 1e3:.1f} ms"
    )
    print("outcomes:", ", ".join(f"{k} {v}" for k, v in rules.most_common()))
    for entry in untyped[:10]:
        print("UNTYPED", entry)
    return 1 if untyped or any(t > 1.0 for t in cpu_s) else 0


if __name__ == "__main__":
    sys.exit(main())
