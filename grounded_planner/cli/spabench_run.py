"""`grounded-planner spabench run ...`: Spa-Bench trials in the simulator, one rollout each, then the report."""

from __future__ import annotations

import argparse
import os
import sys

from grounded_planner.cli.main import CliError
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.report import build_report, format_report, report_json
from grounded_planner.spabench.cards import trial_keys
from grounded_planner.spabench.runner import EXECUTORS, PLANNERS, RunOptions, parse_names, run_trials
from grounded_planner.spabench.trial import CONDITIONS, ROBOTS, TASKS

# the Ray executor of `v2gp run` (actors, crash handling); it imports Ray (the `scale` extra) only when called
from grounded_planner.v2gp.ray_executor import run_on_ray


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run Spa-Bench trials in the simulator: each trial is "
        "rendered, planned, back-projected from the rendered depth, executed, scored by "
        "Table I and labelled with a failure mode; one rollout per trial under "
        "OUT/rollouts/, one line per trial in OUT/trials.jsonl (resumable: trials "
        "already there are skipped). Progress on stderr; the report on stdout.",
    )
    parser.add_argument("--tasks", help=f"comma-separated tasks (default all): {', '.join(TASKS)}")
    parser.add_argument(
        "--conditions",
        help=f"comma-separated conditions (default all; a condition a task does not "
        f"have is skipped): {', '.join(CONDITIONS)}",
    )
    parser.add_argument("--trials", type=int, default=2, help="seeds per task and condition (default 2)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--robot", choices=ROBOTS, default="so101", help="arm model (default so101)")
    parser.add_argument(
        "--planner",
        choices=PLANNERS,
        default="gt",
        help="gt: the oracle (the scene's true plan); blind: picks uniformly among the named category "
        "and ignores the spatial qualifier; openai | gemini | transformers: the planner_node's "
        "VLM planner (GP_VLM_* environment as for the node); replay: recorded plans (--model "
        "FILE.jsonl). Default gt",
    )
    parser.add_argument("--base-url", default="", help="model server root incl. /v1 (openai backend)")
    parser.add_argument("--model", default="", help="model name / Gemini id / local path; replay: the plans JSONL")
    parser.add_argument(
        "--closed-loop",
        action="store_true",
        help="check every step and re-ground or replan with the VLM (the executor config's "
        "closed_loop budgets); needs a VLM planner",
    )
    parser.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local (default; --workers processes) or ray (a local Ray cluster of --workers CPUs, or "
        "--ray-address); both write the same trials.jsonl",
    )
    parser.add_argument("--ray-address", default="", help="join this Ray cluster (with --executor ray)")
    parser.add_argument("--out", required=True, help="the run folder (trials.jsonl, rollouts/)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        tasks = parse_names(args.tasks, TASKS, "--tasks")
        conditions = parse_names(args.conditions, CONDITIONS, "--conditions")
        keys = trial_keys(tasks, conditions, args.trials, args.first_seed)
        if not keys:
            raise CliError(
                f"no trials: none of --tasks {','.join(tasks)} has any of --conditions {','.join(conditions)}"
            )
        if args.ray_address and args.executor != "ray":
            raise CliError("--ray-address needs --executor ray")
        cores = os.cpu_count() or 1
        if args.workers > cores:
            print(f"spabench: --workers {args.workers} is more than the {cores} cores here", file=sys.stderr)
        options = RunOptions(
            out=args.out,
            robot=args.robot,
            planner=args.planner,
            base_url=args.base_url,
            model=args.model,
            closed_loop=args.closed_loop,
        )
        if options.planner in ("openai", "gemini", "transformers", "replay"):
            options.planner_config()  # a bad planner configuration is refused before the first trial
        records = run_trials(
            options,
            keys,
            workers=args.workers,
            executor=args.executor,
            ray_address=args.ray_address,
            progress=sys.stderr,
            ray_runner=run_on_ray,
        )
        report = build_report(records, source=args.out)
    except SpaBenchError as exc:
        raise CliError(str(exc)) from None
    print(report_json(report) if args.json else format_report(report), end="\n" if args.json else "")
    return 0
