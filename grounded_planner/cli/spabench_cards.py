"""`grounded-planner spabench cards [--tasks T,...] [--conditions C,...] [--trials N] [--first-seed S] --robot R
--out DIR`: scene cards (PNG per trial, a printable HTML sheet, cards.jsonl) to stage Spa-Bench trials on a real arm."""

from __future__ import annotations

import argparse
import sys

from grounded_planner.cli.main import CliError
from grounded_planner.spabench.cards import trial_keys, write_cards
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.trial import CONDITIONS, ROBOTS, TASKS


def _names(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise CliError(
            f"--{what}: unknown {what[:-1]} {bad[0] if bad else value!r} (expected some of {', '.join(allowed)})"
        )
    return names


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write one scene card per trial: a top-down layout with "
        "object positions in cm on a grid aligned with the robot base, the instruction "
        "to give and what counts as success; DIR/cards/*.png, the printable sheet "
        "DIR/cards.html and DIR/cards.jsonl (read by `spabench session DIR`).",
    )
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help=f"comma-separated tasks (default: all: {', '.join(TASKS)})"
    )
    parser.add_argument(
        "--conditions", default=",".join(CONDITIONS), help="comma-separated conditions (default: all a task has)"
    )
    parser.add_argument("--trials", type=int, default=5, help="trials per task and condition (default 5)")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first trial (default 0)")
    parser.add_argument(
        "--robot", choices=ROBOTS, default="so101", help="the arm the scenes are sized for (default so101)"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="the cards folder to write")
    return parser


def main(args: argparse.Namespace) -> int:
    tasks = _names(args.tasks, TASKS, "tasks")
    conditions = _names(args.conditions, CONDITIONS, "conditions")
    try:
        keys = trial_keys(tasks, conditions, args.trials, args.first_seed)
        if not keys:
            raise CliError(f"no trials: none of {', '.join(tasks)} has the conditions {', '.join(conditions)}")
        records = write_cards(keys, args.robot, args.out)
    except SpaBenchError as exc:
        raise CliError(str(exc)) from None
    print(
        f"wrote {len(records)} cards to {args.out} (cards.html to print, cards.jsonl for `spabench session`)",
        file=sys.stderr,
    )
    return 0
