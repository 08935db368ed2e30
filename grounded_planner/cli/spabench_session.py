"""`grounded-planner spabench session DIR`: a cards folder run in order on the live ROS graph, the operator staging
each scene and confirming each outcome; stoppable at any prompt, resumed by running it again."""

from __future__ import annotations

import argparse
import sys

from grounded_planner.cli.main import CliError
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.session import Session, TerminalOperator, load_cards


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the scene cards of DIR (DIR/cards.jsonl, from "
        "`spabench cards`) in order on the running graph (bringup or launch): the plan "
        "service plans each instruction from the camera, the execute action runs it "
        "(approval as the executor is configured), a rollout is recorded under "
        "DIR/rollouts/, and you confirm outcome and failure mode; each trial is appended "
        "to DIR/trials.jsonl (`spabench report DIR` reads it). Stop at any prompt with "
        "q; run it again to resume.",
    )
    parser.add_argument("dir", metavar="DIR", help="a `spabench cards` folder")
    parser.add_argument(
        "--planner",
        default="",
        help="the planner's name in the trial records (e.g. the model); default: the cards' planner field or ''",
    )
    parser.add_argument("--plan-timeout", type=float, default=120.0, help="seconds to wait for a plan (default 120)")
    parser.add_argument(
        "--execute-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for an execution, approval included (default 600)",
    )
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        cards = len(load_cards(args.dir))
    except SpaBenchError as exc:
        raise CliError(str(exc)) from None
    if cards == 0:
        raise CliError(f"{args.dir}: cards.jsonl has no cards")
    try:
        # lazy: a ROS command; the CLI runs without rclpy
        from grounded_planner.ros.spabench_stack import live_stack
    except ImportError as exc:
        raise CliError(f"spabench session needs rclpy (a ROS 2 install or the ros extra): {exc}") from None
    with live_stack(plan_timeout_s=args.plan_timeout, execute_timeout_s=args.execute_timeout) as stack:
        try:
            summary = Session(args.dir, stack, TerminalOperator(out=sys.stderr), planner=args.planner).run()
        except SpaBenchError as exc:
            raise CliError(str(exc)) from None
        except EOFError:
            raise CliError("stdin closed: the session stopped (run it again to resume)", code=1) from None
    print(
        f"spabench session: {len(summary.recorded)} trial(s) recorded, {len(summary.skipped)} skipped, "
        f"{summary.remaining} left{' (stopped)' if summary.stopped else ''}",
        file=sys.stderr,
    )
    return 0
