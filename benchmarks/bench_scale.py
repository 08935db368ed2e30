"""Scale-out: V2GP episodes/s local (threads) vs Ray (actors) next to the stage-1 + video-decode limit measured
alone, and `bench run` throughput over K stand-in model servers against the N·L/(K·C) ideal (one killed mid-run).

Run: .venv/bin/python benchmarks/bench_scale.py [--episodes 16] [--workers 2] [--bench-episodes 48]
Needs the scale extra (ray). The model servers are the vlm layer's stand-in (fixed latency L, C answers at once).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import signal
import tempfile
import time
from contextlib import redirect_stderr
from pathlib import Path

from grounded_planner.bench.episodes import load_episodes, load_predictions
from grounded_planner.bench.runner import run_bench
from grounded_planner.bench.sample import BROWN, GREY, RED
from grounded_planner.v2gp.config import V2GPConfig
from grounded_planner.v2gp.dataset import open_dataset
from grounded_planner.v2gp.pipeline import run_pipeline
from grounded_planner.v2gp.segment import segment
from grounded_planner.v2gp.synthetic import SyntheticConfig, write_synthetic_dataset
from grounded_planner.vlm.backends.pool import server_counts
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.fake_server import start_process
from grounded_planner.vlm.factory import make_planner

ROOT = Path(__file__).resolve().parents[1]
SCENE = {"red cup": RED, "bin": GREY, "drawer": BROWN}
GRIPPER = "observation.state[gripper]"


def stage1_decode_alone(dataset: Path, indices: list[int], config: V2GPConfig) -> float:
    """Seconds per episode for what no executor can avoid: open, decode the frames stages 2-4 read, segment."""
    ds = open_dataset(dataset, gripper=config.gripper)
    t0 = time.perf_counter()
    for i in indices:
        episode = ds.episode(i)
        result = segment(episode.gripper, episode.frame_indices, config.segment_config())
        frames = {0} | {f for s in result.segments for f in (s.start, s.end)}
        for f in sorted(frames):
            episode.frame(min(f, episode.length - 1))
    return (time.perf_counter() - t0) / len(indices)


def v2gp_part(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    dataset = write_synthetic_dataset(tmp / "ds", SyntheticConfig(episodes=args.episodes, video=True), "v3.0")
    config = V2GPConfig(gripper=GRIPPER, identifier="oracle", grounder="oracle", implicit=False, workers=args.workers)
    indices = list(range(args.episodes))
    per_episode = stage1_decode_alone(dataset, indices, config)
    limit = min(args.workers, os.cpu_count() or 1) / per_episode
    print(f"\nV2GP on {args.episodes} synthetic MP4 episodes (oracle stages 2-3: CPU-bound), {args.workers} workers")
    print(
        f"  stage 1 + video decode alone: {per_episode * 1000:.0f} ms/episode -> limit {limit:.2f} episodes/s "
        f"on {min(args.workers, os.cpu_count() or 1)} cores"
    )
    runs = {}
    for executor in ("local", "ray"):
        out = tmp / f"out_{executor}"
        t0 = time.perf_counter()
        with redirect_stderr(io.StringIO()):
            summary = run_pipeline(dataset, out, V2GPConfig(**{**config.__dict__, "executor": executor}))
        wall = time.perf_counter() - t0
        assert not summary.failed_episodes, summary.failed_episodes
        runs[executor] = (wall, out)
    # Ray's fixed cost (cluster + actor start) measured alone, on one episode
    t0 = time.perf_counter()
    with redirect_stderr(io.StringIO()):
        run_pipeline(dataset, tmp / "out_ray_one", V2GPConfig(**{**config.__dict__, "executor": "ray"}), episodes=[0])
    ray_fixed = time.perf_counter() - t0
    same = all(
        (runs["local"][1] / rel).read_bytes() == (runs["ray"][1] / rel).read_bytes()
        for rel in ["train.jsonl", *(p.relative_to(runs["local"][1]) for p in (runs["local"][1] / "plans").glob("*"))]
    )
    local_wall, ray_wall = runs["local"][0], runs["ray"][0]
    print(f"  local (threads): {local_wall:.1f} s = {args.episodes / local_wall:.2f} episodes/s")
    print(
        f"  ray (actors):    {ray_wall:.1f} s = {args.episodes / ray_wall:.2f} episodes/s "
        f"(cluster + actor start, one episode alone: {ray_fixed:.1f} s; without it: "
        f"{args.episodes / max(1e-3, ray_wall - ray_fixed):.2f} episodes/s)"
    )
    print(f"  outputs byte-identical: {same}")


def bench_episodes(tmp: Path, n: int) -> list:
    sample = ROOT / "data" / "sample_bench"
    records = {
        json.loads(line)["id"]: json.loads(line) for line in (sample / "episodes.jsonl").read_text().splitlines()
    }
    lines = []
    for k in range(n):
        r = dict(records["ep-01" if k % 2 == 0 else "ep-12"], id=f"ep-{k:03d}")
        r["image"] = str(sample / r["image"])
        lines.append(json.dumps(r))
    path = tmp / "episodes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return load_episodes(path)


def bench_part(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_scale_run_"))
    episodes = bench_episodes(tmp, args.bench_episodes)
    n, latency, capacity = len(episodes), args.latency, args.capacity
    print(f"\nbench run: {n} episodes, stand-in servers of latency L={latency:.2f} s serving C={capacity} at once")
    print(f"  {'servers':<28} {'ideal N·L/(K·C)':>16} {'measured':>9} {'ratio':>6}  served per server")
    for label, k, kill_after in (("K=1", 1, None), ("K=2", 2, None), ("K=2, one killed at N/2", 2, n // 2)):
        procs = [start_process(SCENE, latency, capacity) for _ in range(k)]
        try:
            config = PlannerConfig(
                backend="openai", model="gpt-stand-in", base_url=procs[0][1], base_urls=[u for _, u in procs[1:]]
            )
            out = tmp / f"pred_{k}_{kill_after}.jsonl"
            killed = []

            def on_record(_record, out=out, procs=procs, killed=killed, kill_after=kill_after):
                if kill_after is not None and not killed and len(out.read_text().splitlines()) >= kill_after:
                    procs[0][0].send_signal(signal.SIGKILL)
                    killed.append(True)

            with make_planner(config) as planner:
                t0 = time.perf_counter()
                summary = run_bench(
                    episodes,
                    planner,
                    out,
                    concurrency=2 * k * capacity,
                    on_record=on_record,
                    progress_stream=io.StringIO(),
                )
                wall = time.perf_counter() - t0
                served = server_counts(planner)
        finally:
            for p, _ in procs:
                p.kill()
                p.wait()
        planned = sum(1 for p in load_predictions(out).values() if p.plan is not None and not p.error)
        assert planned == n and summary.failed == 0, (planned, summary)
        ideal = n * latency / (k * capacity)
        if kill_after is not None:  # the first kill_after on K servers, the rest on K - 1
            ideal = kill_after * latency / (k * capacity) + (n - kill_after) * latency / ((k - 1) * capacity)
        counts = ", ".join(
            f":{url.split(':')[2].split('/')[0]} {c['served']}" + (f" ({c['failed']} failed)" if c["failed"] else "")
            for url, c in served.items()
        )
        print(f"  {label:<28} {ideal:>14.2f} s {wall:>7.2f} s {wall / ideal:>6.2f}  {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16, help="V2GP synthetic episodes")
    parser.add_argument("--workers", type=int, default=2, help="threads (local) and actors (ray)")
    parser.add_argument("--bench-episodes", type=int, default=48)
    parser.add_argument("--latency", type=float, default=0.5, help="stand-in server latency, s")
    parser.add_argument("--capacity", type=int, default=2, help="answers a stand-in server computes at once")
    parser.add_argument("--skip-v2gp", action="store_true")
    args = parser.parse_args()
    logging.getLogger("grounded_planner.vlm.backends.pool").setLevel(logging.ERROR)  # failover lines: counted below
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    bench_part(args)
    if not args.skip_v2gp:
        v2gp_part(args)


if __name__ == "__main__":
    main()
