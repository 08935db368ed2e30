"""`grounded-planner spabench demos [--tasks T,...] --episodes N --robot R --out DIR`: the oracle's executions of
`id` trials in the simulator as a LeRobotDataset (V2GP demonstrations for the observed cells)."""

from __future__ import annotations

import argparse
import json
import sys

from grounded_planner.cli.main import CliError
from grounded_planner.cli.spabench_cards import _names
from grounded_planner.spabench.demos import write_demos
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.trial import ROBOTS, TASKS


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Script the oracle's executions of id trials (the "
        "matrices' observed cells) in the simulator and write them as a LeRobotDataset "
        "with LeRobot's own writer: the instruction as the task, a camera stream, the "
        "joints in degrees and gripper.pos (0 closed .. 100 open). `v2gp run` turns it "
        "into grounded-plan training data.",
    )
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks (default: all)")
    parser.add_argument("--episodes", type=int, required=True, help="successful episodes per task")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first id trial tried (default 0)")
    parser.add_argument("--robot", choices=ROBOTS, default="so101", help="the simulated arm (default so101)")
    parser.add_argument("--fps", type=int, default=10, help="frames per second of sim time (default 10)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the dataset folder to create (must not exist)")
    return parser


def main(args: argparse.Namespace) -> int:
    tasks = _names(args.tasks, TASKS, "tasks")
    try:
        report = write_demos(tasks, args.episodes, args.robot, args.out, first_seed=args.first_seed, fps=args.fps)
    except SpaBenchError as exc:
        raise CliError(str(exc)) from None
    for item in report["skipped"]:
        print(f"warning: {item['trial_id']} left out: {item['why']}", file=sys.stderr)
    print(json.dumps(report))
    return 0
