"""`grounded-planner bench score|run|report`: GroundedPlanBench-style scoring, batch planning and HTML reports."""

from __future__ import annotations

import argparse
import json
import sys

from grounded_planner.cli.main import CliError


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="score, run and report GroundedPlanBench-style episodes",
                                  description="GroundedPlanBench-style evaluation: TSR/ARR scoring (Table I layout), "
                                              "batch planning over an episode set, self-contained HTML reports.")
    sub = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    bench.set_defaults(func=lambda args: _usage(bench))

    score = sub.add_parser("score", help="score predictions against ground-truth episodes")
    score.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    score.add_argument("--predictions", required=True, help="predictions JSONL ({id, plan, error} a line)")
    score.add_argument("--json", action="store_true", help="print exactly one JSON object instead of the table")
    score.set_defaults(func=_score)

    run = sub.add_parser("run", help="run the planner on every episode and append predictions (resumable)")
    run.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    run.add_argument("--out", required=True, help="predictions JSONL to append to; ids already there are skipped")
    run.add_argument("--config", help="planner config YAML (the vlm layer's PlannerConfig fields); flags override it")
    run.add_argument("--backend", help="planner backend (e.g. openai, replay)")
    run.add_argument("--model", help="model name sent to the backend")
    run.add_argument("--base-url", help="base URL of an OpenAI-compatible server")
    run.add_argument("--mode", choices=("grounded", "decoupled"), default=None,
                     help="grounded: the VLM answers boxes and points; decoupled: it plans in words, a grounder adds them")
    run.add_argument("--cache-dir", help="response cache folder (a re-run with the same requests is free)")
    run.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default 4)")
    run.add_argument("--retry-errors", action="store_true", help="also re-run episodes whose earlier record is an error")
    run.add_argument("--limit", type=int, default=None, help="run at most this many new episodes")
    run.set_defaults(func=_run)

    report = sub.add_parser("report", help="write a self-contained HTML report (table, overlays, failure reasons)")
    report.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    report.add_argument("--predictions", required=True, help="predictions JSONL")
    report.add_argument("--out", required=True, help="HTML file to write")
    report.add_argument("--title", default=None, help="report title (default: the predictions file name)")
    report.set_defaults(func=_report)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _load(args: argparse.Namespace):
    from grounded_planner.bench.episodes import EpisodeError, load_episodes, load_predictions

    try:
        episodes = load_episodes(args.episodes)
        predictions = load_predictions(args.predictions)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    return episodes, predictions


def _score(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grounded_planner.bench.scoring import score
    from grounded_planner.bench.table import format_table

    episodes, predictions = _load(args)
    result = score(episodes, predictions)
    overall = result["overall"]
    if overall["missing_predictions"]:
        print(f"warning: {overall['missing_predictions']} episode(s) have no prediction; scored as null plans",
              file=sys.stderr)
    if overall["unknown_predictions"]:
        print(f"warning: {overall['unknown_predictions']} prediction id(s) name no episode in {args.episodes}; ignored",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result, label=Path(args.predictions).stem))
    return 0


def _run(args: argparse.Namespace) -> int:
    raise CliError("bench run is not available yet", 3)


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grounded_planner.bench.report import write_report

    episodes, predictions = _load(args)
    try:
        out = write_report(episodes, predictions, args.out, title=args.title or f"GroundedPlanBench: {Path(args.predictions).name}")
    except OSError as exc:
        raise CliError(f"cannot write report {args.out}: {exc.strerror}") from None
    print(out)
    return 0
