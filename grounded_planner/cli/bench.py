"""`grounded-planner bench score|run|report`: GroundedPlanBench-style scoring, batch planning and HTML reports."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grounded_planner.bench.episodes import EpisodeError, load_episodes, load_predictions
from grounded_planner.bench.report import diagnose, write_report
from grounded_planner.bench.runner import run_bench
from grounded_planner.bench.scoring import score, score_episodes
from grounded_planner.bench.table import format_tables
from grounded_planner.cli.main import CliError, add_command
from grounded_planner.cli.planner_args import add_planner_arguments, planner_config_from_args
from grounded_planner.rollout.stats import mcnemar_exact
from grounded_planner.vlm.backends.pool import served_line, server_counts
from grounded_planner.vlm.errors import VLMError
from grounded_planner.vlm.factory import make_planner


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = add_command(
        subparsers,
        "bench",
        description="GroundedPlanBench-style evaluation: TSR/ARR scoring (Table I layout), "
        "batch planning over an episode set, self-contained HTML reports.",
    )
    sub = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    bench.set_defaults(func=lambda args: _usage(bench))

    score = sub.add_parser("score", help="score predictions against ground-truth episodes")
    score.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    score.add_argument(
        "--predictions",
        required=True,
        nargs="+",
        metavar="PREDICTIONS",
        help="predictions JSONL ({id, plan, error} a line); several files give one table row each "
        "and a paired test (exact McNemar on TSR) of the first against each other",
    )
    score.add_argument(
        "--json", action="store_true", help="print exactly one JSON object instead of the table (one predictions file)"
    )
    score.add_argument(
        "--per-episode",
        metavar="PATH",
        help="also write one JSON line per episode (success, ARR, precision, failure reasons) for the "
        "first predictions file",
    )
    score.set_defaults(func=_score)

    run = sub.add_parser(
        "run",
        help="run the planner on every episode and append predictions (resumable)",
        description="Plan every episode with the VLM planner and append {id, plan, error} lines to "
        "--out. Ids already there are skipped, so an interrupted run resumes; with a "
        "--cache-dir a repeated run sends no requests. Planner defaults come from the "
        "GP_VLM_* environment variables, then --config, then the flags.",
    )
    run.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    run.add_argument("--out", required=True, help="predictions JSONL to append to; ids already there are skipped")
    add_planner_arguments(run)
    run.add_argument("--concurrency", type=int, default=4, help="episodes in flight at once (default 4)")
    run.add_argument("--retry-errors", action="store_true", help="also re-run episodes whose last record is an error")
    run.add_argument("--limit", type=int, default=None, help="plan at most this many new episodes")
    run.set_defaults(func=_run)

    report = sub.add_parser("report", help="write a self-contained HTML report (table, overlays, failure reasons)")
    report.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    report.add_argument("--predictions", required=True, help="predictions JSONL")
    report.add_argument("--out", required=True, help="HTML file to write")
    report.add_argument("--title", default=None, help="report title (default: the predictions file name)")
    report.add_argument("--failures-only", action="store_true", help="leave successful episodes' cards out")
    report.add_argument(
        "--image-max-side",
        type=int,
        default=640,
        help="shrink larger images to this many pixels (JPEG) in the report; 0 = embed as is",
    )
    report.set_defaults(func=_report)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _load(episodes_path: str, predictions_path: str):
    try:
        episodes, predictions = load_episodes(episodes_path), load_predictions(predictions_path)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    _warn_duplicates(predictions_path, predictions)
    return episodes, predictions


def _warn_duplicates(label: str, predictions) -> None:
    """A repeated prediction id is scored by its last line: say so, never silently."""
    for ep_id, wheres in predictions.duplicates.items():
        print(
            f"warning: {label}: prediction id {ep_id!r} appears {len(wheres)} times ({', '.join(wheres)}); "
            "the last one is scored",
            file=sys.stderr,
        )


def _score(args: argparse.Namespace) -> int:
    if args.json and len(args.predictions) != 1:
        raise CliError(f"--json scores one predictions file, got {len(args.predictions)}")
    labels = [Path(p).stem for p in args.predictions]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in args.predictions]
    try:
        episodes = load_episodes(args.episodes)
        prediction_sets = [load_predictions(p) for p in args.predictions]
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    results = []
    for label, predictions in zip(labels, prediction_sets):
        result = score(episodes, predictions)
        overall = result["overall"]
        if overall["missing_predictions"]:
            print(
                f"warning: {label}: {overall['missing_predictions']} episode(s) have no prediction; scored as "
                "null plans",
                file=sys.stderr,
            )
        if overall["unknown_predictions"]:
            print(
                f"warning: {label}: {overall['unknown_predictions']} prediction id(s) name no episode in "
                f"{args.episodes}; ignored",
                file=sys.stderr,
            )
        results.append((label, result))
    for label, predictions in zip(labels, prediction_sets):
        _warn_duplicates(label, predictions)
    if args.per_episode:
        _write_per_episode(args.per_episode, episodes, prediction_sets[0])
    if args.json:
        print(json.dumps(results[0][1]))
        return 0
    print(format_tables(results))
    if len(prediction_sets) > 1:
        base = [s.success for s in score_episodes(episodes, prediction_sets[0])]
        print("")
        for label, predictions in zip(labels[1:], prediction_sets[1:]):
            other = [s.success for s in score_episodes(episodes, predictions)]
            a_only = sum(1 for a, b in zip(base, other) if a and not b)
            b_only = sum(1 for a, b in zip(base, other) if b and not a)
            print(
                f"{labels[0]} vs {label}: task success on the same {len(episodes)} episodes differs in "
                f"{a_only + b_only} ({labels[0]} only {a_only}, {label} only {b_only}); "
                f"exact McNemar p = {mcnemar_exact(a_only, b_only):.3g}"
            )
    return 0


def _write_per_episode(path: str, episodes, predictions) -> None:
    lines = []
    for episode in episodes:
        d = diagnose(episode, predictions.get(episode.id))
        lines.append(
            json.dumps(
                {
                    "id": episode.id,
                    "group": episode.group,
                    "success": d.score.success,
                    "arr": 100.0 * d.score.arr,
                    "precision": 100.0 * d.score.precision,
                    "gt_actions": d.score.gt_actions,
                    "pred_actions": d.score.pred_actions,
                    "matched_actions": d.score.matched_actions,
                    "failures": d.categories,
                    "reasons": [text for _, text in d.reasons],
                },
                ensure_ascii=False,
            )
        )
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise CliError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    try:
        episodes = load_episodes(args.episodes)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    config = planner_config_from_args(args)
    try:
        planner = make_planner(config)
    except (VLMError, ValueError, ImportError) as exc:
        raise CliError(f"cannot build the planner: {exc}") from None
    first_error: list[str] = []

    def remember(record: dict) -> None:
        if record["error"] and not first_error:
            first_error.append(record["error"])

    try:
        with planner:
            summary = run_bench(
                episodes,
                planner,
                args.out,
                concurrency=args.concurrency,
                retry_errors=args.retry_errors,
                limit=args.limit,
                on_record=remember,
            )
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    servers = server_counts(planner)
    print(json.dumps({"out": str(args.out), **summary.to_dict(), **({"servers": servers} if servers else {})}))
    if servers:
        print(served_line(servers), file=sys.stderr)
    if summary.failed and not summary.done:
        raise CliError(f"all {summary.failed} episode(s) failed; first error: {first_error[0]}", 3)
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.image_max_side < 0:
        raise CliError(f"--image-max-side must be >= 0 pixels (0 = embed as is), got {args.image_max_side}")
    episodes, predictions = _load(args.episodes, args.predictions)
    try:
        out = write_report(
            episodes,
            predictions,
            args.out,
            title=args.title or f"GroundedPlanBench: {Path(args.predictions).name}",
            image_max_side_px=args.image_max_side,
            failures_only=args.failures_only,
        )
    except OSError as exc:
        raise CliError(f"cannot write report {args.out}: {exc.strerror}") from None
    print(out)
    return 0
